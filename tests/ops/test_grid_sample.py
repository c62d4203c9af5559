"""GridSample against onnxruntime beyond the conformance cases: symbolic extents, folded constants,
mixed element types, the attribute values and ranks the build refuses, and the kernel's edges (an
empty input, non-finite positions).

tests/conformance/operators/GridSample.* cover every mode x padding_mode x align_corners in 2-D and
3-D; these check what those fixed-shape cases cannot.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
import onnx
import onnx.parser
import pytest

from loam.core.errors import ShapeError, UnsupportedError
from loam.runtime.errors import DataError
from loam.runtime.kernels.resize import kernel_grid_sample
from loam.testing import assert_same, build_for, run_built, run_loam, run_onnxruntime


def model(text: str, opset: int = 20) -> onnx.ModelProto:
    """A model from the text form of its graph."""
    return onnx.parser.parse_model(f'<ir_version: 9, opset_import: ["" : {opset}]>\n{text}')


def gridsample(x: str, grid: str, y: str, attrs: str = "", opset: int = 20) -> onnx.ModelProto:
    """One GridSample node: `x` and `grid` typed as given, output `y`, attributes `attrs`."""
    return model(f"g ({x} x, {grid} grid) => ({y} y) {{ y = GridSample {attrs} (x, grid) }}", opset)


def feeds(shapes: Mapping[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    """X standard normal, grid positions spread over [-1.6, 1.6] (past the borders)."""
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal(shapes["x"]).astype(np.float32),
        "grid": rng.uniform(-1.6, 1.6, shapes["grid"]).astype(np.float32),
    }


def test_symbolic_batch_and_points() -> None:
    m = gridsample(
        "float[N, 2, 4, 5]", "float[N, H, W, 2]", "float[N, 2, H, W]", '<mode = "cubic", padding_mode = "reflection">'
    )
    result = build_for(m)
    for n, h, w in ((1, 3, 4), (3, 1, 7), (2, 0, 3), (0, 2, 2)):
        f = feeds({"x": (n, 2, 4, 5), "grid": (n, h, w, 2)})
        assert_same(run_built(result, f), run_onnxruntime(m, f))


def test_batches_that_differ_at_run_time() -> None:
    m = gridsample("float[N, 1, 3, 3]", "float[M, 2, 2, 2]", "float[N, 1, 2, 2]")
    result = build_for(m)
    f = feeds({"x": (2, 1, 3, 3), "grid": (2, 2, 2, 2)})
    assert_same(run_built(result, f), run_onnxruntime(m, f))
    with pytest.raises(result.module.ShapeError, match="GridSample"):
        run_built(result, feeds({"x": (2, 1, 3, 3), "grid": (3, 2, 2, 2)}))


def test_known_inputs_fold() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (1, 2, 3, 2)).astype(np.float32)
    nodes = [
        onnx.helper.make_node("Constant", [], ["x"], value=onnx.numpy_helper.from_array(x)),
        onnx.helper.make_node("Constant", [], ["grid"], value=onnx.numpy_helper.from_array(grid)),
        onnx.helper.make_node("GridSample", ["x", "grid"], ["s"], mode="nearest", padding_mode="border"),
        onnx.helper.make_node("Add", ["s", "b"], ["y"]),
    ]
    graph = onnx.helper.make_graph(
        nodes,
        "g",
        [onnx.helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [1, 2, 2, 3])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, 2, 3])],
    )
    m = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20)])
    m.ir_version = 9
    result = build_for(m)
    assert "kernel_grid_sample" not in result.source, "stage 0 folds a GridSample of known inputs"
    b = rng.standard_normal((1, 2, 2, 3)).astype(np.float32)
    assert_same(run_built(result, {"b": b}), run_onnxruntime(m, {"b": b}))


def test_half_x_with_a_float_grid() -> None:
    # onnxruntime takes one type for both; Loam reads the positions at the grid's precision.
    m = gridsample("float16[1, 2, 4, 5]", "float[1, 3, 3, 2]", "float16[1, 2, 3, 3]", '<mode = "linear">')
    f = feeds({"x": (1, 2, 4, 5), "grid": (1, 3, 3, 2)})
    x16 = f["x"].astype(np.float16)
    want = kernel_grid_sample(x16.astype(np.float32), f["grid"], mode="linear", padding_mode="zeros", align_corners=0)
    assert_same(run_loam(m, {"x": x16, "grid": f["grid"]}), [want.astype(np.float16)])


@pytest.mark.parametrize(
    ("x", "grid", "attrs", "opset", "error", "match"),
    [
        ("float[1, 1, 2, 2, 2]", "float[1, 1, 1, 1, 3]", '<mode = "cubic">', 20, UnsupportedError, "mode cubic"),
        ("float[1, 1, 4]", "float[1, 2, 1]", "", 20, UnsupportedError, "X of rank 4 or 5"),
        ("float[1, 1, 2, 2, 2]", "float[1, 1, 1, 1, 3]", "", 16, ShapeError, "takes a 4-D X"),
        ("float[1, 1, 2, 2]", "float[1, 1, 1, 2]", '<mode = "linear">', 16, ShapeError, "mode 'linear'"),
        ("float[1, 1, 2, 2]", "float[1, 1, 1, 2]", '<mode = "bicubic">', 22, ShapeError, "mode 'bicubic'"),
        ("float[1, 1, 2, 2]", "float[1, 1, 1, 2]", '<padding_mode = "edge">', 20, ShapeError, "padding_mode 'edge'"),
        ("float[1, 1, 2, 2]", "float[1, 1, 1, 2]", "<align_corners = 2>", 20, ShapeError, "align_corners"),
        ("float[1, 1, 2, 2]", "float[2, 1, 1, 2]", "", 20, ShapeError, "batch"),
        ("float[1, 1, 2, 2]", "float[1, 1, 1, 3]", "", 20, ShapeError, "last axis"),
        ("int32[1, 1, 2, 2]", "float[1, 1, 1, 2]", "", 20, UnsupportedError, "X has element type i32"),
    ],
)
def test_refused(x: str, grid: str, attrs: str, opset: int, error: type[Exception], match: str) -> None:
    elem = x.split("[", 1)[0]
    with pytest.raises(error, match=match):
        build_for(gridsample(x, grid, f"{elem}[?, ?, ?, ?]", attrs, opset))


def test_an_empty_input_axis() -> None:
    x, grid = np.zeros((1, 2, 0, 3), np.float32), np.zeros((1, 2, 2, 2), np.float32)
    zeros = kernel_grid_sample(x, grid, mode="linear", padding_mode="zeros", align_corners=0)
    assert zeros.shape == (1, 2, 2, 2) and not zeros.any()
    with pytest.raises(DataError, match="padding_mode border has no edge"):
        kernel_grid_sample(x, grid, mode="nearest", padding_mode="border", align_corners=0)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_non_finite_positions_warn_nothing(mode: str, padding: str) -> None:
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    grid = np.array([[[[np.nan, 0], [np.inf, 0], [-np.inf, 0.5], [3e38, -3e38]]]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = kernel_grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=1)
    assert y.shape == (1, 1, 1, 4)
