"""The grad clauses of the ops that pick or place elements by index.

A pick adds g into zeros of the operand's extents at the places it read (a scatter with reduction add,
so an element picked twice receives both):

- `kernel.gather_elements`: at its indices along its axis;
- `kernel.gather_nd` (batch_dims 0): at its index tuples (`kernel.scatter_nd`);
- `kernel.topk`: the values' gradient at the indices the op also returns.

A placement sends the updates what g holds where they went (a gather), and the data g where nothing was
written over it (all of g, with reduction add):

- `kernel.scatter_elements`, `kernel.scatter_nd` with reduction none or add (mul, max and min are refused).
"""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from loam.dialects.kernel import GatherElementsOp, GatherNDOp, ScatterElementsOp, ScatterNDOp, TopKOp
from loam.grad.base import Backward, refuse, type_of, zeros_like


def _scattered(b: Backward, x: SSAValue, indices: SSAValue, g: SSAValue, axis: object, node: str) -> SSAValue:
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
    if op.param("batch_dims"):
        raise refuse(op, "no grad clause for a gather_nd with batch_dims yet")
    x, indices = op.inputs[0], op.inputs[1]
    operands = [zeros_like(b, x, node), indices, g]
    b.send(x, b.emit(ScatterNDOp(operands, [type_of(x)], f"{node}.grad", reduction="add")))


def _scatter(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, ScatterElementsOp | ScatterNDOp)
    data, indices, updates = op.inputs[0], op.inputs[1], op.inputs[2]
    reduction = op.param("reduction")
    if reduction not in ("none", "add"):
        raise refuse(op, f"no grad clause for a scatter with reduction {reduction} yet")
    axis = {"axis": op.param("axis")} if isinstance(op, ScatterElementsOp) else {}
    if updates in b.needed:  # what g holds where each update went
        pick = GatherElementsOp if isinstance(op, ScatterElementsOp) else GatherNDOp
        params = axis or {"batch_dims": 0}
        b.send(updates, b.emit(pick([g, indices], [type_of(updates)], f"{node}.grad", **params)))
    if data in b.needed:  # g, but where an update was written over the data
        if reduction == "add":
            b.send(data, g)
            return
        cleared = [g, indices, zeros_like(b, updates, node)]
        b.send(data, b.emit(type(op)(cleared, [type_of(data)], f"{node}.grad", reduction="none", **axis)))


CLAUSES = {
    GatherElementsOp: _gather_elements,
    GatherNDOp: _gather_nd,
    TopKOp: _topk,
    ScatterElementsOp: _scatter,
    ScatterNDOp: _scatter,
}
