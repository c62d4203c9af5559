"""The integer products of `int8_activations` (`loam/runtime/kernels/int8_products.py`): the compiled
kernels give the numpy kernels' bits (the integer sums are exact and the float32 scaling runs in one
order), and both stay within the rounding of the activations of the float32 products they replace.

The bound against the float32 product: each element of x is rounded to a code times its block's
scale sa, off by at most sa / 2 (ggml's blocks: plus |d - d16| * 127, d read back from float16), so an
output is off by at most the sum over blocks of that error times the block's sum of |w|; a float32
slack of 1e-5 of the output's scale covers the sums' own rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loam.runtime.dequant import block_integers, dequant_blocks
from loam.runtime.kernels.compiled import set_compiled
from loam.runtime.kernels.int8_compiled import int8_kernels
from loam.runtime.kernels.int8_products import (
    matmul_nbits_int8,
    matmul_nbits_int8_numpy,
    matmul_packed_int8,
    quantize_int8_blocks,
    quantize_q8_blocks,
)
from loam.runtime.kernels.quantized import kernel_matmul_nbits, kernel_matmul_packed, nbits_codes
from tests.backends.test_packed_weights import _blocks

ROWS = (1, 2, 7, 16, 33)


def test_a_block_is_rounded_half_to_even_with_scale_amax_over_127() -> None:
    x = np.array([[127.0, 0.5, 1.5, -2.5, -127.0, 3.0] + [0.0] * 10, [0.0] * 16], np.float32)
    codes, scale = quantize_int8_blocks(x, 16)
    assert scale.tolist() == [[1.0], [0.0]]
    assert codes[0, :6].tolist() == [127, 0, 2, -2, -127, 3]  # 0.5 -> 0, 1.5 -> 2, -2.5 -> -2
    assert not codes[1].any()  # an all-zero block: scale 0, codes 0


def _nbits(rng: np.random.Generator, n: int, k: int, bits: int, block: int, zero: bool) -> tuple[np.ndarray, ...]:
    nb = k // block
    packed = rng.integers(0, 256, (n, nb * block * bits // 8), dtype=np.uint8)
    s = (rng.random((n, nb), np.float32) + 0.05).astype(np.float32)
    z = nbits_codes(rng.integers(0, 256, (n, nb), dtype=np.uint8), bits)[:, :nb] if zero else None
    z = np.full((1, 1), 1 << (bits - 1), np.float32) if z is None else np.ascontiguousarray(z)
    return packed, s, z


@settings(max_examples=40, deadline=None)
@given(
    bits=st.sampled_from([2, 4, 8]),
    block=st.sampled_from([16, 32, 64, 128]),
    blocks=st.integers(1, 5),
    n=st.integers(1, 40),
    rows=st.sampled_from(ROWS),
    zero=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_the_compiled_nbits_kernel_gives_the_numpy_kernels_bits(
    bits: int, block: int, blocks: int, n: int, rows: int, zero: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    packed, s, z = _nbits(rng, n, blocks * block, bits, block, zero)
    x = (rng.standard_normal((rows, blocks * block)) * rng.choice([1e-3, 1.0, 50.0])).astype(np.float32)
    qa, sa = quantize_int8_blocks(x, block)
    kernels = int8_kernels()
    assert kernels is not None
    compiled, oracle = np.empty((rows, n), np.float32), np.empty((rows, n), np.float32)
    kernels["_nbits_int8"](packed, s, z, qa, sa, compiled, bits, block)
    matmul_nbits_int8_numpy(packed, s, z, qa, sa, oracle, bits, block)
    np.testing.assert_array_equal(compiled, oracle)


@pytest.mark.parametrize(("bits", "block"), [(4, 32), (4, 16), (8, 64), (2, 128)])
@pytest.mark.parametrize("rows", ROWS)
def test_nbits_int8_is_the_float_product_within_the_rounding_of_a(bits: int, block: int, rows: int) -> None:
    rng = np.random.default_rng(rows * 10 + bits)
    k, n = 4 * block, 24
    packed, s, z = _nbits(rng, n, k, bits, block, True)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    got = np.empty((rows, n), np.float32)
    matmul_nbits_int8(packed, s, z, x, got, bits, block)
    w = (nbits_codes(packed, bits).reshape(n, -1, block) - z[:, :, None]) * s[:, :, None]  # [n, nb, block]
    _, sa = quantize_int8_blocks(x, block)
    want = x @ w.reshape(n, k).T
    bound = (sa / 2) @ np.abs(w).sum(axis=2).T  # [rows, n]
    slack = 1e-5 * np.abs(want).max()
    assert (np.abs(got - want) <= bound + slack).all()
    assert np.abs(got - want).max() > 0  # the rounding happened


def test_kernel_matmul_nbits_with_int8_is_the_same_on_numpy_alone() -> None:
    rng = np.random.default_rng(3)
    packed, s, _ = _nbits(rng, 48, 128, 4, 32, False)
    a = rng.standard_normal((5, 128)).astype(np.float32)
    b = packed.reshape(48, 4, 16)
    with_numba = kernel_matmul_nbits(a, b, s, k=128, n=48, bits=4, block_size=32, present=0, int8=1)
    set_compiled(False)
    try:
        alone = kernel_matmul_nbits(a, b, s, k=128, n=48, bits=4, block_size=32, present=0, int8=1)
    finally:
        set_compiled(True)
    np.testing.assert_array_equal(with_numba, alone)


@settings(max_examples=30, deadline=None)
@given(
    encoding=st.sampled_from(["Q4_0", "Q4_1", "Q8_0"]),
    blocks=st.integers(1, 6),
    n=st.integers(1, 30),
    rows=st.sampled_from(ROWS),
    seed=st.integers(0, 2**31),
)
def test_the_compiled_ggml_kernel_gives_the_numpy_kernels_bits(
    encoding: str, blocks: int, n: int, rows: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    w, _ = _blocks((rng.standard_normal((n, 32 * blocks)) * 2).astype(np.float32), encoding)
    x = rng.standard_normal((rows, 32 * blocks)).astype(np.float32)
    compiled = matmul_packed_int8(x, w)
    set_compiled(False)
    try:
        oracle = matmul_packed_int8(x, w)
    finally:
        set_compiled(True)
    np.testing.assert_array_equal(compiled, oracle)


@pytest.mark.parametrize("encoding", ["Q4_0", "Q4_1", "Q8_0"])
@pytest.mark.parametrize("rows", ROWS)
def test_ggml_int8_is_the_float_product_within_the_rounding_of_x(encoding: str, rows: int) -> None:
    rng = np.random.default_rng(rows)
    w, _ = _blocks((rng.standard_normal((20, 128)) * 2).astype(np.float32), encoding)
    x = rng.standard_normal((rows, 128)).astype(np.float32)
    got = kernel_matmul_packed(x, w, transposed=1, int8=1)
    want = x @ dequant_blocks(w).reshape(20, 128).T
    codes, d16, s16 = quantize_q8_blocks(x, encoding == "Q4_1")
    _, d = quantize_int8_blocks(x, 32)
    err = d / 2 + np.abs(d - d16) * 127  # [rows, nb]: each element of x off by at most this
    scaled = np.abs(block_integers(w) - (8 if encoding == "Q4_0" else 0)) * np.abs(w["d"].astype(np.float32))[..., None]
    bound = err @ scaled.sum(axis=2).T
    if encoding == "Q4_1":  # m times x's block sum, read from float16 s
        sums = codes.reshape(rows, -1, 32).sum(axis=2)
        bound += (32 * err + np.abs(s16 - d16 * sums) + np.abs(d - d16) * np.abs(sums)) @ np.abs(
            w["m"].astype(np.float32)
        ).T
    slack = 1e-5 * np.abs(want).max()
    assert (np.abs(got - want) <= bound + slack).all()
    assert np.abs(got - want).max() > 0
