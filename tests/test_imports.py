"""The import graph of the loam distribution: no private name crosses a package, no cycle, a plain runtime.

Every module of the distribution (each `package-dir` root pyproject.toml maps, walked whole) is read
as an AST; every import counts, at module level or inside a function, absolute or relative, except
those under `if TYPE_CHECKING:` (annotations only: they never run).  Three rules, no exceptions:

- No module imports an underscore-private name (`_x`, not a dunder) that a module of another
  package defines, nor reads one as an attribute of a module it imported (`numpy_runtime._x`).  A
  module's package is its parent package (a package's `__init__` is its own package); a name a
  package keeps private is for that package's modules alone.
- No import cycle among the distribution's modules: an import `a` makes of `b` (a submodule, where
  `from p import b` names one; else the module `from` names) is an edge `a -> b`, and no edge may
  close a loop.  Importing a submodule runs its parent packages' `__init__` too; those implied edges
  are not counted (a package's `__init__` may import its own submodules lazily, as
  `loam.dialects.get_all_dialects` does).  `importlib.import_module` is not seen.
- `loam.runtime`, the code generated modules carry and the build runs, imports only numpy, the
  standard library and its own modules; the one exception is `OPTIONAL_RUNTIME_IMPORTS`, numba,
  which `loam.runtime.kernels.compiled` tries (inside a function) for the packed products.

Each rule is a function over a set of modules, so the tests at the end feed it small synthetic
sources that break it and check that it says so.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = "loam.runtime"


@dataclass(frozen=True)
class Module:
    """One module of the distribution: its dotted name, source, whether it is a package's `__init__`."""

    name: str
    source: str
    is_package: bool = False
    path: str = ""

    @property
    def package(self) -> str:
        """The package the module belongs to: itself for an `__init__`, else its parent."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Import:
    """`from module import name` (or `import module`, name None) at `line` of `importer`; `attribute`
    marks a private attribute read off an imported module (`module.name`) rather than an import."""

    importer: str
    line: int
    module: str
    name: str | None = None
    attribute: bool = False

    def where(self, modules: Mapping[str, Module]) -> str:
        path = modules[self.importer].path or self.importer
        return f"{path}:{self.line}"


def distribution() -> dict[str, Module]:
    """Every module of the loam distribution, from the `package-dir` roots of pyproject.toml."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    roots: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    modules: dict[str, Module] = {}
    for package, folder in roots.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join([package, *(parts[:-1] if is_package else parts)])
            source = path.read_text(encoding="utf-8")
            modules[name] = Module(name, source, is_package, str(path.relative_to(ROOT)))
    return modules


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of `tree` except the bodies of `if TYPE_CHECKING:` (their `else` counts)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _absolute(module: Module, level: int, name: str | None) -> str:
    """The absolute module a relative import `from .name` (dots: `level`) of `module` means."""
    base = module.name if module.is_package else module.name.rpartition(".")[0]
    for _ in range(level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{name}" if name else base


def imports(modules: Mapping[str, Module]) -> list[Import]:
    """Every import each module makes (module level or local, absolute or relative), and every
    private attribute it reads off a distribution module it imported."""
    found: list[Import] = []
    for module in modules.values():
        found += sorted(_imports_of(module, modules), key=lambda imp: imp.line)
    return found


def _imports_of(module: Module, modules: Mapping[str, Module]) -> list[Import]:
    found: list[Import] = []
    tree = ast.parse(module.source, module.path or module.name)
    bound: dict[str, str] = {}  # a local name -> the distribution module an import bound it to
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(module.name, node.lineno, alias.name))
                if alias.name in modules:
                    # `import a.b` binds `a` (reading `a.b._x` then); `import a.b as c` binds `c`.
                    name = alias.asname or alias.name.split(".")[0]
                    bound[name] = alias.name if alias.asname else name
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node.level, node.module) if node.level else str(node.module)
            for alias in node.names:
                found.append(Import(module.name, node.lineno, source, alias.name))
                if f"{source}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
    for node in _nodes(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain: list[str] = []
            base = node.value
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                target = ".".join([bound[base.id], *reversed(chain)])
                if target in modules:
                    found.append(Import(module.name, node.lineno, target, node.attr, attribute=True))
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(modules: Mapping[str, Module]) -> list[str]:
    """Each import (or attribute read) of a private name another package's module defines."""
    offenders: list[str] = []
    for imp in imports(modules):
        if imp.name is None:  # `import a.b._c`: the module `_c` is private to package `a.b`
            if imp.module not in modules:
                continue  # not the distribution's
            owner, _, name = imp.module.rpartition(".")
            source = owner
        elif f"{imp.module}.{imp.name}" in modules and not imp.attribute:  # `from a.b import _c`
            owner, name, source = imp.module, imp.name, imp.module
        elif imp.module in modules:  # a name `imp.module` defines
            owner, name, source = modules[imp.module].package, imp.name, imp.module
        else:
            continue  # not the distribution's
        if _private(name) and owner != modules[imp.importer].package:
            what = "reads" if imp.attribute else "imports"
            offenders.append(f"{imp.where(modules)}: {imp.importer} {what} {name} from {source}")
    return offenders


def import_graph(modules: Mapping[str, Module]) -> dict[str, set[str]]:
    """Module -> the distribution modules it imports."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for imp in imports(modules):
        if imp.attribute:
            continue
        submodule = f"{imp.module}.{imp.name}"
        if imp.name is not None and submodule in modules:
            graph[imp.importer].add(submodule)
        elif imp.module in modules:
            graph[imp.importer].add(imp.module)
    return graph


def cycles(modules: Mapping[str, Module]) -> list[list[str]]:
    """One cycle (a -> b -> ... -> a) through each strongly connected component of the import graph
    that has one (Tarjan's algorithm; a module importing itself is a cycle too)."""
    graph = import_graph(modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: set[str] = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                components.append(component)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return [_loop(graph, component) for component in components]


def _loop(graph: Mapping[str, set[str]], component: set[str]) -> list[str]:
    """A shortest loop from the component's first module back to it, within the component."""
    start = min(component)
    paths: dict[str, list[str]] = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    following.append(w)
        frontier = following
    raise AssertionError(f"no loop through {start}")  # a component always has one


OPTIONAL_RUNTIME_IMPORTS = {"loam.runtime.kernels.compiled": "numba"}
"""The runtime module that may also import an optional package (tried, and done without when absent)."""


def runtime_offenders(modules: Mapping[str, Module]) -> list[str]:
    """Each import a `loam.runtime` module makes of something but numpy, the standard library,
    `loam.runtime` itself and its `OPTIONAL_RUNTIME_IMPORTS`."""
    offenders: list[str] = []
    for imp in imports(modules):
        if imp.attribute or not (imp.importer == RUNTIME or imp.importer.startswith(RUNTIME + ".")):
            continue
        if imp.name is None and OPTIONAL_RUNTIME_IMPORTS.get(imp.importer) == imp.module:
            continue
        target = imp.module if imp.name is None else f"{imp.module}.{imp.name}"
        top = imp.module.split(".")[0]
        own = imp.module == RUNTIME or imp.module.startswith(RUNTIME + ".")
        if not (own or top == "numpy" or top in sys.stdlib_module_names):
            offenders.append(f"{imp.where(modules)}: {imp.importer} imports {target}")
    return offenders


# -- the distribution ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return distribution()


def test_the_scan_sees_every_package(modules: dict[str, Module]) -> None:
    """Each package pyproject.toml lists is scanned (so a new package cannot escape the rules)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    scanned = {m.name for m in modules.values() if m.is_package}
    assert listed - {"loam.grammar"} <= scanned  # loam.grammar holds only .lark files
    assert {"loam.runtime", "loam.runtime.kernels", "loam.backends", "loam.ops"} <= scanned
    assert len(modules) > 100


def test_no_private_name_is_imported_across_packages(modules: dict[str, Module]) -> None:
    offenders = private_imports(modules)
    assert not offenders, "private names used across packages:\n" + "\n".join(offenders)


def test_no_import_cycle(modules: dict[str, Module]) -> None:
    found = cycles(modules)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_runtime_imports_only_numpy_the_standard_library_and_itself(modules: dict[str, Module]) -> None:
    assert any(name.startswith(RUNTIME + ".") for name in modules)
    offenders = runtime_offenders(modules)
    assert not offenders, "loam.runtime imports beyond numpy and the standard library:\n" + "\n".join(offenders)


# -- each rule can fail -------------------------------------------------------------------------


def _synthetic(**sources: str) -> dict[str, Module]:
    """Modules from `name=source` (dots spelled `__`; a trailing `__init` marks a package)."""
    modules: dict[str, Module] = {}
    for key, source in sources.items():
        is_package = key.endswith("__init")
        name = key.removesuffix("__init").replace("__", ".")
        modules[name] = Module(name, source, is_package, f"{name.replace('.', '/')}.py")
    return modules


def test_a_private_import_across_packages_is_named() -> None:
    modules = _synthetic(
        loam__init="",
        loam__core="from loam.back.printer import _helper\n",
        loam__local="def f():\n    from loam.back.printer import _late\n",
        loam__relative__init="from ..back.printer import _relative\n",
        loam__attribute="from loam.back import printer\n\ndef f():\n    return printer._table\n",
        loam__hinted="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from loam.back.printer import _Hint\n",
        loam__back__init="from loam.back import _piece\n",
        loam__back__printer="from loam.back._piece import _ok\nfrom loam.back.printer import __all__\n",
        loam__back___piece="_ok = 1\n",
        loam__other="import loam.back._piece\nfrom loam.back import _piece\n",
    )
    found = private_imports(modules)
    assert found == [
        "loam/core.py:1: loam.core imports _helper from loam.back.printer",
        "loam/local.py:2: loam.local imports _late from loam.back.printer",
        "loam/relative.py:1: loam.relative imports _relative from loam.back.printer",
        "loam/attribute.py:4: loam.attribute reads _table from loam.back.printer",
        "loam/other.py:1: loam.other imports _piece from loam.back",
        "loam/other.py:2: loam.other imports _piece from loam.back",
    ]


def test_an_import_cycle_is_named_even_through_a_local_import() -> None:
    modules = _synthetic(
        loam__init="",
        loam__a="from loam import b\n",
        loam__b="def f():\n    from loam.c import g\n",
        loam__c="import loam.a\n",
        loam__d="from loam import a\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from loam import e\n",
        loam__e="from loam.d import x\n",
        loam__f="from . import f\n",
    )
    assert cycles(modules) == [["loam.a", "loam.b", "loam.c", "loam.a"], ["loam.f", "loam.f"]]


def test_a_runtime_import_of_anything_but_numpy_and_the_standard_library_is_named() -> None:
    modules = _synthetic(
        loam__init="",
        loam__dtypes="",
        loam__runtime__init="from loam.runtime import pieces\n",
        loam__runtime__pieces=(
            "import json\nimport numpy as np\nfrom numpy.lib import stride_tricks\nfrom . import kernels\n"
            "from loam import dtypes\nimport xdsl.ir\n\ndef f():\n    import onnx\n"
        ),
        loam__runtime__kernels="from .pieces import _shared\nfrom ..dtypes import F32\nimport numba\n",
        loam__runtime__kernels__compiled="def get():\n    import numba\n    from numba import prange\n",
    )
    assert runtime_offenders(modules) == [
        "loam/runtime/pieces.py:5: loam.runtime.pieces imports loam.dtypes",
        "loam/runtime/pieces.py:6: loam.runtime.pieces imports xdsl.ir",
        "loam/runtime/pieces.py:9: loam.runtime.pieces imports onnx",
        "loam/runtime/kernels.py:2: loam.runtime.kernels imports loam.dtypes.F32",
        "loam/runtime/kernels.py:3: loam.runtime.kernels imports numba",
        "loam/runtime/kernels/compiled.py:3: loam.runtime.kernels.compiled imports numba.prange",
    ]
