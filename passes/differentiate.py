"""differentiate: the program also computes the gradients of its weights (reverse mode, in kernel ops).

Why: a model a user fine-tunes where it runs needs the vector-Jacobian product of its forward; written
as kernel ops, it is compiled by the same passes (the fuse pass fuses the backward's elementwise
chains too) and printed by either backend with the kernels it already has.

After `lower-to-kernel`, for a `kernel.program` with outputs O and weights W: the program gains one
input per float output, `grad.O` (the upstream gradient, O's type), and one output per weight asked
for, `grad.W` (W's type), after its own outputs.  The ops are visited in reverse; each op a gradient
reaches sends its operands the grad clause of its kind (`loam/grad/clauses.py`: elementwise
steps, products, layout, casts, softmax, sums and means, convolutions, max pooling), and the
contributions to one value are summed.

An op a gradient reaches that has no grad clause yet (an attention kernel, a gather) stops the pass
naming the op and its node, as does a weight asked for that no gradient reaches (every path from it
to the outputs passes an integer, a comparison or a constant).  `of` names the weights (default: every
float weight).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from loam.dialects.expr import Expr
from loam.dialects.kernel import ConstantOp, ProgramOp, ReduceOp, RegroupOp, ReturnOp, WeightOp, ZipOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.errors import UnsupportedError
from loam.grad.clauses import clause_for, is_float, type_of

GRAD = "grad."
"""The prefix of an upstream gradient's input name and of a weight gradient's output name."""


@dataclass(frozen=True)
class DifferentiatePass(ModulePass):
    """The program also computes the gradients of its weights, `grad.W`, from upstream gradients `grad.O`."""

    name = "differentiate"
    of: tuple[str, ...] = field(default=())

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in [p for p in op.walk() if isinstance(p, ProgramOp)]:
            _Differentiate(program, self.of).run()


class _Differentiate:
    def __init__(self, program: ProgramOp, of: Sequence[str]) -> None:
        self.program = program
        self.block = program.block
        self.ret = program.return_op
        self.rewriter = Rewriter()
        self.adjoint: dict[SSAValue, SSAValue] = {}
        weights = [w for w in self.block.ops if isinstance(w, WeightOp) and is_float(w.result)]
        names = [w.weight_name.data for w in weights]
        unknown = [n for n in of if n not in names]
        if unknown:
            raise UnsupportedError(
                f"grad_of names {', '.join(repr(n) for n in unknown)}, which the program reads as no float weight "
                f"(its float weights: {', '.join(names[:8])}{', ...' if len(names) > 8 else ''})"
            )
        self.weights = [w for w in weights if not of or w.weight_name.data in of]
        # The values a gradient asked for flows through: those the weights reach going forward.  Only
        # these get a gradient (an input's or another weight's is never computed).
        self.needed: set[SSAValue] = {w.result for w in self.weights}
        for op in self.block.ops:
            if any(v in self.needed for v in op.operands):
                self.needed.update(op.results)
        self.zips: dict[tuple[object, ...], SSAValue] = {}  # one zip per expression over the same values

    # -- emitting ----------------------------------------------------------------------------------

    def emit(self, op: Operation) -> SSAValue:
        self.rewriter.insert_op(op, InsertPoint.before(self.ret))
        return op.results[0]

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
        self.adjoint[value] = self.zip([found, grad], add, type_of(value), f"{_node(value)}.grad_sum")

    def unbroadcast(self, grad: SSAValue, target: AxesTensorType, node: str) -> SSAValue:
        """`grad` (a broadcast result's extents) summed to `target`'s extents (an operand's)."""
        have = type_of(grad)
        if have.shape == target.shape:
            return grad
        offset = have.rank - target.rank
        axes = [a for a in range(have.rank) if a < offset or (target.shape[a - offset] != have.shape[a])]
        kept = [ax for a, ax in enumerate(have.axes) if a not in axes]
        summed = self.emit(
            ReduceOp([grad], [AxesTensorType(have.elem, kept)], f"{node}.grad_unbroadcast",
                     kind="sum", axes=tuple(axes), keepdims=0)
        )  # fmt: skip
        return summed if type_of(summed) == target else self.emit(RegroupOp(summed, target, f"{node}.grad_unbroadcast"))

    # -- the walk ----------------------------------------------------------------------------------

    def run(self) -> None:
        outputs = list(self.ret.outputs)
        names = [n.data for n in self.ret.output_names.data]
        input_names = [n.data for n in self.program.input_names.data]
        for value, name in zip(outputs, names, strict=True):
            if is_float(value):
                arg = self.block.insert_arg(value.type, len(self.block.args))
                input_names.append(GRAD + name)
                self.send(value, arg)
        ops = [op for op in self.block.ops if op is not self.ret]
        for op in reversed(ops):
            if not any(r in self.adjoint for r in op.results):
                continue
            self.clause(op)
        grads: list[SSAValue] = []
        for weight in self.weights:
            found = self.adjoint.get(weight.result)
            if found is None:
                raise UnsupportedError(
                    f"no gradient reaches weight '{weight.weight_name.data}' from the outputs: every path from it "
                    "passes an integer, a comparison or a step with no derivative"
                )
            grads.append(found)
        new_ret = ReturnOp([*outputs, *grads], [*names, *(GRAD + w.weight_name.data for w in self.weights)])
        self.rewriter.replace_op(self.ret, new_ret)
        self.program.properties["input_names"] = ArrayAttr([StringAttr(n) for n in input_names])

    def clause(self, op: Operation) -> None:
        if isinstance(op, (WeightOp, ConstantOp)) or not any(is_float(v) for v in op.operands):
            return  # a gradient stops here: nothing it could flow into is a float
        result = op.results[0]
        if result not in self.adjoint:
            raise UnsupportedError(f"{op.name} '{_node(result)}': a gradient reaches only its second result")
        clause_for(op)(self, op, self.adjoint[result], _node(result))


def _node(value: SSAValue) -> str:
    owner = value.owner
    node = owner.properties.get("node") if isinstance(owner, Operation) else None
    if isinstance(node, StringAttr):
        return node.data
    if isinstance(owner, WeightOp):
        return owner.weight_name.data
    return "input"
