"""Integer products for packed weights: activations rounded to int8 per block (`int8_activations`).

onnxruntime's MatMulNBits at accuracy_level 4 and llama.cpp's CPU products never widen a 4- or 8-bit
weight to float: they round the activations to int8 in blocks along K, multiply the integers, and
scale each block's integer sum once.  These kernels do the same, so a build that asks for it computes
what those runtimes compute.

How onnxruntime rounds A (MLAS's `QuantizeARow_CompInt8`, the AVX2 form `QuantizeARow_CompInt8_avx2`,
for MatMulNBits' CompInt8 products `SQ4BitGemm_CompInt8`; the onnxruntime 1.32 here rounds 8-bit and
2-bit weights' products the same way, measured against its node): for each block of
`block_size` elements of a row of A (the last one short where K is not a multiple, as if padded with
zeros), amax = max |a|, the block's scale sa = amax / 127 (float32, kept in float32) and its codes
qa = round(a * (127 / amax)) (0 where amax is 0), rounded half to even (`_mm256_round_ps` with
`_MM_ROUND_NEAREST`), so |qa| <= 127.  It also keeps sa * sum(qa) per block: B's zero point enters
through it, onnxruntime folding -sb * zp into a per-block sum of B at prepack, so a block adds
sa * sb * (qa . qb) + (sa * sum(qa)) * (-sb * zp), zp being the block's zero point (2^(bits - 1)
where none is given).  That is sa * sb * (qa . (qb - zp)), an integer dot product scaled once; the
float32 results differ from Loam's only in the order and grouping of the float32 operations.

How llama.cpp rounds x for GGUF's blocks (ggml's `quantize_row_q8_0`, `quantize_row_q8_1`): blocks
of 32 along K, d = amax / 127, codes round(x * (127 / amax)) (ggml's reference C rounds halves away
from zero, its x86 SIMD form to even, as above; Loam follows the latter), and d stored as float16, so
the product reads d rounded to half.  Q4_0 and Q8_0 weights take
q8_0 blocks: `ggml_vec_dot_q4_0_q8_0` adds dw * dx * ((qw - 8) . qx) per block (`..._q8_0_q8_0`:
dw * dx * (qw . qx)); Q4_1 takes q8_1 blocks, which keep s = d * sum(qx) as float16 too, and
`ggml_vec_dot_q4_1_q8_1` adds dw * dx * (qw . qx) + mw * s, the block's offset m times x's block sum.

What both kernels here compute, in this order: each block's integer dot product (exact: |qa| <= 127
and |qw - zp| <= 255 make each product at most 32385 and a block's sum, of at most 128 products,
below 2^24, so float32 holds every partial sum exactly and BLAS may add them in any order), then, row
by row, acc += dot * (sa * sb) block after block from the first (`+ s * m` inside the parenthesis's
sum for Q4_1).  The compiled kernels (`loam/runtime/kernels/int8_compiled.py`) run the same float32
operations in the same order, so they give the numpy kernels' bits.

- `quantize_int8_blocks(x, block)`: the codes (int8) and float32 scales of x [M, W] per block.
- `matmul_nbits_int8(packed, s, z, x, out, bits, block)`: MatMulNBits' product by those integer
  products; the numpy form (`matmul_nbits_int8_numpy`) is the oracle, BLAS over a group of W's rows.
- `matmul_packed_int8(rows, w)`: x @ W^T over GGUF's Q4_0, Q4_1 and Q8_0 blocks likewise.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.dequant import block_integers
from loam.runtime.kernels.compiled import packed_form
from loam.runtime.kernels.int8_compiled import int8_kernels


def quantize_int8_blocks(x: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """x [M, W] (W whole blocks) as int8 codes [M, W] and float32 scales [M, W / block]: per block,
    scale = amax / 127 and codes round(x * (127 / amax)) half to even, 0 where amax is 0."""
    m, width = x.shape
    xb = np.asarray(x, dtype=np.float32).reshape(m, width // block, block)
    amax = np.abs(xb).max(axis=2)
    scale = amax / np.float32(127)
    inverse = np.zeros_like(amax)
    np.divide(np.float32(127), amax, out=inverse, where=amax != 0)
    codes = np.rint(xb * inverse[..., None])  # np.rint rounds half to even, as the runtimes' SIMD rounding does
    return codes.astype(np.int8).reshape(m, width), scale


def matmul_nbits_int8_numpy(
    packed: np.ndarray, s: np.ndarray, z: np.ndarray, qa: np.ndarray, sa: np.ndarray, out: np.ndarray, bits: int,
    block: int,
) -> None:  # fmt: skip
    """out [M, N] = the integer products of qa [M, W] (int8 codes, scales sa [M, W / block]) and B's
    blocks (packed uint8 [N, W * bits / 8], scales s [N, W / block], integer zero points z [N, W / block]
    or [1, 1]), in numpy: each block's dot products by BLAS over float32 integers (exact), then
    acc += dot * (sa * s) block by block, for a group of W's rows at a time."""
    m, width = qa.shape
    n, nb = s.shape
    per = 8 // bits
    mask = np.uint8((1 << bits) - 1)
    rows = np.ascontiguousarray(qa.reshape(m, nb, block).transpose(1, 0, 2), dtype=np.float32)  # [nb, M, block]
    step = max(1, (1 << 20) // (width + m * nb))  # W's rows at a time: their integers and their dot products
    for r in range(0, n, step):
        group = np.asarray(packed[r : r + step], dtype=np.uint8)
        g = group.shape[0]
        codes = np.empty((g, group.shape[1], per), np.float32)  # each byte's integers, low bits first
        for p in range(per):
            np.bitwise_and(np.right_shift(group, np.uint8(p * bits)), mask, out=codes[..., p], casting="unsafe")
        q = codes.reshape(g, nb, block)
        q -= z if z.size == 1 else z[r : r + step, :, None]
        dots = np.matmul(rows, q.transpose(1, 2, 0))  # [nb, M, g], integers below 2^24
        acc = np.zeros((m, g), np.float32)
        for b in range(nb):
            acc += dots[b] * (sa[:, b, None] * s[r : r + step, b])
        out[:, r : r + step] = acc


def matmul_nbits_int8(
    packed: np.ndarray, s: np.ndarray, z: np.ndarray, x: np.ndarray, out: np.ndarray, bits: int, block: int
) -> None:
    """out [M, N] = x [M, W] @ W^T for MatMulNBits' blocks (`matmul_nbits_int8_numpy`'s B), x rounded to
    int8 per block first (`quantize_int8_blocks`); compiled where numba is, for a few rows."""
    qa, sa = quantize_int8_blocks(x, block)
    kernels = int8_kernels()
    # Up to 8 rows the compiled kernel reads each weight block once for all of them; more go through
    # BLAS (faster from about 12 rows here), whose float32 sums of integers are exact: the same bits.
    if kernels is not None and x.shape[0] <= 8:
        kernels["_nbits_int8"](packed, s, z, qa, sa, out, bits, block)
    else:
        matmul_nbits_int8_numpy(packed, s, z, qa, sa, out, bits, block)


def quantize_q8_blocks(rows: np.ndarray, with_sums: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rows [M, K] as ggml's q8_0 blocks of 32 (`with_sums`: q8_1): int8 codes [M, K], d [M, K / 32] read
    back from float16, and (q8_1) s = d * sum(codes) read back from float16 (zeros for q8_0)."""
    codes, d = quantize_int8_blocks(rows, 32)
    if with_sums:
        sums = codes.reshape(codes.shape[0], -1, 32).sum(axis=2, dtype=np.int32).astype(np.float32)
        s = (d * sums).astype(np.float16).astype(np.float32)
    else:
        s = np.zeros_like(d)
    return codes, d.astype(np.float16).astype(np.float32), s


def ggml_kind(w: np.ndarray) -> int:
    """Which ggml block form `w` is: 0 Q4_0, 1 Q4_1, 2 Q8_0 (what the integer kernels branch on)."""
    names = w.dtype.names
    assert names is not None, "blocks of a block_dtype"
    return 2 if "q" in names else 1 if "m" in names else 0


def matmul_packed_int8_numpy(w: np.ndarray, qx: np.ndarray, dx: np.ndarray, sx: np.ndarray, out: np.ndarray) -> None:
    """out [M, N] = the integer products of q8 blocks (qx [M, K] codes, dx and sx [M, K / 32]) and W's
    ggml blocks [N, K / 32], in numpy: dot products by BLAS over float32 integers (exact), then
    acc += dot * (dx * dw) (+ sx * mw for Q4_1) block by block, for a group of W's rows at a time."""
    m, k = qx.shape
    n, nb = w.shape
    kind = ggml_kind(w)
    rows = np.ascontiguousarray(qx.reshape(m, nb, 32).transpose(1, 0, 2), dtype=np.float32)  # [nb, M, 32]
    step = max(1, (1 << 20) // (k + m * nb))
    for r in range(0, n, step):
        blocks = w[r : r + step]
        q = block_integers(blocks)  # [g, nb, 32]
        if kind == 0:
            q -= np.float32(8)
        dots = np.matmul(rows, q.transpose(1, 2, 0))  # [nb, M, g]
        dw = blocks["d"].astype(np.float32)
        mw = blocks["m"].astype(np.float32) if kind == 1 else None
        acc = np.zeros((m, blocks.shape[0]), np.float32)
        for b in range(nb):
            if mw is None:
                acc += dots[b] * (dx[:, b, None] * dw[:, b])
            else:
                acc += dots[b] * (dx[:, b, None] * dw[:, b]) + sx[:, b, None] * mw[:, b]
        out[:, r : r + step] = acc


def matmul_packed_int8(rows: np.ndarray, w: np.ndarray) -> np.ndarray:
    """rows [M, K] @ W^T for ggml blocks W [N, K / 32], rows rounded to q8_0 blocks (q8_1 for Q4_1) and
    multiplied as integers; compiled where numba is, for a few rows."""
    kind = ggml_kind(w)
    qx, dx, sx = quantize_q8_blocks(rows, kind == 1)
    out = np.empty((rows.shape[0], w.shape[0]), np.float32)
    kernels = int8_kernels()
    if kernels is not None and rows.shape[0] <= 8:  # as for MatMulNBits: BLAS's exact sums beyond
        form = packed_form(w)  # the weight's integers contiguous, made once
        kernels["_packed_int8"](form[0], form[1], form[2] if len(form) == 3 else form[1], qx, dx, sx, out, kind)
    else:
        matmul_packed_int8_numpy(w, qx, dx, sx, out)
    return out


PARAMETER_PIECES: dict[tuple[str, str], tuple[str, ...]] = {
    ("kernel_matmul_nbits", "int8"): ("matmul_nbits_int8",),
    ("kernel_matmul_packed", "int8"): ("matmul_packed_int8",),
}
"""(kernel, parameter) -> the pieces the kernel reads only where that parameter is set: a generated module
carries them (and what they read) only where one of its calls sets it, so a module without
`int8_activations` carries no integer product."""

PIECES: dict[str, Callable[..., object]] = {
    "quantize_int8_blocks": quantize_int8_blocks,
    "matmul_nbits_int8_numpy": matmul_nbits_int8_numpy,
    "matmul_nbits_int8": matmul_nbits_int8,
    "quantize_q8_blocks": quantize_q8_blocks,
    "ggml_kind": ggml_kind,
    "matmul_packed_int8_numpy": matmul_packed_int8_numpy,
    "matmul_packed_int8": matmul_packed_int8,
}
