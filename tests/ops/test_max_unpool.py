"""MaxUnpool against onnxruntime, with and without `output_shape`.

onnxruntime (as PyTorch's max_unpool, and as MaxPool's Indices count) reads each index as a flat
row-major position in the whole output, whose extents `output_shape` gives when present.  ONNX's
backend case `test_maxunpool_export_with_output_shape` stores another answer: its reference places the
indices in the extents kernel, strides and pads infer and pads that up to `output_shape`, so its
values land elsewhere.  Loam computes onnxruntime's; these tests hold it there.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from loam.core.errors import ShapeError
from loam.testing import assert_same, run_loam, run_onnxruntime


def unpool_model(
    x: np.ndarray, indices: np.ndarray, output_shape: list[int] | None, opset: int = 11, **attrs: object
) -> onnx.ModelProto:
    """One MaxUnpool node over X and I (graph inputs), `output_shape` an initializer when given."""
    inputs = ["x", "i", *(["shape"] if output_shape is not None else [])]
    node = helper.make_node("MaxUnpool", inputs, ["y"], **attrs)
    inits = [] if output_shape is None else [numpy_helper.from_array(np.array(output_shape, np.int64), "shape")]
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape)),
            helper.make_tensor_value_info("i", onnx.TensorProto.INT64, list(indices.shape)),
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def check(model: onnx.ModelProto, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
    feeds = {"x": x, "i": indices}
    got = run_loam(model, feeds)
    assert_same(got, run_onnxruntime(model, feeds))
    return np.asarray(got[0])


def test_output_shape_places_indices_in_the_given_extents() -> None:
    """The backend case's inputs: index 5 of a 5 x 5 output is row 1, column 0 (onnxruntime's answer),
    not row 1, column 1 (where the 4 x 4 extents the attributes infer would put it)."""
    x = np.array([[[[5, 6], [7, 8]]]], np.float32)
    indices = np.array([[[[5, 7], [13, 15]]]], np.int64)
    y = check(unpool_model(x, indices, [1, 1, 5, 5], kernel_shape=[2, 2], strides=[2, 2]), x, indices)
    want = np.zeros((1, 1, 5, 5), np.float32)
    want[0, 0, 1, 0], want[0, 0, 1, 2], want[0, 0, 2, 3], want[0, 0, 3, 0] = 5, 6, 7, 8
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize(
    ("xs", "output_shape", "attrs"),
    [
        ((2, 3, 2, 2), [2, 3, 5, 5], {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ((2, 3, 2, 2), [2, 3, 3, 6], {"kernel_shape": [2, 2], "strides": [2, 2]}),  # 18 >= 4 x 4 elements
        ((1, 2, 3), [1, 2, 7], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
        ((1, 2, 2, 2, 2), [1, 2, 5, 4, 5], {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}),
        ((2, 2, 3, 3), None, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ],
)
def test_indices_anywhere_in_the_whole_output(
    xs: tuple[int, ...], output_shape: list[int] | None, attrs: dict[str, object]
) -> None:
    """Indices drawn over every position of the whole output (batch and channels included), some repeated:
    the last write to a position stays, as onnxruntime's loop leaves it."""
    rng = np.random.default_rng(len(xs) + sum(xs))
    x = rng.standard_normal(xs).astype(np.float32)
    model = unpool_model(x, np.zeros(xs, np.int64), output_shape, **attrs)
    size = int(np.prod(run_onnxruntime(model, {"x": x, "i": np.zeros(xs, np.int64)})[0].shape))
    indices = rng.integers(0, size, xs).astype(np.int64)
    indices.reshape(-1)[-1] = indices.reshape(-1)[0]
    check(model, x, indices)


def test_output_shape_with_fewer_elements_than_inferred_is_refused() -> None:
    """onnxruntime refuses an output_shape holding fewer elements than the inferred extents (4 x 4 here);
    the build refuses it too, naming the node, rather than computing a number onnxruntime never gives."""
    x = np.ones((1, 1, 2, 2), np.float32)
    indices = np.zeros((1, 1, 2, 2), np.int64)
    model = unpool_model(x, indices, [1, 1, 5, 3], kernel_shape=[2, 2], strides=[2, 2])
    with pytest.raises(Exception, match="output_shape is smaller than minimum required"):
        run_onnxruntime(model, {"x": x, "i": indices})
    with pytest.raises(ShapeError, match=r"MaxUnpool node 'y': output_shape \[1, 1, 5, 3\] holds fewer elements"):
        run_loam(model, {"x": x, "i": indices})
