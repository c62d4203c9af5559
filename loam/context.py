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

from loam.dialects import get_all_dialects
from loam.errors import ModelError

__all__ = ["check_lexable", "make_context", "parse_ir"]


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
        line, column = text.count("\n", 0, offset) + 1, offset - text.rfind("\n", 0, offset)
        raise ModelError(f"{name}:{line}:{column}: {reason}")


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
    try:
        module = Parser(make_context(), text, name).parse_module()
        module.verify()
    except (ParseError, DiagnosticException) as err:
        raise ModelError(str(err).strip()) from None
    return module
