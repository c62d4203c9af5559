"""Library kernels into the narrow element types (see `loam/runtime/kernels/__init__.py`):
`kernel.cast_narrow`.

float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0fnu), float4e2m1 and the 4- and 2-bit integers are
numpy dtypes that ml_dtypes defines; a module holding one imports ml_dtypes, which registers their
names with numpy, so these pieces name them as strings and never import it.
"""

from __future__ import annotations

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


PIECES: dict[str, object] = {"kernel_cast_narrow": kernel_cast_narrow, "_to_e8m0": _to_e8m0}
DEPENDS: dict[str, tuple[str, ...]] = {"kernel_cast_narrow": ("_to_e8m0",)}
