"""`make_context()`: an xDSL `Context` that knows builtin and every Loam dialect.

Why here: `loam-translate`, the tests and the pipeline all parse Loam IR text, and they must agree
on which dialects exist.  Loam's dialects are registered lazily (by name, from
`loam.dialects.get_all_dialects()`), so a context costs nothing until IR names a dialect.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin

from loam.dialects import get_all_dialects

__all__ = ["make_context"]


def make_context(*, allow_unregistered: bool = False) -> Context:
    """A fresh context with `builtin` loaded and the Loam dialects registered (loaded on use)."""
    ctx = Context(allow_unregistered=allow_unregistered)
    ctx.load_dialect(Builtin)
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    return ctx
