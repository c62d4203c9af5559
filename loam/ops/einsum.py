"""Einsum: the equations numpy.einsum accepts, lowered to one `kernel.einsum` library kernel.

The equation is parsed here once (terms of letters, an optional `...`, an implicit output when
there is no `->`) to give the output's extents and axes: each letter is one axis, so every
occurrence of a letter must carry one name (`same_axis`), and the `...` axes broadcast as in
numpy.  The kernel receives the equation with its output spelled out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loam.core import owed
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, broadcast_axes, broadcast_shapes, same_axis
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.operands import emit_library, require_elem
from loam.ops.reduce import INTS
from loam.runtime.kernels.normalization import kernel_einsum

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

ELLIPSIS = "..."


@dataclass(frozen=True)
class Term:
    """One side of an equation: letters before and after an optional ellipsis."""

    head: str
    tail: str
    ellipsis: bool

    def split(self, rank: int) -> tuple[range, range, range]:
        """Positions of the head letters, the ellipsis axes and the tail letters in a rank-`rank` operand."""
        middle = rank - len(self.head) - len(self.tail)
        return (
            range(len(self.head)),
            range(len(self.head), len(self.head) + middle),
            range(len(self.head) + middle, rank),
        )

    @property
    def letters(self) -> str:
        return self.head + self.tail

    def __str__(self) -> str:
        return self.head + (ELLIPSIS if self.ellipsis else "") + self.tail


def _term(node: NodeInfo, text: str) -> Term:
    if text.count(ELLIPSIS) > 1 or text.replace(ELLIPSIS, "").count(".") > 0:
        raise node.fail(f"term '{text}' has a malformed ellipsis")
    head, sep, tail = text.partition(ELLIPSIS)
    for ch in head + tail:
        if not ch.isascii() or not ch.isalpha():
            raise node.fail(f"term '{text}' holds '{ch}', which is not a letter")
    return Term(head, tail, bool(sep))


@dataclass(frozen=True)
class Equation:
    inputs: tuple[Term, ...]
    output: Term

    def __str__(self) -> str:
        return ",".join(str(t) for t in self.inputs) + "->" + str(self.output)


def parse_equation(node: NodeInfo, text: str) -> Equation:
    """The equation with its output explicit: implicit outputs list the letters used once, sorted, after `...`."""
    text = "".join(text.split())
    lhs, arrow, rhs = text.partition("->")
    inputs = tuple(_term(node, t) for t in lhs.split(","))
    if arrow:
        output = _term(node, rhs)
        if output.ellipsis and not any(t.ellipsis for t in inputs):
            raise node.fail("the output has an ellipsis that no input has")
        used = "".join(t.letters for t in inputs)
        for ch in output.letters:
            if ch not in used:
                raise node.fail(f"output letter '{ch}' appears in no input")
        if len(set(output.letters)) != len(output.letters):
            raise node.fail(f"output '{output}' repeats a letter")
    else:
        letters = "".join(t.letters for t in inputs)
        once = "".join(sorted(ch for ch in set(letters) if letters.count(ch) == 1))
        output = Term("", once, any(t.ellipsis for t in inputs))
    return Equation(inputs, output)


class EinsumRule(OpRule):
    """ONNX Einsum (opset 12): numpy.einsum's meaning, implicit outputs and ellipses included."""

    op_types = ("Einsum",)
    kernels: tuple[str, ...] = ("kernel.einsum",)
    attributes = frozenset({"equation"})
    first_opset = 12
    elem_types = (*FLOATS, *INTS, "i8", "i16", "ui8")

    def equation(self, node: NodeInfo, count: int) -> Equation:
        text = node.attr("equation")
        if not isinstance(text, str) or not text:
            raise node.fail("needs an equation attribute")
        eq = parse_equation(node, text)
        if len(eq.inputs) != count:
            raise node.fail(f"equation '{text}' has {len(eq.inputs)} input terms, the node {count} inputs")
        return eq

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        if not inputs or any(f is None for f in inputs):
            raise node.fail("every input must be given")
        facts = [f for f in inputs if f is not None]
        for f in facts:
            require_elem(node, f, self.elem_types)
            if f.elem != facts[0].elem:
                raise node.fail(f"inputs have element types {facts[0].elem.name} and {f.elem.name}; ONNX needs one")
        eq = self.equation(node, len(facts))
        extents: dict[str, Poly] = {}
        ellipses: list[tuple[Poly, ...]] = []
        for i, (term, f) in enumerate(zip(eq.inputs, facts, strict=True)):
            head, middle, tail = term.split(f.rank)
            if len(middle) < 0 or (not term.ellipsis and len(middle) != 0) or f.rank < len(term.letters):
                raise node.fail(f"term '{term}' does not fit input {i} of rank {f.rank}")
            ellipses.append(tuple(f.shape[j] for j in middle))
            for ch, j in zip(term.letters, [*head, *tail], strict=True):
                seen = extents.setdefault(ch, f.shape[j])
                if seen.is_const and f.shape[j].is_const and seen != f.shape[j]:
                    raise node.fail(f"letter '{ch}' has extent {seen} and, in input {i}, {f.shape[j]}")
                # Two symbolic lengths under one letter are owed equal by the inputs.
                extents[ch] = owed.require_equal(seen, f.shape[j], node, f"letter '{ch}' of input {i}")
        batch = broadcast_shapes(node, ellipses) if eq.output.ellipsis else ()
        shape = (
            *(extents[ch] for ch in eq.output.head),
            *batch,
            *(extents[ch] for ch in eq.output.tail),
        )
        value = None
        if all(f.value is not None for f in facts):
            value = kernel_einsum(*[f.value for f in facts if f.value is not None], equation=str(eq))
        return [Facts(facts[0].elem, shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        eq = self.equation(node, len(inputs))
        by_letter: dict[str, Axis] = {}
        ellipses: list[tuple[Axis, ...]] = []
        for i, (term, axes) in enumerate(zip(eq.inputs, inputs, strict=True)):
            assert axes is not None
            head, middle, tail = term.split(len(axes))
            ellipses.append(tuple(axes[j] for j in middle))
            for ch, j in zip(term.letters, [*head, *tail], strict=True):
                first = by_letter.setdefault(ch, axes[j])
                if first is not axes[j]:
                    same_axis(node, first, axes[j], f"at letter '{ch}' of input {i}")
        batch = broadcast_axes(node, ellipses) if eq.output.ellipsis else ()
        return [(*(by_letter[ch] for ch in eq.output.head), *batch, *(by_letter[ch] for ch in eq.output.tail))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import EinsumOp

        present = [v for v in operands if v is not None]
        eq = self.equation(node, len(present))
        return emit_library(ctx, EinsumOp(present, ctx.result_types, node.name, equation=str(eq)))


RULES: tuple[OpRule, ...] = (EinsumRule(),)
