"""The grad clauses of the ops that pick elements by index: gather_elements and topk.

Each adds g into zeros of the operand's extents at the places the op read (`kernel.scatter_elements` with
reduction add, so an element picked twice receives both):

- `kernel.gather_elements`: at its indices along its axis;
- `kernel.topk`: the values' gradient at the indices the op also returns.
"""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from loam.dialects.kernel import GatherElementsOp, ScatterElementsOp, TopKOp
from loam.grad.base import Backward, type_of, zeros_like


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


CLAUSES = {GatherElementsOp: _gather_elements, TopKOp: _topk}
