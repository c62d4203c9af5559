"""The ONNX importer and exporter against ONNX's own test models (oracle) and malformed input.

Oracle, for every model of the installed onnx package's backend test data (pytorch-operator,
pytorch-converted, simple: `*/model.onnx`; light: `light_*.onnx`) and every model of
`onnx.backend.test.case.node.collect_testcases()`:

- import -> print -> parse gives structurally equal IR (custom and generic forms);
- import -> export gives the original ModelProto after `normalise` (below), and the export passes
  `onnx.checker.check_model` wherever the original does;
- for the data-dir models, onnxruntime computes the same outputs on the exported model as on the
  original.
"""

from __future__ import annotations

import functools
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.printer import Printer

from loam.core.errors import LoamError, ModelError, UnsupportedError
from loam.dialects.graph import NodeOp
from loam.frontends.context import make_context
from loam.frontends.onnx_export import export_model
from loam.frontends.onnx_functions import expand_functions
from loam.frontends.onnx_proto import import_model, read_model
from loam.frontends.onnx_scan import unroll_scans
from loam.ops import RULES

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
DATA_MODELS = sorted(
    p for kind in ("pytorch-operator", "pytorch-converted", "simple") for p in (DATA / kind).glob("*/model.onnx")
) + sorted((DATA / "light").glob("light_*.onnx"))  # light models sit directly in light/, not in */
CHUNKS = 20


@functools.cache
def node_cases() -> list[tuple[str, onnx.ModelProto]]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators overflow casts on purpose
        return [(case.name, case.model) for case in collect_testcases(None)]


def to_text(module: ModuleOp, generic: bool) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue()


# --------------------------------------------------------------------------------------------------
# Normalisation for the export oracle.  Two ModelProtos are "equal" when these normalised copies are:
# - every tensor (initializers, attribute tensors, sparse values/indices) is rewritten by ONNX's own
#   numpy_helper as `from_array(to_array(t), t.name)`: typed fields (float_data, int32_data, ...)
#   become raw_data, which is the one storage the exporter writes;
# - value_info entries with an empty TypeProto are dropped (they say nothing), the rest are sorted by
#   name (the exporter writes them in node order); an input's or output's empty TypeProto is
#   dropped the same way (the exporter writes an unknown type as no type);
# - string fields set to "" are cleared: proto2 records that `name: ""` was written, which means
#   nothing (an empty node name or domain is the default);
# Nothing else is touched: names, attribute order, opset_import, doc strings, metadata all compare.


# strings have one storage already; numpy_helper cannot convert UNDEFINED or the 6-bit floats.
_NOT_CANONICALISED = {TensorProto.STRING, TensorProto.UNDEFINED, TensorProto.FLOAT6E2M3, TensorProto.FLOAT6E3M2}


def _canon_tensor(t: TensorProto) -> None:
    if t.data_location == TensorProto.EXTERNAL or t.data_type in _NOT_CANONICALISED:
        return
    array = numpy_helper.to_array(t)
    canon = numpy_helper.from_array(array, t.name)
    canon.data_type = t.data_type  # from_array keeps the ONNX type of e.g. bfloat16 arrays; be sure
    doc = t.doc_string
    t.CopyFrom(canon)
    if doc:
        t.doc_string = doc


def _normalise_graph(g: onnx.GraphProto) -> None:
    for t in g.initializer:
        _canon_tensor(t)
    for vi in [*g.input, *g.output]:
        if vi.HasField("type") and not vi.type.ListFields():
            vi.ClearField("type")
    infos = sorted((vi for vi in g.value_info if vi.type.WhichOneof("value")), key=lambda vi: vi.name)
    del g.value_info[:]
    g.value_info.extend(infos)
    for node in g.node:
        for a in node.attribute:
            if a.HasField("t"):
                _canon_tensor(a.t)
            for t in a.tensors:
                _canon_tensor(t)
            for s in [a.sparse_tensor, *a.sparse_tensors]:
                _canon_tensor(s.values)
                _canon_tensor(s.indices)
            if a.HasField("g"):
                _normalise_graph(a.g)
            for sub in a.graphs:
                _normalise_graph(sub)


def _clear_empty_strings(message: Any) -> None:
    for field, value in message.ListFields():
        if field.type == field.TYPE_MESSAGE:
            items = value if field.is_repeated else [value]
            for item in items:
                _clear_empty_strings(item)
        elif field.type == field.TYPE_STRING and not field.is_repeated and value == "":
            message.ClearField(field.name)


def normalise(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    _normalise_graph(copy.graph)
    _clear_empty_strings(copy)
    return copy


def check_one(name: str, model: onnx.ModelProto, ctx: Context) -> list[str]:
    """The oracle's failures for one model (empty when it passes)."""
    module = import_model(model, source=name)
    module.verify()
    problems: list[str] = []
    for generic in (False, True):
        reparsed = Parser(ctx, to_text(module, generic), name).parse_module()
        reparsed.verify()
        if not reparsed.is_structurally_equivalent(module):
            problems.append(f"{name}: {'generic' if generic else 'custom'} print/parse differs")
    exported = export_model(module)
    # The importer replaces a function-bodied operator Loam has no rule for by its body, as the build does.
    imported = unroll_scans(expand_functions(model, name, lambda op_type: op_type in RULES), name)
    if normalise(exported) != normalise(imported):
        problems.append(f"{name}: export differs from the original\n{normalise(exported)}\n---\n{normalise(imported)}")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError:
        return problems
    try:
        onnx.checker.check_model(exported)
    except onnx.checker.ValidationError as err:
        problems.append(f"{name}: the original passes check_model, the export does not: {err}")
    return problems


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_node_cases_oracle(chunk: int) -> None:
    ctx = make_context()
    cases = node_cases()[chunk::CHUNKS]
    assert cases
    problems = [p for name, model in cases for p in check_one(name, model, ctx)]
    assert not problems, "\n".join(problems)


# Data models onnxruntime cannot run at all (the original, not Loam's export), with the reason; they
# still go through the print/parse and export oracles.  `test_ort_cannot_run_these` keeps the list
# exact (strict, like xfail(strict=True)): an entry onnxruntime learns to run makes it fail.
ORT_CANNOT_RUN: dict[str, str] = {
    **dict.fromkeys(
        [
            "pytorch-converted/test_AvgPool1d/model.onnx",
            "pytorch-converted/test_AvgPool1d_stride/model.onnx",
            "pytorch-converted/test_AvgPool2d/model.onnx",
            "pytorch-converted/test_AvgPool2d_stride/model.onnx",
            "pytorch-converted/test_AvgPool3d/model.onnx",
            "pytorch-converted/test_AvgPool3d_stride/model.onnx",
            "pytorch-converted/test_AvgPool3d_stride1_pad0_gpu_input/model.onnx",
        ],
        "onnxruntime has no kernel for AveragePool(1) (opset < 7)",
    ),
    **dict.fromkeys(
        [
            "pytorch-converted/test_BatchNorm1d_3d_input_eval/model.onnx",
            "pytorch-converted/test_BatchNorm2d_eval/model.onnx",
            "pytorch-converted/test_BatchNorm2d_momentum_eval/model.onnx",
            "pytorch-converted/test_BatchNorm3d_eval/model.onnx",
            "pytorch-converted/test_BatchNorm3d_momentum_eval/model.onnx",
        ],
        "onnxruntime has no kernel for BatchNormalization(6) (opset < 7)",
    ),
    **dict.fromkeys(
        [
            "pytorch-converted/test_GLU/model.onnx",
            "pytorch-converted/test_GLU_dim/model.onnx",
            "pytorch-converted/test_PoissonNLLLLoss_no_reduce/model.onnx",
        ],
        "onnxruntime has no kernel for Mul(6) (opset < 7)",
    ),
    **dict.fromkeys(
        [
            "pytorch-converted/test_Linear/model.onnx",
            "pytorch-operator/test_operator_addmm/model.onnx",
            "pytorch-operator/test_operator_mm/model.onnx",
        ],
        "onnxruntime has no kernel for Gemm(6) (opset < 7)",
    ),
    **dict.fromkeys(
        [
            "pytorch-converted/test_PReLU_1d/model.onnx",
            "pytorch-converted/test_PReLU_1d_multiparam/model.onnx",
            "pytorch-converted/test_PReLU_2d/model.onnx",
            "pytorch-converted/test_PReLU_2d_multiparam/model.onnx",
            "pytorch-converted/test_PReLU_3d/model.onnx",
            "pytorch-converted/test_PReLU_3d_multiparam/model.onnx",
        ],
        "onnxruntime has no kernel for PRelu(6) (opset < 7)",
    ),
    **dict.fromkeys(
        [
            "pytorch-converted/test_Softsign/model.onnx",
            "pytorch-operator/test_operator_add_broadcast/model.onnx",
            "pytorch-operator/test_operator_add_size1_broadcast/model.onnx",
            "pytorch-operator/test_operator_add_size1_right_broadcast/model.onnx",
            "pytorch-operator/test_operator_add_size1_singleton_broadcast/model.onnx",
            "pytorch-operator/test_operator_addconstant/model.onnx",
            "pytorch-operator/test_operator_basic/model.onnx",
            "pytorch-operator/test_operator_non_float_params/model.onnx",
            "pytorch-operator/test_operator_params/model.onnx",
        ],
        "onnxruntime has no kernel for Add(6) (opset < 7)",
    ),
    **dict.fromkeys(
        [
            "pytorch-operator/test_operator_pow/model.onnx",
        ],
        "onnxruntime has no kernel for Pow(1) (opset < 7)",
    ),
    **dict.fromkeys(
        [
            "simple/test_gradient_of_add/model.onnx",
            "simple/test_gradient_of_add_and_mul/model.onnx",
        ],
        "onnxruntime has no ai.onnx.preview.training Gradient",
    ),
    **dict.fromkeys(
        [
            "simple/test_strnorm_model_monday_casesensintive_lower/model.onnx",
            "simple/test_strnorm_model_monday_casesensintive_upper/model.onnx",
            "simple/test_strnorm_model_monday_empty_output/model.onnx",
            "simple/test_strnorm_model_monday_insensintive_upper_twodim/model.onnx",
        ],
        "StringNormalizer needs an en_US.UTF-8 locale this machine lacks",
    ),
}


def _inputs(path: Path, model: onnx.ModelProto) -> dict[str, Any]:
    data_set = path.parent / "test_data_set_0"
    if data_set.is_dir():
        out: dict[str, Any] = {}
        for i, vi in enumerate(model.graph.input):
            pb = data_set / f"input_{i}.pb"
            if pb.exists():
                t = TensorProto()
                t.ParseFromString(pb.read_bytes())
                out[vi.name] = numpy_helper.to_array(t)
        return out
    # light_*.onnx ship only outputs: feed seeded random values to the inputs without a default.
    rng = np.random.default_rng(0)
    defaults = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in defaults:
            continue
        tt = vi.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        shape = [d.dim_value or 1 for d in tt.shape.dim]
        out[vi.name] = rng.standard_normal(shape).astype(dtype)
    return out


def _run(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[Any]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # onnxruntime's warnings about old opsets are noise here
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_data_models_oracle(chunk: int) -> None:
    ctx = make_context()
    paths = DATA_MODELS[chunk::CHUNKS]
    assert paths
    problems: list[str] = []
    for path in paths:
        name = str(path.relative_to(DATA))
        model = onnx.load(str(path), load_external_data=False)
        problems.extend(check_one(name, model, ctx))
        if name in ORT_CANNOT_RUN:
            continue
        exported = export_model(read_model(path))
        feeds = _inputs(path, model)
        expected = _run(model, feeds)
        got = _run(exported, feeds)
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            if not np.array_equal(np.asarray(e), np.asarray(g), equal_nan=np.asarray(e).dtype.kind in "fc"):
                problems.append(f"{name}: output {i} differs between original and export in onnxruntime")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", sorted(ORT_CANNOT_RUN))
def test_ort_cannot_run_these(name: str) -> None:
    path = DATA / name
    model = onnx.load(str(path))
    with pytest.raises(Exception, match=r"NOT_IMPLEMENTED|Gradient|locale"):
        _run(model, _inputs(path, model))


def test_data_models_found() -> None:
    # The oracle is only as good as its population: the four folders must all contribute.
    kinds = {p.relative_to(DATA).parts[0] for p in DATA_MODELS}
    assert kinds == {"pytorch-operator", "pytorch-converted", "simple", "light"}
    assert len(DATA_MODELS) > 100
    assert len(node_cases()) > 1500


# --------------------------------------------------------------------------------------------------
# What the importer builds


def _model(nodes: list[onnx.NodeProto], **graph_kw: Any) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "N", None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    kw: dict[str, Any] = {"inputs": [x], "outputs": [y], **graph_kw}
    graph = helper.make_graph(nodes, "g", kw.pop("inputs"), kw.pop("outputs"), **kw)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_import_builds_nodes_with_names_types_and_since() -> None:
    model = _model(
        [helper.make_node("Relu", ["x"], ["h"], name="r"), helper.make_node("Neg", ["h"], ["y"], name="n")],
        value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 3])],
    )
    module = import_model(model)
    nodes = [op for op in module.walk() if isinstance(op, NodeOp)]
    assert [(n.op_type, n.node_name, n.since, n.output_names) for n in nodes] == [
        ("Relu", "r", 17, ["h"]),
        ("Neg", "n", 17, ["y"]),
    ]
    assert str(nodes[0].results[0].type) == "!graph.tensor<f32, [2, 3]>"
    assert str(nodes[1].results[0].type) == "!graph.unknown"
    text = str(module)
    assert '(%x: !graph.tensor<f32, [2, "N", ?]>) inputs ["x"]' in text
    assert "%h = graph.node" in text  # ONNX names become SSA names
    assert 'graph.return %y ["y"] : !graph.tensor<f32>' in text


def test_import_ai_onnx_domain_and_absent_inputs() -> None:
    model = _model([helper.make_node("Clip", ["x", "", "x"], ["y"], domain="ai.onnx")])
    module = import_model(model)
    node = next(op for op in module.walk() if isinstance(op, NodeOp))
    assert node.since == 17 and node.domain == "ai.onnx"
    assert node.args[1].owner.name == "graph.none"
    assert export_model(module).graph.node[0].input == ["x", "", "x"]


def test_initializer_that_defaults_an_input() -> None:
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [1])
    model = _model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]), w],
        initializer=[numpy_helper.from_array(np.array([2.0], np.float32), "w")],
    )
    module = import_model(model)
    node = next(op for op in module.walk() if isinstance(op, NodeOp))
    assert node.args[1].owner.__class__.__name__ == "Block"  # the node reads the input, not the default
    assert "default_of %w" in str(module)
    assert normalise(export_model(module)) == normalise(model)


# --------------------------------------------------------------------------------------------------
# Refusals


def test_unreadable_protobuf(tmp_path: Path) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\xff\xff\xff\xff not a protobuf")
    with pytest.raises(ModelError, match=r"broken\.onnx: not a readable ONNX protobuf"):
        read_model(path)


def test_missing_file_and_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"absent\.onnx: cannot read the file"):
        read_model(tmp_path / "absent.onnx")
    with pytest.raises(ModelError, match=r"model\.pb: expected a \.onnx or \.onnxtext file"):
        read_model(tmp_path / "model.pb")


def test_input_not_defined_earlier() -> None:
    model = _model([helper.make_node("Neg", ["h"], ["y"], name="late"), helper.make_node("Relu", ["x"], ["h"])])
    with pytest.raises(ModelError, match=r"m\.onnx: graph 'g': node 'late' \(Neg, #0\): input 'h' is not defined"):
        import_model(model, source="m.onnx")


def test_name_defined_twice() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"])])
    with pytest.raises(ModelError, match=r"m\.onnx: graph 'g': value \(output of node ''\) 'y' is defined twice"):
        import_model(model, source="m.onnx")


def test_initializer_and_node_output_clash() -> None:
    init = numpy_helper.from_array(np.zeros(1, np.float32), "y")
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="a")], initializer=[init])
    with pytest.raises(ModelError, match=r"'y' is defined twice"):
        import_model(model, source="m.onnx")


@pytest.mark.parametrize("location", ["/etc/passwd", "../weights.bin", "sub/../../w.bin", "C:\\w.bin", "..\\w.bin"])
def test_external_data_outside_the_folder(location: str) -> None:
    init = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1], data_location=TensorProto.EXTERNAL)
    init.external_data.add(key="location", value=location)
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], initializer=[init])
    with pytest.raises(ModelError, match=r"m\.onnx: graph 'g': initializer 'w': external data location .* is outside"):
        import_model(model, source="m.onnx")


def test_external_data_inside_the_folder_is_kept_not_read(tmp_path: Path) -> None:
    init = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    init.external_data.add(key="location", value="weights/w.bin")  # the file does not exist
    init.external_data.add(key="offset", value="16")
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], initializer=[init])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    module = read_model(path)
    assert 'external {location = "weights/w.bin", offset = "16"}' in str(module)
    assert normalise(export_model(module)) == normalise(model)


def test_unknown_element_type() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])])
    model.graph.input[0].type.tensor_type.elem_type = 99
    with pytest.raises(ModelError, match=r"m\.onnx: graph 'g': input 'x': element type code 99 is not one ONNX"):
        import_model(model, source="m.onnx")
    init = TensorProto(name="w", data_type=77, dims=[1], raw_data=b"\0")
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], initializer=[init])
    with pytest.raises(ModelError, match=r"initializer 'w': element type code 77"):
        import_model(model, source="m.onnx")


def test_raw_data_of_the_wrong_size() -> None:
    init = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2], raw_data=b"\0\0\0")
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], initializer=[init])
    with pytest.raises(ModelError, match=r"initializer 'w': .*needs 8 bytes, got 3"):
        import_model(model, source="m.onnx")


def test_domain_without_opset_and_functions() -> None:
    model = _model([helper.make_node("Foo", ["x"], ["y"], domain="com.example", name="f")])
    with pytest.raises(ModelError, match=r"node 'f' \(Foo, #0\): its domain 'com.example' is not in"):
        import_model(model, source="m.onnx")
    model.functions.add(name="Foo", domain="com.example", input=["a"], output=["b"])
    with pytest.raises(ModelError, match=r"node 'f' \(Foo, #0\): its domain 'com.example' is not in"):
        import_model(model, source="m.onnx")  # a function's domain must be imported too
    model.opset_import.add(domain="com.example", version=1)
    with pytest.raises(
        ModelError, match=r"m\.onnx: graph '\w*': Foo node 'f': its function 'Foo' never computes its output 'b'"
    ):
        import_model(model, source="m.onnx")


def test_every_refusal_is_a_loam_error() -> None:
    assert issubclass(ModelError, LoamError) and issubclass(UnsupportedError, LoamError)


# --------------------------------------------------------------------------------------------------
# The textual reader (another module) must read every model exactly as onnx.parser does.

_TEXT_READER = (Path(__file__).resolve().parents[2] / "frontends" / "onnx_text.py").exists()


@pytest.mark.skipif(not _TEXT_READER, reason="frontends/onnx_text.py is not written yet")
def test_text_reader_agrees_with_onnx_parser() -> None:
    """The issue's reader oracle: each model printed by onnx.printer and read by Loam's text reader
    gives the IR the protobuf reader gives for the original model (the text form loses nothing
    these models carry; where the forms could disagree, protobuf is the reference)."""
    from loam.frontends.onnx_text import parse_model_text

    same = refused = 0
    differing: list[str] = []
    population = [(str(p.relative_to(DATA)), onnx.load(str(p))) for p in DATA_MODELS] + node_cases()
    for name, model in population:
        reference = import_model(model, source=name)
        try:
            ours = import_model(parse_model_text(onnx.printer.to_text(model)), source=name)
        except LoamError:
            refused += 1
            continue
        if ours.is_structurally_equivalent(reference):
            same += 1
        else:
            differing.append(name)
    print(f"text reader: {same} identical, {refused} refused, {len(differing)} differing")
    assert not differing, differing[:20]
    assert same + refused == len(population) > 2000


# -- names that would break the module: found by the mutation fuzzer (tests/fuzz) ----------------------------------


def _relu_model(node_name: str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name=node_name)], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("name", ["fc2.\x00matmul", "a\nimport os  # a line break would end the comment", "a\rb"])
def test_a_name_with_a_control_character_is_refused(tmp_path: Path, name: str) -> None:
    from loam.frontends.onnx_proto import read_model

    path = tmp_path / "m.onnx"
    path.write_bytes(_relu_model(name).SerializeToString())
    with pytest.raises(ModelError, match=rf"{path}: graph 'g': node #0: the name .* is not printable"):
        read_model(path)


def test_a_name_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    from loam.frontends.onnx_proto import read_model

    path = tmp_path / "m.onnx"
    path.write_bytes(_relu_model("QQ").SerializeToString().replace(b"QQ", b"\xff\xfe"))
    with pytest.raises(ModelError, match=rf"{path}: graph 'g': node #0 \(Relu\): name: not valid UTF-8 text"):
        read_model(path)


def test_a_graph_without_outputs_is_refused(tmp_path: Path) -> None:
    # The fuzzer's onnx seed 10005583: the module printer indexed the empty list of outputs.
    from loam.frontends.onnx_proto import read_model

    model = _relu_model("r")
    del model.graph.output[:]
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelError, match=rf"{path}: graph 'g': the graph declares no outputs"):
        read_model(path)


def test_an_external_initializer_of_negative_dims_is_refused(tmp_path: Path) -> None:
    # The fuzzer's onnxtext seed 10001379: xDSL's verifier raised on the negative dim (an internal error).
    from loam.frontends.onnx_proto import read_model

    path = tmp_path / "m.onnxtext"
    path.write_text(
        '<ir_version: 8, opset_import: ["" : 17]>\n'
        "g (float[2] x) => (float[2] y)\n"
        '<float[-1] w = ["location": "w.safetensors", "offset": "0", "length": "4"]>\n'
        "{ y = Add (x, w) }\n",
        encoding="utf-8",
    )
    with pytest.raises(ModelError, match=rf"{path}: .*'w': the tensor's dims \[-1\] hold a negative extent"):
        read_model(path)
