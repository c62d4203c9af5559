"""The reduce family against onnxruntime: Reduce*, ArgMax/ArgMin, TopK, CumSum, Softmax/LogSoftmax/Hardmax.

Each case is a one-node model at a chosen opset; shape-setting operands (axes, k, CumSum's axis)
are initializers, which the build knows.  Old opsets are checked in their restated meaning (axes
attribute, k attribute, Softmax's flattened block), and refusals by their messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from loam.core.errors import ShapeError, UnsupportedError
from loam.runtime.kernels.reduce import kernel_reduce, kernel_topk
from loam.testing import assert_same, run_loam, run_onnxruntime

NP_TO_ONNX = {
    np.dtype(np.float32): onnx.TensorProto.FLOAT,
    np.dtype(np.float64): onnx.TensorProto.DOUBLE,
    np.dtype(np.float16): onnx.TensorProto.FLOAT16,
    np.dtype(ml_dtypes.bfloat16): onnx.TensorProto.BFLOAT16,
    np.dtype(np.int32): onnx.TensorProto.INT32,
    np.dtype(np.int64): onnx.TensorProto.INT64,
    np.dtype(np.int8): onnx.TensorProto.INT8,
    np.dtype(np.uint8): onnx.TensorProto.UINT8,
    np.dtype(np.bool_): onnx.TensorProto.BOOL,
}


def one_node(
    op: str,
    x: np.ndarray,
    opset: int,
    *,
    consts: Mapping[str, np.ndarray] | None = None,
    outputs: Sequence[str] = ("y",),
    **attrs: object,
) -> onnx.ModelProto:
    """A model of one `op` node reading input `x` then the initializers `consts`, in order."""
    consts = dict(consts or {})
    node = helper.make_node(op, ["x", *consts], list(outputs), **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", NP_TO_ONNX[x.dtype], list(x.shape))],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


def check(model: onnx.ModelProto, x: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert_same(run_loam(model, {"x": x}), run_onnxruntime(model, {"x": x}), rtol=rtol, atol=atol)


def data(shape: Sequence[int], dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-5 if np.dtype(dtype).kind == "i" else 0, 6, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


REDUCE_OPS = [
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSumExp", "ReduceSumSquare",
]  # fmt: skip


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize(("axes", "keepdims"), [([1], 1), ([-1, 0], 0), ([], 1), ([0, 2], 1)])
def test_reduce_axes_input(op: str, axes: list[int], keepdims: int) -> None:
    x = data((2, 3, 4))
    consts = {"axes": np.array(axes, np.int64)} if axes else {}
    check(one_node(op, x, 18, consts=consts, keepdims=keepdims), x)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_axes_attribute(op: str) -> None:
    x = data((2, 3, 4))
    opset = 11 if op == "ReduceSum" else 13
    check(one_node(op, x, opset, axes=[0, -1], keepdims=0), x)
    check(one_node(op, x, opset), x)  # no axes: every axis, kept


def test_reduce_log_sum_of_positive_data() -> None:
    x = np.abs(data((3, 4))) + 0.5
    check(one_node("ReduceLogSum", x, 18, consts={"axes": np.array([1], np.int64)}), x)


def test_reduce_noop_with_empty_axes() -> None:
    x = data((2, 3))
    check(one_node("ReduceSum", x, 13, noop_with_empty_axes=1), x)


ALL_REDUCE_OPS = [*REDUCE_OPS, "ReduceLogSum"]


@pytest.mark.parametrize("op", ALL_REDUCE_OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("axes_input", [True, False])
def test_reduce_noop_keeps_the_elementwise_part(op: str, dtype: type, axes_input: bool) -> None:
    """noop_with_empty_axes skips only the reduction: ReduceL1 gives |x|, ReduceSumSquare x * x,
    ReduceLogSum log(x) (NaN for negative x, converted to an integer as onnxruntime does on x86)."""
    x = np.array([[-1, 2, 3], [4, 0, 7]]).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x = x * dtype(1.7)
    consts = {"axes": np.array([], np.int64)} if axes_input else {}
    check(one_node(op, x, 18, consts=consts, noop_with_empty_axes=1, keepdims=0), x)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMean", "ReduceProd"])
def test_reduce_element_types(op: str, dtype: type) -> None:
    x = data((3, 4), dtype)
    check(one_node(op, x, 18, consts={"axes": np.array([1], np.int64)}, keepdims=0), x, rtol=1e-3, atol=1e-3)


def test_reduce_over_an_empty_axis_gives_the_identity() -> None:
    x = np.zeros((2, 0, 3), np.float32)
    for kind, identity in [("sum", 0.0), ("prod", 1.0), ("max", -np.inf), ("min", np.inf), ("l2", 0.0)]:
        y = kernel_reduce(x, kind=kind, axes=(1,), keepdims=0)
        assert y.shape == (2, 3) and y.dtype == np.float32
        np.testing.assert_array_equal(y, np.full((2, 3), identity, np.float32))
    assert np.isneginf(kernel_reduce(x, kind="log_sum_exp", axes=(1,), keepdims=1)).all()


def test_reduce_max_of_bool() -> None:
    x = np.array([[True, False], [False, False]])
    check(one_node("ReduceMax", x, 20, consts={"axes": np.array([1], np.int64)}), x)


def test_reduce_folds_known_values() -> None:
    """A Constant operand is folded by stage 0 with the kernel's own function."""
    value = np.arange(6, dtype=np.int64).reshape(2, 3)
    const = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(value))
    red = helper.make_node("ReduceProd", ["c"], ["r"], axes=[1], keepdims=0)
    add = helper.make_node("Add", ["x", "r"], ["y"])
    graph = helper.make_graph(
        [const, red, add],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT64, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = np.array([1, 2], np.int64)
    assert_same(run_loam(model, {"x": x}), run_onnxruntime(model, {"x": x}))


def test_reduce_refusals() -> None:
    x = data((2, 3))
    with pytest.raises(UnsupportedError, match=r"ReduceSum node .*element type ui8"):
        run_loam(one_node("ReduceSum", x.astype(np.uint8), 13), {"x": x.astype(np.uint8)})
    with pytest.raises(ShapeError, match="reduced axis 2 is out of range for rank 2"):
        run_loam(_bad_axes_model(x), {"x": x})


def _bad_axes_model(x: np.ndarray) -> onnx.ModelProto:
    """ReduceMean over an axis the input lacks (built without the checker, which would refuse it)."""
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[2])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_reduce_axes_input_must_be_known() -> None:
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("axes", onnx.TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    with pytest.raises(UnsupportedError, match="ReduceSum node 'y': the axes input must be known at build time"):
        run_loam(model, {"x": data((2, 3)), "axes": np.array([1], np.int64)})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize(("axis", "keepdims", "last"), [(0, 1, 0), (-1, 0, 1), (1, 1, 1)])
def test_arg_reduce(op: str, axis: int, keepdims: int, last: int) -> None:
    x = data((3, 4), np.int32)  # small integers: many ties
    check(one_node(op, x, 13, axis=axis, keepdims=keepdims, select_last_index=last), x)


def test_arg_reduce_opset_11_default_axis() -> None:
    x = data((3, 4))
    check(one_node("ArgMax", x, 11), x)


@pytest.mark.parametrize(("k", "axis", "largest"), [(2, -1, 1), (3, 0, 0), (4, 1, 1)])
def test_topk(k: int, axis: int, largest: int) -> None:
    x = data((4, 5), np.int64)  # ties broken by the lower index
    model = one_node(
        "TopK", x, 11, consts={"k": np.array([k], np.int64)}, outputs=("v", "i"), axis=axis, largest=largest
    )
    check(model, x)


def test_topk_opset_1_attribute() -> None:
    x = data((3, 6))
    check(one_node("TopK", x, 1, outputs=("v", "i"), k=2), x)


def test_topk_kernel_ties() -> None:
    values, index = kernel_topk(np.array([1, 3, 3, 2, 3]), k=3, axis=0, largest=1, sorted=1)
    np.testing.assert_array_equal(index, [1, 2, 4])
    np.testing.assert_array_equal(values, [3, 3, 3])
    _, index = kernel_topk(np.array([2, 1, 1, 2]), k=2, axis=0, largest=0, sorted=1)
    np.testing.assert_array_equal(index, [1, 2])


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
def test_cumsum(exclusive: int, reverse: int, dtype: type) -> None:
    x = data((3, 4), dtype)
    model = one_node("CumSum", x, 14, consts={"axis": np.array(-1, np.int64)}, exclusive=exclusive, reverse=reverse)
    check(model, x)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize(("opset", "axis"), [(13, None), (13, 1), (11, None), (11, 2), (11, 0), (1, -2)])
def test_softmax_family(op: str, opset: int, axis: int | None) -> None:
    x = data((2, 3, 4))
    if op == "Hardmax":
        x[0, 1, :2] = 5.0  # a tie inside one row: the first maximum wins
    attrs = {} if axis is None else {"axis": axis}
    check(one_node(op, x, opset, **attrs), x)


def test_softmax_half() -> None:
    x = data((2, 5), np.float16)
    check(one_node("Softmax", x, 13), x, rtol=1e-3, atol=1e-3)


# -- Robustness regressions (found by tests/test_robustness.py's mutation sweep) ---------------------------


@pytest.mark.parametrize(
    ("op", "opset", "flag", "consts"),
    [
        ("ReduceSum", 18, "noop_with_empty_axes", {}),
        ("ReduceMax", 18, "keepdims", {"axes": np.array([1], np.int64)}),
        ("ArgMax", 13, "select_last_index", {}),
        ("TopK", 11, "largest", {"k": np.array([2], np.int64)}),
        ("CumSum", 14, "reverse", {"axis": np.array(1, np.int64)}),
    ],
)
def test_flags_other_than_0_or_1_are_refused(op: str, opset: int, flag: str, consts: dict[str, np.ndarray]) -> None:
    """onnxruntime reads noop_with_empty_axes=7 as false; Loam read it as true: a different output shape."""
    outputs = ("values", "indices") if op == "TopK" else ("y",)
    model = one_node(op, data((3, 4)), opset, consts=consts, outputs=outputs, **{flag: 7})
    with pytest.raises(ShapeError, match=f"attribute '{flag}' must be one of 0, 1, got 7"):
        run_loam(model, {"x": data((3, 4))})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_over_an_empty_axis_is_empty(op: str) -> None:
    """np.max has no identity on an empty axis: the kernel raised a raw ValueError at run time."""
    check(one_node(op, data((3, 0)), 13, axis=-1), data((3, 0)))
