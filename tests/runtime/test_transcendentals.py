"""The runtime's transcendental pieces against float64 references over their whole range: the error
bounds their docstrings state, and NaN, ±inf and signed zero as numpy treats them."""

from __future__ import annotations

import math

import numpy as np
import pytest

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
