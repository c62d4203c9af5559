"""The grad clauses of the ops that pick or place elements by index.

A pick adds g into zeros of the operand's extents at the places it read (a scatter with reduction add,
so an element picked twice receives both):

- `kernel.gather_elements`: at its indices along its axis;
- `kernel.gather_nd`: at its index tuples (`kernel.scatter_nd`), each led by its batch coordinates;
- `kernel.topk`: the values' gradient at the indices the op also returns;
- `kernel.compress`: each kept slice's gradient read back (a gather along the axis, at each place's count of
  kept places before it, or past g's end, at a slice of zeros, where the condition drops it).

A placement sends the updates what g holds where they went (a gather), and the data g where nothing was
written over it (all of g, with reduction add):

- `kernel.scatter_elements`, `kernel.scatter_nd` with reduction none (of several updates written to one place,
  only the one kept, the last, receives g there), add, max and min (g shared evenly by the data and updates
  equal to the extreme, as torch's amax); mul is refused;
- `kernel.tensor_scatter` (a cache written from each batch row's write index): the past receives g with the
  written places zeroed (the same kernel writing zeros), the update g read at the places it was written
  (`kernel.gather_elements` at write index + step, round the axis in circular mode).
"""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from loam.dialects.expr import Expr
from loam.dialects.kernel import (
    CompressOp,
    ConcatOp,
    CumSumOp,
    GatherElementsOp,
    GatherNDOp,
    GatherOp,
    PadOp,
    RangeOp,
    RegroupOp,
    ScatterElementsOp,
    ScatterNDOp,
    TensorScatterOp,
    TopKOp,
)
from loam.dialects.kernel.base import element_count
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, Clause, extent_scalar, refuse, type_of, zeros_like


def _scattered(b: Backward, x: SSAValue, indices: SSAValue, g: SSAValue, axis: int, node: str) -> SSAValue:
    """g added into zeros of x's type at `indices` along `axis`."""
    operands = [zeros_like(b, x, node), indices, g]
    return b.emit(ScatterElementsOp(operands, [type_of(x)], f"{node}.grad", axis=axis, reduction="add"))


def _gather_elements(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, GatherElementsOp)
    x, indices = op.inputs[0], op.inputs[1]
    b.send(x, _scattered(b, x, indices, g, op.param("axis"), node))


def _topk(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, TopKOp)
    x = op.inputs[0]
    b.send(x, _scattered(b, x, op.outputs[1], g, op.param("axis"), node))


def _gather_nd(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, GatherNDOp)
    x, indices = op.inputs[0], op.inputs[1]
    batch = int(op.param("batch_dims"))
    if batch:  # each index tuple led by its batch coordinates: a gather_nd with batch_dims 0
        it = type_of(indices)
        unit = Axis.named("Unit", 1)
        lead = it.axes[:-1]
        columns = []
        for j in range(batch):
            counting = AxesTensorType("i64", [lead[j]])
            step = b.emit(RangeOp([], [counting], f"{node}.grad", start=0, limit=lead[j].extent, delta=1,
                                  dtype="int64"))  # fmt: skip
            along = AxesTensorType("i64", [lead[a] if a == j else unit for a in range(len(lead))] + [unit])
            column = AxesTensorType("i64", [*lead, unit])
            columns.append(b.zip([b.emit(RegroupOp(step, along, f"{node}.grad"))], Expr.operand(0), column,
                                 f"{node}.grad"))  # fmt: skip
        depth = Axis.named("Depth", it.shape[-1] + batch)
        whole = AxesTensorType("i64", [*lead, depth])
        cast = b.zip([indices], Expr.operand(0).cast("i64"), AxesTensorType("i64", it.axes), f"{node}.grad")
        indices = b.emit(ConcatOp([*columns, cast], [whole], f"{node}.grad", axis=len(lead)))
    operands = [zeros_like(b, x, node), indices, g]
    b.send(x, b.emit(ScatterNDOp(operands, [type_of(x)], f"{node}.grad", reduction="add")))


def _scatter(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, ScatterElementsOp | ScatterNDOp)
    data, indices, updates = op.inputs[0], op.inputs[1], op.inputs[2]
    reduction = op.param("reduction")
    if reduction not in ("none", "add", "max", "min"):
        raise refuse(op, f"no grad clause for a scatter with reduction {reduction} yet")
    axis = {"axis": op.param("axis")} if isinstance(op, ScatterElementsOp) else {}
    pick = GatherElementsOp if isinstance(op, ScatterElementsOp) else GatherNDOp
    params = axis or {"batch_dims": 0}

    def read(value: SSAValue, like: SSAValue) -> SSAValue:
        """`value` (of data's extents) at the place each element of `like` (updates' extents) went."""
        t = type_of(value)
        return b.emit(pick([value, indices], [AxesTensorType(t.elem, type_of(like).axes)], f"{node}.grad", **params))

    o = Expr.operand
    if reduction in ("max", "min"):  # g shared evenly by the data and updates equal to the extreme (torch's amax)
        y, elem = op.outputs[0], type_of(data).elem.name
        one, zero = Expr.const(1.0, elem), Expr.const(0.0, elem)
        hit = Expr.select(o(0).binary("equal", o(1)), one, zero)
        data_hits = b.zip([data, y], hit, type_of(data), f"{node}.grad")
        update_hits = b.zip([updates, read(y, updates)], hit, type_of(updates), f"{node}.grad")
        ties = b.emit(type(op)([data_hits, indices, update_hits], [type_of(data)], f"{node}.grad", reduction="add",
                               **axis))  # fmt: skip
        share = b.zip([g, ties], o(0) / o(1), type_of(data), f"{node}.grad")
        b.send(data, b.zip([share, data_hits], o(0) * o(1), type_of(data), f"{node}.grad"))
        b.send(updates, b.zip([read(share, updates), update_hits], o(0) * o(1), type_of(updates), f"{node}.grad"))
        return
    if updates in b.needed:  # what g holds where each update went (none: where it was not written over)
        share = read(g, updates)
        if reduction == "none":
            kept = last_writers(b, type(op), data, indices, updates, axis, node)
            share = b.zip([share, kept], Expr.select(o(1), o(0), Expr.const(0.0, type_of(g).elem.name)),
                          type_of(updates), f"{node}.grad")  # fmt: skip
        b.send(updates, share)
    if data in b.needed:  # g, but where an update was written over the data
        if reduction == "add":
            b.send(data, g)
            return
        cleared = [g, indices, zeros_like(b, updates, node)]
        b.send(data, b.emit(type(op)(cleared, [type_of(data)], f"{node}.grad", reduction="none", **axis)))


def last_writers(
    b: Backward,
    kind: type[ScatterElementsOp | ScatterNDOp],
    data: SSAValue,
    indices: SSAValue,
    updates: SSAValue,
    axis: dict[str, int],
    node: str,
) -> SSAValue:
    """Whether each update of a `kind` scatter (reduction none; `axis` its parameter, {} for scatter_nd) is the
    one a place of `data` keeps (of several written to one place, the last in order, as the kernel writes
    them): each update's number scattered by max, read back, equal to its own.  MaxUnpool's placements are
    such a scatter too (`loam.grad.sampling`)."""
    ut, it = type_of(updates), type_of(indices)
    # Numbered in the kernel's order: every element (scatter_elements) or every index tuple (scatter_nd).
    rows = ut.axes if kind is ScatterElementsOp else it.axes[:-1]
    count = element_count([a.extent for a in rows])
    numbers = b.emit(RangeOp([], [AxesTensorType("i64", [Axis.named("Writes", count)])], f"{node}.grad", start=0,
                             limit=count, delta=1, dtype="int64"))  # fmt: skip
    units = [Axis.named("Unit", 1)] * (ut.rank - len(rows))
    numbers = b.emit(RegroupOp(numbers, AxesTensorType("i64", [*rows, *units]), f"{node}.grad"))
    numbers = b.zip([numbers], Expr.operand(0), AxesTensorType("i64", ut.axes), f"{node}.grad")
    nobody = b.zip([data], Expr.const(-1, "i64"), AxesTensorType("i64", type_of(data).axes), f"{node}.grad")
    writers = b.emit(kind([nobody, indices, numbers], [type_of(nobody)], f"{node}.grad", reduction="max", **axis))
    pick = GatherElementsOp if kind is ScatterElementsOp else GatherNDOp
    kept = b.emit(
        pick([writers, indices], [AxesTensorType("i64", ut.axes)], f"{node}.grad", **(axis or {"batch_dims": 0}))
    )
    o = Expr.operand
    return b.zip([kept, numbers], o(0).binary("equal", o(1)), AxesTensorType("bool", ut.axes), f"{node}.grad")


def _compress(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, CompressOp)
    x, condition = op.inputs[0], op.inputs[1]
    t = type_of(x)
    flat = int(op.param("flat"))
    work = AxesTensorType(t.elem, [Axis.named("Flat", element_count(t.shape))]) if flat else t
    axis = 0 if flat else int(op.param("axis"))
    n, kept = work.shape[axis], type_of(condition).shape[0]
    o = Expr.operand
    one, zero = Expr.const(1, "i64"), Expr.const(0, "i64")
    places = AxesTensorType("i64", [Axis.named("Places", kept)])
    keep = b.zip([condition], Expr.select(o(0), one, zero), places, f"{node}.grad")
    if kept != n:  # a condition shorter than the axis drops the rest
        if not (kept.is_const and n.is_const):
            raise refuse(op, f"its grad clause needs the condition's length {kept} and the axis's {n} known")
        places = AxesTensorType("i64", [work.axes[axis]])
        keep = b.emit(PadOp([keep], [places], f"{node}.grad", pads=(0, n.const_value - kept.const_value),
                            mode="constant", value=0.0))  # fmt: skip
    before = b.emit(CumSumOp([keep], [places], f"{node}.grad", axis=0, exclusive=1, reverse=0))
    gt = type_of(g)
    count = gt.shape[axis]
    at = b.zip([keep, before, extent_scalar(b, count, "i64", node)], Expr.select(o(0).binary("equal", one), o(1), o(2)),
               places, f"{node}.grad")  # fmt: skip
    pads = [0] * (2 * gt.rank)
    pads[gt.rank + axis] = 1
    wider = AxesTensorType(
        gt.elem, [Axis.named("Kept", count + 1) if a == axis else ax for a, ax in enumerate(gt.axes)]
    )
    padded = b.emit(PadOp([g], [wider], f"{node}.grad", pads=tuple(pads), mode="constant", value=0.0))
    read = b.emit(GatherOp([padded, at], [work], f"{node}.grad", axis=axis))
    b.send(x, read if not flat else b.emit(RegroupOp(read, t, f"{node}.grad")))


def _tensor_scatter(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, TensorScatterOp)
    past, update = op.inputs[0], op.inputs[1]
    t, ut = type_of(past), type_of(update)
    axis = int(op.param("axis")) % t.rank
    if past in b.needed:
        cleared = [g, zeros_like(b, update, node), *op.inputs[2:]]
        b.send(past, b.emit(TensorScatterOp(cleared, [t], f"{node}.grad", **op.params)))
    if update not in b.needed:
        return
    steps, length = ut.shape[axis], t.shape[axis]
    if op.param("mode") == "circular" and not (
        steps.is_const and length.is_const and steps.const_value <= length.const_value
    ):
        raise refuse(
            op, f"its grad clause needs the {steps} updates known to fit the axis's {length} places (circular)"
        )
    # The place step s of batch row r went: write_indices[r] + s (mod the axis's length, circular), as an
    # index of the update's extents (the row along axis 0, the step along `axis`).
    places = AxesTensorType("i64", ut.axes)
    unit = Axis.named("Unit", 1)
    counting = AxesTensorType("i64", [ut.axes[axis]])
    step = b.emit(RangeOp([], [counting], f"{node}.grad", start=0, limit=steps, delta=1, dtype="int64"))
    along = AxesTensorType("i64", [ut.axes[a] if a == axis else unit for a in range(ut.rank)])
    operands = [b.emit(RegroupOp(step, along, f"{node}.grad"))]
    o = Expr.operand
    expr = o(0)
    if len(op.inputs) > 2:
        rows = AxesTensorType("i64", [ut.axes[0], *(unit for _ in range(ut.rank - 1))])
        operands.append(b.emit(RegroupOp(op.inputs[2], rows, f"{node}.grad")))
        expr = expr + o(1).cast("i64")
    if op.param("mode") == "circular":
        operands.append(extent_scalar(b, length, "i64", node))
        expr = expr.binary("mod", o(len(operands) - 1))
    at = b.zip(operands, expr, places, f"{node}.grad")
    b.send(update, b.emit(GatherElementsOp([g, at], [ut], f"{node}.grad", axis=axis)))


CLAUSES: dict[type[Operation], Clause] = {
    TensorScatterOp: _tensor_scatter,
    CompressOp: _compress,
    GatherElementsOp: _gather_elements,
    GatherNDOp: _gather_nd,
    TopKOp: _topk,
    ScatterElementsOp: _scatter,
    ScatterNDOp: _scatter,
}
