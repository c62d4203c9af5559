"""How the tile passes read a tensor: its extents, its element strides and the block that holds an extent.

A tile program (`loam.dialects.tile_program`) reads each operand through element strides it is given as
numbers, so a permutation feeding a product or an attention is read in place: from its source, through
permuted strides.  `tile-matmul` and `tile-attention` both lay out their operands so; the pieces they
share live here.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.ir import SSAValue

from loam.core.derived import bounds_of
from loam.core.poly import Poly
from loam.dialects.kernel import PermuteOp
from loam.dialects.tensor_axes import AxesTensorType

Extent = Poly | int
"""An extent or a stride: a number, or a polynomial of the symbols the run binds."""


def axes_type(value: SSAValue) -> AxesTensorType | None:
    """`value`'s named-axes type (None for another type)."""
    t = value.type
    return t if isinstance(t, AxesTensorType) else None


def row_major(shape: Sequence[Extent]) -> list[Extent]:
    """The element strides of a contiguous tensor of `shape`."""
    strides: list[Extent] = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = Poly.lift(strides[k + 1]) * shape[k + 1]
    return strides


def plain(e: Extent) -> Extent:
    """A constant Poly as an int (so the params print as a plain array)."""
    return e.const_value if isinstance(e, Poly) and e.is_const else e


def is_one(e: Extent) -> bool:
    return plain(e) == 1


def longest(extent: Extent) -> int:
    """The largest value `extent` takes (its bound where it is symbolic)."""
    return extent if isinstance(extent, int) else (extent.const_value if extent.is_const else bounds_of(extent).hi)


def block(extent: Extent, cap: int) -> int:
    """The smallest power of two holding every value of `extent`, at most `cap`."""
    size = 1
    while size < min(longest(extent), cap):
        size *= 2
    return size


def strided_operand(value: SSAValue) -> tuple[SSAValue, list[Extent]]:
    """The tensor a tile program reads for `value` and its element strides over `value`'s axes: a
    permutation's source through permuted strides, else `value` itself, row-major."""
    owner = value.owner
    if isinstance(owner, PermuteOp):
        source = owner.operands[0]
        t = axes_type(source)
        if t is not None:
            strides = row_major(t.shape)
            return source, [strides[p] for p in owner.permutation]
    t = axes_type(value)
    assert t is not None
    return value, row_major(t.shape)


def broadcast_strides(shape: Sequence[Extent], strides: Sequence[Extent], rank: int) -> list[Extent]:
    """`strides` right-aligned to `rank` axes, 0 along a missing axis or one of extent 1."""
    out: list[Extent] = [0] * rank
    for j, (e, s) in enumerate(zip(shape, strides, strict=True)):
        if not is_one(e):
            out[rank - len(shape) + j] = s
    return out
