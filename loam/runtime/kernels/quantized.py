"""Library kernels over weights kept in ggml's block form (see `loam/runtime/kernels/__init__.py`).

A GGUF checkpoint stores a linear layer's weight W [N, K] (output features by input features) as
rows of 32-element blocks along K (`Q4_0`, `Q4_1`, `Q8_0`: `loam/runtime/dequant.py` describes
them).  The `pack-quantized` pass gives products and gathers over such a weight these kernels, and
`Weights` keeps the blocks as they are stored (a structured array [N, K / 32], a view of the file),
so the module holds about an eighth of the float32 bytes for a 4-bit weight.

Both kernels also take a plain float32 weight (a checkpoint that stores it unquantized): the
packing is the checkpoint's choice, and the module computes the same product either way.

- `kernel_matmul_packed(x, w, transposed=1)`: x @ W^T (`transposed=0`: x @ W for W [K, N], its rows
  widened a group at a time and their share of the product accumulated).  For a few rows of x (a
  decode step) the blocks are never widened: where numba is installed, compiled row kernels read
  each block's bytes once (`loam/runtime/kernels/compiled.py`); else each block's dot product is
  taken with its integers and scaled after, so
  W x = sum over blocks of d * (q . x) (+ m * sum(x) for Q4_1, - 8 d * sum(x) for Q4_0).  For more
  rows (a prefill) a bounded group of W's rows is dequantized into scratch and multiplied by BLAS.
- `kernel_gather_packed(w, indices, axis=0)`: the rows of W at `indices` (an embedding lookup),
  dequantized after they are picked.

Every element is computed in float32 from the blocks' f16 scales widened to float32, as ggml and
`dequant_blocks` do, so a product differs from the product over the dequantized weight only in
the order its float32 sums are taken.
"""

from __future__ import annotations

import numpy as np

from loam.runtime.dequant import block_integers, dequant_blocks
from loam.runtime.kernels.compiled import _matmul_packed_compiled


def kernel_matmul_packed(x: np.ndarray, w: np.ndarray, *, transposed: int) -> np.ndarray:
    """x [..., K] @ W^T for W [N, K] (`transposed`), else x @ W for W [K, N]; W is blocks [rows,
    row length / 32] of a ggml encoding, or a plain array."""
    if w.dtype.names is None:
        plain = np.asarray(w, dtype=np.float32)
        # One product over every row (np.matmul would multiply each leading index of x apart, reading W each time).
        flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
        if transposed and 2 <= flat.shape[0] <= 64:
            # A few rows against W [N, K] stored row-major: W @ x^T streams W once along its rows; OpenBLAS's
            # x @ W^T takes 2-3x as long for 2 to 64 rows (a decode cohort), the same for one.
            out = np.ascontiguousarray((plain @ flat.T).T)
        else:
            out = flat @ (plain.T if transposed else plain)
        return out.reshape(*x.shape[:-1], out.shape[1])
    few_rows = 8  # rows of x up to which blocks are dotted as they are, never widened
    scratch = 1 << 20  # elements widened (or partial sums held) at a time: 4 MiB of float32
    rows_w, nb = w.shape
    k, n = (nb * 32, rows_w) if transposed else (rows_w, nb * 32)
    rows = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, k)
    m = rows.shape[0]
    if not transposed:  # W's rows run along K: widen a group of them, accumulate their share of x @ W
        out = np.zeros((m, n), np.float32)
        step = max(1, scratch // n)
        for s in range(0, k, step):
            out += rows[:, s : s + step] @ dequant_blocks(w[s : s + step])
        return out.reshape(*x.shape[:-1], n)
    if m <= few_rows:
        compiled = _matmul_packed_compiled(rows, w)  # numba's row kernels, where installed
        if compiled is not None:
            return compiled.reshape(*x.shape[:-1], n)
    out = np.empty((m, n), np.float32)
    if m <= few_rows:
        xb = rows.reshape(m, nb, 32)
        sums = xb.sum(axis=2)  # [m, nb]: what a block's offset multiplies
        names = w.dtype.names
        step = max(1, scratch // k)
        for s in range(0, n, step):
            blocks = w[s : s + step]
            dots = np.einsum("rbj,mbj->mrb", block_integers(blocks), xb)  # each block's q . x
            if names == ("d", "qs"):  # Q4_0: d * ((q - 8) . x)
                dots -= np.float32(8) * sums[:, None, :]
            out[:, s : s + step] = np.einsum("mrb,rb->mr", dots, blocks["d"].astype(np.float32))
            if "m" in names:  # Q4_1: d * (q . x) + m * sum(x)
                out[:, s : s + step] += sums @ blocks["m"].astype(np.float32).T
    else:
        step = max(1, scratch // k)
        for s in range(0, n, step):
            widened = dequant_blocks(w[s : s + step])  # [r, K] in scratch, then BLAS
            out[:, s : s + step] = rows @ widened.T  # (BLAS cannot write a column slice in place)
    return out.reshape(*x.shape[:-1], n)


def kernel_gather_packed(w: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    """ONNX Gather along axis 0 of W [V, D] (blocks [V, D / 32] or a plain array): rows picked, then widened."""
    if axis != 0:
        raise ValueError("a packed weight is gathered along its rows (axis 0)")
    picked = np.take(w, np.asarray(indices, dtype=np.int64), axis=0)
    return picked if w.dtype.names is None else dequant_blocks(picked)


PIECES: dict[str, object] = {
    "kernel_matmul_packed": kernel_matmul_packed,
    "kernel_gather_packed": kernel_gather_packed,
}
DEPENDS: dict[str, tuple[str, ...]] = {
    "kernel_matmul_packed": ("block_integers", "dequant_blocks", "_matmul_packed_compiled"),
    "kernel_gather_packed": ("dequant_blocks",),
}
