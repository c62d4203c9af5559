"""Library kernels of the conv family: convolution, transposed convolution, Col2Im, pooling and
MaxUnpool (resize, grid sampling and affine grids: `kernels/resize.py`).

Each kernel takes its geometry fully resolved by the operator rule (explicit begin/end pads, the
output extents ceil_mode or auto_pad chose), so the
generated module does no shape reasoning of its own.  Windows are read as strided views, copied
into an im2col (whole, or a block of columns at a time where it outgrows the cache; a pointwise
Conv's is the input itself) and contracted with `matmul`; MaxPool takes running maxima over strided
views; loops run over kernel offsets, axes or blocks only, never over elements.
Halves (f16, bf16) compute in f32 and are narrowed back, as ONNX defines them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from loam.runtime.errors import DataError
from loam.runtime.kernels.common import narrowed, widened


def _conv_windows(xp: np.ndarray, kernel: tuple, strides: tuple, dilations: tuple, out: tuple) -> np.ndarray:
    """The windows of a padded `xp` (N, C, *S): a view (N, C, *out, *kernel) of the taps each output reads."""
    nsp = len(kernel)
    span = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True))
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=tuple(range(2, 2 + nsp)))
    picks = tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, strides, strict=True))
    taps = tuple(slice(None, None, d) for d in dilations)
    return win[(slice(None), slice(None), *picks, *taps)]


def kernel_conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    strides: tuple,
    pads: tuple,
    dilations: tuple,
    group: int,
) -> np.ndarray:
    """ONNX Conv: x (N, C, *S) with w (M, C/group, *K), zero pads `pads` (begins then ends), bias b (M).

    One product of w (group, M/group, C/group * taps) with the taps each output point reads, by one of
    three paths chosen by shape: a pointwise Conv multiplies the input itself (`_conv_pointwise`); a
    unit-stride one copies the taps as shifted runs of the padded input (`_conv_on_planes`), where that
    costs less than gathering each window's taps (`_conv_on_windows`, every other Conv).
    """
    dtype = x.dtype
    xw = widened(x)
    if x.ndim == 3 and group == 1:
        return narrowed(_conv_1d(xw, widened(w), b, strides[0], dilations[0], pads[0], pads[1]), dtype)
    g = _ConvGeometry(x.shape, w.shape, strides, pads, dilations, group)
    ww = widened(w)
    if all(k == 1 for k in g.kernel) and not any(pads):
        y = _conv_pointwise(xw, ww, g)
    elif _on_planes(g):
        y = _conv_on_planes(xw, ww, g)
    else:
        y = _conv_on_windows(xw, ww, g)
    return narrowed(_biased(y, b, len(g.kernel)), dtype)


class _ConvGeometry:
    """A Conv's extents (`kernel_conv`'s x and w shapes, its window parameters), settled once for the
    path that computes it: the padded input's extents and the output's, checked."""

    __slots__ = ("c", "dilations", "group", "kernel", "m", "n", "out", "padded", "pads", "spatial", "strides")

    def __init__(
        self, x_shape: tuple, w_shape: tuple, strides: tuple, pads: tuple, dilations: tuple, group: int
    ) -> None:
        nsp = len(x_shape) - 2
        if min(pads, default=0) < 0:
            raise ValueError("Conv pads must not be negative")
        self.n, self.c, self.m, self.group = x_shape[0], x_shape[1], w_shape[0], group
        self.kernel, self.spatial = tuple(w_shape[2:]), tuple(x_shape[2:])
        self.strides, self.pads, self.dilations = tuple(strides), tuple(pads), tuple(dilations)
        self.padded = tuple(self.spatial[i] + pads[i] + pads[i + nsp] for i in range(nsp))
        self.out = tuple(
            (self.padded[i] - (self.kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(nsp)
        )
        if min(self.out, default=1) < 1:
            raise ValueError("Conv kernel larger than the padded input")


def _one_image(g: _ConvGeometry) -> _ConvGeometry:
    """The same Conv over one image of g's batch."""
    one = _ConvGeometry.__new__(_ConvGeometry)
    for name in _ConvGeometry.__slots__:
        setattr(one, name, getattr(g, name))
    one.n = 1
    return one


def _pitches(extents: tuple) -> tuple[list[int], int]:
    """Row-major element strides of a block of `extents`, and its size."""
    pitch = [1] * len(extents)
    for i in range(len(extents) - 2, -1, -1):
        pitch[i] = pitch[i + 1] * extents[i + 1]
    return pitch, (pitch[0] * extents[0] if extents else 1)


def _product(extents: tuple) -> int:
    """The product of `extents` (1 for none), as a Python int."""
    total = 1
    for e in extents:
        total *= e
    return total


def _on_planes(g: _ConvGeometry, loop_multiply_adds: int = 500, planes_from: int = 256) -> bool:
    """Whether `_conv_on_planes` computes this Conv (unit strides) faster than `_conv_on_windows`.

    It computes the padded columns (and, with a batch, the rows between images) too, then drops
    them in a compacting copy of one loop per output row; `_conv_on_windows` computes only the
    outputs, but its im2col copy runs one loop per output row of each channel and tap.  The first wins
    where the surplus products and the compaction cost less than those loops: large planes with few
    channels (ResNet's 56 x 56 and 28 x 28) and small images in a batch (the digits CNN's 4 x 4).
    `loop_multiply_adds` is what one loop of a numpy copy costs in multiply-adds of the product
    (about 10 ns on short rows against 0.02 ns for OpenBLAS's sgemm at one thread); the compaction's
    loops, which move the batch back outside the channels, count twice.
    """
    nsp = len(g.kernel)
    if not nsp or any(s != 1 for s in g.strides) or not g.n * g.c:
        return False
    # Chosen for one image, as it computes one image a product: an image's path and its rounding never
    # depend on the batch it came in.  A product per image repays its numpy calls (about 10 us) only
    # over large planes, so small images (the digits CNN's) stay on windows, one batched product.
    g = _one_image(g)
    if _product(g.out) < planes_from:  # the fewest output points of an image it computes
        return False
    pitch, plane = _pitches(g.padded)
    computed = (g.n - 1) * plane + g.out[0] * pitch[0]
    taps = _product(g.kernel)
    surplus = (computed - g.n * _product(g.out)) * g.m * (g.c // g.group) * taps
    rows = g.n * _product(g.out[:-1])
    return surplus // loop_multiply_adds + 2 * rows * g.m < rows * g.c * taps


def _scratch(size: int, dtype: np.dtype, slot: int) -> np.ndarray:
    """`size` elements of `dtype` that this thread reuses from call to call, for what a Conv writes and
    reads before it returns (slot 0: an im2col, 1: a padded input), never for its result.

    A fresh block of megabytes is mapped afresh by malloc on most calls (glibc returns a freed block
    at the heap's top, and serves large ones by mmap), then faulted in a page at a time as it is
    first written: ResNet-50 took about 7000 faults a forward, 9 ms of its 85.  One buffer a slot,
    held by the thread (threads may run forwards at once; a thread's go when it ends), grown as
    needed; one past 32 MiB is allocated each call (its faults are small beside the product that
    reads it).
    """
    if size * dtype.itemsize > 1 << 25:
        return np.empty(size, dtype=dtype)
    mine = _scratch.__dict__.setdefault("threads", threading.local())
    held: dict | None = getattr(mine, "held", None)
    if held is None:
        held = mine.held = {}
    key = (dtype.str, slot)
    buf = held.get(key)
    if buf is None or buf.size < size:
        buf = held[key] = np.empty(size, dtype=dtype)
    return buf[:size]


def _conv_pointwise(xw: np.ndarray, ww: np.ndarray, g: _ConvGeometry) -> np.ndarray:
    """A 1 x 1 Conv without pads (ResNet's 1x1s): a product over the channels, whose im2col is the
    input itself, read in place with unit strides and sliced where the Conv strides."""
    cg, mg = g.c // g.group, g.m // g.group
    picked: np.ndarray = xw[(slice(None), slice(None), *(slice(None, None, st) for st in g.strides))]
    if any(st > 1 for st in g.strides):  # the strided slice copied into scratch
        dense = _scratch(picked.size, picked.dtype, 0).reshape(picked.shape)
        np.copyto(dense, picked)
        picked = dense
    cols = picked.reshape(g.n, g.group, cg, -1)
    return np.matmul(ww.reshape(g.group, mg, cg), cols).reshape(g.n, g.m, *g.out)


def _conv_on_planes(xw: np.ndarray, ww: np.ndarray, g: _ConvGeometry) -> np.ndarray:
    """A unit-stride Conv as one product per image over its padded planes, laid out channel by channel
    (C, *padded): output point p is column p (a point of the padded grid; those past the output's
    extents are computed, then dropped), and the tap at kernel offset o reads column p + shift(o) of
    each channel's run.  So each channel's tap is one contiguous run, and the im2col (C/group * taps
    rows per group) is C * taps copies of long runs, where gathering windows takes one per output row
    of each.  (Copying and multiplying a block of columns at a time, in cache, measured no faster on
    ResNet-50's 56 x 56 and 28 x 28 3x3s: the product then reads its whole weight once a block.)
    """
    if g.n != 1:
        # Each image is a product of its own: one product over the whole batch would give an image's
        # outputs in another rounding as its neighbours change (BLAS blocks its columns by their count),
        # and a served image must not depend on the requests it shares a call with.
        one = _one_image(g)
        return np.concatenate([_conv_on_planes(xw[i : i + 1], ww, one) for i in range(g.n)])
    nsp = len(g.kernel)
    cg, mg = g.c // g.group, g.m // g.group
    pitch, plane = _pitches(g.padded)
    taps = _product(g.kernel)
    shifts = [g.dilations[i] * pitch[i] for i in range(nsp)]
    room = sum((g.kernel[i] - 1) * shifts[i] for i in range(nsp))  # the last channel's surplus reads
    run = g.n * plane
    points = (g.n - 1) * plane + g.out[0] * pitch[0]
    buf = _scratch(g.c * run + room, xw.dtype, 1)
    buf.fill(0)
    xp = buf[: g.c * run].reshape(g.c, g.n, *g.padded)
    interior = tuple(slice(g.pads[i], g.pads[i] + g.spatial[i]) for i in range(nsp))
    xp[(slice(None), slice(None), *interior)] = np.swapaxes(xw, 0, 1)
    size = buf.itemsize
    # (C, *K, points): each channel's taps at every point, a view of the padded input (never written).
    win = np.ndarray(
        (g.c, *g.kernel, points), dtype=buf.dtype, buffer=buf, strides=tuple(e * size for e in (run, *shifts, 1))
    )
    cols = _scratch(g.c * taps * points, xw.dtype, 0).reshape(win.shape)
    np.copyto(cols, win)  # the im2col copy
    y = np.matmul(ww.reshape(g.group, mg, cg * taps), cols.reshape(g.group, cg * taps, points))
    # (N, M, *out): each image's outputs, a view of the product's columns.
    kept = np.ndarray(
        (g.n, g.m, *g.out), dtype=y.dtype, buffer=y, strides=tuple(e * size for e in (plane, points, *pitch))
    )
    return np.ascontiguousarray(kept)


def _conv_on_windows(
    xw: np.ndarray, ww: np.ndarray, g: _ConvGeometry, blocked_from: int = 1 << 20, block_bytes: int = 1 << 19
) -> np.ndarray:
    """A Conv as one batched product over exactly the output points: im2col into the layout a batched
    matmul wants, (N, group, C/group * taps, points), so that w (group, M/group, C/group * taps) times
    it gives (N, group, M/group, points): the output's layout.

    An im2col of more than `blocked_from` bytes per image (one group) whose weight is at most an
    eighth of `block_bytes` is copied and multiplied a block of output rows of about `block_bytes` at
    a time, each block still in cache when the product reads it: ResNet-50's 7x7 stride-2 stem (7.4
    MiB whole, its weight 37 KiB) takes about a tenth less time.  The product reads its whole weight
    once a block, so a large weight (ResNet-50's stride-2 3x3s) is multiplied whole.
    """
    nsp = len(g.kernel)
    cg, mg = g.c // g.group, g.m // g.group
    pitch, plane = _pitches(g.padded)
    buf = _scratch(g.n * g.c * plane, xw.dtype, 1)
    buf.fill(0)
    xp = buf.reshape(g.n, g.c, *g.padded)
    xp[(slice(None), slice(None), *(slice(g.pads[i], g.pads[i] + g.spatial[i]) for i in range(nsp)))] = xw
    size = buf.itemsize
    steps = (*(g.dilations[i] * pitch[i] for i in range(nsp)), *(g.strides[i] * pitch[i] for i in range(nsp)))
    # (N, C, *K, *out): the taps each point reads, a view of the padded input (never written).
    win = np.ndarray(
        (g.n, g.c, *g.kernel, *g.out),
        dtype=buf.dtype,
        buffer=buf,
        strides=tuple(e * size for e in (g.c * plane, plane, *steps)),
    )
    rows, points = cg * _product(g.kernel), _product(g.out)
    if g.group > 1 or not nsp or rows * points * size <= blocked_from or 8 * g.m * rows * size > block_bytes:
        cols = _scratch(win.size, xw.dtype, 0).reshape(win.shape)
        np.copyto(cols, win)  # the im2col copy
        return np.matmul(ww.reshape(g.group, mg, rows), cols.reshape(g.n, g.group, rows, points)).reshape(
            g.n, g.m, *g.out
        )
    inner = points // g.out[0]  # the points of one output row
    block = max(-(-128 // inner), block_bytes // (rows * inner * size))  # at least 128 columns a product
    scratch = _scratch(rows * inner * min(2 * block, g.out[0]), xw.dtype, 0)  # room for the longest block
    y = np.empty((g.n, g.m, g.out[0], inner), dtype=xw.dtype)
    w2 = ww.reshape(g.m, rows)
    lead = (slice(None),) * nsp  # the kernel offsets
    for i in range(g.n):
        start = 0
        while start < g.out[0]:
            stop = g.out[0] if g.out[0] - start < 2 * block else start + block  # no short last block
            cols = scratch[: rows * inner * (stop - start)].reshape(g.c, *g.kernel, stop - start, *g.out[1:])
            rows_taps: tuple[int | slice, ...] = (i, slice(None), *lead, slice(start, stop))
            np.copyto(cols, win[rows_taps])  # the im2col copy of these rows
            np.matmul(w2, cols.reshape(rows, -1), out=y[i, :, start:stop].reshape(g.m, -1))
            start = stop
    return y.reshape(g.n, g.m, *g.out)


def _conv_1d(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, dilation: int, begin: int, end: int
) -> np.ndarray:
    """`kernel_conv` over one spatial axis with one group (x and w already widened): the same windows
    and the same product as the general path, in the fewest numpy calls, a long row in blocks.

    Speech models call it on short rows (Silero VAD's STFT, a 32 ms chunk's encoder), where the
    general path's shape arithmetic costs more than the product; an unpadded input is read in place.
    """
    n, c, length = x.shape
    m, k = w.shape[0], w.shape[2]
    if begin < 0 or end < 0:
        raise ValueError("Conv pads must not be negative")
    padded = length + begin + end
    out = (padded - (k - 1) * dilation - 1) // stride + 1
    if out < 1:
        raise ValueError("Conv kernel larger than the padded input")
    if begin or end:
        xp = np.zeros((n, c, padded), dtype=x.dtype)
        xp[:, :, begin : begin + length] = x
    else:
        xp = np.ascontiguousarray(x)
    if k == 1:  # pointwise: the input, strided where the Conv strides, is its own im2col
        cols = np.ascontiguousarray(xp[:, :, : (out - 1) * stride + 1 : stride])
        return _biased(np.matmul(w.reshape(m, c), cols), b, 1)
    size = xp.itemsize
    # (N, C, K, out): the taps each point reads, a view of the padded input (never written)
    win = np.ndarray(
        (n, c, k, out),
        dtype=xp.dtype,
        buffer=xp,
        strides=(c * padded * size, padded * size, dilation * size, stride * size),
    )
    # A long row's im2col is copied and multiplied a block of points at a time, each block (about
    # 512 KiB) still in cache when the product reads it: the Piper voice's 66560-sample layers take
    # a fifth less time, and up to two thirds where M is small.  Each point's sum is the same.
    block = max(256, (1 << 19) // (c * k * size) // 64 * 64)
    if out < 4 * block:
        return _biased(np.matmul(w.reshape(m, c * k), win.reshape(n, c * k, out)), b, 1)  # one im2col copy
    y = np.empty((n, m, out), dtype=xp.dtype)
    start = 0
    while start < out:
        stop = out if out - start < 2 * block else start + block  # no short last block
        np.matmul(
            w.reshape(m, c * k), win[:, :, :, start:stop].reshape(n, c * k, stop - start), out=y[:, :, start:stop]
        )
        start = stop
    return _biased(y, b, 1)


def _biased(y: np.ndarray, b: np.ndarray | None, nsp: int) -> np.ndarray:
    """Conv's result `y` (N, M, *S), a buffer of its own, plus bias `b` (M) where given."""
    if b is None:
        return y
    bias = widened(b).reshape(b.shape[0], *([1] * nsp))
    # y is the kernel's own buffer: add in place when that keeps its dtype.
    return np.add(y, bias, out=y) if bias.dtype == y.dtype else y + bias


def _integer_conv(
    x: np.ndarray,
    x_zero: np.ndarray | None,
    w: np.ndarray,
    w_zero: np.ndarray | None,
    geometry: dict,
) -> np.ndarray:
    """The convolution of (x - x_zero) with (w - w_zero) in f64, where every sum of integer products is
    exact: x's zero point is one value, w's one value or one per output channel (w's axis 0)."""
    xf = np.asarray(x).astype(np.float64)
    if x_zero is not None:
        xf = xf - np.asarray(x_zero).astype(np.float64).reshape(())
    wf = np.asarray(w).astype(np.float64)
    if w_zero is not None:
        wz = np.asarray(w_zero).astype(np.float64)
        wf = wf - (wz.reshape(-1, *([1] * (wf.ndim - 1))) if wz.size > 1 else wz.reshape(()))
    return kernel_conv(xf, wf, **geometry)


def kernel_conv_integer(
    x: np.ndarray,
    w: np.ndarray,
    *zero_points: np.ndarray,
    zeros: int,
    strides: tuple,
    pads: tuple,
    dilations: tuple,
    group: int,
) -> np.ndarray:
    """ONNX ConvInteger: the i32 convolution of (x - x_zero) with (w - w_zero) (pads read as x_zero);
    `zeros` bit 1 says x_zero is given, bit 2 w_zero (in that order among `zero_points`)."""
    given = list(zero_points)
    x_zero = given.pop(0) if zeros & 1 else None
    w_zero = given.pop(0) if zeros & 2 else None
    geometry = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    return np.rint(_integer_conv(x, x_zero, w, w_zero, geometry)).astype(np.int32)


def kernel_qlinear_conv(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero: np.ndarray,
    w: np.ndarray,
    w_scale: np.ndarray,
    w_zero: np.ndarray,
    y_scale: np.ndarray,
    y_zero: np.ndarray,
    b: np.ndarray | None = None,
    *,
    strides: tuple,
    pads: tuple,
    dilations: tuple,
    group: int,
) -> np.ndarray:
    """ONNX QLinearConv as onnxruntime computes it: the i32 convolution of (x - x_zero) with
    (w - w_zero) plus the i32 bias b, as f32 times x_scale * w_scale / y_scale (in f32; w_scale one
    value or one per output channel), rounded to nearest even, plus y_zero, saturated to its type."""
    geometry = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    acc = _integer_conv(x, x_zero, w, w_zero, geometry)
    nsp = acc.ndim - 2
    if b is not None:
        acc = acc + np.asarray(b).astype(np.float64).reshape(-1, *([1] * nsp))
    f32 = np.float32
    ws = np.asarray(w_scale).astype(f32)
    ws = ws.reshape(-1, *([1] * nsp)) if ws.size > 1 else ws.reshape(())
    factor = np.asarray(x_scale).astype(f32).reshape(()) * ws / np.asarray(y_scale).astype(f32).reshape(())
    scaled = np.rint(acc.astype(f32) * factor).astype(np.float64)
    zero = np.asarray(y_zero)
    info = np.iinfo(zero.dtype)
    return np.clip(scaled + zero.astype(np.float64).reshape(()), info.min, info.max).astype(zero.dtype)


def kernel_conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    strides: tuple,
    pads: tuple,
    dilations: tuple,
    group: int,
    output_padding: tuple,
) -> np.ndarray:
    """ONNX ConvTranspose: x (N, C, *S) with w (C, M/group, *K); the full output cropped by `pads`.

    Each input element scatters `w` times itself at stride `strides`: one matmul gives every
    product, laid out (N, M, *K, *S) so that each kernel offset's products are one contiguous block,
    then one strided add per kernel offset places them (col2im).
    """
    dtype = x.dtype
    nsp = x.ndim - 2
    kernel = tuple(w.shape[2:])
    spatial = tuple(x.shape[2:])
    n, c = x.shape[0], x.shape[1]
    mg = w.shape[1]
    cg = c // group
    m = mg * group
    points = int(np.prod(spatial, dtype=np.int64))
    taps = int(np.prod(kernel, dtype=np.int64))
    cols = widened(x).reshape(n, group, cg, points)
    wt = np.swapaxes(widened(w).reshape(group, cg, mg * taps), 1, 2)  # (group, M/group * taps, C/group)
    # (N, group, M/group * taps, points) is already (N, M, *K, *S): no transposing copy
    products = np.matmul(wt, cols).reshape(n, m, *kernel, *spatial)
    full = tuple(
        (spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 + output_padding[i] for i in range(nsp)
    )
    # A negative end pad (output_shape past the scatter) extends the output with zeros.
    room = tuple(full[i] + max(0, -pads[i + nsp]) for i in range(nsp))
    buf = np.zeros((n, m, *room), dtype=products.dtype)
    for offset in np.ndindex(*kernel):
        at = tuple(
            slice(offset[i] * dilations[i], offset[i] * dilations[i] + (spatial[i] - 1) * strides[i] + 1, strides[i])
            for i in range(nsp)
        )
        buf[(slice(None), slice(None), *at)] += products[(slice(None), slice(None), *offset)]
    y = buf[(slice(None), slice(None), *(slice(pads[i], full[i] - pads[i + nsp]) for i in range(nsp)))]
    if b is not None:
        y = y + widened(b).reshape(m, *([1] * nsp))
    return narrowed(y, dtype)


def kernel_col2im(
    x: np.ndarray,
    *operands: np.ndarray,
    image_shape: tuple = (),
    block_shape: tuple = (),
    strides: tuple,
    pads: tuple,
    dilations: tuple,
) -> np.ndarray:
    """ONNX Col2Im: x (N, C * prod(block_shape), L) holds, for each of the L sliding blocks over the
    padded image, its taps; each tap is added onto its image position (N, C, *image_shape), the pads
    cropped after.  One strided add per block offset, in row-major order (the reference's order).

    `operands` are image_shape, then block_shape, as the run gives them, each only where its
    parameter is absent; extents that are not positive, one per image axis, or that do not fit x
    (its axis 1 no multiple of the block's taps, a block wider than the padded image, L not the
    number of blocks) are a DataError."""
    dtype = x.dtype
    nsp = len(strides)
    rest = list(operands)
    shapes = []
    for name, known in (("image_shape", image_shape), ("block_shape", block_shape)):
        if known:
            shapes.append(tuple(known))
            continue
        values = np.asarray(rest.pop(0)).reshape(-1)
        if values.size != nsp or bool((values < 1).any()):
            raise DataError(f"Col2Im's {name} is {values.tolist()}; it must hold {nsp} positive extents")
        shapes.append(tuple(int(v) for v in values))
    image_shape, block_shape = shapes
    if operands:  # what the build could not check
        taps = 1
        for k in block_shape:
            taps *= k
        if x.shape[1] % taps:
            raise DataError(
                f"Col2Im's input axis 1 ({x.shape[1]}) is no multiple of block_shape {list(block_shape)}'s taps"
            )
        count = 1
        for i in range(nsp):
            room = image_shape[i] + pads[i] + pads[i + nsp] - (block_shape[i] - 1) * dilations[i] - 1
            if room < 0:
                raise DataError(
                    f"Col2Im's block_shape {list(block_shape)} spans more than the padded image at axis {i}"
                )
            count *= room // strides[i] + 1
        if count != x.shape[2]:
            raise DataError(
                f"Col2Im's input has {x.shape[2]} blocks (axis 2); image_shape {list(image_shape)} and block_shape "
                f"{list(block_shape)} make {count}"
            )
    taps = 1
    for k in block_shape:
        taps *= k
    n, c = x.shape[0], x.shape[1] // taps
    padded = tuple(image_shape[i] + pads[i] + pads[i + nsp] for i in range(nsp))
    blocks = tuple((padded[i] - (block_shape[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(nsp))
    cols = widened(x).reshape(n, c, *block_shape, *blocks)
    buf = np.zeros((n, c, *padded), dtype=cols.dtype)
    for offset in np.ndindex(*block_shape):
        at = tuple(
            slice(offset[i] * dilations[i], offset[i] * dilations[i] + (blocks[i] - 1) * strides[i] + 1, strides[i])
            for i in range(nsp)
        )
        buf[(slice(None), slice(None), *at)] += cols[(slice(None), slice(None), *offset)]
    crop = tuple(slice(pads[i], pads[i] + image_shape[i]) for i in range(nsp))
    return narrowed(np.ascontiguousarray(buf[(slice(None), slice(None), *crop)]), dtype)


def kernel_max_unpool(x: np.ndarray, indices: np.ndarray, *, spatial: tuple) -> np.ndarray:
    """ONNX MaxUnpool as onnxruntime computes it: zeros (N, C, *spatial), each element of x written at
    its index, a flat row-major position in the whole output (as MaxPool's Indices count); where two
    share a position the later one stays.  An index outside the output is a DataError."""
    shape = (*x.shape[:2], *spatial)
    size = 1
    for e in shape:
        size *= e
    flat = np.asarray(indices).reshape(-1).astype(np.int64)
    bad = (flat < 0) | (flat >= size)
    if bad.any():
        raise DataError(f"MaxUnpool: index {int(flat[bad][0])} lies outside the output's {size} elements")
    y = np.zeros(size, dtype=x.dtype)
    # The last write to a position wins: the first occurrence of each index in reverse order.
    last = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]
    y[flat[last]] = np.asarray(x).reshape(-1)[last]
    return y.reshape(shape)


def _max_of_tiles(x: np.ndarray, kernel: tuple, out: tuple) -> np.ndarray:
    """MaxPool (no NaN rule) over windows that tile x exactly (strides the kernel, no pads, no
    dilations): the digits CNN's 2 x 2 pools.  A running maximum over the kernel's rows along each
    axis in turn, the rows of one axis' window as runs of the axes after it, and along the last axis
    over x flattened, pairs of neighbours: each pass is a few calls over long runs, where reading
    windows as strided views runs one loop per output row of 2."""
    nsp = len(kernel)
    a = np.ascontiguousarray(x)
    outer = a.shape[0] * a.shape[1]
    for i in range(nsp):
        inner = 1
        for e in a.shape[3 + i :]:
            inner *= e
        rows = a.reshape(outer, out[i], kernel[i], inner)
        top = np.maximum(rows[:, :, 0], rows[:, :, 1]) if kernel[i] > 1 else rows[:, :, 0].copy()
        for tap in range(2, kernel[i]):
            np.maximum(top, rows[:, :, tap], out=top)
        a = top.reshape(*x.shape[:2], *out[: i + 1], *x.shape[3 + i :])
        outer *= out[i]
    return a


def kernel_pool(
    x: np.ndarray,
    *,
    mode: str,
    kernel_shape: tuple,
    strides: tuple,
    pads: tuple,
    dilations: tuple,
    out_shape: tuple,
    count_include_pad: int = 0,
    p: float = 2.0,
    storage_order: int = 0,
    indices: int = 0,
    nan_rule: str = "ignore",
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """ONNX MaxPool (`max`), AveragePool (`avg`) and LpPool (`lp`) over the axes after N and C.

    `out_shape` gives the spatial output extents (ceil_mode may ask for one window more than the
    padded input holds: the input is padded further at the end, and those extra taps never count).
    A negative pad (auto_pad SAME with a kernel shorter than the stride) crops the input instead.
    avg divides by the taps inside the input (and inside `pads` too with count_include_pad); lp is
    (sum |x|^p)^(1/p).  max reads only the taps inside the input; a window holding none gives the
    element type's lowest finite value, as onnxruntime does.  NaN taps, by `nan_rule`:
    `ignore`: the max of the other taps (NaN when every tap is NaN); `first`: onnxruntime's
    scan, which keeps the first tap and replaces it by a strictly greater one, so a NaN first tap
    wins and a later NaN never does.  With `indices`, max also returns the flat index in x of the
    tap it kept (row-major, or column-major over the spatial axes with storage_order=1), as
    MaxPool's second output.
    """
    if (
        mode == "max"
        and not indices
        and x.dtype.kind == "f"
        and tuple(strides) == tuple(kernel_shape)
        and not any(pads)
        and all(d == 1 for d in dilations)
        and any(k > 1 for k in kernel_shape)
        and all(o * k == e for o, k, e in zip(out_shape, kernel_shape, x.shape[2:], strict=True))
    ):
        top = _max_of_tiles(x, tuple(kernel_shape), tuple(out_shape))
        if not np.isnan(top).any():  # NaN taps: the rule's own maximum, below
            return top
    dtype = x.dtype
    nsp = x.ndim - 2
    # Negative pads crop: no window reads the cropped elements.
    crop = tuple(slice(max(0, -pads[i]), x.shape[2 + i] - max(0, -pads[i + nsp])) for i in range(nsp))
    xc = x[(slice(None), slice(None), *crop)]
    begins = tuple(max(0, pads[i]) for i in range(nsp))
    ends = tuple(max(0, pads[i + nsp]) for i in range(nsp))
    spatial = tuple(xc.shape[2:])
    span = tuple((k - 1) * d + 1 for k, d in zip(kernel_shape, dilations, strict=True))
    extra = tuple(
        max(0, (out_shape[i] - 1) * strides[i] + span[i] - (spatial[i] + begins[i] + ends[i])) for i in range(nsp)
    )
    widths = [(0, 0), (0, 0)] + [(begins[i], ends[i] + extra[i]) for i in range(nsp)]
    taps = 1
    for k in kernel_shape:
        taps *= k

    def windows(a: np.ndarray) -> np.ndarray:
        win = _conv_windows(a, kernel_shape, strides, dilations, out_shape)
        return win.reshape(*win.shape[: 2 + nsp], taps)

    def window_max(a: np.ndarray) -> np.ndarray:
        # The maximum over each window of the padded `a`: (N, C, *out).  Max over a box is max over
        # one axis after another, each a running maximum over that axis' kernel offsets (max is
        # exact and NaN-propagating, so neither the order nor the grouping of the taps matters).
        for i in range(nsp):
            k, d, n, s = kernel_shape[i], dilations[i], out_shape[i], strides[i]
            lead = (slice(None),) * (2 + i)
            parts = [a[(*lead, slice(o * d, o * d + (n - 1) * s + 1, s))] for o in range(k)]
            a = np.maximum(parts[0], parts[1]) if k > 1 else parts[0]
            for part in parts[2:]:
                np.maximum(a, part, out=a)
        return a

    padding = any(begins) or any(ends) or any(extra)
    if mode == "max":
        is_float = xc.dtype.kind == "f" or xc.dtype.type.__name__ == "bfloat16"
        if is_float:  # the largest finite value is the bit pattern below inf (f16, bf16, f32, f64 alike)
            bits = np.asarray(np.inf).astype(xc.dtype).view(f"u{xc.dtype.itemsize}") - 1
            lowest = -bits.view(xc.dtype)
        else:
            lowest = np.asarray(np.iinfo(xc.dtype).min).astype(xc.dtype)
        if not indices and taps:
            # No index asked for: each window's largest tap inside the input, the input padded with
            # the lowest value there is so that padding never wins; a window with no tap inside
            # gives `lowest`.  Windows with a NaN tap are left to the general path below.
            xp = xc
            interior = (slice(None), slice(None), *(slice(b, b + e) for b, e in zip(begins, spatial, strict=True)))
            if padding:
                xp = np.full(
                    (*xc.shape[:2], *(e + w[0] + w[1] for e, w in zip(spatial, widths[2:], strict=True))),
                    -np.inf if is_float else lowest,
                    dtype=xc.dtype,
                )
                xp[interior] = xc
            top = window_max(xp)
            if xp is xc and all(k == 1 for k in kernel_shape):
                top = top.copy()  # a one-tap kernel's maximum is a view of the input itself
            if not (is_float and np.isnan(top).any()):
                if padding:
                    mask = np.zeros((1, 1, *xp.shape[2:]), dtype=bool)
                    mask[interior] = True
                    any_inside = window_max(mask)
                    if not any_inside.all():
                        top = np.where(any_inside, top, lowest).astype(xc.dtype)
                return top
        floor = -np.inf if is_float else lowest
    # Which taps of each window lie inside the input: (1, 1, *out, taps).
    inside = windows(np.pad(np.ones((1, 1, *spatial), dtype=bool), widths))
    if mode == "max":
        flat = windows(np.pad(xc, widths))
        # The taps that compete: inside the input and, for floats, not NaN.
        number = inside & ~np.isnan(flat) if is_float else np.broadcast_to(inside, flat.shape)
        keyed = np.where(number, flat, floor)
        best = np.argmax(keyed, axis=-1)  # the first greatest
        # When the greatest is the floor itself, argmax may name a tap that does not compete.
        top = np.take_along_axis(keyed, best[..., None], axis=-1)[..., 0]
        best = np.where(top == floor, np.argmax(number, axis=-1), best)
        # No competing tap (all NaN, or none inside): the first tap inside, as onnxruntime's scan keeps.
        first_inside = np.argmax(inside, axis=-1)
        fallback = ~number.any(axis=-1)
        if is_float and nan_rule == "first":
            fallback = fallback | (np.isnan(flat) & (np.arange(taps) == first_inside[..., None])).any(axis=-1)
        best = np.where(fallback, first_inside, best)
        some_inside = inside.any(axis=-1)
        arg = np.broadcast_to(best, flat.shape[:-1])
        y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
        y = np.where(some_inside, y, lowest).astype(flat.dtype)
        if not indices:
            return y
        offsets = np.unravel_index(arg, kernel_shape)
        index = np.zeros(arg.shape, dtype=np.int64)
        stride = 1
        order = range(nsp - 1, -1, -1) if storage_order == 0 else range(nsp)
        for i in order:
            grid = np.arange(out_shape[i], dtype=np.int64).reshape([-1 if j == i else 1 for j in range(nsp)])
            coord = grid * strides[i] - pads[i] + offsets[i].astype(np.int64) * dilations[i]
            # onnxruntime's index of a window with no tap inside reads coordinate -1 on every axis.
            coord = np.where(some_inside, coord, -1)
            index = index + coord * stride
            stride *= x.shape[2 + i]
        planes = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[0], x.shape[1], *([1] * nsp))
        return y, index + planes * stride
    flat = windows(np.pad(widened(xc), widths))
    if mode == "lp":
        y = np.power(np.sum(np.power(np.abs(flat), p), axis=-1), 1.0 / p)
        return narrowed(y, dtype)
    total = flat.sum(axis=-1)
    if count_include_pad:
        counted = np.pad(
            np.ones((1, 1, *(s + begins[i] + ends[i] for i, s in enumerate(spatial))), dtype=bool),
            [(0, 0), (0, 0)] + [(0, e) for e in extra],
        )
        counts = windows(counted).sum(axis=-1)
    else:
        # A window with no tap inside the input (dilations can skip it) averages to 0, as in onnxruntime.
        counts = np.maximum(inside.sum(axis=-1), 1)
    return narrowed(total / counts.astype(total.dtype), dtype)


PIECES: dict[str, Callable[..., object]] = {
    "_conv_windows": _conv_windows,
    "kernel_conv": kernel_conv,
    "_ConvGeometry": _ConvGeometry,
    "_one_image": _one_image,
    "_pitches": _pitches,
    "_product": _product,
    "_on_planes": _on_planes,
    "_scratch": _scratch,
    "_conv_pointwise": _conv_pointwise,
    "_conv_on_planes": _conv_on_planes,
    "_conv_on_windows": _conv_on_windows,
    "_conv_1d": _conv_1d,
    "_biased": _biased,
    "kernel_conv_transpose": kernel_conv_transpose,
    "_integer_conv": _integer_conv,
    "kernel_conv_integer": kernel_conv_integer,
    "kernel_qlinear_conv": kernel_qlinear_conv,
    "kernel_col2im": kernel_col2im,
    "kernel_max_unpool": kernel_max_unpool,
    "kernel_pool": kernel_pool,
    "_max_of_tiles": _max_of_tiles,
}
