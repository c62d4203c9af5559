"""Library kernels of the indexing family (see `loam/runtime/kernels/__init__.py`).

Indices may be negative (counted from the end, as ONNX allows) and of any integer type.  A Range
the build cannot fold (its start or limit is an extent only the run knows) counts here too.  Gathers
move elements of any type as they are; a scatter's reduction computes halves in f32.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.errors import DataError
from loam.runtime.kernels.common import narrowed, room_for, widened


def kernel_gather(x: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    """ONNX Gather: `x` indexed along `axis` by `indices` (any rank; negative counts from the end)."""
    return np.take(x, np.asarray(indices, dtype=np.int64), axis=axis)


def _element_index(indices: np.ndarray, extent: int, axis: int) -> tuple[np.ndarray, ...]:
    """The numpy index that reads, at each position of `indices`, element `indices[...]` along `axis`."""
    idx = np.asarray(indices, dtype=np.int64)
    idx = np.where(idx < 0, idx + extent, idx)
    grid: list[np.ndarray] = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    return tuple(grid)


def kernel_gather_elements(x: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    """ONNX GatherElements: out[i][j][k] = x[indices[i][j][k]][j][k] (for axis 0)."""
    return x[_element_index(indices, x.shape[axis], axis)]


def kernel_scatter_elements(
    x: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int, reduction: str
) -> np.ndarray:
    """ONNX ScatterElements: a copy of `x` with `updates` written (or reduced) at `indices` along `axis`."""
    where = _element_index(indices, x.shape[axis], axis)
    if reduction == "none":
        out = np.array(x, copy=True)
        out[where] = updates
        return out
    ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
    out = np.array(widened(x), copy=True)
    ufunc.at(out, where, widened(updates))
    return narrowed(out, x.dtype)


def kernel_scatter_nd(x: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, reduction: str) -> np.ndarray:
    """ONNX ScatterND: a copy of `x` with `updates` written (or reduced) at the index tuples of `indices`.

    Each tuple (the last axis of `indices`, k entries) picks a slice x[i0, ..., ik-1] of the
    data's trailing axes; tuples apply in order, so a later duplicate wins (reduction none) or
    reduces after the earlier ones, as onnxruntime does.  A tuple outside the data stops the run
    (IndexError) rather than wrapping a second time.  A value known as polynomials (stage 0) moves
    with reduction none.
    """
    x = np.asarray(x)
    idx = np.asarray(indices, dtype=np.int64)
    k = idx.shape[-1]
    lead, rest = x.shape[:k], x.shape[k:]
    idx = idx.reshape(int(np.prod(idx.shape[:-1], dtype=np.int64)), k)
    # Row-major position of each tuple among the data's first k axes.
    flat = np.zeros(idx.shape[0], dtype=np.int64)
    for axis, extent in enumerate(lead):
        column = idx[:, axis]
        bad = (column < -extent) | (column >= extent)
        if bad.any():
            raise IndexError(
                f"ScatterND: index {int(column[bad][0])} along data axis {axis} is outside [{-extent}, {extent - 1}]"
            )
        flat = flat * extent + np.where(column < 0, column + extent, column)
    count = int(np.prod(lead, dtype=np.int64))
    rows = np.asarray(updates).reshape(idx.shape[0], *rest)
    if reduction == "none":
        # numpy leaves the order of a repeated position's assignments open: keep each one's last tuple.
        last = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]
        out = np.array(x, copy=True).reshape(count, *rest)
        out[flat[last]] = rows[last]
        return out.reshape(x.shape)
    ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
    out = np.array(widened(x), copy=True).reshape(count, *rest)
    ufunc.at(out, flat, widened(rows))  # in tuple order, duplicates included
    return narrowed(out.reshape(x.shape), x.dtype)


def kernel_range(*, start: int, limit: int, delta: int, dtype: str) -> np.ndarray:
    """ONNX Range over integers: start, start + delta, ... up to (not including) limit."""
    return np.arange(int(start), int(limit), int(delta), dtype=np.dtype(dtype))


def kernel_range_of(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """ONNX Range over the values given: max(ceil((limit - start) / delta), 0) elements, element i
    start + i * delta in their type (halves computed in f32).  Stage 0 folds known bounds with it.
    A delta of 0, or more elements than an i32 extent holds, is a DataError."""
    s, lim, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    if d == 0:
        raise DataError("Range's delta is 0")
    exact = s.dtype.kind in "iu"
    n = max(-(-(int(lim) - int(s)) // int(d)) if exact else int(np.ceil((float(lim) - float(s)) / float(d))), 0)
    if n > 2**31 - 1:
        raise DataError(f"Range makes {n} elements, more than an extent holds")
    if exact:
        return (int(s) + np.arange(n, dtype=np.int64) * int(d)).astype(s.dtype)
    wide: type[np.floating] = np.float64 if s.dtype == np.float64 else np.float32
    return (wide(s) + np.arange(n, dtype=wide) * wide(d)).astype(s.dtype)


def kernel_gather_nd(data: np.ndarray, indices: np.ndarray, *, batch_dims: int) -> np.ndarray:
    """ONNX GatherND: each index tuple (the last axis of `indices`, k long) picks the slice of `data`
    at those first k positions after the `batch_dims` batch axes the two share; negative entries
    count from the end.  DataError names an entry outside its axis."""
    data = np.asarray(data)
    idx = np.asarray(indices, dtype=np.int64)
    k, b = idx.shape[-1], batch_dims
    batches = 1
    for e in data.shape[:b]:
        batches *= e
    extents = np.array(data.shape[b : b + k], dtype=np.int64)
    tuples = idx.reshape(batches, -1, k)
    tuples = np.where(tuples < 0, tuples + extents, tuples)
    outside = (tuples < 0) | (tuples >= extents)
    if outside.any():
        where = tuple(np.argwhere(outside)[0])
        entry, extent = int(idx.reshape(batches, -1, k)[where]), int(extents[where[2]])
        raise DataError(f"GatherND: index {entry} at position {where[2]} of a tuple lies outside its axis of {extent}")
    picked = data.reshape(batches, *data.shape[b:])[(np.arange(batches)[:, None], *np.moveaxis(tuples, -1, 0))]
    return picked.reshape((*idx.shape[:-1], *data.shape[b + k :]))  # a tuple: () where one tuple names one element


def kernel_one_hot(
    indices: np.ndarray, values: np.ndarray, count: np.ndarray | None = None, *, depth: int = 0, axis: int
) -> np.ndarray:
    """ONNX OneHot: values[1] where the new axis `axis` (`depth` long) meets the index, values[0]
    elsewhere; negative indices count from `depth` (a float index is truncated toward zero).

    `count`, when given, is depth as the run gives it (one number, a float truncated toward zero;
    below 1 it is a DataError), else the parameter `depth` is."""
    if count is not None:
        given = np.asarray(count).reshape(-1)
        if given.size != 1:
            raise DataError(f"OneHot's depth holds {given.size} values; it must hold one")
        if not np.isfinite(given[0]) or not given[0] >= 1:
            raise DataError(f"OneHot's depth is {given[0]}; it must be at least 1")
        depth = int(np.trunc(given[0]))
        room_for([*np.shape(indices), depth], f"OneHot's depth {depth}")
    idx = np.asarray(indices)
    idx = np.trunc(idx).astype(np.int64) if idx.dtype.kind == "f" else idx.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    here = [1] * (idx.ndim + 1)
    here[axis] = depth
    hot = np.expand_dims(idx, axis) == np.arange(depth, dtype=np.int64).reshape(here)
    pair = np.asarray(values).reshape(-1)
    return np.where(hot, pair[1], pair[0]).astype(pair.dtype)


def kernel_nonzero(x: np.ndarray) -> np.ndarray:
    """ONNX NonZero: the indices of x's nonzero elements in row-major order, [rank, count] (i64)."""
    x = np.asarray(x)
    if x.ndim == 0:
        return np.zeros((0, int(bool(x))), dtype=np.int64)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


def kernel_compress(x: np.ndarray, condition: np.ndarray, *, axis: int, flat: int) -> np.ndarray:
    """ONNX Compress: the slices of x along `axis` (of x flattened, with `flat`) where `condition`
    is true; a condition shorter than the axis leaves the rest out, a longer one is a DataError."""
    x, keep = np.asarray(x), np.asarray(condition).astype(bool).reshape(-1)
    if flat:
        x, axis = x.reshape(-1), 0
    if keep.shape[0] > x.shape[axis]:
        raise DataError(f"the condition has {keep.shape[0]} entries, more than the {x.shape[axis]} it selects from")
    return np.compress(keep, x, axis=axis)


def kernel_unique(
    x: np.ndarray, *, axis: int, flat: int, ordered: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ONNX Unique: the distinct slices of x along `axis` (elements of x flattened, with `flat`),
    sorted (`ordered`) or in order of first occurrence; with the first index of each, each slice's
    position among them, and their counts (i64)."""
    x = np.asarray(x)
    values, axis = (x.reshape(-1), 0) if flat else (x, axis)
    y, first, inverse, counts = np.unique(values, return_index=True, return_inverse=True, return_counts=True,
                                          axis=axis)  # fmt: skip
    inverse = inverse.reshape(-1)
    if not ordered:  # by first occurrence: reorder, and renumber the positions
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        y, first, counts, inverse = np.take(y, order, axis=axis), first[order], counts[order], rank[inverse]
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


def _box_sides(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """Each box's (x_min, x_max, y_min, y_max) in f32: corners [y1, x1, y2, x2] in either order, or
    [x_center, y_center, width, height]; written as onnxruntime's comparisons so NaNs land alike."""
    b = np.asarray(boxes, dtype=np.float32)
    if center_point_box:
        half_w, half_h = b[..., 2] / np.float32(2), b[..., 3] / np.float32(2)
        return b[..., 0] - half_w, b[..., 0] + half_w, b[..., 1] - half_h, b[..., 1] + half_h
    x1, x2, y1, y2 = b[..., 1], b[..., 3], b[..., 0], b[..., 2]
    return (np.where(x1 >= x2, x2, x1), np.where(x1 >= x2, x1, x2),
            np.where(y1 >= y2, y2, y1), np.where(y1 >= y2, y1, y2))  # fmt: skip


def kernel_non_max_suppression(
    boxes: np.ndarray, scores: np.ndarray, *optional: np.ndarray, present: int, center_point_box: int
) -> np.ndarray:
    """ONNX NonMaxSuppression: per batch and class, the boxes taken greedily by descending score (ties
    by index) that overlap no box taken before by IoU above the threshold, at most
    max_output_boxes_per_class of them (absent, 0 or negative: none), as [batch, class, box] rows (i64).

    `optional` holds the operands `present` names (bit 1: max_output_boxes_per_class, 2: iou_threshold,
    4: score_threshold), each read at its first element.  Without a score threshold every box is a
    candidate; with one, those scoring above it.  An IoU threshold outside [0, 1] is a DataError (as
    onnxruntime says).  IoU is computed in f32 as onnxruntime does, so boundary cases agree."""
    given = iter(optional)
    values = [np.asarray(next(given)).reshape(-1)[0] if present & bit else None for bit in (1, 2, 4)]
    limit = max(int(values[0]), 0) if values[0] is not None else 0
    iou = np.float32(values[1]) if values[1] is not None else np.float32(0)
    if not 0 <= iou <= 1:
        raise DataError(f"iou_threshold is {iou}; it must lie in [0, 1]")
    scores = np.asarray(scores, dtype=np.float32)
    x_min, x_max, y_min, y_max = _box_sides(boxes, center_point_box)
    area = (x_max - x_min) * (y_max - y_min)
    rows: list[tuple[int, int, int]] = []
    for b in range(scores.shape[0] if limit else 0):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            candidates = np.arange(s.shape[0]) if values[2] is None else np.flatnonzero(s > np.float32(values[2]))
            order = candidates[np.argsort(-s[candidates], kind="stable")]
            taken: list[int] = []
            for k in order.tolist():
                if taken:
                    t = np.asarray(taken)
                    lo_x = np.where(x_min[b, k] < x_min[b, t], x_min[b, t], x_min[b, k])
                    hi_x = np.where(x_max[b, t] < x_max[b, k], x_max[b, t], x_max[b, k])
                    lo_y = np.where(y_min[b, k] < y_min[b, t], y_min[b, t], y_min[b, k])
                    hi_y = np.where(y_max[b, t] < y_max[b, k], y_max[b, t], y_max[b, k])
                    inter = (hi_x - lo_x) * (hi_y - lo_y)
                    union = area[b, t] + area[b, k] - inter
                    with np.errstate(all="ignore"):
                        over = inter / union > iou
                    overlaps = ~(hi_x <= lo_x) & ~(hi_y <= lo_y) & ~(inter <= 0)
                    overlaps &= ~(area[b, t] <= 0) & ~(area[b, k] <= 0) & ~(union <= 0) & over
                    if overlaps.any():
                        continue
                taken.append(k)
                rows.append((b, c, k))
                if len(taken) >= limit:
                    break
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def kernel_eye_like(x: np.ndarray, *, k: int, to: str) -> np.ndarray:
    """ONNX EyeLike: ones on diagonal `k` of a matrix with x's extents (of type `to`), zeros elsewhere."""
    rows, cols = np.shape(x)
    return np.eye(rows, cols, k, dtype=np.dtype(to))


def kernel_tensor_scatter(
    past: np.ndarray, update: np.ndarray, write_indices: np.ndarray | None = None, *, axis: int, mode: str
) -> np.ndarray:
    """ONNX TensorScatter: a copy of the cache `past` with `update` written along `axis` from position
    write_indices[b] of each batch row b (absent: 0), wrapping round the axis with mode `circular`.
    A negative write index, or a linear write past the axis' end, is a DataError (as onnxruntime)."""
    batch, length, steps = past.shape[0], past.shape[axis], update.shape[axis]
    starts = np.zeros(batch, np.int64) if write_indices is None else np.asarray(write_indices, np.int64).reshape(-1)
    if (starts < 0).any():
        raise DataError(f"TensorScatter: write index {int(starts[starts < 0][0])} is negative")
    positions = starts[:, None] + np.arange(steps, dtype=np.int64)  # (batch, steps)
    if mode == "circular":
        positions = positions % length
    elif steps and (starts > length - steps).any():
        bad = int(starts[starts > length - steps][0])
        raise DataError(f"TensorScatter: write index {bad} plus {steps} updates passes the axis' {length} positions")
    out = past.copy()
    # Both with the written axis next to the batch axis: (batch, positions, ...), a view of `out`.
    moved = np.moveaxis(out, axis, 1)
    moved[np.arange(batch)[:, None], positions] = np.moveaxis(update, axis, 1)
    return out


PIECES: dict[str, Callable[..., object]] = {
    "kernel_range_of": kernel_range_of,
    "kernel_gather": kernel_gather,
    "kernel_range": kernel_range,
    "_element_index": _element_index,
    "kernel_gather_elements": kernel_gather_elements,
    "kernel_scatter_elements": kernel_scatter_elements,
    "kernel_scatter_nd": kernel_scatter_nd,
    "kernel_one_hot": kernel_one_hot,
    "kernel_eye_like": kernel_eye_like,
    "kernel_nonzero": kernel_nonzero,
    "kernel_compress": kernel_compress,
    "kernel_unique": kernel_unique,
    "_box_sides": _box_sides,
    "kernel_non_max_suppression": kernel_non_max_suppression,
    "kernel_gather_nd": kernel_gather_nd,
    "kernel_tensor_scatter": kernel_tensor_scatter,
}
