"""Library kernels of the conv family: convolution, transposed convolution, pooling, resize, grid sampling
and affine grids.

Each kernel takes its geometry fully resolved by the operator rule (explicit begin/end pads, the
output extents ceil_mode or auto_pad chose, the scales Resize's coordinate mapping reads), so the
generated module does no shape reasoning of its own.  Windows are read as strided views (the
reshape that flattens them is the im2col copy) and contracted with one `matmul` per call; MaxPool
takes running maxima over strided views; loops run over kernel offsets or axes only, never over
elements.
Halves (f16, bf16) compute in f32 and are narrowed back, as ONNX defines them.
"""

from __future__ import annotations

import numpy as np

from loam.runtime.errors import DataError
from loam.runtime.kernels.common import narrowed, room_for, widened


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

    im2col into the layout a batched matmul wants, (N, group, C/group * taps, points), so that
    w (group, M/group, C/group * taps) times it gives (N, group, M/group, points): the output's
    layout.  With unit strides the points of each row are taken across the whole padded row (the
    surplus columns are computed, then dropped by one compacting copy), which makes every window
    a contiguous run of the padded input.
    """
    dtype = x.dtype
    xw = widened(x)
    nsp = x.ndim - 2
    kernel = tuple(w.shape[2:])
    if min(pads, default=0) < 0:
        raise ValueError("Conv pads must not be negative")
    n, c = x.shape[0], x.shape[1]
    m = w.shape[0]
    cg, mg = c // group, m // group
    spatial = tuple(x.shape[2:])
    padded = tuple(spatial[i] + pads[i] + pads[i + nsp] for i in range(nsp))
    out = tuple((padded[i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(nsp))
    if min(out, default=1) < 1:
        raise ValueError("Conv kernel larger than the padded input")
    # The padded input lies in one flat buffer (element strides `pitch`), with room after its end
    # for the reads of the surplus columns.
    pitch = [1] * nsp
    for i in range(nsp - 2, -1, -1):
        pitch[i] = pitch[i + 1] * padded[i + 1]
    plane = pitch[0] * padded[0] if nsp else 1
    # With unit strides, each window may read a contiguous run across whole padded rows, computing
    # the padded columns too and dropping them after: cheaper than gathering exact windows unless
    # those columns are a large share (a 7 x 7 image padded to 9 computes 29% more).
    computed = exact = 1
    for i in range(1, nsp):
        computed, exact = computed * padded[i], exact * out[i]
    unit = nsp > 0 and all(s == 1 for s in strides) and 10 * computed <= 11 * exact
    if all(k == 1 for k in kernel) and not any(pads):
        # A pointwise Conv (ResNet's 1x1s) is a product over the channels: the input, strided where the
        # Conv strides, is already its own im2col.
        picked = xw[(slice(None), slice(None), *(slice(None, None, st) for st in strides))]
        cols = picked.reshape(n, group, cg, -1)
        y = np.matmul(widened(w).reshape(group, mg, cg), cols).reshape(n, m, *out)
        return narrowed(_biased(y, b, nsp), dtype)
    if unit:
        # Points on the grid (out[0], *padded[1:]): one run of out[0] * pitch[0] elements per window.
        grid = (out[0], *padded[1:])
        extent, walk = (out[0] * pitch[0],), (1,)
        room = sum((kernel[i] - 1) * dilations[i] * pitch[i] for i in range(1, nsp))
    else:
        grid, extent, walk, room = out, out, tuple(strides[i] * pitch[i] for i in range(nsp)), 0
    buf = np.zeros(n * c * plane + room, dtype=xw.dtype)
    xp = buf[: n * c * plane].reshape(n, c, *padded)
    xp[(slice(None), slice(None), *(slice(pads[i], pads[i] + spatial[i]) for i in range(nsp)))] = xw
    size = buf.itemsize
    # (N, C, *K, *extent): the taps each point reads, a view of the padded input (never written).
    win = np.ndarray(
        (n, c, *kernel, *extent),
        dtype=buf.dtype,
        buffer=buf,
        strides=tuple(e * size for e in (c * plane, plane, *(dilations[i] * pitch[i] for i in range(nsp)), *walk)),
    )
    taps = points = 1
    for e in kernel:
        taps *= e
    for e in extent:
        points *= e
    cols = win.reshape(n, group, cg * taps, points)  # the im2col copy
    y = np.matmul(widened(w).reshape(group, mg, cg * taps), cols).reshape(n, m, *grid)
    if grid != out:
        y = np.ascontiguousarray(y[(Ellipsis, *(slice(0, o) for o in out))])
    return narrowed(_biased(y, b, nsp), dtype)


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
    product, then one strided add per kernel offset places them (col2im).
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
    cols = widened(x).reshape(n, group, cg, points).transpose(1, 0, 3, 2)  # (group, N, points, C/group)
    wg = widened(w).reshape(group, 1, cg, mg * taps)
    products = np.matmul(cols, wg).reshape(group, n, *spatial, mg, *kernel)
    # -> (N, group, M/group, *S, *K) -> (N, M, *S, *K)
    order = (1, 0, 2 + nsp, *range(2, 2 + nsp), *range(3 + nsp, 3 + 2 * nsp))
    products = products.transpose(order).reshape(n, m, *spatial, *kernel)
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
        buf[(slice(None), slice(None), *at)] += products[(Ellipsis, *offset)]
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
            lowest = None  # computed below where needed
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
                        if is_float:
                            bits = np.asarray(np.inf).astype(xc.dtype).view(f"u{xc.dtype.itemsize}") - 1
                            lowest = -bits.view(xc.dtype)
                        top = np.where(any_inside, top, lowest).astype(xc.dtype)
                return top
        if is_float:
            bits = np.asarray(np.inf).astype(xc.dtype).view(f"u{xc.dtype.itemsize}") - 1
            lowest = -bits.view(xc.dtype)
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
        any_inside = inside.any(axis=-1)
        arg = np.broadcast_to(best, flat.shape[:-1])
        y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
        y = np.where(any_inside, y, lowest).astype(flat.dtype)
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
            coord = np.where(any_inside, coord, -1)
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
            out[a] = int(np.float64(s) * shape[a])
    elif sizes is not None and np.size(sizes):
        wanted = [int(v) for v in np.asarray(sizes).reshape(-1)]
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
                    term = grid_sample_sum(flat, [], [], row + col, row_ok & col_ok)  # type: ignore[operator]
                    term = term * (wy[a] * wx[b]).reshape(n, 1, points)  # type: ignore[index]
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
        given = [int(v) for v in np.asarray(size).reshape(-1)]
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


PIECES: dict[str, object] = {
    "_conv_windows": _conv_windows,
    "kernel_conv": kernel_conv,
    "_biased": _biased,
    "kernel_conv_transpose": kernel_conv_transpose,
    "_integer_conv": _integer_conv,
    "kernel_conv_integer": kernel_conv_integer,
    "kernel_qlinear_conv": kernel_qlinear_conv,
    "kernel_col2im": kernel_col2im,
    "kernel_max_unpool": kernel_max_unpool,
    "kernel_pool": kernel_pool,
    "resize_coordinates": resize_coordinates,
    "nearest_taps": nearest_taps,
    "cubic_taps": cubic_taps,
    "antialias_taps": antialias_taps,
    "kernel_resize": kernel_resize,
    "resize_geometry": resize_geometry,
    "kernel_resize_to": kernel_resize_to,
    "grid_sample_index": grid_sample_index,
    "grid_sample_taps": grid_sample_taps,
    "grid_sample_sum": grid_sample_sum,
    "kernel_grid_sample": kernel_grid_sample,
    "kernel_affine_grid": kernel_affine_grid,
}
DEPENDS: dict[str, tuple[str, ...]] = {
    "kernel_conv": ("widened", "narrowed", "_biased"),
    "_biased": ("widened",),
    "kernel_conv_transpose": ("widened", "narrowed"),
    "_integer_conv": ("kernel_conv",),
    "kernel_conv_integer": ("_integer_conv",),
    "kernel_qlinear_conv": ("_integer_conv",),
    "kernel_col2im": ("widened", "narrowed", "DataError"),
    "kernel_max_unpool": ("DataError",),
    "kernel_pool": ("_conv_windows", "widened", "narrowed"),
    "kernel_resize": ("widened", "narrowed", "resize_coordinates", "nearest_taps", "cubic_taps", "antialias_taps"),
    "resize_geometry": ("DataError",),
    "kernel_resize_to": ("kernel_resize", "resize_geometry", "DataError", "room_for"),
    "kernel_grid_sample": (
        "widened",
        "narrowed",
        "DataError",
        "grid_sample_taps",
        "grid_sample_index",
        "grid_sample_sum",
    ),
    "kernel_affine_grid": ("widened", "narrowed", "DataError"),
}
