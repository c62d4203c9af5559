"""The names a runtime piece reads, found in its source text: what a module carrying it must carry too.

A generated module carries each runtime piece it calls (`numpy_runtime`, `wgsl_pieces`) as source
text, and a piece calls the others by name.  Which names it reads is found in the very text the
module declares, as Python's compiler resolves them (`symtable`): every name a function or class body
reads that no enclosing scope binds, and every name read where the definition runs (decorators,
default values, annotations: a generated module has no `from __future__ import annotations`, so its
annotations are evaluated).  The dependencies of a piece are those names that are other pieces, so
they cannot drift from the code.  The other names it reads are the module's imports (`np`, `json`),
the builtins, and what the module itself declares (`INPUTS`, `forward`); a standard library module
a piece reads is one the module imports (`standard_modules`).
"""

from __future__ import annotations

import symtable
import sys
import types
from collections.abc import Callable, Iterable


def reads(source: str) -> frozenset[str]:
    """The module-level names `source` (top-level definitions, as a module declares them) reads and
    does not define itself."""
    table = symtable.symtable(source, "<piece>", "exec")
    defined = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    found = {s.get_name() for s in table.get_symbols() if s.is_referenced()}  # read where a definition runs
    scopes = list(table.get_children())
    while scopes:
        scope = scopes.pop()
        found.update(s.get_name() for s in scope.get_symbols() if s.is_global() and s.is_referenced())
        scopes.extend(scope.get_children())
    return frozenset(found - defined)


def closure(roots: Iterable[str], depends: Callable[[str], Iterable[str]]) -> set[str]:
    """`roots` and every name they depend on, directly or through others (`depends(name)`)."""
    wanted: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name not in wanted:
            wanted.add(name)
            stack.extend(depends(name))
    return wanted


def standard_modules(piece: object, names: Iterable[str]) -> set[str]:
    """The standard library modules among `names` (those piece `piece` reads) that its own module
    imports under their own names (`import json`): the generated module imports them so too."""
    scope = vars(sys.modules[piece.__module__])
    found: set[str] = set()
    for name in names:
        value = scope.get(name)
        if isinstance(value, types.ModuleType) and value.__name__ == name and name in sys.stdlib_module_names:
            found.add(name)
    return found
