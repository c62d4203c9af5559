"""The WGSL one_hot kernel against the numpy kernel `kernel_one_hot`, as in `test_library_kernels.py`.

The numpy kernel is itself checked against onnxruntime (tests/ops/) and ONNX's node cases; here the
shader must give its results: every axis, negative indices (counted from depth), indices outside
[-depth, depth) (no position), float indices (truncated toward zero, NaN and huge ones matching
nothing), values of the element types the device holds, and more elements than one workgroup.
"""

from __future__ import annotations

import numpy as np
import pytest

from loam.backends.wgsl_kernels import indexing
from loam.core.errors import UnsupportedError
from loam.runtime.kernels import PIECES as NP
from tests.backends.wgsl.test_library_kernels import check
from tests.backends.wgsl.test_library_kernels_more import run_any

CASES = [
    # indices extents, depth
    ((5,), 4),
    ((3, 4), 7),
    ((2, 3, 5), 3),
    ((40, 3), 11),  # past one workgroup
    ((), 6),  # one index: the result is the new axis alone
    ((0, 3), 4),  # no indices
    ((4,), 1),
]

VALUES = {
    "float32": np.array([-0.5, 2.25], np.float32),
    "int64": np.array([3, -7], np.int64),
    "int32": np.array([0, 1], np.int32),
    "bool": np.array([False, True]),
    "float16": np.array([1.5, -3.0], np.float16),
}


@pytest.mark.parametrize(("ishape", "depth", "axis"), [(i, d, a) for i, d in CASES for a in range(len(i) + 1)])
@pytest.mark.parametrize("index_dtype", ["int64", "int32", "float32"])
def test_one_hot(ishape: tuple[int, ...], depth: int, axis: int, index_dtype: str) -> None:
    rng = np.random.default_rng(sum(ishape) + depth + axis)
    idx = rng.integers(-depth - 2, depth + 2, ishape)  # some outside [-depth, depth): no position
    idx = (idx + rng.uniform(-0.9, 0.9, ishape)).astype(np.float32) if index_dtype == "float32" else idx
    idx = np.asarray(idx).astype(index_dtype)
    for values in VALUES.values():
        want = NP["kernel_one_hot"](idx, values, depth=depth, axis=axis)
        (got,) = run_any(indexing, "one_hot", [idx, values], [want], depth=depth, axis=axis)
        check(got, want)


def test_float_indices_truncate_toward_zero_and_odd_ones_match_nothing() -> None:
    idx = np.array([2.9, -0.5, -1.5, np.nan, 1e30, -1e30, np.inf, -3.2], np.float32)
    values = np.array([0.0, 1.0], np.float32)
    with np.errstate(invalid="ignore"):  # NaN and the infinities have no i64
        want = NP["kernel_one_hot"](idx, values, depth=4, axis=1)
    hot = [2, 0, 3, None, None, None, None, 1]  # -0.5 truncates to 0; -1.5 to -1, from the end 3
    np.testing.assert_array_equal(want, [[float(d == h) for d in range(4)] for h in hot])
    (got,) = run_any(indexing, "one_hot", [idx, values], [want], depth=4, axis=1)
    np.testing.assert_array_equal(got, want)


def test_refusals() -> None:
    with pytest.raises(UnsupportedError, match="a depth the run gives"):
        indexing.source_one_hot([("i64", 1), ("f32", 1), ("i64", 1)], [("f32", 2)], axis=1)
    with pytest.raises(UnsupportedError, match="indices of element type bool"):
        indexing.source_one_hot([("bool", 1), ("f32", 1)], [("f32", 2)], depth=3, axis=1)


def test_a_depth_the_run_gives_is_refused_naming_the_node_unless_the_host_computes_it() -> None:
    import onnx
    from onnx import helper

    from loam.testing import assert_same, build_for, run_built, run_onnxruntime

    node = helper.make_node("OneHot", ["i", "depth", "v"], ["y"], name="hot", axis=0)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("i", onnx.TensorProto.INT64, [3]),
            helper.make_tensor_value_info("depth", onnx.TensorProto.INT64, [1]),
            helper.make_tensor_value_info("v", onnx.TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(UnsupportedError, match=r"kernel\.one_hot 'hot': WGSL one_hot: a depth the run gives"):
        build_for(model, backend="wgsl")
    built = build_for(model, backend="wgsl", host_fallback=True)
    feeds = {"i": np.array([0, -1, 5], np.int64), "depth": np.array([4], np.int64), "v": VALUES["float32"]}
    assert_same(run_built(built, feeds), run_onnxruntime(model, feeds))
