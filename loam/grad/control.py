"""The grad clauses of control flow: `kernel.if` (ONNX If) and `kernel.loop` (refused).

A branch reads values of the enclosing program directly (`captured`), so those are what an If sends
gradients to.  The backward is an If on the same condition: each branch runs its forward branch again
(its values live only inside it), then the reverse walk of those ops seeded with the adjoints of the If's
results, and yields the adjoint of every captured value a gradient is asked through (zeros where that
branch does not read it).

A Loop's body would need each iteration's values kept (or run again in reverse order); it is refused by
name.
"""

from __future__ import annotations

from xdsl.ir import Block, Operation, Region, SSAValue

from loam.dialects.kernel import IfOp, LoopOp, YieldOp
from loam.grad.base import Backward, is_float, refuse, type_of, zeros_like


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
    from loam.grad.reverse import Reverse  # the walk's own module imports the clauses

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
        walk = Reverse(reached, again, block.add_op)
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


def _loop(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    raise refuse(op, "no grad clause for a Loop yet (each iteration's values would have to be kept)")


CLAUSES = {IfOp: _if, LoopOp: _loop}
EVERY_RESULT = frozenset({IfOp, LoopOp})
"""The ops whose clause reads the adjoint of each result itself (a gradient may reach any of them)."""
