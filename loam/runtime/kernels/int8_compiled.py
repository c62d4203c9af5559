"""The compiled integer products of `int8_activations`: numba kernels behind `int8_products.py`.

A decode cohort multiplies a few rows of activations, rounded to int8 per block, by every packed
weight.  These kernels read each weight block's bytes once for all of the cohort's rows: the block's
integers are unpacked into a small int32 buffer (less the zero point, or ggml's offset 8), dotted with
each row's codes in int32 (exact), and the row's float32 sum gets dot * (row scale * block scale),
block after block, the numpy kernels' operations in the numpy kernels' order.  They are compiled
without fast-math (no reassociation, no fused multiply-add), so they give the numpy kernels' bits.

- `_nbits_int8(packed, s, z, qa, sa, out, bits, block)`: onnxruntime's n-bit blocks (MatMulNBits).
- `_packed_int8(q, d, m, qx, dx, sx, out, kind)`: ggml's Q4_0 (`kind` 0), Q4_1 (1) and Q8_0 (2) blocks
  in the compiled kernels' unpacked form (`compiled.packed_form`), against q8_0 (q8_1) rows.
- `int8_kernels()`: the two compiled on first use (`compiled.jitted`, about a second), None where the
  compiled path is off (`set_compiled(False)`) or numba is not installed.

A generated module carries these only where a product asks for int8 (`int8_products.PARAMETER_PIECES`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.kernels.compiled import jitted


def _nbits_int8(packed: np.ndarray, s: np.ndarray, z: np.ndarray, qa: np.ndarray, sa: np.ndarray, out: np.ndarray,
                bits: int, block: int) -> None:  # fmt: skip
    """out [M, N] = the integer products of int8 rows qa [M, W] (per-block scales sa [M, W / block]) and
    onnxruntime's n-bit blocks (as `_rows_nbits` takes them, z holding integers), the cohort's rows in one
    pass over B: each block's integers are unpacked once (less its zero point) and dotted with every row
    in int32, then acc += dot * (sa * s), block after block (`loam/runtime/kernels/int8_products.py`)."""
    rows = qa.shape[0]
    per = 8 // bits
    blob = block // per
    nb = s.shape[1]
    mask = (1 << bits) - 1
    shared = z.size == 1
    codes = np.empty(block, np.int16)  # int16: the dot below vectorizes as int16 pairs summed to int32
    acc = np.empty(rows, np.float32)
    for r in range(packed.shape[0]):
        acc[:] = 0
        for b in range(nb):
            zb = np.int16(z[0, 0] if shared else z[r, b])
            base = b * blob
            if bits == 4:
                for j in range(blob):
                    v = packed[r, base + j]
                    codes[2 * j] = np.int16(v & 15) - zb
                    codes[2 * j + 1] = np.int16(v >> 4) - zb
            else:
                for j in range(blob):
                    v = np.int16(packed[r, base + j])
                    for p in range(per):
                        codes[j * per + p] = ((v >> (p * bits)) & mask) - zb
            sb = s[r, b]
            start = b * block
            for i in range(rows):
                qi = qa[i]
                dot = np.int32(0)
                for j in range(block):
                    dot += np.int32(codes[j]) * np.int32(qi[start + j])
                acc[i] += np.float32(dot) * (sa[i, b] * sb)
        for i in range(rows):
            out[i, r] = acc[i]


def _packed_int8(q: np.ndarray, d: np.ndarray, m: np.ndarray, qx: np.ndarray, dx: np.ndarray, sx: np.ndarray,
                 out: np.ndarray, kind: int) -> None:  # fmt: skip
    """out [M, N] = the integer products of q8 rows qx [M, K] (dx, sx [M, K / 32]) and ggml blocks in the
    row kernels' form (`kind` 0 Q4_0, 1 Q4_1, 2 Q8_0; m read for Q4_1 only), in one pass over W: each
    block's 32 integers unpacked once (Q4_0 less 8) and dotted with every row in int32, then
    acc += dot * (dx * d) (+ sx * m for Q4_1), block after block."""
    rows = qx.shape[0]
    nb = qx.shape[1] // 32
    codes = np.empty(32, np.int16)
    acc = np.empty(rows, np.float32)
    offset = np.int16(8 if kind == 0 else 0)
    for r in range(q.shape[0]):
        acc[:] = 0
        for b in range(nb):
            if kind == 2:
                for j in range(32):
                    codes[j] = np.int16(q[r, b * 32 + j])
            else:
                for j in range(16):
                    v = q[r, b * 16 + j]
                    codes[j] = np.int16(v & 15) - offset
                    codes[16 + j] = np.int16(v >> 4) - offset
            db = d[r, b]
            start = b * 32
            for i in range(rows):
                xi = qx[i]
                dot = np.int32(0)
                for j in range(32):
                    dot += np.int32(codes[j]) * np.int32(xi[start + j])
                if kind == 1:
                    acc[i] += np.float32(dot) * (dx[i, b] * db) + sx[i, b] * m[r, b]
                else:
                    acc[i] += np.float32(dot) * (dx[i, b] * db)
        for i in range(rows):
            out[i, r] = acc[i]


def int8_kernels() -> dict | None:
    """The compiled integer kernels by name, compiled on first use (`jitted`) without fast-math: the
    float32 scaling keeps the numpy kernels' order and roundings, so their bits.  None where the compiled
    path is off or numba is not installed."""
    return jitted((_nbits_int8, _packed_int8), fastmath=False)


PIECES: dict[str, Callable[..., object]] = {
    "_nbits_int8": _nbits_int8,
    "_packed_int8": _packed_int8,
    "int8_kernels": int8_kernels,
}
