"""The import graph of the loam distribution: layers one way, no private name crosses a module, no
cycle, a plain runtime.

Every module of the distribution (each `package-dir` root pyproject.toml maps, walked whole) is read
as an AST; every import counts, at module level or inside a function, absolute or relative, except
those under `if TYPE_CHECKING:` (annotations only: they never run).  Five rules, no exceptions:

- Every module belongs to a package of `loam.tools.layers.LAYERS`, and imports only from its own
  layer and those below it.
- Within a layer, the packages' imports form no cycle (so, with the rule above, no two packages
  import each other, directly or around a loop).
- No module imports an underscore-private name (`_x`, not a dunder) that another module defines, nor
  reads one as an attribute of a module it imported (`numpy_runtime._x`); a package's private
  submodule (`from loam.back import _piece`) is for that package's modules alone.
- No import cycle among the distribution's modules: an import `a` makes of `b` (a submodule, where
  `from p import b` names one; else the module `from` names) is an edge `a -> b`, and no edge may
  close a loop.  Importing a submodule runs its parent packages' `__init__` too; those implied edges
  are not counted (a package's `__init__` may import its own submodules lazily, as
  `loam.dialects.get_all_dialects` does).  `importlib.import_module` is not seen.
- `loam.runtime`, the code generated modules carry and the build runs, imports only numpy, the
  standard library and its own modules; the one exception is `OPTIONAL_RUNTIME_IMPORTS`, numba,
  which `loam.runtime.kernels.compiled` alone imports (inside functions, where it is installed):
  every family of compiled kernels (packed and integer products, attention, LayerNorm) compiles
  through its `jitted`.

Each rule is a function of `loam.tools.import_graph` over a set of modules (docs/architecture.md prints
the same measurements), so the tests at the end feed it small synthetic
sources that break it and check that it says so.
"""

from __future__ import annotations

import tomllib

import pytest

from loam.tools.import_graph import (
    ROOT,
    RUNTIME,
    Module,
    cycles,
    distribution,
    layer_offenders,
    package_cycles,
    private_imports,
    runtime_offenders,
)
from loam.tools.layers import Layer

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


def test_no_private_name_is_imported_across_modules(modules: dict[str, Module]) -> None:
    offenders = private_imports(modules)
    assert not offenders, "private names used across modules:\n" + "\n".join(offenders)


def test_every_module_is_in_a_layer_and_imports_only_its_own_and_those_below(modules: dict[str, Module]) -> None:
    offenders = layer_offenders(modules)
    assert not offenders, "imports against the layer order (loam/tools/layers.py):\n" + "\n".join(offenders)


def test_no_two_packages_import_each_other(modules: dict[str, Module]) -> None:
    found = package_cycles(modules)
    assert not found, "packages importing each other:\n" + "\n".join(" -> ".join(c) for c in found)


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


def test_a_private_import_across_modules_is_named() -> None:
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
        loam__back__sibling="from loam.back.printer import _shared\nfrom loam.back._piece import _ok\n",
    )
    found = private_imports(modules)
    assert found == [
        "loam/core.py:1: loam.core imports _helper from loam.back.printer",
        "loam/local.py:2: loam.local imports _late from loam.back.printer",
        "loam/relative.py:1: loam.relative imports _relative from loam.back.printer",
        "loam/attribute.py:4: loam.attribute reads _table from loam.back.printer",
        "loam/back/printer.py:1: loam.back.printer imports _ok from loam.back._piece",
        "loam/other.py:1: loam.other imports _piece from loam.back",
        "loam/other.py:2: loam.other imports _piece from loam.back",
        "loam/back/sibling.py:1: loam.back.sibling imports _shared from loam.back.printer",
        "loam/back/sibling.py:2: loam.back.sibling imports _ok from loam.back._piece",
    ]


def test_an_import_from_a_higher_layer_and_a_module_in_no_layer_are_named() -> None:
    layers = (Layer("low", ("loam.core",), ""), Layer("mid", ("loam.a", "loam.b"), ""), Layer("top", ("loam",), ""))
    modules = _synthetic(
        loam__init="",
        loam__core__init="",
        loam__core__poly="def f():\n    from loam.a.rules import g\n",
        loam__a__init="",
        loam__a__rules="from loam.core import poly\nfrom loam.b.x import y\nfrom loam import testing\n",
        loam__b__init="",
        loam__b__x="from loam.a import rules\n",
        loam__testing="",
        other__init="",
    )
    assert layer_offenders(modules, layers) == [
        "other.py: other is in no layer",
        "loam/core/poly.py:2: loam.core.poly (low) imports loam.a.rules (mid, a layer above)",
        "loam/a/rules.py:3: loam.a.rules (mid) imports loam.testing (top, a layer above)",
    ]
    assert package_cycles(modules, layers) == [["loam.a", "loam.b", "loam.a"]]


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
