"""ONNX If and Loop: control flow over blocks of `forward`.

If is one `if` over a one-element bool, a block of `forward` per branch.

Where the build knows the condition (a Constant, a graph input the `values` option fixes, a value
stage 0 folds from them), stage 0 picks the branch: its nodes take the If's place, and the other
branch, which no run reaches, is dropped unchecked.  Otherwise both branches compile and the run
takes one.  The passes walk the branch regions themselves (each branch is checked in a copy of the
scope around it, so what one branch owes is checked at the top of its own block); this rule holds
what the If itself means: how the two branches' outputs make the node's outputs.

- Element type and rank must agree, or the build stops naming the output.  Two ranks chosen by a
  condition on extents the run computes first (torch's `squeeze` of an axis that may be 1: Silero
  VAD's decoder) make the module follow the then branch, the inputs owing the condition; chosen by
  anything else, the refusal names what decides it (the graph inputs `--value` can fix).
- An extent both branches give alike is the output's; one they give differently becomes a symbol of
  its own (`"present.0.key[2]"`: the output's name and the axis), which forward binds from the
  branch that ran, and checks what is owed of it right there.
- An axis both branches name alike keeps the name; one they name apart takes the name the output's
  layout rule gives it (the printer relabels each branch's value to the output's type).

Loop is one `while` over its body block (`LoopRule`): stage 0 checks the body once with what every
iteration knows (the carried values' extents, never their values), a carried value keeps its
extents (owed inside the body, so checked each iteration, where the build cannot show it), and each
scan output gains a first axis as long as the iterations run, a length only the run knows.

Each pass walks the regions through the rule's hooks (`stage0`, `node_axes`, `lower`), with the steps
the pass offers (`loam.ops.base.Stage0Walk`, `AxesWalk`, `LowerContext.region`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import owed
from loam.core.poly import Poly, derived_call
from loam.ops.base import AxesWalk, Facts, LowerContext, NodeInfo, OpRule, Stage0Walk, result_length

if TYPE_CHECKING:
    from xdsl.ir import Region, SSAValue

    from loam.dialects.graph import NodeOp
    from loam.dialects.tensor_axes import Axis


class IfRule(OpRule):
    """ONNX If (opset 1-21): two branch subgraphs reading the enclosing scope; no inputs of their own."""

    op_types = ("If",)
    kernels: tuple[str, ...] = ("kernel.if",)
    attributes = frozenset({"then_branch", "else_branch"})
    elem_types = ("f32", "f16", "bf16", "f64", "i64", "i32", "bool")
    limitations = "branches may not declare inputs or initializers of their own"

    def check_condition(self, node: NodeInfo, cond: Facts | None) -> None:
        if cond is None:
            raise node.fail("the condition input is absent")
        if cond.elem.name != "bool":
            raise node.fail(f"the condition has element type {cond.elem.name}; ONNX needs bool")
        count = Poly.const(1)
        for d in cond.shape:
            count = count * d
        if count != Poly.const(1):
            raise node.fail(f"the condition has extents [{', '.join(map(str, cond.shape))}]; If needs one element")

    def merge(
        self,
        node: NodeInfo,
        names: Sequence[str],
        then: Sequence[Facts],
        other: Sequence[Facts],
        chosen_by: str = "",
    ) -> list[Facts]:
        """The node's outputs from what the then and else branches return, the condition known only at
        run time (`chosen_by` says what decides it, for a refusal).

        An extent the branches give apart is a length only the run knows (`result_length`): forward
        binds it from the branch that ran.  A rank they give apart is refused: what reads the output
        needs one rank at build time.
        """
        if len(then) != len(other) or len(then) != len(names):
            raise node.fail(
                f"the branches return {len(then)} and {len(other)} values; the node names {len(names)} outputs"
            )
        out: list[Facts] = []
        for name, a, b in zip(names, then, other, strict=True):
            if a.elem != b.elem:
                raise node.fail(f"output '{name}' is {a.elem.name} in the then branch and {b.elem.name} in the else")
            if a.rank != b.rank:
                raise node.unsupported(
                    f"output '{name}' has rank {a.rank} in the then branch and {b.rank} in the else, and the "
                    f"condition is known only at run time{chosen_by}"
                )
            shape = tuple(
                x if x == y else result_length(name, axis)
                for axis, (x, y) in enumerate(zip(a.shape, b.shape, strict=True))
            )
            out.append(Facts(a.elem, shape))
        return out

    def stage0(self, stage: Stage0Walk, op: NodeOp, info: NodeInfo) -> None:
        """A condition the build knows (a Constant, a value the `values` option fixes, what stage 0 folds
        from them) picks its branch now: that branch's nodes take the If's place (`inline`), and the
        other is dropped unchecked, as a run never reaches it.  Otherwise each branch is checked in a copy
        of the scope around it, and the outputs take what both give (`merge`)."""
        cond = stage.inputs(op)[0]
        self.check_condition(info, cond)
        assert cond is not None  # check_condition refuses an absent condition
        if cond.value is not None and np.asarray(cond.value).dtype != object:
            taken = bool(np.asarray(cond.value).reshape(-1)[0])
            self.inline(stage, op, info, "then_branch" if taken else "else_branch")
            return
        # An extent condition (`eq(floordiv(L - 3, 2) + 1, 1)`, torch's `squeeze` of a maybe-1 axis)
        # keeps the then branch as it was, in case the branches give an output two ranks.
        extent = owed_extent_condition(cond)
        pristine = op.subgraph("then_branch").clone() if extent is not None else None
        then, other = (stage.branch(op, key, info) for key in ("then_branch", "else_branch"))
        apart = [a.rank != b.rank for a, b in zip(then, other, strict=False)]
        if pristine is not None and extent is not None and any(apart) and owed.current().computable(extent):
            self.follow_then(stage, op, info, pristine, extent)
            return
        if pristine is not None:
            pristine.erase()  # the copy's ops read outer values: drop those uses
        outputs = self.merge(info, op.output_names, then, other, chosen_by(op))
        stage.settle_results(op, info, outputs)

    def follow_then(self, stage: Stage0Walk, op: NodeOp, info: NodeInfo, pristine: Region, condition: Poly) -> None:
        """Branches giving an output two ranks, chosen by a condition on extents the run computes before
        any kernel: the module follows the then branch, and the inputs owe the condition (a chunk of
        another length is a ShapeError naming the input, never the other branch's rank).  What reads the
        output needs one rank at build time; the then branch is the case a `squeeze` of an axis that
        may be 1 was written for."""
        region = op.subgraph("then_branch")
        checked = region.block
        fresh = pristine.detach_block(pristine.block)
        region.insert_block_before(fresh, checked)
        region.detach_block(checked)
        checked.erase(safe_erase=False)
        pristine.erase()
        owed.current().owe_equal(Poly.const(1), condition, info, "the If follows its then branch")
        self.inline(stage, op, info, "then_branch")

    def inline(self, stage: Stage0Walk, op: NodeOp, info: NodeInfo, key: str) -> None:
        """Put the nodes of branch `key` in the If's place, reading what the If's outputs read, and
        run stage 0 over them as nodes of the graph around it (what they owe is owed there)."""
        from xdsl.rewriter import InsertPoint, Rewriter

        from loam.dialects.graph import ReturnOp

        region = op.subgraph(key)
        block = region.block
        ret = block.last_op
        assert isinstance(ret, ReturnOp)
        if len(ret.values) != len(op.outs):
            raise info.fail(f"the {key} returns {len(ret.values)} values; the node names {len(op.outs)} outputs")
        for result, value in zip(op.outs, ret.values, strict=True):
            result.replace_all_uses_with(value)
        Rewriter.erase_op(ret)
        stage.run_ops(block)  # folds replace the returned values' uses, which the If's readers are now
        for inner in list(block.ops)[1:]:  # past the branch's graph.subgraph_info
            inner.detach()
            Rewriter.insert_op(inner, InsertPoint.before(op))
        Rewriter.erase_op(op)

    def node_axes(
        self, walk: AxesWalk, op: NodeOp, info: NodeInfo, outputs: Sequence[Facts]
    ) -> list[Sequence[Axis | None]]:
        """Each branch walked with the rules that reach its graph; the outputs take what both give
        (`merge_axes`).  An axis both give one length under two names is one axis where the walk can
        make it one (the drafter's variables); else the output's layout names it."""
        then, other = (walk.branch_axes(op, key) for key in ("then_branch", "else_branch"))
        named: list[Sequence[Axis | None]] = []
        for name, t, e, facts in zip(op.output_names, then, other, outputs, strict=True):
            axes = merge_axes(info, name, t, e, facts)
            for i, (a, b) in enumerate(zip(t, e, strict=True)):
                apart = facts.shape[i] == result_length(name, i)
                if axes[i] is None and not apart and not a.parts and not b.parts:
                    axes[i] = walk.one_axis(a, b)
            named.append(axes)
        return named

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        """One `kernel.if` over the condition, a region per branch."""
        from loam.dialects.kernel import IfOp

        then, other = ctx.region("then_branch"), ctx.region("else_branch")
        cond = operands[0]
        assert cond is not None, "stage 0 refuses an If without its condition"
        return list(ctx.emit(IfOp(cond, ctx.result_types, node.name, then, other)).results)


def owed_extent_condition(cond: Facts) -> Poly | None:
    """The condition as a polynomial (1 true, 0 false), where stage 0 knows it as one over the extents a
    window or a division leaves (`eq(floordiv(L - 4, 4) + 1, 1)`), which many inputs satisfy.  One
    comparing an input's own symbol with a number (`eq(4, N)`) is not: `--dims` says that better."""
    if cond.value is None or np.asarray(cond.value).dtype != object:
        return None
    p = np.asarray(cond.value).reshape(-1)[0]
    if not isinstance(p, Poly) or p.is_const or not reads_arithmetic(p):
        return None
    return p


def reads_arithmetic(p: Poly) -> bool:
    """Whether `p` reads a derived symbol other than a comparison or a choice (a division, a min)."""
    for name in p.symbols:
        call = derived_call(name)
        if call is None:
            continue
        if call.function not in ("eq", "lt", "select") or any(reads_arithmetic(a) for a in call.args):
            return True
    return False


def chosen_by(op: NodeOp) -> str:
    """What decides the condition of If `op`, as its refusal says it: the graph inputs whose values it is
    computed from (which the `values` option can fix) and the extents it reads (which `dims` can fix)."""
    by_value, extents_of, symbols = condition_inputs(op.args[0])
    said: list[str] = []
    if by_value:
        names = ", ".join(f"'{n}'" for n in by_value)
        fix = " ".join(f"--value {n}=..." for n in by_value)
        said.append(f"it is computed from graph input {names}: fix it with {fix} (or [values])")
    if symbols:
        fix = " ".join(f"--dims {s}=..." for s in symbols)
        said.append(f"it reads the extents {', '.join(symbols)}: fix them with {fix} (or [dims])")
    elif extents_of:
        names = ", ".join(f"'{n}'" for n in extents_of)
        said.append(f"it reads the extents of graph input {names}: fix them with --dims (or [dims])")
    if not said:
        said.append("it is computed from no graph input")
    return "; " + "; ".join(said)


def condition_inputs(value: SSAValue) -> tuple[list[str], list[str], list[str]]:
    """What `value` is computed from: the graph inputs whose values it reads, those only whose extents it
    reads (through Shape or Size), and the extent symbols of the values stage 0 knows as polynomials
    (a Shape it folded), each in the order met."""
    from xdsl.ir import BlockArgument

    from loam.dialects.graph import GraphOp, NodeOp
    from loam.dialects.shape_poly import ValuesOp

    by_value: dict[str, None] = {}
    by_extent: dict[str, None] = {}
    symbols: dict[str, None] = {}
    seen: set[SSAValue] = set()
    todo: list[tuple[SSAValue, bool]] = [(value, True)]
    while todo:
        v, values = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, BlockArgument):
            graph = v.block.parent_op()
            if isinstance(graph, GraphOp) and v.index < len(graph.input_names.data):
                (by_value if values else by_extent)[graph.input_names.data[v.index].data] = None
            continue
        owner = v.owner
        if isinstance(owner, ValuesOp):
            symbols.update(dict.fromkeys(s for p in owner.polys for s in input_symbols(p)))
        elif isinstance(owner, NodeOp):
            reads_values = values and owner.op_type not in ("Shape", "Size")
            todo.extend((a, reads_values) for a in reversed(owner.args))
    return list(by_value), [n for n in by_extent if n not in by_value], list(symbols)


def input_symbols(p: Poly) -> list[str]:
    """The symbols of the graph's declared extents `p` reads, through derived symbols (`eq(4, N)` reads N);
    a length only the run knows (`y[0]`) is none of them."""
    found: list[str] = []
    for name in sorted(p.symbols):
        call = derived_call(name)
        if call is not None:
            found += [s for a in call.args for s in input_symbols(a) if s not in found]
        elif "[" not in name and name not in found:
            found.append(name)
    return found


def merge_axes(
    node: NodeInfo, name: str, then: tuple[Axis, ...], other: tuple[Axis, ...], facts: Facts
) -> list[Axis | None]:
    """Axes of output `name`: a name both branches give, else None (the layout names it)."""
    from loam.dialects.tensor_axes import Axis as AxisType

    out: list[Axis | None] = []
    for a, b, extent in zip(then, other, facts.shape, strict=True):
        out.append(AxisType(a.name, extent, a.parts) if a.name == b.name and a.parts == b.parts else None)
    return out


class LoopRule(OpRule):
    """ONNX Loop (opset 11-21): a body run while the trip count and the condition allow.

    Inputs: the max trip count M (optional, one i64), the condition (optional, one bool), then the
    initial loop-carried values.  The body takes the iteration number, the condition and the carried
    values, and returns the condition, the carried values and the scan outputs; it may read values
    of the enclosing scope.  The node's outputs are the final carried values, then each scan output
    stacked along a new first axis, whose length (the iterations run) only the run knows.
    """

    op_types = ("Loop",)
    kernels: tuple[str, ...] = ("kernel.loop",)
    attributes = frozenset({"body"})
    first_opset = 11
    elem_types = ("f32", "f16", "bf16", "f64", "i64", "i32", "bool")
    limitations = (
        "loop-carried values and scan outputs are tensors (sequences and optionals are refused); a carried "
        "value keeps its extents across iterations (owed per iteration where the build cannot show it); a scan "
        "output's other extents must be known outside the body"
    )

    def check_control(self, node: NodeInfo, trip: Facts | None, cond: Facts | None) -> None:
        """The trip count, where given, is one i64; the condition, where given, one bool."""
        for what, facts, elem in (("the max trip count M", trip, "i64"), ("the condition", cond, "bool")):
            if facts is None:
                continue
            if facts.elem.name != elem:
                raise node.fail(f"{what} has element type {facts.elem.name}; ONNX needs {elem}")
            if poly_count(facts.shape) != Poly.const(1):
                raise node.fail(f"{what} has extents [{', '.join(map(str, facts.shape))}]; Loop needs one element")

    def carried_in(self, node: NodeInfo, name: str, facts: Facts) -> Facts:
        """What the body knows of a carried value: its element type and extents, never its value."""
        if facts.elem.name not in self.elem_types:
            raise node.unsupported(
                f"loop-carried value '{name}' has element type {facts.elem.name}; Loam loops over "
                f"{', '.join(self.elem_types)}"
            )
        return Facts(facts.elem, facts.shape)

    def check_returned(self, node: NodeInfo, carried: int, returned: Sequence[Facts]) -> None:
        """The body returns the condition, the carried values and the scan outputs."""
        if len(returned) < 1 + carried:
            raise node.fail(f"the body returns {len(returned)} values; Loop needs the condition and {carried} carried")
        cond = returned[0]
        if cond.elem.name != "bool" or poly_count(cond.shape) != Poly.const(1):
            raise node.fail(
                f"the body's condition output is {cond.elem.name} [{', '.join(map(str, cond.shape))}]; Loop "
                "needs one bool"
            )

    def scan_output(
        self, node: NodeInfo, index: int, name: str, facts: Facts, outer_knows: Callable[[Poly], bool]
    ) -> Facts:
        """Scan output `name` (node output `index`): the body's value stacked along a new first axis as
        long as the iterations run, which only the run knows."""
        if facts.elem.name not in self.elem_types:
            raise node.unsupported(
                f"scan output '{name}' has element type {facts.elem.name}; Loam loops over {', '.join(self.elem_types)}"
            )
        for axis, extent in enumerate(facts.shape):
            if not outer_knows(extent):
                raise node.unsupported(
                    f"scan output '{name}' axis {axis + 1} has extent {extent}, which only an iteration knows; "
                    "Loam stacks scan outputs whose other extents are known before the loop"
                )
        return Facts(facts.elem, (node.result_length(index, 0), *facts.shape))

    def stage0(self, stage: Stage0Walk, op: NodeOp, info: NodeInfo) -> None:
        """Check the body once, in a copy of the scope around it, with what every iteration knows.

        The body's arguments are the iteration number, the condition and the carried values (their
        extents, never their values: those change).  A carried value the body returns at other
        extents owes their equality inside the body (checked each iteration).  The outputs: the
        carried values as they came in, then each scan output with a first axis only the run knows.
        Nothing of a Loop folds.
        """
        from loam.core import owed
        from loam.core.dtypes import by_name
        from loam.dialects.graph import (
            MapType,
            OptType,
            ReturnOp,
            SeqType,
            SparseTensorType,
            SubgraphInfoOp,
            TensorType,
        )

        args = stage.inputs(op)
        if len(args) < 2:
            raise info.fail(f"has {len(args)} inputs; Loop needs M and cond (either may be empty)")
        self.check_control(info, args[0], args[1])
        initial = args[2:]
        block = op.subgraph("body").block
        header = block.first_op
        if not isinstance(header, SubgraphInfoOp):
            raise AssertionError(f"{info.where()}: body has no graph.subgraph_info")
        body_name = header.graph_name.data
        names = [s.data for s in header.input_names.data]
        if len(block.args) != 2 + len(initial):
            raise info.fail(
                f"the body '{body_name}' takes {len(block.args)} inputs; Loop gives it the iteration number, "
                f"the condition and {len(initial)} carried values"
            )
        carried = len(initial)
        scans = len(op.outs) - carried
        if scans < 0:
            raise info.fail(f"names {len(op.outs)} outputs for {carried} carried values")
        body = stage.nested(body_name, f"{info.where()}: body '{body_name}' ")
        given = [Facts(by_name("i64"), ()), Facts(by_name("bool"), ())]
        for k, (arg, name) in enumerate(zip(list(block.args), names, strict=True)):
            declared = arg.type
            if isinstance(declared, SeqType | OptType | MapType | SparseTensorType):
                raise info.unsupported(f"body input '{name}' is a {_kind(declared)}; Loam loops over tensors only")
            if k < 2:
                facts = given[k]
            else:
                init = initial[k - 2]
                if init is None:
                    raise info.fail(f"loop-carried value {k - 2} is absent")
                facts = self.carried_in(info, name, init)
            if isinstance(declared, TensorType) and declared.elem.name not in ("undefined", facts.elem.name):
                raise info.fail(
                    f"body input '{name}' is declared {declared.elem.name}; Loop gives it {facts.elem.name}"
                )
            body.settle(arg, facts)
        with owed.scope(body.scope):
            body.run_ops(block)
            ret = block.last_op
            assert isinstance(ret, ReturnOp)
            returned = [body.facts[v] for v in ret.values]
            if len(returned) != 1 + carried + scans:
                raise info.fail(
                    f"the body returns {len(returned)} values; the node's {len(op.outs)} outputs need "
                    f"{1 + len(op.outs)} (the condition first)"
                )
            self.check_returned(info, carried, returned)
            body_in = [body.facts[a] for a in block.args[2:]]
            for name, given_in, got in zip(names[2:], body_in, returned[1 : 1 + carried], strict=True):
                if got.elem != given_in.elem or got.rank != given_in.rank:
                    raise info.fail(
                        f"loop-carried value '{name}' enters the body as {given_in.elem.name} of rank "
                        f"{given_in.rank} and leaves it as {got.elem.name} of rank {got.rank}"
                    )
                for axis, (a, b) in enumerate(zip(given_in.shape, got.shape, strict=True)):
                    owed.current().owe_equal(b, a, info, f"loop-carried value '{name}' axis {axis} keeps its extent")
        body.close_region(block, header)
        # A length the body gives a scan output that is owed equal to an extent known outside the
        # loop (a carried value's) is that extent.
        outer = stage.scope
        known: dict[str, Poly] = {}
        for o in body.scope.owed:
            if not o.equal:
                continue
            for x, y in ((o.lhs, o.rhs), (o.rhs, o.lhs)):
                symbol = x.lone_symbol
                if symbol is not None and x == Poly.symbol(symbol) and outer.computable(y) and not outer.computable(x):
                    known.setdefault(symbol, y)

        def outer_form(p: Poly) -> Poly:
            for symbol, value in known.items():
                p = p.substitute(symbol, value)
            return p

        outputs = [Facts(f.elem, f.shape) for f in initial if f is not None]
        for k, facts in enumerate(returned[1 + carried :]):
            index = carried + k
            shape = tuple(outer_form(e) for e in facts.shape)
            outputs.append(
                self.scan_output(info, index, op.output_names[index], Facts(facts.elem, shape), outer.computable)
            )
        stage.settle_results(op, info, outputs)

    def node_axes(
        self, walk: AxesWalk, op: NodeOp, info: NodeInfo, outputs: Sequence[Facts]
    ) -> list[Sequence[Axis | None]]:
        """The body walked with the rules that reach its graph, each carried value entering it under the
        axes of its initial value.  The final carried values keep those axes; a scan output keeps its
        body value's axes behind a first axis the layout names (the iterations)."""
        from loam.dialects.tensor_axes import Axis as AxisType

        carried = len(op.args) - 2
        returned = walk.body_axes(op, "body", [None, None, *op.args[2:]])
        inputs = walk.input_axes(op)
        named: list[Sequence[Axis | None]] = []
        for k, facts in enumerate(outputs):
            source = inputs[2 + k] if k < carried else (None, *returned[1 + k])
            assert source is not None, "stage 0 refuses an absent loop-carried value"
            named.append(
                [None if a is None else AxisType(a.name, e, a.parts) for a, e in zip(source, facts.shape, strict=True)]
            )
        return named

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        """One `kernel.loop` over the trip count and the condition (either may be absent) and the carried
        values, its region the body."""
        from loam.dialects.kernel import LoopOp

        body = ctx.region("body")
        trip, cond, *initial = operands
        carried = [v for v in initial if v is not None]
        assert len(carried) == len(initial), "stage 0 refuses an absent loop-carried value"
        return list(ctx.emit(LoopOp(trip, cond, carried, ctx.result_types, node.name, body)).results)


def _kind(t: object) -> str:
    """How a message names a non-tensor ONNX type."""
    from loam.dialects.graph import MapType, OptType, SeqType

    if isinstance(t, SeqType):
        return "sequence"
    if isinstance(t, OptType):
        return "optional"
    if isinstance(t, MapType):
        return "map"
    return "sparse tensor"


def poly_count(shape: Sequence[Poly]) -> Poly:
    """The element count of `shape`."""
    count = Poly.const(1)
    for d in shape:
        count = count * d
    return count


RULES: tuple[OpRule, ...] = (IfRule(), LoopRule())
