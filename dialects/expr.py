"""`Expr`: an elementwise computation as data, the value of the `#kernel.expr` attribute.

A `kernel.zip` computes an `Expr` over its broadcast operands.  It is data, never a closure, so
fusion can compose it (`substitute`) and a backend can print it as numpy or WGSL.  Its text form,
`[step, ...]`, lists the steps; each is `operand I`, `const V : ELEM`, `UNARY J`, `BINARY J K`,
`select C A B` or `cast J : ELEM`, reading earlier steps by index; the last step is the result.
Kept apart from `loam.dialects.kernel` (which defines the attribute) because the operator rules,
stage-0 folding and the backends build and evaluate Exprs without any IR: `step_types` gives each
step's extents (`broadcast_extents`) and element type, `evaluate` its value with the functions the
generated module calls (`loam.runtime.kernels.elementwise`).
"""

from __future__ import annotations

import functools
import itertools
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.parser import AttrParser

from loam.core import dtypes
from loam.core.poly import Poly
from loam.runtime.kernels import elementwise as elementwise_kernels

UNARY_OPS: frozenset[str] = frozenset(
    {
        "neg", "abs", "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "reciprocal", "floor",
        "ceil", "round", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
        "acosh", "atanh", "erf", "sign", "softplus", "softsign", "identity", "not", "isnan",
        "isinf", "bitnot",
    }
)  # fmt: skip
"""Unary step operators: ONNX's elementwise unary operators, lower-cased, and `not` (logical),
`isnan`, `isinf` (either sign), which produce bool."""

BINARY_OPS: frozenset[str] = frozenset(
    {
        "add", "sub", "mul", "div", "pow", "max", "min", "mod", "fmod", "equal", "less",
        "less_equal", "greater", "greater_equal", "and", "or", "xor", "shl", "shr", "bitand", "bitor",
        "bitxor",
    }
)  # fmt: skip
"""Binary step operators.  `div` truncates toward zero on integers; `pow` keeps the base's type;
`mod` takes the divisor's sign, `fmod` the dividend's; comparisons and `and`/`or`/`xor` produce bool;
`shl`/`shr` shift unsigned integers; `bitand`/`bitor`/`bitxor` (and the unary `bitnot`) act on the
bits of integers, keeping the operands' type."""


@dataclass(frozen=True)
class Operand:
    """Step `operand I`: the kernel's operand `index`, broadcast to the result's extents."""

    index: int

    def __str__(self) -> str:
        return f"operand {self.index}"


@dataclass(frozen=True, eq=False)
class Const:
    """Step `const V : ELEM`: a scalar folded into the expression (`elem` is a Loam element type).

    Equality compares the value's bits, so `nan` equals `nan` and `-0.0` differs from `0.0`: two
    constants are equal exactly when they print the same.
    """

    value: float
    elem: str = "f32"

    def __post_init__(self) -> None:
        value = float(self.value)
        if math.isnan(value):
            value = math.nan  # one canonical NaN: the text form cannot spell payloads
        object.__setattr__(self, "value", value)

    def _key(self) -> tuple[bytes, str]:
        return struct.pack("<d", self.value), self.elem

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return f"const {format_float(self.value)} : {self.elem}"


@dataclass(frozen=True)
class Unary:
    """Step `OP J`: a unary operator applied to step `arg`."""

    op: str
    arg: int

    def __str__(self) -> str:
        return f"{self.op} {self.arg}"


@dataclass(frozen=True)
class Binary:
    """Step `OP J K`: a binary operator applied to steps `lhs` and `rhs`."""

    op: str
    lhs: int
    rhs: int

    def __str__(self) -> str:
        return f"{self.op} {self.lhs} {self.rhs}"


@dataclass(frozen=True)
class Select:
    """Step `select C A B`: step `a` where step `cond` (bool) holds, else step `b` (ONNX Where)."""

    cond: int
    a: int
    b: int

    def __str__(self) -> str:
        return f"select {self.cond} {self.a} {self.b}"


@dataclass(frozen=True)
class Convert:
    """Step `cast J : ELEM`: step `arg` converted to element type `elem` (ONNX Cast's meaning).

    Halves are computed in f32: the lowering widens them with a cast at the start of an Expr and
    narrows the result with one at its end, so each node rounds where onnxruntime rounds.
    """

    arg: int
    elem: str

    def __str__(self) -> str:
        return f"cast {self.arg} : {self.elem}"


Step = Operand | Const | Unary | Binary | Select | Convert


def format_float(value: float) -> str:
    """`value` as MLIR-lexable text that parses back to the same float (`1.0e-05`, `-inf`, `nan`)."""
    if math.isnan(value) or math.isinf(value):
        return repr(value)
    text = repr(value)
    mantissa, sep, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"  # MLIR's float literal needs a point: `1e-05` would lex as `1` and `e`
    return mantissa + sep + exponent


def parse_float(parser: AttrParser) -> float:
    """A number, or `inf` / `-inf` / `nan` (which MLIR's lexer reads as identifiers): what `format_float` prints."""
    negative = parser.parse_optional_punctuation("-") is not None
    word = parser.parse_optional_keyword_in(("inf", "nan"))
    if word is not None:
        value = math.inf if word == "inf" else math.nan
    else:
        value = float(parser.parse_number(context_msg=" (a constant)"))
    return -value if negative else value


def step_args(step: Step) -> tuple[int, ...]:
    """The earlier steps `step` reads, in order."""
    if isinstance(step, Unary):
        return (step.arg,)
    if isinstance(step, Binary):
        return (step.lhs, step.rhs)
    if isinstance(step, Select):
        return (step.cond, step.a, step.b)
    if isinstance(step, Convert):
        return (step.arg,)
    return ()


def _shift(step: Step, mapping: Sequence[int] | Mapping[int, int]) -> Step:
    """`step` with its step references renumbered through `mapping` (old index -> new)."""
    if isinstance(step, Unary):
        return Unary(step.op, mapping[step.arg])
    if isinstance(step, Binary):
        return Binary(step.op, mapping[step.lhs], mapping[step.rhs])
    if isinstance(step, Select):
        return Select(mapping[step.cond], mapping[step.a], mapping[step.b])
    if isinstance(step, Convert):
        return Convert(mapping[step.arg], step.elem)
    return step


class _Builder:
    """Appends steps with sharing: a step equal to an existing one reuses its index."""

    def __init__(self, start: Expr | None = None) -> None:
        """An empty builder, or one holding `start`'s steps (a canonical expression: no step twice)."""
        self.steps: list[Step] = list(start.steps) if start is not None else []
        self._index: dict[Step, int] = dict(start.step_index) if start is not None else {}

    def add(self, step: Step) -> int:
        found = self._index.get(step)
        if found is not None:
            return found
        self.steps.append(step)
        self._index[step] = len(self.steps) - 1
        return len(self.steps) - 1

    def splice(self, expr: Expr, operands: Sequence[int] | None = None) -> int:
        """Copy `expr`'s steps in; `operands[i]` (a step here) replaces `operand i` when given."""
        mapping: list[int] = []
        for step in expr.steps:
            if isinstance(step, Operand) and operands is not None:
                mapping.append(operands[step.index])
            else:
                mapping.append(self.add(_shift(step, mapping)))
        return mapping[-1]

    def finish(self, root: int) -> Expr:
        """The expression computing step `root`, keeping only the steps it reads (so it is last)."""
        live: set[int] = set()
        stack = [root]
        while stack:
            i = stack.pop()
            if i not in live:
                live.add(i)
                stack.extend(step_args(self.steps[i]))
        if len(live) == len(self.steps):  # every step read, the root last: the steps as they are
            return Expr(tuple(self.steps))
        renumber: dict[int, int] = {}
        kept: list[Step] = []
        for i, step in enumerate(self.steps):
            if i in live:
                kept.append(_shift(step, renumber))
                renumber[i] = len(kept) - 1
        return Expr(tuple(kept))


@dataclass(frozen=True)
class Expr:
    """An elementwise computation over a kernel's operands, as a list of steps.

    Each step reads only steps before it; the last step is the result.  Build one with the
    builders (they share equal sub-expressions and drop unused steps):

    >>> x, b = Expr.operand(0), Expr.operand(1)
    >>> str(x.binary("add", b).unary("relu"))
    '[operand 0, operand 1, add 0 1, relu 2]'
    >>> str(x.binary("mul", Expr.const(0.5)))
    '[operand 0, const 0.5 : f32, mul 0 1]'
    """

    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("an expression needs at least one step")
        for i, step in enumerate(self.steps):
            if isinstance(step, Operand):
                if step.index < 0:
                    raise ValueError(f"step {i}: operand index {step.index} is negative")
            elif isinstance(step, Const):
                if step.elem not in dtypes.BY_NAME:
                    raise ValueError(f"step {i}: unknown element type '{step.elem}'")
            elif isinstance(step, Unary):
                if step.op not in UNARY_OPS:
                    raise ValueError(f"step {i}: unknown unary operator '{step.op}'")
            elif isinstance(step, Binary):
                if step.op not in BINARY_OPS:
                    raise ValueError(f"step {i}: unknown binary operator '{step.op}'")
            elif isinstance(step, Convert):
                if step.elem not in dtypes.BY_NAME:
                    raise ValueError(f"step {i}: unknown element type '{step.elem}'")
            elif not isinstance(step, Select):
                raise ValueError(f"step {i}: {step!r} is not a step")
            for arg in step_args(step):
                if not 0 <= arg < i:
                    raise ValueError(f"step {i} ({step}) reads step {arg}, which is not an earlier step")

    # -- builders ----------------------------------------------------------------------------

    @staticmethod
    def operand(index: int) -> Expr:
        """The kernel's operand `index`."""
        return Expr((Operand(index),))

    @staticmethod
    def const(value: float, elem: str = "f32") -> Expr:
        """A scalar constant of element type `elem`."""
        return Expr((Const(value, elem),))

    def unary(self, op: str) -> Expr:
        """`op` applied to this expression's result (`op` in `UNARY_OPS`)."""
        b = _Builder()
        root = b.splice(self)
        return b.finish(b.add(Unary(op, root)))

    def binary(self, op: str, other: Expr | float) -> Expr:
        """`op(self, other)` (`op` in `BINARY_OPS`); a float `other` is an f32 constant."""
        if not isinstance(other, Expr):
            other = Expr.const(other)
        b = _Builder()
        lhs = b.splice(self)
        rhs = b.splice(other)
        return b.finish(b.add(Binary(op, lhs, rhs)))

    def cast(self, elem: str) -> Expr:
        """This expression's result converted to element type `elem`."""
        b = _Builder()
        root = b.splice(self)
        return b.finish(b.add(Convert(root, elem)))

    @staticmethod
    def select(cond: Expr, a: Expr | float, b: Expr | float) -> Expr:
        """`a` where `cond` holds, else `b`; a float is an f32 constant."""
        a = a if isinstance(a, Expr) else Expr.const(a)
        b = b if isinstance(b, Expr) else Expr.const(b)
        builder = _Builder()
        roots = [builder.splice(e) for e in (cond, a, b)]
        return builder.finish(builder.add(Select(*roots)))

    def __add__(self, other: Expr | float) -> Expr:
        return self.binary("add", other)

    def __sub__(self, other: Expr | float) -> Expr:
        return self.binary("sub", other)

    def __mul__(self, other: Expr | float) -> Expr:
        return self.binary("mul", other)

    def __truediv__(self, other: Expr | float) -> Expr:
        return self.binary("div", other)

    def __neg__(self) -> Expr:
        return self.unary("neg")

    # -- composition (for fusion) ----------------------------------------------------------------

    def substitute(self, operands: Sequence[Expr]) -> Expr:
        """This expression with `operand i` replaced by `operands[i]` (fusing producers into it).

        `Expr.operand(0).unary("relu").substitute([a + b])` computes `relu(a + b)`.
        """
        if len(operands) < self.arity:
            raise ValueError(f"expression reads {self.arity} operands, {len(operands)} given")
        b = _Builder()
        roots = [b.splice(e) for e in operands]
        return b.finish(b.splice(self, roots))

    def remap_operands(self, mapping: Sequence[int] | Mapping[int, int]) -> Expr:
        """This expression reading operand `mapping[i]` wherever it read operand `i`."""
        read = self.operand_indices  # a mapping need not name the operands no step reads
        if self._canonical and all(mapping[i] == i for i in read):
            return self  # the rebuild would give these very steps (fusing a long chain remaps at every step)
        return self.substitute([Expr.operand(mapping[i] if i in read else 0) for i in range(self.arity)])

    def inline_operand(self, index: int, producer: Expr) -> Expr:
        """This expression with operand `index` computed by `producer` instead (vertical fusion).

        The producer's operand `j` becomes operand `arity + j`; the operands above `index` move
        down by one, so the result reads `arity - 1 + producer.arity` operands in this order: this
        expression's own (without `index`), then the producer's.

        >>> relu = Expr.operand(0).unary("relu")
        >>> str(relu.inline_operand(0, Expr.operand(0) + Expr.operand(1)))
        '[operand 0, operand 1, add 0 1, relu 2]'
        """
        arity = self.arity
        if not 0 <= index < arity:
            raise ValueError(f"operand {index} is not read by an expression of arity {arity}")
        if arity == 1 and self._canonical and producer._canonical:
            return self._appended_to(producer)
        # One builder walk, operands first: the result is already in the builders' form, so the
        # fuse pass's later remapping of it (`dedupe_operands`) is no second rebuild.
        b = _Builder()
        operands = [b.add(Operand(i)) for i in range(arity - 1 + producer.arity)]
        inlined = b.splice(producer, operands[arity - 1 :])
        own = [inlined if i == index else operands[i if i < index else i - 1] for i in range(arity)]
        return b.finish(b.splice(self, own))

    def _appended_to(self, producer: Expr) -> Expr:
        """`inline_operand(0, producer)` for this expression reading operand 0 alone, both canonical:
        the producer's steps as they are, then this expression's steps that are new.

        What the general walk gives, without walking the producer (a fused chain's producer grows
        with every fusion, the consumer stays a few steps): the producer's operands keep their numbers
        (this expression reads no other), so its steps keep their places; every step of the result is
        read, since a step of this expression that reads a step not in the producer is not in it
        either, and the first ones read the producer's last.  So the result is canonical, as its steps
        and their index are already known."""
        b = _Builder(producer)
        root = b.splice(self, [len(producer.steps) - 1])
        assert root == len(b.steps) - 1
        # Both sides' steps were checked when they were made, and splicing only renumbers their reads
        # to earlier steps: the result needs no second check (`__post_init__` walks every step).
        expr = object.__new__(Expr)
        object.__setattr__(expr, "steps", tuple(b.steps))
        known = expr.__dict__  # the cached properties, known without another walk
        known["step_index"] = b._index
        known["_canonical"] = True
        known["operand_indices"] = producer.operand_indices
        known["computed_steps"] = producer.computed_steps + len(b.steps) - len(producer.steps)
        return expr

    def dedupe_operands(self, keys: Sequence[object]) -> tuple[Expr, list[int]]:
        """Merge operands whose `keys` are equal and drop operands no step reads.

        Returns the expression over the kept operands and, for each kept operand in its new order,
        the old index it came from (`keys[i]` names operand `i`, e.g. the SSA value it will read).
        """
        first: dict[object, int] = {}
        kept: list[int] = []
        mapping: dict[int, int] = {}
        read = self.operand_indices
        for i, key in enumerate(keys):
            if i not in read:
                continue
            if key not in first:
                first[key] = len(kept)
                kept.append(i)
            mapping[i] = first[key]
        return self.remap_operands(mapping), kept

    # -- queries ----------------------------------------------------------------------------------

    @functools.cached_property
    def computed_steps(self) -> int:
        """How many steps compute (the operands' reads aside): what a fused kernel's size counts."""
        return sum(1 for step in self.steps if not isinstance(step, Operand))

    @functools.cached_property
    def _canonical(self) -> bool:
        """Whether the builders would give these very steps back: the operands read come first, in
        increasing order, no step appears twice, and every step but the last is read by a later one."""
        steps = self.steps
        first = 0
        while first < len(steps) and isinstance(steps[first], Operand):
            first += 1
        indices = [step.index for step in steps[:first] if isinstance(step, Operand)]  # all, by the loop above
        if any(b <= a for a, b in itertools.pairwise(indices)) or any(isinstance(s, Operand) for s in steps[first:]):
            return False
        if len(set(steps)) != len(steps):
            return False
        read = {arg for step in steps for arg in step_args(step)}
        return all(i in read for i in range(len(steps) - 1))

    @functools.cached_property
    def operand_indices(self) -> frozenset[int]:
        """The operand indices the steps read."""
        return frozenset(s.index for s in self.steps if isinstance(s, Operand))

    @functools.cached_property
    def step_index(self) -> dict[Step, int]:
        """Each step's index (the first, where a step appears twice): what a builder starting from this
        expression shares against.  Not to be changed."""
        index: dict[Step, int] = {}
        for i, step in enumerate(self.steps):
            index.setdefault(step, i)
        return index

    @property
    def arity(self) -> int:
        """One more than the largest operand index read (0 when no operand is read)."""
        return max(self.operand_indices, default=-1) + 1

    def __str__(self) -> str:
        return "[" + ", ".join(str(s) for s in self.steps) + "]"

    # -- text ----------------------------------------------------------------------------------

    @staticmethod
    def parse_steps(parser: AttrParser) -> Expr:
        """Parse `[step, ...]` with an xDSL parser, reporting bad steps at their position."""
        start = parser.pos
        steps = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: _parse_step(parser))
        try:
            return Expr(tuple(steps))
        except ValueError as e:
            parser.raise_error(str(e), start, parser.pos)


def _parse_step(parser: AttrParser) -> Step:
    at = parser.pos
    word = parser.parse_identifier(context_msg=" (an expression step)")
    if word == "operand":
        return Operand(parser.parse_integer(allow_boolean=False, allow_negative=False))
    if word == "const":
        value = parse_float(parser)
        parser.parse_punctuation(":")
        elem = parser.parse_identifier(context_msg=" (an element type)")
        if elem not in dtypes.BY_NAME:
            parser.raise_error(f"unknown element type '{elem}'", at, parser.pos)
        return Const(value, elem)
    if word in UNARY_OPS:
        return Unary(word, parser.parse_integer(allow_boolean=False, allow_negative=False))
    if word in BINARY_OPS:
        lhs = parser.parse_integer(allow_boolean=False, allow_negative=False)
        return Binary(word, lhs, parser.parse_integer(allow_boolean=False, allow_negative=False))
    if word == "select":
        args = [parser.parse_integer(allow_boolean=False, allow_negative=False) for _ in range(3)]
        return Select(*args)
    if word == "cast":
        arg = parser.parse_integer(allow_boolean=False, allow_negative=False)
        parser.parse_punctuation(":")
        elem = parser.parse_identifier(context_msg=" (an element type)")
        if elem not in dtypes.BY_NAME:
            parser.raise_error(f"unknown element type '{elem}'", at, parser.pos)
        return Convert(arg, elem)
    parser.raise_error(f"unknown expression step '{word}'", at, parser.pos)


# -- types -------------------------------------------------------------------------------------

_BOOL_UNARY = frozenset({"not", "isnan", "isinf"})
_BOOL_BINARY = frozenset({"equal", "less", "less_equal", "greater", "greater_equal", "and", "or", "xor"})


def broadcast_extents(shapes: Sequence[tuple[Poly, ...]]) -> tuple[Poly, ...]:
    """The ONNX (multidirectional) broadcast of `shapes`: per axis, the extent that is not 1."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Poly] = []
    for i in range(rank):
        found = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        big = [e for e in found if not (e.is_const and e.const_value == 1)]
        out.append(big[0] if big else found[0])
    return tuple(out)


def step_types(
    expr: Expr, shapes: Sequence[tuple[Poly, ...]], elems: Sequence[str]
) -> list[tuple[tuple[Poly, ...], str]]:
    """Each step's extents and Loam element type, from the operands' (`shapes[i]`, `elems[i]`)."""
    found: list[tuple[tuple[Poly, ...], str]] = []
    for step in expr.steps:
        if isinstance(step, Operand):
            found.append((tuple(shapes[step.index]), elems[step.index]))
            continue
        if isinstance(step, Const):
            found.append(((), step.elem))
            continue
        args = step_args(step)
        shape = broadcast_extents([found[a][0] for a in args])
        if isinstance(step, Convert):
            elem = step.elem
        elif isinstance(step, Select):
            elem = found[step.a][1]
        elif isinstance(step, Unary):
            elem = "bool" if step.op in _BOOL_UNARY else found[step.arg][1]
        else:
            assert isinstance(step, Binary)
            elem = "bool" if step.op in _BOOL_BINARY else found[step.lhs][1]
        found.append((shape, elem))
    return found


# -- evaluation ----------------------------------------------------------------------------------


def _function_of(source: str) -> Any:
    """The function a step's source spelling names (`np.tanh`, `_relu`: a runtime piece)."""
    if source.startswith("np."):
        return getattr(np, source[3:])
    return elementwise_kernels.PIECES[source]


def evaluate(expr: Expr, operands: Sequence[np.ndarray]) -> np.ndarray:
    """`expr` over `operands` with the functions the generated module calls (stage 0's folding):
    each step as `loam.runtime.kernels.elementwise`'s `UNARY_SOURCE` and `BINARY_SOURCE` spell it."""
    values: list[Any] = []
    with np.errstate(all="ignore"):
        for step in expr.steps:
            if isinstance(step, Operand):
                values.append(np.asarray(operands[step.index]))
            elif isinstance(step, Const):
                dtype = dtypes.by_name(step.elem).numpy
                assert dtype is not None
                values.append(np.asarray(step.value).astype(dtype))
            elif isinstance(step, Unary):
                source = elementwise_kernels.UNARY_SOURCE[step.op]
                values.append(_function_of(source)(values[step.arg]) if source else values[step.arg])
            elif isinstance(step, Binary):
                binary = _function_of(elementwise_kernels.BINARY_SOURCE[step.op])
                values.append(binary(values[step.lhs], values[step.rhs]))
            elif isinstance(step, Select):
                values.append(np.where(values[step.cond], values[step.a], values[step.b]))
            else:
                assert isinstance(step, Convert)
                dtype = dtypes.by_name(step.elem).numpy
                assert dtype is not None
                values.append(np.asarray(values[step.arg]).astype(dtype))
    return np.asarray(values[-1])
