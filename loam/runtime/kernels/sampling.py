"""Library kernels that sample a feature map at fractional positions, bilinearly: RoiAlign (and the
deformable convolution, whose taps move by learned offsets).

Positions come from run-time values (a region's corners, an offset), so each kernel computes them
as arrays and gathers the four neighbours of every sample at once; loops run only over the samples
of one output bin or the kernel's taps, never over elements.  Coordinates and weights are computed
in the input's arithmetic type (f32 for f32, f16 and bf16; f64 for f64), in onnxruntime's order of
operations, so sums and products round as its CPU kernels do.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.errors import DataError
from loam.runtime.kernels.common import narrowed, widened


def kernel_roi_align(
    x: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    *,
    mode: str,
    output_height: int,
    output_width: int,
    sampling_ratio: int,
    spatial_scale: float,
    half_pixel: int,
) -> np.ndarray:
    """ONNX RoiAlign as onnxruntime computes it: for each region (x1, y1, x2, y2) of image
    batch_indices[r], an output_height x output_width grid of bins, each the average (or, `max`, the
    largest weighted corner) of a grid of bilinear samples: sampling_ratio per axis, or ceil(bin
    extent) where it is 0.  A sample more than one pixel outside the map reads 0; `half_pixel` shifts
    the region by half a pixel (else a region is at least 1 x 1).  A batch index outside X is a
    DataError."""
    dtype = x.dtype
    xw = widened(x)
    ct = xw.dtype.type
    n, c, h, w = xw.shape
    b = np.asarray(batch_indices).astype(np.int64).reshape(-1)
    bad = (b < 0) | (b >= n)
    if bad.any():
        raise DataError(f"RoiAlign: batch index {int(b[bad][0])} lies outside X's {n} images")
    r = widened(rois).astype(xw.dtype).reshape(-1, 4)
    count_r = r.shape[0]
    ph, pw = output_height, output_width
    scale, offset = ct(spatial_scale), ct(0.5 if half_pixel else 0.0)
    start_w, start_h = r[:, 0] * scale - offset, r[:, 1] * scale - offset
    roi_w, roi_h = (r[:, 2] * scale - offset) - start_w, (r[:, 3] * scale - offset) - start_h
    if not half_pixel:  # malformed regions become 1 x 1
        roi_w, roi_h = np.maximum(roi_w, ct(1)), np.maximum(roi_h, ct(1))
    bin_h, bin_w = roi_h / ct(ph), roi_w / ct(pw)
    if sampling_ratio > 0:
        grid_h = np.full(count_r, sampling_ratio, np.int64)
        grid_w = np.full(count_r, sampling_ratio, np.int64)
    else:
        grid_h, grid_w = np.ceil(roi_h / ct(ph)).astype(np.int64), np.ceil(roi_w / ct(pw)).astype(np.int64)
    count = np.maximum(grid_h * grid_w, 1).astype(xw.dtype)
    # The map as (N, H * W, C): a gather of positions (R, PH, PW) gives (R, PH, PW, C).
    planes = xw.reshape(n, c, h * w).transpose(0, 2, 1)
    image = b[:, None, None]
    # Each bin's first row and column: roi_start + p * bin_size (onnxruntime's order of operations).
    row0 = start_h[:, None] + np.arange(ph, dtype=xw.dtype)[None, :] * bin_h[:, None]  # (R, PH)
    col0 = start_w[:, None] + np.arange(pw, dtype=xw.dtype)[None, :] * bin_w[:, None]  # (R, PW)
    acc = np.zeros((count_r, ph, pw, c), dtype=xw.dtype)
    seen = np.zeros((count_r, 1, 1, 1), dtype=bool)
    for iy in range(max(int(grid_h.max(initial=0)), 0)):
        yy = row0 + (ct(iy + 0.5) * bin_h / grid_h.astype(xw.dtype))[:, None]
        for ix in range(max(int(grid_w.max(initial=0)), 0)):
            xx = col0 + (ct(ix + 0.5) * bin_w / grid_w.astype(xw.dtype))[:, None]
            live = ((iy < grid_h) & (ix < grid_w))[:, None, None, None]
            corners = _bilinear(yy[:, :, None], xx[:, None, :], h, w)
            taps = [wt[..., None] * planes[image, pos] for pos, wt in corners]
            if mode == "avg":
                sample = taps[0] + taps[1] + taps[2] + taps[3]
                acc = np.where(live, acc + sample, acc)
            else:
                sample = np.maximum(np.maximum(np.maximum(taps[0], taps[1]), taps[2]), taps[3])
                acc = np.where(live, np.where(seen, np.maximum(acc, sample), sample), acc)
                seen = seen | live
    if mode == "avg":
        acc = acc / count[:, None, None, None]
    return narrowed(np.ascontiguousarray(acc.transpose(0, 3, 1, 2)), dtype)


def _bilinear(y: np.ndarray, x: np.ndarray, h: int, w: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The four neighbours of each sample (y, x) of an h x w map, as (flat position, weight) pairs in
    the order (low, low), (low, high), (high, low), (high, high), as onnxruntime's RoiAlign weighs
    them: a sample more than one pixel outside the map weighs 0 everywhere, one within a pixel is
    clamped onto the edge."""
    y, x = np.broadcast_arrays(y, x)
    ct = y.dtype.type
    outside = (y < -1) | (y > h) | (x < -1) | (x > w)
    y, x = np.maximum(y, ct(0)), np.maximum(x, ct(0))
    y_low, x_low = y.astype(np.int64), x.astype(np.int64)
    y_edge, x_edge = y_low >= h - 1, x_low >= w - 1
    y_low, x_low = np.where(y_edge, h - 1, y_low), np.where(x_edge, w - 1, x_low)
    y_high, x_high = np.where(y_edge, h - 1, y_low + 1), np.where(x_edge, w - 1, x_low + 1)
    y, x = np.where(y_edge, y_low.astype(y.dtype), y), np.where(x_edge, x_low.astype(x.dtype), x)
    ly, lx = y - y_low.astype(y.dtype), x - x_low.astype(x.dtype)
    hy, hx = ct(1) - ly, ct(1) - lx
    out = []
    for yi, xi, wt in (
        (y_low, x_low, hy * hx),
        (y_low, x_high, hy * lx),
        (y_high, x_low, ly * hx),
        (y_high, x_high, ly * lx),
    ):
        out.append((np.where(outside, 0, yi * w + xi), np.where(outside, ct(0), wt)))
    return out


def _bilinear_zero(planes: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Bilinear samples of `planes` (..., C, H, W) at (y, x) (..., P), zero outside the map, as
    deformable convolution samples (torchvision's and onnxruntime's): a sample more than a pixel
    outside reads 0, a corner outside reads 0.  Gives (..., C, P)."""
    h, w = planes.shape[-2:]
    ct = y.dtype.type
    flat = planes.reshape(*planes.shape[:-2], h * w)
    inside = (y > -1) & (y < h) & (x > -1) & (x < w)
    y0, x0 = np.floor(y), np.floor(x)
    ly, lx = y - y0, x - x0
    hy, hx = ct(1) - ly, ct(1) - lx
    y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
    total = None
    for yi, xi, wt in ((y0, x0, hy * hx), (y0, x0 + 1, hy * lx), (y0 + 1, x0, ly * hx), (y0 + 1, x0 + 1, ly * lx)):
        there = inside & (yi >= 0) & (yi <= h - 1) & (xi >= 0) & (xi <= w - 1)
        pos = np.where(there, yi * w + xi, 0)[..., None, :]
        value = np.where(there[..., None, :], np.take_along_axis(flat, pos, axis=-1), ct(0))
        term = wt[..., None, :] * value
        total = term if total is None else total + term
    assert total is not None
    return np.where(inside[..., None, :], total, ct(0))


def kernel_deform_conv(
    x: np.ndarray,
    w: np.ndarray,
    offset: np.ndarray,
    *extras: np.ndarray,
    given: int,
    strides: tuple,
    pads: tuple,
    dilations: tuple,
    group: int,
    offset_group: int,
) -> np.ndarray:
    """ONNX DeformConv over two spatial axes: Conv of x (N, C, H, W) with w (M, C/group, KH, KW), each
    tap read at its place moved by `offset` (N, offset_group * KH * KW * 2, OH, OW: (dy, dx) per tap),
    bilinearly with zeros outside, times `mask` (N, offset_group * KH * KW, OH, OW) where given, plus
    the bias.  `given` bit 1 says the bias follows, bit 2 the mask (in that order among `extras`).
    The moved taps are gathered one kernel tap at a time into im2col columns, then one matmul."""
    rest = list(extras)
    b = rest.pop(0) if given & 1 else None
    mask = rest.pop(0) if given & 2 else None
    dtype = x.dtype
    xw = widened(x)
    n, c, h, wd = xw.shape
    m, cg, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    og = offset_group
    moves = widened(offset).astype(xw.dtype).reshape(n, og, kh, kw, 2, oh * ow)
    weights = None if mask is None else widened(mask).astype(xw.dtype).reshape(n, og, kh, kw, oh * ow)
    rows = (np.arange(oh, dtype=np.int64) * strides[0] - pads[0])[:, None].repeat(ow, axis=1).reshape(-1)
    cols_at = (np.arange(ow, dtype=np.int64) * strides[1] - pads[1])[None, :].repeat(oh, axis=0).reshape(-1)
    planes = xw.reshape(n, og, c // og, h, wd)
    cols = np.empty((n, c, kh, kw, oh * ow), dtype=xw.dtype)
    for i in range(kh):
        for j in range(kw):
            y = (rows + i * dilations[0]).astype(xw.dtype) + moves[:, :, i, j, 0]  # (N, og, P)
            xx = (cols_at + j * dilations[1]).astype(xw.dtype) + moves[:, :, i, j, 1]
            sample = _bilinear_zero(planes, y, xx)  # (N, og, C/og, P)
            if weights is not None:
                sample = sample * weights[:, :, i, j][:, :, None, :]
            cols[:, :, i, j] = sample.reshape(n, c, oh * ow)
    taps = cg * kh * kw
    out = np.matmul(widened(w).astype(xw.dtype).reshape(group, m // group, taps), cols.reshape(n, group, taps, oh * ow))
    out = out.reshape(n, m, oh, ow)
    if b is not None:
        out = out + widened(b).astype(xw.dtype).reshape(m, 1, 1)
    return narrowed(out, dtype)


PIECES: dict[str, Callable[..., object]] = {
    "kernel_roi_align": kernel_roi_align,
    "_bilinear": _bilinear,
    "_bilinear_zero": _bilinear_zero,
    "kernel_deform_conv": kernel_deform_conv,
}
