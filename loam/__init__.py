"""Loam: Lowered Operators, Ahead-of-time Modules.

The public Python API: `loam.build(model, checkpoints=(), options=None)` compiles an ONNX model into
a module and returns a `BuildResult` (`.source`, `.report`, `.module`); `loam.Options` is the typed
options object the CLI flags and the TOML file fill.  See README.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loam.core.errors import LoamError

if TYPE_CHECKING:
    from loam.driver.options import Options
    from loam.driver.pipeline import BuildResult, build

__all__ = ["BuildResult", "LoamError", "Options", "build"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so `import loam` (and every console script) stays cheap.
    if name in ("build", "BuildResult"):
        from loam.driver import pipeline

        return getattr(pipeline, name)
    if name == "Options":
        from loam.driver.options import Options

        return Options
    raise AttributeError(f"module 'loam' has no attribute {name!r}")
