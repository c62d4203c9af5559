"""lower-to-kernel: turn the named-axes graph into the `kernel.program` that `forward` runs.

Graph inputs become the program's arguments, initializers `kernel.weight`s (carrying their data
when the graph has it, so the module can embed them), folded values `kernel.constant`s (a
`shape_poly.values` one holding its polynomials), owed conditions stay `shape_poly.owe`, and each
node the kernels its operator rule (`loam.ops`) emits: MatMul a `kernel.matmul`, Gemm a product and
a `kernel.zip`, each elementwise operator one `kernel.zip` whose `Expr` is data.  The program
replaces the `graph.model`; nothing after this pass reads the graph dialect.

The build notes rules leave through `LowerContext.note` (one per distinct text, naming the nodes
that left it) join `loam.notes`.  The module's `loam.int8_activations` (the option, where given) reaches
the rules as `LowerContext.int8_activations`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, UnitAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from loam.core.errors import AxisError, UnsupportedError
from loam.dialects import build_contract as contract
from loam.dialects.graph import (
    ConstantOp,
    GraphOp,
    InitializerOp,
    ModelOp,
    NodeOp,
    NoneOp,
    ReturnOp,
    SubgraphInfoOp,
)
from loam.dialects.kernel import ConstantOp as KernelConstantOp
from loam.dialects.kernel import ProgramOp, RegroupOp, WeightOp, YieldOp
from loam.dialects.kernel import ReturnOp as KernelReturnOp
from loam.dialects.shape_poly import AliasOp, OweOp, ValuesOp
from loam.dialects.tensor_axes import AxesTensorType, RelabelOp
from loam.grad.reverse import Reverse
from loam.ops import rule_for
from loam.ops.base import LowerContext
from loam.passes.notes import add_notes
from loam.passes.stage0 import node_info


def _axes_type(value: SSAValue) -> AxesTensorType:
    if not isinstance(value.type, AxesTensorType):
        raise AxisError(f"value {value.name_hint or '?'} has type {value.type}; run name-axes first")
    return value.type


def _named(new: SSAValue, old: SSAValue) -> SSAValue:
    """`new`, carrying `old`'s name unless it has one of its own."""
    if new.name_hint is None and old.name_hint is not None:
        new.name_hint = old.name_hint
    return new


@dataclass(frozen=True)
class LowerToKernelPass(ModulePass):
    """Replace each `graph.model` by the `kernel.program` of kernels that computes it."""

    name = "lower-to-kernel"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        notes: dict[str, list[str]] = {}
        int8 = contract.INT8_ACTIVATIONS.get(op)
        for model in [m for m in op.ops if isinstance(m, ModelOp)]:
            program = lower_graph(model.graph, notes, int8)
            Rewriter.replace_op(model, program, new_results=[])
        if notes:
            add_notes(op, [f"{text} ({_nodes(names)})" for text, names in notes.items()])


def _nodes(names: list[str]) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:3])
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"node{'s' if len(names) > 1 else ''} {shown}{more}"


def lower_graph(
    graph: GraphOp, notes: dict[str, list[str]] | None = None, int8_activations: bool | None = None
) -> ProgramOp:
    """The program computing `graph` (a main graph: no outer scope); the rules' build notes go in
    `notes` (text -> the nodes that left it); `int8_activations` is the option (None: not given)."""
    source = graph.body.block
    block = Block(arg_types=[_axes_type(a) for a in source.args])
    mapping: dict[SSAValue, SSAValue] = {}
    for old, new in zip(source.args, block.args, strict=True):
        mapping[old] = new
        new.name_hint = old.name_hint
    lower_ops(source, block, mapping, {} if notes is None else notes, int8_activations)
    # A constant folded into every Expr that read it, or a weight no kernel reads, is not kept:
    # Weights must not ask the checkpoint for a tensor forward never reads.
    for op in reversed(list(block.walk())):
        if isinstance(op, WeightOp | KernelConstantOp) and not op.results[0].uses:
            op.detach()
            op.erase()
    return ProgramOp(
        [a.type for a in block.args],
        [s.data for s in graph.input_names.data],
        Region(block),
        model=graph.graph_name.data,
    )


def _region_lowering(
    node: NodeOp, mapping: dict[SSAValue, SSAValue], notes: dict[str, list[str]], int8_activations: bool | None
) -> Callable[[str], Region]:
    """What lowers the regions of `node` (`LowerContext.region`): region `key`'s block into a new block
    whose arguments stand for its own, reading the enclosing scopes' values through `mapping`."""

    def region(key: str) -> Region:
        source = node.subgraph(key).block
        inner = Block(arg_types=[_axes_type(a) for a in source.args])
        for old, new in zip(source.args, inner.args, strict=True):
            mapping[old] = _named(new, old)
        lower_ops(source, inner, mapping, notes, int8_activations)
        return Region(inner)

    return region


def lower_ops(
    source: Block,
    block: Block,
    mapping: dict[SSAValue, SSAValue],
    notes: dict[str, list[str]],
    int8_activations: bool | None = None,
) -> None:
    """Lower the ops of `source` into `block`; `mapping` carries values of the enclosing scopes, `notes`
    the rules' build notes, `int8_activations` the option (`LowerContext.int8_activations`)."""

    def emit(op: Operation) -> Operation:
        block.add_op(op)
        return op

    for op in source.ops:
        if isinstance(op, InitializerOp):
            # External data lives in a checkpoint file: `Weights.load` supplies it, not the module.
            data = op.value if op.value is not None and not op.value.is_external else None
            w = emit(WeightOp(op.onnx_name.data, _axes_type(op.result), data))
            mapping[op.result] = _named(w.results[0], op.result)
        elif isinstance(op, ConstantOp):
            name = op.value.tensor_name.data or op.result.name_hint or ""
            c = emit(KernelConstantOp(op.value, _axes_type(op.result), name))
            mapping[op.result] = _named(c.results[0], op.result)
        elif isinstance(op, ValuesOp):
            # Computed from the symbols forward binds, where a kernel reads it.
            c = emit(KernelConstantOp(ArrayAttr(op.elements.data), _axes_type(op.result), op.tensor_name.data))
            mapping[op.result] = _named(c.results[0], op.result)
        elif isinstance(op, OweOp):
            emit(op.clone())
        elif isinstance(op, RelabelOp):
            # The same data under the branch's axis names: a regroup that moves nothing.
            r = emit(RegroupOp(mapping[op.input], _axes_type(op.result), f"relabel {op.tensor_name.data}"))
            mapping[op.result] = _named(r.results[0], op.input)
        elif isinstance(op, AliasOp):
            # The same data at the lengths the branch owes equal (checked above it): a regroup
            # that moves nothing, its element counts equal wherever the run reaches it.
            r = emit(RegroupOp(mapping[op.input], _axes_type(op.result), f"alias {op.tensor_name.data}"))
            r.properties["owed_equal"] = UnitAttr()
            mapping[op.result] = _named(r.results[0], op.input)
        elif isinstance(op, NodeOp):
            info = node_info(op)
            rule = rule_for(info, op.domain)
            operands = [None if isinstance(v.owner, NoneOp) else mapping[v] for v in op.args]
            regions = _region_lowering(op, mapping, notes, int8_activations)
            ctx = LowerContext(emit, [_axes_type(r) for r in op.outs], notes, Reverse, regions, int8_activations)
            results = rule.lower(ctx, info, operands)
            for old, new in zip(op.outs, results, strict=True):
                mapping[old] = _named(new, old)
        elif isinstance(op, ReturnOp):
            values = [mapping[v] for v in op.values]
            if isinstance(source.first_op, SubgraphInfoOp):
                emit(YieldOp(values))
            else:
                emit(KernelReturnOp(values, [s.data for s in op.output_names.data]))
        elif not isinstance(op, NoneOp | SubgraphInfoOp):
            raise UnsupportedError(f"lower-to-kernel does not know {op.name}")
