"""Hostile model files: text that is not text, and sizes past what the machine holds (`loam.core.limits`).

Each case is refused with one `LoamError` naming the tensor or node (and the limit), in bounded time
and memory: never exit status 3, a MemoryError, a RecursionError, numpy's `array is too big` or a hang.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, TypeProto, helper, numpy_helper

import loam
from loam.core import limits
from loam.core.errors import LoamError, ModelError, ShapeError
from loam.core.layout import LayoutRule


def _model(nodes, initializers=(), inputs=(), output=("y", TensorProto.FLOAT, None)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", list(inputs), [helper.make_tensor_value_info(*output)], initializer=list(initializers)
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _relu(name: str = "NODEX", x: str = "XNAME") -> onnx.ModelProto:
    return _model(
        [helper.make_node("Relu", [x], ["y"], name=name)],
        inputs=[helper.make_tensor_value_info(x, TensorProto.FLOAT, [2])],
        output=("y", TensorProto.FLOAT, [2]),
    )


def _patched(model: onnx.ModelProto, marker: bytes) -> bytes:
    """The model's protobuf bytes with `marker` replaced by as many bytes that are not UTF-8."""
    data = model.SerializeToString()
    assert data.count(marker) >= 1
    return data.replace(marker, (b"N\xff\xfeO\x80" * 2)[: len(marker)])


def _cli_build(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loam.tools.loam_main", "build", str(path), "--no-cache", "-o", str(path) + ".py"],
        capture_output=True,
        text=True,
        timeout=120,
    )


# ---- names that are not UTF-8 --------------------------------------------------------------------

BAD_TEXT = [
    ("node name", _relu(), b"NODEX", "node #0 (Relu): name"),
    ("input name", _relu(), b"XNAME", "input #0: name"),
    ("op type", _relu(), b"Relu", "op_type"),
    ("producer", helper.make_model(_relu().graph, producer_name="PRODX"), b"PRODX", "producer_name"),
    ("doc string", helper.make_model(_relu().graph, doc_string="DOCSX"), b"DOCSX", "doc_string"),
]


@pytest.mark.parametrize(("model", "marker", "where"), [c[1:] for c in BAD_TEXT], ids=[c[0] for c in BAD_TEXT])
def test_invalid_utf8_is_refused_by_the_api(model: onnx.ModelProto, marker: bytes, where: str) -> None:
    parsed = onnx.ModelProto()
    parsed.ParseFromString(_patched(model, marker))
    with pytest.raises(ModelError, match="not valid UTF-8") as caught:
        loam.build(parsed)
    assert where in str(caught.value)
    assert str(caught.value).startswith("<model>: ")


def test_invalid_utf8_in_attribute_and_initializer_names(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones([2], np.float32), "WNAME")
    model = _model(
        [helper.make_node("Add", ["WNAME", "WNAME"], ["y"], name="add"), helper.make_node("Relu", ["y"], ["z"])],
        [w],
        output=("z", TensorProto.FLOAT, [2]),
    )
    model.graph.node[1].attribute.append(helper.make_attribute("ATTRX", 1))
    for marker, where in ((b"WNAME", "initializer #0"), (b"ATTRX", "node #1 (Relu): attribute #0: name")):
        path = tmp_path / "bad.onnx"
        path.write_bytes(_patched(model, marker))
        run = _cli_build(path)
        assert run.returncode == 1, run.stderr
        errors = [line for line in run.stderr.splitlines() if line.startswith("loam: error:")]
        assert len(errors) == 1 and "not valid UTF-8" in errors[0] and where in errors[0], run.stderr
        assert str(path) in errors[0]


@pytest.mark.parametrize(("marker", "where"), [(b"NODEX", "node #0 (Relu)"), (b"XNAME", "input #0")])
def test_invalid_utf8_through_the_cli(tmp_path: Path, marker: bytes, where: str) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(_patched(_relu(), marker))
    run = _cli_build(path)
    assert run.returncode == 1, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("loam: error:")]
    assert len(errors) == 1, run.stderr
    assert f"{path}: graph 'g': {where}" in errors[0] and "not valid UTF-8" in errors[0]
    assert "Traceback" not in run.stderr


def test_names_inside_a_subgraph_are_checked() -> None:
    branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"], name="INNER")],
        "then",
        [],
        [helper.make_value_info("t", TypeProto())],
    )
    model = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
        inputs=[helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", 1, [1])],
    )
    parsed = onnx.ModelProto()
    parsed.ParseFromString(_patched(model, b"INNER"))
    with pytest.raises(
        ModelError, match=r"node #0 \(If\): attribute #0 'else_branch': graph 'then': node #0 \(Identity\): name"
    ):
        loam.build(parsed)


# ---- sizes past the machine ------------------------------------------------------------------------


def test_an_initializer_declaring_2_to_the_40_elements() -> None:
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**20, 2**20], raw_data=b"1234")
    model = _model([helper.make_node("Identity", ["w"], ["y"], name="id")], [t])
    with pytest.raises(LoamError, match=r"initializer 'w': extents \[1048576, 1048576\] .*MAX_ELEMENTS"):
        loam.build(model)


def test_a_constant_of_shape_of_2_to_the_62_elements(tmp_path: Path) -> None:
    shape = numpy_helper.from_array(np.array([2**31, 2**31], np.int64), "shape")
    model = _model([helper.make_node("ConstantOfShape", ["shape"], ["y"], name="big")], [shape])
    with pytest.raises(ShapeError, match=r"ConstantOfShape node 'big': .*MAX_ELEMENTS"):
        loam.build(model)
    path = tmp_path / "big.onnx"
    onnx.save(model, path)
    run = _cli_build(path)
    assert run.returncode == 1, run.stderr
    assert "array is too big" not in run.stderr and "ConstantOfShape node 'big'" in run.stderr


def test_a_constant_of_shape_past_the_fold_limit_is_left_to_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between MAX_FOLD_ELEMENTS and MAX_ELEMENTS the build does not compute the value: the module does."""
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    model = _model([helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fill")], [shape])
    options = loam.Options(layout=(LayoutRule("y", ("A", "B")), LayoutRule("shape", ("R",))))
    folded = loam.build(model, options=options)
    monkeypatch.setattr(limits, "MAX_FOLD_ELEMENTS", 5)
    computed = loam.build(model, options=options)
    assert "kernel.constant" in folded.report and "kernel.zip" not in folded.report
    assert "kernel.zip" in computed.report
    for result in (folded, computed):
        np.testing.assert_array_equal(
            result.module.forward(result.module.Weights.embedded()), np.zeros([2, 3], np.float32)
        )


def test_a_range_past_the_fold_limit() -> None:
    bounds = [numpy_helper.from_array(np.array(v, np.int64), n) for v, n in ((0, "a"), (2**30, "b"), (1, "c"))]
    model = _model([helper.make_node("Range", ["a", "b", "c"], ["y"], name="rg")], bounds, output=("y", 7, None))
    with pytest.raises(ShapeError, match=r"Range node 'rg': makes 1073741824 elements, .*MAX_FOLD_ELEMENTS"):
        loam.build(model)


def test_a_rank_10000_tensor() -> None:
    w = numpy_helper.from_array(np.zeros([1], np.float32), "w")
    model = _model([helper.make_node("Identity", ["w"], ["y"], name="id")], [w], output=("y", 1, [1] * 10_000))
    with pytest.raises(LoamError, match=r"output 'y': rank 10000 is past Loam's limit of 32 axes"):
        loam.build(model)


def test_a_million_nodes_is_refused_in_bounded_time() -> None:
    # The graph is made as bytes (one node's encoding repeated), parsed by protobuf's C code.
    node = helper.make_node("Relu", ["x"], ["x"]).SerializeToString()
    entry = b"\x0a" + _varint(len(node)) + node  # GraphProto field 1 (node), length-delimited
    graph = onnx.GraphProto()
    graph.ParseFromString(entry * 1_000_000)
    graph.name = "huge"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    start = time.monotonic()
    with pytest.raises(LoamError, match=r"graph 'huge': more than 500000 nodes, .*MAX_NODES"):
        loam.build(model)
    assert time.monotonic() - start < 10


def test_max_nodes_can_be_raised_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOAM_MAX_NODES", "1")
    with pytest.raises(LoamError, match="more than 1 nodes"):
        loam.build(_model([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]))
    monkeypatch.setenv("LOAM_MAX_NODES", "lots")
    with pytest.raises(LoamError, match="LOAM_MAX_NODES='lots' must be a positive integer"):
        loam.build(_relu())


def test_if_branches_nested_a_thousand_deep() -> None:
    # Built top-down in place: protobuf copies (and refuses past depth 100) a nested message it is handed.
    model = _model([], inputs=[helper.make_tensor_value_info("c", TensorProto.BOOL, [])], output=("y", 1, [1]))
    graph = model.graph
    for depth in range(1000):
        node = graph.node.add(op_type="If", input=["c"], output=["y" if depth == 0 else f"t{depth}"])
        node.attribute.add(name="else_branch", type=onnx.AttributeProto.GRAPH).g.CopyFrom(
            helper.make_graph(
                [helper.make_node("Identity", ["c"], ["e"])], "else", [], [helper.make_value_info("e", TypeProto())]
            )
        )
        then = node.attribute.add(name="then_branch", type=onnx.AttributeProto.GRAPH)
        graph = then.g
        graph.name = f"b{depth}"
        graph.output.add(name=f"t{depth + 1}")
    start = time.monotonic()
    with pytest.raises(LoamError, match=r"graphs nest 65 deep, past Loam's limit of 64 .*MAX_NESTING"):
        loam.build(model)
    assert time.monotonic() - start < 30


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _symbolic_mlp(tmp_path: Path, backend: str) -> tuple[object, object]:
    """The MLP with its batch axis named N: (its module for `backend`, its weights)."""
    mlp = Path(__file__).resolve().parents[1] / "examples" / "mlp"
    text = (
        (mlp / "mlp.onnxtext")
        .read_text()
        .replace("float[4,8] x", "float[N,8] x")
        .replace("float[4,3] y", "float[N,3] y")
    )
    (tmp_path / "mlp.onnxtext").write_text(text)
    (tmp_path / "mlp.safetensors").write_bytes((mlp / "mlp.safetensors").read_bytes())
    options = loam.Options.from_toml(mlp / "loam.toml")
    module = loam.build(tmp_path / "mlp.onnxtext", options=options, backend=backend).module
    return module, module.Weights.load_file(str(tmp_path / "mlp.safetensors"))


def test_forward_refuses_extents_its_buffers_cannot_hold(tmp_path: Path) -> None:
    """A broadcast view costs nothing to pass; the buffers it would make are refused before allocation."""
    module, weights = _symbolic_mlp(tmp_path, "numpy")
    huge = np.broadcast_to(np.ones(8, np.float32), (2**34, 8))
    with pytest.raises(
        module.ShapeError, match=r"buffer of extents \[17179869184, 16\] .*\(x axis 0 gives N = 17179869184\)"
    ):
        module.forward(weights, huge)
    assert module.forward(weights, np.ones((3, 8), np.float32)).shape == (3, 3)


def test_an_onnxtext_name_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bad.onnxtext"
    text = (Path(__file__).resolve().parents[1] / "examples" / "mlp" / "mlp.onnxtext").read_bytes()
    path.write_bytes(text.replace(b"[act1]", b"[a\xffct1]"))
    run = _cli_build(path)
    assert run.returncode == 1, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("loam: error:")]
    assert len(errors) == 1 and f"{path}: the model is not UTF-8 text (byte" in errors[0], run.stderr


@pytest.mark.parametrize("rows", [2**34, 2**27], ids=["past Loam's limit", "past the device's binding"])
def test_a_wgsl_forward_refuses_extents_its_buffers_cannot_hold(tmp_path: Path, rows: int) -> None:
    """The WGSL module checks every buffer against Loam's limit and the device's binding size before it
    makes one: 2^27 rows of 16 floats are 8 GiB, past what any WebGPU device binds."""
    module, weights = _symbolic_mlp(tmp_path, "wgsl")
    huge = np.broadcast_to(np.ones(8, np.float32), (rows, 8))
    with pytest.raises(module.ShapeError, match=rf"buffer of extents \[\d+\] .*\(x axis 0 gives N = {rows}\)"):
        module.forward(weights, huge)
    assert module.forward(weights, np.ones((3, 8), np.float32)).shape == (3, 3)
