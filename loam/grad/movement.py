"""The grad clauses of the ops that move elements without computing them: slice, pad, concat, split,
tile, trilu, reverse_sequence and dropout.

Each sends every element of `g` back to the place it was read from, and zeros where nothing was read:

- `kernel.slice` (static bounds, any steps): g spaced by its steps, read upwards, and padded with zeros
  back to the operand's extents (a pad past the end crops);
- `kernel.pad`: g sliced back to the operand's place (constant mode, no negative pads); else, axis by axis,
  g through the 0/1 table of the places each element was read from (edge, reflect, wrap; crops);
- `kernel.concat`: g sliced into the operands' parts (the offsets may be extents the run knows);
- `kernel.split`: the results' gradients (zeros for a result none reaches) concatenated again;
- `kernel.tile`: g regrouped to (repeats, extent) per axis and summed over the repeats;
- `kernel.trilu`: g with the same triangle kept;
- `kernel.reverse_sequence`: g reversed alike (a permutation that is its own inverse);
- `kernel.dropout`: g as it is (the kernel passes its data unchanged; it refuses to drop elements).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from xdsl.ir import Operation, SSAValue

from loam.core.poly import Poly
from loam.dialects.kernel import (
    ConcatOp,
    DropoutOp,
    PadOp,
    ReduceOp,
    RegroupOp,
    ReverseSequenceOp,
    SliceOp,
    SplitOp,
    TileOp,
    TriluOp,
)
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import (
    Backward,
    Clause,
    cut,
    refuse,
    static_extent,
    static_extents,
    through_matrix,
    type_of,
    zeros_like,
)
from loam.runtime.kernels.movement import kernel_pad


def _ints(op: Operation, values: Iterable[int | Poly], what: str) -> list[int]:
    """Slice bounds the clause needs known at build time."""
    lifted = [Poly.lift(v) for v in values]
    if not all(p.is_const for p in lifted):
        raise refuse(op, f"its grad clause needs the {what} known at build time, and they are {lifted}")
    return [p.const_value for p in lifted]


def _slice(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, SliceOp)
    x = op.inputs[0]
    t = type_of(x)
    starts, counts = _ints(op, op.param("starts"), "starts"), _ints(op, op.param("counts"), "counts")
    dims = static_extents(op, t)
    steps = [int(s) for s in op.param("steps")]
    # Axis by axis, g's elements go back to the places they were read: in reading order from the lowest
    # (a negative step read downwards), each followed by |step| - 1 zeros, then moved to that lowest place.
    pads: list[int] = []
    ends: list[int] = []
    for a, (start, count, step, dim) in enumerate(zip(starts, counts, steps, dims, strict=True)):
        if step < 0:
            g = _flipped(b, g, a, node)
            start += (count - 1) * step
        if abs(step) > 1 and count:
            g = _spaced(b, g, a, abs(step), node)
        pads.append(start)
        ends.append(dim - start - count * abs(step) if count and abs(step) > 1 else dim - start - count)
    padded = PadOp([g], [t], f"{node}.grad", pads=(*pads, *ends), mode="constant", value=0.0)
    b.send(x, b.emit(padded))


def _flipped(b: Backward, g: SSAValue, axis: int, node: str) -> SSAValue:
    """`g` read backwards along `axis`."""
    t = type_of(g)
    starts = tuple(Poly.const(0) if a != axis else t.shape[a] - 1 for a in range(t.rank))
    steps = tuple(-1 if a == axis else 1 for a in range(t.rank))
    return b.emit(SliceOp([g], [t], f"{node}.grad", starts=starts, counts=tuple(t.shape), steps=steps))


def _spaced(b: Backward, g: SSAValue, axis: int, step: int, node: str) -> SSAValue:
    """`g` with `step - 1` zeros after each element along `axis` (the last one's too)."""
    t = type_of(g)
    unit = AxesTensorType(t.elem, [*t.axes[: axis + 1], Axis.named("Unit", 1), *t.axes[axis + 1 :]])
    spread = AxesTensorType(t.elem, [*t.axes[: axis + 1], Axis.named(f"Step{axis}", step), *t.axes[axis + 1 :]])
    pads = [0] * (2 * (t.rank + 1))
    pads[t.rank + 1 + axis + 1] = step - 1
    stretched = b.emit(PadOp([b.emit(RegroupOp(g, unit, f"{node}.grad"))], [spread], f"{node}.grad",
                             pads=tuple(pads), mode="constant", value=0.0))  # fmt: skip
    joined = Axis.named(f"Spaced{axis}", t.shape[axis] * step)
    return b.emit(
        RegroupOp(stretched, AxesTensorType(t.elem, [*t.axes[:axis], joined, *t.axes[axis + 1 :]]), f"{node}.grad")
    )


def _pad(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, PadOp)
    x = op.inputs[0]
    pads = list(op.param("pads"))
    if len(op.inputs) > 1 and op.inputs[1] in b.needed:
        raise refuse(op, "no grad clause for a fill value computed from what the gradient is asked of yet")
    t = type_of(x)
    mode = str(op.param("mode"))
    if mode == "constant" and all(p >= 0 for p in pads):
        b.send(x, cut(b, g, t, pads[: t.rank], node))
        return
    # Axis by axis, the places each output element was read from, found by padding the positions themselves
    # (1-based, so a constant fill reads as 0): g goes back through that 0/1 table.
    for a in range(t.rank):
        begin, end = pads[a], pads[t.rank + a]
        if begin or end:
            n = static_extent(op, t, a)
            read = kernel_pad(np.arange(1, n + 1), pads=(begin, end), mode=mode, value=0.0)
            table = np.zeros((len(read), n))
            table[np.flatnonzero(read), read[read > 0] - 1] = 1.0
            g = through_matrix(b, g, a, table, t.axes[a], node)
    b.send(x, g)


def _reverse_sequence(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    """ReverseSequence moves each element to another place and back again if done twice: g reversed alike."""
    assert isinstance(op, ReverseSequenceOp)
    x = op.inputs[0]
    back = ReverseSequenceOp([g, op.inputs[1]], [type_of(x)], f"{node}.grad", batch_axis=op.param("batch_axis"),
                             time_axis=op.param("time_axis"))  # fmt: skip
    b.send(x, b.emit(back))


def _dropout(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    """The kernel gives its data unchanged (dropping elements in training, it refuses), so g passes as it is."""
    assert isinstance(op, DropoutOp)
    b.send(op.inputs[0], g)


def _concat(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, ConcatOp)
    axis = int(op.param("axis"))
    offset = Poly.const(0)
    for part in op.inputs:
        t = type_of(part)
        if part in b.needed:
            b.send(part, cut(b, g, t, [offset if a == axis else 0 for a in range(t.rank)], node))
        offset = offset + t.shape[axis]


def _split(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, SplitOp)
    parts = [b.adjoint.get(r) or zeros_like(b, r, node) for r in op.outputs]
    x = op.inputs[0]
    b.send(x, b.emit(ConcatOp(parts, [type_of(x)], f"{node}.grad", axis=op.param("axis"))))


def _tile(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, TileOp)
    x = op.inputs[0]
    t = type_of(x)
    repeats = [int(r) for r in op.param("repeats")]
    # y's axis a is repeats[a] copies of x's axis a one after another: (repeat, element) row-major.
    split = [ax for a, d in enumerate(t.axes) for ax in (Axis.named(f"Repeats{a}", repeats[a]), d)]
    blocks = b.emit(RegroupOp(g, AxesTensorType(t.elem, split), f"{node}.grad"))
    summed = ReduceOp([blocks], [t], f"{node}.grad", kind="sum", axes=tuple(range(0, 2 * t.rank, 2)), keepdims=0)
    b.send(x, b.emit(summed))


def _trilu(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, TriluOp)
    x = op.inputs[0]
    kept = TriluOp(
        [g, *op.inputs[1:]], [type_of(x)], f"{node}.grad", upper=op.param("upper"), offset=op.param("offset")
    )
    b.send(x, b.emit(kept))


CLAUSES: dict[type[Operation], Clause] = {
    SliceOp: _slice,
    PadOp: _pad,
    ConcatOp: _concat,
    SplitOp: _split,
    TileOp: _tile,
    TriluOp: _trilu,
    ReverseSequenceOp: _reverse_sequence,
    DropoutOp: _dropout,
}
EVERY_RESULT = frozenset({SplitOp})
"""The ops whose clause reads the adjoint of each result itself (a gradient may reach any of them)."""
