"""Library kernels of the movement family (see `loam/runtime/kernels/__init__.py`).

Data movement copies elements without arithmetic, so every kernel here serves every element type
as it is (no widening).  Stage 0 folds known values through these same functions.
"""

from __future__ import annotations

import numpy as np

from loam.runtime.errors import DataError


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
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends, strict=True)]
    if mode == "constant":
        constant = np.asarray(value).astype(x.dtype) if fill is None or fill.size == 0 else fill.reshape(-1)[0]
        y = np.pad(x, widths, mode="constant", constant_values=constant)
    else:
        y = np.pad(x, widths, mode=mode)
    crop = tuple(slice(max(-b, 0), y.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begins, ends, strict=True)))
    return np.asarray(y[crop], dtype=x.dtype)


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
    target = tuple(int(v) for v in np.asarray(shape).reshape(-1))
    if any(t < 0 for t in target):
        raise DataError(f"Expand's shape {list(target)} holds a negative extent")
    try:
        extents = np.broadcast_shapes(x.shape, target)
    except ValueError:
        raise DataError(f"Expand's shape {list(target)} does not broadcast with the input's {list(x.shape)}") from None
    return np.array(np.broadcast_to(x, extents))


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


PIECES: dict[str, object] = {
    "kernel_concat": kernel_concat,
    "kernel_split": kernel_split,
    "kernel_slice": kernel_slice,
    "kernel_pad": kernel_pad,
    "kernel_tile": kernel_tile,
    "kernel_trilu": kernel_trilu,
    "kernel_reverse_sequence": kernel_reverse_sequence,
    "kernel_expand_to": kernel_expand_to,
    "kernel_bitcast": kernel_bitcast,
}
DEPENDS: dict[str, tuple[str, ...]] = {"kernel_reverse_sequence": ("DataError",), "kernel_expand_to": ("DataError",)}
