"""How big a model Loam compiles: every size limit, in one place.

A model file states sizes it does not pay for: an initializer may declare 2^40 elements in a dozen
bytes, a ConstantOfShape may ask for 2^62, a graph may nest If branches a thousand deep.  Loam checks
each size where it enters (the ONNX importer, stage 0's folding, the generated module's prologue)
and refuses what is past these limits with a `LoamError` that names the tensor or node and the
limit, before it allocates or recurses: never a `MemoryError`, a `RecursionError`, numpy's
`array is too big` or a hang.

- `MAX_RANK`: the most axes a tensor may have (a declared type, an initializer, a folded value, a
  value stage 0 infers).  numpy holds at most 64; no ONNX model needs more than a handful.
- `MAX_ELEMENTS`: the most elements one tensor may have, declared or inferred (2^36: 256 GiB of f32,
  past any machine the module will run on).  Checked by the importer (types and initializers), by
  stage 0 (every value whose extents are numbers) and by a generated module's prologue (`_room`).
- `MAX_FOLD_ELEMENTS`: the most elements stage 0 computes at build time for one value
  (ConstantOfShape, Expand, Tile, Range).  A larger ConstantOfShape, Expand or Tile is left to the
  module, which computes it per call; a larger Range over numbers is refused.
- `MAX_NODES`: the most nodes a model may hold, its subgraphs' included.  The one limit a real user
  may need to raise (a model exported with every loop unrolled): set `LOAM_MAX_NODES` in the
  environment.
- `MAX_NESTING`: the most graphs nested inside one another (If/Loop/Scan bodies; the top graph is
  depth 1).  Readers and passes recurse once per level, so this bounds their stack.

The others are constants, not settings: raising them moves a clean refusal into an allocation the
machine cannot make.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

from loam.core.errors import LoamError, ModelError, ShapeError

__all__ = [
    "MAX_ELEMENTS",
    "MAX_FOLD_ELEMENTS",
    "MAX_NESTING",
    "MAX_NODES",
    "MAX_RANK",
    "LimitError",
    "check_extents",
    "foldable",
    "max_nodes",
]

MAX_RANK = 32
MAX_ELEMENTS = 2**36
MAX_FOLD_ELEMENTS = 2**26
MAX_NODES = 500_000
MAX_NESTING = 64


class LimitError(ModelError):
    """A model states a size past one of Loam's limits (`loam.core.limits`)."""


def max_nodes() -> int:
    """`MAX_NODES`, or `LOAM_MAX_NODES` from the environment where it is set (a positive integer)."""
    text = os.environ.get("LOAM_MAX_NODES")
    if text is None:
        return MAX_NODES
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise LoamError(f"LOAM_MAX_NODES={text!r} must be a positive integer")
    return value


def check_extents(extents: Iterable[int], where: str, *, error: type[LoamError] = LimitError) -> int:
    """The element count of a tensor with `extents`, or an `error` naming `where` and the limit it passes."""
    dims = list(extents)
    if len(dims) > MAX_RANK:
        raise error(f"{where}: rank {len(dims)} is past Loam's limit of {MAX_RANK} axes (loam.core.limits.MAX_RANK)")
    count = math.prod(dims)
    if count > MAX_ELEMENTS:
        raise error(
            f"{where}: extents [{', '.join(map(str, dims))}] hold {count} elements, past Loam's limit of "
            f"2^{MAX_ELEMENTS.bit_length() - 1} for one tensor (loam.core.limits.MAX_ELEMENTS)"
        )
    return count


def foldable(extents: Iterable[int], where: str) -> bool:
    """Whether stage 0 may compute a value of `extents` at build time; a ShapeError past `MAX_ELEMENTS`."""
    return check_extents(extents, where, error=ShapeError) <= MAX_FOLD_ELEMENTS
