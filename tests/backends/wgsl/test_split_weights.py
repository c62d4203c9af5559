"""A weight past one storage binding that products read is uploaded in parts that each fit one
(`split-wide-weights`, `wgsl_resident`); one that anything else reads is refused naming it.

The binding here is lowered to 64 KiB in the IR, as a device limit the options could not lower, so
weights of a few hundred KiB must split and the modules stay small; what the module asks of the device
stays WebGPU's defaults.
"""

from __future__ import annotations

import re
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from xdsl.dialects.builtin import ModuleOp

from loam.backends.wgsl_module import wgsl_module
from loam.core.errors import UnsupportedError
from loam.dialects import build_contract as contract
from loam.driver.draft import draft_layout
from loam.driver.options import attach_options
from loam.driver.pipeline import BuildResult, build, import_source, pipeline_passes
from loam.driver.registry import read_model
from loam.frontends.context import make_context, parse_ir
from loam.passes.notes import build_notes
from loam.passes.split_wide_weights import part_extents
from loam.testing import run_onnxruntime

pytest.importorskip("wgpu")

LIMIT = 64 << 10
RNG = np.random.default_rng(11)


def _tensor(name: str, array: np.ndarray) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.FLOAT, array.shape, array.tobytes(), raw=True)


def _product(op: str, k: int, n: int, tail: str | None = None) -> onnx.ModelProto:
    """y = relu(x @ W + b) over a [batch, k] input: a Gemm with transB (W stored [n, k], as a fully
    connected layer stores it) or a MatMul (W stored [k, n]) and an Add; `tail` another op reading W."""
    w = (RNG.standard_normal((n, k) if op == "Gemm" else (k, n)) / np.sqrt(k)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    if op == "Gemm":
        nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["p"], transB=1)]
    else:
        nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["p"])]
    nodes.append(helper.make_node("Relu", ["p"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])]
    if tail is not None:
        nodes.append(helper.make_node(tail, ["W"], ["t"]))
        outputs.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])], outputs,
        [_tensor("W", w), _tensor("b", b)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _read(model: onnx.ModelProto, limit: int = LIMIT) -> ModuleOp:
    """The IR `build` reads `model` into, its options attached, with one storage binding holding `limit` bytes."""
    ir = read_model(model)
    attach_options(ir, draft_layout(model).options())
    contract.DEVICE_LIMITS.set(ir, {"maxStorageBufferBindingSize": limit})
    return ir


def _built(model: onnx.ModelProto | ModuleOp) -> tuple[str, types.ModuleType, list[str]]:
    """The WGSL module of `model` or of its read IR (its source, the module and the build notes), built
    as `build` builds it, one storage binding holding 64 KiB."""
    ir = _read(model) if isinstance(model, onnx.ModelProto) else model
    ctx = make_context()
    for p in pipeline_passes(backend="wgsl"):
        p.apply(ctx, ir)
    source, _, weights = wgsl_module(ir, beside=True)
    return source, import_source(source, "loam_split_weights", weights), build_notes(ir)


def _uploads(source: str) -> list[str]:
    """The names `_resident` uploads, in order."""
    return re.findall(r"g\.upload\('([^']+)'", source)


@pytest.mark.parametrize(
    ("op", "k", "n", "parts"),
    [
        ("Gemm", 96, 256, ["W[0:128]", "W[128:256]"]),  # 96 KiB, two parts of whole stored rows
        ("MatMul", 100, 400, ["W[:, 0:134]", "W[:, 134:267]", "W[:, 267:400]"]),  # 156 KiB, three uneven
    ],
)
def test_a_weight_past_one_binding_feeding_a_product_is_uploaded_in_parts_and_matches_onnxruntime(
    op: str, k: int, n: int, parts: list[str]
) -> None:
    model = _product(op, k, n)
    source, m, notes = _built(model)
    assert [u for u in _uploads(source) if u.startswith("W")] == parts
    assert f"'W' ({k * n * 4} bytes on the device, over one storage binding's {LIMIT}) is uploaded in {len(parts)} " \
        "parts" in "\n".join(notes)  # fmt: skip
    assert m._LIMITS["maxStorageBufferBindingSize"] == 128 << 20  # asked of the device: WebGPU's default
    weights = m.Weights.embedded()
    for batch in (1, 5):
        x = RNG.standard_normal((batch, k)).astype(np.float32)
        (want,) = run_onnxruntime(model, {"x": x})
        np.testing.assert_allclose(m.forward(weights, x), want, rtol=1e-5, atol=1e-5)


def test_a_weight_two_products_read_transposed_is_split_once_for_both() -> None:
    k, n = 96, 256
    w = (RNG.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    nodes = [helper.make_node("Gemm", [x, "W"], [y], transB=1) for x, y in (("a", "p"), ("b", "q"))]
    graph = helper.make_graph(
        [*nodes, helper.make_node("Add", ["p", "q"], ["y"])], "tied",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", k]) for x in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])], [_tensor("W", w)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    source, m, _ = _built(model)
    assert _uploads(source) == ["W[0:128]", "W[128:256]"]
    feeds = {x: RNG.standard_normal((3, k)).astype(np.float32) for x in ("a", "b")}
    (want,) = run_onnxruntime(model, feeds)
    np.testing.assert_allclose(m.forward(m.Weights.embedded(), *feeds.values()), want, rtol=1e-5, atol=1e-5)


def test_the_split_replays_from_the_ir_the_build_read() -> None:
    model = _product("MatMul", 100, 400)
    text = str(_read(model))  # the lowered binding is the IR's own: `loam-opt` replays what the build did
    assert _built(parse_ir(text, "read.mlir"))[0] == _built(model)[0]


def test_the_parts_are_the_fewest_that_fit_and_as_even_as_they_divide() -> None:
    assert part_extents(256, 384, LIMIT) == [128, 128]
    assert part_extents(400, 400, LIMIT) == [134, 133, 133]
    assert part_extents(4096, 9216 * 4, 128 << 20) == [2048, 2048]  # AlexNet's fc6
    assert part_extents(4096, 25088 * 4, 128 << 20) == [1024] * 4  # VGG-19's fc6
    assert part_extents(4096, 18432 * 4, 128 << 20) == [1366, 1365, 1365]  # ZFNet-512's
    assert part_extents(3, LIMIT + 4, LIMIT) == []  # one row past the binding: no parts fit


def test_the_numpy_module_never_splits() -> None:
    model = _product("Gemm", 96, 256)
    assert "split-wide-weights" not in [p.name for p in pipeline_passes(backend="numpy")]
    draft = draft_layout(model)
    result: BuildResult = build(model, options=draft.options(), backend="numpy")
    assert "W[0:128]" not in result.source and not [n for n in result.notes if "split weights" in n]


@pytest.mark.parametrize("tail", ["Neg", "Transpose"])
def test_a_weight_past_one_binding_that_another_op_reads_is_refused_naming_it(tail: str) -> None:
    model = _product("Gemm", 128, 512, tail=tail)  # 256 KiB
    with pytest.raises(UnsupportedError, match=r"weight 'W': 262144 bytes on the device, over maxStorageBuffer"):
        _built(model)


@pytest.mark.parametrize(("name", "weight", "parts"), [
    ("light_bvlc_alexnet", "fc6_w_0", 2), ("light_vgg19", "fc6_w_0", 4), ("light_zfnet512", "gpu_0/fc6_w_0", 3),
])  # fmt: skip
def test_the_light_zoo_cnns_past_one_binding_build_with_fc6_in_parts(name: str, weight: str, parts: int) -> None:
    from tests.models.real_exports import exports, light_zoo

    (export,) = [e for e in light_zoo.exports() if e.name == name]
    result = exports.built(export, "wgsl")
    (note,) = [n for n in result.notes if n.startswith("split weights:")]
    assert f"'{weight}' (" in note and f"in {parts} parts" in note
    uploads = [u for u in _uploads(result.source) if u.startswith(weight)]
    assert len(uploads) == parts and uploads[0] == f"{weight}[0:{4096 // parts + (4096 % parts > 0)}]"


def test_the_browser_weights_hold_each_part_as_a_tensor_of_its_own() -> None:
    from loam.backends.browser_module import residents
    from loam.backends.browser_weights import shard_files

    model = _product("Gemm", 96, 256)
    _, m, _ = _built(model)
    weights = m.Weights.embedded()
    found = {r.name: r.array for r in residents(m, weights)}
    whole = weights.W
    assert list(found) == ["W[0:128]", "W[128:256]", "b"]
    np.testing.assert_array_equal(found["W[0:128]"], whole[:128])
    np.testing.assert_array_equal(found["W[128:256]"], whole[128:])
    (shard,) = shard_files(list(residents(m, weights)))
    assert b'"W[0:128]"' in shard[1] and b'"W[128:256]"' in shard[1]
