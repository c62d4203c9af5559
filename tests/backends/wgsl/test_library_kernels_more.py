"""More WGSL library kernels (pad, tile, trilu, arg_reduce, cumsum, gather/scatter elements, group
norm, LRN, ...) against the numpy kernels, as in `test_library_kernels.py`."""

from __future__ import annotations

import numpy as np
import pytest

from loam.backends.wgsl_kernels import conv, indexing, normalization, reduce, shape
from loam.core.errors import UnsupportedError
from loam.runtime.kernels import PIECES as NP
from tests.backends.wgsl.harness import run_kernel
from tests.backends.wgsl.test_library_kernels import check, elem, floats, run


def values(rng: np.random.Generator, shape_: tuple[int, ...], dtype: str) -> np.ndarray:
    """Random values of `dtype`: normal floats (halves included), small integers, or bools."""
    if dtype == "bool":
        return rng.random(shape_) < 0.5
    if dtype in ("int64", "int32"):
        return rng.integers(-50, 50, shape_).astype(dtype)
    return floats(rng, shape_, dtype, scale=3.0)


def run_any(module: object, name: str, operands: list[np.ndarray], expected: list[np.ndarray], **params: object):
    """As `run`, but bool results come back as bool."""
    if all(elem(e) != "bool" for e in expected):
        return run(module, name, operands, expected, **params)
    source = module.SOURCES[name](  # type: ignore[attr-defined]
        [(elem(a), a.ndim) for a in operands], [(elem(e), e.ndim) for e in expected], **params
    )
    shapes = tuple(a.shape for a in operands) + tuple(e.shape for e in expected)
    vals, grid = module.PIECES[f"_p_{name}"](shapes, **params)  # type: ignore[attr-defined]
    return run_kernel(source, vals, grid, [(e.dtype.name, e.shape) for e in expected], operands)


# -- pad -------------------------------------------------------------------------------------------

PAD_CASES = [
    ((5,), (2, 3)),
    ((3, 4), (1, 0, 2, 1)),
    ((3, 4), (-1, 2, 0, -2)),
    ((2, 3, 5), (0, 1, 2, 1, 0, 3)),
    ((2, 3, 4, 5), (1, 0, 0, 2, 0, 1, 1, 0)),
    ((1, 7), (0, 9, 0, 8)),  # pads longer than the axis
    ((4, 1), (2, 2, 0, 3)),  # an extent of 1
    ((3, 3), (0, -3, 0, 0)),  # cropped to nothing
]


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize(("xs", "pads"), PAD_CASES)
@pytest.mark.parametrize("dtype", ["float32", "int64", "float16", "bool"])
def test_pad(mode: str, xs: tuple[int, ...], pads: tuple[int, ...], dtype: str) -> None:
    rng = np.random.default_rng(sum(xs) + sum(pads))
    x = values(rng, xs, dtype)
    kw = dict(pads=pads, mode=mode, value=1.5)
    want = NP["kernel_pad"](x, **kw)
    (got,) = run_any(shape, "pad", [x], [want], **kw)
    check(got, want)


@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16"])
def test_pad_fill_operand(dtype: str) -> None:
    rng = np.random.default_rng(2)
    x = values(rng, (3, 4), dtype)
    fill = np.array(7, dtype=x.dtype)
    kw = dict(pads=(1, 2, 0, 1), mode="constant", value=0.0)
    want = NP["kernel_pad"](x, fill, **kw)
    (got,) = run_any(shape, "pad", [x, fill], [want], **kw)
    check(got, want)
    empty = np.zeros((0,), dtype=x.dtype)
    want = NP["kernel_pad"](x, empty, **{**kw, "value": -2.0})
    (got,) = run_any(shape, "pad", [x, empty], [want], **{**kw, "value": -2.0})
    check(got, want)


def test_pad_value_default() -> None:
    x = floats(np.random.default_rng(3), (2, 3))
    want = NP["kernel_pad"](x, pads=(1, 1, 1, 1), mode="constant")
    (got,) = run(shape, "pad", [x], [want], pads=(1, 1, 1, 1), mode="constant")
    check(got, want)


# -- tile ------------------------------------------------------------------------------------------

TILE_CASES = [((5,), (3,)), ((2, 3), (2, 1)), ((2, 3, 4), (1, 3, 2)), ((2, 1, 3, 2), (2, 2, 1, 3)), ((0, 3), (2, 2))]


@pytest.mark.parametrize(("xs", "repeats"), TILE_CASES)
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_tile(xs: tuple[int, ...], repeats: tuple[int, ...], dtype: str) -> None:
    x = values(np.random.default_rng(sum(xs)), xs, dtype)
    want = NP["kernel_tile"](x, repeats=repeats)
    (got,) = run_any(shape, "tile", [x], [want], repeats=repeats)
    check(got, want)


# -- trilu -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("xs", [(4, 4), (3, 5), (5, 3), (2, 3, 4, 6), (0, 3), (1, 1)])
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("offset", [0, 1, -2, 7, -9])
def test_trilu(xs: tuple[int, ...], upper: int, offset: int) -> None:
    x = values(np.random.default_rng(sum(xs)), xs, "float32")
    want = NP["kernel_trilu"](x, upper=upper, offset=offset)
    (got,) = run(shape, "trilu", [x], [want], upper=upper, offset=offset)
    check(got, want)


@pytest.mark.parametrize("dtype", ["int64", "bool", "float16"])
def test_trilu_k_operand(dtype: str) -> None:
    x = values(np.random.default_rng(4), (2, 5, 4), dtype)
    for k in (-1, 0, 2):
        kk = np.array(k, dtype=np.int64)
        want = NP["kernel_trilu"](x, kk, upper=1)
        (got,) = run_any(shape, "trilu", [x, kk], [want], upper=1)
        check(got, want)
    want = NP["kernel_trilu"](x, upper=0)
    (got,) = run_any(shape, "trilu", [x], [want], upper=0)
    check(got, want)


# -- arg_reduce ------------------------------------------------------------------------------------

ARG_CASES = [
    ((7,), 0), ((3, 130), 1), ((3, 130), 0), ((4, 5, 6), 1), ((2, 3, 4, 5), 3), ((2, 3, 4, 5), 0), ((1, 1000), 1)
]  # fmt: skip


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize(("xs", "axis"), ARG_CASES)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_arg_reduce(kind: str, xs: tuple[int, ...], axis: int, keepdims: int, last: int, dtype: str) -> None:
    rng = np.random.default_rng(sum(xs) + axis)
    x = rng.integers(-3, 4, xs).astype(dtype)  # many ties
    kw = dict(kind=kind, axis=axis, keepdims=keepdims, select_last_index=last)
    want = NP["kernel_arg_reduce"](x, **kw)
    (got,) = run(reduce, "arg_reduce", [x], [want], **kw)
    check(got, want)


def test_arg_reduce_nan_and_bool() -> None:
    x = np.array([[1.0, np.nan, 5.0, np.nan], [-np.inf, -np.inf, 0.0, 2.0], [3.0, 3.0, -1.0, -1.0]], np.float32)
    for kind in ("max", "min"):
        for last in (0, 1):
            kw = dict(kind=kind, axis=1, keepdims=0, select_last_index=last)
            want = NP["kernel_arg_reduce"](x, **kw)
            (got,) = run(reduce, "arg_reduce", [x], [want], **kw)
            check(got, want)
    b = np.random.default_rng(5).random((4, 70)) < 0.5
    for kind in ("max", "min"):
        kw = dict(kind=kind, axis=1, keepdims=1, select_last_index=0)
        want = NP["kernel_arg_reduce"](b, **kw)
        (got,) = run(reduce, "arg_reduce", [b], [want], **kw)
        check(got, want)


# -- cumsum ----------------------------------------------------------------------------------------

CUMSUM_CASES = [
    ((7,), 0), ((3, 130), 1), ((3, 130), -2), ((4, 5, 6), 1), ((2, 3, 4, 5), 3), ((2, 3, 4, 5), 0), ((3, 0), 1)
]  # fmt: skip


@pytest.mark.parametrize(("xs", "axis"), CUMSUM_CASES)
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", ["float32", "int64", "float16", "bfloat16"])
def test_cumsum(xs: tuple[int, ...], axis: int, exclusive: int, reverse: int, dtype: str) -> None:
    x = values(np.random.default_rng(sum(xs)), xs, dtype)
    kw = dict(axis=axis, exclusive=exclusive, reverse=reverse)
    want = NP["kernel_cumsum"](x, **kw)
    (got,) = run(reduce, "cumsum", [x], [want], **kw)
    check(got, want, rtol=1e-4, atol=1e-5)


# -- gather_elements / scatter_elements ------------------------------------------------------------

ELEMENTS_CASES = [
    # data, indices (= updates), axis
    ((7,), (5,), 0),
    ((7,), (12,), -1),
    ((3, 5), (4, 5), 0),
    ((3, 5), (3, 2), 1),
    ((4, 5, 6), (2, 3, 9), 2),
    ((4, 5, 6), (4, 1, 6), 1),
    ((2, 3, 4, 5), (2, 3, 4, 7), 3),
    ((2, 3, 4, 5), (1, 2, 3, 4), 0),
    ((3, 4), (0, 4), 0),
]


@pytest.mark.parametrize(("xs", "ishape", "axis"), ELEMENTS_CASES)
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_gather_elements(xs: tuple[int, ...], ishape: tuple[int, ...], axis: int, dtype: str) -> None:
    rng = np.random.default_rng(sum(xs) + sum(ishape))
    x = values(rng, xs, dtype)
    n = xs[axis]
    idx = rng.integers(-n, n, ishape).astype(np.int64)
    want = NP["kernel_gather_elements"](x, idx, axis=axis)
    (got,) = run_any(indexing, "gather_elements", [x, idx], [want], axis=axis)
    check(got, want)


def _unique_indices(rng: np.random.Generator, xs: tuple[int, ...], ishape: tuple[int, ...], axis: int) -> np.ndarray:
    """Indices without duplicates along `axis` (ONNX leaves duplicate writes without reduction open)."""
    n = xs[axis]
    m = ishape[axis]
    lines = np.moveaxis(np.zeros(ishape, np.int64), axis, -1)
    if lines.size == 0:
        return np.zeros(ishape, np.int64)
    flat = lines.reshape(-1, m)
    for r in range(flat.shape[0]):
        flat[r] = rng.permutation(n)[:m] - rng.integers(0, 2) * n
    return np.moveaxis(flat.reshape(lines.shape), -1, axis)


@pytest.mark.parametrize(("xs", "ishape", "axis"), ELEMENTS_CASES)
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool", "float16"])
def test_scatter_elements(xs: tuple[int, ...], ishape: tuple[int, ...], axis: int, reduction: str, dtype: str) -> None:
    rng = np.random.default_rng(sum(xs) + sum(ishape))
    ishape = tuple(min(a, b) for a, b in zip(xs, ishape, strict=True))
    x = values(rng, xs, dtype)
    n = xs[axis]
    if reduction == "none":
        idx = _unique_indices(rng, xs, ishape, axis)
    else:
        idx = rng.integers(-n, n, ishape).astype(np.int64)  # duplicates reduce in order
    u = values(rng, ishape, dtype)
    if reduction == "mul" and dtype != "bool":
        u = (rng.integers(-2, 3, ishape) if dtype == "int32" else rng.uniform(0.5, 1.5, ishape)).astype(x.dtype)
    want = NP["kernel_scatter_elements"](x, idx, u, axis=axis, reduction=reduction)
    (got,) = run_any(indexing, "scatter_elements", [x, idx, u], [want], axis=axis, reduction=reduction)
    check(got, want)


def test_scatter_elements_nan_max() -> None:
    x = np.array([[1.0, np.nan, 3.0]], np.float32)
    u = np.array([[np.nan, 5.0, 0.5]], np.float32)
    idx = np.array([[0, 1, 2]], np.int64)
    for reduction in ("max", "min"):
        want = NP["kernel_scatter_elements"](x, idx, u, axis=1, reduction=reduction)
        (got,) = run(indexing, "scatter_elements", [x, idx, u], [want], axis=1, reduction=reduction)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        check(got, want)


# -- group_norm / lrn ------------------------------------------------------------------------------

GROUP_CASES = [((2, 6), 3), ((2, 6, 5), 2), ((1, 4, 9, 9), 4), ((3, 8, 3, 5), 1), ((2, 6, 70), 3), ((1, 3, 2, 3, 2), 3)]


@pytest.mark.parametrize(("xs", "groups"), GROUP_CASES)
@pytest.mark.parametrize("per_group", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_group_norm(xs: tuple[int, ...], groups: int, per_group: int, dtype: str) -> None:
    rng = np.random.default_rng(sum(xs) + groups)
    x = (floats(rng, xs, scale=2.0) + np.float32(1.0)).astype(dtype)
    k = groups if per_group else xs[1]
    s, b = floats(rng, (k,), dtype), floats(rng, (k,), dtype)
    kw = dict(num_groups=groups, epsilon=1e-5, per_group=per_group, stash="float32")
    want = NP["kernel_group_norm"](x, s, b, **kw)
    (got,) = run(normalization, "group_norm", [x, s, b], [want], **kw)
    check(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("xs", [(1, 5, 3), (2, 7, 4, 3), (1, 3), (2, 16, 5, 5), (1, 4, 2, 2, 3)])
@pytest.mark.parametrize("size", [1, 2, 3, 5])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lrn(xs: tuple[int, ...], size: int, dtype: str) -> None:
    x = floats(np.random.default_rng(sum(xs) + size), xs, dtype, scale=2.0)
    kw = dict(size=size, alpha=1e-2, beta=0.75, bias=1.5)
    want = NP["kernel_lrn"](x, **kw)
    (got,) = run(normalization, "lrn", [x], [want], **kw)
    check(got, want)


# -- conv_transpose --------------------------------------------------------------------------------

CONV_T_CASES = [
    # x, w, strides, pads, dilations, group, output_padding
    ((1, 1, 3, 3), (1, 2, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1, (0, 0)),
    ((1, 1, 3, 3), (1, 2, 3, 3), (3, 2), (0, 0, 0, 0), (1, 1), 1, (1, 1)),
    ((2, 4, 5, 4), (4, 3, 3, 2), (2, 1), (1, 0, 1, 1), (1, 2), 2, (1, 0)),
    ((1, 3, 7), (3, 2, 3), (2,), (1, 2), (1,), 1, (0,)),
    ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), (1, 2, 1), (0, 1, 0, 0, 0, 1), (1, 1, 2), 1, (0, 1, 0)),
    ((2, 6, 4, 4), (6, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6, (0, 0)),
    ((1, 1, 3), (1, 1, 2), (2,), (0, -2), (1,), 1, (0,)),  # a negative end pad extends with zeros
]


def _conv_t_out(xs: tuple, ws: tuple, strides: tuple, pads: tuple, dilations: tuple, group: int, op: tuple) -> tuple:
    nsp = len(xs) - 2
    sp = [
        (xs[2 + i] - 1) * strides[i] + (ws[2 + i] - 1) * dilations[i] + 1 + op[i] - pads[i] - pads[i + nsp]
        for i in range(nsp)
    ]
    return (xs[0], ws[1] * group, *sp)


@pytest.mark.parametrize(("xs", "ws", "strides", "pads", "dilations", "group", "op"), CONV_T_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(
    xs: tuple, ws: tuple, strides: tuple, pads: tuple, dilations: tuple, group: int, op: tuple, bias: bool
) -> None:
    rng = np.random.default_rng(sum(xs) + sum(ws))
    ops = [floats(rng, xs), floats(rng, ws)] + ([floats(rng, (ws[1] * group,))] if bias else [])
    kw = dict(strides=strides, pads=pads, dilations=dilations, group=group, output_padding=op)
    want = NP["kernel_conv_transpose"](*ops, **kw)
    assert want.shape == _conv_t_out(xs, ws, strides, pads, dilations, group, op)
    (got,) = run(conv, "conv_transpose", ops, [want], **kw)
    check(got, want, rtol=1e-4, atol=1e-5)


def test_conv_transpose_f16() -> None:
    rng = np.random.default_rng(9)
    ops = [floats(rng, (1, 3, 4, 4), "float16"), floats(rng, (3, 2, 3, 3), "float16"), floats(rng, (2,), "float16")]
    kw = dict(strides=(2, 2), pads=(1, 1, 0, 0), dilations=(1, 1), group=1, output_padding=(1, 0))
    want = NP["kernel_conv_transpose"](*ops, **kw)
    (got,) = run(conv, "conv_transpose", ops, [want], **kw)
    check(got, want)


# -- refused cases ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: shape.source_pad([("f32", 2)], [("f32", 2)], pads=None, mode="symmetric"), "mode 'symmetric'"),
        (lambda: shape.source_pad([("f32", 2), ("i32", 0)], [("f32", 2)], pads=None, mode="constant"), "a fill"),
        (lambda: shape.source_trilu([("f32", 1)], [("f32", 1)], upper=1), "rank 1"),
        (lambda: shape.source_trilu([("f32", 2)], [("f32", 2)], upper=None), "upper known only at run time"),
        (lambda: shape.source_trilu([("f32", 2), ("f32", 0)], [("f32", 2)], upper=1), "k of element type f32"),
        (lambda: reduce.source_arg_reduce([("f32", 2)], [("i64", 1)], kind="mean", axis=1), "kind 'mean'"),
        (lambda: reduce.source_arg_reduce([("f32", 2)], [("f32", 1)], kind="max", axis=1), "result of element type"),
        (lambda: reduce.source_cumsum([("bool", 2)], [("bool", 2)], axis=1), "element type bool"),
        (
            lambda: normalization.source_group_norm(
                [("i32", 3), ("i32", 1), ("i32", 1)], [("i32", 3)], num_groups=1, stash="float32"
            ),
            "element type i32",
        ),
        (
            lambda: normalization.source_group_norm(
                [("f32", 3), ("f32", 1), ("f32", 1)], [("f32", 3)], num_groups=1, stash="float16"
            ),
            "stash 'float16'",
        ),
        (lambda: normalization.source_group_norm([("f32", 3)], [("f32", 3)], stash="float32"), "1 operands"),
        (lambda: normalization.source_lrn([("f32", 1)], [("f32", 1)], size=3), "rank 1"),
        (lambda: conv.source_conv_transpose([("i32", 4), ("i32", 4)], [("i32", 4)], group=1), "element type i32"),
        (lambda: conv.source_conv_transpose([("f32", 2), ("f32", 2)], [("f32", 2)], group=1), "no spatial axis"),
        (lambda: normalization.source_lrn([("i64", 4)], [("i64", 4)], size=3), "element type i64"),
        (
            lambda: indexing.source_gather_elements([("f32", 2), ("f32", 2)], [("f32", 2)], axis=0),
            "indices of element type f32",
        ),
        (
            lambda: indexing.source_scatter_elements(
                [("f32", 2), ("i64", 2), ("f32", 2)], [("f32", 2)], axis=0, reduction="mean"
            ),
            "reduction 'mean'",
        ),
        (
            lambda: indexing.source_scatter_elements(
                [("f32", 2), ("bool", 2), ("f32", 2)], [("f32", 2)], axis=0, reduction="add"
            ),
            "indices of element type bool",
        ),
    ],
)
def test_refused(build: object, words: str) -> None:
    with pytest.raises(UnsupportedError, match=words.replace("(", r"\(")) as info:
        build()  # type: ignore[operator]
    assert "WGSL" in str(info.value)
