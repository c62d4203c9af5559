"""`_relu` computes max(x, 0) against a zeros buffer instead of a scalar zero (numpy's maximum of two
arrays is several times faster): the bits are those of `np.maximum(x, 0)` for every dtype ReLU takes,
NaN, infinities and signed zeros included, into `out` or a new array, for strided operands, and for
one past the buffer's cap."""

from __future__ import annotations

import numpy as np
import pytest

from loam.runtime.kernels.elementwise import _relu

RNG = np.random.default_rng(3)


def _values(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    x = np.asarray(RNG.standard_normal(shape) * 50).astype(dtype)
    if x.dtype.kind == "f" and x.size >= 5:
        x.reshape(-1)[:5] = [np.nan, -0.0, 0.0, np.inf, -np.inf]
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64])
@pytest.mark.parametrize("shape", [(7,), (256, 16), (2, 3, 50, 9), ()])
def test_relu_is_numpy_maximum_bit_for_bit(dtype: type, shape: tuple[int, ...]) -> None:
    x = _values(np.dtype(dtype), shape)
    want = np.maximum(x, np.zeros((), dtype))
    got = _relu(x)
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    into = x.copy()
    assert _relu(into, out=into) is into and into.tobytes() == want.tobytes()


def test_relu_of_a_strided_operand_and_past_the_cap() -> None:
    x = _values(np.dtype(np.float32), (40, 30))[:, ::3]
    assert _relu(x).tobytes() == np.maximum(x, np.float32(0)).tobytes()
    big = _values(np.dtype(np.float32), ((1 << 22) + 5,))
    assert _relu(big).tobytes() == np.maximum(big, np.float32(0)).tobytes()
    # The zeros the small calls share are never written.
    for zeros in _relu.__dict__.get("zeros", {}).values():
        assert not zeros.flags.writeable and not zeros.any()
