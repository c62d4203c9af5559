"""One-node models of onnxruntime's `com.microsoft` operators, for the tests that run Loam and onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

ONNX_TYPE = {
    np.dtype(np.float32): onnx.TensorProto.FLOAT,
    np.dtype(np.float16): onnx.TensorProto.FLOAT16,
    np.dtype(np.float64): onnx.TensorProto.DOUBLE,
    np.dtype(np.int32): onnx.TensorProto.INT32,
    np.dtype(np.int64): onnx.TensorProto.INT64,
    np.dtype(np.uint8): onnx.TensorProto.UINT8,
}


def ms_model(
    op: str,
    inputs: Mapping[str, np.ndarray | None],
    weights: Mapping[str, np.ndarray] = {},
    outputs: Sequence[str] = ("y",),
    output_types: Sequence[int] | None = None,
    domain: str = "com.microsoft",
    **attrs: object,
) -> onnx.ModelProto:
    """One `op` node of `domain` (`com.microsoft`, or "" for onnxruntime's operators of the default
    domain) over the graph inputs then the initializers, in order; an input given as None is absent
    (an empty name), and so is an output named ""."""
    names = [k if v is not None else "" for k, v in inputs.items()] + list(weights)
    node = helper.make_node(op, names, list(outputs), domain=domain, **attrs)
    present = {k: v for k, v in inputs.items() if v is not None}
    first = next(iter(present.values()))
    types = output_types or [ONNX_TYPE[first.dtype]] * len(outputs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, ONNX_TYPE[v.dtype], list(v.shape)) for k, v in present.items()],
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(outputs, types, strict=True) if o],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    return model


def nbits_weights(
    rng: np.random.Generator, k: int, n: int, bits: int, block: int, zero: str | None, g_idx: bool, dtype: type
) -> dict[str, np.ndarray]:
    """Random MatMulNBits weights: packed B [N, blocks, block * bits / 8], scales of `dtype`, zero points as
    `zero` says ("packed" uint8, "float" of `dtype`, or None) and, with `g_idx`, a block per k."""
    blocks = -(-k // block)
    weights = {"B": rng.integers(0, 256, (n, blocks, block * bits // 8), dtype=np.uint8),
               "scales": (rng.random((n, blocks)) * 0.1 + 0.01).astype(dtype)}  # fmt: skip
    if zero == "packed":
        weights["zero_points"] = rng.integers(0, 256, (n, -(-blocks * bits // 8)), dtype=np.uint8)
    elif zero == "float":
        weights["zero_points"] = rng.integers(0, 1 << bits, (n, blocks)).astype(dtype)
    if g_idx:
        weights["g_idx"] = rng.integers(0, blocks, k).astype(np.int32)
    return weights
