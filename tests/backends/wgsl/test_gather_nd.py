"""The WGSL gather_nd kernel against the numpy kernel `kernel_gather_nd`, as in `test_library_kernels.py`.

The numpy kernel is itself checked against onnxruntime (tests/ops/test_indexing.py) and ONNX's node
cases; here the shader must give its results: every k from 1 to the data's rank less the batch axes,
batch_dims 0 to 2, negative entries, repeated tuples, slices past one workgroup, empty extents, and
the element types the device holds.  Then the dynamo GPT-2 export's GatherND through the module.
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
    # data extents, indices extents (the last is k), batch_dims
    ((7,), (5, 1), 0),
    ((4, 5), (3, 1), 0),
    ((4, 5), (6, 2), 0),
    ((2, 3, 4), (2, 2, 2), 0),
    ((2, 3, 4), (3,), 0),  # one tuple naming one element: a scalar result
    ((3, 70), (4, 1), 0),  # slices past one workgroup
    ((5, 3), (150, 2), 0),  # many tuples, many repeats
    ((2, 3, 4), (2, 1), 1),  # a batch axis
    ((2, 3, 4, 5), (2, 3, 4, 1), 2),  # two batch axes
    ((2, 6, 5), (2, 7, 2), 1),  # a batch axis, k reaching the last axis
    ((2, 10, 8), (2, 1), 1),  # the dynamo GPT-2 export's pattern: one position per batch row
    ((0, 4), (0, 1), 0),  # no rows
    ((3, 4), (0, 1), 0),  # no tuples
    ((3, 0), (2, 1), 0),  # empty slices
]


def tuples(rng: np.random.Generator, data: tuple[int, ...], ishape: tuple[int, ...], b: int) -> np.ndarray:
    """Random index tuples within `data`'s axes after the `b` batch axes, negative ones included."""
    k = ishape[-1]
    columns = [rng.integers(-data[b + j], max(data[b + j], 1), ishape[:-1]) for j in range(k)]
    return np.stack(columns, -1).reshape(ishape).astype(np.int64)


@pytest.mark.parametrize(("xs", "ishape", "b"), CASES)
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_gather_nd(xs: tuple[int, ...], ishape: tuple[int, ...], b: int, dtype: str) -> None:
    rng = np.random.default_rng(sum(xs) + sum(ishape) + b)
    x = values(rng, xs, dtype)
    idx = tuples(rng, xs, ishape, b) if x.size else np.zeros(ishape, np.int64)
    want = NP["kernel_gather_nd"](x, idx, batch_dims=b)
    (got,) = run_any(indexing, "gather_nd", [x, idx], [want], batch_dims=b)
    check(got, want)


def test_every_negative_entry_counts_from_the_end() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = np.array([[-1, -3], [-2, 0], [0, -1]], np.int64)
    want = NP["kernel_gather_nd"](x, idx, batch_dims=0)
    np.testing.assert_array_equal(want, x[[1, 0, 0], [0, 0, 2]])
    (got,) = run_any(indexing, "gather_nd", [x, idx], [want], batch_dims=0)
    np.testing.assert_array_equal(got, want)


def test_an_entry_outside_its_axis_reads_inside_the_buffer() -> None:
    # The numpy kernel raises DataError; the shader clamps, as the gathers do: never a read past the data.
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    idx = np.array([[7], [-9]], np.int64)
    (got,) = run_any(indexing, "gather_nd", [x, idx], [np.zeros((2, 2), np.float32)], batch_dims=0)
    np.testing.assert_array_equal(got, x[[2, 0]])


def test_refusals() -> None:
    with pytest.raises(UnsupportedError, match="indices of element type f32"):
        indexing.source_gather_nd([("f32", 2), ("f32", 2)], [("f32", 1)], batch_dims=0)
    with pytest.raises(UnsupportedError, match="give no k"):
        indexing.source_gather_nd([("f32", 2), ("i64", 2)], [("f32", 3)], batch_dims=0)
