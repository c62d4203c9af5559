"""The optional compiled path of the packed product: numba row kernels behind `kernel_matmul_packed`.

A decode step multiplies a few rows of x by every 4-bit weight of the model.  In numpy the packed
product (`loam/runtime/kernels/quantized.py`) spends most of its time making float32 temporaries of
each block's integers; a loop compiled to machine code reads each block's bytes once and keeps the
sums in registers, about ten times faster on SmolLM2's matrices at one thread.  numba compiles it
where it is installed; where it is not, the module imports nothing more and computes the same product
with the numpy kernel, which is also the compiled kernels' test oracle (tests/runtime/test_compiled.py).

- `_halves_q4(x)`: x regrouped for the Q4 kernels (each block's first 16 elements, its last 16, its sum),
  a jitted helper both Q4 kernels call (`jitted` binds it to its compiled form).
- `_rows_q4(q, d, m, x, out)`: out[i, r] = sum over blocks b of d[r, b] * (q[r, b] . x[i, b])
  + m[r, b] * sum(x[i, b]) for Q4_0 (m = -8 d) and Q4_1; q holds each block's 16 bytes, low nibbles
  times the block's first 16 elements of x, high nibbles times its last 16.
- `_tiles_q4(q, d, m, x, out)`: `_rows_q4`'s sums for 3 to `_CompiledKernels.tile_rows` rows: 4 of W's
  rows unpacked and scaled once for 4 rows of x (`_rows_q4` unpacks them again for each row); at 3 and 4
  rows of SmolLM2's matrices 1.2-2x `_rows_q4`, at 2 no faster, at 8 as fast as `_cohort_rows`.
- `_rows_q8(q, d, x, out)`: out[i, r] = sum over k of q[r, k] * x[i, k] * d[r, k // 32] for Q8_0.
- `_tiles_q8(q, d, x, out)`: `_rows_q8`'s sums for 3 to `tile_rows` rows, as `_tiles_q4` for Q8_0.
- `_cohort_rows(q, d, m, x, out, q8)`: the same products for a cohort's rows (more than
  `_CompiledKernels.tile_rows`): each group of 4 of W's rows is widened once into a few KiB of cache
  and dotted with x's rows 4 at a time, 16 sums sharing each load of 4 elements of x and 4 of W.
  Widening stays the cost: numba compiles a block's 16-element loops to scalar code (its assembly
  converts one integer at a time; numba leaves LLVM's SLP vectorizer off, and its loop vectorizer
  declines loops this short that store), so on SmolLM2's 1536 x 576 matrix at one thread widening
  takes about 0.26 ms and the dot about 0.025 ms a row: widening costs about ten rows.
- `_CompiledKernels.cohort`: spreads a cohort's product over numba's thread count
  (`numba.get_num_threads()`, NUMBA_NUM_THREADS), W's rows in runs of whole groups of 4, one run on the
  caller's thread and the others on a pool; each element is the sum one call computes, in its order, so
  the split changes no bit.  One thread (or fewer than 64 of W's rows a thread): one call, no pool.
- `_rows_nbits(packed, s, z, x, out, bits, block)`: onnxruntime's MatMulNBits blocks (`kernel_matmul_nbits`)
  for a decode step, out[i, r] = sum over blocks b of s[r, b] * (q[r, b] . x[i, b] - z[r, b] * sum(x[i, b]));
  x is first regrouped so each byte's p-th integers meet a contiguous run of it.  About 4x the numpy
  kernel at one row of 576 x 1536 (bench/RESULTS-matmul-nbits.md); from three rows BLAS wins.
- `_widen_nbits(packed, s, z, bits, block, dst)`: (q - z) * s for a group of those rows, into scratch
  for BLAS (a prefill, or more than two rows).  Both read B as the file stores it: nothing is cached.
- `_CompiledKernels`: compiles them on first use in each process (about 1.5 s), and holds each packed
  weight's unpacked form (its integers contiguous, its f16 scales widened once: 24 bytes per Q4 block
  against the file's 18 or 20, 36 per Q8_0 block against 34), made on the weight's first product; it
  also holds the process's switch and every family's compiled functions.
- `jitted(functions, fastmath)`: numba's compiled forms of a family's functions, made on first use and
  kept by the functions' identity; what every family (these products, `int8_compiled.py`,
  `norm_compiled.py`, `attention.py`) compiles through, and the one place that imports numba.
- `compiled_kernels()`, `matmul_packed_compiled(rows, w)`: what the packed kernels
  (`loam/runtime/kernels/quantized.py`) call, the kernels or a packed product, None where numba is not;
  `packed_form(w)`: a weight's unpacked form, for the integer kernels (`int8_compiled.py`).
- `set_compiled(enabled)`: turns the path off (or back on, compiling it then) for the process.

Sums are float32 in a different order than the numpy kernel's, so the two agree within float32
rounding, not bit for bit.  A kernel runs on its caller's thread and releases the GIL, so products
called from several threads run side by side; a row kernel uses one core (spreading a decode step's
one or two rows over two cores measured no faster on SmolLM2), a cohort's product all of numba's.
numba's on-disk cache stays off: its cached code re-imports the module by the name it had when
compiled, which a generated module loaded from a path under another name does not have.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _halves_q4(x: np.ndarray) -> tuple:
    """x [M, K] regrouped for the Q4 kernels: each block's first 16 elements (what its low nibbles multiply),
    its last 16 (the high nibbles'), each [M, K / 2], and each block's sum [M, K / 32] (what m multiplies)."""
    rows, half = x.shape[0], x.shape[1] // 2
    xl = np.empty((rows, half), np.float32)
    xh = np.empty((rows, half), np.float32)
    xs = np.empty((rows, half // 16), np.float32)
    for i in range(rows):
        for b in range(half // 16):
            total = np.float32(0)
            for j in range(16):
                xl[i, b * 16 + j] = x[i, b * 32 + j]
                xh[i, b * 16 + j] = x[i, b * 32 + 16 + j]
                total += x[i, b * 32 + j] + x[i, b * 32 + 16 + j]
            xs[i, b] = total
    return xl, xh, xs


def _rows_q4(q: np.ndarray, d: np.ndarray, m: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out [M, N] = x [M, K] @ W^T over Q4 blocks: q uint8 [N, K / 2] (each block's 16 bytes: low nibbles
    times its first 16 elements of x, high nibbles its last 16), d and m float32 [N, K / 32]."""
    rows, half = x.shape[0], x.shape[1] // 2
    xl, xh, xs = _halves_q4(x)
    n = q.shape[0]
    for pair in range((n + 1) // 2):
        r0, r1 = 2 * pair, min(2 * pair + 1, n - 1)  # two rows share each load of x (odd n: the last twice)
        q0, q1, d0, d1 = q[r0], q[r1], d[r0], d[r1]
        for i in range(rows):
            xli, xhi, xsi = xl[i], xh[i], xs[i]
            acc0 = np.float32(0)
            acc1 = np.float32(0)
            for k in range(half):
                lo, hi = xli[k], xhi[k]
                v0, v1 = np.int32(q0[k]), np.int32(q1[k])
                acc0 += (np.float32(v0 & 15) * lo + np.float32(v0 >> 4) * hi) * d0[k >> 4]
                acc1 += (np.float32(v1 & 15) * lo + np.float32(v1 >> 4) * hi) * d1[k >> 4]
            for b in range(half // 16):
                acc0 += m[r0, b] * xsi[b]
                acc1 += m[r1, b] * xsi[b]
            out[i, r0] = acc0
            out[i, r1] = acc1


def _tiles_q4(q: np.ndarray, d: np.ndarray, m: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out [M, N] = x [M, K] @ W^T over Q4 blocks in `_rows_q4`'s form, summed as it sums, for a few rows
    (3 to `_CompiledKernels.tile_rows`): 4 of W's rows are unpacked and scaled once for 4 rows of x, 32
    products sharing each unpacking (`_rows_q4` unpacks 2 of W's rows again for each row of x).  A tile
    past the last row of W or x repeats that row (its sums computed and not stored)."""
    rows, half = x.shape[0], x.shape[1] // 2
    nb = half // 16
    xl, xh, xs = _halves_q4(x)
    n = q.shape[0]
    for r0 in range(0, n, 4):
        ra, rb, rc, rd = r0, min(r0 + 1, n - 1), min(r0 + 2, n - 1), min(r0 + 3, n - 1)
        qa, qb, qc, qd = q[ra], q[rb], q[rc], q[rd]
        da, db, dc, dd = d[ra], d[rb], d[rc], d[rd]
        for i0 in range(0, rows, 4):
            i1, i2, i3 = min(i0 + 1, rows - 1), min(i0 + 2, rows - 1), min(i0 + 3, rows - 1)
            l0, l1, l2, l3 = xl[i0], xl[i1], xl[i2], xl[i3]
            h0, h1, h2, h3 = xh[i0], xh[i1], xh[i2], xh[i3]
            a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = np.float32(0)
            a20 = a21 = a22 = a23 = a30 = a31 = a32 = a33 = np.float32(0)
            for k in range(half):
                va, vb, vc, vd = np.int32(qa[k]), np.int32(qb[k]), np.int32(qc[k]), np.int32(qd[k])
                sa, sb, sc, sd = da[k >> 4], db[k >> 4], dc[k >> 4], dd[k >> 4]
                la, ha = np.float32(va & 15) * sa, np.float32(va >> 4) * sa
                lb, hb = np.float32(vb & 15) * sb, np.float32(vb >> 4) * sb
                lc, hc = np.float32(vc & 15) * sc, np.float32(vc >> 4) * sc
                ld, hd = np.float32(vd & 15) * sd, np.float32(vd >> 4) * sd
                x0l, x0h, x1l, x1h = l0[k], h0[k], l1[k], h1[k]
                x2l, x2h, x3l, x3h = l2[k], h2[k], l3[k], h3[k]
                a00 += la * x0l + ha * x0h
                a01 += lb * x0l + hb * x0h
                a02 += lc * x0l + hc * x0h
                a03 += ld * x0l + hd * x0h
                a10 += la * x1l + ha * x1h
                a11 += lb * x1l + hb * x1h
                a12 += lc * x1l + hc * x1h
                a13 += ld * x1l + hd * x1h
                a20 += la * x2l + ha * x2h
                a21 += lb * x2l + hb * x2h
                a22 += lc * x2l + hc * x2h
                a23 += ld * x2l + hd * x2h
                a30 += la * x3l + ha * x3h
                a31 += lb * x3l + hb * x3h
                a32 += lc * x3l + hc * x3h
                a33 += ld * x3l + hd * x3h
            sums = ((a00, a01, a02, a03), (a10, a11, a12, a13), (a20, a21, a22, a23), (a30, a31, a32, a33))
            for a in range(min(4, rows - i0)):
                xsi = xs[i0 + a]
                for t in range(min(4, n - r0)):
                    total = sums[a][t]
                    mr = m[r0 + t]
                    for b in range(nb):
                        total += mr[b] * xsi[b]
                    out[i0 + a, r0 + t] = total


def _rows_q8(q: np.ndarray, d: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out [M, N] = x [M, K] @ W^T over Q8_0 blocks: q int8 [N, K], d float32 [N, K / 32]."""
    for r in range(q.shape[0]):
        qr, dr = q[r], d[r]
        for i in range(x.shape[0]):
            xi = x[i]
            acc = np.float32(0)
            for k in range(qr.shape[0]):
                acc += np.float32(qr[k]) * xi[k] * dr[k >> 5]
            out[i, r] = acc


def _tiles_q8(q: np.ndarray, d: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out [M, N] = x [M, K] @ W^T over Q8_0 blocks in `_rows_q8`'s form, summed as it sums, for 3 to
    `_CompiledKernels.tile_rows` rows: 4 of W's rows converted and scaled once for 4 rows of x (`_rows_q8`
    converts each weight again for each row).  A tile past the last row of W or x repeats that row (its
    sums computed and not stored)."""
    rows, k = x.shape
    n = q.shape[0]
    for r0 in range(0, n, 4):
        ra, rb, rc, rd = r0, min(r0 + 1, n - 1), min(r0 + 2, n - 1), min(r0 + 3, n - 1)
        qa, qb, qc, qd = q[ra], q[rb], q[rc], q[rd]
        da, db, dc, dd = d[ra], d[rb], d[rc], d[rd]
        for i0 in range(0, rows, 4):
            x0, x1 = x[i0], x[min(i0 + 1, rows - 1)]
            x2, x3 = x[min(i0 + 2, rows - 1)], x[min(i0 + 3, rows - 1)]
            a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = np.float32(0)
            a20 = a21 = a22 = a23 = a30 = a31 = a32 = a33 = np.float32(0)
            for j in range(k):
                ua = np.float32(qa[j]) * da[j >> 5]
                ub = np.float32(qb[j]) * db[j >> 5]
                uc = np.float32(qc[j]) * dc[j >> 5]
                ud = np.float32(qd[j]) * dd[j >> 5]
                v0, v1, v2, v3 = x0[j], x1[j], x2[j], x3[j]
                a00 += ua * v0
                a01 += ub * v0
                a02 += uc * v0
                a03 += ud * v0
                a10 += ua * v1
                a11 += ub * v1
                a12 += uc * v1
                a13 += ud * v1
                a20 += ua * v2
                a21 += ub * v2
                a22 += uc * v2
                a23 += ud * v2
                a30 += ua * v3
                a31 += ub * v3
                a32 += uc * v3
                a33 += ud * v3
            sums = ((a00, a01, a02, a03), (a10, a11, a12, a13), (a20, a21, a22, a23), (a30, a31, a32, a33))
            for a in range(min(4, rows - i0)):
                for t in range(min(4, n - r0)):
                    out[i0 + a, r0 + t] = sums[a][t]


def _cohort_rows(q: np.ndarray, d: np.ndarray, m: np.ndarray, x: np.ndarray, out: np.ndarray, q8: bool) -> None:
    """out [M, N] = x [M, K] @ W^T over packed blocks in the row kernels' form, Q4 (`_rows_q4`: q, d, m) or
    Q8_0 (`q8`; `_rows_q8`: q, d, and m unread), for a cohort's rows: each group of 4 of W's rows is
    widened once, into a few KiB that stay in cache, and dotted with the rows of x 4 at a time, 16 sums
    sharing each load (4 of x, 4 of W) where one row of x at a time loaded W's 4 again for each row.
    A group or tile past the last row repeats the last row (its sums computed and not stored), so every
    element is one sum in the same order whatever M and N are."""
    n, k, rows = q.shape[0], x.shape[1], x.shape[0]
    w = np.zeros((4, k), np.float32)
    for r0 in range(0, n, 4):
        t_rows = min(4, n - r0)
        for t in range(4):
            r = min(r0 + t, n - 1)
            qr, wr = q[r], w[t]
            if q8:  # the integers widened in one run (which vectorizes), then scaled block by block in place
                for j in range(k):
                    wr[j] = np.float32(qr[j])
                for b in range(k // 32):
                    scale = d[r, b]
                    for j in range(32):
                        wr[b * 32 + j] *= scale
            else:
                for b in range(k // 32):
                    scale, offset = d[r, b], m[r, b]
                    for j in range(16):  # low nibbles, then high ones: two runs that vectorize
                        wr[b * 32 + j] = np.float32(np.int32(qr[b * 16 + j]) & 15) * scale + offset
                    for j in range(16):
                        wr[b * 32 + 16 + j] = np.float32(np.int32(qr[b * 16 + j]) >> 4) * scale + offset
        w0, w1, w2, w3 = w[0], w[1], w[2], w[3]
        for i0 in range(0, rows, 4):
            x0, x1 = x[i0], x[min(i0 + 1, rows - 1)]
            x2, x3 = x[min(i0 + 2, rows - 1)], x[min(i0 + 3, rows - 1)]
            a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = np.float32(0)
            a20 = a21 = a22 = a23 = a30 = a31 = a32 = a33 = np.float32(0)
            for j in range(k):
                v0, v1, v2, v3 = x0[j], x1[j], x2[j], x3[j]
                u0, u1, u2, u3 = w0[j], w1[j], w2[j], w3[j]
                a00 += u0 * v0
                a01 += u1 * v0
                a02 += u2 * v0
                a03 += u3 * v0
                a10 += u0 * v1
                a11 += u1 * v1
                a12 += u2 * v1
                a13 += u3 * v1
                a20 += u0 * v2
                a21 += u1 * v2
                a22 += u2 * v2
                a23 += u3 * v2
                a30 += u0 * v3
                a31 += u1 * v3
                a32 += u2 * v3
                a33 += u3 * v3
            sums = ((a00, a01, a02, a03), (a10, a11, a12, a13), (a20, a21, a22, a23), (a30, a31, a32, a33))
            for a in range(min(4, rows - i0)):
                for t in range(t_rows):
                    out[i0 + a, r0 + t] = sums[a][t]


def _rows_nbits(packed: np.ndarray, s: np.ndarray, z: np.ndarray, x: np.ndarray, out: np.ndarray, bits: int,
                block: int) -> None:  # fmt: skip
    """out [M, N] = x [M, W] @ ((q - z) * s)^T over onnxruntime's n-bit blocks (MatMulNBits): packed uint8
    [N, W * bits / 8] (`8 / bits` integers a byte, low bits first), s and z float32 [N, W / block] (z [1, 1]:
    one zero point for every block), x float32 [M, W], W whole blocks.  Each block's integers are dotted
    with x as they are unpacked and scaled after: s * (q . x - z * sum(x))."""
    rows, width = x.shape
    per = 8 // bits
    blob = block // per  # bytes per block
    nb = width // block
    mask = (1 << bits) - 1
    # x regrouped per block so that the p-th integer of each byte meets a contiguous run: xp[i, b, p, j]
    # = x[i, b, j * per + p] (loops over a byte's integers then vectorize), and each block's sum of x.
    xp = np.empty((rows, width), np.float32)
    xs = np.empty((rows, nb), np.float32)
    for i in range(rows):
        for b in range(nb):
            total = np.float32(0)
            for j in range(blob):
                for p in range(per):
                    v = x[i, b * block + j * per + p]
                    xp[i, b * block + p * blob + j] = v
                    total += v
            xs[i, b] = total
    shared = z.size == 1  # one zero point for every block (N = 1 with per-block ones is one row of them)
    for r in range(packed.shape[0]):
        qr = packed[r]
        for i in range(rows):
            xi = xp[i]
            acc = np.float32(0)
            for b in range(nb):
                dot = np.float32(0)
                qb = qr[b * blob : (b + 1) * blob]  # slices, not offsets: the loops below index from 0
                if bits == 4:
                    lo, hi = xi[b * block : b * block + blob], xi[b * block + blob : (b + 1) * block]
                    for j in range(blob):
                        v = np.int32(qb[j])
                        dot += np.float32(v & 15) * lo[j] + np.float32(v >> 4) * hi[j]
                else:
                    for p in range(per):
                        xq = xi[b * block + p * blob : b * block + (p + 1) * blob]
                        for j in range(blob):
                            dot += np.float32((np.int32(qb[j]) >> (p * bits)) & mask) * xq[j]
                zb = z[0, 0] if shared else z[r, b]
                acc += s[r, b] * (dot - zb * xs[i, b])
            out[i, r] = acc


def _widen_nbits(packed: np.ndarray, s: np.ndarray, z: np.ndarray, bits: int, block: int, dst: np.ndarray) -> None:
    """dst [R, W] = (q - z) * s for R rows of onnxruntime's n-bit blocks (as `_rows_nbits` takes them),
    each element written once, for BLAS to multiply."""
    per = 8 // bits
    blob = block // per
    mask = (1 << bits) - 1
    shared = z.size == 1  # one zero point for every block (N = 1 with per-block ones is one row of them)
    for r in range(packed.shape[0]):
        qr, dr = packed[r], dst[r]
        for b in range(s.shape[1]):
            sb = s[r, b]
            offset = (z[0, 0] if shared else z[r, b]) * sb
            qb, db = qr[b * blob : (b + 1) * blob], dr[b * block : (b + 1) * block]
            if bits == 4:  # two stores a byte, which vectorize where a loop over the byte's integers does not
                for j in range(blob):
                    v = np.int32(qb[j])
                    db[2 * j] = np.float32(v & 15) * sb - offset
                    db[2 * j + 1] = np.float32(v >> 4) * sb - offset
            elif bits == 8:
                for j in range(blob):
                    db[j] = np.float32(qb[j]) * sb - offset
            else:
                for j in range(blob):
                    v = np.int32(qb[j])
                    for p in range(per):
                        db[j * per + p] = np.float32((v >> (p * bits)) & mask) * sb - offset


class _CompiledKernels:
    """The process's compiled path: its one switch (`set_compiled`), whether numba imports, every family's
    compiled functions (`jitted`), and the packed products' own state: each packed weight's unpacked form
    by the weight's id, the row counts that choose a kernel, the cohort's threads."""

    enabled: bool = True
    numba_found: bool | None = None  # whether `import numba` works (None until first asked)
    # (functions, fastmath) -> those functions compiled, by name (`jitted`); the one table of the process.
    made: dict = {}  # noqa: RUF012 (the one table of the process, on purpose)
    forms: dict = {}  # noqa: RUF012 (the one table of the process, on purpose)
    # Rows of x up to which a packed product runs the row kernels, then the tile kernels (`_tiles_q4`,
    # `_tiles_q8`); more run `_cohort_rows`, which widens each group of W's rows once for all of them.
    row_kernel_rows: int = 2
    tile_rows: int = 8
    # Threads a cohort's product spreads W's rows over (numba.get_num_threads(), NUMBA_NUM_THREADS, when
    # the kernels compile; 0 before), and the pool that runs all but the caller's share; 1: the caller alone.
    threads: int = 0
    pool: object = None

    @classmethod
    def get(cls) -> dict | None:
        """The packed products' compiled kernels by name, compiling them on first use; None where the
        compiled path is off or numba is not installed."""
        kernels = jitted(
            (_halves_q4, _rows_q4, _tiles_q4, _rows_q8, _tiles_q8, _cohort_rows, _rows_nbits, _widen_nbits)
        )
        if kernels is not None and not cls.threads:
            import numba  # jitted found it

            cls.threads = max(1, numba.get_num_threads())
        return kernels

    @classmethod
    def cohort(cls, form: tuple, x: np.ndarray, out: np.ndarray) -> None:
        """out = x @ W^T by the compiled `_cohort_rows`, W's rows split into `threads` runs of whole groups
        of 4, each run on its own thread (the caller's the first): each element is the same sum in the
        same order as in one call over every row, so the split changes no bit of `out`."""
        kernels = cls.get()
        assert kernels is not None, "the kernels are compiled before a product calls them"
        kernel = kernels["_cohort_rows"]
        q8 = len(form) == 2
        given = (*form, *(form[1:2] if q8 else ()))  # Q8_0 passes d for the unread m
        groups = -(-out.shape[1] // 4)
        parts = min(cls.threads, groups // 16)  # at least 64 of W's rows a thread, else one call
        if parts <= 1:
            kernel(*given, x, out, q8)
            return
        from concurrent.futures import ThreadPoolExecutor  # only where a cohort runs on several threads

        pool = cls.pool
        if not isinstance(pool, ThreadPoolExecutor):
            pool = cls.pool = ThreadPoolExecutor(cls.threads - 1, thread_name_prefix="loam-cohort")
        edges = [4 * (groups * p // parts) for p in range(parts)] + [out.shape[1]]
        spans = [slice(edges[p], edges[p + 1]) for p in range(parts)]
        runs = [(*(a[span] for a in given), x, out[:, span], q8) for span in spans]
        pending = [pool.submit(kernel, *run) for run in runs[1:]]
        kernel(*runs[0])
        for done in pending:
            done.result()

    @classmethod
    def form(cls, w: np.ndarray) -> tuple:
        """W's blocks unpacked for the row kernels: (q, d) for Q8_0, (q, d, m) for Q4, made once per weight."""
        hit = cls.forms.get(id(w))
        if hit is not None and hit[0]() is w:
            return hit[1]
        import weakref  # only where numba is: the entry goes when the weight does

        rows = w.shape[0]
        d = np.ascontiguousarray(w["d"], dtype=np.float32)
        names = w.dtype.names
        assert names is not None, "blocks of a block_dtype"
        if "q" in names:  # Q8_0
            form: tuple = (np.ascontiguousarray(w["q"]).reshape(rows, -1), d)
        else:
            m = np.ascontiguousarray(w["m"], dtype=np.float32) if "m" in names else np.float32(-8) * d
            form = (np.ascontiguousarray(w["qs"]).reshape(rows, -1), d, m)
        key = id(w)

        def forget(_: object, key: int = key) -> None:
            cls.forms.pop(key, None)

        cls.forms[key] = (weakref.ref(w, forget), form)
        return form

    @classmethod
    def available(cls) -> bool:
        """Whether compiled kernels may run: the path is on and numba imports (compiling nothing)."""
        if not cls.enabled:
            return False
        if cls.numba_found is None:
            try:
                import numba  # noqa: F401  # optional: without it the module imports only numpy
            except ImportError:
                cls.numba_found = False
            else:
                cls.numba_found = True
        return cls.numba_found


def compiled_path() -> bool:
    """Whether compiled kernels may run from now on: the process's one switch (`set_compiled`) is on and
    numba is installed.  Each family of kernels (packed products, integer products, attention, LayerNorm)
    compiles its own on first use (`jitted`), so a module compiles only the kernels it calls."""
    return _CompiledKernels.available()


def jitted(functions: tuple, fastmath: bool = True) -> dict | None:
    """`functions` compiled by numba, by name, on their first use in the process (each tuple of functions
    once, found again by the functions' identity); None where the compiled path is off (`set_compiled`) or
    numba is not installed.  `fastmath`: sums may be reassociated and products fused into sums (so the
    loops vectorize), NaN and infinity keeping their IEEE meaning; False keeps the source's order and
    roundings (the integer kernels give their numpy oracle's bits).  Every family of kernels compiles
    through this, so the switch, numba's options and the cache are written once."""
    if not _CompiledKernels.enabled:
        return None
    made = _CompiledKernels.made.get((functions, fastmath))  # once made, numba is known to be installed
    if made is None:
        if not compiled_path():
            return None
        import numba  # compiled_path() found it

        flags = {"reassoc", "contract"} if fastmath else False
        # Each function is compiled from a copy whose globals name the others' compiled forms, so one may
        # call another (a jitted helper, as the Q4 kernels call `_halves_q4`); numba compiles each on its
        # first call, when every name is bound.
        scopes: dict = {}  # id of a module's globals -> their copy
        made = {}
        for fn in functions:
            scope = scopes.setdefault(id(fn.__globals__), dict(fn.__globals__))
            twin = type(fn)(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
            twin.__kwdefaults__ = fn.__kwdefaults__
            made[fn.__name__] = numba.njit(fastmath=flags, nogil=True, error_model="numpy")(twin)
        for scope in scopes.values():
            scope.update((name, kernel) for name, kernel in made.items() if name in scope)
        _CompiledKernels.made[(functions, fastmath)] = made
    return made


def compiled_kernels() -> dict | None:
    """The compiled row kernels by name, compiling them on first use; None where they are off or numba
    is not installed (the caller computes in numpy)."""
    return _CompiledKernels.get()


def matmul_packed_compiled(rows: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """rows [M, K] @ W^T for packed blocks W [N, K / 32] by the compiled kernels, or None where
    they are off or numba is not installed (the caller computes it in numpy)."""
    kernels = _CompiledKernels.get()
    if kernels is None:
        return None
    form = _CompiledKernels.form(w)
    out = np.empty((rows.shape[0], w.shape[0]), np.float32)
    count, q8 = rows.shape[0], len(form) == 2
    if count <= _CompiledKernels.row_kernel_rows:
        kernels["_rows_q8" if q8 else "_rows_q4"](*form, rows, out)
        return out
    if count <= _CompiledKernels.tile_rows:
        kernels["_tiles_q8" if q8 else "_tiles_q4"](*form, rows, out)
        return out
    _CompiledKernels.cohort(form, rows, out)
    return out


def packed_form(w: np.ndarray) -> tuple:
    """W's ggml blocks unpacked for the compiled kernels, made once per weight (`_CompiledKernels.form`):
    (q, d) for Q8_0, (q, d, m) for Q4 (m = -8 d for Q4_0)."""
    return _CompiledKernels.form(w)


def set_compiled(enabled: bool) -> bool:
    """Let the compiled kernels (numba, where installed: packed products, attention, LayerNorm) run from now
    on, in the whole process, or not; returns whether they were on before.  Turning them on compiles them now (about
    1.5 s, once per process) rather than in the first product: a server calls it before its first
    request.  Without numba the numpy kernel runs either way."""
    if not isinstance(enabled, bool):
        raise ValueError(f"set_compiled: enabled must be True or False, not {enabled!r}")
    before, _CompiledKernels.enabled = _CompiledKernels.enabled, enabled
    _CompiledKernels.get()
    return before


PIECES: dict[str, Callable[..., object]] = {
    "_halves_q4": _halves_q4,
    "_rows_q4": _rows_q4,
    "_tiles_q4": _tiles_q4,
    "_rows_q8": _rows_q8,
    "_tiles_q8": _tiles_q8,
    "_cohort_rows": _cohort_rows,
    "_rows_nbits": _rows_nbits,
    "_widen_nbits": _widen_nbits,
    "_CompiledKernels": _CompiledKernels,
    "compiled_kernels": compiled_kernels,
    "compiled_path": compiled_path,
    "jitted": jitted,
    "matmul_packed_compiled": matmul_packed_compiled,
    "packed_form": packed_form,
    "set_compiled": set_compiled,
}
