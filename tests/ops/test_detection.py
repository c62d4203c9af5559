"""NonMaxSuppression (`loam/ops/detection.py`) beyond the conformance cases: symbolic extents with a
kernel reading the selected count, folding, an iou_threshold outside [0, 1] at run time, and the
build's refusals.

The conformance suites hold the numbers: ONNX's node cases, and the operators suite against
onnxruntime over both box formats, thresholds, limits, batches, classes and tied scores.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from loam.core.errors import ShapeError, UnsupportedError
from loam.testing import assert_same, build_for, run_built, run_onnxruntime

RNG = np.random.default_rng(11)
SCALARS = ["max", "iou", "score"]


def _model(boxes: list, scores: list, *, consts: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """NMS over inputs (those in `consts` as Constants), then the sum of the selected rows, so a kernel
    after it reads the count only the run knows."""
    consts = consts or {}
    nodes = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(v)) for k, v in consts.items()]
    nodes += [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", *SCALARS], ["sel"], center_point_box=0),
        helper.make_node("Cast", ["sel"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["f"], ["y"], keepdims=0),
    ]
    shapes = {"boxes": boxes, "scores": scores, "max": [1], "iou": [1], "score": [1]}
    types = {"max": TensorProto.INT64}
    inputs = [
        helper.make_tensor_value_info(k, types.get(k, TensorProto.FLOAT), shape)
        for k, shape in shapes.items()
        if k not in consts
    ]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    return helper.make_model(helper.make_graph(nodes, "nms", inputs, out), opset_imports=[helper.make_opsetid("", 11)])


def _feeds(b: int, c: int, n: int, most: int = 3, iou: float = 0.5, score: float = 0.2) -> dict[str, np.ndarray]:
    start = RNG.random((b, n, 2))
    boxes = np.concatenate([start, start + 0.1 + 0.3 * RNG.random((b, n, 2))], axis=-1).astype(np.float32)
    return {
        "boxes": boxes,
        "scores": RNG.random((b, c, n)).astype(np.float32),
        "max": np.array([most], np.int64),
        "iou": np.array([iou], np.float32),
        "score": np.array([score], np.float32),
    }


@pytest.mark.parametrize(("b", "c", "n"), [(1, 1, 1), (2, 3, 17), (3, 2, 40)])
def test_symbolic_extents_and_a_count_only_the_run_knows(b: int, c: int, n: int) -> None:
    model = _model(["B", "N", 4], ["B", "C", "N"])
    built = build_for(model)
    feeds = _feeds(b, c, n)
    assert_same(run_built(built, feeds), run_onnxruntime(model, feeds))


@pytest.mark.parametrize("known", [SCALARS, ["boxes", "scores", *SCALARS]], ids=["scalars", "all"])
def test_known_inputs(known: list[str]) -> None:
    """Known scalars are read at run time all the same; with every input known, stage 0 folds the node."""
    feeds = _feeds(2, 2, 12)
    consts = {k: feeds.pop(k) for k in known}
    model = _model([2, 12, 4], [2, 2, 12], consts=consts)
    built = build_for(model)
    assert ("kernel_non_max_suppression(" in built.source) == bool(feeds)
    assert_same(run_built(built, feeds), run_onnxruntime(model, feeds))


def test_an_iou_threshold_outside_0_1_is_a_data_error() -> None:
    built = build_for(_model([1, 5, 4], [1, 1, 5]))
    with pytest.raises(built.module.DataError, match=r"iou_threshold is 1\.5; it must lie in \[0, 1\]"):
        run_built(built, _feeds(1, 1, 5, iou=1.5))


def test_refusals() -> None:
    with pytest.raises(ShapeError, match="the boxes of boxes and scores: extents 5 and 6 differ"):
        build_for(_model([1, 5, 4], [1, 1, 6]))
    with pytest.raises(ShapeError, match="the coordinates of a box: extents 3 and 4 differ"):
        build_for(_model([1, 5, 3], [1, 1, 5]))
    with pytest.raises(ShapeError, match="boxes must have rank 3"):
        build_for(_model([5, 4], [1, 1, 5]))
    model = _model([1, 5, 4], [1, 1, 5])
    model.graph.input[2].type.tensor_type.shape.dim[0].dim_value = 2
    with pytest.raises(UnsupportedError, match="max_output_boxes_per_class must be one value"):
        build_for(model)
