"""Patterns of a VITS text-to-speech export (a Piper voice), each a small graph built once and run at
several extents or data values against onnxruntime.

- Relative-position attention slices a [L, 2L - 1] table from column L - 1: the data's extent 2L - 1
  says L >= 1 (an extent is a length), so the start is L - 1 and the count L, which an Add with
  [L, L] scores takes as one axis (was: a derived count only owed equal to L, and no layout).
- Advanced indexing concatenates index tensors whose extent-1 axes come from constants of different
  ranks (`Unit` beside `Unit1`): one element either way, so Concat takes them as one axis.
- The durations a model predicts decide the output's length (CumSum, Range, a comparison, NonZero,
  GatherND, MatMul by the alignment path): a length only the run knows, bound where the data gives it.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx.parser
import pytest

from loam.driver.pipeline import BuildResult
from loam.testing import assert_same, build_for, run_built, run_onnxruntime


def model(text: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(f'<ir_version: 8, opset_import: ["" : 13]>\n{text}')


@functools.cache
def built(text: str) -> BuildResult:
    return build_for(model(text))


def check(text: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    got = run_built(built(text), feeds)
    assert_same(got, run_onnxruntime(model(text), feeds), rtol=1e-5, atol=1e-5)
    return got


# Scores q q^T [L, L] plus the relative positions: x padded to [L, 2L - 1], sliced from L - 1.
RELATIVE = """
g (float[L, 4] q) => (float[L, L] y) {
    qt = Transpose <perm = [1, 0]> (q)
    x = MatMul (q, qt)
    one = Constant <value = int64[1] {1}> ()
    big = Constant <value = int64[1] {9223372036854775807}> ()
    axis1 = Constant <value = int64[1] {1}> ()
    zero = Constant <value = int64[1] {0}> ()
    s = Shape (x)
    l = Gather <axis = 0> (s, zero)
    start = Sub (l, one)
    zeros = Constant <value = int64[3] {0, 0, 0}> ()
    pads = Concat <axis = 0> (zeros, start)
    table = Pad (x, pads)
    rel = Slice (table, start, big, axis1)
    y = Add (rel, x)
}"""


@pytest.mark.parametrize("length", [1, 4, 9])
def test_relative_positions_sliced_from_a_padded_table(length: int) -> None:
    q = np.random.default_rng(length).standard_normal((length, 4)).astype(np.float32)
    check(RELATIVE, {"q": q})


def test_the_relative_slice_counts_l_columns() -> None:
    source = built(RELATIVE).source
    owed = [line for line in source.splitlines() if line.strip().startswith("_owe(")]
    assert "fromend" not in source  # no derived count
    assert all("Pad node" in line for line in owed), owed  # the Pad's 2L - 1 >= 0 alone: Slice and Add owe nothing


# Two index tensors for ScatterND/GatherND: one-element constants of ranks 3 and 2 expanded to
# [1, 1, N], each given a trailing axis, then concatenated along it.
INDICES = """
g (float[N] x) => (float[1, 1, N, 2] y) {
    s = Shape (x)
    ones = Constant <value = int64[2] {1, 1}> ()
    shape = Concat <axis = 0> (ones, s)
    c3 = Constant <value = float[1, 1, 1] {2}> ()
    c2 = Constant <value = float[1, 1] {3}> ()
    a = Expand (c3, shape)
    b = Expand (c2, shape)
    last = Constant <value = int64[1] {-1}> ()
    ua = Unsqueeze (a, last)
    ub = Unsqueeze (b, last)
    c = Concat <axis = -1> (ua, ub)
    xr = Reshape (x, shape)
    xu = Unsqueeze (xr, last)
    y = Add (c, xu)
}"""


@pytest.mark.parametrize("n", [1, 3, 7])
def test_concat_of_index_tensors_with_unit_axes_of_other_constants(n: int) -> None:
    check(INDICES, {"x": np.arange(n, dtype=np.float32)})


# Each of N phonemes lasts ceil(w) frames: the alignment path [N, T] marks frame t for phoneme i where
# cumsum[i - 1] <= t < cumsum[i], T the last cumsum; the frames are the phonemes' features by the path
# (MatMul), and the (phoneme, frame) pairs NonZero finds gather the features again (GatherND).
DURATIONS = """
g (float[N, 2] x, float[N] w) => (float[T, 2] y, float[K, 2] z) {
    c = Ceil (w)
    d = Cast <to = 7> (c)
    zero = Constant <value = int64 {0}> ()
    cs = CumSum (d, zero)
    total = ReduceMax <keepdims = 0> (cs)
    one = Constant <value = int64 {1}> ()
    t = Range (zero, total, one)
    axes0 = Constant <value = int64[1] {0}> ()
    axes1 = Constant <value = int64[1] {1}> ()
    tt = Unsqueeze (t, axes0)
    end = Unsqueeze (cs, axes1)
    du = Unsqueeze (d, axes1)
    begin = Sub (end, du)
    before = Less (tt, end)
    after = GreaterOrEqual (tt, begin)
    mask = And (before, after)
    path = Cast <to = 1> (mask)
    pt = Transpose <perm = [1, 0]> (path)
    y = MatMul (pt, x)
    nz = NonZero (mask)
    pairs = Transpose <perm = [1, 0]> (nz)
    first = Constant <value = int64[1] {0}> ()
    stop = Constant <value = int64[1] {1}> ()
    rows = Slice (pairs, first, stop, axes1)
    z = GatherND (x, rows)
}"""


@pytest.mark.parametrize(("durations", "frames"), [([0.5, 2.0, 1.2], 5), ([3.0, 0.0, 4.5, 1.0], 9)])
def test_the_output_length_is_the_durations_sum(durations: list[float], frames: int) -> None:
    n = len(durations)
    x = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
    y, z = check(DURATIONS, {"x": x, "w": np.array(durations, np.float32)})
    assert y.shape == (frames, 2) and z.shape == (frames, 2)
