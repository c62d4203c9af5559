"""The WGSL scatter_nd kernel against the numpy kernel `kernel_scatter_nd`, as in `test_library_kernels.py`.

The numpy kernel is itself checked against onnxruntime (tests/ops/test_scatter_nd.py) and ONNX's
node cases; here the shader must give its results: every k from 0 to the data's rank, repeated
tuples (the last wins with reduction none, every reduction combines them in order), more than one
batch of 64 tuples (the order across batches), columns past one workgroup, negative indices, and
the element types the device holds.
"""

from __future__ import annotations

import numpy as np
import pytest

from loam.backends.wgsl_kernels import indexing
from loam.core.errors import UnsupportedError
from loam.runtime.kernels import PIECES as NP
from tests.backends.wgsl.test_library_kernels import check
from tests.backends.wgsl.test_library_kernels_more import run_any, values

CASES = [
    # data extents, indices extents (the last is k)
    ((7,), (5, 1)),
    ((4, 5), (3, 1)),
    ((4, 5), (6, 2)),
    ((2, 3, 4), (2, 2, 2)),
    ((2, 3, 4), (2, 0)),  # k = 0: every tuple covers the whole data
    ((3, 70), (4, 1)),  # columns past one workgroup
    ((5, 3), (150, 2)),  # three batches of tuples, many repeats
    ((2, 1, 9, 9), (2, 1, 9, 9, 4)),  # the causal-mask shape: element tuples over the whole data
    ((0, 4), (0, 1)),  # no rows
    ((3, 4), (0, 1)),  # no tuples: a copy
]


def tuples(rng: np.random.Generator, data: tuple[int, ...], ishape: tuple[int, ...]) -> np.ndarray:
    """Random index tuples within `data`, negative ones included (counted from the end)."""
    k = ishape[-1]
    columns = [rng.integers(-data[j], data[j], ishape[:-1]) for j in range(k)]
    return (np.stack(columns, -1) if k else np.zeros(ishape)).reshape(ishape).astype(np.int64)


@pytest.mark.parametrize(("xs", "ishape"), CASES)
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool", "float16"])
def test_scatter_nd(xs: tuple[int, ...], ishape: tuple[int, ...], reduction: str, dtype: str) -> None:
    rng = np.random.default_rng(sum(xs) + sum(ishape))
    x = values(rng, xs, dtype)
    idx = tuples(rng, xs, ishape)
    ushape = ishape[:-1] + xs[ishape[-1] :]
    u = values(rng, ushape, dtype)
    if reduction == "mul" and dtype != "bool":
        u = (rng.integers(-2, 3, ushape) if dtype == "int32" else rng.uniform(0.5, 1.5, ushape)).astype(x.dtype)
    want = NP["kernel_scatter_nd"](x, idx, u, reduction=reduction)
    (got,) = run_any(indexing, "scatter_nd", [x, idx, u], [want], reduction=reduction)
    check(got, want)


def test_last_duplicate_wins_across_batches() -> None:
    # 200 tuples naming 3 rows: the winner of each row is its last tuple, wherever the batches split.
    x = np.zeros((3, 2), np.float32)
    idx = (np.arange(200) % 3).reshape(200, 1).astype(np.int64)
    u = np.stack([np.arange(200), -np.arange(200)], -1).astype(np.float32)
    want = NP["kernel_scatter_nd"](x, idx, u, reduction="none")
    np.testing.assert_array_equal(want, [[198, -198], [199, -199], [197, -197]])
    (got,) = run_any(indexing, "scatter_nd", [x, idx, u], [want], reduction="none")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_more_than_a_thousand_batches(reduction: str) -> None:
    # 70,000 tuples (1,094 batches) in one workgroup: the batch scans are unrolled, since llvmpipe caps
    # a loop's iterations over a dispatch at 65535 and a scan looping over each batch would pass it.
    n = 70_000
    x = np.zeros(1000, np.float32)
    idx = (np.arange(n) * 7 % 1000).reshape(n, 1).astype(np.int64)
    u = (np.arange(n) % 13).astype(np.float32)
    want = NP["kernel_scatter_nd"](x, idx, u, reduction=reduction)
    (got,) = run_any(indexing, "scatter_nd", [x, idx, u], [want], reduction=reduction)
    check(got, want)


def test_nan_max_min() -> None:
    x = np.array([[1.0, np.nan, 3.0]], np.float32)
    idx = np.array([[0], [0]], np.int64)
    u = np.array([[np.nan, 5.0, 0.5], [2.0, 1.0, 4.0]], np.float32)
    for reduction in ("max", "min"):
        want = NP["kernel_scatter_nd"](x, idx, u, reduction=reduction)
        (got,) = run_any(indexing, "scatter_nd", [x, idx, u], [want], reduction=reduction)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        check(got, want)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: indexing.source_scatter_nd([("i64", 2), ("i64", 2), ("i64", 1)], [("i64", 2)], reduction="add"),
         "sums and products of i64"),
        (lambda: indexing.source_scatter_nd([("f32", 2), ("f32", 2), ("f32", 1)], [("f32", 2)], reduction="none"),
         "indices of element type f32"),
        (lambda: indexing.source_scatter_nd([("f32", 2), ("i64", 2), ("f32", 1)], [("f32", 2)], reduction="mean"),
         "reduction 'mean'"),
    ],
)  # fmt: skip
def test_refusals(make: object, message: str) -> None:
    with pytest.raises(UnsupportedError, match=message):
        make()  # type: ignore[operator]


def test_i64_max_runs() -> None:
    # max and min of i64 stay within the values given, so they run (in i32, after the host's range check).
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    idx = np.array([[2], [0], [2]], np.int64)
    u = np.array([[5, 50, -5, 11], [1, 1, 1, 1], [7, 7, 70, 7]], np.int64)
    want = NP["kernel_scatter_nd"](x, idx, u, reduction="max")
    (got,) = run_any(indexing, "scatter_nd", [x, idx, u], [want], reduction="max")
    np.testing.assert_array_equal(got, want)


# -- through the WGSL module -----------------------------------------------------------------------


def test_causal_mask_pattern_on_the_device() -> None:
    # The Llama export's causal-mask ScatterND (tests/ops/test_scatter_nd.py: CAUSAL), built once for the
    # device over symbolic extents and run at several of their values against onnxruntime.
    from loam.testing import assert_same, build_for, run_built, run_onnxruntime
    from tests.ops.test_scatter_nd import CAUSAL
    from tests.ops.test_symbolic_movement import feeds_for, model

    m = model(CAUSAL)
    result = build_for(m, fuse="dispatch", backend="wgsl")
    for env in ({"B": 2, "S": 5}, {"B": 1, "S": 1}, {"B": 3, "S": 40}):
        feeds = feeds_for(m, env)
        assert_same(run_built(result, feeds), run_onnxruntime(m, feeds))


def test_an_i64_sum_is_refused_naming_the_node_unless_the_host_computes_it() -> None:
    from loam.testing import assert_same, build_for, run_built, run_onnxruntime
    from tests.ops.test_scatter_nd import scatter

    x = np.arange(12, dtype=np.int64).reshape(4, 3)
    idx = np.array([[3], [1], [3]], np.int64)
    u = np.full((3, 3), 2, np.int64)
    m = scatter(x, idx, u, reduction="add")
    with pytest.raises(UnsupportedError, match=r"kernel\.scatter_nd 'n': sums and products of i64 run in i32"):
        build_for(m, backend="wgsl")
    result = build_for(m, backend="wgsl", host_fallback=True)
    assert_same(run_built(result, {"x": x}), run_onnxruntime(m, {"x": x}))
