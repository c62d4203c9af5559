"""The blocks `forward` is printed in: a `Scope` per block (forward's body, an If branch, a Loop
body), the If and Loop blocks inside one (`if_block`, `loop_block` print them), and the result lengths
bound after the node giving them (`Bind`).

The printer (`module_printer.ModulePrinter`) collects a program's ops into these and renders them;
the control flow is printed here so the printer's own file holds what every op shares.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xdsl.ir import Block, Operation, SSAValue, Use

from loam.backends.module_text import axes_type, dtype_source, numpy_dtype, tuple_source
from loam.dialects.kernel import IfOp, LoopOp, ProgramOp, YieldOp

if TYPE_CHECKING:
    from loam.backends.module_printer import ModulePrinter
    from loam.dialects.shape_poly import OweOp


@dataclass(eq=False)
class Scope:
    """One block being printed (forward's body or an If branch), inside `parent`."""

    parent: Scope | None
    # Owed conditions checked at the block's top: the symbols each reads, and its line.
    owed: list[tuple[set[str], str]] = field(default_factory=list)
    # Conditions reading a result length, checked once the block has bound it.
    deferred: list[OweOp] = field(default_factory=list)
    # Derived symbols computed at the block's top, and those computed inline (they read an If's result).
    derived: set[str] = field(default_factory=set)
    inline: set[str] = field(default_factory=set)
    # Result lengths (an If's, a NonZero's, ...) bound so far in this block.
    bound: set[str] = field(default_factory=set)
    items: list[str | IfBlock | LoopBlock | Bind] = field(default_factory=list)

    def around(self) -> Iterator[Scope]:
        """This block, then each block around it."""
        scope: Scope | None = self
        while scope is not None:
            yield scope
            scope = scope.parent

    def knows(self, name: str) -> bool:
        """Whether derived symbol `name` is computed where this block runs (here or around it)."""
        return any(name in s.derived or name in s.inline for s in self.around())

    def binds(self, name: str) -> bool:
        """Whether result length `name` is bound at this point of the block."""
        return any(name in s.bound for s in self.around())


@dataclass(eq=False)
class IfBlock:
    cond: str
    node: str
    then: Scope
    other: Scope


@dataclass(eq=False)
class LoopBlock:
    """A Loop: the lines before the `while`, its header, the lines starting each iteration, the body
    block, and the lines after it."""

    before: list[str]
    header: str
    start: list[str]
    body: Scope
    after: list[str]


@dataclass(eq=False)
class Bind:
    """A result length bound after the node giving it (printed only where a later extent reads it)."""

    symbol: str
    source: str
    node: str


def who(op: Operation, node: str) -> str:
    """How messages name the node giving a result length: `If node 'grow'`, `node 'nz'`."""
    kind = "If " if isinstance(op, IfOp) else "Loop " if isinstance(op, LoopOp) else ""
    return f"{kind}node '{node}'"


def if_block(printer: ModulePrinter, op: IfOp) -> None:
    """Print `op` into the printer's current block: `if`/`else` over the one-element condition, each
    block assigning the If's results.

    A result length no input binds (the branches give it differently) is bound from the result
    after the If, for the later extents that read it.
    """
    scope = printer.scope
    assert scope is not None
    cond = printer.value_text[op.cond]
    idents = [printer.result_ident(op, r) for r in op.outputs]
    blocks: list[Scope] = []
    for region in (op.then_region, op.else_region):
        block = printer.collect(region.block.ops, scope)
        last = region.block.last_op
        assert isinstance(last, YieldOp)
        for ident, value in zip(idents, last.values, strict=True):
            block.items.append(f"{ident} = {printer.value_text[value]}")
        blocks.append(block)
    scope.items.append(IfBlock(cond, op.node.data, blocks[0], blocks[1]))
    printer.bind_result_lengths(op, idents)


def loop_block(printer: ModulePrinter, op: LoopOp) -> None:
    """Print `op` into the printer's current block: a `while` over the body block; the Loop's
    results are bound after it either way."""
    scope = printer.scope
    assert scope is not None
    node = op.node.data
    block = op.body.block
    carried = len(op.carried)
    idents = [printer.result_ident(op, r) for r in op.outputs]
    trip, cond, count = (printer.names.mint(n) for n in ("_trip", "_cond", "_count"))
    scans = [printer.names.mint(f"_scan{k}") for k in range(len(op.outputs) - carried)]
    before: list[str] = []
    if op.trip is not None:
        before.append(f"{trip} = int(np.asarray({printer.value_text[op.trip]}).reshape(-1)[0])  # {node}: M")
    if op.cond is not None:
        before.append(f"{cond} = bool(np.asarray({printer.value_text[op.cond]}).reshape(-1)[0])  # {node}: cond")
    else:
        before.append(f"{cond} = True  # {node}: no cond input")
    for ident, value in zip(idents, op.carried, strict=False):
        before.append(f"{ident} = {printer.value_text[value]}  # {node}: loop-carried, initial")
    before += [f"{name}: list[np.ndarray] = []" for name in scans]
    before.append(f"{count} = 0")
    test = f"{cond} and {count} < {trip}" if op.trip is not None else cond
    iteration, condition, *args = block.args
    start: list[str] = []
    for arg, hint, text in ((iteration, "iteration", f"np.array({count}, dtype=np.int64)"),
                            (condition, "cond_in", f"np.array({cond})")):  # fmt: skip
        ident = printer.names.mint(arg.name_hint or hint)
        printer.value_text[arg] = ident
        start.append(f"{ident} = {text}")
    for arg, ident in zip(args, idents, strict=False):
        printer.value_text[arg] = ident
    body = printer.collect(block.ops, scope)
    last = block.last_op
    assert isinstance(last, YieldOp)
    texts = [printer.value_text[v] for v in last.values]
    # Every yielded value is read before a carried value is assigned (a scan output or the
    # condition may be this iteration's carried value itself).
    body.items += [f"{name}.append({text})" for name, text in zip(scans, texts[1 + carried :], strict=True)]
    body.items.append(f"{cond} = bool(np.asarray({texts[0]}).reshape(-1)[0])")
    if carried:
        body.items.append(f"{', '.join(idents[:carried])} = {', '.join(texts[1 : 1 + carried])}")
    body.items.append(f"{count} += 1")
    after: list[str] = []
    for ident, name, result in zip(idents[carried:], scans, op.outputs[carried:], strict=True):
        t = axes_type(result, f"kernel.loop '{node}' result")
        dtype = dtype_source(numpy_dtype(t, f"kernel.loop '{node}' result"))
        rest = tuple_source([printer.poly_py(a.extent) for a in t.axes[1:]])
        after.append(f"{ident} = np.stack({name}) if {name} else np.empty((0, *{rest}), {dtype})")
    scope.items.append(LoopBlock(before, f"while {test}:  # Loop node '{node}'", start, body, after))
    printer.bind_result_lengths(op, idents)


def loops_around(op: Operation) -> list[LoopOp]:
    """The Loops whose bodies hold `op`, outermost first (the WGSL module runs a Loop's body per iteration
    from the host, so a value made outside a Loop is read by every iteration)."""
    loops: list[LoopOp] = []
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, ProgramOp):
        if isinstance(parent, LoopOp):
            loops.insert(0, parent)
        parent = parent.parent_op()
    return loops


def loops_of(value: SSAValue) -> list[LoopOp]:
    """The Loops whose bodies define `value` (a body's argument: its Loop and those around it)."""
    owner = value.owner
    if isinstance(owner, Block):
        parent = owner.parent_op()
        if isinstance(parent, LoopOp):
            return [*loops_around(parent), parent]
        return loops_around(parent) if parent is not None and not isinstance(parent, ProgramOp) else []
    return loops_around(owner)


def decided_on_host(value: SSAValue) -> bool:
    """Whether only the host reads `value`: an If's condition, a Loop's trip count or condition (so a
    trip count past the i32 range, as ONNX spells "no bound", need not fit the device)."""
    uses = list(value.uses)
    return bool(uses) and all(_read_by_host(u) for u in uses)


def _read_by_host(use: Use) -> bool:
    op = use.operation
    if isinstance(op, IfOp):
        return use.index == 0
    if isinstance(op, LoopOp):
        return use.index < op.has_trip.value.data + op.has_cond.value.data
    return False
