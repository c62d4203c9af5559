"""Library kernels for plain matrix products (see `loam/runtime/kernels/__init__.py`).

A `kernel.matmul` is `np.matmul`.  For a stack of rows times one matrix (a linear layer over
[Batch, Seq, Hidden]) numpy's matmul calls BLAS once per leading index: eight calls of 128 rows for
a batch of 8 sentences.  When the rows lie in memory as one matrix, a single call over all of them
gives BLAS room to block: about 15% faster for MiniLM's layers at one thread.  Each element is the
same dot product either way; only BLAS's blocking (and so the order of its float32 sums) may differ.
"""

from __future__ import annotations

import numpy as np


def _matmul_rows(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """np.matmul(a, b, out=out) for `a` [..., K] of rank at least 3 and `b` [K, N]: one product over all
    of `a`'s rows when they are contiguous (and `out` too), else numpy's own loop."""
    if a.flags.c_contiguous and a.size and b.ndim == 2 and (out is None or out.flags.c_contiguous):
        k, n = a.shape[-1], b.shape[1]
        rows = a.size // k
        flat = np.matmul(a.reshape(rows, k), b, out=None if out is None else out.reshape(rows, n))
        return out if out is not None else flat.reshape((*a.shape[:-1], n))
    return np.matmul(a, b, out=out)


PIECES: dict[str, object] = {"_matmul_rows": _matmul_rows}
DEPENDS: dict[str, tuple[str, ...]] = {}
