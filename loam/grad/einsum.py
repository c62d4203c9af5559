"""The grad clause of `kernel.einsum`.

An einsum is linear in each operand: operand i's share is the einsum of g (under the output's letters) and the
other operands, onto operand i's letters,

    y = einsum("ab,bc->ac", A, B):   d A = einsum("ac,bc->ab", g, B),   d B = einsum("ac,ab->bc", g, A)

A letter of operand i that no other term holds (summed over in operand i alone) is absent from that einsum;
the share is the same along it, so it is broadcast there.  `...` stands for as many fresh letters as its
operand has axes there, aligned at the right as numpy aligns them; where an operand's `...` axis is 1 against
another's n (numpy's broadcast), its share is summed along it.  Refused: a letter repeated in one operand (a
diagonal).
"""

from __future__ import annotations

import string

from xdsl.ir import Operation, SSAValue

from loam.core.poly import Poly
from loam.dialects.expr import Expr
from loam.dialects.kernel import EinsumOp, RegroupOp, ZipOp
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, Clause, refuse, sum_kept, type_of

ONE = Poly.const(1)


def _terms(op: EinsumOp) -> tuple[list[str], str]:
    """The operands' letters and the output's, each `...` spelled as fresh letters aligned at the right."""
    text = str(op.param("equation")).replace(" ", "")
    inputs, output = text.split("->")
    terms = [*inputs.split(","), output]
    fresh = [c for c in string.ascii_letters if c not in text]
    ranks = [type_of(v).rank for v in op.inputs] + [type_of(op.outputs[0]).rank]
    spans = [rank - len(term.replace("...", "")) for term, rank in zip(terms, ranks, strict=True)]
    widest = max((s for term, s in zip(terms, spans, strict=True) if "..." in term), default=0)
    letters = fresh[:widest]
    spelled = [term.replace("...", "".join(letters[widest - s :])) for term, s in zip(terms, spans, strict=True)]
    return spelled[:-1], spelled[-1]


def _einsum(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, EinsumOp)
    inputs, output = _terms(op)
    for i, (term, x) in enumerate(zip(inputs, op.inputs, strict=True)):
        if x not in b.needed:
            continue
        if len(set(term)) < len(term):
            raise refuse(op, f"no grad clause for a letter repeated in operand {i}'s term '{term}' (a diagonal) yet")
        others = [(output, g), *((t, v) for k, (t, v) in enumerate(zip(inputs, op.inputs, strict=True)) if k != i)]
        kept = "".join(c for c in term if any(c in t for t, _ in others))
        t = type_of(x)
        own = dict(zip(term, t.axes, strict=True))
        # Each kept letter at the others' extent (an operand broadcast along it has 1 where another has more).
        spans = {c: [type_of(v).axes[t_.index(c)] for t_, v in others if c in t_] for c in kept}
        axes = [next((ax for ax in spans[c] if ax.extent != ONE), spans[c][0]) for c in kept]
        share = b.emit(EinsumOp([v for _, v in others], [AxesTensorType(t.elem, axes)], f"{node}.grad",
                                equation=f"{','.join(t_ for t_, _ in others)}->{kept}"))  # fmt: skip
        summed = [k for k, c in enumerate(kept) if own[c].extent == ONE != axes[k].extent]
        if summed:  # this operand broadcast along them: its share is their sum
            share = sum_kept(b, share, summed, node)
        if type_of(share) != t:  # letters summed in this operand alone, or broadcast by it: the same share there
            at = dict(zip(kept, type_of(share).axes, strict=True))
            units = [own[c] if c in at and at[c].extent == own[c].extent else Axis.named("Unit", 1) for c in term]
            unit = b.emit(RegroupOp(share, AxesTensorType(t.elem, units), f"{node}.grad"))
            share = b.emit(ZipOp([unit], Expr.operand(0), t, f"{node}.grad"))
        b.send(x, share)


CLAUSES: dict[type[Operation], Clause] = {EinsumOp: _einsum}
