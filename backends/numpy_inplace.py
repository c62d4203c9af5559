"""Which steps of an `Expr` the numpy backend computes in one buffer, in place.

A zip's `Expr` printed step by step makes one temporary array per step.  Most steps are numpy
ufuncs, which take `out=`: a step whose result has the zip's extents and element type can write
into a buffer of those extents whose value no later step reads: the buffer that will hold the
zip's result (`out`), or one an earlier step made.  `plan_in_place` decides this per step at build
time (shapes and element types are known as polynomials and Loam types), so a chain of steps
reuses one or two arrays instead of making one each, and the last writes into `out` when the
caller passes it (a product finished by its epilogue in its own buffer, a preallocated buffer).
The numbers are unchanged: each step computes what it computed before; only where it stores its
result differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loam.core.poly import Poly
from loam.dialects.expr import Binary, Const, Convert, Expr, Operand, Unary, step_args, step_types
from loam.runtime.kernels.elementwise import BINARY_SOURCE, UNARY_SOURCE

Shape = tuple[Poly, ...]


OUT = -1
"""`InPlacePlan.into` value: the step writes into the result buffer `out`."""


@dataclass(frozen=True)
class InPlacePlan:
    """Per step, the buffer it writes into: `OUT`, the buffer step k made (k), or None (a new array).

    `alias`: the operand that arrives in `out` (so `out` is busy until that operand's last reader)."""

    into: tuple[int | None, ...]
    alias: int | None = None


def ufunc_call(source: str) -> bool:
    """Whether a step spelled `source` (`np.add`, `_relu`) is a numpy ufunc call that takes `out=`.

    `_relu` and `_div` count: each takes `out=` as a ufunc does."""
    if source in ("_relu", "_div"):
        return True
    return source.startswith("np.") and isinstance(getattr(np, source[3:], None), np.ufunc)


def _source(step: object) -> str:
    if isinstance(step, Unary):
        return UNARY_SOURCE[step.op]
    if isinstance(step, Binary):
        return BINARY_SOURCE[step.op]
    return ""


def plan_in_place(
    expr: Expr,
    shapes: Sequence[Shape],
    elems: Sequence[str],
    result: tuple[Shape, str],
    alias: int | None = None,
    wide: frozenset[int] = frozenset(),
) -> InPlacePlan:
    """Which steps of `expr` write into the result buffer.

    `shapes`/`elems` are the operands' extents and element types, `result` the zip's; operand
    `alias` (if any) arrives in the result buffer itself (`out` is that operand), so no step may
    overwrite it while a later step still reads it.  Operands in `wide` arrive already in f32 and
    their casts print as nothing, so a cast step of one is the operand itself.
    """
    steps = expr.steps
    if not result[0]:
        # A rank-0 step gives a numpy scalar, not an array: there is no buffer to write into.
        return InPlacePlan(tuple(None for _ in steps), alias)
    types = step_types(expr, shapes, elems)
    # A step printed as its argument (identity, a cast of a prepared operand) is that value.
    origin = list(range(len(steps)))
    for i, step in enumerate(steps):
        identity = isinstance(step, Unary) and not UNARY_SOURCE[step.op]
        source = steps[step.arg] if isinstance(step, Convert) else None
        prepared = isinstance(source, Operand) and source.index in wide
        if identity or prepared:
            origin[i] = origin[step_args(step)[0]]
    last_use = list(range(len(steps)))
    for i, step in enumerate(steps):
        for a in step_args(step):
            last_use[origin[a]] = max(last_use[origin[a]], i)
    final = len(steps) - 1
    last_use[origin[final]] = len(steps)  # the result is read after the last step
    # Each buffer (OUT, or the step that made it) -> the step whose value it holds now.
    holds: dict[int, int | None] = {OUT: None}
    if alias is not None:
        holders = [i for i, s in enumerate(steps) if isinstance(s, Operand) and s.index == alias]
        holds[OUT] = max(holders, key=lambda i: last_use[i]) if holders else None
    into: list[int | None] = []
    for i, step in enumerate(steps):
        full = not isinstance(step, (Operand, Const)) and origin[i] == i and types[i] == result
        target: int | None = None
        if full and ufunc_call(_source(step)):
            free = [b for b, held in holds.items() if held is None or last_use[held] <= i]
            # The last step goes to `out`; others prefer a buffer of their own, keeping `out` free.
            if i == final and OUT in free:
                target = OUT
            elif free:
                target = min((b for b in free if b != OUT), default=OUT)
        into.append(target)
        if target is not None:
            holds[target] = i
        elif full:
            holds[i] = i  # a new array of the result's extents: a buffer later steps may reuse
    return InPlacePlan(tuple(into), alias)
