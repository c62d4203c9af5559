"""Library kernels of the resize family (`loam/ops/resize.py`): Resize and Upsample, GridSample and
AffineGrid.

Each kernel takes its geometry resolved by the operator rule (the scales Resize's coordinate mapping
reads, the output extents), or, where the run gives scales, sizes, roi or a size, resolves it with
the same function the rule uses (`resize_geometry`), so build and run agree.  Taps and weights are
computed per axis as arrays and applied one axis at a time; loops run over axes or taps only, never
over elements.  Halves (f16, bf16) compute in f32 and are narrowed back, as ONNX defines them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.errors import DataError
from loam.runtime.kernels.common import integers, narrowed, room_for, widened


def resize_coordinates(
    coordinate_mode: str, n_in: int, n_out: int, scale: np.float32, roi: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray | None]:
    """Each output position's coordinate in the input along one axis, in f32 as onnxruntime computes it
    (`roi`: this axis's normalised start and end), and for tf_crop_and_resize which positions fall
    outside the input (else None)."""
    f32 = np.float32
    o = np.arange(n_out, dtype=f32)
    # The resized length as ONNX's mapping reads it: scale * input length, not rounded down.
    length = scale * f32(n_in)
    if coordinate_mode == "half_pixel":
        return (o + f32(0.5)) / scale - f32(0.5), None
    if coordinate_mode == "half_pixel_symmetric":
        adjustment = f32(n_out) / (scale * f32(n_in))
        center = f32(n_in) / f32(2)
        return center * (f32(1) - adjustment) + (o + f32(0.5)) / scale - f32(0.5), None
    if coordinate_mode == "pytorch_half_pixel":
        return ((o + f32(0.5)) / scale - f32(0.5) if n_out > 1 else np.zeros_like(o)), None
    if coordinate_mode == "align_corners":
        return (o * f32(n_in - 1) / (length - f32(1)) if length != 1 else np.zeros_like(o)), None
    if coordinate_mode == "asymmetric":
        return o / scale, None
    if coordinate_mode == "tf_half_pixel_for_nn":
        return (o + f32(0.5)) / scale, None
    if coordinate_mode != "tf_crop_and_resize":
        raise ValueError(f"resize: coordinate_transformation_mode {coordinate_mode!r}")
    start, end = f32(roi[0]), f32(roi[1])
    if length != 1:
        c = start * f32(n_in - 1) + o * (end - start) * f32(n_in - 1) / (length - f32(1))
    else:
        c = np.full_like(o, f32(0.5) * (start + end) * f32(n_in - 1))
    return c, (c < 0) | (c > n_in - 1)


def nearest_taps(c: np.ndarray, nearest_mode: str, scale: np.float32, last: int) -> np.ndarray:
    """The input position nearest mode rounds each coordinate `c` to, clamped to [0, last].
    `simple` is opset 10's rule: floor when enlarging, ceil when shrinking."""
    f32 = np.float32
    if nearest_mode == "round_prefer_floor":
        k = np.ceil(c - f32(0.5))
    elif nearest_mode == "round_prefer_ceil":
        k = np.floor(c + f32(0.5))
    elif nearest_mode == "floor":
        k = np.floor(c)
    elif nearest_mode == "ceil":
        k = np.ceil(c)
    else:  # simple
        k = np.ceil(c) if scale < 1 else np.floor(c)
    return np.clip(k, 0, last).astype(np.int64)


def cubic_taps(c: np.ndarray, a: float, exclude_outside: int, last: int) -> tuple[list, list]:
    """Cubic interpolation at coordinates `c`: the four input positions around floor(c) (clamped to
    [0, last]) and their weights, Keys' coefficients with parameter `a` in f64; with `exclude_outside`
    the taps outside the input weigh 0 and the rest are renormalised."""
    base = np.floor(c)
    t = (c - base).astype(np.float64)
    weights = []
    for j, dist in enumerate([t + 1, t, 1 - t, 2 - t]):
        if j in (1, 2):
            weights.append(((a + 2) * dist - (a + 3)) * dist * dist + 1)
        else:
            weights.append(((a * dist - 5 * a) * dist + 8 * a) * dist - 4 * a)
    taps = [base.astype(np.int64) - 1 + j for j in range(4)]
    if exclude_outside:
        weights = [np.where((tj < 0) | (tj > last), 0.0, wj) for tj, wj in zip(taps, weights, strict=True)]
        total = weights[0] + weights[1] + weights[2] + weights[3]
        weights = [wj / total for wj in weights]
    return [np.clip(tj, 0, last) for tj in taps], weights


def antialias_taps(
    c: np.ndarray, mode: str, scale: float, a: float, exclude_outside: int, last: int
) -> tuple[list, list]:
    """Linear or cubic interpolation with antialias=1 while shrinking (`scale` < 1): the filter is
    stretched by 1 / scale, so each output reads every input position within 1 / scale (linear) or
    2 / scale (cubic) of its coordinate `c`, weighted by the filter at the stretched distance
    (`scale` * distance) and renormalised to sum to 1.  The taps count from the input position left
    of `c` (`c` - 1 when `c` is a whole number, as ONNX counts them), clamped to [0, last]; with
    `exclude_outside` the taps outside the input weigh 0.  Weights compute in f64."""
    reach = 1 if mode == "linear" else 2
    first = int(np.floor(-reach / scale)) + 1
    c64 = c.astype(np.float64)
    left = np.ceil(c64) - 1
    frac = c64 - left  # in (0, 1]
    taps, weights = [], []
    for k in range(first, 2 - first):
        d = np.abs((k - frac) * scale)
        if mode == "linear":
            w = np.clip(1 - d, 0, 1)
        else:
            near = ((a + 2) * d - (a + 3)) * d * d + 1
            far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
            w = np.where(d <= 1, near, np.where(d < 2, far, 0.0))
        taps.append(left.astype(np.int64) + k)
        weights.append(w)
    total = sum(weights)
    weights = [w / total for w in weights]
    if exclude_outside:
        weights = [np.where((t < 0) | (t > last), 0.0, w) for t, w in zip(taps, weights, strict=True)]
        total = sum(weights)
        weights = [w / np.where(total == 0, 1.0, total) for w in weights]
    return [np.clip(t, 0, last) for t in taps], weights


def scaled_extent(scale: np.float32, n: int) -> int:
    """The extent Resize's `scale` gives an axis of extent `n`: scale * n in f32, rounded toward zero,
    as onnxruntime computes it (ONNX's floor(n * scale), whose product onnxruntime rounds to f32:
    0.7 over 10 gives 7, where the f64 product 6.99999988 would give 6)."""
    return int(np.float32(scale) * np.float32(n))


def resize_geometry(
    shape: tuple[int, ...],
    axes: tuple[int, ...],
    roi: np.ndarray | None,
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    keep_aspect_ratio_policy: str,
    crop: bool,
) -> tuple[tuple[float, ...], tuple[int, ...], tuple[float, ...]]:
    """Resize's `kernel_resize` geometry over every axis of an input of extents `shape`: the per-axis
    scales, the output extents and (where `crop`, tf_crop_and_resize) the roi as starts then ends.

    `scales` or `sizes` (one value per axis of `axes`; scales wins where both are given, an empty one
    counts as absent) and `roi` (a start and an end per axis of `axes`) are the node's operands; the
    build calls this with the values it knows, the run-time kernel with those the run gives.  Values
    Resize defines no result for (a count that does not match `axes`, a scale that is not positive and
    finite, a negative size, an empty output) are a DataError naming them."""
    f32 = np.float32
    rank = len(shape)
    full_scales = [f32(1)] * rank
    out = [int(n) for n in shape]
    if scales is not None and np.size(scales):
        values = np.asarray(scales).astype(f32).reshape(-1)
        if values.size != len(axes):
            raise DataError(f"scales has {values.size} values for {len(axes)} axes")
        for a, s in zip(axes, values, strict=True):
            if not (s > 0 and np.isfinite(s)):
                raise DataError(f"scale {float(s)} on axis {a} must be positive and finite")
            full_scales[a] = s
            out[a] = scaled_extent(s, shape[a])
    elif sizes is not None and np.size(sizes):
        wanted = integers(sizes)
        if len(wanted) != len(axes):
            raise DataError(f"sizes has {len(wanted)} values for {len(axes)} axes")
        for a, n in zip(axes, wanted, strict=True):
            if n < 0:
                raise DataError(f"sizes asks extent {n} on axis {a}")
            if shape[a] == 0:
                raise DataError(f"axis {a} is empty: no scale stretches it to extent {n}")
        ratios = [f32(n) / f32(shape[a]) for a, n in zip(axes, wanted, strict=True)]
        if keep_aspect_ratio_policy in ("not_larger", "not_smaller"):
            scale = min(ratios) if keep_aspect_ratio_policy == "not_larger" else max(ratios)
            for a in axes:
                full_scales[a] = scale
                out[a] = int(float(scale) * shape[a] + 0.5)
        elif keep_aspect_ratio_policy == "stretch":
            for a, n, r in zip(axes, wanted, ratios, strict=True):
                full_scales[a], out[a] = r, n
        else:
            raise ValueError(f"resize: keep_aspect_ratio_policy {keep_aspect_ratio_policy!r}")
    else:
        raise DataError("neither scales nor sizes is given (one of them sets the output extents)")
    if any(o < 1 for o in out):
        raise DataError(f"the output extents {out} must be positive")
    full_roi: tuple[float, ...] = ()
    if crop:
        bounds = None if roi is None else np.asarray(roi).astype(f32).reshape(-1)
        if bounds is None or bounds.size != 2 * len(axes):
            given = "none" if bounds is None else f"{bounds.size} values"
            raise DataError(
                f"tf_crop_and_resize takes a roi with a start and an end per resized axis "
                f"({2 * len(axes)} values), not {given}"
            )
        if not np.isfinite(bounds).all():
            raise DataError(f"roi {bounds.tolist()} must be finite")
        starts_ends = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            starts_ends[a], starts_ends[a + rank] = float(bounds[i]), float(bounds[i + len(axes)])
        full_roi = tuple(starts_ends)
    return tuple(float(s) for s in full_scales), tuple(out), full_roi


def kernel_resize(
    x: np.ndarray,
    *,
    mode: str,
    coordinate_mode: str,
    nearest_mode: str,
    scales: tuple,
    sizes: tuple,
    roi: tuple = (),
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    antialias: int = 0,
) -> np.ndarray:
    """ONNX Resize, one axis at a time (nearest, N-linear and N-cubic interpolation are separable).

    `sizes` are the output extents, `scales` the per-axis factors the coordinate mapping divides
    by (both settled by the build); `roi` (starts then ends, normalised) serves tf_crop_and_resize,
    whose outputs mapped outside the input take `extrapolation_value`.  Coordinates are computed in
    f32, as onnxruntime does.  `nearest_mode="simple"` is opset 10's rule: floor when enlarging,
    ceil when shrinking.  `antialias` stretches linear and cubic filters on the axes it shrinks
    (`antialias_taps`).
    """
    dtype = x.dtype
    f32 = np.float32
    y = x if mode == "nearest" else widened(x)
    outside = None
    for axis in range(x.ndim):
        n_in, n_out, scale = x.shape[axis], sizes[axis], f32(scales[axis])
        # An axis the node does not resize is left alone (tf_crop_and_resize still crops it by roi).
        cropped = coordinate_mode == "tf_crop_and_resize" and (roi[axis], roi[axis + x.ndim]) != (0, 1)
        if n_in == n_out and scale == 1 and not cropped:
            continue
        bounds = (roi[axis], roi[axis + x.ndim]) if roi else (0, 1)
        c, off = resize_coordinates(coordinate_mode, n_in, n_out, scale, bounds)
        if off is not None:
            shape = [1] * x.ndim
            shape[axis] = n_out
            off = off.reshape(shape)
            outside = off if outside is None else (outside | off)
        last = n_in - 1
        if mode == "nearest":
            y = np.take(y, nearest_taps(c, nearest_mode, scale, last), axis=axis)
            continue
        shape = [1] * x.ndim
        shape[axis] = n_out
        if mode == "linear" and not (antialias and scale < 1):
            c = np.clip(c, 0, last)
            lo = np.floor(c).astype(np.int64)
            hi = np.minimum(lo + 1, last)
            t = (c - lo).astype(y.dtype).reshape(shape)
            y = np.take(y, lo, axis=axis) * (1 - t) + np.take(y, hi, axis=axis) * t
            continue
        if antialias and scale < 1:
            taps, weights = antialias_taps(c, mode, float(scale), float(cubic_coeff_a), exclude_outside, last)
        else:
            taps, weights = cubic_taps(c, float(cubic_coeff_a), exclude_outside, last)
        acc = None
        for tj, wj in zip(taps, weights, strict=True):
            term = np.take(y, tj, axis=axis) * wj.astype(y.dtype).reshape(shape)
            acc = term if acc is None else acc + term
        assert acc is not None, "every mode reads a tap or more"
        y = acc
    if outside is not None:
        y = np.where(outside, np.asarray(extrapolation_value).astype(y.dtype), y)
    return narrowed(y, dtype)


def kernel_resize_to(
    x: np.ndarray,
    *given: np.ndarray,
    mode: str,
    coordinate_mode: str,
    nearest_mode: str,
    axes: tuple,
    keep_aspect_ratio_policy: str,
    present: int,
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    antialias: int = 0,
) -> np.ndarray:
    """ONNX Resize whose roi, scales or sizes only the run gives: `given` holds the operands `present`
    names (bit 0: roi, 1: scales, 2: sizes), over the axes `axes`.  The geometry is the build's
    (`resize_geometry`), then `kernel_resize` computes; values Resize defines no result for are a
    DataError."""
    operands = iter(given)
    roi, scales, sizes = (np.asarray(next(operands)) if present >> bit & 1 else None for bit in range(3))
    try:
        full_scales, out, roi_all = resize_geometry(
            x.shape, tuple(axes), roi, scales, sizes, keep_aspect_ratio_policy, coordinate_mode == "tf_crop_and_resize"
        )
    except DataError as err:
        raise DataError(f"Resize: {err}") from None
    room_for(out, "Resize's scales or sizes")
    return kernel_resize(
        x,
        mode=mode,
        coordinate_mode=coordinate_mode,
        nearest_mode=nearest_mode,
        scales=full_scales,
        sizes=out,
        roi=roi_all,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
        antialias=antialias,
    )


def grid_sample_index(
    i: np.ndarray, length: int, padding_mode: str, align_corners: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Where tap positions `i` (int64) on a spatial axis of `length` read: `(index, inside)`.

    zeros: a tap outside reads 0 (`inside` marks the others); border: the nearest edge; reflection:
    the position folded about the borders (-0.5 and length - 0.5, or 0 and length - 1 with
    align_corners) until it lies between them, in floats then truncated, as onnxruntime folds taps.
    `inside` is None unless padding_mode is zeros.
    """
    last = length - 1
    if padding_mode == "zeros":
        return np.clip(i, 0, last), (i >= 0) & (i <= last)
    if padding_mode == "border" or length == 1:  # one position: every fold lands on it
        return np.clip(i, 0, last), None
    f = i.astype(np.float64)
    lo, hi = (0.0, float(last)) if align_corners else (-0.5, length - 0.5)
    span = hi - lo
    below, above = f < lo, f > hi
    d = np.where(below, lo - f, np.where(above, f - hi, 0.0))
    folds = np.trunc(d / span)
    r = d - folds * span
    even = np.fmod(folds, 2) == 0
    near, far = np.where(below, lo + r, hi - r), np.where(below, hi - r, lo + r)
    f = np.where(below | above, np.where(even, near, far), f)
    return np.clip(np.trunc(f), 0, last).astype(np.int64), None


def grid_sample_taps(c: np.ndarray, mode: str) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """The tap positions (int64) and weights interpolating at coordinates `c` along one axis.

    nearest: the position rounded half to even, unweighted (None); linear: floor(c) and the next;
    cubic: the four around floor(c), Keys' coefficients with a = -0.75.  Weights compute in `c`'s
    dtype in onnxruntime's order.  A position beyond 2**40 (or NaN) is clipped there before the
    cast to int64, so it reads as outside the input rather than as an undefined integer.
    """
    dt = c.dtype.type
    base = np.rint(c) if mode == "nearest" else np.floor(c)
    far = 2.0**40
    start = np.nan_to_num(np.clip(base, -far, far), nan=-far).astype(np.int64)
    if mode == "nearest":
        return [start], None
    one = dt(1)
    if mode == "linear":
        return [start, start + 1], [(base + one) - c, c - base]
    t = np.abs((c - (base - one)) - one)
    a, two, three = dt(-0.75), dt(2), dt(3)
    u, v, w = t + one, one - t, two - t
    weights = [
        ((a * u - dt(5) * a) * u + dt(8) * a) * u - dt(4) * a,
        ((a + two) * t - (a + three)) * t * t + one,
        ((a + two) * v - (a + three)) * v * v + one,
        ((a * w - dt(5) * a) * w + dt(8) * a) * w - dt(4) * a,
    ]
    return [start - 1 + k for k in range(4)], weights


def grid_sample_sum(
    flat: np.ndarray,
    reads: list[list[tuple[np.ndarray, np.ndarray | None]]],
    weights: list[list[np.ndarray] | None],
    offset: np.ndarray,
    inside: np.ndarray | None,
) -> np.ndarray:
    """The values (N, C, P) interpolated over the spatial axes `reads` still lists, from `flat`
    (N, C, S): for each tap of the first (`reads[0]`: its flat offset and in-bounds mask, None
    unless zeros padding) the sum over the axes after it, weighted by `weights[0]` (None: nearest's
    one tap) and added in order, as onnxruntime nests its sums.  `offset` and `inside` carry what
    the axes before chose; with no axis left, the gather."""
    n, points = offset.shape
    if not reads:
        y = np.take_along_axis(flat, offset.reshape(n, 1, points), axis=2)
        return y if inside is None else np.where(inside.reshape(n, 1, points), y, y.dtype.type(0))
    acc: np.ndarray | None = None
    for j, (step, ok) in enumerate(reads[0]):
        mask = ok if inside is None else inside if ok is None else inside & ok
        term = grid_sample_sum(flat, reads[1:], weights[1:], offset + step, mask)
        if weights[0] is not None:
            term = term * weights[0][j].reshape(n, 1, points)
        acc = term if acc is None else acc + term
    assert acc is not None  # every axis has a tap
    return acc


def kernel_grid_sample(
    x: np.ndarray, grid: np.ndarray, *, mode: str, padding_mode: str, align_corners: int
) -> np.ndarray:
    """ONNX GridSample: X (N, C, *S) read at grid (N, *O, r), whose last axis holds positions
    normalised to [-1, 1] in reverse axis order (x, y[, z]); the result is (N, C, *O).

    Each spatial axis gives every output point its taps (1, 2 or 4) and weights; each combination
    of taps is one gather from the flattened spatial axes (`padding_mode` settling the taps
    outside), summed innermost axis first in onnxruntime's order (its 2-D linear path with zeros
    padding and align_corners=0 weighs each of the four taps by a product of weights instead), so
    the loops run over taps, never over elements.  Positions compute in the wider of X's and grid's
    types, halves in f32.  DataError: a spatial axis of X is empty and padding_mode has no edge.
    """
    dtype = x.dtype
    xw, gw = widened(x), widened(grid)
    ct = np.result_type(xw.dtype, gw.dtype).type
    n, ch, spatial = x.shape[0], x.shape[1], tuple(x.shape[2:])
    rank, out = len(spatial), tuple(grid.shape[1:-1])
    points = int(np.prod(out, dtype=np.int64))
    if 0 in spatial and n * ch * points and padding_mode != "zeros":
        raise DataError(f"GridSample: X has spatial extents {spatial}; padding_mode {padding_mode} has no edge to read")
    if 0 in spatial or n * ch * points == 0:  # nothing to read, or nothing to write
        return narrowed(np.zeros((n, ch, *out), ct), dtype)
    # Positions beyond any extent, infinite or NaN give NaN weights or far taps, not warnings.
    with np.errstate(invalid="ignore", over="ignore"):
        g = gw.astype(ct, copy=False).reshape(n, points, rank)
        reads: list[list[tuple[np.ndarray, np.ndarray | None]]] = []
        weights: list[list[np.ndarray] | None] = []
        for axis, length in enumerate(spatial):
            p = g[..., rank - 1 - axis]
            if align_corners:
                c = (p + ct(1)) / ct(2) * ct(length - 1)
            else:
                c = ((p + ct(1)) * ct(length) - ct(1)) / ct(2)
            positions, w = grid_sample_taps(c, mode)
            stride = int(np.prod(spatial[axis + 1 :], dtype=np.int64))
            taps = [grid_sample_index(i, length, padding_mode, align_corners) for i in positions]
            reads.append([(index * stride, ok) for index, ok in taps])
            weights.append(w)
        flat = xw.astype(ct, copy=False).reshape(n, ch, -1)
        origin = np.zeros((n, points), np.int64)
        if mode == "linear" and rank == 2 and padding_mode == "zeros" and not align_corners:
            (rows, cols), (wy, wx) = reads, weights
            y = None
            for a, (row, row_ok) in enumerate(rows):
                for b, (col, col_ok) in enumerate(cols):
                    term = grid_sample_sum(flat, [], [], row + col, row_ok & col_ok)  # type: ignore[operator]  # zeros padding: masks
                    term = term * (wy[a] * wx[b]).reshape(n, 1, points)  # type: ignore[index]  # linear taps: weighted
                    y = term if y is None else y + term
            assert y is not None
        else:
            y = grid_sample_sum(flat, reads, weights, origin, None)
    return narrowed(y.reshape(n, ch, *out), dtype)


def kernel_affine_grid(
    theta: np.ndarray, size: np.ndarray | None = None, *, sizes: tuple = (), align_corners: int
) -> np.ndarray:
    """ONNX AffineGrid: the sampling grid (N, *sizes, r) that `theta` (N, r, r + 1) maps the
    normalised positions of an output of spatial extents `sizes` (r = 2 or 3) to, for GridSample.

    Each spatial axis of n positions spans [-1, 1]: with `align_corners` at the first and last
    positions' centres (-1 + 2 i / (n - 1)), else at their outer edges ((2 i + 1) / n - 1).  A grid
    point is `theta[n] @ (x, y[, z], 1)`, x along the last axis.  Computes in f64 and stores in
    theta's type.  A `size` operand (N, C, *sizes) the run gives replaces `sizes`: a batch other
    than theta's, a negative extent, or align_corners over an extent of 1 is then a DataError.
    """
    if size is not None:
        given = integers(size)
        sizes = tuple(given[2:])
        if given[0] != theta.shape[0] or any(n < 0 for n in sizes) or (align_corners and 1 in sizes):
            raise DataError(
                f"AffineGrid's size {given} needs theta's batch {theta.shape[0]}, no negative extent, and with "
                "align_corners no spatial extent of 1"
            )
    dtype = theta.dtype
    t = widened(theta).astype(np.float64)
    r = len(sizes)
    coords = []
    for n in sizes:
        i = np.arange(n, dtype=np.float64)
        coords.append(-1 + 2 * i / max(n - 1, 1) if align_corners else (2 * i + 1) / n - 1)
    mesh = np.meshgrid(*coords, indexing="ij")
    homogeneous = np.stack([*(m.reshape(-1) for m in reversed(mesh)), np.ones(mesh[0].size)], axis=-1)
    grid = np.matmul(homogeneous, t.transpose(0, 2, 1))  # (N, points, r)
    return narrowed(grid.reshape(theta.shape[0], *sizes, r), dtype)


PIECES: dict[str, Callable[..., object]] = {
    "resize_coordinates": resize_coordinates,
    "nearest_taps": nearest_taps,
    "cubic_taps": cubic_taps,
    "antialias_taps": antialias_taps,
    "kernel_resize": kernel_resize,
    "resize_geometry": resize_geometry,
    "scaled_extent": scaled_extent,
    "kernel_resize_to": kernel_resize_to,
    "grid_sample_index": grid_sample_index,
    "grid_sample_taps": grid_sample_taps,
    "grid_sample_sum": grid_sample_sum,
    "kernel_grid_sample": kernel_grid_sample,
    "kernel_affine_grid": kernel_affine_grid,
}
