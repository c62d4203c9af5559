"""Derived symbols: the shape arithmetic that leaves the polynomials, decided where the build can.

ONNX clamps a Slice bound to its axis, reads a negative index from the end, counts Slice and Range
steps rounding up, rounds Reshape's -1 down, truncates integer Div toward zero and keeps an int32's
low 32 bits.  None of these is a polynomial.  Each constructor here first tries to decide the
operation for every input, from the bounds of its operands (`loam.core.bounds`): `min(N, 2**62)` is `N`,
since no length reaches 2**62, and `floordiv(2*N, 2)` is `N`.  What it cannot decide becomes a
derived symbol (`loam.core.poly.DerivedCall`): a symbol named by its definition, which forward computes
from the input symbols before any kernel runs, and which lies within the interval its operation
leaves (`call_bounds`).  The same operation on equal operands gives the same symbol, because the
name is the canonical text of the call.

The numbers each operation gives are written once, in `loam.runtime.prologue.derived_extent`,
which the generated module also carries; `evaluate` here uses that same function.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
from collections.abc import Callable, Iterator, Mapping

from loam.core.bounds import INPUT_INTERVAL, Interval, Verdict, interval_of, verdict
from loam.core.errors import PolyError
from loam.core.poly import DerivedCall, Poly, derived_call, derived_symbol

I64 = Interval(-(2**63), 2**63 - 1)
I32 = Interval(-(2**31), 2**31 - 1)
HALF_EXACT = 2048  # float16 holds every integer of [-2048, 2048]

Bounds = Mapping[str, Interval]

_KNOWN: contextvars.ContextVar[Bounds | None] = contextvars.ContextVar("loam_known_bounds", default=None)


@contextlib.contextmanager
def known_bounds(bounds: Bounds) -> Iterator[None]:
    """Make `bounds` what the constructors know of symbol intervals while the block runs, wherever
    they are given no bounds of their own (stage 0 opens one per scope: `loam.core.owed.scope`)."""
    token = _KNOWN.set(bounds)
    try:
        yield
    finally:
        _KNOWN.reset(token)


def active_bounds() -> Bounds:
    """The symbol intervals `known_bounds` made current; none outside it."""
    known = _KNOWN.get()
    return known if known is not None else {}


# -- evaluation ---------------------------------------------------------------------------------


def evaluate(p: Poly, env: Mapping[str, int]) -> int:
    """`p` at `env`, computing each derived symbol `env` lacks from its definition."""
    full = dict(env)
    for name in sorted(p.symbols, key=len):
        if name not in full:
            full[name] = _evaluate_symbol(name, full)
    return p.evaluate(full)


def _evaluate_symbol(name: str, env: dict[str, int]) -> int:
    call = derived_call(name)
    if call is None:
        raise PolyError(f"no value for symbol '{name}'")
    from loam.runtime.prologue import derived_extent

    return int(derived_extent(call.function, *[evaluate(a, env) for a in call.args]))


# -- bounds -------------------------------------------------------------------------------------


def symbol_bounds(name: str, bounds: Bounds) -> Interval:
    """Where symbol `name` lies: as `bounds` says, else as its operation leaves, else an input's."""
    if name in bounds:
        return bounds[name]
    call = derived_call(name)
    if call is None:
        return INPUT_INTERVAL
    return call_bounds(call, bounds)


def bounds_of(p: Poly, bounds: Bounds | None = None) -> Interval:
    """An interval holding every value of `p` (interval arithmetic over its monomials).

    `bounds` gives intervals the build knows beyond the defaults; None takes those of the scope
    stage 0 has open (`active_bounds`).
    """
    known = active_bounds() if bounds is None else bounds
    return interval_of(p, lambda name: symbol_bounds(name, known))


def decide(p: Poly, bounds: Bounds | None = None) -> Verdict:
    """Whether `p >= 0` holds for every input, fails for every input, or depends on the input."""
    return verdict(bounds_of(p, bounds))


def _holds(p: Poly, bounds: Bounds | None) -> bool:
    return decide(p, bounds) is Verdict.HOLDS


def _div_corners(a: Interval, b: Interval, rounding: Callable[[int, int], int]) -> Interval:
    if b.lo <= 0 <= b.hi:
        return I64
    corners = [rounding(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return Interval(min(corners), max(corners))


def _floor(x: int, y: int) -> int:
    return x // y


def _ceil(x: int, y: int) -> int:
    return -((-x) // y)


def _trunc(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y > 0) else -q


def call_bounds(call: DerivedCall, bounds: Bounds) -> Interval:
    """The interval a derived symbol lies in, from its operands' intervals."""
    args = [bounds_of(a, bounds) for a in call.args]
    fn = call.function
    if fn == "min":
        return Interval(min(args[0].lo, args[1].lo), min(args[0].hi, args[1].hi))
    if fn == "max":
        return Interval(max(args[0].lo, args[1].lo), max(args[0].hi, args[1].hi))
    if fn in ("floordiv", "ceildiv", "truncdiv"):
        rounding = {"floordiv": _floor, "ceildiv": _ceil, "truncdiv": _trunc}[fn]
        return _div_corners(args[0], args[1], rounding)
    if fn in ("mod", "fmod"):
        a, b = args
        reach = max(abs(b.lo), abs(b.hi)) - 1
        if reach < 0:
            return I64
        if fn == "fmod" or b.lo <= 0 <= b.hi:
            lo = -reach if (fn == "mod" or a.lo < 0) else 0
            hi = reach if (fn == "mod" or a.hi > 0) else 0
            return Interval(lo, hi)
        return Interval(0, reach) if b.lo > 0 else Interval(-reach, 0)
    if fn == "fromend":
        i, d = args
        parts = []
        if i.hi >= 0:
            parts.append(Interval(max(i.lo, 0), i.hi))
        if i.lo < 0:
            parts.append(Interval(i.lo + d.lo, min(i.hi, -1) + d.hi))
        return Interval(min(p.lo for p in parts), max(p.hi for p in parts))
    if fn == "wrap32":
        a = args[0]
        return a if I32.lo <= a.lo and a.hi <= I32.hi else I32
    if fn == "half":
        a = args[0]
        return Interval(a.lo - abs(a.lo) // 1024 - 1, a.hi + abs(a.hi) // 1024 + 1)
    if fn == "select":
        return Interval(min(args[1].lo, args[2].lo), max(args[1].hi, args[2].hi))
    return Interval(0, 1)  # eq, lt


# -- constructors: decide, else derive ----------------------------------------------------------


def _derive(function: str, *args: Poly | int) -> Poly:
    call = DerivedCall(function, tuple(Poly.lift(a) for a in args))
    interval = call_bounds(call, {})
    if interval.lo == interval.hi:  # one value for every input (`floordiv(mod(N, 2), 2)` is 0)
        return Poly.const(interval.lo)
    return derived_symbol(call)


def _consts(*args: Poly) -> list[int] | None:
    return [a.const_value for a in args] if all(a.is_const for a in args) else None


def _eval_const(function: str, *args: int) -> Poly:
    from loam.runtime.prologue import derived_extent

    return Poly.const(int(derived_extent(function, *args)))


def minimum(a: Poly | int, b: Poly | int, bounds: Bounds | None = None) -> Poly:
    """min(a, b)."""
    a, b = Poly.lift(a), Poly.lift(b)
    if (values := _consts(a, b)) is not None:
        return Poly.const(min(values))
    if _holds(b - a, bounds):
        return a
    if _holds(a - b, bounds):
        return b
    a, b = sorted((a, b), key=str)
    return _derive("min", a, b)


def maximum(a: Poly | int, b: Poly | int, bounds: Bounds | None = None) -> Poly:
    """max(a, b)."""
    a, b = Poly.lift(a), Poly.lift(b)
    if (values := _consts(a, b)) is not None:
        return Poly.const(max(values))
    if _holds(a - b, bounds):
        return a
    if _holds(b - a, bounds):
        return b
    a, b = sorted((a, b), key=str)
    return _derive("max", a, b)


def clamp(x: Poly | int, lo: Poly | int, hi: Poly | int, bounds: Bounds | None = None) -> Poly:
    """x clamped to [lo, hi] (ONNX's Slice bound clamp); lo <= hi is the caller's to know."""
    return minimum(maximum(x, lo, bounds), hi, bounds)


def exact_quotient(a: Poly, b: Poly) -> Poly | None:
    """a / b when b divides a exactly as polynomials (a constant or a monomial divisor), else None."""
    if not b.terms:
        return None
    if len(b.terms) == 1:
        ((bmono, bcoeff),) = b.terms
        out: dict = {}
        bexp = dict(bmono)
        for mono, coeff in a.terms:
            if coeff % bcoeff:
                return None
            exps = dict(mono)
            for name, e in bexp.items():
                if exps.get(name, 0) < e:
                    return None
                exps[name] -= e
            out[tuple(sorted((n, e) for n, e in exps.items() if e))] = coeff // bcoeff
        return Poly._from_map(out)
    # A polynomial divisor: a multiple of it by a constant or monomial (2*N + 2 over N + 1).
    lead_mono, lead_coeff = b.terms[0]
    for mono, coeff in a.terms:
        q = exact_quotient(Poly(((mono, coeff),)), Poly(((lead_mono, lead_coeff),)))
        if q is not None and q * b == a:
            return q
    return None


def _divide(function: str, a: Poly | int, b: Poly | int, bounds: Bounds | None) -> Poly:
    a, b = Poly.lift(a), Poly.lift(b)
    if b == Poly.const(0):
        raise PolyError(f"{function}({a}, {b}) divides by zero")
    if (values := _consts(a, b)) is not None:
        return _eval_const(function, *values)
    if (q := exact_quotient(a, b)) is not None:
        return q
    if b.is_const and b.const_value < 0:
        # Rounding down over -k is rounding up over k with the sign turned, and so on.
        flipped = {"floordiv": "ceildiv", "ceildiv": "floordiv", "truncdiv": "truncdiv"}[function]
        return -_divide(flipped, a, -b, bounds)
    if function in ("floordiv", "ceildiv") and b.is_const and b.const_value > 0 and a.lone_symbol is not None:
        # floor(floor(x / m) / n) is floor(x / (m * n)) for positive m and n, and so is ceil's:
        # a window's stride over a window's output reads as one division.
        inner = derived_call(a.lone_symbol)
        if a == Poly.symbol(a.lone_symbol) and inner is not None and inner.function == function:
            x, m = inner.args
            if m.is_const and m.const_value > 0:
                return _divide(function, x, m.const_value * b.const_value, bounds)
    if function == "truncdiv" and _holds(b - 1, bounds):
        if _holds(a, bounds):  # a >= 0: toward zero is down
            return _divide("floordiv", a, b, bounds)
        if _holds(-a, bounds):  # a <= 0: toward zero is up, the negated quotient of -a rounded down
            return -_divide("floordiv", -a, b, bounds)
    return _derive(function, a, b)


def floordiv(a: Poly | int, b: Poly | int, bounds: Bounds | None = None) -> Poly:
    """a / b rounded down."""
    return _divide("floordiv", a, b, bounds)


def ceildiv(a: Poly | int, b: Poly | int, bounds: Bounds | None = None) -> Poly:
    """a / b rounded up."""
    return _divide("ceildiv", a, b, bounds)


def truncdiv(a: Poly | int, b: Poly | int, bounds: Bounds | None = None) -> Poly:
    """a / b rounded toward zero (ONNX's integer Div)."""
    return _divide("truncdiv", a, b, bounds)


def modulo(a: Poly | int, b: Poly | int, bounds: Bounds | None = None, *, fmod: bool = False) -> Poly:
    """ONNX Mod: the remainder with the divisor's sign, or the dividend's with `fmod`."""
    a, b = Poly.lift(a), Poly.lift(b)
    function = "fmod" if fmod else "mod"
    if b == Poly.const(0):
        raise PolyError(f"{function}({a}, {b}) divides by zero")
    if (values := _consts(a, b)) is not None:
        return _eval_const(function, *values)
    if exact_quotient(a, b) is not None:
        return Poly.const(0)
    if _holds(a, bounds) and _holds(b - a - 1, bounds):
        return a
    return _derive(function, a, b)


def from_end(index: Poly | int, length: Poly | int, bounds: Bounds | None = None) -> Poly:
    """An index counted from the end of `length` when negative (ONNX's negative indices)."""
    index, length = Poly.lift(index), Poly.lift(length)
    if _holds(index, bounds):
        return index
    if _holds(-index - 1, bounds):
        return index + length
    return _derive("fromend", index, length)


def wrap32(a: Poly | int, bounds: Bounds | None = None) -> Poly:
    """The low 32 bits of `a` as a signed int32 (a Cast to int32)."""
    a = Poly.lift(a)
    interval = bounds_of(a, bounds)
    if I32.lo <= interval.lo and interval.hi <= I32.hi:
        return a
    if a.is_const:
        return _eval_const("wrap32", a.const_value)
    return _derive("wrap32", a)


def half(a: Poly | int, bounds: Bounds | None = None) -> Poly:
    """The integer `a` rounded to the nearest float16 (a Cast through float16 and back)."""
    a = Poly.lift(a)
    interval = bounds_of(a, bounds)
    if -HALF_EXACT <= interval.lo and interval.hi <= HALF_EXACT:
        return a
    if interval.lo < -65504 or interval.hi > 65504:
        raise PolyError(f"'{a}' may pass float16's largest finite value 65504")
    if a.is_const:
        return _eval_const("half", a.const_value)
    return _derive("half", a)


def select(cond: Poly | int, a: Poly | int, b: Poly | int, bounds: Bounds | None = None) -> Poly:
    """a where cond is nonzero, else b (Where over shape values)."""
    cond, a, b = Poly.lift(cond), Poly.lift(a), Poly.lift(b)
    if a == b:
        return a
    if cond.is_const:
        return a if cond.const_value else b
    name = cond.lone_symbol
    if cond == a and name is not None and b.substitute(name, 0) == Poly():
        return a  # `a where a != 0, else b` where b is 0 wherever a is: a (Reshape's 0 over B*S)
    interval = bounds_of(cond, bounds)
    if interval.lo > 0 or interval.hi < 0:
        return a
    if interval.lo == interval.hi == 0:
        return b
    return _derive("select", cond, a, b)


def equal(a: Poly | int, b: Poly | int, bounds: Bounds | None = None) -> Poly:
    """1 where a == b, else 0."""
    a, b = Poly.lift(a), Poly.lift(b)
    diff = a - b
    if diff == Poly():
        return Poly.const(1)
    if _holds(diff - 1, bounds) or _holds(-diff - 1, bounds):
        return Poly.const(0)
    a, b = sorted((a, b), key=str)
    return _derive("eq", a, b)


def less(a: Poly | int, b: Poly | int, bounds: Bounds | None = None) -> Poly:
    """1 where a < b, else 0."""
    a, b = Poly.lift(a), Poly.lift(b)
    if _holds(b - a - 1, bounds):
        return Poly.const(1)
    if _holds(a - b, bounds):
        return Poly.const(0)
    return _derive("lt", a, b)


# -- reading a derived symbol as its unchanged operand --------------------------------------------


def _readings(call: DerivedCall) -> list[tuple[Poly, list[Poly]]]:
    """Each operand `call` may take unchanged, with what that reading owes (each `p >= 0`)."""
    fn, args = call.function, call.args
    if fn == "min":
        a, b = args
        return [(a, [b - a]), (b, [a - b])]
    if fn == "max":
        a, b = args
        return [(a, [a - b]), (b, [b - a])]
    if fn == "fromend":
        return [(args[0], [args[0]])]
    if fn == "wrap32":
        return [(args[0], [args[0] - I32.lo, I32.hi - args[0]])]
    if fn == "half":
        return [(args[0], [args[0] + HALF_EXACT, HALF_EXACT - args[0]])]
    if fn == "select" and bounds_of(args[0]).lo >= 0:
        # A select on a length (ONNX's Reshape 0, torch's `Where(Equal(n, 0), ...)`) takes its first
        # branch wherever the length is not 0.
        return [(args[1], [args[0] - 1])]
    return []  # a rounded quotient, a remainder or a comparison takes no operand unchanged


@functools.cache
def _read_options(name: str) -> tuple[tuple[Poly, tuple[Poly, ...]], ...]:
    """Every way to read derived symbol `name` (operands read first), each with its owed slacks."""
    call = derived_call(name)
    if call is None:
        return ((Poly.symbol(name), ()),)
    # Operands read inside the call first: a rounded quotient keeps its operation over them.
    inner: list[tuple[DerivedCall, tuple[Poly, ...]]] = []
    for choice in itertools.islice(itertools.product(*[read_options(a) for a in call.args]), 64):
        args = tuple(r for r, _ in choice)
        owed = tuple(s for _, slacks in choice for s in slacks)
        inner.append((DerivedCall(call.function, args), owed))
    options: list[tuple[Poly, tuple[Poly, ...]]] = []
    for read_call, owed in inner:
        # A clamp reads first as what it clamps, not as its bound: `min(1024, S)` as S.
        for operand, slacks in sorted(_readings(read_call), key=lambda r: r[0].is_const):
            options.append((operand, owed + tuple(slacks)))
    for read_call, owed in inner:
        if owed:  # the call kept, over operands that were read
            options.append((derived_symbol(read_call), owed))
    options.append((Poly.symbol(name), ()))
    return tuple(options)


def read_options(p: Poly) -> list[tuple[Poly, tuple[Poly, ...]]]:
    """Ways to read `p` with its derived symbols taken as operands, each with the slacks it owes."""
    names = sorted(n for n in p.symbols if derived_call(n) is not None)
    if not names:
        return [(p, ())]
    out: list[tuple[Poly, tuple[Poly, ...]]] = []
    for choice in itertools.islice(itertools.product(*[_read_options(n) for n in names]), 256):
        read = p
        owed: tuple[Poly, ...] = ()
        for name, (value, slacks) in zip(names, choice, strict=True):
            read = read.substitute(name, value)
            owed = owed + slacks
        out.append((read, owed))
    return out


def reading_where(p: Poly, accept: Callable[[Poly], bool], bounds: Bounds | None = None) -> tuple[Poly, ...] | None:
    """The slacks owed by the first reading of `p` that `accept` takes, dropping those that hold.

    None where no reading is accepted, or every accepted one owes something false for every input.
    """
    for read, owed in read_options(p):
        if not accept(read):
            continue
        verdicts = [decide(s, bounds) for s in owed]
        if Verdict.FAILS in verdicts:
            continue
        return tuple(dict.fromkeys(s for s, v in zip(owed, verdicts, strict=True) if v is Verdict.UNKNOWN))
    return None
