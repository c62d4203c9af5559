"""The tile-program kernel library: kernels written once as `TileProgram`s, printed to numpy and WGSL.

Kept out of `loam.dialects` because these are programs written in the tile-program IR, not the IR's
definition (`loam.dialects.tile_program`): the WGSL pipeline's passes pick them (`tile-rows` the row
kernels, `tile-matmul` the tiled product) and the backends print whatever program an op carries.

- `softmax_rows`, `layernorm_rows`: a 1-D grid, one row per program, the row's elements in one tile;
- `matmul_tiles`: a 2-D or, batched, 3-D grid of [BM, BN] blocks of the product, looping over the
  contraction in steps of BK, with an optional fused epilogue;
- `attention_rows`: softmax(score(Q K)) V, one query row per program, looping over the keys in
  blocks with a running maximum and sum (the scores are never stored).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from loam.dialects.expr import Expr
from loam.dialects.tile_program import (
    Carry,
    Dot,
    End,
    Fill,
    Iota,
    Load,
    Loop,
    Map,
    Param,
    ProgramId,
    Reduce,
    Step,
    Store,
    TileProgram,
)


def _x(i: int) -> Expr:
    return Expr.operand(i)


def softmax_rows(tile: int) -> TileProgram:
    """Softmax of each row of a [R, C] f32 tensor, C <= `tile` (params: C); grid R."""
    steps: list[Step] = [
        ProgramId(),  # 0 row
        Param(0),  # 1 C
        Iota(),  # 2 cols
        Map(_x(0).binary("less", _x(1)), (2, 1)),  # 3 mask = cols < C
        Map(_x(0) * _x(1) + _x(2), (0, 1, 2)),  # 4 index = row * C + cols
        Load(0, 4, 3, -3.0e38),  # 5 v
        Reduce("max", 5),  # 6 m
        Map((_x(0) - _x(1)).unary("exp"), (5, 6)),  # 7 e (masked lanes: exp(-3e38 - m) = 0)
        Reduce("sum", 7),  # 8 s
        Map(_x(0) / _x(1), (7, 8)),  # 9 y
        Store(0, 4, 9, 3),
    ]
    return TileProgram(tuple(steps), tile, 1, 1)


def layernorm_rows(tile: int, epsilon: float) -> TileProgram:
    """LayerNormalization of each row of a [R, C] f32 tensor over its last axis with scale and bias
    [C], C <= `tile` (params: C); grid R."""
    zero = Expr.const(0.0)
    steps: list[Step] = [
        ProgramId(),  # 0 row
        Param(0),  # 1 C
        Iota(),  # 2 cols
        Map(_x(0).binary("less", _x(1)), (2, 1)),  # 3 mask
        Map(_x(0) * _x(1) + _x(2), (0, 1, 2)),  # 4 index
        Load(0, 4, 3, 0.0),  # 5 x
        Load(1, 2, 3, 0.0),  # 6 scale
        Load(2, 2, 3, 0.0),  # 7 bias
        Reduce("sum", 5),  # 8 total
        Map(_x(0) / _x(1).cast("f32"), (8, 1)),  # 9 mean
        Map(Expr.select(_x(2), _x(0) - _x(1), zero), (5, 9, 3)),  # 10 centred (0 off the row)
        Map(_x(0) * _x(0), (10,)),  # 11 squares
        Reduce("sum", 11),  # 12 sum of squares
        Map(Expr.const(1.0) / ((_x(0) / _x(1).cast("f32")) + epsilon).unary("sqrt"), (12, 1)),  # 13 inv
        Map(_x(0) * _x(1) * _x(2) + _x(3), (10, 13, 6, 7)),  # 14 y
        Store(0, 4, 14, 3),
    ]
    return TileProgram(tuple(steps), tile, 3, 1)


def _i(value: int) -> Expr:
    return Expr.const(value, "i32")


class _Builder:
    """Appends steps, giving each one's index; `map` writes its expression as a Python function of
    the operands (`lambda r, n: r < n`)."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def __call__(self, step: Step) -> int:
        self.steps.append(step)
        return len(self.steps) - 1

    def map(self, fn: Callable[..., Expr], *args: int) -> int:
        return self(Map(fn(*(_x(k) for k in range(len(args)))), args))

    def params(self, count: int) -> list[int]:
        first = sum(isinstance(s, Param) for s in self.steps)
        return [self(Param(first + k)) for k in range(count)]


def _batch_offset(b: Expr, extents: Sequence[Expr], strides: Sequence[Expr]) -> Expr:
    """The element offset of batch entry `b` (row-major over `extents`) through `strides`."""
    total: Expr | None = None
    rest = b
    for d in range(len(extents) - 1, -1, -1):
        term = rest.binary("mod", extents[d]) * strides[d]
        rest = rest.binary("div", extents[d])
        total = term if total is None else total + term
    assert total is not None
    return total


MATMUL_FIXED_NUMBERS = 7
"""`matmul_tiles` numbers before the batch block: M, N, K, A's row and contraction strides, B's
contraction and column strides."""


def matmul_tiles(
    block_m: int, block_n: int, block_k: int, batch_rank: int = 0, epilogue: Expr | None = None, extras: int = 0
) -> TileProgram:
    """C = A @ B over [BM, BN] blocks of C, the contraction in steps of BK, masked at ragged edges;
    finished by `epilogue` (an `Expr` whose operand 0 is the product, operand i extra operand i - 1)
    when given.  Operands: A, B, then the extras; result: C, contiguous [batch..., M, N].

    Grid: (ceil(N / BN), ceil(M / BM)), and the batch count (C's batch extents multiplied) as axis 2
    when `batch_rank` > 0.  Numbers (params), all in elements: M, N, K; A's row and contraction
    strides; B's contraction and column strides; then with batch axes C's batch extents, A's batch
    strides and B's (0 along a broadcast axis); then per extra its row and column strides and batch
    strides (0 where it broadcasts).  Strides make a transposed (permuted) operand free to read.
    """
    if not 0 <= batch_rank <= 2:
        raise ValueError(f"matmul_tiles takes 0 to 2 batch axes, not {batch_rank}")
    if (epilogue.arity if epilogue is not None else 1) != 1 + extras:
        raise ValueError(f"matmul_tiles: {extras} extra operands need an epilogue reading the product and each")
    bm, bn, bk = block_m, block_n, block_k
    s = _Builder()
    pn, pm = s(ProgramId(0)), s(ProgramId(1))
    m, n, k, a_row, a_k, b_k, b_col = s.params(MATMUL_FIXED_NUMBERS)
    offsets: dict[str, int] = {}
    pb = s(ProgramId(2)) if batch_rank else -1
    extents = s.params(batch_rank)

    def offset(strides: list[int]) -> int:
        return s.map(lambda b, *es: _batch_offset(b, es[:batch_rank], es[batch_rank:]), pb, *extents, *strides)

    if batch_rank:
        offsets["a"], offsets["b"] = offset(s.params(batch_rank)), offset(s.params(batch_rank))
        offsets["c"] = s.map(lambda b, m_, n_: b * m_ * n_, pb, m, n)
    rows = s.map(lambda p, i: p * _i(bm) + i, pm, s(Iota((bm, 1), 0)))
    cols = s.map(lambda p, i: p * _i(bn) + i, pn, s(Iota((1, bn), 1)))
    k_row, k_col = s(Iota((1, bk), 1)), s(Iota((bk, 1), 0))
    row_ok = s.map(lambda r, m_: r.binary("less", m_), rows, m)
    col_ok = s.map(lambda c, n_: c.binary("less", n_), cols, n)

    def plus_offset(key: str, fn: Callable[..., Expr], *args: int) -> int:
        """`fn` over `args`, plus the batch offset `key` when there is one."""
        if key not in offsets:
            return s.map(fn, *args)
        return s.map(lambda o, *xs: o + fn(*xs), offsets[key], *args)

    zero = s(Fill(0.0, (bm, bn)))
    k0 = s(Loop(k, bk))
    acc = s(Carry(zero))
    a_at = plus_offset("a", lambda r, rs, k0_, kk, ks: r * rs + (k0_ + kk) * ks, rows, a_row, k0, k_row, a_k)
    a_ok = s.map(lambda ok, k0_, kk, k_: ok.binary("and", (k0_ + kk).binary("less", k_)), row_ok, k0, k_row, k)
    a = s(Load(0, a_at, a_ok, 0.0))
    b_at = plus_offset("b", lambda k0_, kk, ks, c, cs: (k0_ + kk) * ks + c * cs, k0, k_col, b_k, cols, b_col)
    b_ok = s.map(lambda k0_, kk, k_, ok: (k0_ + kk).binary("less", k_).binary("and", ok), k0, k_col, k, col_ok)
    b = s(Load(1, b_at, b_ok, 0.0))
    s(End((s.map(lambda x, y: x + y, acc, s(Dot(a, b))),)))
    ok = s.map(lambda r, c: r.binary("and", c), row_ok, col_ok)
    value = acc
    if epilogue is not None:
        loaded = []
        for j in range(extras):
            e_row, e_col = s.params(2)
            key = f"e{j}"
            if batch_rank:
                offsets[key] = offset(s.params(batch_rank))
            at = plus_offset(key, lambda r, rs, c, cs: r * rs + c * cs, rows, e_row, cols, e_col)
            loaded.append(s(Load(2 + j, at, ok, 0.0)))
        value = s(Map(epilogue, (acc, *loaded)))
    c_at = plus_offset("c", lambda r, n_, c: r * n_ + c, rows, n, cols)
    s(Store(0, c_at, value, ok))
    tile = max(bm * bn, bm * bk, bk * bn)
    return TileProgram(tuple(s.steps), tile, 2 + extras, 1)


ATTENTION_FIXED_NUMBERS = 9
"""`attention_rows` numbers before the batch block: Sq, Sk, D, Q's row and feature strides, K^T's
feature and key strides, V's key and feature strides."""

LOWEST_F32 = -3.4028234663852886e38
"""The running maximum's start and a padded key's score: finite, so no step computes inf - inf."""


def attention_rows(
    head_tile: int, value_tile: int, key_block: int, batch_rank: int, score: Expr, extras: Sequence[str] = ()
) -> TileProgram:
    """O = softmax(score(Q K^T, extras...)) V over the last axis, one query row per program: Q
    [batch..., Sq, D], K^T [batch..., D, Sk], V [batch..., Sk, Dv], read through their strides;
    `score` is an `Expr` whose operand 0 is a row's Q K^T and operand i its extra operand i - 1 (a
    scale, a mask), of the element types `extras` lists.  D <= `head_tile`, Dv <= `value_tile`.

    Each program walks the keys in blocks of `key_block`, carrying the row's running maximum m,
    its sum l of exp(score - m) and the accumulated exp(score - m) V, rescaled by exp(m - m') when
    the maximum grows (the online softmax), and stores acc / l: the softmax's value up to float32
    rounding, without the [Sq, Sk] scores in memory.  A row whose every score is -inf is NaN, as
    the softmax's 0 / 0 is.

    Grid: (Sq, and the batch count when `batch_rank` > 0).  Numbers, in elements: Sq, Sk, D, Q's
    row and feature strides, K^T's feature and key strides, V's key and feature strides; with
    batch axes O's batch extents then Q's, K^T's and V's batch strides (0 where broadcast); then per
    extra its row and key strides and batch strides (0 where it broadcasts).  Result: O,
    contiguous [batch..., Sq, Dv]; its Dv is V's, given as the last number.
    """
    if not 0 <= batch_rank <= 2:
        raise ValueError(f"attention_rows takes 0 to 2 batch axes, not {batch_rank}")
    if score.arity > 1 + len(extras):
        raise ValueError(f"attention_rows: the score reads {score.arity - 1} extra operands, {len(extras)} given")
    dq, dv, bn = head_tile, value_tile, key_block
    s = _Builder()
    row = s(ProgramId(0))
    sq, sk, d, q_row, q_d, k_d, k_key, v_key, v_d = s.params(ATTENTION_FIXED_NUMBERS)
    pb = s(ProgramId(1)) if batch_rank else -1
    extents = s.params(batch_rank)
    offsets: dict[str, int] = {}

    def offset(strides: list[int]) -> int:
        return s.map(lambda b, *es: _batch_offset(b, es[:batch_rank], es[batch_rank:]), pb, *extents, *strides)

    if batch_rank:
        for operand in ("q", "k", "v"):
            offsets[operand] = offset(s.params(batch_rank))

    def at(key: str, fn: Callable[..., Expr], *args: int) -> int:
        if key not in offsets:
            return s.map(fn, *args)
        return s.map(lambda o, *xs: o + fn(*xs), offsets[key], *args)

    extra_strides = []
    for j in range(len(extras)):
        extra_strides.append(s.params(2))
        if batch_rank:
            offsets[f"e{j}"] = offset(s.params(batch_rank))
    (width,) = s.params(1)  # Dv
    d_col = s(Iota((1, dq), 1))
    v_col = s(Iota((1, dv), 1))
    d_ok = s.map(lambda c, d_: c.binary("less", d_), d_col, d)
    q = s(Load(0, at("q", lambda r, rs, c, cs: r * rs + c * cs, row, q_row, d_col, q_d), d_ok, 0.0))
    lowest = s(Fill(LOWEST_F32, ()))
    nothing = s(Fill(0.0, ()))
    start = s(Fill(0.0, (1, dv)))
    k0 = s(Loop(sk, bn))
    m, total, acc = s(Carry(lowest)), s(Carry(nothing)), s(Carry(start))
    key = s.map(lambda k, i: k + i, k0, s(Iota((1, bn), 1)))  # [1, BN] the block's keys
    key_ok = s.map(lambda k, n: k.binary("less", n), key, sk)
    d_row = s(Iota((dq, 1), 0))
    kt_ok = s.map(lambda r, d_, ok: r.binary("less", d_).binary("and", ok), d_row, d, key_ok)
    kt = s(Load(1, at("k", lambda r, rs, k, ks: r * rs + k * ks, d_row, k_d, key, k_key), kt_ok, 0.0))
    loaded = []
    for j, elem in enumerate(extras):
        e_row, e_key = extra_strides[j]
        where = at(f"e{j}", lambda r, rs, k, ks: r * rs + k * ks, row, e_row, key, e_key)
        loaded.append(s(Load(3 + j, where, key_ok, 0.0, elem)))
    scored = s(Map(score, (s(Dot(q, kt)), *loaded)))
    kept = s.map(lambda ok, x: Expr.select(ok, x, LOWEST_F32), key_ok, scored)  # padded keys count for nothing
    grown = s.map(lambda a, b: a.binary("max", b), m, s(Reduce("max", kept)))
    weights = s.map(lambda ok, x, g: Expr.select(ok, (x - g).unary("exp"), 0.0), key_ok, kept, grown)
    rescale = s.map(lambda a, g: (a - g).unary("exp"), m, grown)
    v_keys = s.map(lambda k, i: k + i, k0, s(Iota((bn, 1), 0)))  # [BN, 1]
    v_ok = s.map(lambda k, n, c, w: k.binary("less", n).binary("and", c.binary("less", w)), v_keys, sk, v_col, width)
    v = s(Load(2, at("v", lambda k, ks, c, cs: k * ks + c * cs, v_keys, v_key, v_col, v_d), v_ok, 0.0))
    summed = s.map(lambda t, r, w: t * r + w, total, rescale, s(Reduce("sum", weights)))
    s(End((grown, summed, s.map(lambda a, r, pv: a * r + pv, acc, rescale, s(Dot(weights, v))))))
    out_at = s.map(lambda r, w, c: r * w + c, row, width, v_col)
    if batch_rank:
        out_at = s.map(lambda b, n, w, o: b * n * w + o, pb, sq, width, out_at)
    s(Store(0, out_at, s.map(lambda a, t: a / t, acc, total), s.map(lambda c, w: c.binary("less", w), v_col, width)))
    return TileProgram(tuple(s.steps), max(dq * bn, bn * dv, dq, dv), 3 + len(extras), 1)
