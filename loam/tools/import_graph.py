"""The import graph of the loam distribution, read from its source: the layer order's checks.

Every module of the distribution (each `package-dir` root pyproject.toml maps, walked whole) is read
as an AST; every import counts, at module level or inside a function, absolute or relative, except
those under `if TYPE_CHECKING:` (annotations only: they never run).  `tests/test_imports.py` holds the
distribution to each check here (each returns what breaks its rule, so an empty list is a pass), and
docs/architecture.md (`loam.tools.architecture_doc`) prints the measured graph beside the declared
layers (`loam.tools.layers`).  Reading a source checkout, not an installed package.
"""

from __future__ import annotations

import ast
import functools
import sys
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from loam.tools.layers import LAYERS, Layer

ROOT = Path(__file__).resolve().parents[2]
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
    tree = _parsed(module.source, module.path or module.name)
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


@functools.lru_cache(maxsize=1024)
def _parsed(source: str, filename: str) -> ast.Module:
    """`source` parsed once (each check reads every module's imports; the page runs them all)."""
    return ast.parse(source, filename)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(modules: Mapping[str, Module]) -> list[str]:
    """Each import (or attribute read) of a private name another module defines (or of a private
    submodule of another package)."""
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
        crosses = owner != modules[imp.importer].package if owner == source else source != imp.importer
        if _private(name) and crosses:
            what = "reads" if imp.attribute else "imports"
            offenders.append(f"{imp.where(modules)}: {imp.importer} {what} {name} from {source}")
    return offenders


def import_graph(modules: Mapping[str, Module]) -> dict[str, set[str]]:
    """Module -> the distribution modules it imports."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for imp in imports(modules):
        target = _target(imp, modules)
        if target is not None:
            graph[imp.importer].add(target)
    return graph


def cycles(modules: Mapping[str, Module]) -> list[list[str]]:
    """One cycle (a -> b -> ... -> a) through each strongly connected component of the import graph
    that has one (a module importing itself is a cycle too)."""
    return _cycles_of(import_graph(modules))


def _cycles_of(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One loop through each strongly connected component of `graph` that has one (Tarjan's algorithm)."""
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


def layer_offenders(modules: Mapping[str, Module], layers: Sequence[Layer] = LAYERS) -> list[str]:
    """Each module no layer lists, and each import of a module in a higher layer than the importer's."""
    packages = {package: index for index, layer in enumerate(layers) for package in layer.packages}

    def package(name: str) -> str | None:
        found = [p for p in packages if name == p or name.startswith(p + ".")]
        return max(found, key=len) if found else None

    offenders = [f"{m.path or name}: {name} is in no layer" for name, m in modules.items() if package(name) is None]
    for imp in imports(modules):
        target = _target(imp, modules)
        if target is None:
            continue
        mine, theirs = package(imp.importer), package(target)
        if mine is None or theirs is None or packages[theirs] <= packages[mine]:
            continue
        offenders.append(
            f"{imp.where(modules)}: {imp.importer} ({layers[packages[mine]].name}) imports {target} "
            f"({layers[packages[theirs]].name}, a layer above)"
        )
    return offenders


def package_cycles(modules: Mapping[str, Module], layers: Sequence[Layer] = LAYERS) -> list[list[str]]:
    """One loop through each set of listed packages that import each other (modules grouped by package)."""
    listed = [p for layer in layers for p in layer.packages]

    def package(name: str) -> str:
        found = [p for p in listed if name == p or name.startswith(p + ".")]
        return max(found, key=len) if found else name

    grouped: dict[str, set[str]] = {}
    for name, targets in import_graph(modules).items():
        grouped.setdefault(package(name), set()).update(package(t) for t in targets if package(t) != package(name))
    for targets in list(grouped.values()):
        for target in targets:
            grouped.setdefault(target, set())
    return _cycles_of(grouped)


def _target(imp: Import, modules: Mapping[str, Module]) -> str | None:
    """The distribution module an import reaches (a submodule `from p import b` names, else the module)."""
    if imp.attribute:
        return None
    if imp.name is not None and f"{imp.module}.{imp.name}" in modules:
        return f"{imp.module}.{imp.name}"
    return imp.module if imp.module in modules else None


OPTIONAL_RUNTIME_IMPORTS = {"loam.runtime.kernels.compiled": "numba"}
"""The runtime modules that may also import an optional package (tried, and done without when absent):
every family of compiled kernels compiles through `compiled.jitted`."""


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
