"""Library kernels of the loss family (see `loam/runtime/kernels/__init__.py`): `kernel.nll_loss`.

ONNX's NegativeLogLikelihoodLoss, and so SoftmaxCrossEntropyLoss, whose rule takes the log-softmax
first (`kernel.softmax`).  Halves are computed in f32 and the loss narrowed to the input's type.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.errors import DataError
from loam.runtime.kernels.common import narrowed, widened


def kernel_nll_loss(
    x: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None = None,
    *,
    reduction: str,
    ignore_index: int,
    ignores: int,
) -> np.ndarray:
    """loss[n, d...] = -x[n, target[n, d...], d...] * weight[target[n, d...]] (weight 1 when absent),
    0 where the target is `ignore_index` (when `ignores`); reduced by `reduction` (none, sum, or mean:
    the sum over the weights taken).  DataError names a target outside [0, C) that is not ignored."""
    x = np.asarray(x)
    target = np.asarray(target, dtype=np.int64)
    classes = x.shape[1]
    ignored = target == ignore_index if ignores else np.zeros(target.shape, dtype=bool)
    picked = np.where(ignored, 0, target)
    outside = (picked < 0) | (picked >= classes)
    if outside.any():
        value = int(target[outside].flat[0])
        but = f" and is not ignore_index {ignore_index}" if ignores else ""
        raise DataError(f"NegativeLogLikelihoodLoss: target value {value} is outside [0, {classes}){but}")
    xw = widened(x)
    chosen = np.take_along_axis(xw, picked[:, None], axis=1)[:, 0]
    taken = np.ones(target.shape, xw.dtype) if weight is None else widened(np.asarray(weight))[picked].astype(xw.dtype)
    taken[ignored] = 0
    loss = np.where(ignored, xw.dtype.type(0), -chosen) * taken
    if reduction == "sum":
        loss = np.sum(loss)
    elif reduction == "mean":
        loss = np.sum(loss) / np.sum(taken)
    return narrowed(np.asarray(loss), x.dtype)


PIECES: dict[str, Callable[..., object]] = {"kernel_nll_loss": kernel_nll_loss}
