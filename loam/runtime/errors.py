"""The errors a generated module raises: it cannot import Loam's, so it carries these.

`ShapeError`: `forward` was given inputs that disagree with the graph, or that break a condition the
build owed (`loam.runtime.prologue`).  `DataError`: an input's values lie outside what an operator
defines (a class index beyond the classes of a loss), found by the kernel that reads them.
`LoadError`: `Weights.load` was given a checkpoint that is malformed or disagrees with the graph
(`loam.runtime.weights`).  All are `ValueError`s.
"""

from __future__ import annotations

from collections.abc import Callable


class ShapeError(ValueError):
    """`forward` was given an input that disagrees with the graph: kind, dtype, rank or an extent."""


class DataError(ValueError):
    """`forward` was given input values an operator does not define a result for; the message names them."""


class LoadError(ValueError):
    """`Weights.load` was given a checkpoint (safetensors or GGUF) that is malformed or disagrees with the graph."""


PIECES: dict[str, Callable[..., object]] = {"ShapeError": ShapeError, "DataError": DataError, "LoadError": LoadError}
