"""ONNX If printed by the numpy backend: one `if`/`else` in forward, a block per branch.

Models with an If are built with a drafted layout and run on both branches at several symbol values
against onnxruntime.  Hand-written kernel programs pin what the models cannot reach yet: an owed
condition checked only where its branch runs, a derived symbol computed only in the branch reading
it, a length only the If's result has bound after it, and the refusals.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.parser import Parser

from loam.backends.numpy_module import emit_python
from loam.core.errors import UnsupportedError
from loam.driver.pipeline import import_source
from loam.frontends.context import make_context
from loam.testing import assert_same, build_for, run_built, run_onnxruntime
from tests.backends.printing import forward_of

F = TensorProto.FLOAT


def _model(nodes: list[onnx.NodeProto], inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _branch(name: str, nodes: list[onnx.NodeProto], out: str, shape: list) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, F, shape)])


def _if(cond: str, out: str, then: onnx.GraphProto, other: onnx.GraphProto, name: str) -> onnx.NodeProto:
    return helper.make_node("If", [cond], [out], then_branch=then, else_branch=other, name=name)


def _scalar(name: str, value: float) -> onnx.NodeProto:
    tensor = helper.make_tensor(f"{name}_value", F, [], [value])
    return helper.make_node("Constant", [], [name], value=tensor, name=name)


def _x(n: int, d: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + n).standard_normal((n, d)).astype(np.float32)


def _check_both_ways(model: onnx.ModelProto, sizes: tuple[int, ...], cond_shape: tuple[int, ...] = (1,)) -> None:
    result = build_for(model)
    for n in sizes:
        for cond in (True, False):
            feeds = {"x": _x(n), "c": np.full(cond_shape, cond)}
            got = run_built(result, feeds)
            want = run_onnxruntime(model, feeds)
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                assert_same(g, w, rtol=1e-6, atol=1e-6)


def add_or_mul() -> onnx.ModelProto:
    """then: Add(x, x); else: Mul(x, 3) over x [N, 4]."""
    then = _branch("then", [helper.make_node("Add", ["x", "x"], ["t_out"], name="then_add")], "t_out", ["N", 4])
    other = _branch(
        "else", [_scalar("three", 3.0), helper.make_node("Mul", ["x", "three"], ["e_out"], name="else_mul")],
        "e_out", ["N", 4],
    )  # fmt: skip
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [1])
    y = helper.make_tensor_value_info("y", F, ["N", 4])
    return _model([_if("c", "y", then, other, "the_if")], [x, c], [y])


def test_add_or_mul_runs_the_branch_the_condition_picks() -> None:
    model = add_or_mul()
    _check_both_ways(model, (1, 3, 7))
    source = build_for(model).source
    assert "if bool(np.asarray(c).reshape(-1)[0]):  # the_if" in source
    assert "# then_add" in source and "# else_mul" in source


def grow(tail: str | None = None) -> onnx.ModelProto:
    """then: Concat(x, x) on axis 0 (2N rows); else: x (N rows); then, optionally, a node reading that length."""
    then = _branch(
        "then", [helper.make_node("Concat", ["x", "x"], ["t_out"], axis=0, name="then_concat")], "t_out", [None, 4]
    )
    other = _branch("else", [helper.make_node("Identity", ["x"], ["e_out"], name="else_id")], "e_out", ["N", 4])
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    nodes = [_if("c", "y", then, other, "grow")]
    if tail is None:
        return _model(nodes, [x, c], [helper.make_tensor_value_info("y", F, [None, 4])])
    if tail == "flatten":
        flat = numpy_helper.from_array(np.array([-1], dtype=np.int64), "flat")
        nodes.append(helper.make_node("Reshape", ["y", "flat"], ["z"], name="after_flat"))
        return _model(nodes, [x, c], [helper.make_tensor_value_info("z", F, [None])], [flat])
    axis = numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1")
    nodes.append(helper.make_node("Unsqueeze", ["y", "axis1"], ["z"], name="after_unsqueeze"))
    return _model(nodes, [x, c], [helper.make_tensor_value_info("z", F, [None, 1, 4])], [axis])


def test_branches_giving_the_output_different_lengths() -> None:
    model = grow()
    _check_both_ways(model, (1, 2, 5), cond_shape=())
    feeds = {"x": _x(3), "c": np.array(True)}
    assert run_built(build_for(model), feeds)[0].shape == (6, 4)


@pytest.mark.parametrize("tail", ["flatten", "unsqueeze"])
def test_a_later_kernel_reads_the_length_the_if_gave(tail: str) -> None:
    model = grow(tail)
    _check_both_ways(model, (1, 3), cond_shape=())
    source = build_for(model).source
    assert "_env['y[0]'] = y.shape[0]  # the length If node 'grow' gave" in source


def test_the_length_is_not_bound_where_nothing_reads_it() -> None:
    assert "_env['y[0]']" not in build_for(grow()).source


def masked() -> onnx.ModelProto:
    """then: rows of a [1, 1, 16, 16] bool buffer sliced by Shape(x)[0], Where against x [N, 16]: N <= 16 owed."""
    then = _branch(
        "then",
        [
            helper.make_node("Shape", ["x"], ["rows"], start=0, end=1, name="then_shape"),
            helper.make_node("Slice", ["mask_buf", "zero", "rows", "axis2"], ["m4"], name="then_slice"),
            helper.make_node("Squeeze", ["m4", "axes01"], ["m2"], name="then_squeeze"),
            helper.make_node("Where", ["m2", "x", "low"], ["t_out"], name="then_where"),
        ],
        "t_out", ["N", 16],
    )  # fmt: skip
    other = _branch("else", [helper.make_node("Neg", ["x"], ["e_out"], name="else_neg")], "e_out", ["N", 16])
    inits = [
        numpy_helper.from_array(np.tril(np.ones((1, 1, 16, 16), dtype=bool)), "mask_buf"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
        numpy_helper.from_array(np.array([0, 1], dtype=np.int64), "axes01"),
        numpy_helper.from_array(np.array(-1e4, dtype=np.float32), "low"),
    ]
    x = helper.make_tensor_value_info("x", F, ["N", 16])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [1])
    y = helper.make_tensor_value_info("y", F, ["N", 16])
    return _model([_if("c", "y", then, other, "masked")], [x, c], [y], inits)


def test_an_owed_condition_is_checked_only_where_its_branch_runs() -> None:
    model = masked()
    result = build_for(model)
    for n in (1, 9, 16):
        for cond in (True, False):
            feeds = {"x": _x(n, 16), "c": np.array([cond])}
            assert_same(run_built(result, feeds)[0], run_onnxruntime(model, feeds)[0], rtol=1e-6, atol=1e-6)
    too_long = {"x": _x(17, 16), "c": np.array([False])}
    assert_same(run_built(result, too_long)[0], run_onnxruntime(model, too_long)[0], rtol=1e-6, atol=1e-6)
    with pytest.raises(result.module.ShapeError, match=r"then_where|then_slice"):
        run_built(result, {"x": _x(17, 16), "c": np.array([True])})


def outer_values() -> onnx.ModelProto:
    """Branches reading an initializer `w` and an outer Constant `k`."""
    then = _branch("then", [helper.make_node("Mul", ["x", "w"], ["t_out"], name="then_mul")], "t_out", ["N", 4])
    other = _branch(
        "else",
        [
            helper.make_node("Add", ["x", "k"], ["e0"], name="else_add"),
            helper.make_node("Mul", ["e0", "w"], ["e_out"], name="else_mul"),
        ],
        "e_out", ["N", 4],
    )  # fmt: skip
    k = numpy_helper.from_array(np.array([1.0, -2.0, 3.0, -4.0], dtype=np.float32), "k_value")
    nodes = [helper.make_node("Constant", [], ["k"], value=k, name="outer_k"), _if("c", "y", then, other, "pick")]
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32) + 0.5, "w")
    x = helper.make_tensor_value_info("x", F, ["N", 4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [1])
    return _model(nodes, [x, c], [helper.make_tensor_value_info("y", F, ["N", 4])], [w])


def test_branches_read_an_outer_constant_and_an_initializer() -> None:
    _check_both_ways(outer_values(), (1, 4))


def nested() -> onnx.ModelProto:
    """then: Add(x, x); else: an If on d, then Mul(x, 3), else Neg(x)."""
    inner_then = _branch(
        "inner_then", [_scalar("three", 3.0), helper.make_node("Mul", ["x", "three"], ["it"], name="inner_mul")],
        "it", ["N", 4],
    )  # fmt: skip
    inner_else = _branch("inner_else", [helper.make_node("Neg", ["x"], ["ie"], name="inner_neg")], "ie", ["N", 4])
    then = _branch("then", [helper.make_node("Add", ["x", "x"], ["t_out"], name="then_add")], "t_out", ["N", 4])
    other = _branch("else", [_if("d", "e_out", inner_then, inner_else, "inner")], "e_out", ["N", 4])
    inputs = [
        helper.make_tensor_value_info("x", F, ["N", 4]),
        helper.make_tensor_value_info("c", TensorProto.BOOL, [1]),
        helper.make_tensor_value_info("d", TensorProto.BOOL, []),
    ]
    return _model([_if("c", "y", then, other, "outer")], inputs, [helper.make_tensor_value_info("y", F, ["N", 4])])


def test_nested_ifs() -> None:
    model = nested()
    result = build_for(model)
    for n in (1, 3):
        for c in (True, False):
            for d in (True, False):
                feeds = {"x": _x(n), "c": np.array([c]), "d": np.array(d)}
                assert_same(run_built(result, feeds)[0], run_onnxruntime(model, feeds)[0], rtol=1e-6, atol=1e-6)
    assert "        if bool(np.asarray(d).reshape(-1)[0]):  # inner" in result.source


# -- hand-written kernel programs ----------------------------------------------------------------------

_BRANCH_OWES = """
kernel.program "forward" (%x : !tensor_axes.tensor<f32, [N: N, D: 4]>, %m : !tensor_axes.tensor<f32, [M: M]>,
                          %c : !tensor_axes.tensor<bool, [C: 1]>) names ["x", "m", "c"] {
  %q = "kernel.if"(%c) <{node = "/pick"}> ({
    shape_poly.owe N <= 16 for "Where node '/then/where'"
    %s = kernel.constant [#shape_poly.extent<floordiv(N, M)>] {node = "/then/Div"} : !tensor_axes.tensor<i64, [One: 1]>
    kernel.yield %s : !tensor_axes.tensor<i64, [One: 1]>
  }, {
    %k = kernel.constant [#shape_poly.extent<min(M, 3)>] {node = "/else/Min"} : !tensor_axes.tensor<i64, [One: 1]>
    kernel.yield %k : !tensor_axes.tensor<i64, [One: 1]>
  }) : (!tensor_axes.tensor<bool, [C: 1]>) -> !tensor_axes.tensor<i64, [One: 1]>
  kernel.return %q names ["q"] : !tensor_axes.tensor<i64, [One: 1]>
}
"""


def _emit(text: str):
    module = Parser(make_context(), text, "test").parse_module()
    module.verify()
    source = emit_python(module)
    generated = import_source(source, "loam_generated_if")
    return source, generated


def _forward(generated, *inputs: np.ndarray) -> np.ndarray:
    return generated.forward(generated.Weights(), *inputs)


def test_an_owed_condition_and_derived_symbols_live_in_their_branch() -> None:
    source, generated = _emit(_BRANCH_OWES)
    body = forward_of(source)
    then, other = body[body.index("if bool(") :].split("    else:\n")  # the If's own branches
    assert "_owe(_env['N'] <= 16" in then and "_owe(" not in other
    assert "derived_extent('floordiv', _env['N'], _env['M'])" in then and "floordiv" not in other
    assert "derived_extent('min', _env['M'], 3)" in other and "'min'" not in then
    m = np.zeros(5, np.float32)
    assert _forward(generated, _x(12), m, np.array([True])).tolist() == [2]
    assert _forward(generated, _x(12), m, np.array([False])).tolist() == [3]
    # N = 17 breaks only the then branch's condition; M = 0 divides by zero only there.
    with pytest.raises(generated.ShapeError, match=r"N <= 16 \(Where node '/then/where'\)"):
        _forward(generated, _x(17), m, np.array([True]))
    assert _forward(generated, _x(17), m, np.array([False])).tolist() == [3]
    with pytest.raises(generated.ShapeError, match="divides by zero"):
        _forward(generated, _x(3), np.zeros(0, np.float32), np.array([True]))
    assert _forward(generated, _x(3), np.zeros(0, np.float32), np.array([False])).tolist() == [0]


_X = "!tensor_axes.tensor<f32, [N: N, D: 4]>"
_Y = '!tensor_axes.tensor<f32, [Y: "y[0]", D: 4]>'
_R = '!tensor_axes.tensor<f32, [Y: "y[0]", U: 1, D: 4]>'
_T = "!tensor_axes.tensor<f32, [T: 2*N, D: 4]>"
_IF_LENGTH = f"""
kernel.program "forward" (%x : {_X}, %c : !tensor_axes.tensor<bool, []>) names ["x", "c"] {{
  shape_poly.owe "y[0]" <= 8 for "Reshape node '/after'"
  %y = "kernel.if"(%c) <{{node = "/grow"}}> ({{
    %t = kernel.concat(%x, %x) {{axis = 0 : i64, node = "/then/concat"}} : ({_X}, {_X}) -> {_T}
    kernel.yield %t : {_T}
  }}, {{
    kernel.yield %x : {_X}
  }}) : (!tensor_axes.tensor<bool, []>) -> {_Y}
  %r = kernel.regroup %y {{node = "/after"}} : {_Y} -> {_R}
  kernel.return %r names ["r"] : {_R}
}}
"""


def test_a_condition_on_the_if_length_is_checked_right_after_the_if() -> None:
    source, generated = _emit(_IF_LENGTH)
    body = forward_of(source)
    assert body.index("_env['y[0]'] = y.shape[0]") < body.index("_owe(_env['y[0]'] <= 8") < body.index("r = y.reshape(")
    x = _x(5)
    assert_same(_forward(generated, x, np.array(False)), x[:, None, :], rtol=0, atol=0)
    with pytest.raises(generated.ShapeError, match=r"If node '/grow' gives y\[0\] = 10"):
        _forward(generated, x, np.array(True))
    assert _forward(generated, _x(4), np.array(True)).shape == (8, 1, 4)


def test_an_if_length_no_block_binds_is_refused() -> None:
    # The If is inside a branch, so forward's own block never binds `y[0]`.
    inner = _IF_LENGTH.split("  %y = ", 1)[1].split("  %r = ")[0]
    text = f"""
kernel.program "forward" (%x : !tensor_axes.tensor<f32, [N: N, D: 4]>, %c : !tensor_axes.tensor<bool, []>)
    names ["x", "c"] {{
  shape_poly.owe "y[0]" <= 8 for "Reshape node '/after'"
  %o = "kernel.if"(%c) <{{node = "/outer"}}> ({{
    %y = {inner}    kernel.yield %y : !tensor_axes.tensor<f32, [Y: "y[0]", D: 4]>
  }}, {{
    kernel.yield %x : !tensor_axes.tensor<f32, [N: N, D: 4]>
  }}) : (!tensor_axes.tensor<bool, []>) -> !tensor_axes.tensor<f32, [O: "o[0]", D: 4]>
  kernel.return %o names ["o"] : !tensor_axes.tensor<f32, [O: "o[0]", D: 4]>
}}
"""
    with pytest.raises(UnsupportedError, match=r"y\[0\].*If node '/grow'"):
        _emit(text)


def _squeeze_if_one_model() -> onnx.ModelProto:
    """torch's `y.squeeze(-1)` of a strided Conv's output, exported as an If on that axis being 1:
    Squeeze (rank 2) where it is, Identity (rank 3) where it is not; a ReduceSum over axis 1 follows."""
    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((2, 1, 4)).astype(np.float32), "w")
    axes = numpy_helper.from_array(np.array([-1], np.int64), "last")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    then = _branch("squeezed", [helper.make_node("Squeeze", ["y", "last"], ["s"])], "s", ["N", 2])
    other = _branch("kept", [helper.make_node("Identity", ["y"], ["k"])], "k", ["N", 2, "P"])
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"], strides=[4], name="conv"),
        helper.make_node("Shape", ["y"], ["shape"], start=-1),
        helper.make_node("Squeeze", ["shape"], ["length"]),
        helper.make_node("Equal", ["length", "one"], ["c"]),
        _if("c", "z", then, other, "squeeze_if_one"),
    ]
    inputs = [helper.make_tensor_value_info("x", F, ["N", 1, "L"])]
    return _model(nodes, inputs, [helper.make_tensor_value_info("z", F, ["N", 2])], [w, axes, one])


def test_branches_of_two_ranks_chosen_by_an_extent_follow_the_then_branch() -> None:
    """The module follows the squeeze and owes its condition: every length the Conv leaves one position
    (4 to 7 samples) matches onnxruntime; another is a ShapeError naming the input, not the other rank."""
    model = _squeeze_if_one_model()
    result = build_for(model)
    for n, length in ((1, 4), (2, 7)):
        x = np.random.default_rng(length).standard_normal((n, 1, length)).astype(np.float32)
        got, want = run_built(result, {"x": x}), run_onnxruntime(model, {"x": x})
        assert got[0].shape == want[0].shape == (n, 2)
        assert_same(got, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(result.module.ShapeError, match=r"If node 'squeeze_if_one'.*x axis 2 gives L = 8"):
        run_built(result, {"x": np.zeros((1, 1, 8), np.float32)})
