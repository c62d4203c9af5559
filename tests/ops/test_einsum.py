"""Einsum against onnxruntime: explicit and implicit outputs, ellipses, traces, integer types."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import helper

from loam.core.errors import ShapeError
from loam.testing import assert_same, run_loam, run_onnxruntime

ONNX_TYPES = {np.dtype(np.float32): onnx.TensorProto.FLOAT, np.dtype(np.float64): onnx.TensorProto.DOUBLE,
              np.dtype(np.int32): onnx.TensorProto.INT32, np.dtype(np.int64): onnx.TensorProto.INT64}  # fmt: skip


def einsum_model(equation: str, arrays: Sequence[np.ndarray]) -> onnx.ModelProto:
    names = [f"x{i}" for i in range(len(arrays))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype], list(a.shape))
            for n, a in zip(names, arrays, strict=True)
        ],
        [helper.make_tensor_value_info("y", ONNX_TYPES[arrays[0].dtype], None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    return model


CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 2)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("ij->ji", [(2, 3)]),
    ("i,i", [(4,), (4,)]),
    ("i,j->ij", [(2,), (3,)]),
    ("...i->...", [(2, 3, 4)]),
    ("b i j , b j k -> b i k", [(1, 2, 3), (1, 3, 2)]),
]


@pytest.mark.parametrize(("equation", "shapes"), CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_einsum(equation: str, shapes: list[tuple[int, ...]], dtype: type) -> None:
    rng = np.random.default_rng(0)
    arrays = [rng.integers(-3, 4, s).astype(dtype) for s in shapes]
    feeds = {f"x{i}": a for i, a in enumerate(arrays)}
    model = einsum_model(equation, arrays)
    assert_same(run_loam(model, feeds), run_onnxruntime(model, feeds))


def test_einsum_refuses_mismatched_letters() -> None:
    arrays = [np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)]
    with pytest.raises(ShapeError, match=r"Einsum node 'y': letter 'j' has extent 3 and, in input 1, 4"):
        run_loam(einsum_model("ij,jk->ik", arrays), {"x0": arrays[0], "x1": arrays[1]})
