"""The backends' `python -m` entry: print the module a backend makes of a textual IR file.

`python -m loam.backends.numpy_module FILE.mlir` (and `wgsl_module`) parse FILE's kernel program,
verify it and print the module, as lit tests do to check a printer without a whole build.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects.builtin import ModuleOp

from loam.core.errors import LoamError


def print_module(argv: Sequence[str] | None, emit: Callable[[ModuleOp], str], command: str) -> int:
    """`python -m COMMAND FILE.mlir`: print the module `emit` makes of FILE's program (a backend's main)."""
    import sys

    from xdsl.parser import Parser

    from loam.frontends.context import make_context

    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1:
        print(f"usage: python -m {command} FILE.mlir", file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        module = Parser(make_context(), f.read(), args[0]).parse_module()
    module.verify()
    try:
        sys.stdout.write(emit(module))
    except LoamError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
