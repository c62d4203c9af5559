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

from loam.core.errors import ShapeError, UnsupportedError
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
    """A model of one `op` node reading `x` (outputs untyped in shape, so nothing declares extents)."""
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
    with pytest.raises(UnsupportedError, match="AveragePool node 'n': X has element type i8; Loam computes"):
        run_loam(one_node("AveragePool", xi, kernel_shape=[2, 2]), {"x": xi})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_ceil_mode_drops_a_window_starting_in_the_end_pad(op: str) -> None:
    # Regression: 5 + 2 pads, kernel 2, stride 2: ceil gives 4 windows, but the 4th starts at padded
    # position 6, in the end pad, so it is dropped (onnx 1.23's shape inference keeps it).
    x = data(1, 1, 5, 5)
    model = one_node(op, x, kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    got = run_loam(model, {"x": x})
    assert got[0].shape == (1, 1, 3, 3)
    assert_same(got, run_onnxruntime(model, {"x": x}), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "extra"), [("MaxPool", {}), ("LpPool", {}), *(("AveragePool", {"count_include_pad": c}) for c in (0, 1))]
)
def test_ceil_mode_window_may_overrun_a_short_input(op: str, extra: dict[str, object]) -> None:
    # One row, kernel 2, stride 3: ceil((1 - 2) / 3) + 1 = 1 window, reading the row only.
    x = data(2, 2, 1, 5)
    attrs = {"kernel_shape": [2, 2], "strides": [3, 1], "ceil_mode": 1, "pads": [0, 1, 0, 0], **extra}
    check(one_node(op, x, **attrs), x)


@pytest.mark.parametrize("op", ["AveragePool", "LpPool"])
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("shape", [(1, 2, 6, 7), (1, 1, 3, 9)])
def test_same_with_a_kernel_shorter_than_its_stride(op: str, auto_pad: str, shape: tuple[int, ...]) -> None:
    # SAME's total pad is negative here; onnxruntime halves it toward zero and starts past element 0.
    x = data(*shape)
    check(one_node(op, x, kernel_shape=[1, 2], strides=[3, 4], auto_pad=auto_pad), x)


def test_window_with_no_tap_inside_the_input() -> None:
    # Dilation 2 over a 1-element axis padded by 1: the one window's taps are both pads.  onnxruntime:
    # MaxPool gives the lowest finite value (its index reads coordinate -1), AveragePool 0.
    x = data(1, 2, 3, 1)
    attrs = {"kernel_shape": [1, 2], "dilations": [1, 2], "pads": [0, 1, 0, 1]}
    check(one_node("MaxPool", x, outputs=("y", "i"), **attrs), x)
    check(one_node("MaxPool", x, outputs=("y", "i"), storage_order=1, **attrs), x)
    for count_include_pad in (0, 1):
        check(one_node("AveragePool", x, count_include_pad=count_include_pad, **attrs), x)


NAN = np.nan
INF = np.inf
# Pairs along the last axis: (nan, nan), (nan, 1), (2, nan), (-inf, -inf), (0.5, nan), (3, 1), ...
NAN_ROWS = np.array([[NAN, NAN, NAN, 1, 2, NAN, -INF, -INF], [0.5, NAN, 3, 1, NAN, INF, -INF, 2]], np.float32).reshape(
    1, 1, 2, 8
)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_nan_with_indices(dtype: type, storage_order: int) -> None:
    # Regression: onnxruntime scans each window keeping the first tap unless a later one is strictly
    # greater, so a NaN first tap wins (its index too), a later NaN never does, all-NaN gives NaN.
    x = NAN_ROWS.astype(dtype)
    model = one_node("MaxPool", x, outputs=("y", "i"), kernel_shape=[1, 2], strides=[1, 2], storage_order=storage_order)
    check(model, x)
    y, i = run_loam(model, {"x": x})
    assert np.isnan(y[0, 0, 0, :2]).all() and y[0, 0, 0, 2] == 2 and y[0, 0, 0, 3] == -INF
    assert list(i[0, 0, 0]) == ([0, 2, 4, 6] if storage_order == 0 else [0, 4, 8, 12])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_nan_dilated_and_f64(dtype: type) -> None:
    # Dilations and f64 go through onnxruntime's same scan.
    x = NAN_ROWS.astype(dtype).reshape(1, 1, 16)
    check(one_node("MaxPool", x, kernel_shape=[2], dilations=[2], strides=[2]), x)
    if dtype == np.float64:
        check(one_node("MaxPool", x, kernel_shape=[2], strides=[2]), x)


def test_max_pool_nan_ignored_without_indices() -> None:
    # Regression: without Indices or dilations onnxruntime's f32 kernels skip a NaN inside a window
    # ([nan, inf] gives inf); a window of NaNs only gives NaN.
    x = np.array([[NAN, NAN, NAN, INF, 0.5], [NAN, NAN, -1, 2, NAN]], np.float32).reshape(1, 1, 2, 5)
    model = one_node("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2])
    check(model, x)
    y = run_loam(model, {"x": x})[0]
    assert np.isnan(y[0, 0, 0, 0]) and y[0, 0, 0, 1] == INF


# -- Robustness regressions (found by tests/test_robustness.py's mutation sweep) ---------------------------


@pytest.mark.parametrize(("op", "flag"), [("MaxPool", "ceil_mode"), ("AveragePool", "count_include_pad")])
def test_flag_other_than_0_or_1_is_refused(op: str, flag: str) -> None:
    """onnxruntime reads ceil_mode=2 as false; Loam read it as true: the output extents differed."""
    model = one_node(op, data(1, 1, 4, 4), kernel_shape=[3, 3], strides=[2, 2], **{flag: 2})
    with pytest.raises(ShapeError, match=f"{op} node 'n': attribute '{flag}' must be one of 0, 1, got 2"):
        run_loam(model, {"x": data(1, 1, 4, 4)})
