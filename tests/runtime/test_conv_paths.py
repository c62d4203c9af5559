"""`kernel_conv`'s three paths (pointwise, on planes, on windows: whole or in blocks) against a
direct convolution in f64: every tap's product summed in turn, the windows sliced out of the padded input.

The f32 result is within 1e-5 of the reference's scale at each output, where the scale is the same
convolution of |x| with |w| (the sum of the magnitudes an f32 sum accumulates); hypothesis draws the
shapes (kernels 1 to 7, strides, pads, dilations, groups, odd extents, batches of 1 and 3), and fixed
cases cross the sizes where the windows path copies its im2col in blocks.  MaxPool over windows that tile its
input (the digits CNN's 2 x 2 pools) is each window's largest element, NaN taps ignored as `nan_rule`
"ignore" says.  What a path writes before it returns (its im2col, its padded input) lives in
buffers each thread reuses: no result shares them, and threads computing at once do not meet.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loam.runtime.kernels.conv import _ConvGeometry, _on_planes, kernel_conv, kernel_pool


def reference(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: tuple, pads: tuple, dilations: tuple, group: int
) -> np.ndarray:
    """ONNX Conv in f64, one kernel offset at a time: y[n, m] += w[m, c, tap] * x_padded[n, c, tap + stride * p]."""
    nsp = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[i], pads[i + nsp]) for i in range(nsp)])
    n, c, m = x.shape[0], x.shape[1], w.shape[0]
    cg, mg = c // group, m // group
    kernel = w.shape[2:]
    out = [(xp.shape[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(nsp)]
    y = np.zeros((n, m, *out))
    for tap in np.ndindex(*kernel):
        picked = tuple(
            slice(tap[i] * dilations[i], tap[i] * dilations[i] + (out[i] - 1) * strides[i] + 1, strides[i])
            for i in range(nsp)
        )
        part = xp[(slice(None), slice(None), *picked)]
        for j in range(group):
            taps = w[(slice(j * mg, (j + 1) * mg), slice(None), *tap)].astype(np.float64)
            y[:, j * mg : (j + 1) * mg] += np.einsum("mc,nc...->nm...", taps, part[:, j * cg : (j + 1) * cg])
    if b is not None:
        y += b.astype(np.float64).reshape(-1, *([1] * nsp))
    return y


def check(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: tuple, pads: tuple, dilations: tuple, group: int
) -> None:
    got = kernel_conv(x, w, b, strides=strides, pads=pads, dilations=dilations, group=group)
    want = reference(x, w, b, strides, pads, dilations, group)
    scale = reference(np.abs(x), np.abs(w), None if b is None else np.abs(b), strides, pads, dilations, group)
    assert got.dtype == x.dtype and got.shape == want.shape and got.flags.c_contiguous
    assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-30), float(np.max(np.abs(got - want) - 1e-5 * scale))


@st.composite
def convs(draw: st.DrawFn) -> tuple:
    nsp = draw(st.sampled_from([2, 2, 2, 3]))
    group = draw(st.sampled_from([1, 1, 2, 3]))
    n = draw(st.sampled_from([1, 3]))
    cg, mg = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    kernel = tuple(draw(st.sampled_from([1, 3, 5, 7] if nsp == 2 else [1, 2, 3])) for _ in range(nsp))
    strides = tuple(draw(st.sampled_from([1, 1, 2])) for _ in range(nsp))
    dilations = tuple(draw(st.sampled_from([1, 1, 2])) for _ in range(nsp))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(2 * nsp))
    spatial = []
    for i in range(nsp):
        least = max(1, (kernel[i] - 1) * dilations[i] + 1 - pads[i] - pads[i + nsp])
        spatial.append(draw(st.integers(least, least + (12 if nsp == 2 else 4))))
    seed = draw(st.integers(0, 2**16))
    return (n, group * cg, *spatial), (group * mg, cg, *kernel), strides, pads, dilations, group, seed


@settings(max_examples=150, deadline=None)
@given(convs(), st.booleans(), st.booleans())
def test_every_path_is_the_direct_convolution(case: tuple, bias: bool, strided: bool) -> None:
    x_shape, w_shape, strides, pads, dilations, group, seed = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    if strided:  # a view every other element along the last axis, as a slice feeds the kernel
        wide = rng.standard_normal((*x_shape[:-1], 2 * x_shape[-1])).astype(np.float32)
        x = wide[..., ::2]
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    check(x, w, b, strides, pads, dilations, group)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "strides", "pads", "dilations", "planes"),
    [
        # On planes: large planes (ResNet's 56 x 56 3x3s, smaller), one image or a batch.
        ((1, 16, 47, 45), (8, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),
        ((3, 12, 33, 39), (5, 12, 3, 3), (1, 1), (2, 1, 0, 2), (2, 1), True),
        # On windows past 1 MiB with a small weight: in blocks of output rows (ResNet's 7x7 stride-2
        # stem, smaller); with a large weight, whole.
        ((1, 3, 99, 101), (16, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), False),
        ((3, 3, 97, 91), (4, 3, 7, 5), (2, 1), (3, 2, 1, 0), (1, 2), False),
        ((1, 64, 61, 60), (64, 64, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
        # Small images in a batch (the digits CNN's Convs) stay on windows, one batched product; a
        # batch of large ones goes on planes, a product per image.
        ((64, 8, 4, 4), (16, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False),
        ((3, 16, 30, 29), (8, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),
        ((64, 1, 8, 8), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False),
        # Few points and many channels (ResNet's 7 x 7 3x3s) stay on windows.
        ((1, 96, 7, 7), (256, 96, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False),
    ],
)
def test_the_blocked_and_batched_paths(
    x_shape: tuple, w_shape: tuple, strides: tuple, pads: tuple, dilations: tuple, planes: bool
) -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    assert _on_planes(_ConvGeometry(x_shape, w_shape, strides, pads, dilations, 1)) is planes
    check(x, w, b, strides, pads, dilations, 1)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "pads"),
    [
        ((5, 16, 30, 29), (8, 16, 3, 3), (1, 1, 1, 1)),  # planes
        ((5, 8, 4, 4), (16, 8, 3, 3), (1, 1, 1, 1)),  # windows
        ((5, 16, 9, 9), (8, 16, 1, 1), (0, 0, 0, 0)),  # pointwise
        ((5, 3, 40, 41), (16, 3, 7, 7), (3, 3, 3, 3)),  # windows, a large image's im2col in blocks
    ],
)
def test_an_image_in_a_batch_is_the_image_alone_bit_for_bit(x_shape: tuple, w_shape: tuple, pads: tuple) -> None:
    """A served model computes a cohort's images in one call: each must be what it is alone, to the bit."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    params = {"strides": (1, 1), "pads": pads, "dilations": (1, 1), "group": 1}
    batch = kernel_conv(x, w, None, **params)
    for i in range(x_shape[0]):
        assert kernel_conv(x[i : i + 1], w, None, **params).tobytes() == batch[i : i + 1].tobytes()
    assert kernel_conv(x[1:4], w, None, **params).tobytes() == batch[1:4].tobytes()


def test_an_empty_batch_and_halves() -> None:
    w = np.ones((4, 2, 3, 3), dtype=np.float32)
    y = kernel_conv(np.zeros((0, 2, 5, 5), np.float32), w, strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), group=1)
    assert y.shape == (0, 4, 5, 5)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 2, 9, 7)).astype(np.float16)
    w16 = rng.standard_normal((4, 2, 3, 3)).astype(np.float16)
    got = kernel_conv(x, w16, strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), group=1)
    want = reference(x.astype(np.float32), w16.astype(np.float32), None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(1, 5)), min_size=1, max_size=3),
    st.sampled_from([1, 3]),
    st.sampled_from([np.float32, np.float64, np.float16]),
    st.sampled_from(["none", "some", "a whole window"]),
    st.integers(0, 2**16),
)
def test_max_pool_over_tiles_is_each_windows_largest(
    axes: list[tuple[int, int]], n: int, dtype: type, nans: str, seed: int
) -> None:
    kernel = tuple(k for k, _ in axes)
    out = tuple(o for _, o in axes)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 2, *(k * o for k, o in axes))).astype(dtype)
    if nans == "some":
        x.reshape(-1)[:: 1 + seed % 5] = np.nan
    elif nans == "a whole window":
        x[(slice(None), slice(None), *(slice(0, k) for k in kernel))] = np.nan
    got = kernel_pool(
        x,
        mode="max",
        kernel_shape=kernel,
        strides=kernel,
        pads=(0,) * (2 * len(axes)),
        dilations=(1,) * len(axes),
        out_shape=out,
    )
    split = x.reshape(n, 2, *(e for k, o in axes for e in (o, k)))
    want = np.fmax.reduce(split, axis=tuple(3 + 2 * i for i in range(len(axes))))
    assert isinstance(got, np.ndarray) and got.dtype == x.dtype and got.flags.c_contiguous
    assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True)


CASES = [  # a strided pointwise Conv, one on planes, one on windows, one on windows in blocks
    ((2, 6, 9, 8), (4, 6, 1, 1), (2, 2), (0, 0, 0, 0)),
    ((1, 16, 47, 45), (8, 16, 3, 3), (1, 1), (1, 1, 1, 1)),
    ((1, 96, 7, 7), (256, 96, 3, 3), (1, 1), (1, 1, 1, 1)),
    ((1, 3, 99, 101), (16, 3, 7, 7), (2, 2), (3, 3, 3, 3)),
]


def test_a_result_never_shares_the_reused_scratch() -> None:
    """Each path's im2col and padded input are buffers the thread reuses: a later call, of the same
    shape or another, leaves an earlier result as it was."""
    rng = np.random.default_rng(13)
    kept = []
    for x_shape, w_shape, strides, pads in CASES * 2:
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        y = kernel_conv(x, w, strides=strides, pads=pads, dilations=(1, 1), group=1)
        kept.append((y, y.copy(), reference(x, w, None, strides, pads, (1, 1), 1)))
    for y, copy, want in kept:
        assert np.array_equal(y, copy)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_threads_computing_at_once_each_get_their_own() -> None:
    rng = np.random.default_rng(17)
    jobs = []
    for i in range(16):
        x_shape, w_shape, strides, pads = CASES[i % len(CASES)]
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        jobs.append((x, w, strides, pads, reference(x, w, None, strides, pads, (1, 1), 1)))
    barrier = threading.Barrier(4)
    failures: list[str] = []

    def run(mine: list) -> None:
        barrier.wait()
        for _ in range(5):
            for x, w, strides, pads, want in mine:
                y = kernel_conv(x, w, strides=strides, pads=pads, dilations=(1, 1), group=1)
                if not np.allclose(y, want, rtol=1e-4, atol=1e-4):
                    failures.append(f"{x.shape} x {w.shape}")

    threads = [threading.Thread(target=run, args=(jobs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
