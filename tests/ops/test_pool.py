"""The pooling operators against onnxruntime: MaxPool (with Indices), AveragePool, LpPool, Global*.

Each case is a one-node model over a small input; ceil_mode, dilations, auto_pad and
count_include_pad are crossed where onnxruntime computes them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import helper

from loam.errors import ShapeError, UnsupportedError
from loam.testing import assert_same, run_loam, run_onnxruntime

ONNX_TYPES = {
    np.dtype(np.float32): onnx.TensorProto.FLOAT,
    np.dtype(np.float64): onnx.TensorProto.DOUBLE,
    np.dtype(np.float16): onnx.TensorProto.FLOAT16,
    np.dtype(np.int8): onnx.TensorProto.INT8,
    np.dtype(np.uint8): onnx.TensorProto.UINT8,
}
RNG = np.random.default_rng(11)


def one_node(
    op: str, x: np.ndarray, opset: int = 19, outputs: Sequence[str] = ("y",), **attrs: object
) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], list(outputs), name="n", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", ONNX_TYPES[x.dtype], list(x.shape))],
        [
            helper.make_tensor_value_info(o, onnx.TensorProto.INT64 if i else ONNX_TYPES[x.dtype], None)
            for i, o in enumerate(outputs)
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def check(model: onnx.ModelProto, x: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert_same(run_loam(model, {"x": x}), run_onnxruntime(model, {"x": x}), rtol=rtol, atol=atol)


def data(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


GEOMETRIES = [
    {"kernel_shape": [3]},
    {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 1, 0, 1], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "dilations": [2, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 3], "strides": [1, 2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [2, 2], "auto_pad": "VALID", "strides": [2, 2]},
    {"kernel_shape": [2, 2, 2], "strides": [1, 2, 1], "pads": [0, 1, 0, 1, 0, 1]},
]


def _input(attrs: dict[str, object], dtype: type = np.float32) -> np.ndarray:
    rank = len(attrs["kernel_shape"])  # type: ignore[arg-type]
    return data(*(2, 3, 7, 6, 5)[: 2 + rank], dtype=dtype)


@pytest.mark.parametrize("attrs", GEOMETRIES)
def test_max_pool(attrs: dict[str, object]) -> None:
    x = _input(attrs)
    check(one_node("MaxPool", x, **attrs), x)


@pytest.mark.parametrize("attrs", GEOMETRIES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(attrs: dict[str, object], count_include_pad: int) -> None:
    x = _input(attrs)
    check(one_node("AveragePool", x, count_include_pad=count_include_pad, **attrs), x)


@pytest.mark.parametrize("attrs", [g for g in GEOMETRIES if "auto_pad" not in g])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(attrs: dict[str, object], p: int) -> None:
    x = _input(attrs)
    check(one_node("LpPool", x, opset=18, p=p, **attrs), x, rtol=1e-4)


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("attrs", GEOMETRIES[1:4])
def test_max_pool_indices(attrs: dict[str, object], storage_order: int) -> None:
    x = _input(attrs)
    check(one_node("MaxPool", x, outputs=("y", "i"), storage_order=storage_order, **attrs), x)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float16, np.float64])
def test_max_pool_element_types(dtype: type) -> None:
    x = (RNG.standard_normal((1, 2, 5, 5)) * 50).astype(dtype)
    check(one_node("MaxPool", x, kernel_shape=[2, 2], pads=[1, 1, 1, 1]), x)


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 2, 4, 3), (1, 2, 3, 2, 2)])
def test_global_pools(op: str, shape: tuple[int, ...]) -> None:
    x = data(*shape)
    check(one_node(op, x, opset=17), x, rtol=1e-4)


def test_old_opsets_read_as_today() -> None:
    x = data(1, 2, 6, 6)
    check(one_node("MaxPool", x, opset=1, kernel_shape=[2, 2], strides=[2, 2]), x)
    check(one_node("AveragePool", x, opset=7, kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), x)
    check(one_node("LpPool", x, opset=2, kernel_shape=[2, 2], p=3), x, rtol=1e-4)
    check(one_node("AveragePool", x, opset=10, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), x)


def test_average_pool_half() -> None:
    x = data(1, 2, 5, 5, dtype=np.float16)
    check(one_node("AveragePool", x, kernel_shape=[2, 2], pads=[1, 1, 0, 0]), x, rtol=1e-3, atol=1e-3)


def test_pool_refusals() -> None:
    x = data(1, 2, 5, 5)
    with pytest.raises(ShapeError, match="MaxPool node 'n': kernel_shape is required"):
        run_loam(one_node("MaxPool", x), {"x": x})
    with pytest.raises(ShapeError, match="AveragePool node 'n': spatial axis 0: the window spans 7"):
        run_loam(one_node("AveragePool", x, kernel_shape=[7, 1]), {"x": x})
    xi = x.astype(np.int8)
    with pytest.raises(UnsupportedError, match="AveragePool node 'n': element type i8 is not supported"):
        run_loam(one_node("AveragePool", xi, kernel_shape=[2, 2]), {"x": xi})
