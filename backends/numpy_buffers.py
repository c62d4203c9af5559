"""Where the numpy module stores each intermediate: a plan made at build time.

numpy allocates a fresh array for every kernel's result; for a forward called many times that is
an allocation (and, for large arrays, fresh pages to fault in) per kernel per call.  The plan
removes both where it can prove it safe:

- A *root* is an array some kernel creates: a product (`np.matmul`), a zip's result, a library
  kernel known to return new memory (`FRESH_KERNELS`).  Every other value may view its operands
  (a regrouping, a permutation, a slice, a split, an If's result), so its *roots* are its operands'.
  Inputs, weights and constants have none: nothing ever writes into them.
- A root lives until the last op that reads any value viewing it; a root some program output
  views lives forever (the caller keeps it).
- A zip whose operand views a root that no later op reads, with the result's extents and element
  type, and no other operand viewing that root, computes in that operand (`in_place`): the
  elementwise ufuncs write each element where they read it.  Only an operand its Expr reads: an
  unread one (a zip filling its operand's extents with a constant) never receives the result.
- Each remaining root of a product or zip (rank >= 1) that does not live forever gets a *slot*:
  a buffer of its extents and element type, preallocated once per binding of the symbols those
  extents read and reused on every call (`out=`).  Roots whose lifetimes do not overlap share a
  slot of the same extents and element type.

Only the top-level block is planned; a value read inside an If's branches (a Loop's body) counts as
read by the If (the Loop), and its results may view anything its blocks read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.ir import Operation, SSAValue

from loam.core.poly import Poly
from loam.dialects.expr import broadcast_extents
from loam.dialects.kernel import (
    ConstantOp,
    IfOp,
    LibraryOp,
    LoopOp,
    MatmulOp,
    ReturnOp,
    WeightOp,
    ZipOp,
)
from loam.dialects.tensor_axes import AxesTensorType

FRESH_KERNELS: frozenset[str] = frozenset({"concat", "gather", "normalize", "softmax", "conv", "pool"})
"""Library kernels whose every result is new memory, never a view of an operand
(`tests/backends/test_buffers.py` checks each numpy kernel named here)."""


@dataclass
class BufferPlan:
    """The plan for one block: zips computed in an operand, and each preallocated slot."""

    in_place: dict[ZipOp, int] = field(default_factory=dict[ZipOp, int])
    """A zip -> the operand it computes in."""
    slots: list[tuple[tuple[Poly, ...], str]] = field(default_factory=list[tuple[tuple[Poly, ...], str]])
    """Each slot's extents and Loam element type."""
    slot_of: dict[SSAValue, int] = field(default_factory=dict[SSAValue, int])
    """The result of a product or zip -> the slot it is computed in."""


def _type(value: SSAValue) -> AxesTensorType | None:
    t = value.type
    return t if isinstance(t, AxesTensorType) else None


def _reach(values: Sequence[SSAValue]) -> tuple[Poly, ...] | None:
    """The extents `values` broadcast to (None when one is not a named-axes tensor)."""
    types = [_type(v) for v in values]
    if any(t is None for t in types):
        return None
    return tuple(broadcast_extents([t.shape for t in types if t is not None]))


def broadcast_afterwards(op: ZipOp) -> bool:
    """Whether the numpy module broadcasts `op`'s result after computing it (a read-only view): its
    Expr reads some operand and the operands broadcast to fewer extents than the result's.

    A zip whose Expr reads no operand is never one: it fills a new array of its result's extents."""
    result = _type(op.result)
    if result is None or not op.expr.data.operand_indices:
        return False
    return _reach(list(op.inputs)) != tuple(result.shape)


def fills_result(op: ZipOp) -> bool:
    """Whether `op` must be given its result's array to write into: the operands its Expr reads
    broadcast to fewer extents than the result's (none read: a scalar), and it is not broadcast
    afterwards.  Computed without one, its value would have the read operands' extents."""
    result = _type(op.result)
    if result is None or broadcast_afterwards(op):
        return False
    read = [v for i, v in enumerate(op.inputs) if i in op.expr.data.operand_indices]
    return _reach(read) != tuple(result.shape)


def _creates(op: Operation, broadcast_zips: set[ZipOp]) -> bool:
    """Whether `op`'s results are new memory."""
    if isinstance(op, MatmulOp):
        return True
    if isinstance(op, ZipOp):
        # A zip whose result is broadcast afterwards is a read-only view; one that is its operand
        # (an identity) returns that operand.
        return op not in broadcast_zips and any(not _is_operand(s) for s in op.expr.data.steps)
    return isinstance(op, LibraryOp) and op.kernel_name in FRESH_KERNELS


def _is_operand(step: object) -> bool:
    from loam.dialects.expr import Operand

    return isinstance(step, Operand)


def _top_level(op: Operation, block_ops: set[Operation]) -> Operation | None:
    """The op of the planned block that is or contains `op`."""
    current: Operation | None = op
    while current is not None and current not in block_ops:
        current = current.parent_op()
    return current


def plan_buffers(ops: Sequence[Operation], broadcast_zips: set[ZipOp]) -> BufferPlan:
    """The buffer plan for a block's `ops` (`broadcast_zips`: zips the printer broadcasts afterwards)."""
    index = {op: i for i, op in enumerate(ops)}
    block_ops = set(ops)
    forever = len(ops)
    # Each value's roots: the creating ops (by index) whose memory it may view.
    roots: dict[SSAValue, frozenset[int]] = {}
    # The values that are read-only broadcast views (of a zip broadcast afterwards, or a view of one): memory
    # of fewer elements than their extents, which no step may write into.
    broadcast_views: set[SSAValue] = set()
    for i, op in enumerate(ops):
        if isinstance(op, (WeightOp, ConstantOp)):
            continue
        creates = _creates(op, broadcast_zips)
        if op in broadcast_zips or (not creates and any(v in broadcast_views for v in op.operands)):
            broadcast_views.update(op.results)
        if creates:
            for produced in op.results:
                roots[produced] = frozenset({i})
            continue
        seen: set[int] = set()
        reads = list(op.operands)
        if isinstance(op, IfOp | LoopOp):
            reads += [v for inner in op.walk() if inner is not op for v in inner.operands]
        for v in reads:
            seen |= roots.get(v, frozenset())
        for produced in op.results:
            roots[produced] = frozenset(seen)
    # Each root's last reader (forever when an output may view it).
    last: dict[int, int] = {}
    for value, found in roots.items():
        for use in value.uses:
            user = _top_level(use.operation, block_ops)
            at = forever if user is None or isinstance(user, ReturnOp) else index[user]
            for r in found:
                last[r] = max(last.get(r, r), at)
    for r in {r for found in roots.values() for r in found}:
        last.setdefault(r, r)

    plan = BufferPlan()
    # A zip computing in a dead operand's root joins that root: one class, the earliest op its key.
    parent: dict[int, int] = {}

    def find(r: int) -> int:
        while r in parent:
            r = parent[r]
        return r

    for i, op in enumerate(ops):
        if not isinstance(op, ZipOp) or i not in last or op in broadcast_zips:
            continue
        result = _type(op.result)
        if result is None or not result.shape:
            continue
        read = op.expr.data.operand_indices
        for j, value in enumerate(op.inputs):
            if j not in read:
                continue  # an operand the Expr does not read is no place for its result
            found = roots.get(value, frozenset())
            t = _type(value)
            if (
                len(found) != 1
                or t is None
                or value in broadcast_views
                or (t.shape, t.elem) != (result.shape, result.elem)
            ):
                continue
            (r,) = found
            others = [roots.get(v, frozenset()) for k, v in enumerate(op.inputs) if k != j]
            if last[r] != i or any(r in o for o in others):
                continue
            plan.in_place[op] = j
            parent[i] = r
            last[r] = max(last[r], last[i])
            break
    _assign_slots(ops, plan, last, find)
    return plan


def _assign_slots(ops: Sequence[Operation], plan: BufferPlan, last: dict[int, int], find: Callable[[int], int]) -> None:
    """Give each product or zip class that does not live forever a slot, reusing free ones."""
    forever = len(ops)
    # Each class's lifetime: from its first op to the last reader of any of its members.
    end: dict[int, int] = {}
    for r, at in last.items():
        key = find(r)
        end[key] = max(end.get(key, key), at)
    free_at: list[int] = []  # per slot, the op index after which it is free
    for i, op in enumerate(ops):
        if find(i) != i or i not in end or end[i] >= forever:
            continue
        if not isinstance(op, (MatmulOp, ZipOp)) or op in plan.in_place:
            continue
        t = _type(op.results[0])
        if t is None or not t.shape:
            continue
        want = (tuple(t.shape), t.elem.name)
        free = [s for s, slot in enumerate(plan.slots) if slot == want and free_at[s] < i]
        if free:
            s = free[0]
        else:
            s = len(plan.slots)
            plan.slots.append(want)
            free_at.append(-1)
        free_at[s] = end[i]
        plan.slot_of[op.results[0]] = s
