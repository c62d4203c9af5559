"""The errors a generated module raises: it cannot import Loam's, so it carries these.

`ShapeError`: `forward` was given inputs that disagree with the graph, or that break a condition the
build owed (`loam.runtime.prologue`).  `LoadError`: `Weights.load` was given a checkpoint that is
malformed or disagrees with the graph (`loam.runtime.weights`).  Both are `ValueError`s.
"""

from __future__ import annotations


class ShapeError(ValueError):
    """`forward` was given an input that disagrees with the graph: kind, dtype, rank or an extent."""


class LoadError(ValueError):
    """`Weights.load` was given a checkpoint (safetensors or GGUF) that is malformed or disagrees with the graph."""


PIECES: dict[str, object] = {"ShapeError": ShapeError, "LoadError": LoadError}
DEPENDS: dict[str, tuple[str, ...]] = {}
