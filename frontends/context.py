"""`make_context()`: an xDSL `Context` that knows builtin and every Loam dialect.

Why here: `loam-translate`, the tests and the pipeline all parse Loam IR text, and they must agree
on which dialects exist.  Loam's dialects are registered lazily (by name, from
`loam.dialects.get_all_dialects()`), so a context costs nothing until IR names a dialect.
"""

from __future__ import annotations

import re

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError

from loam.core.errors import ModelError
from loam.dialects import get_all_dialects

__all__ = ["PARSE_FAILURES", "check_lexable", "line_col", "make_context", "parse_failure", "parse_ir"]


def make_context(*, allow_unregistered: bool = False) -> Context:
    """A fresh context with `builtin` loaded and the Loam dialects registered (loaded on use)."""
    ctx = Context(allow_unregistered=allow_unregistered)
    ctx.load_dialect(Builtin)
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    return ctx


# MLIR's string literal as xDSL 0.75's lexer reads it (no newline inside; escapes \n \t \\ \" and two hex
# digits), with possessive repeats.  xDSL's own pattern nests `+` inside `*`, so on a literal that never
# closes, or holds another escape, it backtracks exponentially: a damaged file would hang the parser.
_LITERAL = re.compile(r'"(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"')
# What the scan stops at: a comment (skipped whole), a string literal's opening quote, or an integer
# type's width (`i32`, `si8`, `ui4`, `2x?xi8`; not an SSA, symbol or attribute name that looks like one).
_SCAN = re.compile(r'//[^\n]*|"|(?:(?<![\w%@^#!.$-])|(?<=[\d?]x))[su]?i(\d{8,})\b')
MAX_INTEGER_WIDTH = 16_777_215
"""MLIR's own bound on an integer type's width (`IntegerType::kMaxWidth`).  xDSL has none, and computes
a type's value range as Python integers: `i9999999999` would exhaust memory."""


def check_lexable(text: str, name: str) -> None:
    """Refuse, as a ModelError naming `name`, the line and the column, text that xDSL's parser must not
    be given: an unterminated string literal, or an integer type too wide.  A linear scan, run before
    the parser by every reader of MLIR text."""
    if (bad := _unlexable(text)) is not None:
        offset, reason = bad
        raise ModelError(f"{name}:{_line_col(text, offset)}: {reason}")


PARSE_FAILURES = (ParseError, DiagnosticException, NotImplementedError, ArithmeticError, ValueError)
"""What xDSL 0.75's parser raises on malformed text: a ParseError, and besides it a literal out of its type's
range (VerifyException), a dense array of an integer width it cannot pack (NotImplementedError) or of width 0
(ZeroDivisionError), a value an attribute's constructor refuses (ValueError)."""


def parse_failure(err: Exception, text: str, name: str, offset: int) -> ModelError:
    """`err`, one of PARSE_FAILURES raised while the parser stood at `offset` of `text`, as a ModelError
    naming `name`, the line and the column (a ParseError's own place where it has one)."""
    if isinstance(err, ParseError):
        return ModelError(f"{name}:{_line_col(text, err.span.start)}: {err.msg}")
    return ModelError(f"{name}:{_line_col(text, offset)}: a literal or attribute here cannot be read ({err})")


def line_col(text: str, offset: int) -> tuple[int, int]:
    """The 1-based line and column of character `offset` of `text`."""
    return text.count("\n", 0, offset) + 1, offset - text.rfind("\n", 0, offset)


def _line_col(text: str, offset: int) -> str:
    line, column = line_col(text, offset)
    return f"{line}:{column}"


def _unlexable(text: str) -> tuple[int, str] | None:
    pos = 0
    while (m := _SCAN.search(text, pos)) is not None:
        if m.group(1) is not None:
            if int(m.group(1)) > MAX_INTEGER_WIDTH:
                return m.start(), f"an integer type of width {m.group(1)} (MLIR's limit is {MAX_INTEGER_WIDTH})"
            pos = m.end()
        elif m.group() == '"':
            literal = _LITERAL.match(text, m.start())
            if literal is None:
                return m.start(), (
                    "a string literal that does not close on its line, or holds an escape other than "
                    '\\n, \\t, \\\\, \\" or two hex digits'
                )
            pos = literal.end()
        else:
            pos = m.end()
    return None


def parse_ir(text: str, name: str) -> ModuleOp:
    """Parse and verify Loam IR text; a malformed text is a ModelError naming `name` and the place."""
    check_lexable(text, name)
    parser: Parser | None = None
    try:
        parser = Parser(make_context(), text, name)  # lexes the first token: a ParseError may come here
        module = parser.parse_module()
    except PARSE_FAILURES as err:
        raise parse_failure(err, text, name, parser.pos if parser else 0) from None
    try:
        module.verify()
    except DiagnosticException as err:
        raise ModelError(f"{name}: {str(err).strip()}") from None
    return module
