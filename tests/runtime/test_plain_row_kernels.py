"""The row kernels the numpy module calls where the build knows a float32 row over the last axis:
`layer_norm` gives `kernel_normalize`'s bits and `_softmax` gives `kernel_softmax`'s, the same
arithmetic in the same order, without their dispatch."""

from __future__ import annotations

import numpy as np
import pytest

from loam.runtime.kernels.normalization import kernel_normalize, layer_norm
from loam.runtime.kernels.reduce import _softmax, kernel_softmax

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("shape", [(1, 1, 64), (2, 7, 384), (3, 5), (4,), (2, 3, 1)])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_layer_norm_is_kernel_normalize_bit_for_bit(shape: tuple[int, ...], with_bias: bool, layout: str) -> None:
    x = (RNG.standard_normal(shape) * 3 + 1).astype(np.float32)
    x.reshape(-1)[0] = np.inf  # its row becomes NaN, as ONNX's arithmetic makes it
    if layout == "transposed" and len(shape) >= 2:
        x = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)  # the same values, the last axis strided
    scale = RNG.standard_normal(shape[-1]).astype(np.float32)
    bias = RNG.standard_normal(shape[-1]).astype(np.float32) if with_bias else None
    with np.errstate(all="ignore"):
        want = kernel_normalize(x, scale, bias, axes=(len(shape) - 1,), epsilon=1e-5, channel_axis=-1, stash="float32",
                                stats=0)  # fmt: skip
        got = layer_norm(x, scale, bias, 1e-5)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()
    assert not np.shares_memory(got, x)


@pytest.mark.parametrize("shape", [(1, 4, 1, 65), (8, 12, 128, 128), (3, 5), (4,), (2, 0), (2, 3, 1)])
def test_softmax_is_kernel_softmax_bit_for_bit(shape: tuple[int, ...]) -> None:
    x = (RNG.standard_normal(shape) * 4).astype(np.float32)
    if x.size:
        x.reshape(-1)[0] = -np.inf  # a masked position: exp gives 0
        x.reshape(-1)[-1] = np.nan
    with np.errstate(all="ignore"):
        want = kernel_softmax(x.copy(), kind="softmax", axes=(len(shape) - 1,))
        got = _softmax(x.copy())
    assert got.dtype == np.float32 and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
