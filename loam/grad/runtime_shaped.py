"""The grad clauses of the kernels whose extents or bounds only the run gives (`kernel.reshape_to`,
`kernel.expand_to`, `kernel.slice_by`, `kernel.pad_by`, `kernel.split_by`, `kernel.tile_by`).

Each sends g back with the same kernels, their run-time operands computed from the forward's:

- `kernel.reshape_to`: g reshaped to x's extents (`kernel.reshape_to` by a shape the run computes from
  x's extents, which are never a length only the run knows: x was bound before the op ran);
- `kernel.expand_to`: g summed over the axes x lacks and those x has at extent 1 (built-time known), then
  reshaped to x's extents (an axis of x with a symbolic extent the run finds 1 while g's is more stops the
  run at that reshape, never a wrong sum);
- `kernel.slice_by` (steps 1, axes absent or constant): g padded with zeros back to x's extents, the pads
  the forward's clamped bounds (start + n where negative, clamped to [0, n], an empty slice where the end
  is before the start), computed by i64 zips (`kernel.pad_by`);
- `kernel.pad_by` (constant mode): the part of g that x's elements reached (a crop where a pad is
  negative: `kernel.slice_by` of g, then `kernel.pad_by` of zeros where x's elements were cropped);
- `kernel.split_by`: the parts' gradients (zeros for a part none reaches) concatenated, reshaped to x;
- `kernel.tile_by`: g reshaped to (repeats, extent) per axis by a shape interleaving the run's repeats with
  x's extents, summed over the repeats.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import ArrayAttr
from xdsl.ir import Operation, SSAValue

from loam.core.poly import Poly
from loam.dialects.expr import Expr
from loam.dialects.kernel import (
    ConcatOp,
    ConstantOp,
    ExpandToOp,
    PadByOp,
    ReduceOp,
    RegroupOp,
    ReshapeToOp,
    SliceByOp,
    SplitByOp,
    TileByOp,
)
from loam.dialects.shape_poly import ExtentAttr
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, Clause, constant, cut, kept_type, known, refuse, type_of, zeros_like


def _extents(b: Backward, t: AxesTensorType, axes: Sequence[int], node: str) -> SSAValue:
    """An i64 vector of `t`'s extents along `axes`, which the run computes from its bound symbols."""
    vector = AxesTensorType("i64", [Axis.named("Axes", len(axes))])
    return b.emit(ConstantOp(ArrayAttr([ExtentAttr(t.shape[a]) for a in axes]), vector, f"{node}.grad"))


def reshaped_to(b: Backward, value: SSAValue, t: AxesTensorType, node: str) -> SSAValue:
    """`value`'s elements as a tensor of type `t`, checked by the run (a regroup where the extents agree)."""
    if type_of(value).shape == t.shape:
        return value
    shape = _extents(b, t, range(t.rank), node)
    return b.emit(ReshapeToOp([value, shape], [t], f"{node}.grad", allowzero=1))


def _reshape_to(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, ReshapeToOp)
    x = op.inputs[0]
    b.send(x, reshaped_to(b, g, type_of(x), node))


def _expand_to(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, ExpandToOp)
    x = op.inputs[0]
    t, gt = type_of(x), type_of(g)
    lead = gt.rank - t.rank
    ones = [lead + a for a, e in enumerate(t.shape) if e == Poly.const(1)]
    if lead or ones:
        summed = ReduceOp([g], [kept_type(gt, ones)], f"{node}.grad", kind="sum", axes=(*range(lead), *ones),
                          keepdims=1)  # fmt: skip
        g = b.emit(summed)
    b.send(x, reshaped_to(b, g, t, node))


def _i64(b: Backward, inputs: Sequence[SSAValue], expr: Expr, count: int, node: str) -> SSAValue:
    return b.zip(inputs, expr, AxesTensorType("i64", [Axis.named("Axes", count)]), f"{node}.grad")


def _clamped(b: Backward, bound: SSAValue, extents: SSAValue, count: int, node: str) -> SSAValue:
    """ONNX's bound for step 1: + n where negative, clamped to [0, n]."""
    o = Expr.operand
    zero = Expr.const(0, "i64")
    counted = Expr.select(o(0).binary("less", zero), o(0) + o(1), o(0))
    return _i64(b, [bound, extents], counted.binary("min", o(1)).binary("max", zero), count, node)


def _constant_axes(op: Operation, value: SSAValue, rank: int) -> list[int]:
    given = known(value)
    if given is None:
        raise refuse(op, "no grad clause for axes only the run gives yet")
    return [int(a) + rank if int(a) < 0 else int(a) for a in given.reshape(-1)]


def _slice_by(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, SliceByOp)
    x, starts, ends = op.inputs[0], op.inputs[1], op.inputs[2]
    t = type_of(x)
    present = int(op.param("present"))
    if present & 2:
        raise refuse(op, "no grad clause for steps only the run gives yet")
    count = type_of(starts).shape[0]
    if not count.is_const:
        raise refuse(op, "its grad clause needs the number of sliced axes known at build time")
    axes = _constant_axes(op, op.inputs[3], t.rank) if present & 1 else list(range(count.const_value))
    k = len(axes)
    extents = _extents(b, t, axes, node)
    begin = _clamped(b, starts, extents, k, node)
    end = _clamped(b, ends, extents, k, node)
    o = Expr.operand
    after = _i64(b, [extents, begin, end], o(0) - o(2).binary("max", o(1)), k, node)
    pads = b.emit(ConcatOp([begin, after], [AxesTensorType("i64", [Axis.named("Pads", 2 * k)])], f"{node}.grad",
                           axis=0))  # fmt: skip
    b.send(x, b.emit(PadByOp([g, pads], [t], f"{node}.grad", present=0, mode="constant", axes=tuple(axes))))


def _pad_by(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, PadByOp)
    x, pads = op.inputs[0], op.inputs[1]
    if op.param("mode") != "constant":
        raise refuse(op, f"no grad clause for {op.param('mode')} padding by widths only the run gives yet")
    if int(op.param("present")) and op.inputs[2] in b.needed:
        raise refuse(op, "no grad clause for a fill value computed from what the gradient is asked of yet")
    t = type_of(x)
    axes = [int(a) for a in op.param("axes")]
    k = len(axes)
    o = Expr.operand
    zero = Expr.const(0, "i64")
    vector = AxesTensorType("i64", [Axis.named("Axes", k)])
    halves = [cut(b, pads, vector, (h * k,), node) for h in (0, 1)]
    # x's elements at [crop_begin, n - crop_end) reached g at [max(begin, 0), ... + their count).
    extents = _extents(b, t, axes, node)
    start = _i64(b, [halves[0]], o(0).binary("max", zero), k, node)
    cropped = [_i64(b, [h], (zero - o(0)).binary("max", zero), k, node) for h in halves]
    stop = _i64(b, [start, extents, *cropped], o(0) + o(1) - o(2) - o(3), k, node)
    kept = AxesTensorType(t.elem, [Axis.named(f"Kept{a}", Poly.symbol(f"{node}.grad[{a}]")) if a in axes
                                   else ax for a, ax in enumerate(t.axes)])  # fmt: skip
    axes_given = constant(b, np.array(axes), AxesTensorType("i64", [Axis.named("Axes", k)]), node)
    read = b.emit(SliceByOp([g, start, stop, axes_given], [kept], f"{node}.grad", present=1))
    widths = b.emit(ConcatOp(cropped, [AxesTensorType("i64", [Axis.named("Pads", 2 * k)])], f"{node}.grad", axis=0))
    b.send(x, b.emit(PadByOp([read, widths], [t], f"{node}.grad", present=0, mode="constant", axes=tuple(axes))))


def _split_by(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, SplitByOp)
    x = op.inputs[0]
    t = type_of(x)
    axis = int(op.param("axis"))
    parts = [b.adjoint.get(r) or zeros_like(b, r, node) for r in op.outputs]
    total = sum((type_of(p).shape[axis] for p in parts), Poly.const(0))
    joined = AxesTensorType(t.elem, [Axis.named("Joined", total) if a == axis else ax for a, ax in enumerate(t.axes)])
    b.send(x, reshaped_to(b, b.emit(ConcatOp(parts, [joined], f"{node}.grad", axis=axis)), t, node))


def _tile_by(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    """y's axis a is repeats[a] copies of x's: g reshaped to (repeats, extent) per axis, summed over the repeats."""
    assert isinstance(op, TileByOp)
    x, repeats = op.inputs[0], op.inputs[1]
    t = type_of(x)
    column = AxesTensorType("i64", [Axis.named("Axes", t.rank), Axis.named("Unit", 1)])
    pairs = [b.emit(RegroupOp(v, column, f"{node}.grad")) for v in (repeats, _extents(b, t, range(t.rank), node))]
    both = AxesTensorType("i64", [Axis.named("Axes", t.rank), Axis.named("Pair", 2)])
    shape = b.emit(RegroupOp(b.emit(ConcatOp(pairs, [both], f"{node}.grad", axis=1)),
                             AxesTensorType("i64", [Axis.named("Shape", 2 * t.rank)]), f"{node}.grad"))  # fmt: skip
    split = [
        ax for a, d in enumerate(t.axes) for ax in (Axis.named(f"Repeats{a}", Poly.symbol(f"{node}.grad[{a}]")), d)
    ]
    blocks = b.emit(ReshapeToOp([g, shape], [AxesTensorType(t.elem, split)], f"{node}.grad", allowzero=1))
    summed = ReduceOp([blocks], [t], f"{node}.grad", kind="sum", axes=tuple(range(0, 2 * t.rank, 2)), keepdims=0)
    b.send(x, b.emit(summed))


CLAUSES: dict[type[Operation], Clause] = {
    ReshapeToOp: _reshape_to,
    ExpandToOp: _expand_to,
    SliceByOp: _slice_by,
    PadByOp: _pad_by,
    SplitByOp: _split_by,
    TileByOp: _tile_by,
}
EVERY_RESULT: frozenset[type[Operation]] = frozenset({SplitByOp})
