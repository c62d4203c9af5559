"""The WGSL library kernels (normalize, softmax, reduce, gather, conv, pool) against the numpy kernels.

Each test builds the shader with `source_NAME`, its params and grid with `_p_NAME`, runs it on the
machine's WebGPU adapter and compares with the numpy kernel of the same op on the same inputs.
Halves go up as f32 arrays holding f16 / bf16 values; the result comes back as f32 and must be a
value of the half type, within a rounding step of the numpy kernel's result.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from loam.backends.wgsl_kernels import conv, indexing, normalization, reduce
from loam.core.errors import UnsupportedError
from loam.runtime.kernels import PIECES as NP
from tests.backends.wgsl.harness import run_kernel

ELEM = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int64": "i64", "int32": "i32", "bool": "bool"}


def elem(a: np.ndarray) -> str:
    return ELEM[a.dtype.name]


def run(module: object, name: str, operands: list[np.ndarray], expected: list[np.ndarray], **params: object) -> list:
    """Build, size and run kernel `name` of `module` on `operands`; the results as f32 (floats) or
    as they are, shaped as `expected`."""
    source = module.SOURCES[name](  # type: ignore[attr-defined]
        [(elem(a), a.ndim) for a in operands], [(elem(e), e.ndim) for e in expected], **params
    )
    shapes = tuple(a.shape for a in operands) + tuple(e.shape for e in expected)
    values, grid = module.PIECES[f"_p_{name}"](shapes, **params)  # type: ignore[attr-defined]
    device_in = [a.astype(np.float32) if elem(a) in ("f16", "bf16") else a for a in operands]
    kinds = [("float32" if elem(e) in ("f32", "f16", "bf16") else e.dtype.name, e.shape) for e in expected]
    return run_kernel(source, values, grid, kinds, device_in)


def check(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """`got` (f32 for floats) matches `want` (the numpy kernel's result); halves within a rounding step."""
    assert got.shape == want.shape
    if elem(want) in ("f16", "bf16"):
        half = want.dtype
        assert np.array_equal(got, got.astype(half).astype(np.float32), equal_nan=True), "not rounded to the half"
        step = 2.0**-10 if half == np.float16 else 2.0**-7
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=step, atol=step)
    elif want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


def floats(rng: np.random.Generator, shape: tuple[int, ...], dtype: str = "float32", scale: float = 1.0) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32) * scale
    return x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype))


# -- softmax ---------------------------------------------------------------------------------------

SOFTMAX_CASES = [
    ((7,), (0,)),
    ((3, 130), (1,)),
    ((2, 5, 64), (2,)),
    ((4, 5, 6), (0, 2)),
    ((2, 3, 4, 5), (3, 1)),
    ((2, 3, 4, 5), (1, 2, 3)),
    ((3, 0), (1,)),
    ((0, 4), (1,)),
    ((1, 1000), (1,)),
]


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "hardmax"])
@pytest.mark.parametrize(("shape", "axes"), SOFTMAX_CASES)
def test_softmax(kind: str, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape) * 100 + sum(shape))
    x = floats(rng, shape, scale=4.0)
    if kind == "hardmax" and x.size > 4:
        x.flat[1] = x.flat[3] = x.max() + 1  # a tie: the first of the block wins
    want = NP["kernel_softmax"](x, kind, axes)
    (got,) = run(reduce, "softmax", [x], [want], kind=kind, axes=axes)
    check(got, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_softmax_halves(dtype: str) -> None:
    x = floats(np.random.default_rng(1), (5, 77), dtype, scale=3.0)
    for kind in ("softmax", "log_softmax"):
        want = NP["kernel_softmax"](x, kind, (1,))
        (got,) = run(reduce, "softmax", [x], [want], kind=kind, axes=(1,))
        check(got, want)


def test_softmax_nan_and_inf_rows() -> None:
    x = np.array([[1.0, np.nan, 2.0], [-np.inf, 0.0, 1.0], [np.inf, 0.0, 1.0]], dtype=np.float32)
    want = NP["kernel_softmax"](x, "softmax", (1,))
    (got,) = run(reduce, "softmax", [x], [want], kind="softmax", axes=(1,))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    check(got, want)


# -- reduce ----------------------------------------------------------------------------------------

REDUCE_CASES = [
    ((7,), (0,)),
    ((3, 130), (1,)),
    ((3, 130), (0,)),
    ((4, 5, 6), (0, 2)),
    ((2, 3, 4, 5), (1, 3)),
    ((2, 3, 4, 5), (0, 1, 2, 3)),
    ((3, 4), ()),
    ((3, 0, 2), (1,)),
    ((1, 5000), (1,)),
]


@pytest.mark.parametrize("kind", reduce.FLOAT_KINDS)
@pytest.mark.parametrize(("shape", "axes"), REDUCE_CASES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_float(kind: str, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: int) -> None:
    rng = np.random.default_rng(sum(shape) + len(axes))
    x = floats(rng, shape)
    if kind == "log_sum":
        x = np.abs(x) + np.float32(0.1)
    if kind == "prod":
        x = (x * np.float32(0.1) + np.float32(1)).astype(np.float32)
    want = NP["kernel_reduce"](x, kind, axes, keepdims)
    (got,) = run(reduce, "reduce", [x], [want], kind=kind, axes=axes, keepdims=keepdims)
    count = int(np.prod([shape[a] for a in axes]))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    check(got, want, rtol=1e-4 if count > 64 else 1e-5, atol=1e-5 if count > 64 else 1e-6)


@pytest.mark.parametrize("kind", reduce.INT_KINDS)
@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_reduce_int(kind: str, dtype: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(-9, 10, (3, 70, 2)).astype(dtype)
    if kind == "prod":
        x = rng.integers(-2, 3, (3, 70, 2)).astype(dtype)
        x = x[:, :12]
    for axes in ((1,), (0, 2), (1, 0)):
        want = NP["kernel_reduce"](x, kind, axes, 0)
        (got,) = run(reduce, "reduce", [x], [want], kind=kind, axes=axes, keepdims=0)
        check(got, want)


@pytest.mark.parametrize("kind", ["sum", "mean", "prod", "l1", "sum_square"])
def test_reduce_int_saturates_as_the_numpy_kernel(kind: str) -> None:
    """i32 reductions past the type's range: the device saturates where the numpy kernel (onnxruntime's
    f64 arithmetic) does, across the 64 invocations' partials, and is exact inside it."""
    top, low = 2**31 - 1, -(2**31)
    rng = np.random.default_rng(17)
    rows = [
        np.full(130, top),  # sums to 130 * top: the maximum
        np.full(130, low),  # the lowest
        np.concatenate([np.full(65, top), np.full(65, -top)]),  # 0: past the range and back, exactly
        np.concatenate([[top, 1, -10], np.zeros(127, np.int64)]),  # top - 9
        rng.integers(low, top, 130, endpoint=True),
        rng.integers(-(2**20), 2**20, 130),
        np.concatenate([[low, 46341, -46340, 3], np.ones(126, np.int64)]),  # |low| and squares past the top
        np.concatenate([[2**16, 2**16, -1, 0], np.ones(126, np.int64)]),  # past the range, then 0
        np.concatenate([[2**16, -(2**15)], np.ones(128, np.int64)]),  # exactly the lowest
        np.concatenate([[2**16, -(2**15), -1], np.ones(127, np.int64)]),  # just past the top
        np.concatenate([[-3, 7, -2], np.ones(127, np.int64)]),
    ]
    x = np.stack(rows).astype(np.int32)
    # The whole array's product passes f64's range before its first 0: NaN, which only x86 makes the lowest.
    for axes in ((1,),) if kind == "prod" else ((1,), (0, 1)):
        want = NP["kernel_reduce"](x, kind, axes, 0)
        (got,) = run(reduce, "reduce", [x], [want], kind=kind, axes=axes, keepdims=0)
        check(got, want)


def test_reduce_int_empty_identities() -> None:
    x = np.zeros((2, 0), dtype=np.int32)
    for kind in ("sum", "prod", "max", "min", "mean"):
        want = NP["kernel_reduce"](x, kind, (1,), 1)
        (got,) = run(reduce, "reduce", [x], [want], kind=kind, axes=(1,), keepdims=1)
        check(got, want)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_reduce_bool(kind: str) -> None:
    x = np.random.default_rng(4).random((5, 130)) < 0.995
    x[0] = True
    x[1] = False
    want = NP["kernel_reduce"](x, kind, (1,), 0)
    source = reduce.source_reduce([("bool", 2)], [("bool", 1)], kind=kind, axes=(1,), keepdims=0)
    values, grid = reduce._p_reduce((x.shape, want.shape), kind=kind, axes=(1,), keepdims=0)
    (got,) = run_kernel(source, values, grid, [("bool", want.shape)], [x])
    np.testing.assert_array_equal(got, want)


def test_reduce_nan_propagates() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    x[1, 2] = np.nan
    for kind in ("max", "min", "sum", "log_sum_exp"):
        want = NP["kernel_reduce"](x, kind, (1,), 0)
        (got,) = run(reduce, "reduce", [x], [want], kind=kind, axes=(1,), keepdims=0)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        check(got, want)


def test_reduce_rows_past_one_dispatch_row() -> None:
    """More than 65535 rows: the workgroups span two dispatch rows (x + y * nwg.x)."""
    x = floats(np.random.default_rng(13), (70001, 3))
    want = NP["kernel_reduce"](x, "max", (1,), 0)
    (got,) = run(reduce, "reduce", [x], [want], kind="max", axes=(1,), keepdims=0)
    check(got, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduce_halves(dtype: str) -> None:
    x = floats(np.random.default_rng(5), (4, 90), dtype)
    for kind in ("sum", "mean", "max", "l2", "log_sum_exp"):
        want = NP["kernel_reduce"](x, kind, (1,), 1)
        (got,) = run(reduce, "reduce", [x], [want], kind=kind, axes=(1,), keepdims=1)
        check(got, want)


# -- normalize -------------------------------------------------------------------------------------

NORMALIZE_CASES = [
    # x shape, axes, channel_axis, scale/bias shape
    ((6,), (0,), -1, (6,)),
    ((3, 130), (1,), -1, (130,)),
    ((2, 7, 768), (2,), -1, (768,)),
    ((4, 5, 6), (1, 2), -1, (5, 6)),
    ((4, 5, 6), (2,), -1, (1, 6)),
    ((2, 3, 4, 5), (2, 3), 1, (3,)),
    ((2, 3, 70), (2,), 1, (3,)),
    ((0, 5), (1,), -1, (5,)),
]


@pytest.mark.parametrize(("shape", "axes", "channel_axis", "pshape"), NORMALIZE_CASES)
@pytest.mark.parametrize("affine", [0, 1, 2])
def test_normalize(
    shape: tuple[int, ...], axes: tuple[int, ...], channel_axis: int, pshape: tuple[int, ...], affine: int
) -> None:
    rng = np.random.default_rng(sum(shape) + affine)
    x = floats(rng, shape, scale=3.0) + np.float32(2.0)
    params = [floats(rng, pshape) for _ in range(affine)]
    kw = dict(axes=axes, epsilon=1e-5, channel_axis=channel_axis, stash="float32", stats=0)
    want = NP["kernel_normalize"](x, *params, **kw)
    (got,) = run(normalization, "normalize", [x, *params], [want], **kw)
    check(got, want, atol=2e-6)


def test_normalize_stats() -> None:
    rng = np.random.default_rng(6)
    x = floats(rng, (2, 3, 100), scale=2.0)
    s, b = floats(rng, (100,)), floats(rng, (100,))
    kw = dict(axes=(2,), epsilon=1e-3, channel_axis=-1, stash="float32", stats=1)
    want = NP["kernel_normalize"](x, s, b, **kw)
    got = run(normalization, "normalize", [x, s, b], list(want), **kw)
    for g, w in zip(got, want, strict=True):
        check(g, w, atol=2e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_normalize_halves(dtype: str) -> None:
    rng = np.random.default_rng(7)
    x = floats(rng, (5, 70), dtype, scale=2.0)
    s, b = floats(rng, (70,), dtype), floats(rng, (70,), dtype)
    kw = dict(axes=(1,), epsilon=1e-5, channel_axis=-1, stash="float32", stats=0)
    want = NP["kernel_normalize"](x, s, b, **kw)
    (got,) = run(normalization, "normalize", [x, s, b], [want], **kw)
    check(got, want)


# -- gather ----------------------------------------------------------------------------------------

GATHER_CASES = [
    ((10, 7), (3, 4), 0),
    ((4, 50, 3), (5,), 1),
    ((4, 50, 3), (2, 2), 2),
    ((5,), (), 0),
    ((50257 // 100, 33), (1, 70), 0),
    ((6, 4), (0,), 0),
]


@pytest.mark.parametrize(("shape", "ishape", "axis"), GATHER_CASES)
@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_gather(shape: tuple[int, ...], ishape: tuple[int, ...], axis: int, dtype: str) -> None:
    rng = np.random.default_rng(sum(shape) + axis)
    x = floats(rng, shape, scale=100.0).astype(dtype)
    idx = rng.integers(-shape[axis], shape[axis], ishape).astype(np.int64)
    want = NP["kernel_gather"](x, idx, axis=axis)
    (got,) = run(indexing, "gather", [x, idx], [want], axis=axis)
    check(got, want)


def test_gather_bool_data_i32_indices() -> None:
    x = np.random.default_rng(8).random((9, 3)) < 0.5
    idx = np.array([[0, -1], [4, 8]], dtype=np.int32)
    want = NP["kernel_gather"](x, idx, axis=0)
    (got,) = run(indexing, "gather", [x, idx], [want], axis=0)
    np.testing.assert_array_equal(got, want)


# -- conv ------------------------------------------------------------------------------------------

CONV_CASES = [
    # x, w, strides, pads, dilations, group
    ((1, 1, 28, 28), (8, 1, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 1),
    ((1, 8, 14, 14), (16, 8, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 1),
    ((2, 4, 9, 7), (6, 2, 3, 2), (2, 1), (1, 0, 0, 1), (1, 2), 2),
    ((2, 6, 5, 5), (6, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6),
    ((2, 3, 11), (4, 3, 3), (2,), (1, 1), (1,), 1),
    ((1, 2, 4, 5, 6), (2, 2, 2, 2, 3), (1, 2, 1), (0, 1, 0, 1, 0, 1), (1, 1, 1), 1),
    ((3, 2, 3, 3), (5, 2, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1),
]


@pytest.mark.parametrize(("xs", "ws", "strides", "pads", "dilations", "group"), CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv(xs: tuple, ws: tuple, strides: tuple, pads: tuple, dilations: tuple, group: int, bias: bool) -> None:
    rng = np.random.default_rng(sum(xs) + sum(ws))
    ops = [floats(rng, xs), floats(rng, ws)] + ([floats(rng, (ws[0],))] if bias else [])
    kw = dict(strides=strides, pads=pads, dilations=dilations, group=group)
    want = NP["kernel_conv"](*ops, **kw)
    (got,) = run(conv, "conv", ops, [want], **kw)
    check(got, want, rtol=1e-4, atol=1e-5)


def test_conv_f16() -> None:
    rng = np.random.default_rng(9)
    ops = [floats(rng, (1, 3, 8, 8), "float16"), floats(rng, (4, 3, 3, 3), "float16"), floats(rng, (4,), "float16")]
    kw = dict(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), group=1)
    want = NP["kernel_conv"](*ops, **kw)
    (got,) = run(conv, "conv", ops, [want], **kw)
    check(got, want)


# -- pool ------------------------------------------------------------------------------------------

POOL_CASES = [
    # x, kernel, strides, pads, dilations, out
    ((1, 8, 28, 28), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (14, 14)),
    ((2, 3, 7, 9), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (4, 5)),
    ((2, 3, 7, 9), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (5, 5)),  # ceil mode: one window more
    ((2, 3, 8, 8), (3, 2), (3, 2), (0, 0, 2, 1), (1, 1), (4, 5)),
    ((1, 2, 10), (3,), (2,), (1, 0), (2,), (4,)),
    ((1, 2, 10), (2,), (3,), (-1, -1), (1,), (3,)),  # negative pads crop
    ((1, 2, 3, 4, 5), (2, 2, 2), (1, 2, 2), (1, 0, 1, 0, 1, 0), (1, 1, 1), (4, 2, 3)),
    ((1, 1, 5), (2,), (1,), (3, 0), (3,), (4,)),  # the first windows hold no tap inside the input
    ((2, 65, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), (1, 1)),
]


@pytest.mark.parametrize(("xs", "ks", "strides", "pads", "dilations", "out"), POOL_CASES)
@pytest.mark.parametrize(("mode", "cip"), [("max", 0), ("avg", 0), ("avg", 1), ("lp", 0)])
def test_pool(
    xs: tuple, ks: tuple, strides: tuple, pads: tuple, dilations: tuple, out: tuple, mode: str, cip: int
) -> None:
    rng = np.random.default_rng(sum(xs) + sum(ks))
    x = floats(rng, xs)
    kw = dict(
        mode=mode, kernel_shape=ks, strides=strides, pads=pads, dilations=dilations, out_shape=out,
        count_include_pad=cip, p=2.0,
    )  # fmt: skip
    with np.errstate(all="ignore"):
        want = NP["kernel_pool"](x, **kw)
    (got,) = run(conv, "pool", [x], [want], **kw)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    check(got, want)


@pytest.mark.parametrize("p", [1.0, 3.0])
def test_pool_lp_powers(p: float) -> None:
    x = floats(np.random.default_rng(10), (1, 2, 6, 6))
    x[0, 0, 0, 0] = 0.0
    kw = dict(
        mode="lp", kernel_shape=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0), dilations=(1, 1), out_shape=(3, 3), p=p
    )
    want = NP["kernel_pool"](x, **kw)
    (got,) = run(conv, "pool", [x], [want], **kw)
    check(got, want)


@pytest.mark.parametrize("nan_rule", ["ignore", "first"])
def test_pool_max_nan_rules(nan_rule: str) -> None:
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 0, 0] = np.nan  # a NaN first tap
    x[0, 0, 1, 3] = np.nan  # a later NaN
    x[0, 0, 2:, :2] = np.nan  # a window of NaN only
    kw = dict(mode="max", kernel_shape=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0), dilations=(1, 1), out_shape=(2, 2))
    want = NP["kernel_pool"](x, nan_rule=nan_rule, **kw)
    (got,) = run(conv, "pool", [x], [want], nan_rule=nan_rule, **kw)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    check(got, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int64", "int32"])
def test_pool_max_types(dtype: str) -> None:
    x = floats(np.random.default_rng(11), (1, 3, 6, 5), scale=50.0).astype(dtype)
    # a window holding no tap inside the input gives the type's lowest value
    kw = dict(mode="max", kernel_shape=(2, 2), strides=(2, 2), pads=(3, 0, 0, 0), dilations=(1, 1), out_shape=(4, 2))
    want = NP["kernel_pool"](x, **kw)
    (got,) = run(conv, "pool", [x], [want], **kw)
    if dtype == "int64":  # documented: the device's i32 cannot hold -2^63; the empty window gets -2^31
        empty = want == np.iinfo(np.int64).min
        assert empty.any()
        np.testing.assert_array_equal(got[empty], -(2**31))
        got, want = got[~empty], want[~empty]
    check(got, want)


def test_pool_avg_f16() -> None:
    x = floats(np.random.default_rng(12), (1, 3, 7, 7), "float16")
    kw = dict(mode="avg", kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1), dilations=(1, 1), out_shape=(4, 4))
    want = NP["kernel_pool"](x, **kw)
    (got,) = run(conv, "pool", [x], [want], **kw)
    check(got, want)


# -- refused cases ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: conv.source_pool([("f32", 4)], [("f32", 4), ("i64", 4)], mode="avg", indices=1), "max pooling only"),
        (lambda: conv.source_pool([("i32", 4)], [("i32", 4)], mode="avg"), "mode avg of element type i32"),
        (lambda: conv.source_pool([("f32", 4)], [("f32", 4)], mode="max", nan_rule="last"), "nan_rule 'last'"),
        (lambda: conv.source_conv([("i32", 4), ("i32", 4)], [("i32", 4)], group=1), "element type i32"),
        (lambda: conv.source_conv([("f32", 2), ("f32", 2)], [("f32", 2)], group=1), "no spatial axis"),
        (lambda: reduce.source_reduce([("i32", 2)], [("i32", 2)], kind="l2", axes=(1,), keepdims=1), "'l2'"),
        (lambda: reduce.source_reduce([("bool", 2)], [("bool", 2)], kind="sum", axes=(1,), keepdims=1), "of bool"),
        (lambda: reduce.source_reduce([("f32", 2)], [("f32", 2)], kind="sum", axes=None, keepdims=1), "axes"),
        (lambda: reduce.source_softmax([("i32", 2)], [("i32", 2)], kind="softmax", axes=(1,)), "not a float"),
        (lambda: reduce.source_softmax([("f32", 2)], [("f32", 2)], kind="sparsemax", axes=(1,)), "'sparsemax'"),
        (
            lambda: normalization.source_normalize(
                [("f32", 3)], [("f32", 3)], axes=(2,), epsilon=1e-5, channel_axis=5, stash="float32", stats=0
            ),
            "channel_axis 5",
        ),
        (
            lambda: normalization.source_normalize(
                [("f32", 3)],
                [("f32", 3), ("f64", 3), ("f64", 3)],
                axes=(2,),
                epsilon=1e-5,
                channel_axis=-1,
                stash="float64",
                stats=1,
            ),
            "stats of element type f64",
        ),
        (lambda: indexing.source_gather([("f32", 2), ("f32", 1)], [("f32", 2)], axis=0), "indices of element type"),
    ],
)
def test_refused(build: object, words: str) -> None:
    with pytest.raises(UnsupportedError, match=words.replace("(", r"\(")) as info:
        build()  # type: ignore[operator]
    assert "WGSL" in str(info.value)


def test_params_are_plain_ints() -> None:
    values, grid = normalization._p_normalize(
        ((2, 3), (3,), (2, 3)), axes=(1,), epsilon=1e-5, channel_axis=-1, stash="float32", stats=0
    )
    assert all(type(v) is int for v in values) and grid == 2
