"""Library kernels of the indexing family (see `backends/numpy_kernels/__init__.py`).

Indices may be negative (counted from the end, as ONNX allows) and of any integer type.  A Range
the build cannot fold (its start or limit is an extent only the run knows) counts here too.  Gathers
move elements of any type as they are; a scatter's reduction computes halves in f32.
"""

from __future__ import annotations

import numpy as np

from loam.backends.numpy_kernels.common import _narrowed, _widened


def _k_gather(x: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    """ONNX Gather: `x` indexed along `axis` by `indices` (any rank; negative counts from the end)."""
    return np.take(x, np.asarray(indices, dtype=np.int64), axis=axis)


def _element_index(indices: np.ndarray, extent: int, axis: int) -> tuple[np.ndarray, ...]:
    """The numpy index that reads, at each position of `indices`, element `indices[...]` along `axis`."""
    idx = np.asarray(indices, dtype=np.int64)
    idx = np.where(idx < 0, idx + extent, idx)
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    return tuple(grid)


def _k_gather_elements(x: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    """ONNX GatherElements: out[i][j][k] = x[indices[i][j][k]][j][k] (for axis 0)."""
    return x[_element_index(indices, x.shape[axis], axis)]


def _k_scatter_elements(
    x: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int, reduction: str
) -> np.ndarray:
    """ONNX ScatterElements: a copy of `x` with `updates` written (or reduced) at `indices` along `axis`."""
    where = _element_index(indices, x.shape[axis], axis)
    if reduction == "none":
        out = np.array(x, copy=True)
        out[where] = updates
        return out
    ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
    out = np.array(_widened(x), copy=True)
    ufunc.at(out, where, _widened(updates))
    return _narrowed(out, x.dtype)


def _k_range(*, start: int, limit: int, delta: int, dtype: str) -> np.ndarray:
    """ONNX Range over integers: start, start + delta, ... up to (not including) limit."""
    return np.arange(int(start), int(limit), int(delta), dtype=np.dtype(dtype))


PIECES: dict[str, object] = {
    "_k_gather": _k_gather,
    "_k_range": _k_range,
    "_element_index": _element_index,
    "_k_gather_elements": _k_gather_elements,
    "_k_scatter_elements": _k_scatter_elements,
}
DEPENDS: dict[str, tuple[str, ...]] = {
    "_k_gather_elements": ("_element_index",),
    "_k_scatter_elements": ("_element_index", "_widened", "_narrowed"),
}
