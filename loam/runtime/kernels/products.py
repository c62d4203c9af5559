"""Library kernels for plain matrix products (see `loam/runtime/kernels/__init__.py`), the
determinant, and the integer products of quantized models (MatMulInteger, QLinearMatMul).

A `kernel.matmul` is `np.matmul`.  For a stack of rows times one matrix (a linear layer over
[Batch, Seq, Hidden]) numpy's matmul calls BLAS once per leading index: eight calls of 128 rows for
a batch of 8 sentences.  When the rows lie in memory as one matrix, a single call over all of them
gives BLAS room to block: about 15% faster for MiniLM's layers at one thread.  Each element is the
same dot product either way; only BLAS's blocking (and so the order of its float32 sums) may differ.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.kernels.common import narrowed, widened


def _matmul_rows(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """np.matmul(a, b, out=out) for `a` [..., K] of rank at least 3 and `b` [K, N]: one product over all
    of `a`'s rows when they are contiguous (and `out` too), else numpy's own loop."""
    if a.flags.c_contiguous and a.size and b.ndim == 2 and (out is None or out.flags.c_contiguous):
        k, n = a.shape[-1], b.shape[1]
        rows = a.size // k
        flat = np.matmul(a.reshape(rows, k), b, out=None if out is None else out.reshape(rows, n))
        return out if out is not None else flat.reshape((*a.shape[:-1], n))
    return np.matmul(a, b, out=out)


def kernel_det(x: np.ndarray) -> np.ndarray:
    """ONNX Det: the determinant of each matrix in the last two axes (LU, as LAPACK factors it);
    halves in f32, narrowed."""
    x = np.asarray(x)
    return narrowed(np.asarray(np.linalg.det(widened(x))), x.dtype)


def _minus_zero(x: np.ndarray, zero: np.ndarray | None, rows: bool) -> np.ndarray:
    """x in i32 less its zero point: one value, or (`rows`) one per row of x's matrices, else one per
    column."""
    wide = np.asarray(x).astype(np.int32)
    if zero is None:
        return wide
    zero = np.asarray(zero).astype(np.int32)
    if zero.size > 1 and rows:
        zero = zero.reshape(-1, 1)
    return wide - zero


def kernel_matmul_integer(a: np.ndarray, b: np.ndarray, *zero_points: np.ndarray, zeros: int) -> np.ndarray:
    """ONNX MatMulInteger: (a - a_zero) @ (b - b_zero) in i32; `zeros` bit 1 says a_zero is given,
    bit 2 b_zero (in that order among `zero_points`)."""
    given = list(zero_points)
    a_zero = given.pop(0) if zeros & 1 else None
    b_zero = given.pop(0) if zeros & 2 else None
    return np.matmul(_minus_zero(a, a_zero, rows=True), _minus_zero(b, b_zero, rows=False))


def kernel_qlinear_matmul(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero: np.ndarray,
    y_scale: np.ndarray,
    y_zero: np.ndarray,
) -> np.ndarray:
    """ONNX QLinearMatMul: the i32 product of (a - a_zero) and (b - b_zero), times a_scale * b_scale
    / y_scale (computed in the scales' type), rounded to nearest even, plus y_zero, saturated to
    y_zero's integer type."""
    product = np.matmul(_minus_zero(a, a_zero, rows=True), _minus_zero(b, b_zero, rows=False))
    factor = np.asarray(a_scale) * np.asarray(b_scale) / np.asarray(y_scale)
    scaled = np.rint(product * factor.astype(np.float64)) + np.asarray(y_zero).astype(np.float64)
    info = np.iinfo(np.asarray(y_zero).dtype)
    return np.clip(scaled, info.min, info.max).astype(np.asarray(y_zero).dtype)


PIECES: dict[str, Callable[..., object]] = {
    "_matmul_rows": _matmul_rows,
    "kernel_det": kernel_det,
    "_minus_zero": _minus_zero,
    "kernel_matmul_integer": kernel_matmul_integer,
    "kernel_qlinear_matmul": kernel_qlinear_matmul,
}
