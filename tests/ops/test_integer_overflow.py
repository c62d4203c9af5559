"""Integer results past their type's range, against onnxruntime.

ONNX leaves integer overflow undefined; onnxruntime's CPU kernels define it two ways, and Loam follows
each: Reduce* (other than ReduceMax/ReduceMin) compute in f64 and saturate at the type's range, while
running sums and products (CumSum, CumProd) and MatMul wrap in two's complement.  Each case is a
one-node model whose input crosses the range, so a wrap where onnxruntime saturates (or the reverse)
fails it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from loam.core.poly import Poly
from loam.ops.reduce import symbolic_reduce
from loam.runtime.kernels.reduce import kernel_reduce
from loam.testing import assert_same, run_loam, run_onnxruntime

ONNX_TYPE = {np.dtype(np.int32): onnx.TensorProto.INT32, np.dtype(np.int64): onnx.TensorProto.INT64}

REDUCE_OPS = [
    "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
    "ReduceLogSumExp",
]  # fmt: skip


def one_node(
    op: str, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray], opset: int, **attrs: object
) -> onnx.ModelProto:
    """A model of one `op` node reading the graph inputs `inputs`, then the initializers `consts`."""
    node = helper.make_node(op, [*inputs, *consts], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, ONNX_TYPE[v.dtype], list(v.shape)) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


def check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    assert_same(run_loam(model, feeds), run_onnxruntime(model, feeds))


def crossing(dtype: type) -> np.ndarray:
    """Rows whose reductions leave `dtype`'s range upward, downward, or come back inside it exactly."""
    top, low = int(np.iinfo(dtype).max), int(np.iinfo(dtype).min)
    half = top // 2 + 5
    return np.array(
        [
            [top, 1, 5, 0],  # a sum just past the top (2**31 - 1 + 6 wraps to -2**31 + 5)
            [low, -1, -5, 3],  # past the lowest
            [top, 1, -10, 2],  # past the top and back inside: top - 7 exactly
            [half, half, -(top // 2), 1],  # ReduceProd past the lowest, ReduceMean of a sum past the top
            [low, low, low, low],  # |lowest| is past the top: ReduceL1 and ReduceL2 saturate
            [2**16, 2**16, 3, 1],  # products and squares past an i32's top
            [-2, 0, -7, 0],  # ReduceLogSum of a negative sum: the lowest value
            [7, 7, -3, 7],  # ReduceLogSumExp: 7 + log(3) truncated
        ],
        dtype=dtype,
    )


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize(("axes", "keepdims"), [([1], 0), ([0], 1), ([], 0)])
def test_integer_reductions_saturate_as_onnxruntime(op: str, dtype: type, axes: list[int], keepdims: int) -> None:
    x = crossing(dtype)
    consts = {"axes": np.array(axes, np.int64)} if axes else {}
    check(one_node(op, {"x": x}, consts, 18, keepdims=keepdims), {"x": x})


def test_reduce_sum_i32_overflow_is_the_top() -> None:
    """The operators suite's case: 2**31 - 1 + 1 + 5 is 2**31 - 1, not the wrapped -2**31 + 5."""
    x = np.array([2**31 - 1, 1, 5], np.int32)
    model = one_node("ReduceSum", {"x": x}, {}, 13, keepdims=0)
    (y,) = run_loam(model, {"x": x})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.int32(2**31 - 1))
    check(model, {"x": x})


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reductions_of_no_axis_keep_the_saturated_elementwise_part(op: str) -> None:
    """noop_with_empty_axes: |lowest| and lowest squared saturate, the log of a non-positive value is the lowest."""
    x = np.array([[-(2**31), 2**31 - 1, -3], [0, 46341, 4]], np.int32)
    check(one_node(op, {"x": x}, {"axes": np.array([], np.int64)}, 18, noop_with_empty_axes=1), {"x": x})


def test_reduce_folded_at_build_time_saturates() -> None:
    """A Constant operand is folded by stage 0 with the kernel's function: the same saturated number."""
    value = np.array([[2**31 - 1, 9], [-(2**31), -9]], np.int32)
    const = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(value))
    red = helper.make_node("ReduceSum", ["c", "axes"], ["r"], keepdims=0)
    add = helper.make_node("Add", ["x", "r"], ["y"])
    graph = helper.make_graph(
        [const, red, add],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.INT32, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT32, [2])],
        [numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = np.array([-1, 1], np.int32)
    (y,) = run_loam(model, {"x": x})
    np.testing.assert_array_equal(y, np.array([2**31 - 2, -(2**31) + 1], np.int32))
    check(model, {"x": x})


def test_symbolic_reduce_saturates_as_the_kernel() -> None:
    """An i32 value the build knows as polynomials reduces as the kernel reduces its numbers."""
    numbers = np.array([[2**31 - 1, 1, 5], [-(2**31), -1, 2]], np.int32)
    polys = np.array([[Poly.const(int(v)) for v in row] for row in numbers], dtype=object)
    for kind in ("sum", "prod", "l1", "sum_square", "mean"):
        folded = symbolic_reduce(polys, kind, (1,), False, "i32")
        assert folded is not None
        want = kernel_reduce(numbers, kind=kind, axes=(1,), keepdims=0)
        assert [p.const_value for p in folded] == want.tolist(), kind


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 1)])
def test_cumsum_wraps_as_onnxruntime(dtype: type, exclusive: int, reverse: int) -> None:
    x = crossing(dtype)
    model = one_node("CumSum", {"x": x}, {"axis": np.array(1, np.int64)}, 14, exclusive=exclusive, reverse=reverse)
    check(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_cumprod_wraps_as_onnxruntime(dtype: type) -> None:
    x = np.array([[2**20, 2**20, 3, -7], [2**31 - 1, 2, 2, 0]], dtype)
    check(one_node("CumProd", {"x": x}, {"axis": np.array(1, np.int64)}, 26), {"x": x})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_matmul_wraps_as_onnxruntime(dtype: type) -> None:
    top = int(np.iinfo(dtype).max)
    a = np.array([[top, 1, 3], [2, 3, -top], [top // 2 + 1, top // 2 + 1, 0]], dtype)
    b = np.array([[1, 0], [5, 1], [2, 2]], dtype)
    check(one_node("MatMul", {"a": a, "b": b}, {}, 13), {"a": a, "b": b})
