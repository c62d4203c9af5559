"""The grad clauses of the kernels that make a tensor from a few values rather than from an operand's elements.

- `kernel.one_hot`: y is values[1] where the index meets the new axis, values[0] elsewhere, so values[1]
  receives the sum of g where it was written and values[0] the sum of the rest (the indices take none);
- `kernel.eye_like`: the operand's values are not read; it receives zeros;
- `kernel.range_of` (float start and delta the run gives): y_i = start + i delta, so start receives the sum of
  g and delta the sum of i g_i (the limit decides only how many elements there are; it takes none).
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation, SSAValue

from loam.dialects.expr import Expr
from loam.dialects.kernel import ConcatOp, EyeLikeOp, OneHotOp, RangeOfOp, RangeOp, ReduceOp, RegroupOp
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, Clause, constant, type_of, zeros_like


def _total(b: Backward, value: SSAValue, node: str) -> SSAValue:
    """`value` summed over every axis, a scalar."""
    t = type_of(value)
    return b.emit(ReduceOp([value], [AxesTensorType(t.elem, [])], f"{node}.grad", kind="sum",
                           axes=tuple(range(t.rank)), keepdims=0))  # fmt: skip


def _one_hot(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, OneHotOp)
    values = op.inputs[1]
    t, vt = type_of(g), type_of(values)
    # Where values[1] was written: the same one_hot of values (0, 1).
    zero_one = constant(b, np.array([0.0, 1.0]), vt, node)
    written = b.emit(OneHotOp([op.inputs[0], zero_one, *op.inputs[2:]], [t], f"{node}.grad", **op.params))
    o = Expr.operand
    on = _total(b, b.zip([g, written], o(0) * o(1), t, f"{node}.grad"), node)
    off = b.zip([_total(b, g, node), on], o(0) - o(1), type_of(on), f"{node}.grad")
    one = AxesTensorType(vt.elem, [Axis.named("Unit", 1)])
    pair = [b.emit(RegroupOp(v, one, f"{node}.grad")) for v in (off, on)]
    b.send(values, b.emit(ConcatOp(pair, [vt], f"{node}.grad", axis=0)))


def _eye_like(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, EyeLikeOp)
    b.send(op.inputs[0], zeros_like(b, op.inputs[0], node))


def _range_of(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, RangeOfOp)
    start, delta = op.inputs[0], op.inputs[2]
    t = type_of(g)
    b.send(start, b.zip([_total(b, g, node)], Expr.operand(0), type_of(start), f"{node}.grad"))
    if delta in b.needed:
        counting = b.emit(RangeOp([], [AxesTensorType("i64", t.axes)], f"{node}.grad", start=0, limit=t.shape[0],
                                  delta=1, dtype="int64"))  # fmt: skip
        weighted = b.zip([g, counting], Expr.operand(0) * Expr.operand(1).cast(t.elem.name), t, f"{node}.grad")
        b.send(delta, b.zip([_total(b, weighted, node)], Expr.operand(0), type_of(delta), f"{node}.grad"))


CLAUSES: dict[type[Operation], Clause] = {OneHotOp: _one_hot, EyeLikeOp: _eye_like, RangeOfOp: _range_of}
