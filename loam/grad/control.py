"""The grad clauses of control flow: `kernel.if` (ONNX If) and `kernel.loop` (ONNX Loop).

A branch reads values of the enclosing program directly (`captured`), so those are what an If sends
gradients to.  The backward is an If on the same condition: each branch runs its forward branch again
(its values live only inside it), then the reverse walk of those ops seeded with the adjoints of the If's
results, and yields the adjoint of every captured value a gradient is asked through (zeros where that
branch does not read it).

A Loop whose trip count the build knows (at most `MAX_UNROLLED`) and whose condition stays true is unrolled:
the body's ops once per iteration, each copy reading the previous one's carried values, the scan outputs
stacked from the copies'; in the Loop's place in the forward where the walk owns it (the `differentiate`
pass: nothing runs twice), else in the backward (ONNX's Gradient node); then the same walk back from the
results' adjoints.  Any other Loop on a
gradient's path is refused by name.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Block, Operation, Region, SSAValue

from loam.dialects.graph import TensorDataAttr
from loam.dialects.kernel import ConcatOp, ConstantOp, IfOp, LoopOp, RegroupOp, YieldOp
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, Clause, is_float, known, refuse, type_of, zeros_like


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
    the previous one's carried values, each scan output stacked from the copies' (in the Loop's place where
    the walk owns the forward, so nothing runs twice; else in the backward), and the walk back over them
    from the results' adjoints."""
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
    scanned = op.outputs[count:]
    forward = b.in_forward(op) if trips or not scanned else None  # no copy makes an empty scan output
    again: list[Operation] = []
    name = f"{node}.steps" if forward else f"{node}.grad"

    def put(new: Operation) -> SSAValue:
        (forward or b.emit)(new)
        again.append(new)
        return new.results[0]

    def known(value: object, t: AxesTensorType) -> SSAValue:
        return put(ConstantOp(TensorDataAttr.from_numpy(np.array(value, t.elem.numpy), t.elem), t, name))

    values: list[SSAValue] = list(op.carried)
    scans: list[list[SSAValue]] = [[] for _ in scanned]
    true = known(True, type_of(condition))
    for i in range(trips):
        mapping: dict[SSAValue, SSAValue] = dict(zip(carried_args, values, strict=True))
        mapping |= {iteration: known(i, type_of(iteration)), condition: true}
        for inner in block.ops:
            if inner is not last:
                put(inner.clone(value_mapper=mapping))
        given = [mapping.get(v, v) for v in last.values]
        values = given[1 : 1 + count]
        for k, v in enumerate(given[1 + count :]):
            one = AxesTensorType(type_of(v).elem, [Axis.named("Unit", 1), *type_of(v).axes])
            scans[k].append(put(RegroupOp(v, one, name)))
    stacked = [
        put(ConcatOp(parts, [type_of(r)], name, axis=0)) for r, parts in zip(scanned, scans, strict=True) if parts
    ]
    seeds = [b.adjoint.get(r) for r in op.outputs]
    if forward is not None:
        b.stand_for(op, [*values, *stacked])
    walk = b.nested(reached, again, b.emit)
    for value, seed in zip([*values, *stacked], seeds, strict=False):
        if seed is not None:
            walk.send(value, seed)
    walk.run()
    for value in reached:
        if value in walk.adjoint:
            b.send(value, walk.adjoint[value])


def _known(value: SSAValue) -> object:
    """The one value a build-time constant holds (None where the run gives it)."""
    data = known(value)
    return data.reshape(-1)[0].item() if data is not None and data.size == 1 else None


def _trip_count(op: LoopOp) -> int:
    trips = _known(op.trip) if op.trip is not None else None
    if not isinstance(trips, int):
        raise refuse(op, "no grad clause for a Loop whose trip count the build does not know (its body is unrolled)")
    if trips > MAX_UNROLLED:
        raise refuse(op, f"its grad clause unrolls the body, and {trips} iterations pass the {MAX_UNROLLED} it unrolls")
    return max(trips, 0)


CLAUSES: dict[type[Operation], Clause] = {IfOp: _if, LoopOp: _loop}
EVERY_RESULT = frozenset({IfOp, LoopOp})
"""The ops whose clause reads the adjoint of each result itself (a gradient may reach any of them)."""
