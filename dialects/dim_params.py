"""dim_param spellings: how a symbolic input extent reads, and where `forward` finds its symbols.

An exporter writes the extent of a decoder's attention mask as `past_sequence_length + 1`, so a
dim_param may spell arithmetic (the graph is ONNX as exporters write it): one whose words are names and
integers separated by `+`, `-` and `*`, with one space on each side of each operator, reads as that
polynomial, `*` binding first (`read_dim_param`).  Any other dim_param is one opaque name: `seq-len`,
`a+1`, `N`.

`forward` must find every symbol's value in its inputs before any kernel runs (`binding_plan`):
a symbol is bound from the first input axis that is the name alone; a name no input carries alone
is read back from the first input axis whose length is linear in it once the other names that
length reads are bound (`past + 1` gives past = length - 1, `2 * n` gives n = length / 2).  A
spelling over a name that no input axis yields this way is read as one opaque name after all, so
`batch * seq` on an input alone names one symbol "batch * seq".  That decision needs the spellings
of every input at once, which is why it is made here, on the graph's input types, before stage 0
(`spell_graph_inputs`), and not axis by axis.

A dim_param spelled like a derived symbol's definition (`min(a, 1)`) is refused: those names are
the shape arithmetic Loam derives (`loam.core.derived`), and an input symbol of the same name would be
taken for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loam.core.errors import ModelError
from loam.core.poly import DERIVED_FUNCTIONS, Poly, poly_product, poly_sum

if TYPE_CHECKING:
    from loam.dialects.graph import GraphOp

__all__ = ["Binding", "binding_plan", "read_dim_param", "read_spelling", "spell_graph_inputs", "spelled_shapes"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INTEGER = re.compile(r"[0-9]+")
_OPERATORS = ("+", "-", "*")
_RESERVED = re.compile(rf"\s*({'|'.join(map(re.escape, DERIVED_FUNCTIONS))})\s*\(")


def read_spelling(text: str) -> Poly | None:
    """The polynomial a spelled dim_param reads as, or None where `text` is no spelling (one name)."""
    words = text.split(" ")
    if len(words) < 3 or len(words) % 2 == 0:
        return None
    operands, operators = words[0::2], words[1::2]
    if not all(_NAME.fullmatch(w) or _INTEGER.fullmatch(w) for w in operands):
        return None
    if not all(op in _OPERATORS for op in operators):
        return None

    def word(w: str) -> Poly:
        return Poly.const(int(w)) if _INTEGER.fullmatch(w) else Poly.symbol(w)

    # `*` binds first: the spelling is a signed sum of products.
    terms: list[Poly] = []
    factors, sign = [word(operands[0])], 1
    for op, w in zip(operators, operands[1:], strict=True):
        if op == "*":
            factors.append(word(w))
            continue
        terms.append(sign * poly_product(factors))
        factors, sign = [word(w)], (1 if op == "+" else -1)
    terms.append(sign * poly_product(factors))
    return poly_sum(terms)


def read_dim_param(text: str) -> Poly:
    """The extent dim_param `text` names: the polynomial it spells, else one symbol of that name.

    Raises `ModelError` for an empty dim_param and one spelled like a derived symbol (`min(a, 1)`).
    """
    if not text:
        raise ModelError("a dim_param is empty; give the axis a name or a number")
    if (m := _RESERVED.match(text)) is not None:
        raise ModelError(
            f"dim_param '{text}' reads as Loam's derived extent {m.group(1)}(...); names of that form are "
            "reserved for the shape arithmetic the build derives, so rename the dim_param"
        )
    poly = read_spelling(text)
    return poly if poly is not None else Poly.symbol(text)


@dataclass(frozen=True)
class Binding:
    """Where `forward` finds symbol `symbol`: axis `axis` of input number `input`, whose length is
    `coefficient * symbol + rest` (1 and 0 for an axis that is the name alone)."""

    symbol: str
    input: int
    axis: int
    coefficient: Poly
    rest: Poly

    @property
    def alone(self) -> bool:
        return self.coefficient == Poly.const(1) and self.rest == Poly()


def _linear_in(extent: Poly, name: str) -> tuple[Poly, Poly] | None:
    """(coefficient, rest) with `extent = coefficient * name + rest`, None where `name` occurs squared."""
    with_name: list[Poly] = []
    rest: list[Poly] = []
    for mono, coeff in extent.terms:
        powers = dict(mono)
        if name not in powers:
            rest.append(Poly(((mono, coeff),)))
        elif powers[name] == 1:
            others = tuple((n, e) for n, e in mono if n != name)
            with_name.append(Poly(((others, coeff),)))
        else:
            return None
    return poly_sum(with_name), poly_sum(rest)


def binding_plan(shapes: Sequence[Sequence[Poly]]) -> tuple[list[Binding], frozenset[str]]:
    """How `forward` binds the symbols of its inputs' extents (`shapes`, one per input, in order).

    Returns the bindings in the order `forward` makes them (every name carried alone first, then
    each read-back) and the names no input axis yields.
    """
    bindings: list[Binding] = []
    bound: set[str] = set()
    for i, shape in enumerate(shapes):
        for a, extent in enumerate(shape):
            name = extent.lone_symbol
            if name is not None and name not in bound:
                bound.add(name)
                bindings.append(Binding(name, i, a, Poly.const(1), Poly()))
    progress = True
    while progress:
        progress = False
        for i, shape in enumerate(shapes):
            for a, extent in enumerate(shape):
                unbound = extent.symbols - bound
                if len(unbound) != 1:
                    continue
                (name,) = unbound
                linear = _linear_in(extent, name)
                if linear is None:
                    continue
                bound.add(name)
                bindings.append(Binding(name, i, a, *linear))
                progress = True
                break
            if progress:
                break
    every = {s for shape in shapes for extent in shape for s in extent.symbols}
    return bindings, frozenset(every - bound)


def spelled_shapes(shapes: Sequence[Sequence[int | str | None]]) -> list[list[Poly | None]]:
    """The extents of the graph inputs' declared dims (one list per input; None stays None).

    A dim_value is a number and a dim_param reads by `read_dim_param`, except that a spelling over a
    name no input axis yields (`binding_plan`) is one opaque symbol named by the whole dim_param.
    """
    read = [
        [None if d is None else Poly.const(d) if isinstance(d, int) else read_dim_param(d) for d in s] for s in shapes
    ]
    _, unyielded = binding_plan([[e for e in s if e is not None] for s in read])
    out: list[list[Poly | None]] = []
    for dims, extents in zip(shapes, read, strict=True):
        row: list[Poly | None] = []
        for d, e in zip(dims, extents, strict=True):
            if isinstance(d, str) and e is not None and e.symbols & unyielded:
                row.append(Poly.symbol(d))
            else:
                row.append(e)
        out.append(row)
    return out


def spell_graph_inputs(graph: GraphOp) -> None:
    """Give each input of `graph` whose every dim is declared its extents as `forward` will bind them.

    Each such input's `!graph.tensor` becomes a `!shape_poly.tensor` holding the polynomials
    `spelled_shapes` reads, so stage 0 (`facts_of_type`) takes them as they are.  An input whose
    rank or some dim is unknown keeps its type, and stage 0 refuses it naming the axis.
    """
    from xdsl.rewriter import Rewriter

    from loam.dialects.graph import TensorType
    from loam.dialects.shape_poly import PolyTensorType

    args = list(graph.body.block.args)
    shapes = [t.shape if isinstance(t := a.type, TensorType) and t.shape is not None else () for a in args]
    for arg, extents in zip(args, spelled_shapes(shapes), strict=True):
        t = arg.type
        if not isinstance(t, TensorType) or t.shape is None or t.elem.name == "undefined":
            continue
        known = [e for e in extents if e is not None]
        if len(known) == len(extents):
            Rewriter.replace_value_with_new_type(arg, PolyTensorType(t.elem, known))
