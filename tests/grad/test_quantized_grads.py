"""The grad clauses of the quantized kernels (`loam.grad.quantized`) against independent oracles: the
activations' share of MatMulNBits (dA = g @ W, dbias = g summed, W widened here from the same blocks in
numpy) and of a packed ggml product (dx = g @ W over llama.cpp's own widening of the blocks), and the scale's
share of DequantizeLinear (dscale = g * (x - zero point) summed over what each scale multiplies); the WGSL
module computes the numpy module's gradients; and a gradient asked of a quantized weight's scales or zero
points, or of a packed weight, is refused naming the op.

A is float32 or float16 in MatMulNBits, and DequantizeLinear gives f32, f16 or bf16, so float64 finite
differences do not apply: each oracle is the derivative's closed form, computed from the model's own
integers and scales.  Every model's loss is sum(y * r), so the gradient of y is r.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import loam
from loam.core.errors import UnsupportedError
from loam.driver import pipeline
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.testing import build_for, run_built
from tests.checkpoints.external import external_initializers
from tests.grad.finite_differences import TRAINING
from tests.ops.microsoft.models import nbits_weights

# A failing draw is reported as drawn: each build compiles the module's kernels, and shrinking costs minutes.
NO_SHRINK = (Phase.explicit, Phase.generate)
ONNX_TYPE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
             np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
             np.dtype(np.int16): TensorProto.INT16, np.dtype(np.int32): TensorProto.INT32}  # fmt: skip


def loss_model(
    node: onnx.NodeProto, inputs: dict[str, np.ndarray], weights: dict[str, np.ndarray], out: tuple[int, ...],
    xs: list[str], out_type: int = TensorProto.FLOAT, opsets: tuple[tuple[str, int], ...] = (("", 17),),
) -> onnx.ModelProto:  # fmt: skip
    """`node` (output y, named "op") over graph `inputs` and initializers `weights`, loss = sum(y * r), and
    ONNX's Gradient of the loss with respect to `xs`."""
    node.name = "op"
    grads = [f"d_{x}" for x in xs]
    nodes = [node, helper.make_node("Mul", ["y", "r"], ["yr"]),
             helper.make_node("ReduceSum", ["yr"], ["loss"], keepdims=0),
             helper.make_node("Gradient", [*xs, "r"], grads, domain=TRAINING, xs=xs, zs=["r"], y="loss")]  # fmt: skip
    values = [helper.make_tensor_value_info(k, ONNX_TYPE[v.dtype], list(v.shape)) for k, v in inputs.items()]
    values.append(helper.make_tensor_value_info("r", out_type, list(out)))
    outputs = [helper.make_tensor_value_info("loss", out_type, [])]
    outputs += [helper.make_tensor_value_info(f"d_{x}", ONNX_TYPE[inputs[x].dtype], list(inputs[x].shape)) for x in xs]
    graph = helper.make_graph(nodes, "g", values, outputs, [numpy_helper.from_array(v, k) for k, v in weights.items()])
    imports = [helper.make_opsetid(d, v) for d, v in opsets] + [helper.make_opsetid(TRAINING, 1)]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    return model


# -- MatMulNBits ----------------------------------------------------------------------------------------------


def unpacked(packed: np.ndarray, bits: int) -> np.ndarray:
    """The `bits`-bit integers uint8 `packed` [rows, bytes] holds, low bits first, as int64 [rows, integers]."""
    mask = (1 << bits) - 1
    codes = [(packed.astype(np.int64) >> (bits * i)) & mask for i in range(8 // bits)]
    return np.stack(codes, axis=-1).reshape(packed.shape[0], -1)


def nbits_weight(w: dict[str, np.ndarray], k: int, n: int, bits: int, block: int) -> np.ndarray:
    """W [N, K] = (q - zero point) * scale, in float64, from MatMulNBits's blocks as onnxruntime reads them."""
    blocks = -(-k // block)
    q = unpacked(w["B"].reshape(n, -1), bits)[:, :k]
    zero = w.get("zero_points")
    if zero is None:
        z = np.full((n, blocks), 1 << (bits - 1))
    elif zero.dtype == np.uint8:
        z = unpacked(zero.reshape(n, -1), bits)[:, :blocks]
    else:
        z = zero.reshape(n, blocks).astype(np.float64)
    at = w["g_idx"].astype(np.int64) if "g_idx" in w else np.arange(k) // block
    s = w["scales"].reshape(n, blocks).astype(np.float64)
    return (q - z[:, at]) * s[:, at]


def nbits_case(draw: st.DrawFn) -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A MatMulNBits node of drawn bits, block, K (whole blocks or not), zero points (none, packed uint8 or
    of A's type), g_idx, bias and A's rank (a vector, a matrix, a batch); the model, its feeds and its
    initializers."""
    bits, block = draw(st.sampled_from([2, 4, 8])), draw(st.sampled_from([16, 32]))
    k, n = draw(st.integers(1, 70)), draw(st.integers(1, 6))
    zero = draw(st.sampled_from([None, "packed"] + (["float"] if bits != 8 else [])))
    g_idx = bits == 4 and zero != "packed" and draw(st.booleans())
    bias = draw(st.booleans())
    lead = draw(st.sampled_from([(), (3,), (2, 2)]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    w = nbits_weights(rng, k, n, bits, block, zero, g_idx, np.float32)
    feeds = {"A": rng.standard_normal((*lead, k)).astype(np.float32)}
    if bias:
        feeds["bias"] = rng.standard_normal(n).astype(np.float32)
    names = ["A", "B", "scales", "zero_points" if zero else "", "g_idx" if g_idx else "", "bias" if bias else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("MatMulNBits", names, ["y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=block)  # fmt: skip
    model = loss_model(node, feeds, w, (*lead, n), list(feeds), opsets=(("", 17), ("com.microsoft", 1)))
    feeds["r"] = rng.standard_normal((*lead, n)).astype(np.float32)
    return model, feeds, w


@settings(max_examples=8, deadline=None, derandomize=True, phases=NO_SHRINK)
@given(data=st.data())
def test_matmul_nbits_sends_a_g_at_the_widened_weight_and_the_bias_g_summed(data: st.DataObject) -> None:
    model, feeds, w = data.draw(st.composite(nbits_case)())
    node = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    weight = nbits_weight(w, attrs["K"], attrs["N"], attrs["bits"], attrs["block_size"])
    _, d_a, *d_bias = run_built(build_for(model), feeds)
    r = feeds["r"].astype(np.float64)
    scale = max(1.0, float(np.abs(r).max() * np.abs(weight).sum(axis=0).max()))
    np.testing.assert_allclose(d_a, r @ weight, rtol=1e-5, atol=1e-6 * scale, err_msg="d loss / d A")
    if "bias" in feeds:
        np.testing.assert_allclose(d_bias[0], r.reshape(-1, attrs["N"]).sum(axis=0), rtol=1e-5, atol=1e-5)


# -- DequantizeLinear ------------------------------------------------------------------------------------------


def dequantize_case(draw: st.DrawFn) -> tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray]:
    """DequantizeLinear of drawn integer x with a scale per tensor, per axis or per block (the last one cut
    short), a zero point or none; the model (gradient asked of the scale), its feeds and the oracle's dscale."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    axis = draw(st.integers(0, len(shape) - 1))
    layout = draw(st.sampled_from(["tensor", "axis", "block"]))
    block = draw(st.integers(1, 3)) if layout == "block" else 0
    if layout == "tensor":
        scale_shape: tuple[int, ...] = draw(st.sampled_from([(), (1,)]))
    elif layout == "axis":
        scale_shape = (shape[axis],)
    else:
        scale_shape = tuple(-(-d // block) if a == axis else d for a, d in enumerate(shape))
    dtype = draw(st.sampled_from([np.int8, np.uint8, np.int16]))
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    scale = np.asarray(rng.random(scale_shape) + 0.5, np.float32)
    feeds = {"x": x, "scale": scale}
    zero = draw(st.booleans())
    if zero:
        feeds["zero"] = np.asarray(rng.integers(info.min, info.max, scale_shape, endpoint=True), dtype)
    attrs = {"axis": axis - len(shape) if draw(st.booleans()) else axis} | ({"block_size": block} if block else {})
    node = helper.make_node("DequantizeLinear", list(feeds), ["y"], **attrs)
    model = loss_model(node, feeds, {}, shape, ["scale"], opsets=(("", 21),))
    r = rng.standard_normal(shape)
    feeds["r"] = r.astype(np.float32)
    # dscale: r * (x - zero point), summed over the elements each scale multiplies.
    shifted = x.astype(np.float64)
    z = feeds["zero"].astype(np.float64) if zero else np.zeros(scale_shape)
    if layout == "block":
        shifted -= np.repeat(z, block, axis=axis).take(range(shape[axis]), axis=axis)
        owner = np.arange(shape[axis]) // block
        per = np.moveaxis(r * shifted, axis, 0)
        want = np.moveaxis(np.stack([per[owner == i].sum(axis=0) for i in range(scale_shape[axis])]), 0, axis)
    elif layout == "axis":
        along = [-1 if a == axis else 1 for a in range(len(shape))]
        shifted -= z.reshape(along)
        want = np.moveaxis(r * shifted, axis, 0).reshape(shape[axis], -1).sum(axis=1)
    else:
        want = (r * (shifted - z.reshape(()))).sum().reshape(scale_shape)
    return model, feeds, want


@settings(max_examples=10, deadline=None, derandomize=True, phases=NO_SHRINK)
@given(data=st.data())
def test_dequantize_linear_sends_the_scale_g_times_x_less_the_zero_point(data: st.DataObject) -> None:
    model, feeds, want = data.draw(st.composite(dequantize_case)())
    _, d_scale = run_built(build_for(model), feeds)
    assert d_scale.shape == want.shape
    np.testing.assert_allclose(d_scale, want, rtol=1e-5, atol=1e-3)


# -- the device -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [nbits_case, dequantize_case])
@settings(max_examples=2, deadline=None, derandomize=True, phases=NO_SHRINK)
@given(data=st.data())
def test_the_wgsl_module_computes_the_numpy_modules_gradients(case: object, data: st.DataObject) -> None:
    """The same clauses on the device: float32 gradients within 1e-4 of the numpy module's."""
    model, feeds, _ = data.draw(st.composite(case)())  # type: ignore[arg-type]
    want = run_built(build_for(model), feeds)
    got = run_built(build_for(model, backend="wgsl", fuse="dispatch", host_fallback=True), feeds)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * scale, err_msg=f"output {k}")


# -- what is refused --------------------------------------------------------------------------------------------


def _nbits_asking(of: str) -> onnx.ModelProto:
    """MatMulNBits with its scales and float zero points graph inputs, the gradient asked of `of` too."""
    rng = np.random.default_rng(0)
    feeds = {"A": np.ones((2, 16), np.float32), "scales": np.ones((3, 1), np.float32),
             "zero_points": np.zeros((3, 1), np.float32)}  # fmt: skip
    b = {"B": rng.integers(0, 256, (3, 1, 8), dtype=np.uint8)}
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zero_points"], ["y"], domain="com.microsoft",
                            K=16, N=3, bits=4, block_size=16)  # fmt: skip
    return loss_model(node, feeds, b, (2, 3), ["A", of], opsets=(("", 17), ("com.microsoft", 1)))


def _gather_block_quantized_scales() -> onnx.ModelProto:
    feeds = {"scales": np.ones((4, 1), np.float32), "ids": np.zeros(2, np.int32)}
    data = {"data": np.zeros((4, 8), np.uint8)}
    node = helper.make_node("GatherBlockQuantized", ["data", "ids", "scales"], ["y"], domain="com.microsoft",
                            bits=4, block_size=16)  # fmt: skip
    return loss_model(node, feeds, data, (2, 16), ["scales"], opsets=(("", 17), ("com.microsoft", 1)))


REFUSED = {
    "nbits_scales": (lambda: _nbits_asking("scales"), r"kernel\.matmul_nbits 'op': no grad clause for the scales'"),
    "nbits_zero_points": (lambda: _nbits_asking("zero_points"), r"kernel\.matmul_nbits 'op': .*zero points' share"),
    "gather_block_quantized": (_gather_block_quantized_scales, r"kernel\.gather_block_quantized 'op': .*scales' share"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_gradient_asked_of_a_quantized_weights_parts_is_refused_naming_the_op(name: str) -> None:
    model, message = REFUSED[name]
    with pytest.raises(UnsupportedError, match=message):
        build_for(model())


# -- a product over ggml blocks ---------------------------------------------------------------------------------


def _packed_then_differentiated(*args: object, **kwargs: object) -> list[object]:
    """The build's passes with `pack-quantized` before `differentiate`, so the gradient walk meets
    `kernel.matmul_packed` (as a replay of the packed IR with `loam-opt -p ...,differentiate` does)."""
    from loam.passes.differentiate import DifferentiatePass
    from loam.passes.pack_quantized import PackQuantizedPass

    passes = list(ORIGINAL_PASSES(*args, **kwargs))  # type: ignore[arg-type]
    packs = [p for p in passes if isinstance(p, PackQuantizedPass)]
    at = next(i for i, p in enumerate(passes) if isinstance(p, DifferentiatePass))
    rest = [p for p in passes if not isinstance(p, PackQuantizedPass)]
    return [*rest[:at], *packs, *rest[at:]]


ORIGINAL_PASSES = pipeline.pipeline_passes


def _packed_build(folder: Path, encoding: str, transposed: bool, grad: tuple[str, ...]) -> tuple[object, ...]:
    """x * v (v a float weight) times W [N, K] (MatMul by Transpose(W): transposed) or W [K, N] kept in
    ggml blocks of `encoding`; the built module, its weights, v and llama.cpp's widening of W."""
    from gguf import GGMLQuantizationType, quants

    from tests.checkpoints.gguf_writer import Tensor, quantize, write_gguf

    rng = np.random.default_rng(7)
    k, n = (64, 32) if transposed else (32, 64)  # blocks of 32 run along W's rows
    values = {"w": rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32),
              "v": rng.standard_normal(k).astype(np.float32)}  # fmt: skip
    nodes = [helper.make_node("Mul", ["x", "v"], ["h"], name="scale")]
    if transposed:
        nodes += [helper.make_node("Transpose", ["w"], ["w_t"], name="w_t", perm=[1, 0]),
                  helper.make_node("MatMul", ["h", "w_t"], ["y"], name="op")]  # fmt: skip
    else:
        nodes.append(helper.make_node("MatMul", ["h", "w"], ["y"], name="op"))
    inits = external_initializers(values)
    graph = helper.make_graph(nodes, "packed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, n])], inits)  # fmt: skip
    path = folder / "packed.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    raw = quantize(values["w"], encoding)
    tensors = {"w": Tensor(encoding, values["w"].shape, raw), "v": Tensor("F32", (k,), values["v"].tobytes())}
    gguf = write_gguf(folder / "weights.gguf", tensors)
    widened = quants.dequantize(np.frombuffer(raw, np.uint8).reshape(values["w"].shape[0], -1),
                                getattr(GGMLQuantizationType, encoding)).astype(np.float64)  # fmt: skip
    result = loam.build(path, options=draft_layout(path).options(Options(checkpoints=(gguf,))), grad=grad)
    return result, result.module.Weights.load_file(str(gguf)), values["v"], widened


@pytest.mark.parametrize("encoding", ["Q4_0", "Q4_1", "Q8_0"])
@pytest.mark.parametrize("transposed", [True, False])
def test_a_packed_product_sends_x_g_at_the_widened_weight(
    encoding: str, transposed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "pipeline_passes", _packed_then_differentiated)
    result, weights, v, widened = _packed_build(tmp_path, encoding, transposed, ("v",))
    assert "kernel.matmul_packed" in result.report
    assert weights.w.dtype.names is not None  # the blocks, never widened at load
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, v.size)).astype(np.float32)
    g = rng.standard_normal((3, widened.shape[0] if transposed else widened.shape[1])).astype(np.float32)
    y, d_v = result.module.forward(weights, x, g)
    product = widened.T if transposed else widened  # y = (x * v) @ product
    np.testing.assert_allclose(y, (x * v) @ product, rtol=1e-4, atol=1e-4)
    want = (x * (g.astype(np.float64) @ product.T)).sum(axis=0)  # d v = sum over rows of x * (g @ product^T)
    np.testing.assert_allclose(d_v, want, rtol=1e-4, atol=1e-4)


def test_a_gradient_asked_of_a_packed_weight_is_refused_naming_the_op(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "pipeline_passes", _packed_then_differentiated)
    with pytest.raises(UnsupportedError, match=r"kernel\.matmul_packed 'op': no grad clause for the packed weight's"):
        _packed_build(tmp_path, "Q8_0", True, ("w",))
