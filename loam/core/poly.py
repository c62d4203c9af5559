"""Integer polynomials over named symbols: the algebra of Loam's extents.

An extent is either a number the graph states or a polynomial over the symbols that stand for
lengths only the run knows (`N`, `seq_len`, ...).  A merge multiplies its parts' extents and an
exporter's shape arithmetic adds and subtracts them, so the ring operations are all stage 0 needs.

A `Poly` is kept in one canonical form (monomials sorted, no zero coefficients), so two
polynomials are equal exactly when their dataclass fields are: equality and hashing are
structural, with no simplification step to forget.

Text form (`str(p)` prints it, `Poly.parse` reads it back)::

    poly   ::= term (('+' | '-') term)*
    term   ::= factor ('*' factor)*
    factor ::= '-' factor | integer | symbol | call | '(' poly ')'
    symbol ::= identifier | string-literal      # "seq-len": any name that is not [A-Za-z_][A-Za-z0-9_]*
    call   ::= function '(' poly (',' poly)* ')'  # a derived symbol: min(N, 1024), floordiv(N + 1, 2)

Example::

    >>> n, m = Poly.symbol("N"), Poly.symbol("M")
    >>> str(2 * n * m + 3 * n - 1)
    '2*M*N + 3*N - 1'
    >>> Poly.parse('"seq-len" + 1').evaluate({"seq-len": 7})
    8

A monomial names its symbols by string only.  A derived symbol -- a value the run computes from
the input symbols by an operation that leaves the polynomials, such as `min(N, 1024)` -- is a
symbol whose name is its definition in canonical text (`DerivedCall.name`), so the same operation
on equal operands is the same symbol, and its meaning travels with every extent that mentions it.
`loam.core.derived` gives those symbols their meaning (simplification, bounds, evaluation).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NoReturn, Protocol

from loam.core.errors import PolyError

# A monomial: (symbol, exponent) pairs sorted by symbol, exponents >= 1; () is the constant monomial.
Monomial = tuple[tuple[str, int], ...]

_PLAIN_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# The operations a derived symbol may name, with their arity; `loam.core.derived` defines each.
DERIVED_FUNCTIONS: dict[str, int] = {
    "min": 2,  # the smaller
    "max": 2,  # the larger
    "floordiv": 2,  # quotient rounded down
    "ceildiv": 2,  # quotient rounded up
    "truncdiv": 2,  # quotient rounded toward zero (ONNX integer Div)
    "mod": 2,  # remainder with the divisor's sign (ONNX Mod, fmod=0)
    "fmod": 2,  # remainder with the dividend's sign (ONNX Mod, fmod=1)
    "fromend": 2,  # fromend(i, d): an index i counted from the end of a length d when negative
    "wrap32": 1,  # the low 32 bits, as a signed int32 (a Cast to int32)
    "half": 1,  # the nearest float16 value, for values a float16 holds as an integer
    "select": 3,  # select(c, a, b): a where c is nonzero, else b
    "eq": 2,  # 1 where equal, else 0
    "lt": 2,  # 1 where a < b, else 0
}


@dataclass(frozen=True)
class DerivedCall:
    """A derived symbol's definition: an operation of `DERIVED_FUNCTIONS` over polynomials."""

    function: str
    args: tuple[Poly, ...]

    def __post_init__(self) -> None:
        arity = DERIVED_FUNCTIONS.get(self.function)
        if arity is None:
            raise PolyError(f"unknown derived operation '{self.function}'")
        if len(self.args) != arity:
            raise PolyError(f"{self.function} takes {arity} operands, got {len(self.args)}")

    @property
    def name(self) -> str:
        """The symbol's name: its canonical text, `min(N, 1024)`."""
        return f"{self.function}({', '.join(str(a) for a in self.args)})"

    @property
    def symbol(self) -> Poly:
        """The derived symbol as a polynomial."""
        return Poly.symbol(self.name)


def derived_call(name: str) -> DerivedCall | None:
    """The definition a derived symbol's name spells, or None for an input symbol's name."""
    head, paren, _ = name.partition("(")
    if not paren or head not in DERIVED_FUNCTIONS or not name.endswith(")"):
        return None
    try:
        tokens = _TextTokens(name)
        poly = parse_poly(tokens)
        tokens.expect_end()
    except PolyError:
        return None
    lone = poly.lone_symbol
    if lone != name:
        return None
    return _CALLS.get(name)


# Every DerivedCall parsed or built, by name (names are canonical, so this is a pure cache).
_CALLS: dict[str, DerivedCall] = {}


def is_plain_symbol(name: str) -> bool:
    """Whether `name` prints without quotes (an ASCII identifier, or a derived symbol's call)."""
    return _PLAIN_SYMBOL.fullmatch(name) is not None or name in _CALLS


def quote_symbol(name: str) -> str:
    """`name` as it appears in a polynomial's text: bare if an identifier, else a string literal.

    The escapes are MLIR's (`\\\\`, and `\\XX` for a quote, a control byte or a non-ASCII byte of the
    UTF-8 encoding), so the same text reads back through xDSL's parser.
    """
    if is_plain_symbol(name):
        return name
    out = ['"']
    for byte in name.encode("utf-8"):
        if byte == 0x5C:
            out.append("\\\\")
        elif byte < 0x20 or byte > 0x7E or byte == 0x22:
            out.append(f"\\{byte:02X}")
        else:
            out.append(chr(byte))
    out.append('"')
    return "".join(out)


def _monomial_key(mono: Monomial) -> tuple[int, Monomial]:
    # Higher degree first, so the constant term (degree 0) prints last.
    return (-sum(e for _, e in mono), mono)


def _mul_monomials(a: Monomial, b: Monomial) -> Monomial:
    exps = dict(a)
    for name, e in b:
        exps[name] = exps.get(name, 0) + e
    return tuple(sorted(exps.items()))


# A graph's extents are a few polynomials combined again and again (every node's shape, every byte count),
# so the ring operations remember their recent results: Polys are immutable and hash by their terms.
@functools.lru_cache(maxsize=1 << 14)
def _sum(a: Poly, b: Poly | int) -> Poly:
    coeffs = dict(a.terms)
    for mono, c in Poly.lift(b).terms:
        coeffs[mono] = coeffs.get(mono, 0) + c
    return Poly._from_map(coeffs)


@functools.lru_cache(maxsize=1 << 14)
def _product(a: Poly, b: Poly | int) -> Poly:
    coeffs: dict[Monomial, int] = {}
    for ma, ca in a.terms:
        for mb, cb in Poly.lift(b).terms:
            mono = _mul_monomials(ma, mb)
            coeffs[mono] = coeffs.get(mono, 0) + ca * cb
    return Poly._from_map(coeffs)


@dataclass(frozen=True)
class Poly:
    """An integer polynomial over named symbols, in canonical form.

    `terms` holds (monomial, coefficient) pairs, sorted by descending degree and then by monomial,
    with no zero coefficient; build one with `Poly.const`, `Poly.symbol`, `Poly.parse` and the ring
    operators rather than by hand.
    """

    terms: tuple[tuple[Monomial, int], ...] = ()

    # -- construction ------------------------------------------------------------------------

    @staticmethod
    def _from_map(coeffs: Mapping[Monomial, int]) -> Poly:
        items = [(m, c) for m, c in coeffs.items() if c != 0]
        items.sort(key=lambda mc: _monomial_key(mc[0]))
        return Poly(tuple(items))

    @staticmethod
    def const(value: int) -> Poly:
        """The constant polynomial `value`."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"Poly.const takes an int, got {type(value).__name__}")
        return Poly((((), value),)) if value else Poly()

    @staticmethod
    def symbol(name: str) -> Poly:
        """The polynomial that is the symbol `name` alone."""
        if not isinstance(name, str) or not name:
            raise PolyError(f"a symbol needs a non-empty name, got {name!r}")
        return Poly(((((name, 1),), 1),))

    @staticmethod
    def lift(value: Poly | int) -> Poly:
        """`value` as a polynomial (an int becomes a constant)."""
        return value if isinstance(value, Poly) else Poly.const(value)

    # -- queries ----------------------------------------------------------------------------

    @property
    def is_const(self) -> bool:
        """Whether no symbol occurs (zero included)."""
        return all(not m for m, _ in self.terms)

    @property
    def const_value(self) -> int:
        """The value of a constant polynomial; PolyError when a symbol occurs."""
        if not self.is_const:
            raise PolyError(f"extent '{self}' is not a constant")
        return self.terms[0][1] if self.terms else 0

    @property
    def lone_symbol(self) -> str | None:
        """The symbol's name when this polynomial is one symbol alone (`N`, not `2*N` or `N + 1`)."""
        if len(self.terms) == 1:
            mono, coeff = self.terms[0]
            if coeff == 1 and len(mono) == 1 and mono[0][1] == 1:
                return mono[0][0]
        return None

    @property
    def symbols(self) -> frozenset[str]:
        """The names of the symbols that occur."""
        return frozenset(name for m, _ in self.terms for name, _ in m)

    def evaluate(self, env: Mapping[str, int]) -> int:
        """The value at `env` (symbol -> int); PolyError names a symbol `env` lacks."""
        total = 0
        for mono, coeff in self.terms:
            value = coeff
            for name, exp in mono:
                if name not in env:
                    raise PolyError(f"no value for symbol {quote_symbol(name)} in '{self}'")
                value *= env[name] ** exp
            total += value
        return total

    def substitute(self, name: str, value: Poly | int) -> Poly:
        """This polynomial with every occurrence of symbol `name` replaced by `value`."""
        value = Poly.lift(value)
        result = Poly()
        for mono, coeff in self.terms:
            rest = tuple((n, e) for n, e in mono if n != name)
            term = Poly(((rest, coeff),))
            for n, e in mono:
                if n == name:
                    for _ in range(e):
                        term = term * value
            result = result + term
        return result

    # -- ring operations ---------------------------------------------------------------------

    def __add__(self, other: Poly | int) -> Poly:
        if not isinstance(other, Poly | int) or isinstance(other, bool):
            return NotImplemented
        return _sum(self, other)

    __radd__ = __add__

    def __neg__(self) -> Poly:
        return Poly(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: Poly | int) -> Poly:
        if not isinstance(other, Poly | int) or isinstance(other, bool):
            return NotImplemented
        return self + (-Poly.lift(other))

    def __rsub__(self, other: int) -> Poly:
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        return Poly.const(other) - self

    def __mul__(self, other: Poly | int) -> Poly:
        if not isinstance(other, Poly | int) or isinstance(other, bool):
            return NotImplemented
        return _product(self, other)

    __rmul__ = __mul__

    # -- text --------------------------------------------------------------------------------

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts: list[str] = []
        for i, (mono, coeff) in enumerate(self.terms):
            factors = [quote_symbol(n) for n, e in mono for _ in range(e)]
            magnitude = abs(coeff)
            if magnitude != 1 or not factors:
                factors.insert(0, str(magnitude))
            body = "*".join(factors)
            if i == 0:
                parts.append(f"-{body}" if coeff < 0 else body)
            else:
                parts.append(f"- {body}" if coeff < 0 else f"+ {body}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Poly({str(self)!r})"

    @staticmethod
    def parse(text: str) -> Poly:
        """The polynomial `text` spells (the inverse of `str`); PolyError says what is wrong."""
        tokens = _TextTokens(text)
        poly = parse_poly(tokens)
        tokens.expect_end()
        return poly


def derived_symbol(call: DerivedCall) -> Poly:
    """The symbol `call` defines (registered, so its name prints bare and reads back)."""
    _CALLS.setdefault(call.name, call)
    return call.symbol


def poly_sum(values: Iterable[Poly | int]) -> Poly:
    """The sum of `values` (0 when empty)."""
    total = Poly()
    for v in values:
        total = total + v
    return total


def poly_product(values: Iterable[Poly | int]) -> Poly:
    """The product of `values` (1 when empty): the extent of a merge of axes."""
    total = Poly.const(1)
    for v in values:
        total = total * v
    return total


# -- reading text: one grammar, two token sources (plain strings here, xDSL's lexer in the dialect)


class PolyTokens(Protocol):
    """What `parse_poly` reads from: a cursor over integer, symbol and punctuation tokens."""

    def integer(self) -> int | None:
        """Consume a non-negative integer literal if one is next."""
        ...

    def symbol(self) -> str | None:
        """Consume a symbol (identifier or string literal) if one is next; return its name."""
        ...

    def punct(self, spelling: str) -> bool:
        """Consume the punctuation `spelling` (`+ - * ( ) ,`) if it is next."""
        ...

    def error(self, message: str) -> NoReturn:
        """Refuse the text at the current position."""
        ...


def parse_poly(tokens: PolyTokens) -> Poly:
    """Read one polynomial from `tokens`, stopping before the first token that cannot continue it."""
    result = _parse_term(tokens)
    while True:
        if tokens.punct("+"):
            result = result + _parse_term(tokens)
        elif tokens.punct("-"):
            result = result - _parse_term(tokens)
        else:
            return result


def _parse_term(tokens: PolyTokens) -> Poly:
    result = _parse_factor(tokens)
    while tokens.punct("*"):
        result = result * _parse_factor(tokens)
    return result


def _parse_factor(tokens: PolyTokens) -> Poly:
    if tokens.punct("-"):
        return -_parse_factor(tokens)
    if (value := tokens.integer()) is not None:
        return Poly.const(value)
    if (name := tokens.symbol()) is not None:
        if name in DERIVED_FUNCTIONS and tokens.punct("("):
            args = [parse_poly(tokens)]
            while tokens.punct(","):
                args.append(parse_poly(tokens))
            if not tokens.punct(")"):
                tokens.error(f"expected ')' to close {name}(...)")
            try:
                call = DerivedCall(name, tuple(args))
            except PolyError as e:
                tokens.error(str(e))
            return derived_symbol(call)
        return Poly.symbol(name)
    if tokens.punct("("):
        inner = parse_poly(tokens)
        if not tokens.punct(")"):
            tokens.error("expected ')' to close the parenthesis")
        return inner
    tokens.error("expected an integer, a symbol, '-' or '(' in a polynomial")


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<int>[0-9]+)
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<str>"(?:[^"\\]|\\.)*")
      | (?P<punct>[-+*(),])
    )""",
    re.VERBOSE,
)
_ESCAPES = {"\\": b"\\", '"': b'"', "n": b"\n", "t": b"\t"}


def _unquote(literal: str) -> str:
    """The name a string literal spells, reading the escapes `quote_symbol` writes (and xDSL reads)."""
    body, out, i = literal[1:-1], bytearray(), 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode("utf-8")
            i += 1
        elif body[i + 1] in _ESCAPES:
            out += _ESCAPES[body[i + 1]]
            i += 2
        elif re.fullmatch(r"[0-9A-Fa-f]{2}", body[i + 1 : i + 3]):
            out.append(int(body[i + 1 : i + 3], 16))
            i += 3
        else:
            raise PolyError(f"unknown escape '\\{body[i + 1]}' in symbol {literal}")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise PolyError(f"symbol {literal} is not valid UTF-8") from None


class _TextTokens:
    """`PolyTokens` over a plain string."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self._next: re.Match[str] | None = None
        self._scan()

    def _scan(self) -> None:
        self._next = _TOKEN.match(self.text, self.pos)
        rest = self.text[self.pos :].strip()
        if self._next is None and rest:
            self.error("unexpected character")

    def _take(self, group: str) -> str | None:
        m = self._next
        if m is None or m.group(group) is None:
            return None
        self.pos = m.end()
        self._scan()
        return m.group(group)

    def integer(self) -> int | None:
        text = self._take("int")
        return None if text is None else int(text)

    def symbol(self) -> str | None:
        if (ident := self._take("ident")) is not None:
            return ident
        literal = self._take("str")
        return None if literal is None else _unquote(literal)

    def punct(self, spelling: str) -> bool:
        m = self._next
        if m is None or m.group("punct") != spelling:
            return False
        return self._take("punct") is not None

    def error(self, message: str) -> NoReturn:
        at = len(self.text) - len(self.text[self.pos :].lstrip())
        raise PolyError(f"bad polynomial {self.text!r} at column {at + 1}: {message}")

    def expect_end(self) -> None:
        if self.text[self.pos :].strip():
            self.error("unexpected text after the polynomial")
