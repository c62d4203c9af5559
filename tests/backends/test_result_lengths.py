"""Lengths only the run knows (`loam.ops.base.result_length`): an operator whose output length its
input values decide (NonZero, Compress, Unique) gives a symbol that forward binds from the result,
so kernels after it run at any count, and what is owed of it is checked once it is bound."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.testing import assert_same, build_for, run_built, run_onnxruntime


def _model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, int, list]], opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


NONZERO = _model(
    [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["t"]),
        helper.make_node("Constant", [], ["flat"], value_ints=[-1]),
        helper.make_node("Reshape", ["t", "flat"], ["r"]),  # [2 * count]: a kernel that reads the count
        helper.make_node("Cast", ["r"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["f"], ["y"], keepdims=0),
    ],
    [("x", TensorProto.FLOAT, ["A", "B"])],
    opset=13,
)


@pytest.mark.parametrize(
    "x",
    [np.array([[0, 1, 2], [3, 0, 0]], np.float32), np.zeros((2, 2), np.float32), np.ones((4, 3), np.float32)],
    ids=["some", "none", "all"],
)
def test_kernels_after_nonzero_run_at_any_count(x: np.ndarray) -> None:
    built = build_for(NONZERO)
    assert "_env['nz[1]'] = nz.shape[1]  # the length node 'nz' gave" in built.source
    assert_same(run_built(built, {"x": x}), run_onnxruntime(NONZERO, {"x": x}))


COMPRESSED_SUM = _model(
    [
        helper.make_node("Compress", ["x", "c"], ["a"], axis=0),
        helper.make_node("Compress", ["x", "d"], ["b"], axis=0),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ],
    [("x", TensorProto.FLOAT, ["N", 3]), ("c", TensorProto.BOOL, ["N"]), ("d", TensorProto.BOOL, ["N"])],
)


def test_an_owed_equality_of_two_run_lengths_is_checked_once_both_are_bound() -> None:
    built = build_for(COMPRESSED_SUM)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    feeds = {"x": x, "c": np.array([1, 0, 1, 0], bool), "d": np.array([0, 1, 1, 0], bool)}
    assert_same(run_built(built, feeds), run_onnxruntime(COMPRESSED_SUM, feeds))
    feeds["d"] = np.array([1, 1, 1, 0], bool)
    with pytest.raises(
        built.module.ShapeError, match=r"\(Add node 'y'\); node 'a' gives a\[0\] = 2, node 'b' gives b\[0\] = 3"
    ):
        run_built(built, feeds)


def test_unique_counts_feed_a_product() -> None:
    model = _model(
        [
            helper.make_node("Unique", ["x"], ["u", "", "", "n"], sorted=0),
            helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["u", "nf"], ["p"]),
            helper.make_node("ReduceSum", ["p"], ["y"], keepdims=1),
        ],
        [("x", TensorProto.FLOAT, ["N"])],
        opset=11,
    )
    built = build_for(model)
    for x in (np.array([3, 1, 3, 2, 1, 3], np.float32), np.array([5], np.float32)):
        assert_same(run_built(built, {"x": x}), run_onnxruntime(model, {"x": x}))


def test_a_range_over_run_time_bounds_gives_a_run_length_and_refuses_a_zero_delta() -> None:
    scalars = [(name, TensorProto.FLOAT, []) for name in ("start", "limit", "delta")]
    model = _model([helper.make_node("Range", ["start", "limit", "delta"], ["y"])], scalars, opset=11)
    built = build_for(model)
    for bounds in ((0.0, 5.0, 1.5), (3.0, -1.0, -0.5), (2.0, 2.0, 1.0)):
        feeds = {k: np.array(v, np.float32) for k, v in zip(("start", "limit", "delta"), bounds, strict=True)}
        assert_same(run_built(built, feeds), run_onnxruntime(model, feeds))
    with pytest.raises(built.module.DataError, match="Range's delta is 0"):
        run_built(built, {k: np.array(v, np.float32) for k, v in (("start", 0), ("limit", 1), ("delta", 0))})


@pytest.mark.parametrize(
    "x",
    [np.array([[0, 1, 2], [3, 0, 0]], np.float32), np.zeros((2, 2), np.float32), np.ones((4, 3), np.float32)],
    ids=["some", "none", "all"],
)
def test_the_wgsl_module_makes_a_buffer_sized_by_a_run_length_when_the_run_gives_it(x: np.ndarray) -> None:
    """NonZero runs on the host (--host-fallback); the kernels after it read its count, and their buffers
    are made once the run knows it (`g.late`), kept for the next call and grown when it needs more."""
    built = build_for(NONZERO, fuse="dispatch", backend="wgsl", host_fallback=True)
    assert "g.late(" in built.source
    assert_same(run_built(built, {"x": x}), run_onnxruntime(NONZERO, {"x": x}))
