"""Pieces every kernel family may read: computing halves in f32, the room a result whose extents
the run decides may take, and the one integer an operand the run gives holds."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.errors import DataError

ROOM = 2**36
"""The most elements a result whose extents the run decides may hold: `loam.core.limits.MAX_ELEMENTS`
(tests/runtime hold the two equal), which the module's prologue checks of every other buffer."""


def widened(x: np.ndarray) -> np.ndarray:
    """`x` in the dtype its arithmetic runs in: f16 and bf16 widen to f32, others stay as they are."""
    x = np.asarray(x)
    dt = x.dtype
    # `dtype.name` builds a string on every read; the type's own name is an attribute (ml_dtypes'
    # bfloat16 is a user dtype, whose name is its type's name), and only 2-byte types qualify.
    if dt.itemsize == 2 and (dt.kind == "f" or dt.type.__name__ == "bfloat16"):
        return x.astype(np.float32)
    return x


def narrowed(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`y` computed in a widened dtype, stored back as `dtype` (a no-op when it already is)."""
    y = np.asarray(y)
    return y if y.dtype is dtype or y.dtype == dtype else y.astype(dtype)


def room_for(extents: tuple[int, ...] | list[int], what: str) -> None:
    """Refuse, before it is allocated, a result of `extents` that the run's values decide (a shape,
    repeats, pads, a depth) past the elements one tensor may hold: a DataError naming `what`, not a
    MemoryError."""
    count = 1
    for extent in extents:
        count *= int(extent)
    if count > 2**36:  # ROOM (a piece is copied by its source alone)
        raise DataError(f"{what} would make {list(extents)} ({count} elements), past the {2**36} one tensor may hold")


def integers(value: np.ndarray) -> list[int]:
    """The integers an operand the run gives (a shape, bounds, pads) holds, in order."""
    return [int(v) for v in np.asarray(value).reshape(-1)]


def one_integer(value: np.ndarray, what: str) -> int:
    """The one integer `value`, an operand the run gives (a k, a size, a step), holds; more or fewer
    values are a DataError naming `what`."""
    given = np.asarray(value).reshape(-1)
    if given.size != 1:
        raise DataError(f"{what} holds {given.size} values; it must hold one")
    return int(given[0])


PIECES: dict[str, Callable[..., object]] = {
    "widened": widened,
    "narrowed": narrowed,
    "room_for": room_for,
    "integers": integers,
    "one_integer": one_integer,
}
