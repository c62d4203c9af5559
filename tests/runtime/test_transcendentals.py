"""The runtime's transcendental pieces against float64 references over their whole range: the error
bounds their docstrings state, and NaN, ±inf and signed zero as numpy treats them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from loam.runtime.kernels.elementwise import _erf, _sigmoid


def _float32_grid() -> np.ndarray:
    """Every 6e-6 of [-6, 6], and 100 points a decade over both signs of the normal float32 range."""
    dense = np.linspace(-6, 6, 2_000_001, dtype=np.float32)
    decades = np.float32(10.0) ** np.arange(-37.9, 1, 0.01, dtype=np.float32)
    return np.concatenate([dense, decades, -decades])


def test_float32_erf_is_within_its_stated_bound() -> None:
    x = _float32_grid()
    reference = np.array([math.erf(float(v)) for v in x])
    got = _erf(x)
    assert got.dtype == np.float32
    error = np.abs(got.astype(np.float64) - reference)
    assert error.max() < 5e-7
    nonzero = x != 0
    assert (error[nonzero] / np.abs(reference[nonzero])).max() < 5e-7


_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)  # fmt: skip
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)  # fmt: skip


def _erf_term_by_term(x: np.ndarray) -> np.ndarray:
    """The float32 rational fit as written: each polynomial a buffer of its leading coefficient, then
    (p * z^2 + c) for each next one."""
    z = np.clip(x.astype(np.float32), np.float32(-4), np.float32(4))
    z2 = z * z
    p = np.full_like(z2, np.float32(_ERF_P[0]))
    for c in _ERF_P[1:]:
        p = p * z2 + np.float32(c)
    q = np.full_like(z2, np.float32(_ERF_Q[0]))
    for c in _ERF_Q[1:]:
        q = q * z2 + np.float32(c)
    return (p / q * z).astype(x.dtype)


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        st.sampled_from([np.float32, np.float16]),
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=9),
        elements={"allow_nan": True, "allow_infinity": True},
    ),
    st.booleans(),
)
def test_float32_erf_is_the_fit_term_by_term(x: np.ndarray, strided: bool) -> None:
    """The pass-saving form (Horner's first step a product, no copy of a float32 operand) gives the
    bits of the fit evaluated term by term, on any shape (empty, 0-d, strided) and any value."""
    if strided and x.ndim >= 1:
        x = np.repeat(x, 2, axis=-1)[..., ::2]  # the same values, every other element of a buffer
    before = x.copy()
    with np.errstate(all="ignore"):
        got = _erf(x)
        want = _erf_term_by_term(x)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert got.tobytes() == want.tobytes()
    assert before.tobytes() == x.tobytes()  # the operand is read, never written


def test_float64_erf_is_within_its_stated_bound() -> None:
    x = np.concatenate([np.linspace(-8, 8, 200_001), 10.0 ** np.arange(-300, 1, 0.5)])
    reference = np.array([math.erf(float(v)) for v in x])
    got = _erf(x)
    assert got.dtype == np.float64
    nonzero = x != 0
    assert (np.abs(got - reference)[nonzero] / np.abs(reference[nonzero])).max() < 2e-7


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_erf_special_values(dtype: type) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 30.0, -30.0], dtype=dtype)
    got = _erf(x)
    assert got.dtype == dtype
    assert np.isnan(got[0])
    assert got[1:3].tolist() == [1.0, -1.0] and got[5:].tolist() == [1.0, -1.0]
    assert got[3] == 0 and not np.signbit(got[3]) and np.signbit(got[4])


def test_float16_erf_rounds_the_float32_value() -> None:
    x = np.arange(-1000, 1000, dtype=np.float16) / np.float16(128)
    reference = np.array([math.erf(float(v)) for v in x]).astype(np.float16)
    got = _erf(x)
    assert got.dtype == np.float16
    # One float16 ulp at most: the float32 value is within 5e-7, far under float16's half ulp.
    assert np.abs(got.astype(np.float64) - reference.astype(np.float64)).max() <= np.spacing(np.float16(1)) / 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_is_within_its_stated_bound(dtype: type) -> None:
    grid = _float32_grid().astype(dtype)
    x = np.concatenate([grid, np.linspace(-110, 110, 200_001, dtype=dtype)])  # down to float32's subnormals
    reference = 1 / (1 + np.exp(-x.astype(np.longdouble)))
    got = _sigmoid(x)
    assert got.dtype == dtype
    normal = reference > np.finfo(dtype).tiny
    error = np.abs(got.astype(np.longdouble) - reference)[normal] / reference[normal]
    assert float(error.max()) < 3 * np.finfo(dtype).eps
    special = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0], dtype=dtype)
    got = _sigmoid(special)
    assert np.isnan(got[0]) and list(got[1:]) == [0.0, 1.0, 0.5, 0.5]
