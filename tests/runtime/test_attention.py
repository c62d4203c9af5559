"""`kernel.attention`'s compiled kernel against its numpy kernel, and the numpy kernel against the chain.

The numpy kernel (`attention_numpy`) is the oracle: it must equal the unfused chain written plainly
(keys and values repeated per query head, the scores scaled, masked, biased, the row softmax, the product
with V) to float32 rounding, and the compiled kernel must equal it within 2e-6 (absolute, for values of
V about 1; both sum float32 in different orders) on hypothesis-chosen shapes: one query and many,
grouped heads, strided (transposed) operands, rows whose every key is masked, and no keys at all.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loam.runtime.kernels.attention import _CompiledAttention, attention_numpy, kernel_attention
from loam.runtime.kernels.compiled import set_compiled

FLOAT_MIN = float(np.finfo(np.float32).min)


def chain(q: np.ndarray, k: np.ndarray, v: np.ndarray, keep: np.ndarray | None, bias: np.ndarray | None,
          scale: float, fill: float) -> np.ndarray:  # fmt: skip
    """The attention chain as an export computes it, in float64 after the float32 scores."""
    repeats = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, repeats, axis=1), np.repeat(v, repeats, axis=1)
    s = (q @ np.swapaxes(kr, 2, 3)) / np.float32(scale)
    if keep is not None:
        s = np.where(keep, s, np.float32(fill))
    if bias is not None:
        with np.errstate(over="ignore"):
            s = s + bias
    with np.errstate(all="ignore"):
        s = s.astype(np.float64)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)) @ vr.astype(np.float64)


@st.composite
def problems(draw: st.DrawFn) -> dict:
    batch, groups, repeats = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 3]))
    queries, keys = draw(st.sampled_from([1, 2, 3, 7, 16, 17])), draw(st.integers(1, 40))
    d, dv = draw(st.sampled_from([1, 5, 16, 64])), draw(st.sampled_from([1, 8, 64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    heads = groups * repeats
    q = rng.standard_normal((batch, queries, heads, d)).astype(np.float32).transpose(0, 2, 1, 3)  # strided
    k = rng.standard_normal((batch, groups, keys, d)).astype(np.float32)
    v = rng.standard_normal((batch, keys, groups, dv)).astype(np.float32).transpose(0, 2, 1, 3)  # strided
    masked, biased = draw(st.booleans()), draw(st.booleans())
    keep = rng.random((1, 1, queries, keys)) < 0.7 if masked else None
    if keep is not None and draw(st.booleans()):
        keep[..., 0, :] = False  # a query row whose every key is masked
    if keep is not None and draw(st.booleans()):
        keep = keep[0, 0]  # rank 2, broadcast
    bias = np.where(rng.random((batch, 1, queries, keys)) < 0.2, FLOAT_MIN, 0).astype(np.float32) if biased else None
    return {"q": q, "k": k, "v": v, "keep": keep, "bias": bias, "scale": float(np.sqrt(d))}


def run(problem: dict, kernel: object = kernel_attention) -> np.ndarray:
    masks = tuple(m for m in (problem["keep"], problem["bias"]) if m is not None)
    params = {"scale": problem["scale"], "divide": 1, "masked": int(problem["keep"] is not None),
              "fill": FLOAT_MIN, "biased": int(problem["bias"] is not None)}  # fmt: skip
    with np.errstate(all="ignore"):  # as forward's: a fully masked row's inf and NaN pass silently
        if kernel is attention_numpy:
            return attention_numpy(problem["q"], problem["k"], problem["v"], masks, **params)
        return kernel_attention(problem["q"], problem["k"], problem["v"], *masks, **params)


@pytest.fixture
def every_query_compiled() -> Iterator[None]:
    rows, _CompiledAttention.rows = _CompiledAttention.rows, 1 << 30
    yield
    _CompiledAttention.rows = rows


@settings(max_examples=60, deadline=None)
@given(problem=problems())
def test_the_numpy_kernel_is_the_chain(problem: dict) -> None:
    expected = chain(problem["q"], problem["k"], problem["v"], problem["keep"], problem["bias"], problem["scale"],
                     FLOAT_MIN)  # fmt: skip
    got = run(problem, attention_numpy)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-6)  # NaN where NaN (every score -inf)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problem=problems())
def test_the_compiled_kernel_is_the_numpy_kernel(problem: dict, every_query_compiled: None) -> None:
    assert _CompiledAttention.get() is not None, "numba is a dev dependency"
    got, oracle = run(problem), run(problem, attention_numpy)
    np.testing.assert_allclose(got, oracle, rtol=0, atol=2e-6)


def test_a_row_masked_by_where_alone_averages_v_and_one_masked_by_the_bias_too_is_nan(
    every_query_compiled: None,
) -> None:
    """Every score of the row the fill (-FLT_MAX): the softmax is uniform, so the row is V's mean, as the
    chain gives it; the fill plus a -FLT_MAX bias is -inf everywhere: NaN, as the chain's softmax gives."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, n, 4)).astype(np.float32) for n in (2, 5, 5))
    keep = np.ones((1, 1, 2, 5), bool)
    keep[..., 0, :] = False
    bias = np.zeros((1, 1, 2, 5), np.float32)
    problem = {"q": q, "k": k, "v": v, "keep": keep, "bias": None, "scale": 2.0}
    for kernel in (kernel_attention, attention_numpy):
        out = run(problem, kernel)
        np.testing.assert_allclose(out[0, :, 0], v[0].mean(axis=1), rtol=1e-6, atol=1e-6)
    bias[..., 0, :] = FLOAT_MIN
    problem["bias"] = bias
    for kernel in (kernel_attention, attention_numpy):
        out = run(problem, kernel)
        assert np.isnan(out[0, :, 0]).all() and not np.isnan(out[0, :, 1]).any()


@pytest.mark.parametrize("queries", [0, 1, 3])
def test_no_keys_give_zeros_and_no_queries_nothing(queries: int, every_query_compiled: None) -> None:
    q = np.ones((1, 2, queries, 4), np.float32)
    k, v = np.ones((1, 1, 0, 4), np.float32), np.ones((1, 1, 0, 3), np.float32)
    for kernel in (kernel_attention, attention_numpy):
        out = run({"q": q, "k": k, "v": v, "keep": None, "bias": None, "scale": 1.0}, kernel)
        assert out.shape == (1, 2, queries, 3) and not out.any()


def test_without_the_compiled_path_the_kernel_is_the_numpy_kernel_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    problem = {"q": rng.standard_normal((2, 6, 1, 16)).astype(np.float32),
               "k": rng.standard_normal((2, 2, 30, 16)).astype(np.float32),
               "v": rng.standard_normal((2, 2, 30, 8)).astype(np.float32), "keep": None,
               "bias": np.zeros((2, 1, 1, 30), np.float32), "scale": 4.0}  # fmt: skip
    before = set_compiled(False)
    try:
        assert np.array_equal(run(problem), run(problem, attention_numpy))
    finally:
        set_compiled(before)


class Paged:
    """Keys and values in a pool of blocks of `tokens` positions, as a server's paged state holds them: what
    `kernel_attention` is given as `into`, answering `pages` for its own placeholders (zeros of K's and V's
    shapes that own no memory)."""

    def __init__(self, k: np.ndarray, v: np.ndarray, absent: np.ndarray, tokens: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        batch, groups, keys = k.shape[:3]
        per_row = -(-keys // tokens)
        order = rng.permutation(batch * per_row + 3)  # the blocks in a shuffled order, some unused
        self.k_pool = rng.standard_normal((len(order), groups, tokens, k.shape[3])).astype(np.float32)
        self.v_pool = rng.standard_normal((len(order), groups, tokens, v.shape[3])).astype(np.float32)
        self.slots = np.full((batch, keys), -1, np.int64)
        self.tokens = tokens
        for b in range(batch):
            for j in range(keys):
                block = order[b * per_row + j // tokens]
                self.k_pool[block, :, j % tokens], self.v_pool[block, :, j % tokens] = k[b, :, j], v[b, :, j]
                if not absent[b, j]:
                    self.slots[b, j] = block * tokens + j % tokens
        self.k, self.v = (np.broadcast_to(np.float32(0), x.shape) for x in (k, v))

    def pages(self, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        assert k is self.k and v is self.v
        blocks = np.where(self.slots >= 0, self.slots // self.tokens, -1)
        return self.k_pool, self.v_pool, blocks, self.slots % self.tokens


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problem=problems(), tokens=st.sampled_from([1, 3, 16]), seed=st.integers(0, 2**16))
def test_keys_and_values_read_through_a_block_table_are_the_dense_ones(
    problem: dict, tokens: int, seed: int, every_query_compiled: None
) -> None:
    """Both kernels read paged K and V (shuffled blocks, absent slots: a padded past's zero rows) as the dense
    K and V with zeros where a slot is absent: the compiled kernel bit for bit its dense reads, the numpy
    kernel bit for bit the numpy kernel on the dense operands."""
    k, v = problem["k"].copy(), problem["v"].copy()
    absent = np.random.default_rng(seed).random(k.shape[0:1] + k.shape[2:3]) < 0.2
    k[np.nonzero(absent)[0], :, np.nonzero(absent)[1]] = 0
    v[np.nonzero(absent)[0], :, np.nonzero(absent)[1]] = 0
    paged = Paged(k, v, absent, tokens, seed)
    masks = tuple(m for m in (problem["keep"], problem["bias"]) if m is not None)
    params = {"scale": problem["scale"], "divide": 1, "masked": int(problem["keep"] is not None),
              "fill": FLOAT_MIN, "biased": int(problem["bias"] is not None)}  # fmt: skip
    with np.errstate(all="ignore"):
        dense = kernel_attention(problem["q"], k, v, *masks, **params)
        got = kernel_attention(problem["q"], paged.k, paged.v, *masks, **params, into=paged)
        assert np.array_equal(got, dense, equal_nan=True)
        before = set_compiled(False)
        try:
            numpy_paged = kernel_attention(problem["q"], paged.k, paged.v, *masks, **params, into=paged)
        finally:
            set_compiled(before)
        assert np.array_equal(numpy_paged, attention_numpy(problem["q"], k, v, masks, **params), equal_nan=True)
