"""Pieces every kernel family may read: computing halves in f32."""

from __future__ import annotations

import numpy as np


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


PIECES: dict[str, object] = {"widened": widened, "narrowed": narrowed}
DEPENDS: dict[str, tuple[str, ...]] = {}
