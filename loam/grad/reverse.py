"""Reverse mode over kernel ops: the adjoint of every value a gradient reaches, emitted as more kernel ops.

`Reverse` is the `Backward` the grad clauses (`loam.grad.clauses`) emit into.  Two callers use it: the
`differentiate` pass (the program also returns its weights' gradients, `passes/differentiate.py`) and ONNX's
Gradient node (`loam.ops.training`), which asks for the gradient of one of its graph's values with respect to
others at the point where it sits.  Each gives the values gradients are asked for (`sources`), where the new
ops go (`emit`) and the seeds; `run` visits the ops in reverse, and the contributions to one value are summed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from loam.core.errors import UnsupportedError
from loam.core.poly import Poly
from loam.dialects.expr import Expr
from loam.dialects.kernel import ConstantOp, ReduceOp, RegroupOp, WeightOp, ZipOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.grad.base import is_float, listed, node_of, type_of, zeros_like
from loam.grad.clauses import clause_for, reads_every_result
from loam.grad.control import captured


class Reverse:
    """The adjoints of the values that depend on `sources`, from seeds sent to later values."""

    def __init__(
        self,
        sources: Iterable[SSAValue],
        ops: Sequence[Operation],
        emit: Callable[[Operation], object],
        *,
        owns_forward: bool = False,
    ) -> None:
        self.ops = ops
        self._emit = emit
        # Whether a clause may replace a forward op by one that also keeps what its backward reads (the
        # differentiate pass's program); a Gradient node's lowering still maps ONNX values to the old ops.
        self.owns_forward = owns_forward
        self.emitted: list[Operation] = []
        self.adjoint: dict[SSAValue, SSAValue] = {}
        # The values a gradient asked for flows through: those the sources reach going forward.  Only
        # these get an adjoint (an input's or another weight's is never computed).
        self.needed: set[SSAValue] = set(sources)
        for op in ops:
            if any(v in self.needed for v in reads(op)):
                self.needed.update(op.results)
        self.zips: dict[tuple[object, ...], SSAValue] = {}  # one zip per expression over the same values

    # -- what the clauses call ------------------------------------------------------------------

    def emit(self, op: Operation) -> SSAValue:
        self._emit(op)
        self.emitted.append(op)
        return op.results[0]

    def nested(
        self, sources: Sequence[SSAValue], ops: Sequence[Operation], emit: Callable[[Operation], object]
    ) -> Reverse:
        """A walk of its own over `ops` (a clause's unrolled or re-run forward), emitting with `emit`."""
        return Reverse(sources, ops, emit)

    def in_forward(self, op: Operation) -> Callable[[Operation], object] | None:
        """Where a clause may compute in the forward what its backward reads, in place of forward op `op` (a
        kernel that also returns its statistics or indices, the recurrent kernels' and a Loop's steps
        unrolled): an emitter putting ops before `op`, then `stand_for`; None where the forward is not the
        walk's to change (a Gradient node's lowering still maps ONNX values to the old ops), and the clause
        computes them in the backward."""
        if not self.owns_forward:
            return None
        return lambda new: Rewriter.insert_op(new, InsertPoint.before(op))

    def stand_for(self, op: Operation, values: Sequence[SSAValue]) -> None:
        """`values` (put in the forward by `in_forward`) stand for forward op `op`'s results; `op` goes."""
        Rewriter().replace_op(op, [], list(values))

    def blockers(self, source: SSAValue) -> list[str]:
        """Where the gradient of `source` stops: the ops its values reach that give no float (a comparison, an
        ArgMax, a cast to an integer), named `kernel.X 'node'` in program order."""
        reached = {source}
        found: list[str] = []
        for op in self.ops:
            if any(v in reached for v in reads(op)):
                floats = [r for r in op.results if is_float(r)]
                reached.update(floats)
                if not floats:
                    found.append(f"{op.name} '{node_of(op)}'")
        return found

    def unreached(self, source: SSAValue, destination: str) -> str:
        """Why no gradient reaches `source` from `destination` ("the outputs", "y"): the ops that stop it."""
        blockers = self.blockers(source)
        if not blockers:
            return f"nothing computed from it reaches {destination}"
        return f"every path from it to {destination} passes {listed(blockers)}, which has no derivative"

    def saved(self) -> list[SSAValue]:
        """The forward's activations the backward reads (kept from the forward until the backward runs):
        results of forward ops other than weights and constants that an emitted op reads."""
        emitted = set(map(id, self.emitted))
        found: dict[SSAValue, None] = {}
        for op in self.emitted:
            for v in op.operands:
                owner = v.owner
                if (
                    isinstance(owner, Operation)
                    and id(owner) not in emitted
                    and not isinstance(owner, WeightOp | ConstantOp)
                ):
                    found[v] = None
        return list(found)

    def zip(self, inputs: Sequence[SSAValue], expr: Expr, result: AxesTensorType, node: str) -> SSAValue:
        """A zip computing `expr` over the `inputs` it reads (the gradient itself where that is all it is),
        made once for the same expression over the same values."""
        read = sorted(expr.operand_indices)
        if expr.steps == (expr.steps[0],) and len(read) == 1 and type_of(inputs[read[0]]) == result:
            return inputs[read[0]]  # `operand k`: the value as it is
        kept = [inputs[i] for i in read]
        expr = expr.remap_operands({old: new for new, old in enumerate(read)})
        key = (expr, tuple(id(v) for v in kept), result)
        if key not in self.zips:
            self.zips[key] = self.emit(ZipOp(kept, expr, result, node))
        return self.zips[key]

    def send(self, value: SSAValue, grad: SSAValue) -> None:
        """Add `grad` to `value`'s adjoint (a value no asked-for gradient flows through takes none)."""
        if not is_float(value) or value not in self.needed:
            return
        found = self.adjoint.get(value)
        if found is None:
            self.adjoint[value] = grad
            return
        add = Expr.operand(0) + Expr.operand(1)
        self.adjoint[value] = self.zip([found, grad], add, type_of(value), f"{value_node(value)}.grad_sum")

    def unbroadcast(self, grad: SSAValue, target: AxesTensorType, node: str) -> SSAValue:
        """`grad` (a broadcast result's extents) summed to `target`'s extents (an operand's)."""
        have = type_of(grad)
        if have.shape == target.shape:
            return grad
        # Summed: the axes the operand lacks and those it has at extent 1 where the result has more.  An
        # extent spelled otherwise (min(128, S) against S) is one the build owes equal, not a broadcast.
        offset = have.rank - target.rank
        one = Poly.const(1)
        axes = [a for a in range(have.rank) if a < offset or (target.shape[a - offset] == one != have.shape[a])]
        kept = [ax for a, ax in enumerate(have.axes) if a not in axes]
        summed = self.emit(
            ReduceOp([grad], [AxesTensorType(have.elem, kept)], f"{node}.grad_unbroadcast",
                     kind="sum", axes=tuple(axes), keepdims=0)
        )  # fmt: skip
        return summed if type_of(summed) == target else self.emit(RegroupOp(summed, target, f"{node}.grad_unbroadcast"))

    # -- the walk -------------------------------------------------------------------------------

    def run(self) -> None:
        """Send each op's adjoint to its operands, last op first (seeds are `send` before)."""
        for op in reversed(self.ops):
            if any(r in self.adjoint for r in op.results):
                self.clause(op)

    def clause(self, op: Operation) -> None:
        if isinstance(op, (WeightOp, ConstantOp)) or not any(is_float(v) for v in reads(op)):
            return  # a gradient stops here: nothing it could flow into is a float
        result = op.results[0]
        g = self.adjoint.get(result)
        if not reads_every_result(op) and any(r in self.adjoint for r in op.results[1:]):
            # The clause reads its first result's gradient alone: a later result's would be lost.
            raise UnsupportedError(
                f"{op.name} '{node_of(op)}': a gradient reaches its later results (a normalization's statistics, "
                "say), and its grad clause reads the first result's only"
            )
        if g is None:
            g = zeros_like(self, result, value_node(result))
        clause_for(op)(self, op, g, value_node(result))


def reads(op: Operation) -> list[SSAValue]:
    """What `op` computes from: its operands, and for an If or a Loop, the enclosing values its blocks read."""
    return [*op.operands, *captured(op)] if op.regions else list(op.operands)


def value_node(value: SSAValue) -> str:
    """The node that computes `value` (a weight's name, or `input`), for the names of the ops it gets."""
    owner = value.owner
    node = owner.properties.get("node") if isinstance(owner, Operation) else None
    if isinstance(node, StringAttr):
        return node.data
    return owner.weight_name.data if isinstance(owner, WeightOp) else "input"
