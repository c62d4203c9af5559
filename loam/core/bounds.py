"""Bounds of extents and the decision `p >= 0`: what the build can prove for every input.

Each symbol lies in a closed integer interval: an input symbol (a dim_param) in [0, 2^31 - 1],
since ONNX extents are non-negative and run-time lengths fit an int32 index; a symbol the build
derives later narrows its own interval.  A polynomial's bounds follow by interval arithmetic over
its monomials, which is sound (every value the polynomial takes for symbols within their
intervals lies within its bounds) though not always tight.

`decide(p, bounds)` answers `p >= 0` in three ways, and only says what the bounds prove:

- `Verdict.HOLDS`: `p >= 0` for every assignment within the bounds (the lower bound is >= 0);
- `Verdict.FAILS`: `p < 0` for every assignment (the upper bound is < 0);
- `Verdict.UNKNOWN`: anything else; the run must check it (an owed condition).

It never guesses an equality or an inequality the bounds do not prove: where onnxruntime's
symbolic shape inference merges two symbols on a hunch, Loam asks the run.

>>> n = Poly.symbol("N")
>>> decide(n + 1, {}) is Verdict.HOLDS
True
>>> decide(1024 - n, {}) is Verdict.UNKNOWN
True
>>> decide(1024 - n, {"N": Interval(0, 1000)}) is Verdict.HOLDS
True
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from loam.core.errors import PolyError
from loam.core.poly import Poly

INPUT_MAX = 2**31 - 1
"""The largest length an input symbol may take (an int32 index reaches it)."""


@dataclass(frozen=True)
class Interval:
    """The closed integer interval [lo, hi]."""

    lo: int
    hi: int

    def __post_init__(self) -> None:
        if self.lo > self.hi:
            raise PolyError(f"empty interval [{self.lo}, {self.hi}]")

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.lo <= value <= self.hi

    def __add__(self, other: Interval) -> Interval:
        return Interval(self.lo + other.lo, self.hi + other.hi)

    def __mul__(self, other: Interval) -> Interval:
        corners = (self.lo * other.lo, self.lo * other.hi, self.hi * other.lo, self.hi * other.hi)
        return Interval(min(corners), max(corners))

    def power(self, exponent: int) -> Interval:
        """The interval of x**exponent for x in this interval (exponent >= 1)."""
        lo_p, hi_p = self.lo**exponent, self.hi**exponent
        if exponent % 2 == 0 and self.lo < 0 < self.hi:
            return Interval(0, max(lo_p, hi_p))
        return Interval(min(lo_p, hi_p), max(lo_p, hi_p))

    def scale(self, k: int) -> Interval:
        return Interval(min(k * self.lo, k * self.hi), max(k * self.lo, k * self.hi))

    def __str__(self) -> str:
        return f"[{self.lo}, {self.hi}]"


INPUT_INTERVAL = Interval(0, INPUT_MAX)
"""Where an input symbol (a dim_param) lies unless the build knows better."""


def interval_of(p: Poly, symbol: Callable[[str], Interval]) -> Interval:
    """An interval holding every value of `p`, each symbol within `symbol(name)` (interval
    arithmetic over the monomials: sound, not always tight)."""
    total = Interval(0, 0)
    for mono, coeff in p.terms:
        term = Interval(1, 1)
        for name, exponent in mono:
            term = term * symbol(name).power(exponent)
        total = total + term.scale(coeff)
    return total


def poly_bounds(p: Poly, bounds: Mapping[str, Interval]) -> Interval:
    """An interval holding every value of `p` for symbols within `bounds` (absent: an input's)."""
    return interval_of(p, lambda name: bounds.get(name, INPUT_INTERVAL))


class Verdict(enum.Enum):
    """What the build knows of a condition `p >= 0` over every input."""

    HOLDS = "holds for every input"
    FAILS = "fails for every input"
    UNKNOWN = "depends on the input"


def decide(p: Poly, bounds: Mapping[str, Interval]) -> Verdict:
    """Whether `p >= 0` holds for every assignment within `bounds`, fails for every one, or neither."""
    return verdict(poly_bounds(p, bounds))


def verdict(interval: Interval) -> Verdict:
    """What `p >= 0` is for every input, where `interval` holds every value of `p`."""
    if interval.lo >= 0:
        return Verdict.HOLDS
    if interval.hi < 0:
        return Verdict.FAILS
    return Verdict.UNKNOWN
