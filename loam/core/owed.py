"""Owed conditions: what stage 0 cannot prove about the inputs becomes a check `forward` makes.

Stage 0 meets conditions on extents everywhere: two axes a broadcast joins must be one length, a
Reshape's element counts must agree, a Slice of a mask must stay within its buffer.  Each is first
decided for every input (`loam.core.derived.decide`): one that holds costs nothing, one that fails for
every input stops the build.  One that depends on the input and reads only symbols the run binds
(the input symbols, and derived symbols over them) is *owed*: `forward` checks it before any kernel
runs, and its `ShapeError` names the node that relies on it.  Anything else stops the build.

Where two extents must be equal, or one must be 1, and a derived symbol stands in the way, each
derived symbol is read as the operand its operation takes unchanged (`min(S, 1024)` as `S`), and
the inputs owe that reading (`S <= 1024`).  Nothing is ever assumed equal because it looks alike:
that is onnxruntime's "potential unsafe merge", which Loam never makes.

Rules reach the active scope through module functions (`owe`, `require_equal`, `broadcast`), so an
operator rule states a condition in one line; stage 0 opens a scope per graph (and per If branch).
Outside any scope (lowering recomputes a rule's parameters) the conditions were already recorded,
so an undecided one is taken as owed and a false one still stops the build.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from loam.core.bounds import Interval, Verdict
from loam.core.derived import decide, known_bounds, reading_where
from loam.core.errors import ShapeError
from loam.core.poly import Poly, derived_call


@dataclass(frozen=True)
class Owed:
    """One owed condition: `lhs <= rhs`, or `lhs == rhs` when `equal`; `node` relies on it."""

    lhs: Poly
    rhs: Poly
    node: str
    equal: bool = False

    @property
    def slack(self) -> Poly:
        """`rhs - lhs`: the condition holds where it is >= 0 (== 0 when `equal`)."""
        return self.rhs - self.lhs

    def __str__(self) -> str:
        return f"{self.lhs} {'==' if self.equal else '<='} {self.rhs}"


def split_condition(slack: Poly) -> tuple[Poly, Poly]:
    """`slack >= 0` written as `lhs <= rhs` with no negative coefficient on either side."""
    lhs = Poly(tuple((m, -c) for m, c in slack.terms if c < 0))
    rhs = Poly(tuple((m, c) for m, c in slack.terms if c > 0))
    return lhs, rhs


def where(node: object) -> str:
    """How an owed condition names the node relying on it (`Slice node 'h.0/attn/Slice_3'`)."""
    return node.where() if hasattr(node, "where") else str(node)


def declarations(symbols: Sequence[str], declared: Mapping[str, Sequence[str]]) -> str:
    """How messages say which input axes declare `symbols` (`S is declared by x axis 1, ...`); the
    symbols no input declares are left out, "" when none is declared."""
    parts = []
    for symbol in symbols:
        axes = declared.get(symbol, [])
        if axes:
            shown = ", ".join(axes[:3]) + (f" and {len(axes) - 3} more" if len(axes) > 3 else "")
            parts.append(f"{symbol} is declared by {shown}")
    return "; ".join(parts)


@dataclass
class ExtentScope:
    """The conditions stage 0 owes in one graph (or one If branch), and what it knows of symbols.

    `bound` holds the symbols the run binds before any kernel (the input symbols); `bounds` the
    intervals the build knows for symbols beyond an input's [0, 2^31 - 1].
    """

    bound: set[str] = field(default_factory=set)
    bounds: dict[str, Interval] = field(default_factory=dict)
    sizes: list[Poly] = field(default_factory=list)  # the inputs' element counts, which fit memory
    owed: list[Owed] = field(default_factory=list)
    lenient: bool = False
    # Each input symbol -> the input axes declaring it (`attention_mask axis 1 (S)`), for messages.
    declared: dict[str, list[str]] = field(default_factory=dict)

    def within_an_input(self, p: Poly) -> bool:
        """Whether `p <= ` some input's element count for every input (coefficient by coefficient,
        all non-negative), so it fits int64 whatever the symbols: that input exists in memory."""
        if any(c < 0 for _, c in p.terms) or derived_symbols(p):
            return False
        return any(all(c >= 0 for _, c in (size - p).terms) for size in self.sizes)

    def computable(self, p: Poly) -> bool:
        """Whether the run can compute `p` before any kernel: its symbols are bound or derived from them."""
        for name in p.symbols:
            call = derived_call(name)
            if call is None:
                if name not in self.bound:
                    return False
            elif not all(self.computable(a) for a in call.args):
                return False
        return True

    def owe(self, slack: Poly, node: object, what: str = "") -> None:
        """Require `slack >= 0` of every input: prove it, refuse it, or owe it."""
        self._require(slack, node, what, equal=False)

    def owe_equal(self, a: Poly, b: Poly, node: object, what: str = "") -> None:
        """Require `a == b` of every input as an owed condition (both must be computable)."""
        if a - b == Poly():
            return
        self._require(b - a, node, what, equal=True, sides=(a, b))

    def _require(
        self, slack: Poly, node: object, what: str, *, equal: bool, sides: tuple[Poly, Poly] | None = None
    ) -> None:
        lhs, rhs = sides if sides is not None else split_condition(slack)
        text = f"{lhs} {'==' if equal else '<='} {rhs}"
        about = f" ({what})" if what else ""
        verdicts = (
            [decide(slack, self.bounds)] if not equal else [decide(slack, self.bounds), decide(-slack, self.bounds)]
        )
        if all(v is Verdict.HOLDS for v in verdicts):
            return
        if Verdict.FAILS in verdicts:
            raise ShapeError(f"{where(node)}: needs {text}{about}, which no input satisfies")
        if self.lenient:
            return
        if not self.computable(slack):
            unbound = sorted(s for s in slack.symbols if derived_call(s) is None and s not in self.bound)
            raise ShapeError(
                f"{where(node)}: needs {text}{about}, which the build cannot prove and the run cannot check "
                f"before the kernels: {', '.join(unbound)} {'is' if len(unbound) == 1 else 'are'} bound by no input"
            )
        if equal and str(lhs) > str(rhs):
            lhs, rhs = rhs, lhs  # one spelling per equality: `a == b` and `b == a` are one condition
        self.record(Owed(lhs, rhs, where(node), equal))

    def record(self, new: Owed) -> None:
        """Keep `new` unless an owed condition already implies it; drop those it implies.

        `past + S <= 128` implies `past <= 128` (S is a length): the run checks the stronger one,
        naming the first node that relies on it.
        """
        for old in self.owed:
            if old.equal != new.equal:
                continue
            if new.equal:
                if (old.lhs, old.rhs) == (new.lhs, new.rhs):
                    return
            elif decide(new.slack - old.slack, self.bounds) is Verdict.HOLDS:
                return
        if not new.equal:
            self.owed = [
                o for o in self.owed if o.equal or decide(o.slack - new.slack, self.bounds) is not Verdict.HOLDS
            ]
        self.owed.append(new)

    def require_equal(self, a: Poly, b: Poly, node: object, what: str) -> Poly:
        """Two extents that must be one length (a contraction, a broadcast, concat's other axes).

        Equal polynomials are equal.  Otherwise each derived symbol may be read as its unchanged
        operand (owed); two symbolic lengths no reading makes equal are owed equal, and so is a number
        meeting derived arithmetic; a number meeting an input's symbol stops the build (the `dims`
        option can fix the symbol).
        """
        if a == b:
            return a
        slacks = reading_where(a - b, lambda p: p == Poly(), self.bounds)
        if slacks is not None:
            for s in slacks:
                self.owe(s, node, what)
            return a if not derived_symbols(a) else b
        if a.is_const and b.is_const:
            raise ShapeError(f"{where(node)}: {what}: extents {a} and {b} differ")
        if (a.is_const or b.is_const) and derived_symbols(a if b.is_const else b) and self.computable(a - b):
            # A number meeting the arithmetic a window or a division leaves (`floordiv(H - 1, 32) - 6`
            # meets 1 after a fixed pooling): many inputs give it, so the run checks it.
            self.owe_equal(a, b, node, what)
            return a if a.is_const else b
        if a.is_const or b.is_const:
            number, other = (a, b) if a.is_const else (b, a)
            symbol = other.lone_symbol
            if symbol is None:
                fix = "fix its symbols with the `dims` option if they are meant to be numbers"
            else:
                said = declarations([symbol], self.declared)
                declared = f"{said}; " if said else ""
                fix = (
                    f"{declared}if it is meant to be {number}, fix it with `[dims] {symbol} = {number}` "
                    f"(--dims {symbol}={number})"
                )
            raise ShapeError(f"{where(node)}: {what}: extent {a} meets {b}; the build cannot show them equal ({fix})")
        self.owe_equal(a, b, node, what)
        return a if len(a.terms) <= len(b.terms) else b

    def is_one(self, e: Poly, node: object, what: str) -> bool:
        """Whether extent `e` is 1 (possibly by reading its derived symbols, which the inputs then owe)."""
        if e == Poly.const(1):
            return True
        if not derived_symbols(e):
            return False
        slacks = reading_where(e, lambda p: p == Poly.const(1), self.bounds)
        if slacks is None:
            return False
        for s in slacks:
            self.owe(s, node, what)
        return True

    def broadcast(self, a: Poly, b: Poly, node: object, what: str) -> Poly:
        """ONNX's broadcast of two extents: a 1 stretches to the other; else they must be equal."""
        if a == b:
            return a
        for s, x in ((a, b), (b, a)):
            if _stretches(s, x):
                return s
        if self.is_one(a, node, what):
            return b
        if self.is_one(b, node, what):
            return a
        return self.require_equal(a, b, node, what)


def _stretches(s: Poly, x: Poly) -> bool:
    """Whether `s` is `select(eq(1, x), y, x)`: x where x is not 1, else y -- the broadcast of x
    with y itself (torch's `expand` exports it as `Where(Equal(x, 1), y, x)`)."""
    call = derived_call(s.lone_symbol) if s.lone_symbol else None
    if call is None or call.function != "select" or call.args[2] != x:
        return False
    cond = call.args[0].lone_symbol
    test = derived_call(cond) if cond else None
    return test is not None and test.function == "eq" and sorted(map(str, test.args)) == sorted(["1", str(x)])


def derived_symbols(p: Poly) -> list[str]:
    return [n for n in p.symbols if derived_call(n) is not None]


_SCOPE: contextvars.ContextVar[ExtentScope | None] = contextvars.ContextVar("loam_extent_scope", default=None)


def current() -> ExtentScope:
    """The scope stage 0 has open, or a lenient one outside stage 0."""
    scope = _SCOPE.get()
    return scope if scope is not None else ExtentScope(lenient=True)


@contextlib.contextmanager
def scope(s: ExtentScope) -> Iterator[ExtentScope]:
    """Make `s` the scope the rules' conditions go to while the block runs, and its bounds those
    `loam.core.derived`'s constructors know."""
    token = _SCOPE.set(s)
    try:
        with known_bounds(s.bounds):
            yield s
    finally:
        _SCOPE.reset(token)


def bounds() -> Mapping[str, Interval]:
    """What the active scope knows of symbol intervals (for `loam.core.derived`'s constructors)."""
    return current().bounds


def owe(slack: Poly, node: object, what: str = "") -> None:
    current().owe(slack, node, what)


def require_equal(a: Poly, b: Poly, node: object, what: str) -> Poly:
    return current().require_equal(a, b, node, what)


def broadcast(a: Poly, b: Poly, node: object, what: str) -> Poly:
    return current().broadcast(a, b, node, what)
