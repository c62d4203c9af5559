"""`kernel.attention`: softmax(score(Q K^T)) V in one call, a numpy kernel and its compiled form.

`fuse-attention` replaces an export's attention chain (the scores' product, its scale, mask and bias,
the row softmax, the product with V) by one `kernel.attention`.  Both forms read each key and value
head once for its group of query heads (grouped-query attention needs no repeated copy) and read the
keys and values where they are: a DecodeState's view of the past is read in place, and a state that
keeps them in a pool of blocks (a server's paged state, `pages`) is read through its block table.

- `attention_numpy`: the chain's own arithmetic in the chain's order (the products as `grouped-heads`
  batches them, the score elementwise, the module's row softmax), so it gives the unfused module's bits;
  it is the compiled kernel's test oracle and what runs where numba is not, or for many queries
  (a prefill), where BLAS's products win.
- `_attention_rows`: a numba loop per (batch, key head): one pass over the keys computes the scores
  of the head's group of query rows (each key loaded once for the group), then per row the score's
  scale, mask and bias, its maximum, exponentials and sum (a two-pass softmax over a scratch of
  scores), then one pass over V's rows accumulates the weighted sums.  It reads K and V through
  their C-contiguous storage (`_storage`: a DecodeState's buffer, of which the past is a prefix), where
  the dot products vectorize; through a strided view they did not (4x slower on SmolLM2's shapes).
  A decode step's attention becomes one compiled call per layer where the chain took five numpy
  calls and three temporaries of [B, H, Sq, Sk].
  Sums are float32 in another order than BLAS's and numpy's pairwise sums: the two forms agree to
  float32 rounding (tests/runtime/test_attention.py states the bound), not bit for bit.
- `kernel_attention`: the compiled kernel for up to `_CompiledAttention.rows` queries, where the
  compiled path is on (`set_compiled`) and numba is installed; else the numpy kernel (over paged keys
  and values gathered dense for the call, `_paged_rows`: a prefill's chunk, or numba absent).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.kernels.compiled import jitted


def attention_numpy(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, masks: tuple[np.ndarray, ...], *,
    scale: float, divide: int, masked: int, fill: float, biased: int,
) -> np.ndarray:  # fmt: skip
    """softmax(select(keep, Q K^T / scale (or * scale), fill) + bias) V over numpy and BLAS, Q [B, H, Sq, D],
    K [B, G, Sk, D], V [B, G, Sk, Dv], `masks` the keep mask (where `masked`) then the bias (where `biased`)."""
    b, h, sq, d = q.shape
    g, sk, dv = k.shape[1], k.shape[2], v.shape[3]
    rows = h // g * sq  # a key head's query rows, [B, G, R * Sq] in the scores' row-major order
    s = np.matmul(q.reshape(b, g, rows, d), np.swapaxes(k, 2, 3)).reshape(b, h, sq, sk)
    c = np.float32(scale)
    s = np.divide(s, c, out=s) if divide else np.multiply(s, c, out=s)
    if masked:
        s = np.where(masks[0], s, np.float32(fill))
    if biased:
        s = np.add(s, masks[masked], dtype=np.float32)
    # The row softmax as `_softmax` computes it (the chain's own arithmetic, so its bits).
    p = np.subtract(s, np.maximum.reduce(s, axis=-1, keepdims=True)) if s.size else s
    if s.size:
        np.exp(p, out=p)
        np.divide(p, np.add.reduce(p, axis=-1, keepdims=True), out=p)
    return np.matmul(p.reshape(b, g, rows, sk), v).reshape(b, h, sq, dv)


def _attention_rows(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, sk: int, blocks: np.ndarray, offsets: np.ndarray,
    keep: np.ndarray, bias: np.ndarray, scale: float, divide: bool, masked: bool, biased: bool, fill: float,
    out: np.ndarray,
) -> None:  # fmt: skip
    """out [B, H, Sq, Dv] = attention_numpy's value over `sk` keys and values of K [N, G, T, D] and V
    [N, G, T, Dv] (C-contiguous, so the dot products vectorize).  Paged (`blocks` and `offsets` [B, sk], a
    pool's blocks of T positions): key j of batch row b is K[blocks[b, j], :, offsets[b, j]], a zero row where
    the block is negative (as a zero-padded past reads).  Dense (`blocks` [B, 0]): it is K[b, :, j], the
    first sk of T positions (a DecodeState's whole buffer, of which the past is a prefix).  Q [B, H, Sq, D]
    C-contiguous; `keep` and `bias` are rank 4, each axis the scores' extent or 1 (numpy's broadcast, read
    only where `masked`, `biased`).  Per key head, its group's R * Sq query rows share each load of a key and
    of a value row; a scratch [R * Sq, Sk] holds the scores, then the probabilities."""
    nb, nh, sq, d = q.shape
    groups, dv = k.shape[1], v.shape[3]
    paged = blocks.shape[1] > 0
    repeats = nh // groups
    rows = repeats * sq
    s = np.empty((rows, sk), np.float32)
    acc = np.empty((rows, dv), np.float32)
    c, f = np.float32(scale), np.float32(fill)
    for b in range(nb):
        for g in range(groups):
            qg = q[b, g * repeats : (g + 1) * repeats].reshape(rows, d)  # the group's query rows, in order
            for j in range(sk):
                block = blocks[b, j] if paged else b
                if block < 0:
                    s[:, j] = 0
                    continue
                kj = k[block, g, offsets[b, j] if paged else j]
                for row in range(rows):
                    qr = qg[row]
                    t = np.float32(0)
                    for e in range(d):
                        t += qr[e] * kj[e]
                    s[row, j] = t
            for row in range(rows):
                h, i = g * repeats + row // sq, row % sq
                kb, kh, ki = min(b, keep.shape[0] - 1), min(h, keep.shape[1] - 1), min(i, keep.shape[2] - 1)
                bb, bh, bi = min(b, bias.shape[0] - 1), min(h, bias.shape[1] - 1), min(i, bias.shape[2] - 1)
                kj, bj = keep.shape[3] > 1, bias.shape[3] > 1
                top = np.float32(-np.inf)
                for j in range(sk):
                    t = s[row, j] / c if divide else s[row, j] * c
                    if masked and not keep[kb, kh, ki, j if kj else 0]:
                        t = f
                    if biased:
                        t = t + bias[bb, bh, bi, j if bj else 0]
                    s[row, j] = t
                    if t > top or t != t:  # NaN wins, as np.maximum's does
                        top = t if top == top else top
                total = np.float32(0)
                for j in range(sk):
                    s[row, j] = np.exp(s[row, j] - top)
                    total += s[row, j]
                for j in range(sk):
                    s[row, j] = s[row, j] / total
            acc[:] = 0
            for j in range(sk):
                block = blocks[b, j] if paged else b
                if block < 0:  # a zero row: p * 0 adds nothing, but a NaN p (a fully masked row) must spread
                    for row in range(rows):
                        acc[row] += s[row, j] * np.float32(0)
                    continue
                vj = v[block, g, offsets[b, j] if paged else j]
                for row in range(rows):
                    p = s[row, j]
                    ar = acc[row]
                    for e in range(dv):
                        ar[e] += p * vj[e]
            for row in range(rows):
                out[b, g * repeats + row // sq, row % sq] = acc[row]


def _rank4(x: np.ndarray) -> np.ndarray:
    """A mask broadcasting to the scores [B, H, Sq, Sk] as rank 4 (unit axes in front), without a copy."""
    return x if x.ndim == 4 else x.reshape((1,) * (4 - x.ndim) + x.shape)


def _storage(x: np.ndarray) -> np.ndarray:
    """`x` [B, G, S, D] as a C-contiguous array whose first S rows along axis 2 are x: the array x is a
    prefix view of (a DecodeState's buffer, read in place), x itself where it is C-contiguous, else a copy."""
    base = x.base
    if (
        isinstance(base, np.ndarray) and base.flags.c_contiguous and base.ndim == 4 and base.dtype == x.dtype
        and base.shape[:2] == x.shape[:2] and base.shape[3] == x.shape[3] and base.strides == x.strides
        and base.shape[2] >= x.shape[2]
        and base.__array_interface__["data"][0] == x.__array_interface__["data"][0]  # (`ctypes` costs 10 us)
    ):  # fmt: skip
        return base
    return np.ascontiguousarray(x)


class _CompiledAttention:
    """The compiled attention kernel, and the queries up to which it runs."""

    # Queries up to which the compiled kernel runs; a prefill's many queries run BLAS's products.
    rows: int = 16

    @classmethod
    def get(cls) -> dict | None:
        """The compiled kernel by name, compiling it on first use (`jitted`, sums reassociated so the dot
        products vectorize); None where the compiled path is off or numba is not installed."""
        return jitted((_attention_rows,))


def kernel_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *masks: np.ndarray, into: object = None,
    scale: float, divide: int, masked: int, fill: float, biased: int,
) -> np.ndarray:  # fmt: skip
    """`kernel.attention` (see `attention_numpy`): compiled for a few queries where numba is, else numpy.
    `into` is the state forward_in_place passes (None without one): where it holds K and V in pages
    (`pages`: their pools and each key's block and offset), both kernels read them there."""
    b, h, sq, _ = q.shape
    pages = None if into is None else into.pages(k, v)  # type: ignore[attr-defined]  # a DecodeState, duck-typed
    sk = k.shape[2]
    kernels = _CompiledAttention.get() if sq <= _CompiledAttention.rows and sk else None
    if kernels is None:
        if pages is not None:
            k, v = _paged_rows(pages[0], pages[2], pages[3]), _paged_rows(pages[1], pages[2], pages[3])
        return attention_numpy(q, k, v, masks, scale=scale, divide=divide, masked=masked, fill=fill, biased=biased)
    if pages is None:
        k_store, v_store = _storage(k), _storage(v)
        blocks = offsets = np.empty((b, 0), np.int64)  # dense: key j of row b is K[b, :, j]
    else:
        k_store, v_store, blocks, offsets = pages
    keep = _rank4(masks[0]) if masked else np.ones((1, 1, 1, 1), np.bool_)
    bias = _rank4(masks[masked]) if biased else np.zeros((1, 1, 1, 1), np.float32)
    out = np.empty((b, h, sq, v.shape[3]), np.float32)
    flags = (bool(divide), bool(masked), bool(biased))
    kernels["_attention_rows"](
        np.ascontiguousarray(q),
        k_store,
        v_store,
        sk,
        blocks,
        offsets,
        keep,
        bias,
        float(scale),
        *flags,
        float(fill),
        out,
    )
    return out


def _paged_rows(pool: np.ndarray, blocks: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The dense [B, G, Sk, D] that `blocks` and `offsets` [B, Sk] pick from `pool` [N, G, T, D] (see
    `_attention_rows`): zero rows where a block is negative, as a zero-padded past holds."""
    dense = np.zeros((blocks.shape[0], pool.shape[1], blocks.shape[1], pool.shape[3]), pool.dtype)
    rows, keys = np.nonzero(blocks >= 0)
    dense[rows, :, keys] = pool[blocks[rows, keys], :, offsets[rows, keys]]
    return dense


PIECES: dict[str, Callable[..., object]] = {
    "attention_numpy": attention_numpy,
    "_attention_rows": _attention_rows,
    "_rank4": _rank4,
    "_storage": _storage,
    "_CompiledAttention": _CompiledAttention,
    "kernel_attention": kernel_attention,
    "_paged_rows": _paged_rows,
}
