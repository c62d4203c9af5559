"""The WGSL dequantize_linear kernel against the numpy kernel `kernel_dequantize_linear`.

The numpy kernel is itself held to ONNX's node cases and onnxruntime (the conformance suites); here the
shader must give its results on x of every type DequantizeLinear reads (8-, 16- and 32-bit integers,
4- and 2-bit ones, float8, float4), per tensor, per axis (first, middle, last) and per block (a last
block cut short), with and without a zero point (ignored for a float x), into f32, f16 and bf16.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from loam.backends.wgsl_kernels import narrow
from loam.core.errors import UnsupportedError
from loam.runtime.kernels import PIECES as NP
from tests.backends.wgsl.harness import run_kernel
from tests.backends.wgsl.test_cast_narrow import ELEM

TYPES = ["int8", "uint8", "int16", "uint16", "int32", "int4", "uint4", "int2", "uint2",
         "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float4_e2m1fn"]  # fmt: skip

LAYOUTS = [
    # x extents, axis, block_size, scale extents (None: per tensor, one value)
    ((3, 4), 0, 0, None),
    ((3, 4), 1, 0, (4,)),
    ((2, 5, 3), 1, 0, (5,)),
    ((2, 5, 3), 0, 0, (2,)),
    ((4, 7), 1, 3, (4, 3)),  # blocks of 3 along an axis of 7: the last one cut short
    ((2, 6, 3), 1, 2, (2, 3, 3)),
    ((70,), 0, 0, (70,)),  # past one workgroup
    ((), 0, 0, None),  # a scalar x
]


def draw(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Values of `dtype` across its range."""
    if dtype.startswith("float"):
        every = np.arange(256, dtype=np.uint8).view(dtype)
        every = every[np.isfinite(every.astype(np.float32))]
        return rng.choice(every, shape)
    info = ml_dtypes.iinfo(dtype) if dtype in ("int4", "uint4", "int2", "uint2") else np.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)


def dequantize(operands: list[np.ndarray], axis: int, block_size: int, to: str) -> tuple[np.ndarray, np.ndarray]:
    """(the numpy kernel's result, the shader's)."""
    kw = {"axis": axis, "block_size": block_size, "to": to}
    want = NP["kernel_dequantize_linear"](*operands, **kw)
    source = narrow.source_dequantize_linear([(ELEM[a.dtype.name], a.ndim) for a in operands], [(ELEM[to], want.ndim)])
    values, grid = narrow.PIECES["_p_dequantize_linear"]((*(a.shape for a in operands), want.shape), **kw)  # type: ignore[operator]
    device = [a.astype(np.float32) if a.dtype.kind in "fV" and not a.dtype.name.startswith(("int", "uint")) else a
              for a in operands]  # fmt: skip
    (got,) = run_kernel(source, values, grid, [(to, want.shape)], device)
    return want, got


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize(("xs", "axis", "block", "ss"), LAYOUTS)
@pytest.mark.parametrize("zero_point", [False, True])
def test_dequantize(dtype: str, xs: tuple[int, ...], axis: int, block: int, ss: tuple[int, ...] | None,
                    zero_point: bool) -> None:  # fmt: skip
    rng = np.random.default_rng(len(xs) + axis + block)
    x = draw(rng, dtype, xs)
    scale = rng.uniform(0.01, 2.0, ss if ss is not None else ()).astype(np.float32)
    operands = [x, scale] + ([draw(rng, dtype, scale.shape)] if zero_point else [])
    want, got = dequantize(operands, axis, block, "float32")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("to", ["float16", "bfloat16"])
def test_halves(to: str) -> None:
    rng = np.random.default_rng(4)
    x = draw(rng, "int8", (4, 6))
    scale = rng.uniform(0.001, 3.0, (6,)).astype(np.float32)
    zero = draw(rng, "int8", (6,))
    want, got = dequantize([x, scale, zero], 1, 0, to)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_refusals() -> None:
    with pytest.raises(UnsupportedError, match="a result of element type i32"):
        narrow.source_dequantize_linear([("i8", 1), ("f32", 0)], [("i32", 1)])
    with pytest.raises(UnsupportedError, match="x of element type bool"):
        narrow.source_dequantize_linear([("bool", 1), ("f32", 0)], [("f32", 1)])
