"""Indexing operators against onnxruntime: Gather, GatherElements, ScatterElements (and Scatter), Range,
ConstantOfShape; indices of several ranks, negative indices, every reduction, refusals by message."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import loam.core.errors
from loam.testing import run_loam
from tests.ops.test_movement import X, check, i64, one_node

IDX = np.array([[[0, 2, 1, -1]], [[1, -3, 0, 0]]], np.int64)


@pytest.mark.parametrize(
    ("indices", "axis"),
    [(np.array([[0, -1], [2, 1]], np.int64), 1), (np.array(1, np.int64), -1), (i64(1, 0, 1), 0),
     (np.array([[[0]]], np.int32), 2)],
)  # fmt: skip
def test_gather(indices: np.ndarray, axis: int) -> None:
    check(one_node("Gather", X, {"i": indices}, {"axis": axis}), X)


def test_gather_runtime_indices() -> None:
    # Indices fed at run time (a token lookup): data is the initializer here.
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    node = helper.make_node("Gather", ["table", "x"], ["y"], name="lookup")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "table")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    ids = np.array([[0, 3, -1], [2, 2, 1]], np.int64)
    check(model, ids)


@pytest.mark.parametrize("axis", [1, -2])
def test_gather_elements(axis: int) -> None:
    check(one_node("GatherElements", X, {"i": IDX}, {"axis": axis}), X)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction: str) -> None:
    updates = np.full((2, 1, 4), 5, np.float32)
    attrs: dict[str, Any] = {"axis": 1, "reduction": reduction}
    check(one_node("ScatterElements", X, {"i": IDX, "u": updates}, attrs), X)


def test_scatter_opset_9_is_scatter_elements() -> None:
    updates = np.full((2, 1, 4), 5, np.float32)
    check(one_node("Scatter", X, {"i": np.where(IDX < 0, IDX + 3, IDX), "u": updates}, {"axis": 1}, opset=10), X)


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.int64, np.uint8, np.bool_])
def test_gather_types(dtype: type) -> None:
    x = (np.arange(24).reshape(2, 3, 4) % 2).astype(dtype)
    check(one_node("Gather", x, {"i": np.array([[0, -1]], np.int64)}, {"axis": 2}), x)
    check(one_node("GatherElements", x, {"i": IDX}, {"axis": 1}), x)


def folding_model(nodes: list[onnx.NodeProto], out: str, elem: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [*nodes, helper.make_node("Add", [out, "x"], ["y"], name="add")],
        "g",
        [helper.make_tensor_value_info("x", elem, [])],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(value))


@pytest.mark.parametrize(
    ("start", "limit", "delta"),
    [(0, 5, 1), (10, 4, -3), (1.0, 2.0, 0.25), (3, 3, 1)],
)
def test_range_folds(start: float, limit: float, delta: float) -> None:
    dtype = np.float32 if isinstance(start, float) else np.int64
    nodes = [const("s", np.array(start, dtype)), const("l", np.array(limit, dtype)), const("d", np.array(delta, dtype)),
             helper.make_node("Range", ["s", "l", "d"], ["r"], name="range")]  # fmt: skip
    expected = np.arange(start, limit, delta, dtype=dtype)
    model = folding_model(nodes, "r", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    model.graph.input[0].type.tensor_type.shape.dim.add().dim_value = len(expected)
    x = np.ones(len(expected), dtype)
    check(model, x)


def test_constant_of_shape_folds() -> None:
    value = numpy_helper.from_array(np.array([2], np.int32))
    nodes = [const("shape", i64(2, 3)), helper.make_node("ConstantOfShape", ["shape"], ["c"], name="cos", value=value)]
    model = folding_model(nodes, "c", onnx.TensorProto.INT32)
    for d in (2, 3):
        model.graph.input[0].type.tensor_type.shape.dim.add().dim_value = d
    check(model, np.ones((2, 3), np.int32))


def test_refusals() -> None:
    with pytest.raises(loam.core.errors.ShapeError, match="Gather node 'n': index 3 is outside"):
        run_loam(one_node("Gather", X, {"i": i64(3)}, {"axis": 1}), {"x": X})
    with pytest.raises(loam.core.errors.UnsupportedError, match="reduction 'mean'"):
        run_loam(one_node("ScatterElements", X, {"i": IDX, "u": X[:, :1]}, {"axis": 1, "reduction": "mean"}), {"x": X})
    runtime = folding_model([const("s", np.array(0.0, np.float32)), const("d", np.array(1.0, np.float32)),
                             helper.make_node("Range", ["s", "x", "d"], ["r"], name="range")], "r", 1)  # fmt: skip
    # A limit only the run gives makes a length only the run knows (tests/backends/test_result_lengths.py).
    (got,) = run_loam(runtime, {"x": np.array(3.0, np.float32)})
    np.testing.assert_array_equal(got, np.arange(0.0, 3.0, 1.0, dtype=np.float32) + 3.0)


def _gather_nd(batch: int | str) -> onnx.ModelProto:
    """GatherND of data [batch, 3, 4] by run-time index pairs [batch, 2, 2] along the first two axes."""
    node = helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd", batch_dims=0)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 3, 4]),
            helper.make_tensor_value_info("i", onnx.TensorProto.INT64, [batch, 2, 2]),
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch, 2, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_gather_nd_with_a_run_time_batch_and_indices_matches_onnxruntime() -> None:
    from loam.testing import build_for, run_built, run_onnxruntime

    model = _gather_nd("N")
    built = build_for(model)
    rng = np.random.default_rng(3)
    for batch in (2, 5):
        x = rng.standard_normal((batch, 3, 4)).astype(np.float32)
        i = np.stack([rng.integers(-2, 2, (batch, 2)), rng.integers(-3, 3, (batch, 2))], axis=-1)
        np.testing.assert_array_equal(
            run_built(built, {"x": x, "i": i})[0], run_onnxruntime(model, {"x": x, "i": i})[0]
        )
    with pytest.raises(
        built.module.DataError, match="GatherND: index 2 at position 0 of a tuple lies outside its axis of 2"
    ):
        run_built(built, {"x": x[:2], "i": np.full((2, 2, 2), 2, np.int64)})


def test_gather_nd_of_one_tuple_naming_one_element_is_a_scalar() -> None:
    # Indices of rank 1 (one tuple) as long as the data's rank: the result has no axes.
    from loam.testing import run_onnxruntime

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    node = helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd")
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3, 4]),
            helper.make_tensor_value_info("i", onnx.TensorProto.INT64, [3]),
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {"x": x, "i": np.array([1, -1, 2], np.int64)}
    (got,) = run_loam(model, feeds)
    assert got.shape == () and got == 22.0
    np.testing.assert_array_equal(got, run_onnxruntime(model, feeds)[0])
