"""StableHLO text as xDSL 0.75 can read it, and where each op stands in the file.

JAX prints StableHLO with MLIR's full location syntax, which xDSL 0.75 does not read: location
aliases defined after their use (`loc(#loc35)` ... `#loc35 = loc("jit(f)/dot_general"(#loc26))`),
ranges (`loc("model.py":4:20 to :44)`), and hex floats inside `dense<...>` (`dense<0xFF800000>` is
-inf; xDSL reads it as the integer 4286578688).  `prepare` rewrites those three things in place:

- each `#alias = loc(...)` definition line is blanked (lines keep their numbers);
- each `loc(...)` becomes `loc("N")`, padded with spaces to its old width when shorter, so
  columns stay put, and `SourceText.locations["N"]` holds what the location says (its name and
  its first file:line:col, aliases resolved);
- a `dense<...>` literal of floats that holds a hex element is rewritten as its little-endian bytes,
  `dense<"0x...">`, which xDSL reads exactly.

`LocatedParser` is xDSL's parser recording each op's position (for `file:line:col` in errors) and
refusing an op no loaded dialect defines with an error that names it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import NameLoc
from xdsl.ir import Operation
from xdsl.parser import Parser

from loam.core.dtypes import by_name
from loam.core.errors import ModelError
from loam.frontends.context import line_col

__all__ = ["LocatedParser", "SourceLocation", "SourceText", "UnknownOpError", "prepare"]


@dataclass(frozen=True)
class SourceLocation:
    """What a `loc(...)` says: the first name in it (an op's JAX name, an argument's key path) and
    the first file position (the Python line that made the op)."""

    name: str | None = None
    file: str | None = None

    def __str__(self) -> str:
        parts = [p for p in (self.name, f"at {self.file}" if self.file else None) if p]
        return " ".join(parts)


@dataclass
class SourceText:
    """The text xDSL parses, the locations its `loc("N")` keys stand for, and the original text."""

    text: str
    original: str
    locations: dict[str, SourceLocation] = field(default_factory=dict[str, SourceLocation])

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based line and column of a character offset into `text` (lines are the original's)."""
        return line_col(self.text, offset)

    def location_of(self, op: Operation) -> SourceLocation | None:
        """The location an op's `loc(...)` gave, if it had one."""
        loc = op.location
        if isinstance(loc, NameLoc):
            return self.locations.get(loc.desc.data)
        return None


_STRING = r'"(?:[^"\\]|\\.)*"'
_TOKEN = re.compile(rf"({_STRING})|(\bloc\()|(\bdense<)")
_ALIAS_DEF = re.compile(r"^[ \t]*(#[A-Za-z_][\w.$-]*)[ \t]*=[ \t]*loc\(", re.M)


def prepare(text: str, source: str) -> SourceText:
    """The text with its locations and hex float literals rewritten (see the module docstring)."""
    chars = list(text)
    aliases: dict[str, str] = {}
    for alias in _ALIAS_DEF.finditer(text):
        end = _closing_paren(text, alias.end(), source)
        aliases[alias.group(1)] = text[alias.end() : end]
        line_end = text.find("\n", end)
        for i in range(alias.start(), len(text) if line_end < 0 else line_end):
            chars[i] = " "
    blanked = "".join(chars)
    out = SourceText("", text)
    resolver = _LocationResolver(aliases)
    pieces: list[str] = []
    cursor = 0
    while (m := _TOKEN.search(blanked, cursor)) is not None:
        if m.group(1) is not None:  # a string literal: nothing inside it is syntax
            pieces.append(blanked[cursor : m.end()])
            cursor = m.end()
            continue
        pieces.append(blanked[cursor : m.start()])
        if m.group(2) is not None:
            end = _closing_paren(blanked, m.end(), source)
            key = str(len(out.locations))
            out.locations[key] = resolver.resolve(blanked[m.end() : end])
            pieces.append(f'loc("{key}")'.ljust(end + 1 - m.start()))  # same width: columns stay put
            cursor = end + 1
            continue
        end = _dense_end(blanked, m.end(), source)
        pieces.append(_hex_dense(blanked, m.start(), end, source) or blanked[m.start() : end + 1])
        cursor = end + 1
    pieces.append(blanked[cursor:])
    out.text = "".join(pieces)
    return out


def _closing_paren(text: str, start: int, source: str) -> int:
    """The offset of the `)` closing the parenthesis opened just before `start` (strings skipped)."""
    depth, i = 1, start
    while i < len(text):
        ch = text[i]
        if ch == '"':
            m = re.compile(_STRING).match(text, i)
            i = m.end() if m else i + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise _fail(text, source, start, "unterminated loc(...)")


def _dense_end(text: str, start: int, source: str) -> int:
    """The offset of the `>` ending a `dense<` literal whose body starts at `start`."""
    i = start
    while i < len(text):
        if text[i] == '"':
            m = re.compile(_STRING).match(text, i)
            i = m.end() if m else i + 1
            continue
        if text[i] == ">":
            return i
        i += 1
    raise _fail(text, source, start, "unterminated dense<...> literal")


def _fail(text: str, source: str, offset: int, message: str) -> ModelError:
    line, column = line_col(text, offset)
    return ModelError(f"{source}:{line}:{column}: {message}")


_HEX = re.compile(r"0x[0-9A-Fa-f]+")
_TENSOR_TYPE = re.compile(r"\s*:\s*tensor<((?:[0-9?]+x)*)(f16|bf16|f32|f64)>")
_ELEMENT = re.compile(r"0x[0-9A-Fa-f]+|[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|inf|nan)|true|false")


def _hex_dense(text: str, start: int, end: int, source: str) -> str | None:
    """`dense<ELEMENTS>` (from `start` to the `>` at `end`) followed by `: tensor<...xF>` and holding
    a hex float, as `dense<"0x...">`; None when the literal needs no rewriting."""
    body = text[start + len("dense<") : end]
    if '"' in body or not _HEX.search(body):
        return None
    m = _TENSOR_TYPE.match(text, end + 1)
    if m is None:
        return None  # an integer literal: xDSL reads hex integers right
    dims = [d for d in m.group(1).split("x") if d]
    if "?" in dims:
        raise _fail(text, source, start, "a dense<...> literal of a dynamic shape")
    dtype = by_name(m.group(2)).numpy
    assert dtype is not None
    bits = np.dtype(f"<u{dtype.itemsize}")
    words: list[int] = []
    for token in _ELEMENT.findall(body):
        if token.startswith("0x"):
            words.append(int(token, 16) & ((1 << (8 * dtype.itemsize)) - 1))
        else:
            words.append(int(np.array(float(token), dtype=dtype).view(bits)))
    count = int(np.prod([int(d) for d in dims])) if dims else 1
    if len(words) == 1:
        words *= count  # a splat
    if len(words) != count:
        raise _fail(text, source, start, f"dense<...> holds {len(words)} elements for a shape of {count}")
    data = np.array(words, dtype=np.uint64).astype(bits).tobytes()
    return f'dense<"0x{data.hex().upper()}">'


class _LocationResolver:
    """Reads MLIR location syntax (aliases, names, file positions, call sites, fused locations)."""

    _TOKENS = re.compile(rf"\s*({_STRING}|#[\w.$-]+|[A-Za-z_][\w]*|\d+|[()\[\]<>:,]|\S)")

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases
        self.resolved: dict[str, SourceLocation] = {}
        self.resolving: set[str] = set()

    def resolve(self, body: str) -> SourceLocation:
        tokens = [t for t in self._TOKENS.findall(body) if t]
        return self._location(tokens, 0)[0]

    def _alias(self, name: str) -> SourceLocation:
        if name in self.resolved:
            return self.resolved[name]
        if name not in self.aliases or name in self.resolving:
            return SourceLocation()  # an undefined or cyclic alias names nothing
        self.resolving.add(name)
        self.resolved[name] = self.resolve(self.aliases[name])
        self.resolving.discard(name)
        return self.resolved[name]

    def _location(self, tokens: list[str], i: int) -> tuple[SourceLocation, int]:
        """One location starting at token i: (what it says, the index after it)."""
        if i >= len(tokens):
            return SourceLocation(), i
        head = tokens[i]
        if head.startswith("#"):
            return self._alias(head), i + 1
        if head.startswith('"'):
            text = _unquote(head)
            i += 1
            if i < len(tokens) and tokens[i] == ":":  # "file":line:col [to [line:]col]
                position = [text]
                while i < len(tokens) and tokens[i] == ":" and i + 1 < len(tokens) and tokens[i + 1].isdigit():
                    position.append(tokens[i + 1])
                    i += 2
                if i < len(tokens) and tokens[i] == "to":
                    i += 1
                    while i < len(tokens) and (tokens[i] == ":" or tokens[i].isdigit()):
                        i += 1
                return SourceLocation(file=":".join(_short_path(p) if n == 0 else p for n, p in enumerate(position))), i
            if i < len(tokens) and tokens[i] == "(":  # "name"(child)
                child, i = self._location(tokens, i + 1)
                i = _skip(tokens, i, ")")
                return SourceLocation(text, child.file), i
            return SourceLocation(name=text), i
        if head in ("callsite", "fused"):
            parts: list[SourceLocation] = []
            i += 1
            if i < len(tokens) and tokens[i] == "<":  # fused<metadata>
                while i < len(tokens) and tokens[i] != ">":
                    i += 1
                i += 1
            closing = {"(": ")", "[": "]"}.get(tokens[i] if i < len(tokens) else "", "")
            i += 1
            while i < len(tokens) and tokens[i] != closing:
                if tokens[i] in (",", "at"):
                    i += 1
                    continue
                part, i = self._location(tokens, i)
                parts.append(part)
            return _first_of(parts), i + 1
        return SourceLocation(), i + 1  # `unknown` and anything unforeseen


def _first_of(parts: list[SourceLocation]) -> SourceLocation:
    name = next((p.name for p in parts if p.name), None)
    return SourceLocation(name, next((p.file for p in parts if p.file), None))


def _skip(tokens: list[str], i: int, token: str) -> int:
    return i + 1 if i < len(tokens) and tokens[i] == token else i


def _unquote(literal: str) -> str:
    return re.sub(r"\\(.)", r"\1", literal[1:-1])


def _short_path(path: str) -> str:
    """A file name without its folders: error messages stay readable and machine-independent."""
    return path.replace("\\", "/").rsplit("/", 1)[-1]


class UnknownOpError(Exception):
    """An op no loaded dialect defines, at a character offset of the text."""

    def __init__(self, op_name: str, offset: int) -> None:
        super().__init__(op_name)
        self.op_name = op_name
        self.offset = offset


class LocatedParser(Parser):
    """xDSL's parser, recording where each op starts and refusing unknown ops by name."""

    def __init__(self, ctx: Context, source: SourceText, name: str) -> None:
        super().__init__(ctx, source.text, name)
        self.offsets: dict[Operation, int] = {}
        self._starts: list[int] = []

    def parse_operation(self) -> Operation:
        self._starts.append(self.pos)
        try:
            op = super().parse_operation()
        finally:
            start = self._starts.pop()
        self.offsets[op] = start
        return op

    def _get_op_by_name(self, name: str) -> type[Operation]:
        # xDSL's own lookup (a private method of Parser in xDSL 0.75) raises a bare "not registered";
        # the reader's error names the op and says which ops it reads.
        op_type = self.ctx.get_optional_op(name, dialect_stack=self._parser_state.dialect_stack)
        if op_type is None:
            raise UnknownOpError(name, self._starts[-1] if self._starts else self.pos)
        return op_type
