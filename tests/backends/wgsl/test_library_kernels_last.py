"""The last WGSL library kernels (resize, topk) and the zip's integer pow and bit shifts, against
the numpy kernels, as in `test_library_kernels.py`."""

from __future__ import annotations

import numpy as np
import pytest

from loam.backends.wgsl_kernels import conv, elementwise, reduce
from loam.core.errors import UnsupportedError
from loam.core.poly import Poly
from loam.dialects.expr import Expr
from loam.runtime.kernels import PIECES as NP
from tests.backends.wgsl.harness import run_kernel
from tests.backends.wgsl.test_library_kernels import check, floats, run
from tests.backends.wgsl.test_library_kernels_more import run_any

# -- resize ----------------------------------------------------------------------------------------

COORDS = [
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
    "tf_half_pixel_for_nn", "tf_crop_and_resize",
]  # fmt: skip
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"]
RESIZE_CASES = [
    ((1, 1, 4, 4), (1.0, 1.0, 2.0, 2.0)),
    ((1, 2, 4, 6), (1.0, 1.0, 0.6, 0.5)),
    ((2, 3, 5), (1.0, 1.0, 1.7)),
    ((3, 4), (2.5, 0.75)),
    ((7,), (0.4,)),
    ((1, 1, 2, 3, 4), (1.0, 1.0, 1.5, 2.0, 0.5)),
]


def resize_params(xs: tuple[int, ...], scales: tuple[float, ...], **kw: object) -> dict:
    sizes = tuple(int(np.floor(n * s)) for n, s in zip(xs, scales, strict=True))
    r = len(xs)
    roi = tuple([0.0] * r + [1.0] * r)
    if kw.get("coordinate_mode") == "tf_crop_and_resize":
        roi = tuple([0.0] * (r - 1) + [0.2] + [1.0] * (r - 1) + [0.9])
    return dict(scales=scales, sizes=sizes, roi=roi, **kw)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize(("xs", "scales"), RESIZE_CASES)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize(mode: str, xs: tuple[int, ...], scales: tuple[float, ...], coord: str) -> None:
    rng = np.random.default_rng(sum(xs))
    x = floats(rng, xs)
    kw = resize_params(xs, scales, mode=mode, coordinate_mode=coord, nearest_mode="round_prefer_floor")
    kw["extrapolation_value"] = 10.0
    want = NP["kernel_resize"](x, **kw)
    (got,) = run(conv, "resize", [x], [want], **kw)
    check(got, want)


@pytest.mark.parametrize("nearest", NEAREST)
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_resize_nearest_modes(nearest: str, dtype: str) -> None:
    rng = np.random.default_rng(5)
    for xs, scales in RESIZE_CASES[:4]:
        x = floats(rng, xs, "float32", 4.0)
        x = x > 0 if dtype == "bool" else x.astype(dtype)
        kw = resize_params(xs, scales, mode="nearest", coordinate_mode="asymmetric", nearest_mode=nearest)
        want = NP["kernel_resize"](x, **kw)
        (got,) = run_any(conv, "resize", [x], [want], **kw)
        check(got, want)


@pytest.mark.parametrize("exclude", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_resize_cubic_options(exclude: int, dtype: str) -> None:
    rng = np.random.default_rng(9)
    x = floats(rng, (1, 2, 5, 4), dtype)
    kw = resize_params(x.shape, (1.0, 1.0, 1.6, 0.8), mode="cubic", coordinate_mode="half_pixel", nearest_mode="floor")
    kw.update(cubic_coeff_a=-0.5, exclude_outside=exclude)
    want = NP["kernel_resize"](x, **kw)
    (got,) = run(conv, "resize", [x], [want], **kw)
    check(got, want)


def test_resize_inf_on_untouched_axis() -> None:
    x = floats(np.random.default_rng(1), (2, 3, 4))
    x[1, 2, 3] = np.inf
    kw = resize_params(x.shape, (1.0, 1.0, 2.0), mode="linear", coordinate_mode="half_pixel", nearest_mode="floor")
    want = NP["kernel_resize"](x, **kw)
    (got,) = run(conv, "resize", [x], [want], **kw)
    check(got, want)


def test_resize_refusals() -> None:
    with pytest.raises(UnsupportedError, match="linear interpolation of element type i32"):
        conv.source_resize([("i32", 2)], [("i32", 2)], mode="linear")
    with pytest.raises(UnsupportedError, match="mode None"):
        conv.source_resize([("f32", 2)], [("f32", 2)], mode=None)


# -- topk ------------------------------------------------------------------------------------------

TOPK_CASES = [
    ((7,), 0, 3),
    ((3, 4), 1, 2),
    ((3, 4), 0, 3),
    ((2, 200, 3), 1, 5),
    ((2, 3, 5), 2, 5),
    ((1, 1000), 1, 7),
    ((4, 1), 1, 1),
]


def tied(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values with many ties (few distinct numbers), some NaN, an infinity and signed zeros (floats)."""
    x = rng.integers(-3, 4, shape).astype(np.float32)
    if dtype.startswith("float"):
        flat = x.reshape(-1)
        flat[rng.random(flat.size) < 0.1] = np.nan
        flat[rng.random(flat.size) < 0.05] = np.inf
        flat[(flat == 0) & (rng.random(flat.size) < 0.5)] = -0.0
    return x.astype(dtype)


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize(("xs", "axis", "k"), TOPK_CASES)
@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_topk(dtype: str, xs: tuple[int, ...], axis: int, k: int, largest: int) -> None:
    rng = np.random.default_rng(sum(xs) + k)
    for x in (floats(rng, xs, dtype, 3.0) if dtype != "int64" else rng.integers(-9, 9, xs), tied(rng, xs, dtype)):
        x = np.asarray(x, dtype=dtype)
        kw = dict(k=k, axis=axis, largest=largest, sorted=1)
        want = NP["kernel_topk"](x, **kw)
        got = run(reduce, "topk", [x], list(want), **kw)
        check(got[0], want[0])
        check(got[1], want[1])


def test_topk_bool_and_empty() -> None:
    x = np.random.default_rng(3).random((3, 9)) < 0.5
    kw = dict(k=4, axis=1, largest=1, sorted=0)
    want = NP["kernel_topk"](x, **kw)
    got = run_any(reduce, "topk", [x], list(want), **kw)
    check(got[1], want[1])
    np.testing.assert_array_equal(got[0].astype(bool), want[0])
    kw = dict(k=0, axis=1, largest=0, sorted=1)
    assert reduce.PIECES["_p_topk"](((3, 9), (3, 0), (3, 0)), **kw)[1] == 0


# -- zip: integer pow, bit shifts ------------------------------------------------------------------

INTS = {"int8": "i8", "uint8": "ui8", "int16": "i16", "uint16": "ui16", "int32": "i32", "int64": "i64"}


def run_binary(op: str, a: np.ndarray, b: np.ndarray, elems: tuple[str, str]) -> np.ndarray:
    """The zip kernel of `op 0 1` on `a`, `b` (Loam element types `elems`), the result as a's dtype."""
    expr = Expr.operand(0).binary(op, Expr.operand(1))
    out_shape = np.broadcast_shapes(a.shape, b.shape)
    poly = [tuple(Poly.lift(e) for e in s) for s in (a.shape, b.shape, out_shape)]
    source = elementwise.source_zip(expr, poly[:2], list(elems), (poly[2], elems[0]))
    strided = tuple(s.shape for s in (a, b) if s.shape != out_shape)
    values, grid = elementwise.PIECES["_p_zip"](out_shape, strided)
    (got,) = run_kernel(source, values, grid, [(a.dtype.name, out_shape)], [a, b])
    return got


@pytest.mark.parametrize("dtype", [d for d in INTS if d != "int64"])  # i64 Pow is refused (see below)
def test_pow_int(dtype: str) -> None:
    rng = np.random.default_rng(len(dtype))
    a = rng.integers(-6, 7, (5, 8)).astype(dtype) if dtype[0] == "i" else rng.integers(0, 7, (5, 8)).astype(dtype)
    b = rng.integers(0, 6, (5, 8)).astype(dtype)
    b[0, :3] = 0
    a[0, 3:6] = 0
    if dtype[0] == "i":
        b[1] = -rng.integers(1, 4, 8)
        # 0 ** -n is numpy's f64 inf cast back: the type's minimum (i32's for an i64 held in i32)
        a[1, :4] = (1, -1, 0 if dtype != "int64" else 3, 2)
    with np.errstate(all="ignore"):
        want = NP["_pow"](a, b)
    np.testing.assert_array_equal(run_binary("pow", a, b, (INTS[dtype], INTS[dtype])), want)


@pytest.mark.parametrize("dtype", ["int32"])
def test_pow_int_float_exponent(dtype: str) -> None:
    a = np.array([[2, 3, -2, 4, 9, 10, 0, 5]], dtype=dtype)
    b = np.array([3.0, 2.0, 3.0, 0.5, 0.5, 0.5, 2.0, -1.0], dtype=np.float32)
    with np.errstate(all="ignore"):
        want = NP["_pow"](a, b)
    np.testing.assert_array_equal(run_binary("pow", a, b, (INTS[dtype], "f32")), want)


@pytest.mark.parametrize("op", ["shl", "shr"])
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int8", "int16", "int32"])
def test_shift(op: str, dtype: str) -> None:
    rng = np.random.default_rng(7)
    width = 8 * np.dtype(dtype).itemsize
    info = np.iinfo(dtype)
    a = rng.integers(max(info.min, -(2**20)), min(info.max, 2**20) + 1, (4, 40)).astype(dtype)
    b = np.broadcast_to(np.resize(np.arange(-3, width + 4), a.shape[1]), a.shape)
    b = np.clip(b, info.min, info.max).astype(dtype)
    want = NP[f"_{op}"](a, b)
    np.testing.assert_array_equal(run_binary(op, a, b, (INTS[dtype], INTS[dtype])), want)
    one = np.array([3], dtype=dtype)  # a broadcast shift amount
    np.testing.assert_array_equal(run_binary(op, a, one, (INTS[dtype], INTS[dtype])), NP[f"_{op}"](a, one))


def test_i64_pow_is_refused() -> None:
    # An i64 power can leave the i32 range the device computes i64 in: refused, never wrapped.
    expr = Expr.operand(0).binary("pow", Expr.operand(1))
    three = (Poly.lift(3),)
    with pytest.raises(UnsupportedError, match="i64 'pow': WGSL computes i64 in i32"):
        elementwise.source_zip(expr, [three, three], ["i64", "i64"], (three, "i64"))


def test_shift_refusals() -> None:
    expr = Expr.operand(0).binary("shl", Expr.operand(1))
    with pytest.raises(UnsupportedError, match="i64 'shl'"):
        three = (Poly.lift(3),)
        elementwise.source_zip(expr, [three, three], ["i64", "i64"], (three, "i64"))
