"""Library kernels of the movement family (see `loam/runtime/kernels/__init__.py`).

Data movement copies elements without arithmetic, so every kernel here serves every element type
as it is (no widening).  Stage 0 folds known values through these same functions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.errors import DataError
from loam.runtime.kernels.common import integers, room_for


def kernel_concat(*xs: np.ndarray, axis: int) -> np.ndarray:
    """ONNX Concat: the operands joined along `axis`."""
    return np.concatenate(xs, axis=axis)


def kernel_split(x: np.ndarray, *, axis: int, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """ONNX Split: consecutive chunks of `sizes` elements along `axis` (views of `x`).

    As np.split at the running sums of `sizes`: the last chunk runs to the end of the axis.
    """
    x = np.asarray(x)
    lead = (slice(None),) * (axis if axis >= 0 else x.ndim + axis)
    chunks = []
    start = 0
    for size in sizes[:-1]:
        chunks.append(x[(*lead, slice(start, start + size))])
        start += size
    chunks.append(x[(*lead, slice(start, x.shape[axis]))])
    return tuple(chunks)


def kernel_slice(
    x: np.ndarray, *, starts: tuple[int, ...], counts: tuple[int, ...], steps: tuple[int, ...]
) -> np.ndarray:
    """ONNX Slice, normalised: per axis, `counts[i]` elements from `starts[i]` every `steps[i]`."""
    index = []
    for start, count, step in zip(starts, counts, steps, strict=True):
        if count == 0:
            index.append(slice(0, 0))
            continue
        stop = start + step * count
        # A negative step that runs past element 0 has no stop index (-1 would wrap to the end).
        index.append(slice(start, stop if stop >= 0 else None, step))
    return x[tuple(index)]


def kernel_pad(
    x: np.ndarray, fill: np.ndarray | None = None, *, pads: tuple[int, ...], mode: str, value: float = 0.0
) -> np.ndarray:
    """ONNX Pad: `pads` = begins then ends per axis; negative pads crop after padding.

    In constant mode the fill is the `fill` operand when given (Pad 11+ `constant_value` computed at
    run time), else `value`.
    """
    rank = x.ndim
    begins, ends = pads[:rank], pads[rank:]
    if min(pads, default=0) >= 0 and mode in ("constant", "reflect", "edge"):
        # np.pad's own work for these modes, without its per-call set-up (Silero VAD pads each chunk),
        # where each padded axis can be read: reflect's pads shorter than the axis, edge's axis not empty
        sized = zip(begins, ends, x.shape, strict=True)
        if mode == "constant" or all(max(b, e) < n if mode == "reflect" else n > 0 for b, e, n in sized if b or e):
            return _padded(x, fill, begins, ends, mode, value)
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends, strict=True)]
    if mode == "constant":
        constant = np.asarray(value).astype(x.dtype) if fill is None or fill.size == 0 else fill.reshape(-1)[0]
        y = np.pad(x, widths, mode="constant", constant_values=constant)
    else:
        y = np.pad(x, widths, mode=mode)  # type: ignore[call-overload]  # numpy's stubs take a literal mode
    crop = tuple(slice(max(-b, 0), y.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begins, ends, strict=True)))
    return np.asarray(y[crop], dtype=x.dtype)


def _padded(
    x: np.ndarray, fill: np.ndarray | None, begins: tuple[int, ...], ends: tuple[int, ...], mode: str, value: float
) -> np.ndarray:
    """`kernel_pad` with pads >= 0 in mode constant, or reflect / edge where each padded axis is long
    enough to read (reflect: each pad shorter than its axis): the input copied into the result's middle,
    then, axis by axis as np.pad fills them, each border read from the result itself (axes before the
    current one whole, those after it over the input's extent)."""
    shape = tuple(n + b + e for b, e, n in zip(begins, ends, x.shape, strict=True))
    inner = tuple(slice(b, b + n) for b, n in zip(begins, x.shape, strict=True))
    if mode == "constant":
        constant = np.asarray(value).astype(x.dtype) if fill is None or fill.size == 0 else fill.reshape(-1)[0]
        y = np.full(shape, constant, dtype=x.dtype)
        y[inner] = x
        return y
    y = np.empty(shape, dtype=x.dtype)
    y[inner] = x
    for axis, (b, e, n) in enumerate(zip(begins, ends, x.shape, strict=True)):
        lead, tail = (slice(None),) * axis, inner[axis + 1 :]
        if b:
            src = slice(2 * b, b, -1) if mode == "reflect" else slice(b, b + 1)
            y[(*lead, slice(0, b), *tail)] = y[(*lead, src, *tail)]
        if e:
            last = b + n - 1
            stop = last - 1 - e
            src = slice(last - 1, stop if stop >= 0 else None, -1) if mode == "reflect" else slice(last, last + 1)
            y[(*lead, slice(last + 1, last + 1 + e), *tail)] = y[(*lead, src, *tail)]
    return y


def kernel_tile(x: np.ndarray, *, repeats: tuple[int, ...]) -> np.ndarray:
    """ONNX Tile: `x` repeated `repeats[i]` times along axis i."""
    return np.tile(x, repeats)


def kernel_trilu(x: np.ndarray, k: np.ndarray | None = None, *, upper: int, offset: int = 0) -> np.ndarray:
    """ONNX Trilu over the last two axes; the diagonal offset is `k` when given, else `offset`."""
    diagonal = int(np.asarray(k).reshape(-1)[0]) if k is not None else offset
    return np.triu(x, diagonal) if upper else np.tril(x, diagonal)


def kernel_expand_to(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """ONNX Expand to a shape only the run gives: x broadcast (both ways) with it; a shape that does
    not broadcast, or holds a negative extent, is a DataError."""
    x = np.asarray(x)
    target = tuple(integers(shape))
    if any(t < 0 for t in target):
        raise DataError(f"Expand's shape {list(target)} holds a negative extent")
    try:
        extents = np.broadcast_shapes(x.shape, target)
    except ValueError:
        raise DataError(f"Expand's shape {list(target)} does not broadcast with the input's {list(x.shape)}") from None
    room_for(extents, f"Expand's shape {list(target)}")
    return np.array(np.broadcast_to(x, extents))


def kernel_reshape_to(x: np.ndarray, shape: np.ndarray, *, allowzero: int) -> np.ndarray:
    """ONNX Reshape to a shape only the run gives: a 0 copies the data's extent at its position
    (unless `allowzero`), a -1 takes what is left; a shape that does not fit is a DataError."""
    x = np.asarray(x)
    target = integers(shape)
    if any(t < -1 for t in target) or target.count(-1) > 1 or (allowzero and 0 in target and -1 in target):
        raise DataError(f"Reshape's shape {target} is not a shape (one -1 at most, no other negative entry)")
    if not allowzero and any(t == 0 and i >= x.ndim for i, t in enumerate(target)):
        raise DataError(f"Reshape's shape {target} copies an axis the data ({x.ndim} axes) lacks")
    out = [x.shape[i] if t == 0 and not allowzero else t for i, t in enumerate(target)]
    if -1 in out:
        known = int(np.prod([t for t in out if t != -1], dtype=np.int64))
        if known == 0 or x.size % known:
            raise DataError(f"Reshape cannot fit the {x.size} elements of {list(x.shape)} into {target}")
        out[out.index(-1)] = x.size // known
    if int(np.prod(out, dtype=np.int64)) != x.size:
        raise DataError(f"Reshape cannot fit the {x.size} elements of {list(x.shape)} into {target}")
    return x.reshape(out)


def kernel_tile_by(x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    """ONNX Tile by repeats only the run gives: one non-negative count per axis, else a DataError."""
    counts = integers(repeats)
    if len(counts) != np.ndim(x) or any(r < 0 for r in counts):
        raise DataError(f"Tile's repeats {counts} must hold one non-negative count per axis ({np.ndim(x)})")
    room_for([d * r for d, r in zip(np.shape(x), counts, strict=True)], f"Tile's repeats {counts}")
    return kernel_tile(x, repeats=tuple(counts))


def slice_bounds(extent: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice along one axis of `extent`: the first index and the count of elements taken.

    A negative bound counts from the end; then, for a positive step, both clamp to [0, extent]; for a
    negative one, the start to [0, extent - 1] and the end to [-1, extent - 1] (-1: past element 0).
    """
    start, end = (start + extent if start < 0 else start), (end + extent if end < 0 else end)
    if step > 0:
        start, end = min(max(start, 0), extent), min(max(end, 0), extent)
        count = -(-(end - start) // step)
    else:
        start, end = min(max(start, 0), extent - 1), min(max(end, -1), extent - 1)
        count = -(-(start - end) // -step)
    count = max(count, 0)
    return (start if count else 0), count


def kernel_slice_by(
    x: np.ndarray, starts: np.ndarray, ends: np.ndarray, *optional: np.ndarray, present: int
) -> np.ndarray:
    """ONNX Slice by bounds only the run gives; `optional` holds the operands `present` names (bit 1:
    axes, 2: steps).  Bounds of unequal lengths, a step of 0 or an axis given twice or outside the
    data's rank is a DataError."""
    x = np.asarray(x)
    given = iter(optional)
    first, last = integers(starts), integers(ends)
    axes = integers(next(given)) if present & 1 else list(range(len(first)))
    steps = integers(next(given)) if present & 2 else [1] * len(first)
    if not len(first) == len(last) == len(axes) == len(steps):
        raise DataError(f"Slice's starts {first}, ends {last}, axes {axes} and steps {steps} differ in length")
    axes = [a + x.ndim if a < 0 else a for a in axes]
    if any(not 0 <= a < x.ndim for a in axes) or len(set(axes)) != len(axes):
        raise DataError(f"Slice's axes {axes} must be distinct axes of the data's {x.ndim}")
    if 0 in steps:
        raise DataError(f"Slice's steps {steps} hold 0")
    begin, counts, strides = [0] * x.ndim, list(x.shape), [1] * x.ndim
    for a, s, e, p in zip(axes, first, last, steps, strict=True):
        (begin[a], counts[a]), strides[a] = slice_bounds(x.shape[a], s, e, p), p
    return np.array(kernel_slice(x, starts=tuple(begin), counts=tuple(counts), steps=tuple(strides)))


def kernel_split_by(x: np.ndarray, split: np.ndarray, *, axis: int, parts: int) -> tuple[np.ndarray, ...]:
    """ONNX Split by sizes only the run gives: `parts` non-negative sizes that sum to the extent of
    `axis`, else a DataError."""
    sizes = integers(split)
    extent = np.shape(x)[axis]
    if len(sizes) != parts or any(s < 0 for s in sizes) or sum(sizes) != extent:
        raise DataError(f"Split's sizes {sizes} must be {parts} non-negative parts of the extent {extent}")
    return kernel_split(x, axis=axis, sizes=tuple(sizes))


def pad_order_matters(extent: int, begin: int, end: int, mode: str) -> bool:
    """Whether padding one axis in a reading `mode` reads what a crop on its other side removes:
    ONNX does not say which comes first, so such pads are refused rather than guessed."""
    if mode == "constant" or not min(begin, end) < 0 < max(begin, end):
        return False
    kept = extent + min(begin, 0) + min(end, 0)
    added = max(begin, end)
    return mode == "wrap" or (mode == "edge" and kept < 1) or (mode == "reflect" and added > kept - 1)


def kernel_pad_by(
    x: np.ndarray, pads: np.ndarray, *optional: np.ndarray, present: int, mode: str, axes: tuple[int, ...]
) -> np.ndarray:
    """ONNX Pad by widths only the run gives: the begins, then the ends, of `axes`; `optional` holds
    the constant fill when `present` is 1.  Widths of the wrong count, a crop below nothing, a reading
    mode over an empty axis, or a pad that reads what a crop removes is a DataError."""
    x = np.asarray(x)
    widths = integers(pads)
    if len(widths) != 2 * len(axes):
        raise DataError(f"Pad's pads {widths} must hold two entries for each of {len(axes)} axes")
    full = [0] * (2 * x.ndim)
    for i, a in enumerate(axes):
        full[a], full[x.ndim + a] = widths[i], widths[len(axes) + i]
    for a, n in enumerate(x.shape):
        begin, end = full[a], full[x.ndim + a]
        if n + begin + end < 0:
            raise DataError(f"Pad's pads {widths} crop axis {a} of extent {n} below nothing")
        if mode != "constant" and (begin > 0 or end > 0) and n == 0:
            raise DataError(f"Pad cannot pad the empty axis {a} in mode '{mode}'")
        if pad_order_matters(n, begin, end, mode):
            raise DataError(
                f"Pad's pads {widths} both pad and crop axis {a} in mode '{mode}' (ONNX leaves their order open)"
            )
    room_for([n + full[a] + full[x.ndim + a] for a, n in enumerate(x.shape)], f"Pad's pads {widths}")
    fill = next(iter(optional)) if present & 1 else None
    return kernel_pad(x, fill, pads=tuple(full), mode=mode)


def kernel_dropout(x: np.ndarray, training_mode: np.ndarray, *optional: np.ndarray, present: int) -> np.ndarray:
    """ONNX Dropout whose training_mode the run gives: the data, where nothing is dropped (inference,
    or training with ratio 0); training with another ratio (`optional` holds it when `present` is 1,
    else 0.5) would drop random elements, a DataError."""
    ratio = float(np.asarray(optional[0]).reshape(-1)[0]) if present & 1 else 0.5
    if bool(np.asarray(training_mode).reshape(-1)[0]) and ratio != 0:
        raise DataError(
            f"Dropout in training mode with ratio {ratio} drops random elements; Loam compiles inference only "
            "(feed training_mode false)"
        )
    return x


def kernel_reverse_sequence(x: np.ndarray, lens: np.ndarray, *, batch_axis: int, time_axis: int) -> np.ndarray:
    """ONNX ReverseSequence: along `time_axis`, the first lens[b] entries of batch entry b (along
    `batch_axis`) in reverse order, the rest as they are.  A length outside [0, T] is a DataError."""
    x, lens = np.asarray(x), np.asarray(lens, dtype=np.int64)
    steps = x.shape[time_axis]
    outside = np.flatnonzero((lens < 0) | (lens > steps))
    if outside.size:
        b = int(outside[0])
        raise DataError(f"sequence_lens[{b}] is {int(lens[b])}; each length must lie in [0, {steps}]")
    t = np.arange(steps)
    index = np.where(t < lens[:, None], lens[:, None] - 1 - t, t)  # [batch, time]
    if batch_axis > time_axis:
        index = index.T
    shape = [1] * x.ndim
    shape[batch_axis], shape[time_axis] = lens.shape[0], steps
    return np.take_along_axis(x, np.broadcast_to(index.reshape(shape), x.shape), axis=time_axis)


def kernel_bitcast(x: np.ndarray, *, to: str) -> np.ndarray:
    """ONNX BitCast: x's bits read as `to` (numpy's name), a type of the same width.  A 4- or 2-bit
    value (one per byte, as ml_dtypes holds it) keeps its low bits, sign-extended into a signed
    type; into bool, a nonzero byte is true."""
    x = np.asarray(x, order="C")  # (np.ascontiguousarray would make a scalar 1-D)
    dtype = np.dtype(to)
    widths = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}
    width = widths.get(dtype.name)
    if width is None:
        return x.view(np.uint8) != 0 if dtype == np.bool_ else x.view(dtype)
    bits = x.view(np.uint8) & np.uint8((1 << width) - 1)
    if dtype.name.startswith("int"):
        signed = bits.astype(np.int8)
        return np.where(signed >= 1 << (width - 1), signed - (1 << width), signed).astype(dtype)
    return bits.view(dtype)


PIECES: dict[str, Callable[..., object]] = {
    "kernel_concat": kernel_concat,
    "kernel_split": kernel_split,
    "kernel_slice": kernel_slice,
    "kernel_pad": kernel_pad,
    "_padded": _padded,
    "kernel_tile": kernel_tile,
    "kernel_trilu": kernel_trilu,
    "kernel_reverse_sequence": kernel_reverse_sequence,
    "kernel_expand_to": kernel_expand_to,
    "kernel_reshape_to": kernel_reshape_to,
    "kernel_tile_by": kernel_tile_by,
    "slice_bounds": slice_bounds,
    "kernel_slice_by": kernel_slice_by,
    "kernel_split_by": kernel_split_by,
    "pad_order_matters": pad_order_matters,
    "kernel_pad_by": kernel_pad_by,
    "kernel_dropout": kernel_dropout,
    "kernel_bitcast": kernel_bitcast,
}
