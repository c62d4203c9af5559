"""stage0: settle every value's element type and extents, and fold what the build knows.

Each graph input's dims become extents (`Poly`: a dim_value is a number, a dim_param a symbol; a
dim with neither stops the build naming the input and the axis).  Each node then asks its operator
rule (`loam.ops`) for its outputs' element types and extents, which every value's type carries from
here on as `!shape_poly.tensor`.  A node whose every input the build knows (a Constant, an integer
initializer, a value already folded) is evaluated by the same rule and replaced by `graph.constant`,
so it emits no code.  A float initializer is never evaluated: weights belong to the checkpoint.
Finally the graph's declared output shapes are merged with what the nodes produced (ONNX's
mergeInDimensionInfo: two numbers that differ, or two ranks, are a conflict).  The node asks through
its rule's `stage0` hook: an operator whose node holds regions (If, Loop) walks them there, with the
steps `Stage0Graph` offers it (`loam.ops.base.Stage0Walk`).

The build also knows integers it can only state as polynomials: Shape of a tensor with a symbolic
extent.  A rule gives such a value as a numpy object array of `Poly`, and a node whose outputs are
all known that way becomes a `shape_poly.values` instead of a `graph.constant`.  What stage 0 cannot
prove of the inputs it owes (`loam.core.owed`): the graph's owed conditions become `shape_poly.owe` ops
at the top of its block, which `forward` checks before any kernel runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from loam.core import owed
from loam.core.bounds import Interval
from loam.core.derived import I32, I64, bounds_of
from loam.core.errors import PolyError, ShapeError, UnsupportedError
from loam.core.limits import check_extents
from loam.core.owed import Owed
from loam.core.poly import Poly, poly_product
from loam.dialects import build_contract as contract
from loam.dialects.dim_params import read_dim_param, spell_graph_inputs
from loam.dialects.graph import (
    ConstantOp,
    GraphOp,
    InitializerOp,
    NodeOp,
    NoneOp,
    ReturnOp,
    SubgraphInfoOp,
    TensorDataAttr,
    TensorType,
)
from loam.dialects.shape_poly import AliasOp, OweOp, PolyTensorType, ValuesOp, poly_tensor_type
from loam.ops import rule_for
from loam.ops.base import Facts, NodeInfo, OpRule
from loam.passes.forced import declared_axes, forced_extent_notes
from loam.passes.notes import add_notes


def node_info(node: NodeOp) -> NodeInfo:
    """The rule-facing view of a `graph.node`."""
    name = node.node_name or (node.output_names[0] if node.output_names else "")
    domain = "" if node.domain == "ai.onnx" else node.domain
    return NodeInfo(node.op_type, name, node.since, node.get_attr, len(node.outs), tuple(node.output_names), domain)


def facts_of_type(t: object, what: str) -> Facts:
    """Facts of a value from its ONNX type (inputs, initializers)."""
    if isinstance(t, PolyTensorType):
        return Facts(t.elem, t.shape)
    if not isinstance(t, TensorType):
        raise UnsupportedError(f"{what} has type {t}; Loam compiles tensors only")
    shape = t.shape
    if shape is None:
        raise ShapeError(f"{what} has no shape; declare its rank and extents in the model")
    extents: list[Poly] = []
    for i, dim in enumerate(shape):
        if dim is None:
            raise ShapeError(f"{what} axis {i} has an unknown extent; give it a dim_param or a dim_value in the model")
        extents.append(Poly.const(dim) if isinstance(dim, int) else read_dim_param(dim))
    return Facts(t.elem, tuple(extents))


def symbolic_value(value: object) -> bool:
    """Whether a folded value holds polynomials (an object array of `Poly`) rather than numbers."""
    return value is not None and np.asarray(value).dtype == object


def settled_value(node: NodeInfo, facts: Facts) -> Facts:
    """`facts` with a polynomial value that holds numbers only turned back into numbers, and one that
    some input could carry past its element type refused."""
    if not symbolic_value(facts.value):
        return facts
    value = np.asarray(facts.value)
    polys = [Poly.lift(int(v)) if isinstance(v, (int, np.integer)) else v for v in value.reshape(-1).tolist()]
    if not all(isinstance(v, Poly) for v in polys):
        raise AssertionError(f"{node.where()}: a folded object array must hold polynomials")
    if all(v.is_const for v in polys):
        numbers = np.array([v.const_value for v in polys]).reshape(value.shape)
        return Facts(facts.elem, facts.shape, numbers.astype(facts.elem.numpy))
    fits = {"i64": I64, "i32": I32, "bool": Interval(0, 1)}.get(facts.elem.name)
    if fits is None:
        raise node.unsupported(f"a {facts.elem.name} value computed from symbolic extents is not supported")
    for v in polys:
        reach = bounds_of(v, owed.bounds())
        if (reach.lo < fits.lo or reach.hi > fits.hi) and not (fits is I64 and owed.current().within_an_input(v)):
            raise node.fail(
                f"the value {v} may reach {reach} for some input, past {facts.elem.name}; "
                "fix the symbols with the `dims` option"
            )
    return Facts(facts.elem, facts.shape, np.array(polys, dtype=object).reshape(value.shape))


def _check_folded(node: NodeInfo, index: int, facts: Facts) -> None:
    """A rule's folded value must be what its facts say: a disagreement is a bug in Loam, caught here
    rather than as a wrong shape in whatever node reads the value next."""
    value = np.asarray(facts.value)
    want = facts.static_shape()
    if want is not None and value.shape != want:
        raise AssertionError(f"{node.where()}: output {index} folds to shape {value.shape}, its rule says {want}")
    if symbolic_value(value):
        return
    if facts.elem.numpy is not None and value.dtype != facts.elem.numpy:
        raise AssertionError(
            f"{node.where()}: output {index} folds to dtype {value.dtype}, its rule says {facts.elem.name}"
        )


def poly_type(facts: Facts) -> PolyTensorType:
    return poly_tensor_type(facts.elem.name, tuple(facts.shape))


def _known_value(init: InitializerOp, elem_name: str) -> np.ndarray | None:
    """An initializer's value when stage 0 may evaluate over it: integer and bool data only."""
    if init.value is None or init.value.is_external or elem_name not in ("i64", "i32", "bool"):
        return None
    return init.value.to_numpy()


@dataclass(frozen=True)
class Stage0Pass(ModulePass):
    """Give every value its element type and extents; fold what the build knows into constants."""

    name = "stage0"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from loam.passes.report import graph_nodes, node_list

        before = graph_nodes(op)
        declared: dict[str, list[str]] = {}
        for graph in [g for g in op.walk() if isinstance(g, GraphOp)]:
            weights_as_weights(graph)
            declared.update(declared_axes(graph))
            spell_graph_inputs(graph)
            stage = Stage0Graph(graph.graph_name.data)
            stage.scope.declared = declared
            stage.run(graph.body.block, [s.data for s in graph.input_names.data])
        contract.NODES.set(op, tuple(node_list(before, graph_nodes(op))))
        add_notes(op, forced_extent_notes(op, declared))


def weights_as_weights(graph: GraphOp) -> None:
    """A graph input that an initializer gives a default value is that initializer: a weight.

    Models before ONNX IR version 4 had to list every initializer among the graph inputs, so old
    exports (and many converted ones) declare their weights that way.  `forward` does not take
    them as inputs: they are weights, read from `Weights` (embedded, or from a checkpoint, which
    is how a deployer supplies another value).
    """
    block = graph.body.block
    names = [s.data for s in graph.input_names.data]
    dropped: list[int] = []
    for op in list(block.ops):
        if isinstance(op, InitializerOp) and op.default_of is not None:
            arg = op.default_of
            assert isinstance(arg, BlockArgument)
            op.operands = []
            arg.replace_all_uses_with(op.result)
            dropped.append(arg.index)
    for index in sorted(dropped, reverse=True):
        block.erase_arg(block.args[index])
        del names[index]
    if dropped:
        graph.input_names = ArrayAttr([StringAttr(n) for n in names])


class Stage0Graph:
    """Stage 0 over one graph's block, keeping what it knows of each value."""

    def __init__(self, graph_name: str) -> None:
        self.graph_name = graph_name
        self.facts: dict[SSAValue, Facts] = {}
        self.scope = owed.ExtentScope()
        self.within = ""  # how messages name the node whose body this graph is (`Loop node 'y': body 'b' `)

    def settle(self, value: SSAValue, facts: Facts) -> SSAValue:
        """Record `facts` for `value` and retype it as `!shape_poly.tensor`."""
        if value.type != poly_type(facts):
            value = Rewriter.replace_value_with_new_type(value, poly_type(facts))
        self.facts[value] = facts
        return value

    def run(self, block: Block, input_names: list[str]) -> None:
        for arg, name in zip(list(block.args), input_names, strict=True):
            facts = facts_of_type(arg.type, f"graph input '{name}'")
            self.scope.bound.update(s for e in facts.shape for s in e.symbols)
            self.scope.sizes.append(poly_product(facts.shape))
            self.settle(arg, facts)
        with owed.scope(self.scope):
            self.run_ops(block)
        remove_unread_constants(block)
        first = block.first_op
        checks = [OweOp(o.lhs, o.rhs, o.node, equal=o.equal) for o in self.scope.owed]
        if checks:
            if first is None:
                block.add_ops(checks)
            else:
                Rewriter.insert_op(checks, InsertPoint.before(first))

    def run_ops(self, block: Block) -> None:
        for op in list(block.ops):
            if isinstance(op, InitializerOp):
                self.initializer(op)
            elif isinstance(op, ConstantOp):
                array = op.value.to_numpy()
                self.settle(op.result, Facts(op.value.elem, tuple(Poly.const(d) for d in array.shape), array))
            elif isinstance(op, NodeOp):
                self.node(op)
            elif isinstance(op, ValuesOp):
                t = op.result.type
                assert isinstance(t, PolyTensorType)
                polys = np.array(op.polys, dtype=object).reshape([d.const_value for d in t.shape])
                self.settle(op.result, Facts(t.elem, t.shape, polys))
            elif isinstance(op, ReturnOp):
                self.merge_outputs(op)
            elif not isinstance(op, NoneOp | OweOp | SubgraphInfoOp | AliasOp):
                raise UnsupportedError(f"graph '{self.graph_name}': stage 0 does not know {op.name}")

    def initializer(self, op: InitializerOp) -> None:
        name = op.onnx_name.data
        facts = facts_of_type(op.result.type, f"initializer '{name}'")
        self.settle(op.result, Facts(facts.elem, facts.shape, _known_value(op, facts.elem.name)))

    def node(self, op: NodeOp) -> None:
        info = node_info(op)
        rule = rule_for(info, op.domain)
        rule.check_attributes(info, op.attr_names())
        rule.stage0(self, op, info)

    def inputs(self, op: NodeOp) -> list[Facts | None]:
        """What stage 0 knows of each input of `op` (None: an absent optional input)."""
        return [None if isinstance(v.owner, NoneOp) else self.facts[v] for v in op.args]

    def infer(self, op: NodeOp, info: NodeInfo, rule: OpRule) -> None:
        """`rule.infer` over the inputs' facts gives the outputs; a node whose every output it evaluates
        folds to constants."""
        if op.subgraphs:
            raise UnsupportedError(f"{info.where()}: subgraphs are not compiled yet")
        inputs = self.inputs(op)
        try:
            outputs = [settled_value(info, f) for f in rule.infer(info, inputs)]
        except PolyError as e:
            raise info.fail(str(e)) from None
        for name, f in zip(op.output_names, outputs, strict=False):
            # A value past the machine (loam.core.limits) is refused here, before any kernel plans for it.
            check_extents(
                [e.const_value if e.is_const else 1 for e in f.shape],
                f"{info.where()}: output '{name}'",
                error=ShapeError,
            )
        if len(outputs) != len(op.outs):
            raise ShapeError(f"{info.where()}: produces {len(outputs)} outputs, the graph names {len(op.outs)}")
        if outputs and all(f.value is not None for f in outputs):
            for i, f in enumerate(outputs):
                _check_folded(info, i, f)
            self.replace_by_constants(op, outputs)
            return
        if rule.keeps_values and outputs and outputs[0].span is None and inputs and inputs[0] is not None:
            outputs[0] = Facts(outputs[0].elem, outputs[0].shape, outputs[0].value, inputs[0].span)
        self.settle_results(op, info, [Facts(f.elem, f.shape, span=f.span) for f in outputs])

    def settle_results(self, op: NodeOp, info: NodeInfo, outputs: Sequence[Facts]) -> None:
        """Settle each result of `op` with its facts; bind the lengths only the run knows once it has run."""
        for result, facts in zip(list(op.outs), outputs, strict=True):
            self.settle(result, facts)
        self.bind_result_lengths(info, outputs)

    def bind_result_lengths(self, info: NodeInfo, outputs: Sequence[Facts]) -> None:
        """A length only the run knows (`result_length`: values decided it, or an If's branches
        differ) is known once the node has run: `forward` binds it from the result, and checks what
        is owed of it right there."""
        for k, facts in enumerate(outputs):
            for axis, extent in enumerate(facts.shape):
                if extent == info.result_length(k, axis):
                    self.scope.bound.update(extent.symbols)

    def branch(self, op: NodeOp, key: str, info: NodeInfo) -> list[Facts]:
        """Stage 0 over region `key` of `op`, a branch that reads the scope around it and takes no inputs
        of its own, in a copy of this scope (what it owes is checked at its top): the facts of the values
        it returns."""
        block = op.subgraph(key).block
        header = block.first_op
        if not isinstance(header, SubgraphInfoOp):
            raise AssertionError(f"{info.where()}: {key} has no graph.subgraph_info")
        if block.args:
            raise info.unsupported(f"{key} '{header.graph_name.data}' declares inputs of its own")
        pristine = op.subgraph(key).clone()
        branch = self.run_branch(block, header)
        same = self.owed_same_symbols(branch.scope.owed)
        if same:
            # The branch owes two input symbols equal: reading one as the other everywhere in
            # it gives an axis the operators make one a single length.  Run stage 0 again on
            # the branch as it was, with that reading.
            region = op.subgraph(key)
            fresh = pristine.detach_block(pristine.block)
            region.insert_block_before(fresh, block)
            region.detach_block(block)
            block.erase(safe_erase=False)
            block = fresh
            header = block.first_op
            assert isinstance(header, SubgraphInfoOp)
            branch = self.run_branch(block, header, same)
        pristine.erase()  # the copy's ops read outer values: drop those uses
        checks = [OweOp(o.lhs, o.rhs, o.node, equal=o.equal) for o in branch.scope.owed]
        if checks:
            Rewriter.insert_op(checks, InsertPoint.after(header))
        ret = block.last_op
        assert isinstance(ret, ReturnOp)
        return [branch.facts[v] for v in ret.values]

    def nested(self, graph_name: str, within: str = "") -> Stage0Graph:
        """A walk over a region's block named `graph_name`, in a copy of this scope; `within` is how
        its messages name the node that holds it."""
        nested = Stage0Graph(graph_name)
        nested.within = within
        nested.facts = dict(self.facts)
        outer = self.scope
        nested.scope = owed.ExtentScope(
            set(outer.bound), dict(outer.bounds), list(outer.sizes), declared=outer.declared
        )
        return nested

    def close_region(self, block: Block, header: Operation) -> None:
        """Drop the folded values nothing in `block` reads; check what the region owes right after its
        `header`."""
        remove_unread_constants(block)
        checks = [OweOp(o.lhs, o.rhs, o.node, equal=o.equal) for o in self.scope.owed]
        if checks:
            Rewriter.insert_op(checks, InsertPoint.after(header))

    def run_branch(
        self, block: Block, header: SubgraphInfoOp, same: Sequence[tuple[Owed, str, str]] = ()
    ) -> Stage0Graph:
        """Stage 0 over an If branch's block in a copy of the scope around it.

        `same` lists owed equalities of two input symbols (the condition, the symbol read, the
        symbol it is read as).  The branch keeps owing each (its check stays at the branch's top),
        and every outer value it reads whose extents name a read symbol is read through a
        `shape_poly.alias` after that check, typed with the symbol it is read as.
        """
        branch = self.nested(header.graph_name.data)
        for condition, _, _ in same:
            branch.scope.record(condition)
        if same:
            rename = dict((b, a) for _, b, a in same)

            def read(p: Poly) -> Poly:
                for b, a in rename.items():
                    p = p.substitute(b, Poly.symbol(a))
                return p

            aliases: dict[SSAValue, SSAValue] = {}
            for inner in list(block.walk()):
                for index, v in enumerate(inner.operands):
                    if v in aliases:
                        inner.operands[index] = aliases[v]
                        continue
                    facts = self.facts.get(v)
                    if facts is None or not any(s in rename for e in facts.shape for s in e.symbols):
                        continue
                    shape = tuple(read(e) for e in facts.shape)
                    span = None if facts.span is None else (read(facts.span[0]), read(facts.span[1]))
                    seen = Facts(facts.elem, shape, span=span)
                    alias = AliasOp(v, tensor_name(v), poly_type(seen))
                    alias.result.name_hint = v.name_hint
                    last: Operation = header
                    while isinstance(last.next_op, AliasOp):
                        last = last.next_op
                    Rewriter.insert_op(alias, InsertPoint.after(last))
                    branch.facts[alias.result] = seen
                    aliases[v] = alias.result
                    inner.operands[index] = alias.result
        with owed.scope(branch.scope):
            branch.run_ops(block)
        remove_unread_constants(block)
        return branch

    def owed_same_symbols(self, conditions: Sequence[Owed]) -> list[tuple[Owed, str, str]]:
        """The owed equalities of two symbols the graph's inputs declare, each with the symbol a
        branch may read as the other (the one declared by fewer input axes; else the one declared later).

        A branch whose owed check passed runs only where the two are one length, so reading one as
        the other changes no extent of the run; where they differ the check stops the run first.
        """
        found: list[tuple[Owed, str, str]] = []
        renamed: set[str] = set()
        declared = self.scope.declared
        for o in conditions:
            if not o.equal:
                continue
            a, b = o.lhs.lone_symbol, o.rhs.lone_symbol
            if a is None or b is None or o.lhs != Poly.symbol(a) or o.rhs != Poly.symbol(b):
                continue
            if a not in declared or b not in declared or a not in self.scope.bound or b not in self.scope.bound:
                continue
            if {a, b} & renamed or any(a == k or b == k for _, _, k in found):
                continue  # one reading per symbol keeps it simple
            order = list(declared)
            if (len(declared[a]), -order.index(a)) < (len(declared[b]), -order.index(b)):
                a, b = b, a  # b is read as a
            found.append((o, b, a))
            renamed.add(b)
        return found

    def fold(self, op: NodeOp, info: NodeInfo, outputs: Sequence[Facts]) -> None:
        """Replace `op` by constants holding the values of `outputs` (every one known; `settled_value`)."""
        self.replace_by_constants(op, [settled_value(info, f) for f in outputs])

    def replace_by_constants(self, op: NodeOp, outputs: Sequence[Facts]) -> None:
        """Replace a node the build can evaluate by one `graph.constant` per output."""
        constants: list[ConstantOp | ValuesOp] = []
        for name, facts in zip(op.output_names, outputs, strict=True):
            assert facts.value is not None
            if symbolic_value(facts.value):
                constants.append(ValuesOp(np.asarray(facts.value).reshape(-1).tolist(), poly_type(facts), name))
                continue
            data = TensorDataAttr.from_numpy(np.asarray(facts.value), facts.elem, name=name)
            constants.append(ConstantOp(data, poly_type(facts)))
        Rewriter.insert_op(constants, InsertPoint.before(op))
        for c, result, facts in zip(constants, op.outs, outputs, strict=True):
            c.result.name_hint = result.name_hint
            result.replace_all_uses_with(c.result)
            self.facts[c.result] = facts
        Rewriter.erase_op(op)

    def merge_outputs(self, ret: ReturnOp) -> None:
        """Merge each declared output shape with the computed one (ONNX's mergeInDimensionInfo).

        Two numbers that differ, or two ranks, are a conflict.  A dim_param names the axis in the
        author's words and a `?` names nothing, so neither disagrees with what the nodes produce;
        a number declared where the nodes produce a polynomial is owed by the inputs.
        """
        for value, name, declared in zip(ret.values, ret.output_names.data, ret.declared_types.data, strict=True):
            got = self.facts[value]
            if not isinstance(declared, TensorType) or declared.shape is None:
                continue
            where = f"{self.within}graph output '{name.data}'"
            if declared.elem != got.elem and declared.elem.name != "undefined":
                raise ShapeError(f"{where} is declared {declared.elem.name}, the nodes produce {got.elem.name}")
            if len(declared.shape) != got.rank:
                raise ShapeError(
                    f"{where} is declared with rank {len(declared.shape)}, the nodes produce rank {got.rank}"
                )
            for i, (want, have) in enumerate(zip(declared.shape, got.shape, strict=True)):
                if not isinstance(want, int):
                    continue
                if have.is_const and want != have.const_value:
                    raise ShapeError(f"{where} axis {i} is declared {want}, the nodes produce {have}")
                if not have.is_const:
                    with owed.scope(self.scope):
                        owed.current().owe_equal(have, Poly.const(want), where, f"axis {i} as declared")


def tensor_name(value: SSAValue) -> str:
    """The ONNX name of a value: a graph input's, a node output's, a folded value's."""
    if isinstance(value, BlockArgument):
        parent = value.block.parent_op()
        names = getattr(parent, "input_names", None)
        if names is not None and value.index < len(names.data):
            return names.data[value.index].data
    owner = value.owner
    if isinstance(owner, NodeOp) and isinstance(value, OpResult):
        return owner.output_names[value.index]
    if isinstance(owner, ConstantOp):
        return owner.value.tensor_name.data
    if isinstance(owner, ValuesOp):
        return owner.tensor_name.data
    return value.name_hint or ""


def remove_unread_constants(block: Block) -> None:
    """Drop the folded values nothing reads any more (the operands of nodes stage 0 folded)."""
    for op in reversed(list(block.ops)):
        if isinstance(op, ConstantOp | ValuesOp) and not op.result.uses:
            Rewriter.erase_op(op)
