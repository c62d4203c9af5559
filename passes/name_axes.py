"""name-axes: give every value a type with named axes, from the layout rules and the operators.

The layout (ordered glob rules over tensor names, from the module's `loam.layout` attribute and the
pass's `layout` option, which is consulted first) names the axes of the graph's inputs and
initializers, and of any node output axis its operator leaves undetermined (a folded constant, a
split, an inserted unit axis).  Every other axis is carried through each node by its operator rule
(`loam.ops`, through its `node_axes` hook: an If or a Loop names its regions there), which also stops
the build where two different names meet in a contraction or a broadcast.  A tensor that needs a name
no rule gives stops the build naming the tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from loam.core.errors import AxisError
from loam.core.layout import LayoutMatcher, LayoutRule, parse_layout_flag
from loam.core.poly import Poly
from loam.dialects import build_contract as contract
from loam.dialects.graph import ConstantOp, GraphOp, InitializerOp, NodeOp, NoneOp, ReturnOp, SubgraphInfoOp
from loam.dialects.shape_poly import AliasOp, OweOp, PolyTensorType, ValuesOp
from loam.dialects.tensor_axes import AxesTensorType, Axis, RelabelOp, axes_tensor_type
from loam.ops import rule_for
from loam.ops.base import Facts, unit_axes
from loam.passes.stage0 import node_info


def _axes_type(value: SSAValue) -> AxesTensorType:
    t = value.type
    assert isinstance(t, AxesTensorType), "name-axes names a value before any op reads it"
    return t


def _facts(value: SSAValue) -> Facts:
    t = value.type
    if not isinstance(t, PolyTensorType):
        raise AxisError(f"value {value.name_hint or '?'} has type {t}; run stage0 before name-axes")
    return Facts(t.elem, t.shape)


@dataclass(frozen=True)
class NameAxesPass(ModulePass):
    """Name every axis of every value from the layout rules; stop where names clash or are missing.

    Options:
      layout: extra rules `GLOB=Ax1,Ax2;GLOB2=...`, consulted before the module's `loam.layout`.
    """

    name = "name-axes"

    layout: str = ""

    def rules(self, op: ModuleOp) -> tuple[LayoutRule, ...]:
        extra = tuple(parse_layout_flag(r) for r in self.layout.split(";") if r.strip())
        return extra + (contract.LAYOUT.get(op) or ())

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rules = self.rules(op)
        for graph in [g for g in op.walk() if isinstance(g, GraphOp)]:
            NameAxesGraph(rules, graph.graph_name.data).run(graph)


class NameAxesGraph:
    """Axis naming over one graph."""

    def __init__(self, rules: Sequence[LayoutRule], graph_name: str) -> None:
        self.rules = rules
        self.matcher = LayoutMatcher(rules)
        self.graph_name = graph_name
        self.inputs: dict[SSAValue, str] = {}  # the main graph's inputs, which a branch may relabel

    def from_layout(
        self,
        tensor: str,
        facts: Facts,
        given: Sequence[Axis | None] | None = None,
        *,
        unit_fallback: bool = False,
        node: str | None = None,
    ) -> AxesTensorType:
        """Axes for `tensor`: those `given`, the layout naming the rest (all, when none are given).

        `node` names the node computing the tensor, for the message when one name gets two extents.
        """
        given = list(given) if given is not None else [None] * facts.rank
        rule = self.matcher.match(tensor, self.graph_name)
        if rule is not None:
            self.check_agreement(rule, tensor, facts, given, node)
        if all(a is not None for a in given):
            return _distinct(tensor, facts, [a for a in given if a is not None], node)
        if rule is None and unit_fallback and all(e == Poly.const(1) for e in facts.shape):
            # A one-element folded value: it folds into the Expr that reads it, or stretches to
            # whatever it meets, so its unit axes need no name from the layout.  Axis names are
            # unique within a type: the first is Unit, the later ones Unit1, Unit2, ...
            return axes_tensor_type(facts.elem.name, tuple(unit_axes(given)))
        if rule is None and not tensor:  # an output its node leaves unnamed: never read, so any names do
            axes = [
                a if a is not None else Axis.named(f"Unread{i}", e)
                for i, (a, e) in enumerate(zip(given, facts.shape, strict=True))
            ]
            return _distinct(tensor, facts, axes, node)
        if rule is None:
            missing = [str(i) for i, a in enumerate(given) if a is None]
            raise AxisError(
                f"tensor '{tensor}' (rank {facts.rank}): no layout rule names its "
                f"ax{'is' if len(missing) == 1 else 'es'} {', '.join(missing)}; add a layout entry whose "
                "pattern matches it"
            )
        if len(rule.axes) != facts.rank:
            raise AxisError(
                f"tensor '{tensor}' has rank {facts.rank}, but layout rule '{rule.pattern}' names "
                f"{len(rule.axes)} axes ({', '.join(rule.axes)})"
            )
        axes = [a if a is not None else Axis.named(n, e) for a, n, e in zip(given, rule.axes, facts.shape, strict=True)]
        return _distinct(tensor, facts, axes, node or f"layout rule '{rule.pattern}'")

    @staticmethod
    def check_agreement(
        rule: LayoutRule, tensor: str, facts: Facts, given: Sequence[Axis | None], node: str | None
    ) -> None:
        """A rule reaching a tensor must not contradict the names its operator gives it.

        The operator's names win (the layout is consulted only for what it leaves open), so a rule
        that disagrees would be silently ignored; it stops the build instead.
        """
        if len(rule.axes) != facts.rank:
            raise AxisError(
                f"tensor '{tensor}' has rank {facts.rank}, but layout rule '{rule.pattern}' names "
                f"{len(rule.axes)} axes ({', '.join(rule.axes)})"
            )
        for i, (axis, name) in enumerate(zip(given, rule.axes, strict=True)):
            if axis is not None and axis.name != name:
                raise AxisError(
                    f"layout rule '{rule.pattern}' names axis {i} of tensor '{tensor}' {name}, but "
                    f"{node or 'its operator'} gives it {axis.name}"
                )

    def settle(self, value: SSAValue, t: AxesTensorType) -> None:
        Rewriter.replace_value_with_new_type(value, t)

    def run(self, graph: GraphOp) -> None:
        block = graph.body.block
        for arg, name in zip(list(block.args), [s.data for s in graph.input_names.data], strict=True):
            self.settle(arg, self.from_layout(name, _facts(arg)))
        self.inputs = {
            arg: name for arg, name in zip(block.args, [s.data for s in graph.input_names.data], strict=True)
        }
        self.run_ops(block)

    def run_ops(self, block: Block) -> None:
        for op in list(block.ops):
            if isinstance(op, InitializerOp):
                self.settle(op.result, self.from_layout(op.onnx_name.data, _facts(op.result)))
            elif isinstance(op, ConstantOp | ValuesOp):
                if not op.result.uses:
                    # Left behind by a node stage 0 folded: nothing reads it, so the layout need not
                    # name it (lower-to-kernel would drop it anyway).
                    Rewriter.erase_op(op)
                    continue
                self.settle(op.result, self.from_layout(folded_name(op), _facts(op.result), unit_fallback=True))
            elif isinstance(op, NodeOp):
                self.node(op)
            elif isinstance(op, AliasOp):
                # The outer value's axes, at the lengths the branch reads them (stage 0's alias).
                t = op.input.type
                assert isinstance(t, AxesTensorType)
                facts = _facts(op.result)
                axes = [Axis(a.name, e, a.parts) for a, e in zip(t.axes, facts.shape, strict=True)]
                self.settle(op.result, _distinct(op.tensor_name.data, facts, axes, "stage 0's alias"))
            elif not isinstance(op, NoneOp | ReturnOp | OweOp | SubgraphInfoOp | RelabelOp):
                raise AxisError(f"graph '{self.graph_name}': name-axes does not know {op.name}")

    def node(self, op: NodeOp) -> None:
        info = node_info(op)
        rule = rule_for(info, op.domain)
        outputs = [_facts(r) for r in op.outs]
        named = rule.node_axes(self, op, info, outputs)
        for result, name, facts, axes in zip(list(op.outs), op.output_names, outputs, named, strict=True):
            self.settle(result, self.from_layout(name, facts, axes, node=info.where()))

    def input_axes(self, op: NodeOp) -> list[tuple[Axis, ...] | None]:
        """The axes of each input of `op` (None: an absent optional input)."""
        return [None if isinstance(v.owner, NoneOp) else _axes_type(v).axes for v in op.args]

    def relabel_inputs(self, block: Block) -> None:
        """Read a graph input under the axes a rule scoped to this branch's graph gives it."""
        header = block.first_op
        assert header is not None
        scoped = LayoutMatcher(r for r in self.rules if r.graph == self.graph_name)
        for value, name in self.inputs.items():
            rule = scoped.match(name, self.graph_name)
            uses = [u for u in list(value.uses) if block.is_ancestor(u.operation)]
            if rule is None or not uses:
                continue
            t = value.type
            assert isinstance(t, AxesTensorType)
            if len(rule.axes) != len(t.axes):
                raise AxisError(
                    f"tensor '{name}' has rank {len(t.axes)}, but layout rule '{rule.pattern}' for graph "
                    f"'{self.graph_name}' names {len(rule.axes)} axes"
                )
            axes = [Axis.named(n, e) for n, e in zip(rule.axes, t.shape, strict=True)]
            relabelled = _distinct(name, Facts(t.elem, t.shape), axes, f"layout rule '{rule.pattern}'")
            op = RelabelOp(value, name, relabelled)
            Rewriter.insert_op(op, InsertPoint.after(header))
            for use in uses:
                use.operation.operands[use.index] = op.result

    def branch_axes(self, op: NodeOp, key: str) -> list[tuple[Axis, ...]]:
        """Name region `key` of `op`, a branch reading the scope around it, with the rules that reach its
        graph (one scoped to it may relabel a graph input there): the axes of the values it returns."""
        graph_name, block, _ = branch_values(op, key)
        branch = NameAxesGraph(self.rules, graph_name)
        branch.inputs = self.inputs
        branch.relabel_inputs(block)
        branch.run_ops(block)
        return [_axes_type(v).axes for v in branch_values(op, key)[2]]

    def body_axes(self, op: NodeOp, key: str, given: Sequence[SSAValue | None]) -> list[tuple[Axis, ...]]:
        """Name region `key` of `op` with the rules that reach its graph, each argument of its block
        entering under the type of the outer value `given` for it (None: as the layout names it): the
        axes of the values it returns."""
        graph_name, block, _ = branch_values(op, key)
        body = NameAxesGraph(self.rules, graph_name)
        body.inputs = self.inputs
        header = block.first_op
        assert isinstance(header, SubgraphInfoOp)
        names = [s.data for s in header.input_names.data]
        for arg, name, outer in zip(list(block.args), names, given, strict=True):
            body.settle(arg, body.from_layout(name, _facts(arg)) if outer is None else _axes_type(outer))
        body.run_ops(block)
        return [_axes_type(v).axes for v in branch_values(op, key)[2]]

    def one_axis(self, a: Axis, b: Axis) -> Axis | None:
        """None: two branches' axes under two names take the name the output's layout gives."""
        return None


def branch_values(op: NodeOp, key: str) -> tuple[str, Block, list[SSAValue]]:
    """An If branch's (or a Loop body's) graph name, block and returned values."""
    block = op.subgraph(key).block
    header, ret = block.first_op, block.last_op
    assert isinstance(header, SubgraphInfoOp) and isinstance(ret, ReturnOp)
    return header.graph_name.data, block, list(ret.values)


def folded_name(op: ConstantOp | ValuesOp) -> str:
    """The tensor name a layout rule reaches a folded value by."""
    name = op.value.tensor_name.data if isinstance(op, ConstantOp) else op.tensor_name.data
    return name or op.result.name_hint or "constant"


def _distinct(tensor: str, facts: Facts, axes: Sequence[Axis], source: str | None) -> AxesTensorType:
    """The type of `tensor` with `axes`.

    One name may name two axes of a tensor (a square projection is [Hidden, Hidden]); they are then
    one axis, so two different extents under one name stop the build naming both.
    """
    first: dict[str, Axis] = {}
    for i, axis in enumerate(axes):
        seen = first.setdefault(axis.name, axis)
        if seen.extent != axis.extent:
            by = f" by {source}" if source else ""
            raise AxisError(
                f"tensor '{tensor}': axis {axis.name} is {seen.extent} long at axis {axes.index(seen)} and "
                f"{axis.extent} long at axis {i}{by}; one name is one axis, so give one of them another name"
            )
    return axes_tensor_type(facts.elem.name, tuple(axes))
