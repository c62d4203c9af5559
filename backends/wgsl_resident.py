"""What the WGSL module keeps resident on the device: each weight's and constant's upload, and a weight
past one storage binding as the parts `split-wide-weights` cut it into.

A weight the products read in parts (each read through a `kernel.slice` of constant bounds, step 1)
is never uploaded whole: `Weights` holds it on the host as it always does, and `_resident` uploads each
part as a slice of it (`weights.fc6_w_0[0:2048]`), named so (the name a device error, the report and
the browser's weight shards give the part).
"""

from __future__ import annotations

import math

from xdsl.ir import Operation, SSAValue

from loam.backends.module_text import axes_type
from loam.backends.wgsl_kernels import packed
from loam.dialects.build_contract import PACKED, STORED
from loam.dialects.kernel import SliceOp

__all__ = ["part_index", "read_in_parts", "resident_bytes"]


def _bounds(op: SliceOp) -> list[tuple[int, int]] | None:
    """Each axis's (start, stop) where `op` takes a constant block of whole elements; else None."""
    starts, counts, steps = op.param("starts"), op.param("counts"), op.param("steps")
    if not all(isinstance(x, int) for x in (*starts, *counts)) or any(s != 1 for s in steps):
        return None
    return [(start, start + count) for start, count in zip(starts, counts, strict=True)]


def read_in_parts(weight: SSAValue) -> bool:
    """Whether every reader of `weight` takes a constant block of it (the parts `split-wide-weights` made)."""
    readers = [use.operation for use in weight.uses]
    return bool(readers) and all(isinstance(r, SliceOp) and _bounds(r) is not None for r in readers)


def part_index(op: SliceOp) -> str:
    """The index that takes the part `op` reads of a weight (`[0:2048]`, `[:, 256:512]`): the host
    uploads `weights.W` indexed so, under the weight's name indexed so."""
    bounds = _bounds(op)
    assert bounds is not None, "read_in_parts chose the weight"
    extents = axes_type(op.operands[0], "weight").shape
    spelled = [":" if (a, b) == (0, e.const_value) else f"{a}:{b}" for (a, b), e in zip(bounds, extents, strict=True)]
    while spelled and spelled[-1] == ":":
        spelled.pop()
    return f"[{', '.join(spelled)}]" if spelled else "[...]"


def resident_bytes(op: Operation) -> int:
    """The device bytes of what `op` (a weight, a constant or a part) keeps resident: its elements at
    4 bytes each, or a packed weight's ggml blocks byte for byte."""
    t = axes_type(op.results[0], "resident")
    count = math.prod(e.const_value if e.is_const else 0 for e in t.shape)
    stored = STORED.get(op)
    if PACKED.is_on(op) and stored is not None:
        return -(-count // 32 * packed.BLOCK_BYTES[stored] // 4) * 4
    return 4 * count
