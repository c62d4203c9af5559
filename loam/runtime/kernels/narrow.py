"""Library kernels of low-precision values (see `loam/runtime/kernels/__init__.py`): casts into the
narrow element types (`kernel.cast_narrow`), and ONNX's linear quantization between floats and
8/16-bit integers or narrow types (`kernel.quantize_linear`, `kernel.dequantize_linear`).

float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0fnu), float4e2m1 and the 4- and 2-bit integers are
numpy dtypes that ml_dtypes defines; a module holding one imports ml_dtypes, which registers their
names with numpy, so these pieces name them as strings and never import it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def kernel_cast_narrow(x: np.ndarray, *, to: str, saturate: int, round_mode: str) -> np.ndarray:
    """ONNX Cast of `x` into the narrow type `to` (numpy's name): rounded to nearest even, float8
    saturated as `saturate` says, float8e8m0 rounded by `round_mode` (`_to_e8m0`).  A float out of
    an integer type's range is, as ONNX leaves it undefined, what ml_dtypes makes of it."""
    x = np.asarray(x)
    if to == "float8_e8m0fnu":
        return _to_e8m0(x, saturate, round_mode)
    dtype = np.dtype(to)
    # `saturate` concerns these float8 types: with it, a value beyond the largest finite one (infinity
    # included) becomes that value; without it, inf where the type has one, else NaN.
    if saturate and to in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"):
        # Clipping before the one rounding equals ONNX's "[x] > FLT_MAX -> FLT_MAX"; NaN stays NaN.
        every = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)  # each float8 value
        limit = float(every[np.isfinite(every)].max())
        wide = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
        return np.clip(wide, -limit, limit).astype(dtype)
    with np.errstate(invalid="ignore"):
        return x.astype(dtype)


def _to_e8m0(x: np.ndarray, saturate: int, round_mode: str) -> np.ndarray:
    """float8e8m0 (2^(e-127), e in [0, 254]; 255 is NaN) from the float32 exponent field of x: its
    fraction rounds the exponent up (`up`: any fraction; `nearest`: above one half, or exactly one
    half of a normal number) or is dropped (`down`); with `saturate` no rounding passes 254.  The
    sign is ignored (ONNX leaves negative values unspecified); infinity and NaN become NaN."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    fraction = bits & 0x7FFFFF
    special = exponent == 0xFF
    if round_mode == "up":
        up = fraction != 0
    elif round_mode == "nearest":
        up = (fraction > 0x400000) | ((fraction == 0x400000) & (exponent > 0))
    else:
        up = np.zeros(exponent.shape, dtype=bool)
    up &= ~special
    if saturate:
        up &= exponent != 0xFE
    exponent += up
    exponent[special] = 0xFF
    return exponent.astype(np.uint8).view(np.dtype("float8_e8m0fnu"))


def _along(value: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point laid out to broadcast against x of `shape`: one element as a scalar, a
    vector along `axis`, or (`block_size` > 0) each entry repeated over its block of `axis`."""
    value = np.asarray(value)
    if block_size > 0:
        return np.repeat(value, block_size, axis=axis).take(range(shape[axis]), axis=axis)
    if value.size == 1:
        return value.reshape(())
    return value.reshape([-1 if a == axis else 1 for a in range(len(shape))])


def _integer_range(dtype: np.dtype) -> tuple[int, int]:
    """The values an integer type of 2 to 16 bits holds (ml_dtypes' int4 and int2 included)."""
    bits = {"int2": 2, "uint2": 2, "int4": 4, "uint4": 4}.get(dtype.name, 8 * dtype.itemsize)
    if dtype.name.startswith("u"):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def kernel_quantize_linear(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None = None,
    *,
    axis: int,
    block_size: int,
    to: str,
    saturate: int,
    precision: str,
) -> np.ndarray:
    """ONNX QuantizeLinear: x / scale (in `precision`, else numpy's type for the pair), rounded to
    nearest even, plus the zero point, saturated to the integer type `to`; into float8 the quotient
    is cast as Cast with `saturate` does, into float4 the zero point added first.  The scale and zero
    point are per tensor, per `axis`, or per block of `block_size` along it (`_along`)."""
    x = np.asarray(x)
    scale = _along(np.asarray(scale), x.shape, axis, block_size)
    if scale.dtype.name == "float8_e8m0fnu":
        scale = scale.astype(np.float32)
    with np.errstate(all="ignore"):
        if precision:
            q = x.astype(precision) / scale.astype(precision)
        else:
            q = x / scale
        dtype = np.dtype(to)
        if dtype.name.startswith("float8"):
            return kernel_cast_narrow(q, to=to, saturate=saturate, round_mode="up")
        if zero_point is not None:
            zero: np.ndarray | np.float64 = _along(np.asarray(zero_point), x.shape, axis, block_size).astype(np.float64)
        else:
            zero = np.float64(0)
        if dtype.name.startswith("float"):  # float4: no rounding of its own beyond the cast's
            return (q.astype(np.float32) + zero).astype(dtype)
        low, high = _integer_range(dtype)
        return np.clip(np.rint(q).astype(np.float64) + zero, low, high).astype(dtype)


def kernel_dequantize_linear(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None, *, axis: int, block_size: int, to: str
) -> np.ndarray:
    """ONNX DequantizeLinear: (x - zero point) * scale in float32, stored as `to`.  An integer's zero
    point is subtracted; a float8 or float4 one is zero by ONNX's rule and not read."""
    x = np.asarray(x)
    wide = x.astype(np.float32)
    if zero_point is not None and not x.dtype.name.startswith("float"):
        wide = wide - _along(np.asarray(zero_point), x.shape, axis, block_size).astype(np.float32)
    scale = _along(np.asarray(scale), x.shape, axis, block_size).astype(np.float32)
    with np.errstate(all="ignore"):
        return (wide * scale).astype(np.dtype(to))


PIECES: dict[str, Callable[..., object]] = {
    "kernel_cast_narrow": kernel_cast_narrow,
    "_to_e8m0": _to_e8m0,
    "_along": _along,
    "_integer_range": _integer_range,
    "kernel_quantize_linear": kernel_quantize_linear,
    "kernel_dequantize_linear": kernel_dequantize_linear,
}
