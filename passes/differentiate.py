"""differentiate: the program also computes the gradients of its weights (reverse mode, in kernel ops).

Why: a model a user fine-tunes where it runs needs the vector-Jacobian product of its forward; written
as kernel ops, it is compiled by the same passes (the fuse pass fuses the backward's elementwise
chains too) and printed by either backend with the kernels it already has.

After `lower-to-kernel`, for a `kernel.program` with outputs O and weights W: the program gains one
input per float output, `grad.O` (the upstream gradient, O's type), and one output per weight asked
for, `grad.W` (W's type), after its own outputs, then one per float input asked for, `grad.X`.  The
ops are visited in reverse; each op a gradient reaches sends its operands the grad clause of its kind
(`loam/grad/clauses.py`, walked by `loam.grad.reverse.Reverse`), and the contributions to one value
are summed.

The pass leaves a build note on the forward's activations the backward reads (kept from the forward
until the backward runs): how many, their bytes, the largest.

An op a gradient reaches that has no grad clause yet (an attention kernel, say) stops the pass
naming the op and its node, as does a weight or input `of` names that no gradient reaches (every path
from it to the outputs passes an integer, a comparison or a constant).  `of` names the weights and
inputs; by default, every float weight a gradient reaches (those it does not, a batch norm's running
statistics, are named in a build note; none reached stops the pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from loam.core.errors import UnsupportedError
from loam.core.poly import Poly
from loam.dialects.build_contract import GRAD_PREFIX
from loam.dialects.kernel import ProgramOp, ReturnOp, WeightOp
from loam.dialects.kernel.base import element_count
from loam.dialects.tensor_axes import AxesTensorType
from loam.grad.base import is_float, listed
from loam.grad.reverse import Reverse, value_node
from loam.passes.notes import add_notes


@dataclass(frozen=True)
class DifferentiatePass(ModulePass):
    """The program also computes the gradients of its weights, `grad.W`, from upstream gradients `grad.O`."""

    name = "differentiate"
    of: tuple[str, ...] = field(default=())

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in [p for p in op.walk() if isinstance(p, ProgramOp)]:
            differentiate = _Differentiate(program, self.of)
            saved = differentiate.run()
            add_notes(op, [saved_note(saved), *differentiate.notes])


def saved_note(saved: Sequence[SSAValue]) -> str:
    """The build note on the activations the backward reads: how many, their bytes, the largest."""
    sizes = []
    for value in saved:
        t = value.type
        assert isinstance(t, AxesTensorType)
        sizes.append((Poly.lift(element_count(t.shape)) * (t.elem.bits // 8), value))
    total = sum((b for b, _ in sizes), Poly.const(0))
    # Ordered at 64 for every symbolic extent: a representative size, not a bound.
    largest = sorted(sizes, key=lambda s: -s[0].evaluate(dict.fromkeys(s[0].symbols, 64)))[:3]
    names = ", ".join(f"'{value_node(v)}' ({b} bytes)" for b, v in largest)
    return (
        f"differentiate: the backward reads {len(saved)} of the forward's activations, kept until it runs "
        f"(before fusion): {total} bytes" + (f"; the largest: {names}" if names else "")
    )


class _Differentiate:
    def __init__(self, program: ProgramOp, of: Sequence[str]) -> None:
        self.program = program
        self.block = program.block
        self.ret = program.return_op
        weights = [w for w in self.block.ops if isinstance(w, WeightOp) and is_float(w.result)]
        names = [w.weight_name.data for w in weights]
        input_names = [n.data for n in program.input_names.data]
        inputs = [(n, a) for n, a in zip(input_names, self.block.args, strict=True) if is_float(a)]
        unknown = [n for n in of if n not in names and n not in dict(inputs)]
        if unknown:
            raise UnsupportedError(
                f"grad_of names {', '.join(repr(n) for n in unknown)}, which the program reads as no float weight "
                f"or input (its float weights: {listed(names)}; its float inputs: {listed([n for n, _ in inputs])})"
            )
        # Asked for: the weights and inputs `of` names, or every float weight.
        self.sources: list[tuple[str, SSAValue]] = [
            (w.weight_name.data, w.result) for w in weights if not of or w.weight_name.data in of
        ]
        self.sources += [(n, a) for n, a in inputs if n in of]
        self.named = bool(of)
        self.notes: list[str] = []
        rewriter = Rewriter()
        ops = [op for op in self.block.ops if op is not self.ret]
        self.reverse = Reverse(
            [v for _, v in self.sources],
            ops,
            lambda op: rewriter.insert_op(op, InsertPoint.before(self.ret)),
            owns_forward=True,
        )

    def run(self) -> list[SSAValue]:
        """Differentiate; the forward's activations the backward reads."""
        names = [n.data for n in self.ret.output_names.data]
        input_names = [n.data for n in self.program.input_names.data]
        for value, name in zip(list(self.ret.outputs), names, strict=True):
            if is_float(value):
                arg = self.block.insert_arg(value.type, len(self.block.args))
                input_names.append(GRAD_PREFIX + name)
                self.reverse.send(value, arg)
        self.reverse.run()
        outputs = list(self.ret.outputs)  # read again: a clause may have put a forward op in another's place
        unreached = [(n, v) for n, v in self.sources if v not in self.reverse.adjoint]
        if unreached and (self.named or len(unreached) == len(self.sources)):
            name, value = unreached[0]
            kind = "weight" if isinstance(value.owner, WeightOp) else "input"
            why = self.reverse.unreached(value, "the outputs")
            raise UnsupportedError(f"no gradient reaches {kind} '{name}' from the outputs: {why}")
        if unreached:  # by default, the float weights no gradient reaches (a batch norm's running statistics)
            left, why = listed([repr(n) for n, _ in unreached]), self.reverse.unreached(unreached[0][1], "the outputs")
            self.notes.append(f"differentiate: no gradient reaches {len(unreached)} float weights, left out of "
                              f"Grads: {left} (the first: {why})")  # fmt: skip
            self.sources = [(n, v) for n, v in self.sources if v in self.reverse.adjoint]
        grads = [self.reverse.adjoint[v] for _, v in self.sources]
        new_ret = ReturnOp([*outputs, *grads], [*names, *(GRAD_PREFIX + n for n, _ in self.sources)])
        Rewriter().replace_op(self.ret, new_ret)
        self.program.properties["input_names"] = ArrayAttr([StringAttr(n) for n in input_names])
        return self.reverse.saved()
