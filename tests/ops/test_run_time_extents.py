"""Extents from run-time values: an operand that fixes an extent and is fed as a graph
input (TopK's k, OneHot's depth, a window's size, STFT's frame_step, Col2Im's image_shape) makes
that extent a length only the run knows (`loam.ops.base.result_length`), bound once the node ran;
so do a Reshape or ConstantOfShape shape, Tile repeats, Slice bounds, Split sizes, Pad widths and
AffineGrid's size.  An operand that chooses axes (Pad's axes) stays a build-time value, refused by name.

Each model is a small ONNX graph in its text form with the operand as a graph input, built once and
run at several values of it against onnxruntime (a kernel after the node reads the bound length);
then the run-time values ONNX rejects, which raise the module's DataError naming the operand, and
the WGSL module, which refuses a buffer sized by such a length by itself.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnx.parser
import pytest

from loam.core.errors import UnsupportedError
from loam.driver.pipeline import BuildResult
from loam.testing import assert_same, build_for, run_built, run_onnxruntime


def model(text: str, opset: int) -> onnx.ModelProto:
    """A model from the text form of its graph."""
    return onnx.parser.parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>\n{text}')


@functools.cache
def built(text: str, opset: int) -> tuple[onnx.ModelProto, BuildResult]:
    m = model(text, opset)
    return m, build_for(m)


def check(
    text: str, opset: int, feeds: Sequence[Mapping[str, np.ndarray]], rtol: float = 1e-5, atol: float = 1e-6
) -> None:
    """The model built once, matching onnxruntime on every feed (floats within `rtol`/`atol`)."""
    m, result = built(text, opset)
    for f in feeds:
        try:
            assert_same(run_built(result, f), run_onnxruntime(m, f), rtol=rtol, atol=atol)
        except AssertionError as err:
            raise AssertionError(f"at { ({k: v.tolist() for k, v in f.items() if v.size < 8}) }: {err}") from err


def refused_at_run(text: str, opset: int, feeds: Mapping[str, np.ndarray], match: str, oracle: bool = True) -> None:
    """onnxruntime refuses these inputs too (unless not `oracle`: where it would crash), and forward
    raises the module's DataError matching `match`."""
    m, result = built(text, opset)
    if oracle:
        with pytest.raises(Exception):  # noqa: B017 - any onnxruntime failure: ONNX refuses the inputs too
            run_onnxruntime(m, feeds)
    with pytest.raises(result.module.DataError, match=match):
        run_built(result, feeds)


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


RNG = np.random.default_rng(0)


def floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# TopK with k only the run gives
# ---------------------------------------------------------------------------------------------

TOPK = """
g (float[N, 5] x, int64[1] k) => (float[?, ?] y, int64[?, ?] i) {
    v, i = TopK <axis = 1, largest = 0> (x, k)
    y = Add (v, v)
}"""


def test_topk_with_k_from_the_run() -> None:
    x = np.array([[3, 1, 2, 1, 5], [0, 0, -1, 7, 2]], np.float32)
    feeds = [{"x": x, "k": i64(k)} for k in (0, 1, 3, 5)]
    check(TOPK, 11, [*feeds, {"x": floats(4, 5), "k": i64(2)}, {"x": floats(0, 5), "k": i64(4)}])
    _, result = built(TOPK, 11)
    (got, index) = run_built(result, {"x": x, "k": i64(3)})
    np.testing.assert_array_equal(index, [[1, 3, 2], [2, 0, 1]])  # ties by lower index
    np.testing.assert_array_equal(got, 2 * np.array([[1, 1, 2], [-1, 0, 0]], np.float32))


@pytest.mark.parametrize("k", [6, -1])
def test_topk_refuses_a_k_outside_the_axis_at_run_time(k: int) -> None:
    x = floats(2, 5)
    refused_at_run(TOPK, 11, {"x": x, "k": i64(k)}, rf"TopK's k is {k}; it must lie in \[0, 5\]")


def test_topk_with_k_from_the_run_is_refused_by_wgsl_without_host_fallback() -> None:
    with pytest.raises(UnsupportedError, match=r"kernel.topk 'v': WGSL topk: k as a run-time operand"):
        build_for(model(TOPK, 11), backend="wgsl")
    # With --host-fallback the TopK runs on the host and the Add after it on the device, in a buffer
    # made once the run gives k.
    result = build_for(model(TOPK, 11), backend="wgsl", host_fallback=True)
    x = np.array([[3, 1, 2, 1, 5], [0, 0, -1, 7, 2]], np.float32)
    for k in (1, 3):
        got, index = run_built(result, {"x": x, "k": i64(k)})
        want, want_index = run_built(built(TOPK, 11)[1], {"x": x, "k": i64(k)})
        np.testing.assert_array_equal(index, want_index)
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------
# OneHot with depth only the run gives
# ---------------------------------------------------------------------------------------------

ONEHOT = """
g (int64[N] idx, float[1] depth, float[2] values) => (float[?, ?] y) {
    h = OneHot <axis = 0> (idx, depth, values)
    y = Mul (h, h)
}"""


def test_onehot_with_depth_from_the_run() -> None:
    values = np.array([-2.0, 3.0], np.float32)
    idx = i64(0, 2, -1, 5, -7)  # 5 and -7 lie outside [-depth, depth) for depth 4: no position
    feeds = [{"idx": idx, "depth": np.array([d], np.float32), "values": values} for d in (1.0, 4.0, 6.5)]
    check(ONEHOT, 11, [*feeds, {"idx": i64(), "depth": np.array([3.0], np.float32), "values": values}])
    _, result = built(ONEHOT, 11)
    (got,) = run_built(result, {"idx": i64(1, -1), "depth": np.array([3.9], np.float32), "values": values})
    np.testing.assert_array_equal(got, [[4, 4], [9, 4], [4, 9]])  # depth 3.9 is 3


def test_onehot_refuses_a_depth_below_one_at_run_time() -> None:
    _, result = built(ONEHOT, 11)
    with pytest.raises(result.module.DataError, match=r"OneHot's depth is 0.5; it must be at least 1"):
        run_built(result, {"idx": i64(0), "depth": np.array([0.5], np.float32), "values": np.ones(2, np.float32)})


# ---------------------------------------------------------------------------------------------
# HannWindow, HammingWindow, BlackmanWindow with a size only the run gives
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_window_with_a_size_from_the_run(op: str, periodic: int) -> None:
    text = f"""
    g (int64 n, float[M] x) => (float[?] y) {{
        w = {op} <periodic = {periodic}> (n)
        y = Mul (w, x)
    }}"""
    feeds = [{"n": np.array(k, np.int64), "x": floats(k)} for k in (0, 2, 5, 16)]
    check(text, 17, feeds)
    _, result = built(text, 17)
    (got,) = run_built(result, {"n": np.array(5, np.int64), "x": np.ones(5, np.float32)})
    if op == "HannWindow":  # 0.5 - 0.5 cos(2 pi n / N), N = 5 (periodic) or 4
        span = 5 if periodic else 4
        np.testing.assert_allclose(got, 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(5) / span), atol=1e-6)


def test_window_refuses_a_negative_size_at_run_time() -> None:
    text = """
    g (int64 n) => (double[?] y) {
        y = HannWindow <output_datatype = 11> (n)
    }"""
    _, result = built(text, 17)
    (got,) = run_built(result, {"n": np.array(3, np.int64)})
    assert got.dtype == np.float64 and got.shape == (3,)
    with pytest.raises(result.module.DataError, match=r"the window's size is -2; it must not be negative"):
        run_built(result, {"n": np.array(-2, np.int64)})


# ---------------------------------------------------------------------------------------------
# STFT with frame_step (and frame_length) only the run gives
# ---------------------------------------------------------------------------------------------

STFT_WINDOWED = """
g (float[1, 32, 1] signal, int64 step, float[8] window) => (float[?, ?, ?, ?] y) {
    s = STFT (signal, step, window)
    y = Mul (s, s)
}"""

STFT_FRAMED = """
g (float[2, 20, 2] signal, int64 step, int64 length) => (float[?, ?, ?, ?] y) {
    s = STFT <onesided = 0> (signal, step, , length)
    y = Add (s, s)
}"""


def test_stft_with_frame_step_from_the_run() -> None:
    window = np.hanning(8).astype(np.float32)
    feeds = [{"signal": floats(1, 32, 1), "step": np.array(k, np.int64), "window": window} for k in (1, 3, 8, 40)]
    check(STFT_WINDOWED, 17, feeds, rtol=1e-4, atol=1e-4)
    _, result = built(STFT_WINDOWED, 17)
    (got,) = run_built(result, {"signal": floats(1, 32, 1), "step": np.array(5, np.int64), "window": window})
    assert got.shape == (1, 5, 5, 2)  # (32 - 8) // 5 + 1 frames of 8 // 2 + 1 bins


def test_stft_with_frame_step_and_frame_length_from_the_run() -> None:
    feeds = [
        {"signal": floats(2, 20, 2), "step": np.array(step, np.int64), "length": np.array(length, np.int64)}
        for step, length in ((1, 1), (4, 6), (7, 20), (2, 9))
    ]
    check(STFT_FRAMED, 17, feeds, rtol=1e-4, atol=1e-4)  # onnxruntime's f32 FFT rounds otherwise than numpy's


@pytest.mark.parametrize(
    ("step", "length", "why"),
    [
        (0, 4, r"STFT's frame_step is 0; it must be at least 1"),
        (2, 21, r"STFT's frame_length is 21; it must lie in \[1, 20\], the signal's length"),
        (2, 0, r"STFT's frame_length is 0; it must lie in \[1, 20\]"),
    ],
)
def test_stft_refuses_frames_outside_the_signal_at_run_time(step: int, length: int, why: str) -> None:
    feeds = {"signal": floats(2, 20, 2), "step": np.array(step, np.int64), "length": np.array(length, np.int64)}
    refused_at_run(
        STFT_FRAMED, 17, feeds, why, oracle=step > 0 and length > 0
    )  # onnxruntime dies on a step or a length of 0


# ---------------------------------------------------------------------------------------------
# Col2Im with image_shape (and block_shape) only the run gives
# ---------------------------------------------------------------------------------------------

COL2IM = """
g (float[1, 4, L] x, int64[2] image, int64[2] block) => (float[?, ?, ?, ?] y) {
    c = Col2Im <strides = [1, 2]> (x, image, block)
    y = Add (c, c)
}"""

COL2IM_IMAGE = """
g (float[2, 6, L] x, int64[2] image) => (float[?, ?, ?, ?] y) {
    block = Constant <value = int64[2] {1, 3}> ()
    c = Col2Im <pads = [0, 1, 0, 1]> (x, image, block)
    y = Mul (c, c)
}"""


def test_col2im_with_image_and_block_shape_from_the_run() -> None:
    # image [3, 5], block [2, 2], strides [1, 2]: 2 x 2 blocks; image [2, 4], block [1, 4]: 2 x 1 blocks of 4 taps
    cases = ((3, 5, 2, 2, 4), (2, 4, 1, 4, 2), (4, 3, 4, 1, 2))
    feeds = [{"x": floats(1, 4, n), "image": i64(h, w), "block": i64(bh, bw)} for h, w, bh, bw, n in cases]
    check(COL2IM, 18, feeds)
    _, result = built(COL2IM, 18)
    (got,) = run_built(result, {"x": np.ones((1, 4, 4), np.float32), "image": i64(3, 5), "block": i64(2, 2)})
    assert got.shape == (1, 1, 3, 5)
    np.testing.assert_array_equal(got[0, 0], 2 * np.array([[1, 1, 1, 1, 0], [2, 2, 2, 2, 0], [1, 1, 1, 1, 0]]))


def test_col2im_with_image_shape_from_the_run_and_a_known_block() -> None:
    feeds = [{"x": floats(2, 6, n), "image": i64(h, w)} for h, w, n in ((3, 4, 12), (1, 1, 1), (5, 2, 10))]
    check(COL2IM_IMAGE, 18, feeds)


@pytest.mark.parametrize(
    ("image", "block", "blocks", "why"),
    [
        (
            (3, 5),
            (2, 2),
            5,
            r"Col2Im's input has 5 blocks \(axis 2\); image_shape \[3, 5\] and block_shape \[2, 2\] make 4",
        ),
        ((3, 5), (3, 2), 4, r"Col2Im's input axis 1 \(4\) is no multiple of block_shape \[3, 2\]'s taps"),
        ((0, 5), (2, 2), 4, r"Col2Im's image_shape is \[0, 5\]; it must hold 2 positive extents"),
        ((1, 5), (2, 2), 4, r"Col2Im's block_shape \[2, 2\] spans more than the padded image at axis 0"),
    ],
)
def test_col2im_refuses_shapes_that_do_not_fit_the_input_at_run_time(
    image: tuple[int, int], block: tuple[int, int], blocks: int, why: str
) -> None:
    _, result = built(COL2IM, 18)
    with pytest.raises(result.module.DataError, match=why):
        run_built(result, {"x": floats(1, 4, blocks), "image": i64(*image), "block": i64(*block)})


# ---------------------------------------------------------------------------------------------
# Reshape, ConstantOfShape, Tile, Slice, Split, Pad and AffineGrid with their extent operands from the run
# ---------------------------------------------------------------------------------------------

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def test_reshape_to_a_shape_the_run_gives() -> None:
    text = """
    g (float[2, 3, 4] x, int64[3] shape) => (float[?, ?, ?] y) {
        y = Reshape (x, shape)
    }"""
    check(
        text, 18, [{"x": X, "shape": i64(4, 3, 2)}, {"x": X, "shape": i64(0, -1, 2)}, {"x": X, "shape": i64(1, 1, 24)}]
    )
    refused_at_run(text, 18, {"x": X, "shape": i64(5, 5, 1)}, "Reshape cannot fit the 24 elements")
    refused_at_run(text, 18, {"x": X, "shape": i64(-1, -1, 2)}, "one -1 at most")


def test_a_run_time_reshape_flows_on_symbolically() -> None:
    # The reshaped extents meet another input's: their equality is owed, checked once the run knows them.
    text = """
    g (float[2, 3, 4] x, int64[2] shape, float[A, B] z) => (float[?, ?] y) {
        r = Reshape (x, shape)
        y = Add (r, z)
    }"""
    z = np.ones((6, 4), np.float32)
    check(text, 20, [{"x": X, "shape": i64(6, 4), "z": z}, {"x": X, "shape": i64(-1, 4), "z": z}])
    result = build_for(model(text, 18))
    with pytest.raises(result.module.ShapeError, match="Add node"):
        run_built(result, {"x": X, "shape": i64(4, 6), "z": z})


def test_constant_of_a_shape_the_run_gives() -> None:
    text = """
    g (int64[2] shape) => (int32[?, ?] y) {
        y = ConstantOfShape <value = int32[1] {7}> (shape)
    }"""
    check(text, 18, [{"shape": i64(2, 3)}, {"shape": i64(0, 5)}])
    refused_at_run(text, 18, {"shape": i64(2, -3)}, "negative extent")


def test_tile_by_repeats_the_run_gives() -> None:
    text = """
    g (float[2, 3, 4] x, int64[3] reps) => (float[?, ?, ?] y) {
        y = Tile (x, reps)
    }"""
    check(text, 18, [{"x": X, "reps": i64(1, 2, 3)}, {"x": X, "reps": i64(0, 1, 1)}])
    refused_at_run(text, 18, {"x": X, "reps": i64(1, -1, 1)}, "non-negative count per axis")


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
    check(text, 18, [{"x": X, "starts": i64(*starts), "ends": i64(*ends), "axes": i64(*axes), "steps": i64(*steps)}])


def test_slice_with_run_time_ends_and_known_axes_keeps_the_other_extents() -> None:
    text = """
    g (float[2, 3, 4] x, int64[1] ends) => (float[2, 3, ?] y) {
        starts = Constant <value = int64[1] {0}> ()
        axes = Constant <value = int64[1] {2}> ()
        y = Slice (x, starts, ends, axes)
    }"""
    check(text, 18, [{"x": X, "ends": i64(3)}, {"x": X, "ends": i64(-3)}])


def test_slice_by_axes_given_twice_or_a_step_of_zero_is_refused_at_run() -> None:
    text = """
    g (float[2, 3, 4] x, int64[2] starts, int64[2] ends, int64[2] axes, int64[2] steps) => (float[?, ?, ?] y) {
        y = Slice (x, starts, ends, axes, steps)
    }"""
    bounds = {"x": X, "starts": i64(0, 0), "ends": i64(1, 1)}
    refused_at_run(text, 18, {**bounds, "axes": i64(0, -3), "steps": i64(1, 1)}, "must be distinct axes")
    refused_at_run(text, 18, {**bounds, "axes": i64(0, 1), "steps": i64(1, 0)}, "hold 0")


def test_split_by_sizes_the_run_gives() -> None:
    text = """
    g (float[2, 3, 4] x, int64[2] sizes) => (float[?, ?, ?] a, float[?, ?, ?] b) {
        a, b = Split <axis = 2> (x, sizes)
    }"""
    check(text, 18, [{"x": X, "sizes": i64(1, 3)}, {"x": X, "sizes": i64(4, 0)}])
    refused_at_run(text, 18, {"x": X, "sizes": i64(2, 3)}, "non-negative parts of the extent 4")


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_by_widths_the_run_gives(mode: str) -> None:
    text = f"""
    g (float[2, 3, 4] x, int64[4] pads, float fill) => (float[?, ?, ?] y) {{
        axes = Constant <value = int64[2] {{1, -1}}> ()
        y = Pad <mode = "{mode}"> (x, pads, fill, axes)
    }}"""
    fill = np.array(2.5, np.float32)
    check(
        text, 18, [{"x": X, "pads": i64(1, 2, 0, 1), "fill": fill}, {"x": X, "pads": i64(0, -1, 2, -2), "fill": fill}]
    )


def test_pad_that_reads_what_its_crop_removes_is_refused_at_run() -> None:
    text = """
    g (float[2, 3, 4] x, int64[6] pads) => (float[?, ?, ?] y) {
        y = Pad <mode = "wrap"> (x, pads)
    }"""
    result = build_for(model(text, 18))
    with pytest.raises(result.module.DataError, match="both pad and crop axis 2"):
        run_built(result, {"x": X, "pads": i64(0, 0, 1, 0, 0, -2)})


def test_operands_that_choose_axes_stay_build_time_values() -> None:
    text = """
    g (float[2, 3, 4] x, int64[2] pads, int64[1] axes) => (float[?, ?, ?] y) {
        y = Pad (x, pads, , axes)
    }"""
    with pytest.raises(UnsupportedError, match="Pad node 'y': the axes input must be known at build time"):
        build_for(model(text, 18))


def test_a_run_time_shape_of_unknown_length_is_refused_by_name() -> None:
    text = """
    g (float[2, 3, 4] x, int64[N] shape) => (float[?] y) {
        y = Reshape (x, shape)
    }"""
    with pytest.raises(UnsupportedError, match="Reshape node 'y': the shape input is computed at run time"):
        build_for(model(text, 18))


def test_affine_grid_of_a_size_the_run_gives() -> None:
    text = """
    g (float[2, 2, 3] theta, int64[4] size) => (float[?, ?, ?, ?] grid) {
        grid = AffineGrid <align_corners = 1> (theta, size)
    }"""
    theta = np.array([[[1, 0, 0.5], [0, 1, 0]], [[0.5, -0.5, 0], [0.5, 0.5, 0.25]]], np.float32)
    check(text, 20, [{"theta": theta, "size": i64(2, 3, 4, 5)}, {"theta": theta, "size": i64(2, 1, 2, 7)}])
    result = build_for(model(text, 20))
    with pytest.raises(result.module.DataError, match="needs theta's batch 2"):
        run_built(result, {"theta": theta, "size": i64(3, 1, 4, 5)})


def test_mel_weight_matrix_of_counts_the_run_gives() -> None:
    text = """
    g (int64 bins, int64 length, int64 rate, float low, float high) => (float[?, ?] w) {
        w = MelWeightMatrix (bins, length, rate, low, high)
    }"""
    scalars = {"rate": np.array(8000, np.int64), "low": np.array(0, np.float32), "high": np.array(3000, np.float32)}
    check(
        text,
        17,
        [
            {"bins": np.array(8, np.int64), "length": np.array(64, np.int64), **scalars},
            {"bins": np.array(4, np.int64), "length": np.array(32, np.int64), **scalars},
        ],
    )
    refused_at_run(
        text,
        17,
        {"bins": np.array(0, np.int64), "length": np.array(64, np.int64), **scalars},
        "must be positive",
        oracle=False,
    )


def test_a_result_past_the_room_of_one_tensor_is_refused_before_it_is_allocated() -> None:
    from loam.core.limits import MAX_ELEMENTS
    from loam.runtime.kernels.common import ROOM

    assert ROOM == MAX_ELEMENTS
    text = """
    g (int64[2] shape) => (float[?, ?] y) {
        y = ConstantOfShape <value = float[1] {1.0}> (shape)
    }"""
    result = build_for(model(text, 18))
    with pytest.raises(result.module.DataError, match=r"past the 68719476736 one tensor may hold"):
        run_built(result, {"shape": i64(2**20, 2**20)})
    text = """
    g (float[2, 3] x, int64[2] reps) => (float[?, ?] y) {
        y = Tile (x, reps)
    }"""
    result = build_for(model(text, 18))
    with pytest.raises(result.module.DataError, match=r"Tile's repeats \[1048576, 1048576\] would make"):
        run_built(result, {"x": floats(2, 3), "reps": i64(2**20, 2**20)})
