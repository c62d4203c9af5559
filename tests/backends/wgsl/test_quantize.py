"""The WGSL quantize_linear kernel against the numpy kernel `kernel_quantize_linear`.

The numpy kernel is itself held to ONNX's node cases and onnxruntime (the conformance suites); here the
shader must give its results exactly: the quotient's division rounded as numpy's (checked alone on
drawn bit patterns), ties of the rounding to an integer (x an odd number of half scales), every
integer and float8 result type, saturation, per tensor, per axis and per block layouts, zero points,
halves and the `precision` attribute.
"""

from __future__ import annotations

import ml_dtypes  # noqa: F401 - registers the narrow dtypes' names with numpy
import numpy as np
import pytest

from loam.backends.wgsl_kernels import common, narrow
from loam.core.errors import UnsupportedError
from loam.runtime.kernels import PIECES as NP
from tests.backends.wgsl.harness import run_kernel
from tests.backends.wgsl.test_cast_narrow import ELEM
from tests.backends.wgsl.test_dequantize import LAYOUTS, draw

RESULTS = ["int8", "uint8", "int16", "uint16", "int4", "uint4", "int2", "uint2",
           "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]  # fmt: skip


def test_the_division_rounds_as_numpy_divides() -> None:
    rng = np.random.default_rng(11)
    n = 200_000
    bits = rng.integers(0x00800000, 0x7F000000, (2, n), dtype=np.uint32)  # normal numbers
    x, s = bits.view(np.float32)
    x = np.where(rng.random(n) < 0.5, -x, x).astype(np.float32)
    with np.errstate(over="ignore"):  # past f32 near its largest scales: infinity over them, as numpy gives
        near = (rng.integers(-300, 300, n) + 0.5).astype(np.float32) * s  # quotients at or next to ties
    x = np.where(rng.random(n) < 0.5, x, near).astype(np.float32)
    source = common.kernel(
        ["f32"],
        ["f32", "f32"],
        common.FLAT + "  if (i >= params[0]) { return; }\n  out0[i] = divide(in0[i], in1[i]);\n",
        narrow.DIVIDE,
    )
    (got,) = run_kernel(source, [n], (n + 63) // 64, [("float32", (n,))], [x, s])
    with np.errstate(all="ignore"):
        want = x / s
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert not bad.size, f"{x[bad[:3]]} / {s[bad[:3]]}: {got[bad[:3]]}, numpy {want[bad[:3]]}"


def quantize(operands: list[np.ndarray], to: str, **kw: object) -> tuple[np.ndarray, np.ndarray]:
    """(the numpy kernel's result, the shader's)."""
    kw = {"axis": 0, "block_size": 0, "saturate": 1, "precision": "", **kw, "to": to}
    with np.errstate(all="ignore"):
        want = NP["kernel_quantize_linear"](*operands, **kw)
    source = narrow.source_quantize_linear([(ELEM[a.dtype.name], a.ndim) for a in operands], [(ELEM[to], want.ndim)],
                                           **kw)  # fmt: skip
    values, grid = narrow.PIECES["_p_quantize_linear"]((*(a.shape for a in operands), want.shape), **kw)  # type: ignore[operator]
    device = [a if a.dtype.name.startswith(("int", "uint")) else a.astype(np.float32) for a in operands]
    (got,) = run_kernel(source, values, grid, [(to, want.shape)], device)
    return want, got


def same(got: np.ndarray, want: np.ndarray) -> None:
    g, w = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("to", RESULTS)
@pytest.mark.parametrize(("xs", "axis", "block", "ss"), LAYOUTS)
@pytest.mark.parametrize("zero_point", [False, True])
def test_quantize(to: str, xs: tuple[int, ...], axis: int, block: int, ss: tuple[int, ...] | None,
                  zero_point: bool) -> None:  # fmt: skip
    rng = np.random.default_rng(len(xs) + axis + block + len(to))
    scale = rng.uniform(0.01, 2.0, ss if ss is not None else ()).astype(np.float32)
    wide = to.startswith(("int1", "uint1")) or to.startswith("float8_e5")
    spread = (rng.standard_normal(xs) * (300 if wide else 8)).astype(np.float32)
    ties = (np.round(spread) + 0.5).astype(np.float32)  # quotients at ties, ulps from them once divided
    x = np.where(rng.random(xs) < 0.5, spread, ties) * np.broadcast_to(np.asarray(scale).max(), xs)
    x = x.astype(np.float32)
    zero = [draw(rng, to, scale.shape)] if zero_point else []
    want, got = quantize([x, scale, *zero], to, axis=axis, block_size=block)
    same(got, want)


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("to", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_saturation(saturate: int, to: str) -> None:
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 470.0, 0.0, -0.0, 3.3], np.float32)
    scale = np.array(0.5, np.float32)
    want, got = quantize([x, scale], to, saturate=saturate)
    same(got, want)


@pytest.mark.parametrize(("x_type", "scale_type", "precision"),
                         [("float16", "float16", ""), ("bfloat16", "bfloat16", ""), ("float16", "float32", ""),
                          ("float32", "float32", "float16"), ("float32", "float32", "bfloat16"),
                          ("float32", "float8_e8m0fnu", "")])  # fmt: skip
def test_quotient_types(x_type: str, scale_type: str, precision: str) -> None:
    rng = np.random.default_rng(3)
    scale = np.array([0.37, 1.5, 0.0625, 2.0], np.float32).astype(scale_type)
    x = ((rng.integers(-120, 120, (5, 4)) + 0.5) * scale.astype(np.float32) * 1.0001).astype(x_type)
    zero = draw(rng, "int8", (4,))
    want, got = quantize([x, scale, zero], "int8", axis=1, precision=precision)
    same(got, want)


def test_refusals() -> None:
    with pytest.raises(UnsupportedError, match="numpy divides i32 by f32 in f64"):
        narrow.source_quantize_linear([("i32", 1), ("f32", 0)], [("i8", 1)], to="int8", saturate=1, precision="")
    with pytest.raises(UnsupportedError, match="no quantization into float4_e2m1fn"):
        narrow.source_quantize_linear([("f32", 1), ("f32", 0)], [("f4E2M1", 1)], to="float4_e2m1fn", saturate=1,
                                      precision="")  # fmt: skip
    with pytest.raises(UnsupportedError, match="precision float64"):
        narrow.source_quantize_linear([("f32", 1), ("f32", 0)], [("i8", 1)], to="int8", saturate=1,
                                      precision="float64")  # fmt: skip
