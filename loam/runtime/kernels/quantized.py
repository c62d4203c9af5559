"""Library kernels over weights kept in ggml's block form (see `loam/runtime/kernels/__init__.py`).

A GGUF checkpoint stores a linear layer's weight W [N, K] (output features by input features) as
rows of 32-element blocks along K (`Q4_0`, `Q4_1`, `Q8_0`: `loam/runtime/dequant.py` describes
them).  The `pack-quantized` pass gives products and gathers over such a weight these kernels, and
`Weights` keeps the blocks as they are stored (a structured array [N, K / 32], a view of the file),
so the module holds about an eighth of the float32 bytes for a 4-bit weight.

Both kernels also take a plain float32 weight (a checkpoint that stores it unquantized): the
packing is the checkpoint's choice, and the module computes the same product either way.

- `kernel_matmul_packed(x, w, transposed=1)`: x @ W^T (`transposed=0`: x @ W for W [K, N], its rows
  widened a group at a time and their share of the product accumulated).  Where numba is installed,
  compiled kernels take every x@W^T (`loam/runtime/kernels/compiled.py`): a decode step's few rows
  read each block's bytes once, a cohort's rows widen each group of 4 of W's rows once for all of
  them.  In numpy alone, a few rows of x never widen the blocks: each block's dot product is taken
  with its integers and scaled after, so
  W x = sum over blocks of d * (q . x) (+ m * sum(x) for Q4_1, - 8 d * sum(x) for Q4_0); more rows
  (a prefill) dequantize a bounded group of W's rows into scratch and multiply it by BLAS.
  With `int8=1` (the `int8_activations` option) x @ W^T rounds x to llama.cpp's q8 blocks and
  multiplies integers instead (`loam/runtime/kernels/int8_products.py`).
- `kernel_gather_packed(w, indices, axis=0)`: the rows of W at `indices` (an embedding lookup),
  dequantized after they are picked.

Every element is computed in float32 from the blocks' f16 scales widened to float32, as ggml and
`dequant_blocks` do, so a product differs from the product over the dequantized weight only in
the order its float32 sums are taken.

onnxruntime's `com.microsoft` n-bit blocks (`loam/ops/microsoft/quantized.py`) are uint8 tensors
holding `bits`-bit integers, low bits first, in blocks along K with a scale (and a zero point, else
2^(bits - 1)) per block; `Weights` keeps the initializer's bytes as they are:

- `kernel_matmul_nbits(a, b, scales, [zero points], [g_idx], [bias], k, n, bits, block_size, present)`:
  MatMulNBits, A [.., K] @ W^T + bias for W [N, K] = (q - zero point) * scale, B kept packed.  Where
  numba is installed, one or two rows of A (a decode step) go through a compiled row kernel that reads
  each block's bytes once and scales after, W a = sum over blocks of scale * (q . a - zero point *
  sum(a)), so no float W is formed; more rows widen a bounded group of W's rows (4 MiB of float32 at a
  time) into scratch by a compiled loop and multiply by BLAS.  In numpy alone, each byte's p-th
  integers are widened (contiguous) and scaled for a group of rows and multiplied by BLAS with the
  matching elements of A, the zero points' share subtracted once.  With g_idx (each k reading another
  block's scale) W's rows are widened a group at a time in numpy.  With `int8=1` (accuracy_level 4, or
  the `int8_activations` option) A is rounded to int8 per block and multiplied as integers, as
  onnxruntime does (`loam/runtime/kernels/int8_products.py`).
- `kernel_gather_block_quantized(data, indices, scales, [zero points], bits, block_size, zeros)`:
  GatherBlockQuantized along axis 0 (an embedding lookup), the rows picked, then widened; an index
  outside the rows gives a row of zeros, as onnxruntime's kernel does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.dequant import block_integers, dequant_blocks
from loam.runtime.kernels.compiled import compiled_kernels, matmul_packed_compiled
from loam.runtime.kernels.int8_products import matmul_nbits_int8, matmul_packed_int8


def kernel_matmul_packed(x: np.ndarray, w: np.ndarray, *, transposed: int, int8: int = 0) -> np.ndarray:
    """x [..., K] @ W^T for W [N, K] (`transposed`), else x @ W for W [K, N]; W is blocks [rows,
    row length / 32] of a ggml encoding, or a plain array.  `int8`: x @ W^T over blocks rounds x to
    llama.cpp's q8 blocks and multiplies integers (`loam/runtime/kernels/int8_products.py`)."""
    if int8 and transposed and w.dtype.names is not None:
        flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
        return matmul_packed_int8(flat, w).reshape(*x.shape[:-1], w.shape[0])
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
    compiled = matmul_packed_compiled(rows, w)  # numba's kernels, where installed
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


def nbits_codes(packed: np.ndarray, bits: int) -> np.ndarray:
    """The integers `packed` holds `8 // bits` to a byte, low bits first: uint8 [..., B] -> float32
    [..., B * 8 // bits], each written by one shift and mask straight into float32."""
    packed = np.asarray(packed, dtype=np.uint8)
    if bits == 8:
        return packed.astype(np.float32)
    per = 8 // bits
    out = np.empty((*packed.shape, per), np.float32)
    mask = np.uint8((1 << bits) - 1)
    for i in range(per):
        if i == 0:
            np.bitwise_and(packed, mask, out=out[..., 0], casting="unsafe")
        elif i == per - 1:
            np.right_shift(packed, np.uint8(bits * i), out=out[..., i], casting="unsafe")
        else:
            np.bitwise_and(np.right_shift(packed, np.uint8(bits * i)), mask, out=out[..., i], casting="unsafe")
    return out.reshape(*packed.shape[:-1], packed.shape[-1] * per)


def _matmul_nbits_numpy(
    packed: np.ndarray, s: np.ndarray, z: np.ndarray, x: np.ndarray, out: np.ndarray, bits: int, block: int, step: int
) -> None:
    """out [M, N] = x [M, W] @ ((q - z) * s)^T in numpy (`kernel_matmul_nbits`'s arguments, W whole blocks).
    Each byte's p-th integers are widened for a group of W's rows at once (contiguous, one shift and mask
    into float32 scratch reused across groups), scaled per block, and multiplied by BLAS with the
    matching elements of x; the zero points' share, s * z * sum(x) per block, is subtracted once."""
    m = x.shape[0]
    n, nb = s.shape
    per = 8 // bits
    blob = block // per
    mask = np.uint8((1 << bits) - 1)
    planes = [np.ascontiguousarray(x.reshape(m, nb, blob, per)[..., p]).reshape(m, -1) for p in range(per)]
    sums = x.reshape(m, nb, block).sum(axis=2)  # [m, nb]: what a block's zero point multiplies
    scratch = np.empty((min(step, n), nb, blob), np.float32)
    shifted = np.empty((min(step, n), nb * blob), np.uint8)  # a byte shifted, before its mask
    for r in range(0, n, step):
        group = packed[r : r + step]
        q = scratch[: group.shape[0]]
        acc = np.zeros((m, group.shape[0]), np.float32)
        for p in range(per):
            if p == per - 1 and p:
                np.right_shift(group, np.uint8(p * bits), out=q.reshape(len(q), -1), casting="unsafe")
            elif p:
                held = shifted[: group.shape[0]]
                np.right_shift(group, np.uint8(p * bits), out=held)
                np.bitwise_and(held, mask, out=q.reshape(len(q), -1), casting="unsafe")
            elif per > 1:
                np.bitwise_and(group, mask, out=q.reshape(len(q), -1), casting="unsafe")
            else:
                q.reshape(len(q), -1)[...] = group
            q *= s[r : r + step, :, None]
            acc += planes[p] @ q.reshape(len(q), -1).T
        zr = z if z.shape[0] == 1 else z[r : r + step]
        acc -= sums @ (s[r : r + step] * zr).T
        out[:, r : r + step] = acc


def kernel_matmul_nbits(
    a: np.ndarray, b: np.ndarray, scales: np.ndarray, *given: np.ndarray, k: int, n: int, bits: int, block_size: int,
    present: int, int8: int = 0,
) -> np.ndarray:  # fmt: skip
    """onnxruntime's MatMulNBits: A [.., K] @ W^T (+ bias), W [N, K] = (q - zero point) * scale per block
    of K; `present` says which of zero points (1), g_idx (2) and bias (4) follow `scales`.  `int8` (without
    g_idx, zero points uint8 or none): A rounded to int8 per block and multiplied as integers, as
    onnxruntime does at accuracy_level 4 (`loam/runtime/kernels/int8_products.py`)."""
    rest = list(given)
    zero = rest.pop(0) if present & 1 else None
    g_idx = rest.pop(0) if present & 2 else None
    bias = rest.pop(0) if present & 4 else None
    nb = -(-k // block_size)
    width = nb * block_size  # K padded to whole blocks
    rows = np.asarray(a).reshape(-1, k)
    m = rows.shape[0]
    s = np.ascontiguousarray(np.asarray(scales, dtype=np.float32).reshape(n, nb))
    if zero is None:
        z = None
    elif zero.dtype == np.uint8:  # packed as B is, each row of N padded to whole bytes
        z = np.ascontiguousarray(nbits_codes(np.asarray(zero).reshape(n, -1), bits)[:, :nb])
    else:
        z = np.asarray(zero).astype(np.float32).reshape(n, nb)
    packed = np.asarray(b, dtype=np.uint8).reshape(n, -1)
    out = np.empty((m, n), np.float32)
    step = max(1, (1 << 20) // width)  # rows of W widened at a time: 4 MiB of float32
    if g_idx is not None:  # each k reads the scale and zero point of block g_idx[k]
        z = np.full((n, nb), 1 << (bits - 1), np.float32) if z is None else z
        g = np.asarray(g_idx, dtype=np.int64).reshape(k)
        x = rows.astype(np.float32)
        for r in range(0, n, step):
            w = nbits_codes(packed[r : r + step], bits)[:, :k]
            w -= z[r : r + step][:, g]
            w *= s[r : r + step][:, g]
            out[:, r : r + step] = x @ w.T
    else:
        if k == width:
            x = np.ascontiguousarray(rows, dtype=np.float32)
        else:
            x = np.zeros((m, width), np.float32)  # A padded with zeros to whole blocks
            x[:, :k] = rows
        if z is None:
            z = np.full((1, 1), 1 << (bits - 1), np.float32)  # one zero point for every block
        kernels = compiled_kernels()  # numba's kernels where installed (`loam/runtime/kernels/compiled.py`)
        if int8:
            matmul_nbits_int8(packed, s, z, x, out, bits, block_size)
        elif kernels is not None and m <= 2:  # a decode step: each block's bytes read once, no float W formed
            kernels["_rows_nbits"](packed, s, z, x, out, bits, block_size)
        elif kernels is not None:  # a bounded group of W's rows widened into scratch, then BLAS
            scratch = np.empty((min(step, n), width), np.float32)
            for r in range(0, n, step):
                w = scratch[: min(step, n - r)]
                zr = z if z.size == 1 else z[r : r + step]
                kernels["_widen_nbits"](packed[r : r + step], s[r : r + step], zr, bits, block_size, w)
                if w.shape[0] == n:
                    np.matmul(x, w.T, out=out)
                else:
                    out[:, r : r + step] = x @ w.T
        else:
            _matmul_nbits_numpy(packed, s, z, x, out, bits, block_size, step)
    if bias is not None:
        out += np.asarray(bias).astype(np.float32)
    return out.astype(np.asarray(a).dtype, copy=False).reshape(*np.shape(a)[:-1], n)


def kernel_gather_block_quantized(
    data: np.ndarray, indices: np.ndarray, scales: np.ndarray, *zero: np.ndarray, bits: int, block_size: int, zeros: int
) -> np.ndarray:
    """onnxruntime's GatherBlockQuantized along axis 0, quantized in blocks along the last axis: the rows
    at `indices` (negative ones counting from the end, any outside the rows giving zeros), widened as
    (q - zero point) * scale in the scales' type."""
    rows = data.shape[0]
    idx = np.asarray(indices, dtype=np.int64)
    valid = (idx >= -rows) & (idx < rows)
    safe = np.where(valid, np.where(idx < 0, idx + rows, idx), 0)
    packed = data.dtype == np.uint8  # bits-bit integers packed along the last axis; else int4/uint4 one a byte
    picked = np.take(data, safe, axis=0)
    q = nbits_codes(picked, bits) if packed else picked.astype(np.float32)
    d = q.shape[-1]
    s = np.take(scales, safe, axis=0).astype(np.float32)
    nb = s.shape[-1]
    if zeros:
        zp = np.take(zero[0], safe, axis=0)
        z = nbits_codes(zp, bits)[..., :nb] if packed else zp.astype(np.float32)
    else:
        z = np.full(s.shape, (1 << (bits - 1)) if packed else 0, np.float32)
    q -= np.repeat(z, block_size, axis=-1)[..., :d]
    q *= np.repeat(s, block_size, axis=-1)[..., :d]
    q[~valid] = 0
    return q.astype(scales.dtype, copy=False)


PIECES: dict[str, Callable[..., object]] = {
    "kernel_matmul_packed": kernel_matmul_packed,
    "kernel_gather_packed": kernel_gather_packed,
    "nbits_codes": nbits_codes,
    "_matmul_nbits_numpy": _matmul_nbits_numpy,
    "kernel_matmul_nbits": kernel_matmul_nbits,
    "kernel_gather_block_quantized": kernel_gather_block_quantized,
}
