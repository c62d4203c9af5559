"""The grad clauses of control flow: `kernel.if` (ONNX If) and `kernel.loop` (ONNX Loop).

A branch reads values of the enclosing program directly (`captured`), so those are what an If sends
gradients to.  The backward is an If on the same condition: each branch runs its forward branch again
(its values live only inside it), then the reverse walk of those ops seeded with the adjoints of the If's
results, and yields the adjoint of every captured value a gradient is asked through (zeros where that
branch does not read it).

A Loop whose trip count the build knows (at most `MAX_UNROLLED`) and whose condition stays true is unrolled
in the backward: the body's ops again per iteration, each copy reading the previous one's carried values, then
the same walk back from the final carried values' and the scan outputs' adjoints.  Any other Loop on a
gradient's path is refused by name.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Block, Operation, Region, SSAValue

from loam.dialects.graph import TensorDataAttr
from loam.dialects.kernel import ConstantOp, IfOp, LoopOp, RegroupOp, SliceOp, YieldOp
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, constant, is_float, refuse, type_of, zeros_like
from loam.poly import Poly


def captured(op: Operation) -> list[SSAValue]:
    """The values defined outside `op` that the ops in its regions read, in order of first reading."""
    inside = {id(o) for o in op.walk()}
    found: dict[SSAValue, None] = {}
    for inner in op.walk():
        for v in inner.operands if inner is not op else ():
            owner = v.owner
            defined_by = owner if isinstance(owner, Operation) else owner.parent_op()
            if defined_by is None or id(defined_by) not in inside:
                found[v] = None
    return list(found)


def _if(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, IfOp)

    reached = [v for v in captured(op) if v in b.needed and is_float(v)]
    if not reached:
        return
    seeds = [b.adjoint.get(r) for r in op.outputs]
    regions = []
    for region in (op.then_region, op.else_region):
        block = Block()
        mapping: dict[SSAValue, SSAValue] = {}
        again = []
        for inner in region.block.ops:
            if isinstance(inner, YieldOp):
                yielded = [mapping.get(v, v) for v in inner.values]
                continue
            copy = inner.clone(value_mapper=mapping)
            block.add_op(copy)
            again.append(copy)
        walk = b.nested(reached, again, block.add_op)
        for value, seed in zip(yielded, seeds, strict=True):
            if seed is not None:
                walk.send(value, seed)
        walk.run()
        shares = [walk.adjoint.get(v) or zeros_like(walk, v, node) for v in reached]
        block.add_op(YieldOp(shares))
        regions.append(Region(block))
    back = IfOp(op.cond, [type_of(v) for v in reached], f"{node}.grad", regions[0], regions[1])
    b.emit(back)
    for value, share in zip(reached, back.outputs, strict=True):
        b.send(value, share)


MAX_UNROLLED = 256
"""The most iterations a Loop's clause unrolls (each is the body's ops again, in the backward)."""


def _loop(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    """A Loop of a trip count the build knows, whose condition stays true: the body unrolled, each copy reading
    the previous one's carried values, and the walk back over the copies from the results' adjoints (the
    final carried values' from the last copy, each scan output's slice from its own)."""
    assert isinstance(op, LoopOp)

    reached = [v for v in [*op.carried, *captured(op)] if v in b.needed and is_float(v)]
    if not reached:
        return
    trips = _trip_count(op)
    block = op.body.block
    iteration, condition, *carried_args = block.args
    last = block.last_op
    assert isinstance(last, YieldOp)
    if op.cond is not None and (_known(op.cond) is not True or last.values[0] is not condition):
        raise refuse(op, "no grad clause for a Loop whose condition is not true throughout (the body or the run "
                         "decides it)")  # fmt: skip
    count = len(op.carried)
    values: list[SSAValue] = list(op.carried)
    scans: list[list[SSAValue]] = [[] for _ in op.outputs[count:]]
    true = constant(b, np.array(True), type_of(condition), node)
    again: list[Operation] = []
    for i in range(trips):
        mapping: dict[SSAValue, SSAValue] = dict(zip(carried_args, values, strict=True))
        mapping |= {iteration: constant(b, np.array(i), type_of(iteration), node), condition: true}
        for inner in block.ops:
            if inner is not last:
                b.emit(copy := inner.clone(value_mapper=mapping))
                again.append(copy)
        given = [mapping.get(v, v) for v in last.values]
        values = given[1 : 1 + count]
        for k, v in enumerate(given[1 + count :]):
            scans[k].append(v)
    walk = b.nested(reached, again, b.emit)
    for result, value in zip(op.outputs[:count], values, strict=True):
        if result in b.adjoint:
            walk.send(value, b.adjoint[result])
    for result, stacked in zip(op.outputs[count:], scans, strict=True):
        seed = b.adjoint.get(result)
        for i, value in enumerate(stacked if seed is not None else ()):
            t = type_of(seed)  # type: ignore[arg-type]
            one = AxesTensorType(t.elem, [Axis.named("Unit", 1), *t.axes[1:]])
            starts = (Poly.const(i), *(Poly.const(0) for _ in t.axes[1:]))
            part = b.emit(SliceOp([seed], [one], f"{node}.grad", starts=starts, counts=tuple(one.shape),
                                  steps=(1,) * t.rank))  # type: ignore[list-item]  # fmt: skip
            walk.send(value, b.emit(RegroupOp(part, type_of(value), f"{node}.grad")))
    walk.run()
    for value in reached:
        if value in walk.adjoint:
            b.send(value, walk.adjoint[value])


def _known(value: SSAValue) -> object:
    """The one value a build-time constant holds (None where the run gives it)."""
    owner = value.owner
    if isinstance(owner, ConstantOp) and isinstance(owner.value, TensorDataAttr):
        data = owner.value.to_numpy().reshape(-1)
        return data[0].item() if data.size == 1 else None
    return None


def _trip_count(op: LoopOp) -> int:
    trips = _known(op.trip) if op.trip is not None else None
    if not isinstance(trips, int):
        raise refuse(op, "no grad clause for a Loop whose trip count the build does not know (its body is unrolled)")
    if trips > MAX_UNROLLED:
        raise refuse(op, f"its grad clause unrolls the body, and {trips} iterations pass the {MAX_UNROLLED} it unrolls")
    return max(trips, 0)


CLAUSES = {IfOp: _if, LoopOp: _loop}
EVERY_RESULT = frozenset({IfOp, LoopOp})
"""The ops whose clause reads the adjoint of each result itself (a gradient may reach any of them)."""
