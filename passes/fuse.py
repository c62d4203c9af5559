"""fuse: compose chains of `kernel.zip` into one zip, epilogues into products, and report every node's decision.

Why: each `kernel.zip` writes its whole result to memory and the next one reads it back.  When a
zip's result feeds exactly one other zip of the same extents, the consumer can compute the
producer's `Expr` itself (`Expr.inline_operand`): the intermediate tensor is never materialised, a
pass over memory and a launch disappear, and the numbers are the same, since every step keeps its
element type (Expr carries its own casts; halves round where they did before).

A producer stays a kernel of its own when
  - the program returns its result (`result is an output`),
  - two or more ops read it (`producer has N consumers`): fusing would compute it twice,
  - its consumer is not a zip (`reduction boundary` for reductions, softmax and normalisations,
    `no elementwise neighbour` otherwise) or sits in another block (an `If` branch),
  - the consumer broadcasts it to larger extents (`broadcast changes extent`): the fused Expr
    would compute the producer once per broadcast element,
  - with `objective=dispatch` (WebGPU: fewer launches, no 64-bit integers in WGSL), either side
    computes i64 (`element type i64`),
  - the two together would compute more than `MAX_FUSED_STEPS` steps (`fused kernel at its size
    limit`): each fusion rewrites the consumer's whole Expr, so the cap keeps the pass linear; or
    would read more than `MAX_FUSED_INPUTS` tensors (the same reason): a WGSL shader binds each
    as a storage buffer, and a stage may bind 16 at most on common devices (whatever the objective:
    the WGSL backend builds with `memory` unless told otherwise).
With `objective=memory` (CPU) i64 and bool chains fuse like any other.

Then each `kernel.matmul` whose result only an elementwise zip reads takes that zip as its
`epilogue` (bias, scale, activation, residual): the product is stored once, already finished.
The same refusals apply, plus `epilogue changes element type` (the epilogue must keep the
product's element type and extents, so it can run in the product's buffer) and `scalar product`
(a rank-0 product has no buffer to finish in place).

`objective=dispatch` counts launches rather than passes over memory: a cheap producer
(at most `DUPLICATE_STEPS` steps) read by several zips of its own extents is computed again in each
of them, saving its launch, where `objective=memory` keeps it (`producer has N consumers`).

A fused zip keeps the consumer's `node` and lists the ONNX nodes it computes in the discardable
attribute `fused = ["producer", ..., "consumer"]`.  The decisions go to `loam.passes.report`; the option
`report=-` prints the report on stderr (`report=FILE` writes it), `format=text|json|dot`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from loam.core.errors import UsageError
from loam.core.poly import Poly
from loam.dialects import build_contract as contract
from loam.dialects.kernel import (
    ArgReduceOp,
    CumSumOp,
    ExprAttr,
    GroupNormOp,
    IfOp,
    LrnOp,
    MatmulOp,
    NormalizeOp,
    PoolOp,
    ProgramOp,
    ReduceOp,
    ReturnOp,
    SoftmaxOp,
    TopKOp,
    YieldOp,
    ZipOp,
)
from loam.dialects.tensor_axes import AxesTensorType
from loam.passes.report import FOLDED, FUSED, KEPT, REPORT_FORMATS, FusionReport, NodeDecision, Reason

OBJECTIVES: tuple[str, ...] = ("memory", "dispatch")
DUPLICATE_STEPS = 4
"""With `objective=dispatch`, a producer of at most this many non-operand steps is recomputed in each consumer."""
MAX_FUSED_STEPS = 128
"""The most non-operand steps one fused zip computes: fusing rewrites the consumer's whole `Expr`, so an
unbounded chain would cost time quadratic in its length (a 2,000-node chain took two minutes to build)."""
MAX_FUSED_INPUTS = 14
"""The most tensors one fused zip reads: with its params and its result, 16 storage
buffers, what WebGPU devices commonly bind per shader stage (the default is 8; Loam asks for the adapter's)."""

_REDUCTIONS: tuple[type[Operation], ...] = (
    ReduceOp, ArgReduceOp, TopKOp, CumSumOp, SoftmaxOp, NormalizeOp, GroupNormOp, LrnOp, PoolOp,
)  # fmt: skip


def _node(op: Operation) -> str:
    node = op.properties.get("node")
    return node.data if isinstance(node, StringAttr) else ""


def _members(op: Operation) -> list[str]:
    """The ONNX nodes a kernel computes: those the fuse pass composed into it (`fused`, the consumer last),
    else its own."""
    members = contract.FUSED.get(op)
    return list(members) if members is not None else [_node(op)]


def _users(value: SSAValue) -> list[Operation]:
    """The distinct ops reading `value`, in no particular order."""
    seen: dict[int, Operation] = {}
    for use in value.uses:
        seen.setdefault(id(use.operation), use.operation)
    return list(seen.values())


def _shape(value: SSAValue) -> tuple[Poly, ...] | None:
    t = value.type
    return t.shape if isinstance(t, AxesTensorType) else None


def _elem(value: SSAValue) -> str:
    t = value.type
    return t.elem.name if isinstance(t, AxesTensorType) else ""


def _bytes(value: SSAValue) -> Poly | int:
    """2 x the bytes of `value` (written once, read once), as an int or a Poly."""
    t = value.type
    assert isinstance(t, AxesTensorType)
    total: Poly | int = 2 * t.elem.bits // 8
    for extent in t.shape:
        total = extent * total if isinstance(total, int) else total * extent
    if isinstance(total, Poly) and total.is_const:
        return int(total.const_value)
    return total


Refusal = tuple[Reason, int | None] | None
"""Why a kernel cannot take its reader in (a reason and, for `CONSUMERS`, the count), or None."""


def _reader_refusal(result: SSAValue, reader: Operation, objective: str) -> Refusal:
    """Why `reader` cannot compute inside the kernel producing `result` (the checks both fusions share)."""
    if not isinstance(reader, ZipOp):
        return (Reason.REDUCTION if isinstance(reader, _REDUCTIONS) else Reason.NO_NEIGHBOUR), None
    if reader.parent_block() is not result.owner.parent_block():
        return Reason.OTHER_BLOCK, None
    read = reader.expr.data.operand_indices
    if not any(v is result and i in read for i, v in enumerate(reader.inputs)):
        return Reason.NO_NEIGHBOUR, None  # its Expr does not read the value (a constant over its extents)
    shape = _shape(result)
    if shape is None or shape != _shape(reader.result):
        return Reason.BROADCAST, None
    if objective == "dispatch" and "i64" in (_elem(result), _elem(reader.result)):
        return Reason.I64, None
    producer = result.owner
    if isinstance(producer, ZipOp) and _computed(producer) + _computed(reader) > MAX_FUSED_STEPS:
        return Reason.SIZE, None
    if isinstance(producer, ZipOp):
        reads = {v for v in reader.operands if v is not result} | set(producer.operands)
        if len(reads) > MAX_FUSED_INPUTS:
            return Reason.SIZE, None
    return None


def _computed(zip_op: ZipOp) -> int:
    """How many steps of `zip_op`'s Expr compute (its operands' reads aside)."""
    return zip_op.expr.data.computed_steps


def _output_refusal(users: list[Operation]) -> Refusal:
    if any(isinstance(u, (ReturnOp, YieldOp)) for u in users):
        return Reason.OUTPUT, None
    if not users:
        return Reason.NO_NEIGHBOUR, None
    return None


def refusal(producer: ZipOp, objective: str) -> Refusal:
    """Why `producer` cannot be fused into its consumer, or None when it can."""
    users = _users(producer.result)
    found = _output_refusal(users)
    if found is None and len(users) >= 2 and not (objective == "dispatch" and _duplicable(producer)):
        found = Reason.CONSUMERS, len(users)
    for consumer in users:
        found = found or _reader_refusal(producer.result, consumer, objective)
    return found


def _duplicable(producer: ZipOp) -> bool:
    """Whether `producer` is cheap enough to compute again in each consumer (objective dispatch)."""
    return _computed(producer) <= DUPLICATE_STEPS


def epilogue_refusal(product: MatmulOp, objective: str) -> Refusal:
    """Why the zip reading `product` cannot become its epilogue, or None when it can."""
    users = _users(product.result)
    found = _output_refusal(users)
    if found is None and len(users) >= 2:
        found = Reason.CONSUMERS, len(users)
    if found is None and product.epilogue is not None:
        found = Reason.NO_NEIGHBOUR, None
    found = found or _reader_refusal(product.result, users[0], objective)
    if found is None and not _shape(product.result):
        found = Reason.SCALAR, None
    if found is None and _elem(product.result) != _elem(users[0].results[0]):
        found = Reason.CAST, None
    return found


class _Fuser:
    def __init__(self, objective: str) -> None:
        self.objective = objective
        self.saved: dict[str, Poly | int] = {}
        # Each fused op's members, kept here while the pass runs and written as its `fused` attribute
        # once (`write_members`): rebuilding the attribute at every fusion made a chain quadratic.
        self.members: dict[Operation, list[str]] = {}

    def members_of(self, op: Operation) -> list[str]:
        return self.members.pop(op, None) or _members(op)

    def write_members(self) -> None:
        for op, members in self.members.items():
            contract.FUSED.set(op, tuple(members))
        self.members.clear()

    def run_block(self, block: Block) -> None:
        for op in list(block.ops):
            for region in op.regions:
                for inner in region.blocks:
                    self.run_block(inner)
            if isinstance(op, ZipOp):
                self.absorb(op)
        for op in list(block.ops):
            if isinstance(op, MatmulOp) and epilogue_refusal(op, self.objective) is None:
                self.finish(op)

    def absorb(self, consumer: ZipOp) -> ZipOp:
        """Fuse every eligible producer into `consumer` (repeatedly); the resulting zip."""
        while True:
            for index, value in enumerate(consumer.inputs):
                producer = value.owner
                if isinstance(producer, ZipOp) and refusal(producer, self.objective) is None:
                    consumer = self.fuse(producer, consumer, index)
                    break
            else:
                return consumer

    def finish(self, product: MatmulOp) -> MatmulOp:
        """`product` with its one consumer zip as its epilogue (the product becomes operand 0)."""
        (consumer,) = _users(product.result)
        assert isinstance(consumer, ZipOp)
        own, kept = consumer.expr.data.dedupe_operands(list(consumer.inputs))
        inputs = [consumer.inputs[i] for i in kept]
        at = inputs.index(product.result)
        order = [at, *(i for i in range(len(inputs)) if i != at)]
        expr = own.remap_operands({old: new for new, old in enumerate(order)})
        extras = [inputs[i] for i in order[1:]]
        fused = MatmulOp(product.lhs, product.rhs, consumer.result.type, _node(consumer), expr, extras)
        fused.attributes.update(consumer.attributes)
        self.members[fused] = list(dict.fromkeys([*self.members_of(product), *self.members_of(consumer)]))
        self._saved(_node(product), _bytes(product.result))
        Rewriter.replace_op(consumer, fused)
        Rewriter.erase_op(product)
        return fused

    def _saved(self, node: str, amount: Poly | int) -> None:
        previous = self.saved.get(node, 0)
        self.saved[node] = previous + amount if isinstance(previous, Poly) else amount + previous

    def fuse(self, producer: ZipOp, consumer: ZipOp, index: int) -> ZipOp:
        # The consumer may read the producer's result as several operands (`Mul(a, a)`): merge
        # equal operands first, so inlining one operand replaces every read.
        own, kept = consumer.expr.data.dedupe_operands(list(consumer.inputs))
        own_inputs = [consumer.inputs[i] for i in kept]
        index = own_inputs.index(consumer.inputs[index])
        expr = own.inline_operand(index, producer.expr.data)
        values = [v for i, v in enumerate(own_inputs) if i != index] + list(producer.inputs)
        expr, kept = expr.dedupe_operands(values)
        # The consumer becomes the fused zip in place (its result, node and attributes stay): a new op
        # for every fusion of a long chain cost more than the fusion itself.
        consumer.operands = [values[i] for i in kept]
        consumer.properties["expr"] = ExprAttr(expr)
        # A producer duplicated into several consumers (objective dispatch) keeps its own entry.
        mine = self.members.get(producer) or _members(producer)
        self.members[consumer] = list(dict.fromkeys([*mine, *self.members_of(consumer)]))
        if not producer.result.uses:  # a producer duplicated into several consumers goes with the last
            self._saved(_node(producer), _bytes(producer.result))
            self.members.pop(producer, None)
            Rewriter.erase_op(producer)
        return consumer


def _programs(module: ModuleOp) -> list[ProgramOp]:
    return [op for op in module.walk() if isinstance(op, ProgramOp)]


def _kernel_ops(program: ProgramOp) -> list[Operation]:
    return [op for op in program.walk() if op is not program and _node(op)]


def _edges(programs: list[ProgramOp]) -> list[tuple[str, str]]:
    edges: dict[tuple[str, str], None] = {}
    for program in programs:
        for op in _kernel_ops(program):
            for value in op.operands:
                owner = value.owner
                if isinstance(owner, Operation) and _node(owner) and _node(owner) != _node(op):
                    edges[(_node(owner), _node(op))] = None
    return list(edges)


def fuse_program(
    module: ModuleOp, objective: str = "memory", nodes: Sequence[tuple[str, str, bool]] = ()
) -> FusionReport:
    """Fuse the zip chains of every `kernel.program` in `module`; the decision of every node.

    `nodes` lists the model's ONNX nodes as (name, op type, folded by stage 0), in graph order
    (`loam.passes.report.node_list`); without it the report covers the nodes the kernels name."""
    if objective not in OBJECTIVES:
        raise UsageError(f"fuse: objective '{objective}' is not one of {', '.join(OBJECTIVES)}")
    programs = _programs(module)
    edges = _edges(programs)
    kinds: dict[str, list[str]] = {}  # each node's kernels before fusion, in program order
    for program in programs:
        for op in _kernel_ops(program):
            kinds.setdefault(_node(op), []).append(op.name.removeprefix("kernel."))
    fuser = _Fuser(objective)
    for program in programs:
        fuser.run_block(program.block)
    fuser.write_members()
    return _report(nodes, programs, objective, edges, fuser.saved, kinds)


def _report(
    nodes: Sequence[tuple[str, str, bool]],
    programs: list[ProgramOp],
    objective: str,
    edges: list[tuple[str, str]],
    saved: dict[str, Poly | int],
    kinds: dict[str, list[str]],
) -> FusionReport:
    report = FusionReport(objective, edges=edges)
    ops_of: dict[str, list[Operation]] = {}
    group_of: dict[str, str] = {}
    why: dict[str, Reason] = {}
    for program in programs:
        for op in _kernel_ops(program):
            ops_of.setdefault(_node(op), []).append(op)
            if isinstance(op, (ZipOp, MatmulOp)) and contract.FUSED.is_on(op):
                group = f"g{len(report.groups) + 1}"
                report.groups[group] = _members(op)
                why[group] = Reason.EPILOGUE if isinstance(op, MatmulOp) else Reason.CHAIN
                for m in report.groups[group]:
                    group_of.setdefault(m, group)

    def bytes_text(node: str) -> int | str:
        amount = saved.get(node, 0)
        return amount if isinstance(amount, int) else str(amount)

    def kernel_decision(node: str, op_type: str | None) -> NodeDecision:
        ops = ops_of.get(node, [])
        op_type = op_type or "+".join(dict.fromkeys(kinds.get(node, [])))
        if node in group_of:
            group = group_of[node]
            reason = why[group]
            ends = [op for op in ops if isinstance(op, ZipOp) and contract.FUSED.is_on(op)]
            if ends and (found := refusal(ends[-1], objective)) is not None and found[0] is Reason.SIZE:
                reason = Reason.SIZE  # the group's last node: its consumer starts the next kernel
            return NodeDecision(node, op_type, FUSED, reason.text(), group, bytes_text(node))
        zips = [op for op in ops if isinstance(op, ZipOp)]
        products = [op for op in ops if isinstance(op, MatmulOp)]
        if zips or products:
            last = (zips or products)[-1]
            found = refusal(last, objective) if isinstance(last, ZipOp) else epilogue_refusal(last, objective)
            reason, n = found if found is not None else (Reason.NO_NEIGHBOUR, None)
            if any(isinstance(op, IfOp) for op in ops):
                reason, n = Reason.NOT_ELEMENTWISE, None
        elif any(isinstance(op, _REDUCTIONS) for op in ops):
            reason, n = Reason.REDUCTION, None
        else:
            reason, n = Reason.NOT_ELEMENTWISE, None
        return NodeDecision(node, op_type, KEPT, reason.text(n))

    listed: set[str] = set()
    for name, op_type, folded in nodes:
        listed.add(name)
        if name in kinds:
            report.decisions.append(kernel_decision(name, op_type))
        elif folded:
            report.decisions.append(NodeDecision(name, op_type, FOLDED, Reason.FOLDED.text()))
        else:
            report.decisions.append(NodeDecision(name, op_type, KEPT, Reason.NO_KERNEL.text()))
    for name in kinds:
        if name not in listed:
            report.decisions.append(kernel_decision(name, None))
    return report


def write_report(report: FusionReport, destination: str, fmt: str = "text") -> None:
    """Write the report in `fmt` to `destination`: a file path, or `-` for stderr."""
    text = report.render(fmt)
    if destination == "-":
        sys.stderr.write(text)
        sys.stderr.flush()
    else:
        Path(destination).write_text(text, encoding="utf-8")


@dataclass(frozen=True)
class FusePass(ModulePass):
    """Fuse kernel.zip chains into one zip each and report every ONNX node's fusion decision."""

    name = "fuse"

    objective: str = "memory"
    """`memory` (CPU: fewer passes over memory) or `dispatch` (WebGPU: fewer launches, no i64)."""
    report: str = ""
    """Where to write the decision report: `-` for stderr, a file path, or empty for nowhere."""
    format: str = "text"
    """The report's format: `text`, `json` or `dot`."""

    @property
    def last_report(self) -> FusionReport | None:
        """The report of the last run, for a caller holding this pass (`loam.driver.pipeline.build`)."""
        report = self.__dict__.get("_last_report")
        return report if isinstance(report, FusionReport) else None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.format not in REPORT_FORMATS:
            raise UsageError(f"fuse: format '{self.format}' is not one of {', '.join(REPORT_FORMATS)}")
        report = fuse_program(op, self.objective, contract.NODES.get(op) or ())
        object.__setattr__(self, "_last_report", report)  # a frozen pass: not an option, so not a field
        if self.report:
            write_report(report, self.report, self.format)
