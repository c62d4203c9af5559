"""Library kernels of the normalization family (see `loam/runtime/kernels/__init__.py`).

`kernel.normalize` (LayerNormalization, InstanceNormalization), `kernel.batch_norm_train`
(BatchNormalization's training mode), `kernel.group_norm`, `kernel.lrn` and `kernel.einsum`.
Statistics are computed in f32 (f64 for f64 inputs, or as `stash` says) and the result narrowed to
the input's element type.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.kernels.common import narrowed, widened


def kernel_normalize(
    x: np.ndarray,
    scale: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    *,
    axes: tuple[int, ...],
    epsilon: float,
    channel_axis: int,
    stash: str,
    stats: int,
) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x - mean) / sqrt(var + epsilon) * scale + bias, the moments taken over `axes` in dtype `stash`.

    `channel_axis` -1: scale and bias broadcast numpy-style; otherwise they are 1-D along that
    axis.  With `stats`, also the mean and the inverse standard deviation (reduced axes kept).
    """
    x = np.asarray(x)
    compute = np.dtype(stash)
    w = x.astype(compute)
    axes = tuple(axes)
    if compute.kind == "f" and compute.itemsize >= 4 and w.size and w.ndim and w.flags.c_contiguous:
        # The arithmetic below without np.mean's wrapper: np.mean is the pairwise sum divided in place by
        # the count as a numpy intp (the same bits), and the full-size buffers are written in place; all
        # of them were allocated here (`w` is a copy of `x`).
        elements = 1
        for a in axes:
            elements *= w.shape[a]
        count = np.intp(elements)
        mean = np.add.reduce(w, axis=axes, keepdims=True)
        mean /= count  # in place, as np.mean divides: the quotient is rounded to the sum's dtype
        np.subtract(w, mean, out=w)
        var = np.add.reduce(np.multiply(w, w), axis=axes, keepdims=True)
        var /= count
        inv = compute.type(1) / np.sqrt(var + compute.type(epsilon))
        y = widened(narrowed(np.multiply(w, inv, out=w), x.dtype))
        for p, op in ((scale, np.multiply), (bias, np.add)):
            if p is not None:
                p = widened(np.asarray(p))
                if channel_axis >= 0:
                    p = p.reshape((-1,) + (1,) * (x.ndim - 1 - channel_axis))
                # In place only where that changes nothing: the same dtype, and p spans y's last axes.
                y = op(y, p, out=y) if p.dtype == y.dtype and p.shape == y.shape[y.ndim - p.ndim :] else op(y, p)
        y = narrowed(y, x.dtype)
        if stats:
            return y, mean, inv
        return y
    mean = np.mean(w, axis=axes, keepdims=True)
    centred = w - mean
    inv = compute.type(1) / np.sqrt(np.mean(centred * centred, axis=axes, keepdims=True) + compute.type(epsilon))
    # ONNX's function body casts the normalised value back to the input type before the affine part.
    y = widened(narrowed(centred * inv, x.dtype))

    def aligned(p: np.ndarray) -> np.ndarray:
        p = widened(np.asarray(p))
        if channel_axis < 0:
            return p
        return p.reshape((-1,) + (1,) * (x.ndim - 1 - channel_axis))

    if scale is not None:
        y = y * aligned(scale)
    if bias is not None:
        y = y + aligned(bias)
    y = narrowed(y, x.dtype)
    if stats:
        return y, mean, inv
    return y


def layer_norm(x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, epsilon: float) -> np.ndarray:
    """`kernel_normalize` over the last axis of a float32 `x` (of any layout), with float32 `scale` and
    `bias` along that axis (or None): the same arithmetic in the same order, so the same bits, without
    the piece's dispatch on dtypes (the printer calls this where the build knows them)."""
    count = np.intp(x.shape[-1])
    mean = np.add.reduce(x, axis=-1, keepdims=True)
    mean /= count
    w = np.subtract(x, mean)
    var = np.add.reduce(np.multiply(w, w), axis=-1, keepdims=True)
    var /= count
    w *= np.float32(1) / np.sqrt(var + np.float32(epsilon))
    if scale is not None:
        w *= scale
    if bias is not None:
        w += bias
    return w


def kernel_group_norm(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray, *, num_groups: int, epsilon: float, per_group: int, stash: str
) -> np.ndarray:
    """ONNX GroupNormalization over [N, C, ...]: moments per (sample, group of C / num_groups channels).

    Scale and bias are per channel, or per group with `per_group` (opset 18).
    """
    x = np.asarray(x)
    compute = np.dtype(stash)
    w = x.astype(compute)
    n, c = w.shape[0], w.shape[1]
    grouped = w.reshape((n, num_groups, -1)) if w.size else w.reshape((n, num_groups, 0))
    mean = np.mean(grouped, axis=2, keepdims=True)
    centred = grouped - mean
    var = np.mean(centred * centred, axis=2, keepdims=True)
    y = (centred / np.sqrt(var + compute.type(epsilon))).reshape(w.shape)
    s, b = np.asarray(scale).astype(compute), np.asarray(bias).astype(compute)
    if per_group:
        s, b = np.repeat(s, c // num_groups), np.repeat(b, c // num_groups)
    shape = (c,) + (1,) * (w.ndim - 2)
    return narrowed(y * s.reshape(shape) + b.reshape(shape), x.dtype)


def kernel_lrn(x: np.ndarray, *, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX LRN across channels (axis 1): each window holds floor((size-1)/2) channels before, the rest after."""
    x = np.asarray(x)
    w = widened(x)
    before = (size - 1) // 2
    after = size - 1 - before
    squares = np.pad(w * w, [(0, 0), (before, after)] + [(0, 0)] * (w.ndim - 2))
    channels = w.shape[1]
    total = np.zeros_like(w)
    for offset in range(size):
        total = total + squares[:, offset : offset + channels]
    t = w.dtype.type
    y = w / (t(bias) + t(alpha) / t(size) * total) ** t(beta)
    return narrowed(y, x.dtype)


def kernel_einsum(*operands: np.ndarray, equation: str) -> np.ndarray:
    """ONNX Einsum: numpy.einsum of the operands (halves computed in f32)."""
    arrays = [np.asarray(a) for a in operands]
    y = np.einsum(equation, *[widened(a) for a in arrays])
    return narrowed(np.asarray(y), arrays[0].dtype)


def kernel_batch_norm_train(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float,
    momentum: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BatchNormalization with training_mode 1: X (N, C, ...) normalised by its own statistics per
    channel (the mean and the population variance over every axis but 1), then scaled and shifted;
    and the running statistics `mean` and `var` moved toward the batch's by `1 - momentum`.

    Returns (Y in X's type, running mean, running variance in `mean`'s and `var`'s types).  Computes
    in f64 when any operand is f64, else in f32 (halves widened).
    """
    ops = [widened(a) for a in (x, scale, bias, mean, var)]
    ct = np.result_type(*ops, np.float32)
    xw, sw, bw, mw, vw = (a.astype(ct, copy=False) for a in ops)
    axes = (0, *range(2, x.ndim))
    batch_mean = xw.mean(axis=axes)
    centred = xw - batch_mean.reshape((-1,) + (1,) * (x.ndim - 2))
    batch_var = np.mean(centred * centred, axis=axes)
    shape = (-1,) + (1,) * (x.ndim - 2)
    inv = ct.type(1) / np.sqrt(batch_var + ct.type(epsilon))
    y = centred * inv.reshape(shape) * sw.reshape(shape) + bw.reshape(shape)
    keep = ct.type(momentum)
    running_mean = mw * keep + batch_mean * (ct.type(1) - keep)
    running_var = vw * keep + batch_var * (ct.type(1) - keep)
    return narrowed(y, x.dtype), narrowed(running_mean, mean.dtype), narrowed(running_var, var.dtype)


PIECES: dict[str, Callable[..., object]] = {
    "kernel_normalize": kernel_normalize,
    "layer_norm": layer_norm,
    "kernel_batch_norm_train": kernel_batch_norm_train,
    "kernel_group_norm": kernel_group_norm,
    "kernel_lrn": kernel_lrn,
    "kernel_einsum": kernel_einsum,
}
