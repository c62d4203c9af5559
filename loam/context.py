"""`make_context()`: an xDSL `Context` that knows builtin and every Loam dialect.

Why here: `loam-translate`, the tests and the pipeline all parse Loam IR text, and they must agree
on which dialects exist.  Loam's dialects are registered lazily (by name, from
`loam.dialects.get_all_dialects()`), so a context costs nothing until IR names a dialect.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError

from loam.dialects import get_all_dialects
from loam.errors import ModelError

__all__ = ["make_context", "parse_ir"]


def make_context(*, allow_unregistered: bool = False) -> Context:
    """A fresh context with `builtin` loaded and the Loam dialects registered (loaded on use)."""
    ctx = Context(allow_unregistered=allow_unregistered)
    ctx.load_dialect(Builtin)
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    return ctx


def parse_ir(text: str, name: str) -> ModuleOp:
    """Parse and verify Loam IR text; a malformed text is a ModelError naming `name` and the place."""
    try:
        module = Parser(make_context(), text, name).parse_module()
        module.verify()
    except (ParseError, DiagnosticException) as err:
        raise ModelError(str(err).strip()) from None
    return module
