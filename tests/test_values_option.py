"""The `values` option: fixing a graph input to the value a deployment always feeds it, from TOML, flags and
the API; an If the value decides folds to its branch, and an If chosen at run time gives what its branches give.

The models are small graphs written with onnx.helper, checked against onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import loam
from loam.core.errors import OptionsError, UnsupportedError
from loam.dialects import build_contract as contract
from loam.driver.options import Options
from loam.frontends.context import parse_ir
from loam.testing import assert_same, build_for, forward_inputs, run_built, run_onnxruntime
from loam.tools import loam_main
from loam.tools.loam_main import value_flag

F = TensorProto.FLOAT


def _model(nodes: list[onnx.NodeProto], inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _branch(name: str, nodes: list[onnx.NodeProto], out: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, F, None)])


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def sample_rate_model(else_rank: int = 2) -> onnx.ModelProto:
    """Silero VAD's shape: `sr == 16000` picks the branch; then Add(x, x), else Neg(x) (or, with `else_rank`
    3, Unsqueeze(x) on axis 0) over x [N, 4]."""
    then = _branch("then", [helper.make_node("Add", ["x", "x"], ["t"], name="then_add")], "t")
    if else_rank == 3:
        other = _branch("else", [helper.make_node("Unsqueeze", ["x", "axis0"], ["e"], name="else_unsqueeze")], "e")
    else:
        other = _branch("else", [helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "e")
    nodes = [
        helper.make_node("Equal", ["sr", "k16"], ["c"], name="is_16k"),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="/model/decoder/If"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", F, ["N", 4]),
        helper.make_tensor_value_info("sr", TensorProto.INT64, []),
    ]
    inits = [numpy_helper.from_array(np.array(16000, dtype=np.int64), "k16"), _ints("axis0", [0])]
    return _model(nodes, inputs, [helper.make_tensor_value_info("y", F, None)], inits)


def shape_model() -> onnx.ModelProto:
    """An If over `Shape(x)[0] == 4`: then Unsqueeze(x), else x; the condition reads x's extent only."""
    then = _branch("then", [helper.make_node("Unsqueeze", ["x", "axis0"], ["t"], name="then_unsqueeze")], "t")
    other = _branch("else", [helper.make_node("Identity", ["x"], ["e"], name="else_id")], "e")
    nodes = [
        helper.make_node("Shape", ["x"], ["rows"], start=0, end=1, name="rows"),
        helper.make_node("Equal", ["rows", "four"], ["c1"], name="is_four"),
        helper.make_node("Squeeze", ["c1"], ["c"], name="one"),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="by_rows"),
    ]
    inputs = [helper.make_tensor_value_info("x", F, ["N", 4])]
    return _model(
        nodes, inputs, [helper.make_tensor_value_info("y", F, None)], [_ints("four", [4]), _ints("axis0", [0])]
    )


def rank_model() -> onnx.ModelProto:
    """c picks the branch: then the first two columns of x [N, 4], else x; after the If, y's row sums are
    added to every column of y (both read the length the branch gave)."""
    then = _branch("then", [helper.make_node("Slice", ["x", "zero", "two", "one"], ["t"], name="then_slice")], "t")
    other = _branch("else", [helper.make_node("Identity", ["x"], ["e"], name="else_id")], "e")
    nodes = [
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="pick"),
        helper.make_node("ReduceSum", ["y", "one"], ["s"], keepdims=1, name="row_sums"),
        helper.make_node("Add", ["y", "s"], ["z"], name="add_sums"),
    ]
    inputs = [helper.make_tensor_value_info("x", F, ["N", 4]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])]
    outputs = [helper.make_tensor_value_info("z", F, None), helper.make_tensor_value_info("s", F, None)]
    return _model(nodes, inputs, outputs, [_ints("zero", [0]), _ints("two", [2]), _ints("one", [1])])


def axes_model(axes_count: int = 1, axes_dims: list[int | str] | None = None) -> onnx.ModelProto:
    """ReduceSum of x [2, 3, 4] over axes fed as a graph input."""
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1, name="r")]
    inputs = [
        helper.make_tensor_value_info("x", F, [2, 3, 4]),
        helper.make_tensor_value_info("axes", TensorProto.INT64, axes_dims or [axes_count]),
    ]
    return _model(nodes, inputs, [helper.make_tensor_value_info("y", F, None)])


def cast_model(elem: int) -> onnx.ModelProto:
    """x [2, 3] plus an input v [1] of element type `elem` cast to float."""
    nodes = [
        helper.make_node("Cast", ["v"], ["vf"], to=F, name="cast_v"),
        helper.make_node("Add", ["x", "vf"], ["y"], name="add_v"),
    ]
    inputs = [helper.make_tensor_value_info("x", F, [2, 3]), helper.make_tensor_value_info("v", elem, [1])]
    return _model(nodes, inputs, [helper.make_tensor_value_info("y", F, [2, 3])])


# -- the option's form ---------------------------------------------------------------------------------


def test_the_toml_table_reads_booleans_integers_floats_and_lists(tmp_path: Path) -> None:
    toml = tmp_path / "loam.toml"
    toml.write_text("[values]\nsr = 16000\nscale = 0.5\nflag = true\naxes = [0, -1]\n", encoding="utf-8")
    options = Options.from_toml(toml)
    assert dict(options.values) == {"sr": 16000, "scale": 0.5, "flag": True, "axes": (0, -1)}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('sr = "16000"', r"\[values\]: value of 'sr' must be a boolean, an integer, a float or a list of integers"),
        ("axes = [0, 1.5]", r"value of 'axes' must be a list of int64 integers, got a float \(1.5\)"),
        ("axes = [true]", r"value of 'axes' must be a list of int64 integers, got a boolean"),
        ("big = 9223372036854775808", r"value of 'big' is 9223372036854775808, outside int64"),
        ("x = nan", r"value of 'x' is nan; give a finite number"),
    ],
)
def test_a_malformed_entry_is_refused_naming_it(tmp_path: Path, table: str, message: str) -> None:
    toml = tmp_path / "loam.toml"
    toml.write_text(f"[values]\n{table}\n", encoding="utf-8")
    with pytest.raises(OptionsError, match=message):
        Options.from_toml(toml)


def test_values_must_be_a_table(tmp_path: Path) -> None:
    toml = tmp_path / "loam.toml"
    toml.write_text("values = 3\n", encoding="utf-8")
    with pytest.raises(OptionsError, match=r"key 'values' must be a table of input name = value"):
        Options.from_toml(toml)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("sr=16000", ("sr", 16000)),
        ("scale=-0.25", ("scale", -0.25)),
        ("flag=true", ("flag", True)),
        ("flag=false", ("flag", False)),
        ("axes=0,2", ("axes", (0, 2))),
        ("axes=[1]", ("axes", (1,))),
        ("axes=[]", ("axes", ())),
    ],
)
def test_the_flag_reads_each_kind_of_value(text: str, parsed: tuple[str, object]) -> None:
    assert value_flag(text) == parsed


@pytest.mark.parametrize("text", ["sr", "=1", "sr=", "sr=abc", "sr=nan", "axes=0,x", "flag=True"])
def test_a_malformed_flag_is_refused(text: str) -> None:
    with pytest.raises(Exception, match="expected NAME=V"):
        value_flag(text)


def test_flags_replace_the_files_entry_of_the_same_name() -> None:
    base = Options(values={"sr": 8000, "flag": True})
    assert dict(base.merged(values={"sr": 16000}).values) == {"sr": 16000, "flag": True}


def test_the_contract_carries_the_values_and_refuses_a_malformed_one() -> None:
    ir = parse_ir("builtin.module {}", "<test>")
    contract.VALUES.set(ir, {"sr": 16000, "scale": 0.1, "flag": False, "axes": (0, 2)})
    assert contract.VALUES.get(ir) == {"sr": 16000, "scale": 0.1, "flag": False, "axes": (0, 2)}
    reread = parse_ir(str(ir), "<printed>")
    assert contract.VALUES.get(reread) == {"sr": 16000, "scale": 0.1, "flag": False, "axes": (0, 2)}
    bad = parse_ir('builtin.module attributes {loam.values = {sr = "16000"}} {}', "<hand-edited>")
    with pytest.raises(UnsupportedError, match=r"loam.values is .* not a dictionary of graph input names"):
        contract.VALUES.get(bad)


# -- fixing an input -------------------------------------------------------------------------------------


def test_a_fixed_input_leaves_forward_and_a_note_says_so() -> None:
    result = build_for(sample_rate_model(), Options(values={"sr": 16000}))
    assert forward_inputs(result) == ["x"]
    assert "the `values` option fixes graph inputs, which forward no longer takes: 'sr' = 16000" in result.notes


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"rate": 16000}, r"values: the graph 'g' takes no input 'rate' \(it takes x, sr\)"),
        ({"sr": 16000.5}, r"values: graph input 'sr' is declared i64 \[\]; give it integers, not 16000.5"),
        ({"sr": True}, r"values: graph input 'sr' is declared i64 \[\]; give it integers, not True"),
        ({"sr": (1, 2)}, r"values: graph input 'sr' is declared i64 \[\], 1 elements; the option gives 2 values"),
    ],
)
def test_a_value_the_graph_refuses_names_the_option_and_the_input(values: dict[str, object], message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        loam.build(sample_rate_model(), options=Options(values=values))


@pytest.mark.parametrize(
    ("elem", "value", "message"),
    [
        (TensorProto.BOOL, 1, r"declared bool \[1\]; give it true or false, not 1"),
        (TensorProto.UINT8, 300, r"declared ui8 \[1\]; 300 lies outside \[0, 255\]"),
        (TensorProto.FLOAT, False, r"declared f32 \[1\]; give it a number, not False"),
    ],
)
def test_a_value_of_another_kind_is_refused(elem: int, value: object, message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        loam.build(cast_model(elem), options=Options(values={"v": value}))


@pytest.mark.parametrize(
    ("elem", "value"), [(TensorProto.BOOL, True), (TensorProto.UINT8, 200), (TensorProto.FLOAT, 3)]
)
def test_a_value_of_each_kind_is_the_inputs_value(elem: int, value: object) -> None:
    model = cast_model(elem)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    feeds = {"x": x, "v": np.array([value], dtype=helper.tensor_dtype_to_np_dtype(elem))}
    got = run_built(build_for(model, Options(values={"v": value})), feeds)
    assert_same(got[0], run_onnxruntime(model, feeds)[0])


def test_an_input_with_a_symbolic_extent_needs_dims_too() -> None:
    model = axes_model(axes_dims=["k"])
    with pytest.raises(OptionsError, match=r"graph input 'axes' is declared i64 \[k\]; fix k with the `dims` option"):
        loam.build(model, options=Options(values={"axes": (1,)}))
    feeds = {"x": np.ones((2, 3, 4), np.float32), "axes": np.array([1])}
    got = run_built(build_for(model, Options(values={"axes": (1,)}, dims={"k": 1})), feeds)
    assert_same(got[0], run_onnxruntime(model, feeds)[0])


# -- an axes operand fed as an input ----------------------------------------------------------------------


def test_a_run_time_axes_operand_is_refused_naming_the_option() -> None:
    refusal = r"ReduceSum node 'r': the axes input must be known at build time .*--value NAME=V or \[values\]"
    with pytest.raises(UnsupportedError, match=refusal):
        build_for(axes_model())


@pytest.mark.parametrize("axes", [(0,), (1, 2), (-1,)])
def test_a_fixed_axes_operand_builds_and_matches_onnxruntime(axes: tuple[int, ...]) -> None:
    model = axes_model(axes_count=len(axes))
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32), "axes": np.array(axes)}
    got = run_built(build_for(model, Options(values={"axes": axes})), feeds)
    assert_same(got[0], run_onnxruntime(model, feeds)[0], rtol=1e-6, atol=1e-6)


# -- If ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sr", [16000, 8000])
def test_an_if_the_value_decides_keeps_only_its_branch(sr: int) -> None:
    """sr picks the branch: 16 kHz doubles x, else negates it; the module computes the taken branch with no if."""
    model = sample_rate_model()
    result = build_for(model, Options(values={"sr": sr}))
    assert "if bool(" not in result.source
    assert ("then_add" in result.source) == (sr == 16000)
    assert ("else_neg" in result.source) == (sr != 16000)
    for n in (1, 5):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        want = run_onnxruntime(model, {"x": x, "sr": np.array(sr)})
        assert_same(run_built(result, {"x": x})[0], want[0])


@pytest.mark.parametrize("sr", [16000, 8000])
def test_branches_of_two_ranks_build_once_the_value_fixes_the_condition(sr: int) -> None:
    model = sample_rate_model(else_rank=3)
    result = build_for(model, Options(values={"sr": sr}))
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    got = run_built(result, {"x": x})[0]
    want = run_onnxruntime(model, {"x": x, "sr": np.array(sr)})[0]
    assert got.shape == want.shape == ((3, 4) if sr == 16000 else (1, 3, 4))
    assert_same(got, want)


def test_branches_of_two_ranks_chosen_at_run_time_are_refused_naming_the_inputs_to_fix() -> None:
    with pytest.raises(UnsupportedError) as info:
        build_for(sample_rate_model(else_rank=3))
    assert str(info.value) == (
        "If node '/model/decoder/If': output 'y' has rank 2 in the then branch and 3 in the else, and the condition "
        "is known only at run time; it is computed from graph input 'sr': fix it with --value sr=... (or [values])"
    )


def test_a_condition_read_from_extents_names_dims() -> None:
    refusal = r"is known only at run time; it reads the extents N: fix them with --dims N=\.\.\. \(or \[dims\]\)$"
    with pytest.raises(UnsupportedError, match=refusal):
        build_for(shape_model())


@pytest.mark.parametrize("flag", [True, False])
def test_a_condition_from_an_extent_the_dims_fix_folds_the_if(flag: bool) -> None:
    model = shape_model()
    rows = 4 if flag else 3
    result = build_for(model, Options(dims={"N": rows}))
    assert "if bool(" not in result.source
    x = np.random.default_rng(0).standard_normal((rows, 4)).astype(np.float32)
    assert_same(run_built(result, {"x": x})[0], run_onnxruntime(model, {"x": x})[0])


def test_branches_of_two_extents_chosen_at_run_time_run_the_branch_taken() -> None:
    """then: the first two columns of x [N, 4]; else: x.  A ReduceSum over that axis and an Add after the If read
    the length the run picks; both branches at several N match onnxruntime."""
    model = rank_model()
    result = build_for(model)
    assert "if bool(" in result.source
    for n in (1, 3, 6):
        for c in (True, False):
            feeds = {"x": np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32), "c": np.array(c)}
            got, want = run_built(result, feeds), run_onnxruntime(model, feeds)
            assert got[0].shape == want[0].shape == (n, 2 if c else 4)
            for g, w in zip(got, want, strict=True):
                assert_same(g, w, rtol=1e-6, atol=1e-6)


# -- the command line --------------------------------------------------------------------------------------


def test_loam_build_takes_value_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model_path = tmp_path / "model.onnx"
    model = sample_rate_model()
    onnx.save(model, model_path)
    layout = tmp_path / "layout.toml"
    with pytest.raises(SystemExit) as info:
        loam_main.main(["layout", str(model_path), "--value", "sr=8000", "-o", str(layout)])
    assert info.value.code in (0, None)
    out = tmp_path / "m.py"
    with pytest.raises(SystemExit) as info:
        loam_main.main(["build", str(model_path), "--options", str(layout), "--value", "sr=8000", "-o", str(out)])
    assert info.value.code in (0, None)
    assert "forward no longer takes: 'sr' = 8000" in capsys.readouterr().err
    from loam.testing import import_module_file

    module = import_module_file(out, "values_cli_module")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert_same(np.asarray(module.forward(module.Weights(), x)), -x)


def test_loam_build_help_explains_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        loam_main.main(["build", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--value NAME=V" in text and "[values]" in text and "forward no longer takes it" in text


def test_a_value_is_replayed_from_the_dumped_ir(tmp_path: Path) -> None:
    """loam.values is on the IR the build read, so `loam-opt` replays the build from it alone."""
    from loam.backends.numpy_module import emit_python
    from loam.driver.draft import draft_layout
    from loam.driver.pipeline import pipeline_passes
    from loam.frontends.context import make_context

    model = sample_rate_model()
    options = Options(values={"sr": 16000})
    built = loam.build(model, options=draft_layout(model, options=options).options(options), dump_ir=tmp_path)
    ir = parse_ir((tmp_path / "00-read.mlir").read_text(encoding="utf-8"), "00-read.mlir")
    assert contract.VALUES.get(ir) == {"sr": 16000}
    ctx = make_context()
    for p in pipeline_passes("memory", "numpy", False):
        p.apply(ctx, ir)
    assert emit_python(ir) == built.source
