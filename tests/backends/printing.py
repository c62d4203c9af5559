"""Printing hand-written kernel programs with the numpy backend, for the backend tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from xdsl.parser import Parser

from loam.backends.numpy_module import emit_python
from loam.frontends.context import make_context

T = "!tensor_axes.tensor"


def t(elem: str, axes: str) -> str:
    """The text of a named-axes tensor type: `t("f32", "N: 2")`."""
    return f"{T}<{elem}, [{axes}]>"


def forward_of(source: str) -> str:
    """The text of a module's `forward` (from its `def` to the banner the runtime follows)."""
    from loam.backends.module_printer import RUNTIME_BANNER

    return source[source.index("def forward") :].split(RUNTIME_BANNER)[0]


def emit(text: str) -> str:
    """The numpy module printed from the kernel-dialect program `text`."""
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return emit_python(module)


def load(text: str, tmp_path: Path, name: str = "gen") -> ModuleType:
    """The module printed from `text`, written under `tmp_path` and imported."""
    path = tmp_path / f"{name}.py"
    path.write_text(emit(text))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
