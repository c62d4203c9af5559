"""Extent operands only the run gives (issue 20, item 2): a Reshape shape, a ConstantOfShape shape,
Tile repeats, Slice bounds, Split sizes, Pad widths and AffineGrid's size fed as graph inputs.

Each model is built once and run at several operand values against onnxruntime: the extents those
operands decide are lengths only the run knows, bound after the kernel ran, and what follows stays
symbolic (an Add against another input owes their equality, checked at run time).  Values ONNX
refuses are refused by the module with its DataError naming the operator; an operand that chooses
axes stays a build-time value and the build refuses it by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnx.parser
import pytest

from loam.errors import UnsupportedError
from loam.testing import assert_same, build_for, run_built, run_onnxruntime


def model(text: str, opset: int = 18) -> onnx.ModelProto:
    return onnx.parser.parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>\n{text}')


def check(text: str, feeds_list: Sequence[Mapping[str, np.ndarray]], opset: int = 18) -> None:
    """Built once; at every feed the module matches onnxruntime (shapes included)."""
    m = model(text, opset)
    result = build_for(m)
    for feeds in feeds_list:
        try:
            assert_same(run_built(result, dict(feeds)), run_onnxruntime(m, dict(feeds)))
        except AssertionError as err:
            raise AssertionError(f"at { ({k: v.tolist() for k, v in feeds.items() if v.dtype == np.int64}) }") from err


def refused_at_run(text: str, feeds: Mapping[str, np.ndarray], match: str) -> None:
    """onnxruntime refuses these values too; the module raises its DataError matching `match`."""
    m = model(text)
    result = build_for(m)
    with pytest.raises(Exception):  # noqa: B017 - any onnxruntime failure: ONNX refuses the values too
        run_onnxruntime(m, dict(feeds))
    with pytest.raises(result.module.DataError, match=match):
        run_built(result, dict(feeds))


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def test_reshape_to_a_shape_the_run_gives() -> None:
    text = """
    g (float[2, 3, 4] x, int64[3] shape) => (float[?, ?, ?] y) {
        y = Reshape (x, shape)
    }"""
    check(
        text, [{"x": X, "shape": ints(4, 3, 2)}, {"x": X, "shape": ints(0, -1, 2)}, {"x": X, "shape": ints(1, 1, 24)}]
    )
    refused_at_run(text, {"x": X, "shape": ints(5, 5, 1)}, "Reshape cannot fit the 24 elements")
    refused_at_run(text, {"x": X, "shape": ints(-1, -1, 2)}, "one -1 at most")


def test_a_run_time_reshape_flows_on_symbolically() -> None:
    # The reshaped extents meet another input's: their equality is owed, checked once the run knows them.
    text = """
    g (float[2, 3, 4] x, int64[2] shape, float[A, B] z) => (float[?, ?] y) {
        r = Reshape (x, shape)
        y = Add (r, z)
    }"""
    z = np.ones((6, 4), np.float32)
    check(text, [{"x": X, "shape": ints(6, 4), "z": z}, {"x": X, "shape": ints(-1, 4), "z": z}])
    result = build_for(model(text))
    with pytest.raises(result.module.ShapeError, match="Add node"):
        run_built(result, {"x": X, "shape": ints(4, 6), "z": z})


def test_constant_of_a_shape_the_run_gives() -> None:
    text = """
    g (int64[2] shape) => (int32[?, ?] y) {
        y = ConstantOfShape <value = int32[1] {7}> (shape)
    }"""
    check(text, [{"shape": ints(2, 3)}, {"shape": ints(0, 5)}])
    refused_at_run(text, {"shape": ints(2, -3)}, "negative extent")


def test_tile_by_repeats_the_run_gives() -> None:
    text = """
    g (float[2, 3, 4] x, int64[3] reps) => (float[?, ?, ?] y) {
        y = Tile (x, reps)
    }"""
    check(text, [{"x": X, "reps": ints(1, 2, 3)}, {"x": X, "reps": ints(0, 1, 1)}])
    refused_at_run(text, {"x": X, "reps": ints(1, -1, 1)}, "non-negative count per axis")


@pytest.mark.parametrize(
    ("starts", "ends", "axes", "steps"),
    [
        ((0, 1), (2, -1), (0, 2), (1, 1)),
        ((-1, 10), (-100, -100), (1, 2), (-1, -2)),  # from the end, clamped, backwards
        ((5,), (2**63 - 1,), (-1,), (1,)),  # a start past the end: nothing
        ((2, 0), (0, 4), (2, 0), (-1, 3)),
    ],
)
def test_slice_by_bounds_axes_and_steps_the_run_gives(
    starts: tuple[int, ...], ends: tuple[int, ...], axes: tuple[int, ...], steps: tuple[int, ...]
) -> None:
    n = len(starts)
    text = f"""
    g (float[2, 3, 4] x, int64[{n}] starts, int64[{n}] ends, int64[{n}] axes, int64[{n}] steps) => (float[?, ?, ?] y) {{
        y = Slice (x, starts, ends, axes, steps)
    }}"""
    check(text, [{"x": X, "starts": ints(*starts), "ends": ints(*ends), "axes": ints(*axes), "steps": ints(*steps)}])


def test_slice_with_run_time_ends_and_known_axes_keeps_the_other_extents() -> None:
    text = """
    g (float[2, 3, 4] x, int64[1] ends) => (float[2, 3, ?] y) {
        starts = Constant <value = int64[1] {0}> ()
        axes = Constant <value = int64[1] {2}> ()
        y = Slice (x, starts, ends, axes)
    }"""
    check(text, [{"x": X, "ends": ints(3)}, {"x": X, "ends": ints(-3)}])


def test_slice_by_axes_given_twice_or_a_step_of_zero_is_refused_at_run() -> None:
    text = """
    g (float[2, 3, 4] x, int64[2] starts, int64[2] ends, int64[2] axes, int64[2] steps) => (float[?, ?, ?] y) {
        y = Slice (x, starts, ends, axes, steps)
    }"""
    bounds = {"x": X, "starts": ints(0, 0), "ends": ints(1, 1)}
    refused_at_run(text, {**bounds, "axes": ints(0, -3), "steps": ints(1, 1)}, "must be distinct axes")
    refused_at_run(text, {**bounds, "axes": ints(0, 1), "steps": ints(1, 0)}, "hold 0")


def test_split_by_sizes_the_run_gives() -> None:
    text = """
    g (float[2, 3, 4] x, int64[2] sizes) => (float[?, ?, ?] a, float[?, ?, ?] b) {
        a, b = Split <axis = 2> (x, sizes)
    }"""
    check(text, [{"x": X, "sizes": ints(1, 3)}, {"x": X, "sizes": ints(4, 0)}])
    refused_at_run(text, {"x": X, "sizes": ints(2, 3)}, "non-negative parts of the extent 4")


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_by_widths_the_run_gives(mode: str) -> None:
    text = f"""
    g (float[2, 3, 4] x, int64[4] pads, float fill) => (float[?, ?, ?] y) {{
        axes = Constant <value = int64[2] {{1, -1}}> ()
        y = Pad <mode = "{mode}"> (x, pads, fill, axes)
    }}"""
    fill = np.array(2.5, np.float32)
    check(text, [{"x": X, "pads": ints(1, 2, 0, 1), "fill": fill}, {"x": X, "pads": ints(0, -1, 2, -2), "fill": fill}])


def test_pad_that_reads_what_its_crop_removes_is_refused_at_run() -> None:
    text = """
    g (float[2, 3, 4] x, int64[6] pads) => (float[?, ?, ?] y) {
        y = Pad <mode = "wrap"> (x, pads)
    }"""
    result = build_for(model(text))
    with pytest.raises(result.module.DataError, match="both pad and crop axis 2"):
        run_built(result, {"x": X, "pads": ints(0, 0, 1, 0, 0, -2)})


def test_operands_that_choose_axes_stay_build_time_values() -> None:
    text = """
    g (float[2, 3, 4] x, int64[2] pads, int64[1] axes) => (float[?, ?, ?] y) {
        y = Pad (x, pads, , axes)
    }"""
    with pytest.raises(UnsupportedError, match="Pad node 'y': the axes input must be known at build time"):
        build_for(model(text))


def test_a_run_time_shape_of_unknown_length_is_refused_by_name() -> None:
    text = """
    g (float[2, 3, 4] x, int64[N] shape) => (float[?] y) {
        y = Reshape (x, shape)
    }"""
    with pytest.raises(UnsupportedError, match="Reshape node 'y': the shape input is computed at run time"):
        build_for(model(text))


def test_affine_grid_of_a_size_the_run_gives() -> None:
    text = """
    g (float[2, 2, 3] theta, int64[4] size) => (float[?, ?, ?, ?] grid) {
        grid = AffineGrid <align_corners = 1> (theta, size)
    }"""
    theta = np.array([[[1, 0, 0.5], [0, 1, 0]], [[0.5, -0.5, 0], [0.5, 0.5, 0.25]]], np.float32)
    check(text, [{"theta": theta, "size": ints(2, 3, 4, 5)}, {"theta": theta, "size": ints(2, 1, 2, 7)}], opset=20)
    result = build_for(model(text, opset=20))
    with pytest.raises(result.module.DataError, match="needs theta's batch 2"):
        run_built(result, {"theta": theta, "size": ints(3, 1, 4, 5)})
