"""Data movement as WGSL: one strided copy kernel serves permutations, slices, splits and concats;
and `kernel.range`.

The copy kernel walks the extents of the region it copies; invocation `i`'s element is read at
`in_offset + sum(c_k * in_stride_k)` and written at `out_offset + sum(c_k * out_stride_k)`, with
`c` the multi-index of `i`.  A permutation reads its operand's strides permuted; a slice starts at
its first element and steps by `step * stride` (negative steps wrap in u32 arithmetic to the right
address); a split piece is a slice; a concat is one copy per operand into its place in the result.

Params: count, in_offset, out_offset, then the extents, the read strides and the write strides.
"""

from __future__ import annotations

from collections.abc import Callable

from loam.backends.wgsl_kernels.common import FLAT, device_type, kernel


def source_copy(elem: str, rank: int) -> str:
    """The strided copy of `rank` axes of an `elem` tensor."""
    lines = ["if (i >= params[0]) { return; }", "var rem: u32 = i;"]
    lines += ["var src: u32 = params[1];", "var dst: u32 = params[2];"]
    for k in range(rank - 1, -1, -1):
        lines.append(f"let c{k} = rem % params[{3 + k}]; rem = rem / params[{3 + k}];")
        lines.append(f"src = src + c{k} * params[{3 + rank + k}]; dst = dst + c{k} * params[{3 + 2 * rank + k}];")
    lines.append("out0[dst] = in0[src];")
    return kernel([elem], [elem], FLAT + "".join(f"  {line}\n" for line in lines))


def _p_copy(
    extents: tuple[int, ...], src: int, src_strides: tuple[int, ...], dst: int, dst_strides: tuple[int, ...]
) -> tuple[tuple[int, ...], int]:
    """The copy kernel's params (negative offsets or strides as their u32 bits) and workgroups."""
    count = 1
    for e in extents:
        count *= e
    raw = (count, src, dst, *extents, *src_strides, *dst_strides)
    return tuple(v & 0xFFFFFFFF for v in raw), (count + 63) // 64


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return tuple(strides)


def _p_permute(shape: tuple[int, ...], permutation: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """Copy params of a permutation of a contiguous `shape` (the result contiguous)."""
    strides = _row_major(shape)
    extents = tuple(shape[p] for p in permutation)
    return _p_copy(extents, 0, tuple(strides[p] for p in permutation), 0, _row_major(extents))


def _p_slice(
    shape: tuple[int, ...], starts: tuple[int, ...], counts: tuple[int, ...], steps: tuple[int, ...]
) -> tuple[tuple[int, ...], int]:
    """Copy params of `kernel.slice` (normalised starts, counts and steps) of a contiguous `shape`."""
    strides = _row_major(shape)
    offset = sum(s * st for s, st in zip(starts, strides, strict=True)) if all(counts) else 0
    read = tuple(s * st for s, st in zip(steps, strides, strict=True))
    return _p_copy(tuple(counts), offset, read, 0, _row_major(tuple(counts)))


def _p_place(
    piece: tuple[int, ...], whole: tuple[int, ...], axis: int, at: int, into: bool
) -> tuple[tuple[int, ...], int]:
    """Copy params moving `piece` between its own contiguous buffer and position `at` along `axis`
    of a contiguous `whole`: into the whole (a concat operand) or out of it (a split result)."""
    strides = _row_major(whole)
    offset = at * strides[axis] if all(piece) else 0
    own = _row_major(piece)
    if into:
        return _p_copy(piece, 0, own, offset, strides)
    return _p_copy(piece, offset, strides, 0, own)


def source_range(elem: str) -> str:
    """`kernel.range`: element i is start + i * delta (integers only, as ONNX Range over ints)."""
    dtype = device_type(elem)
    body = FLAT + "  if (i >= params[0]) { return; }\n"
    body += f"  out0[i] = {dtype}(param_i(1) + i32(i) * param_i(2));\n"
    return kernel([elem], [], body)


def _p_range(start: int, limit: int, delta: int) -> tuple[tuple[int, ...], int]:
    """Params of `kernel.range`: the count ONNX Range gives, start and delta (u32 bits)."""
    count = max(0, -(-(limit - start) // delta)) if delta else 0
    last = start + (count - 1) * delta if count else start
    if not all(-(2**31) <= v < 2**31 for v in (start, delta, last)):
        raise ValueError(f"Range from {start} by {delta}: values past the i32 range the device computes integers in")
    return (count, start & 0xFFFFFFFF, delta & 0xFFFFFFFF), (count + 63) // 64


PIECES: dict[str, Callable[..., object]] = {
    "_p_copy": _p_copy,
    "_row_major": _row_major,
    "_p_permute": _p_permute,
    "_p_slice": _p_slice,
    "_p_place": _p_place,
    "_p_range": _p_range,
}
