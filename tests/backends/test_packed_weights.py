"""Weights kept in ggml blocks (`pack-quantized`, `loam/runtime/kernels/quantized.py`).

The oracle for every number is llama.cpp's own `gguf` package: its `quants.dequantize` widens the
same blocks, and onnxruntime runs the graph over those widened weights.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gguf import GGMLQuantizationType, quants
from onnx import TensorProto, helper, numpy_helper

import loam
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.runtime.dequant import block_dtype, dequant_blocks
from loam.runtime.kernels.quantized import kernel_gather_packed, kernel_matmul_packed
from loam.runtime.weights import _rotary_rows
from tests.checkpoints.external import external_initializers
from tests.checkpoints.gguf_writer import Tensor, quantize, write_gguf

RNG = np.random.default_rng(5)
ENCODINGS = ("Q4_0", "Q4_1", "Q8_0")


def _blocks(values: np.ndarray, encoding: str) -> tuple[np.ndarray, np.ndarray]:
    """`values` [R, C] quantized: (the blocks [R, C / 32], llama.cpp's widening of them)."""
    raw = quantize(values, encoding)
    blocks = np.frombuffer(raw, dtype=block_dtype(encoding)).reshape(values.shape[0], values.shape[1] // 32)
    kind = getattr(GGMLQuantizationType, encoding)
    widened = quants.dequantize(np.frombuffer(raw, dtype=np.uint8).reshape(values.shape[0], -1), kind)
    return blocks, widened.astype(np.float32)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("rows", [1, 3, 8, 9, 70])
def test_a_packed_product_is_the_product_over_the_widened_weight(encoding: str, rows: int) -> None:
    w = RNG.standard_normal((96, 128)).astype(np.float32)
    blocks, widened = _blocks(w, encoding)
    x = RNG.standard_normal((rows, 128)).astype(np.float32)
    got = kernel_matmul_packed(x, blocks, transposed=1)
    np.testing.assert_allclose(got, x @ widened.T, rtol=2e-5, atol=2e-5)
    # Leading axes stay; the untransposed form reads W [K, N] with blocks along N.
    x3 = RNG.standard_normal((2, rows, 96)).astype(np.float32)
    np.testing.assert_allclose(kernel_matmul_packed(x3, blocks, transposed=0), x3 @ widened, rtol=2e-5, atol=2e-5)
    # A checkpoint that stores the weight unquantized gives the same kernel a plain array.
    # (BLAS may sum in another order for the two layouts: an f32 rounding, not a different product.)
    np.testing.assert_allclose(kernel_matmul_packed(x, widened, transposed=1), x @ widened.T, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_packed_gather_widens_exactly_the_rows_it_picks(encoding: str) -> None:
    blocks, widened = _blocks(RNG.standard_normal((40, 64)).astype(np.float32), encoding)
    ids = np.array([[0, 39, 7], [7, 7, 2]], np.int64)
    got = kernel_gather_packed(blocks, ids, axis=0)
    assert got.dtype == np.float32 and np.array_equal(got, widened[ids])


def test_rotary_rows_undo_llama_cpps_interleave() -> None:
    heads, head_dim, cols = 3, 8, 5
    w = RNG.standard_normal((heads * head_dim, cols)).astype(np.float32)
    # llama.cpp's converter, as its convert script permutes q and k for its rotary embedding.
    stored = w.reshape(heads, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(heads * head_dim, cols)
    assert not np.array_equal(stored, w)
    assert np.array_equal(stored[_rotary_rows(heads * head_dim, heads)], w)


def _kernels(report: str) -> dict[str, str]:
    """The build report's lines as node -> kernels."""
    return dict(line.split(None, 1) for line in report.splitlines()[1:] if line.strip())


def _model(folder: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Embedding -> linear (MatMul by a Transpose) -> MatMul by a [K, N] weight, weights in a checkpoint."""
    weights = {
        "embed": RNG.standard_normal((50, 64)).astype(np.float32),
        "proj": RNG.standard_normal((96, 64)).astype(np.float32),
        "head": RNG.standard_normal((96, 32)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Gather", ["embed", "ids"], ["h"], name="lookup"),
        helper.make_node("Transpose", ["proj"], ["proj_t"], name="proj_t", perm=[1, 0]),
        helper.make_node("MatMul", ["h", "proj_t"], ["p"], name="linear"),
        helper.make_node("MatMul", ["p", "head"], ["y"], name="head_product"),
    ]
    inits = external_initializers(weights)
    graph = helper.make_graph(
        nodes,
        "packed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 32])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "packed.onnx"
    onnx.save_model(model, path)
    return path, weights


def widened_oracle(
    path: Path, weights: dict[str, np.ndarray], kinds: dict[str, str]
) -> tuple[ort.InferenceSession, dict[str, np.ndarray]]:
    """onnxruntime running the model at `path` over llama.cpp's widening of `weights` quantized as `kinds`
    says, and those widened weights."""
    widened = {}
    for name, value in weights.items():
        raw = np.frombuffer(quantize(value, kinds[name]), dtype=np.uint8).reshape(value.shape[0], -1)
        widened[name] = quants.dequantize(raw, getattr(GGMLQuantizationType, kinds[name])).astype(np.float32)
    oracle = onnx.load(path, load_external_data=False)
    del oracle.graph.initializer[:]
    oracle.graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in widened.items())
    return ort.InferenceSession(oracle.SerializeToString(), providers=["CPUExecutionProvider"]), widened


def test_a_quantized_checkpoint_stays_packed_and_computes_what_onnxruntime_does(tmp_path: Path) -> None:
    path, weights = _model(tmp_path)
    kinds = {"embed": "Q8_0", "proj": "Q4_1", "head": "Q4_0"}
    tensors = {name: Tensor(kinds[name], value.shape, quantize(value, kinds[name])) for name, value in weights.items()}
    gguf = write_gguf(tmp_path / "weights.gguf", tensors)
    options = draft_layout(path).options(Options(checkpoints=(gguf,)))
    result = loam.build(path, options=options)
    assert result.notes == []
    # The report names the packed kernels, node by node.
    kernels = _kernels(result.report)
    assert kernels["lookup"] == "kernel.gather_packed" and kernels["linear"] == "kernel.matmul_packed"
    assert kernels["head_product"] == "kernel.matmul_packed" and "proj_t" not in kernels
    module = result.module
    loaded = module.Weights.load_file(str(gguf))
    held = sum(getattr(loaded, attr).nbytes for _, attr, *_ in module.Weights._SPECS)
    stored = sum(len(t.data or b"") for t in tensors.values())
    assert held == stored  # the blocks as the file stores them: nothing widened at load
    session, widened = widened_oracle(path, weights, kinds)
    widened_at_load = module.Weights.load_file(str(gguf), packed=False)  # speed over memory, same numbers
    assert widened_at_load.proj.dtype == np.float32 and np.array_equal(widened_at_load.proj, widened["proj"])
    for shape in [(1, 1), (2, 7)]:  # a decode step (block dot products) and a prefill (widened rows)
        ids = RNG.integers(0, 50, shape).astype(np.int64)
        want = session.run(None, {"ids": ids})[0]
        np.testing.assert_allclose(module.forward(loaded, ids), want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(module.forward(widened_at_load, ids), want, rtol=1e-4, atol=1e-4)


def test_int8_activations_rounds_x_to_q8_blocks_for_the_transposed_products(tmp_path: Path) -> None:
    """With the option, x @ W^T over a GGUF's blocks multiplies integers (llama.cpp's q8 blocks), a note
    says so, and the module computes `kernel_matmul_packed(..., int8=1)`; x @ W stays float32.  Without
    it the module is the one built before the option existed: no `int8` in it."""
    path, weights = _model(tmp_path)
    kinds = {"embed": "Q8_0", "proj": "Q4_1", "head": "Q4_0"}
    tensors = {name: Tensor(kinds[name], value.shape, quantize(value, kinds[name])) for name, value in weights.items()}
    gguf = write_gguf(tmp_path / "weights.gguf", tensors)
    options = draft_layout(path).options(Options(checkpoints=(gguf,)))
    plain = loam.build(path, options=options)
    assert "int8=" not in plain.source
    result = loam.build(path, options=dataclasses.replace(options, int8_activations=True))
    assert len(result.notes) == 1 and "round x to int8 per block of 32" in result.notes[0]
    assert result.source.count("int8=1") == 1  # the linear layer; the [K, N] head stays float32
    module = result.module
    loaded = module.Weights.load_file(str(gguf))
    for shape in [(1, 1), (2, 7)]:
        ids = RNG.integers(0, 50, shape).astype(np.int64)
        h = dequant_blocks(loaded.embed[ids.reshape(-1)])
        p = kernel_matmul_packed(h, loaded.proj, transposed=1, int8=1)
        want = kernel_matmul_packed(p, loaded.head, transposed=0).reshape(*shape, 32)
        np.testing.assert_allclose(module.forward(loaded, ids), want, rtol=1e-5, atol=1e-4)
        float_product = plain.module.forward(plain.module.Weights.load_file(str(gguf)), ids)
        assert np.abs(module.forward(loaded, ids) - float_product).max() > 1e-4  # the rounding of x shows


def test_a_weight_another_kernel_reads_is_widened_at_load_and_the_notes_say_why(tmp_path: Path) -> None:
    path, weights = _model(tmp_path)
    model = onnx.load(path, load_external_data=False)
    model.graph.node.append(helper.make_node("Relu", ["proj"], ["proj_relu"], name="relu_of_proj"))
    model.graph.output.append(helper.make_tensor_value_info("proj_relu", TensorProto.FLOAT, [96, 64]))
    onnx.save_model(model, path)
    tensors = {name: Tensor("Q8_0", value.shape, quantize(value, "Q8_0")) for name, value in weights.items()}
    gguf = write_gguf(tmp_path / "weights.gguf", tensors)
    result = loam.build(path, options=draft_layout(path).options(Options(checkpoints=(gguf,))))
    assert result.notes == [
        f"checkpoint {gguf}: tensor 'proj' is Q8_0; node 'relu_of_proj' reads it as float32 (kernel.zip), "
        "so Weights dequantizes it to float32 at load"
    ]
    kernels = _kernels(result.report)
    assert kernels["linear"] == "kernel.matmul" and kernels["head_product"] == "kernel.matmul_packed"
    loaded = result.module.Weights.load_file(str(gguf))
    assert loaded.proj.dtype == np.float32 and loaded.embed.dtype.names is not None
