"""Library kernels of the reduce family (see `loam/runtime/kernels/__init__.py`).

`kernel.reduce`, `kernel.arg_reduce`, `kernel.topk`, `kernel.cumsum` and `kernel.softmax`.  Each
takes its axes already resolved (non-negative, explicit), so the ONNX conventions (negative axes,
empty axes meaning all, opset differences) live in `loam/ops/reduce.py` alone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.errors import DataError
from loam.runtime.kernels.common import narrowed, one_integer, widened


def saturated(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """An integer reduction's f64 result stored as the integer `dtype`, as onnxruntime's CPU kernels
    store it: at or past the type's largest (lowest) value it is that value, else truncated toward
    zero.  NaN (an f64 product past 1e308 times 0) becomes the lowest value, as x86's conversion gives."""
    info = np.iinfo(dtype)
    y = np.asarray(y, dtype=np.float64)
    high = y >= float(info.max)
    low = ~(y > float(info.min))  # NaN too
    inside = np.where(high | low, 0.0, y).astype(dtype)
    return np.where(high, dtype.type(info.max), np.where(low, dtype.type(info.min), inside))


def integer_reduce(x: np.ndarray, kind: str, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    """Reduce<kind> of integers other than max and min, as onnxruntime's CPU kernels compute it: every
    element taken to f64 (so a sum, product or square cannot wrap), the reduction and its final step
    (mean's division, l2's root, log_sum's log) in f64, and the result `saturated` back.  Exact for
    any i32 sum under 2**22 elements; an i64 sum past 2**53 is f64's rounding of it, as onnxruntime's.
    ReduceLogSum of a sum at or below 0 is the lowest value; ReduceLogSumExp is the maximum plus the
    log of how many elements equal it (every exp(x - max) of an integer truncates to 1 or 0)."""
    f = x.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if kind == "sum":
            y = np.add.reduce(f, axis=axes, keepdims=keep)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
        elif kind == "mean":
            count = 1
            for a in axes:
                count *= x.shape[a]
            y = np.add.reduce(f, axis=axes, keepdims=keep) / max(count, 1)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
        elif kind == "prod":
            y = np.multiply.reduce(f, axis=axes, keepdims=keep)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
        elif kind == "l1":
            y = np.add.reduce(np.abs(f), axis=axes, keepdims=keep)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
        elif kind in ("sum_square", "l2"):
            y = np.add.reduce(f * f, axis=axes, keepdims=keep)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
            if kind == "l2":
                y = np.sqrt(y)
        elif kind == "log_sum":
            total = np.add.reduce(f, axis=axes, keepdims=keep)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
            y = np.where(total > 0, np.log(total), -np.inf)
        else:  # log_sum_exp
            lowest = x.dtype.type(np.iinfo(x.dtype).min)
            top = np.maximum.reduce(x, axis=axes, keepdims=True, initial=lowest)
            hits = np.add.reduce(x == top, axis=axes, keepdims=True, dtype=np.float64)
            y = top.astype(np.float64) + np.log(hits)
            if not keep:
                y = np.squeeze(y, axis=axes)
    return saturated(y, x.dtype)


def kernel_reduce(x: np.ndarray, kind: str, axes: tuple[int, ...], keepdims: int) -> np.ndarray:
    """ONNX Reduce<kind> over `axes`; a reduction over no element gives the reduction's identity.
    Integers other than by max and min reduce in f64 and saturate (`integer_reduce`)."""
    x = np.asarray(x)
    if x.dtype.kind in "iu" and kind not in ("max", "min"):
        return integer_reduce(x, kind, tuple(axes), bool(keepdims))
    w = widened(x)
    axes = tuple(axes)
    keep = bool(keepdims)
    count = 1
    for a in axes:
        count *= x.shape[a]
    integer = w.dtype.kind in "iu"
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if w.dtype == np.bool_:
            # ReduceMax/ReduceMin of bool (opset 20): any / all, whose empty results are False / True.
            y = np.any(w, axis=axes, keepdims=keep) if kind == "max" else np.all(w, axis=axes, keepdims=keep)
        elif kind in ("max", "min"):
            if integer:
                info = np.iinfo(w.dtype)
                low, high = w.dtype.type(info.min), w.dtype.type(info.max)
            else:
                low, high = w.dtype.type(-np.inf), w.dtype.type(np.inf)
            # The ufunc reductions np.max / np.min / np.sum / np.prod call, without their wrappers.
            if kind == "max":
                y = np.maximum.reduce(w, axis=axes, keepdims=keep, initial=low)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
            else:
                y = np.minimum.reduce(w, axis=axes, keepdims=keep, initial=high)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
        elif kind == "sum":
            y = np.add.reduce(w, axis=axes, dtype=w.dtype, keepdims=keep)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
        elif kind == "prod":
            y = np.multiply.reduce(w, axis=axes, dtype=w.dtype, keepdims=keep)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
        elif kind == "mean":
            total = np.add.reduce(w, axis=axes, dtype=w.dtype, keepdims=keep)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
            y = total / w.dtype.type(count)
        elif kind == "l1":
            y = np.add.reduce(np.abs(w), axis=axes, dtype=w.dtype, keepdims=keep)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
        elif kind == "sum_square":
            y = np.add.reduce(w * w, axis=axes, dtype=w.dtype, keepdims=keep)  # type: ignore[call-overload]  # numpy's stubs take keepdims as a literal
        elif kind == "l2":
            y = np.sqrt(np.sum(w * w, axis=axes, keepdims=keep))
        elif kind == "log_sum":
            y = np.log(np.sum(w, axis=axes, keepdims=keep))
        else:  # log_sum_exp, shifted by the maximum so exp cannot overflow
            top = np.max(w, axis=axes, keepdims=True, initial=-np.inf)
            top = np.where(np.isfinite(top), top, np.zeros((), w.dtype))
            y = np.log(np.sum(np.exp(w - top), axis=axes, keepdims=True)) + top
            if not keep:
                y = np.squeeze(y, axis=axes)
        return narrowed(np.asarray(y), x.dtype)


def kernel_arg_reduce(x: np.ndarray, kind: str, axis: int, keepdims: int, select_last_index: int) -> np.ndarray:
    """ONNX ArgMax/ArgMin along `axis`: the first extreme's index, or the last with `select_last_index`."""
    w = widened(np.asarray(x))
    if select_last_index:
        w = np.flip(w, axis)
    index = np.argmax(w, axis=axis, keepdims=True) if kind == "max" else np.argmin(w, axis=axis, keepdims=True)
    if select_last_index:
        index = w.shape[axis] - 1 - index
    if not keepdims:
        index = np.squeeze(index, axis=axis)
    return np.asarray(index, dtype=np.int64)


def kernel_topk(
    x: np.ndarray, count: np.ndarray | None = None, *, k: int = -1, axis: int, largest: int, sorted: int
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX TopK: values and i64 indices of the `k` largest (smallest) along `axis`, ties by lower index.

    `count`, when given, is k as the run gives it (one integer; outside [0, the axis's extent] it is a
    DataError), else the parameter `k` is.  Results are always sorted (ONNX leaves the order open
    when `sorted` is 0).
    """
    x = np.asarray(x)
    w = widened(x)
    n = w.shape[axis]
    if count is not None:
        k = one_integer(count, "TopK's k")
        if not 0 <= k <= n:
            raise DataError(f"TopK's k is {k}; it must lie in [0, {n}], the extent of axis {axis}")
    if largest:
        # A stable ascending sort of the reversed axis, read backwards, is descending with ties
        # in increasing index order.
        order = n - 1 - np.flip(np.argsort(np.flip(w, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(w, axis=axis, kind="stable")
    index = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, index, axis=axis), np.asarray(index, dtype=np.int64)


def _cumulative(x: np.ndarray, axis: int, exclusive: int, reverse: int, product: bool) -> np.ndarray:
    """Running sums (or products) along `axis`; `exclusive` leaves each element out of its own."""
    x = np.asarray(x)
    w = widened(x)
    if reverse:
        w = np.flip(w, axis)
    y = (np.cumprod if product else np.cumsum)(w, axis=axis, dtype=w.dtype)
    n = w.shape[axis]
    if exclusive and n > 0:
        head = (np.ones_like if product else np.zeros_like)(np.take(y, [0], axis=axis))
        y = np.concatenate([head, np.take(y, np.arange(n - 1), axis=axis)], axis=axis)
    if reverse:
        y = np.flip(y, axis)
    return narrowed(np.ascontiguousarray(y), x.dtype)


def kernel_cumsum(x: np.ndarray, axis: int, exclusive: int, reverse: int) -> np.ndarray:
    """ONNX CumSum along `axis`; `exclusive` leaves each element out of its own sum."""
    return _cumulative(x, axis, exclusive, reverse, product=False)


def kernel_cumprod(x: np.ndarray, axis: int, exclusive: int, reverse: int) -> np.ndarray:
    """ONNX CumProd along `axis`; `exclusive` leaves each element out of its own product (1 first)."""
    return _cumulative(x, axis, exclusive, reverse, product=True)


def kernel_softmax(x: np.ndarray, kind: str, axes: tuple[int, ...]) -> np.ndarray:
    """Softmax, LogSoftmax or Hardmax (`kind`) over `axes` taken jointly."""
    x = np.asarray(x)
    w = widened(x)
    axes = tuple(axes)
    if kind == "hardmax":
        # Move the axes last and flatten them: the first maximum of the joint block gets the 1.
        last = tuple(range(w.ndim - len(axes), w.ndim))
        moved = np.moveaxis(w, axes, last)
        lead = moved.shape[: w.ndim - len(axes)]
        block = 1
        for e in moved.shape[len(lead) :]:
            block *= e
        flat = moved.reshape((*lead, block))
        hot = np.zeros(flat.shape, dtype=w.dtype)
        if block and flat.size:
            np.put_along_axis(hot, np.argmax(flat, axis=-1)[..., None], w.dtype.type(1), axis=-1)
        y = np.moveaxis(hot.reshape(moved.shape), last, axes)
    elif w.size == 0:
        y = w  # nothing to normalise (np.max has no identity on an empty axis)
    elif w.ndim and w.dtype.kind == "f":
        # What the branch below computes, without the np.max / np.sum wrappers (they call these
        # reductions) and writing in place into the buffers allocated here (`w` may be `x` itself).
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            shifted = np.subtract(w, np.maximum.reduce(w, axis=axes, keepdims=True))
            if kind == "softmax":
                e = np.exp(shifted, out=shifted)
                y = np.divide(e, np.add.reduce(e, axis=axes, keepdims=True), out=e)
            else:
                y = np.subtract(shifted, np.log(np.add.reduce(np.exp(shifted), axis=axes, keepdims=True)), out=shifted)
    else:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            shifted = w - np.max(w, axis=axes, keepdims=True)
            e = np.exp(shifted)
            total = np.sum(e, axis=axes, keepdims=True)
            y = e / total if kind == "softmax" else shifted - np.log(total)
    return narrowed(np.asarray(y), x.dtype)


def _softmax(x: np.ndarray) -> np.ndarray:
    """`kernel_softmax`'s float32 softmax over the last axis: the same arithmetic in the same order, so
    the same bits, without its dispatch (the printer calls this where the build knows the dtype and
    the axis; forward's own errstate already lets inf and NaN through without warnings)."""
    if not x.size:
        return x
    shifted = np.subtract(x, np.maximum.reduce(x, axis=-1, keepdims=True))
    np.exp(shifted, out=shifted)
    return np.divide(shifted, np.add.reduce(shifted, axis=-1, keepdims=True), out=shifted)


PIECES: dict[str, Callable[..., object]] = {
    "saturated": saturated,
    "integer_reduce": integer_reduce,
    "kernel_reduce": kernel_reduce,
    "_softmax": _softmax,
    "kernel_arg_reduce": kernel_arg_reduce,
    "kernel_topk": kernel_topk,
    "_cumulative": _cumulative,
    "kernel_cumsum": kernel_cumsum,
    "kernel_cumprod": kernel_cumprod,
    "kernel_softmax": kernel_softmax,
}
