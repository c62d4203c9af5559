"""ONNX Loop: a `while` over the body block in the numpy module, against onnxruntime.

Each model is a small ONNX graph in ONNX's text form, built once by `loam.testing.build_for` and run
against onnxruntime: a counting loop with a carried accumulator and scan outputs, a loop its
condition stops, a trip count the run gives (zero included), a body reading values of the enclosing
graph at a symbolic extent.  Then what a carried value whose extents would change gets: a build that
stops naming the Loop where no input could keep them, and the module's `ShapeError` naming the Loop
where only an iteration knows.  Last, the WGSL module refuses a Loop by name.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np
import onnx
import onnx.parser
import pytest

from loam.core.errors import ShapeError
from loam.driver.pipeline import BuildResult
from loam.testing import assert_same, build_for, run_built, run_onnxruntime


def model(text: str, opset: int = 18) -> onnx.ModelProto:
    """A model from the text form of its graph."""
    return onnx.parser.parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>\n{text}')


@functools.cache
def built(text: str) -> tuple[onnx.ModelProto, BuildResult]:
    m = model(text)
    return m, build_for(m)


def check(text: str, feeds: Mapping[str, np.ndarray]) -> None:
    """The model built once matches onnxruntime on `feeds`."""
    m, result = built(text)
    assert_same(run_built(result, feeds), run_onnxruntime(m, feeds))


def i64(value: int) -> np.ndarray:
    return np.array(value, dtype=np.int64)


COUNTING = """
agraph (float[3] x0, float[3] w) => (float[3] acc, float[5, 3] partial, int64[5] its) {
  m = Constant <value = int64 {5}> ()
  t = Constant <value = bool {1}> ()
  acc, partial, its = Loop (m, t, x0) <body = count (int64 i, bool c, float[3] a)
      => (bool co, float[3] ao, float[3] so, int64 io) {
     co = Identity (c)
     fi = Cast <to = 1> (i)
     step = Mul (w, fi)
     ao = Add (a, step)
     so = Identity (ao)
     io = Identity (i)
  }>
}
"""


def test_counting_loop_with_carried_accumulator_and_scan_outputs() -> None:
    rng = np.random.default_rng(0)
    feeds = {"x0": rng.standard_normal(3).astype(np.float32), "w": rng.standard_normal(3).astype(np.float32)}
    check(COUNTING, feeds)
    _, result = built(COUNTING)
    assert "while " in result.source  # a real loop, not an unrolled body


STOPPED = """
agraph (float[4] x0, float limit) => (float[4] y, float[N, 4] trace) {
  t = Constant <value = bool {1}> ()
  y, trace = Loop ("", t, x0) <body = grow (int64 i, bool c, float[4] a) => (bool co, float[4] ao, float[4] so) {
     two = Constant <value = float {2.0}> ()
     ao = Mul (a, two)
     s = ReduceSum <keepdims = 0> (ao)
     co = Less (s, limit)
     so = Identity (a)
  }>
}
"""


@pytest.mark.parametrize("limit", [0.5, 10.0, 1000.0])
def test_a_loop_its_condition_stops(limit: float) -> None:
    feeds = {"x0": np.full(4, 0.25, np.float32), "limit": np.array(limit, np.float32)}
    check(STOPPED, feeds)


def test_a_false_initial_condition_runs_no_iteration() -> None:
    text = STOPPED.replace("t = Constant <value = bool {1}> ()", "t = Constant <value = bool {0}> ()")
    check(text, {"x0": np.full(4, 0.25, np.float32), "limit": np.array(100.0, np.float32)})


RUN_TIME_TRIP = """
agraph (int64 M, bool cond, float[2, 3] x0) => (float[2, 3] y, float[K, 2, 3] steps) {
  y, steps = Loop (M, cond, x0) <body = run (int64 i, bool c, float[2, 3] a)
      => (bool co, float[2, 3] ao, float[2, 3] so) {
     co = Identity (c)
     ao = Sin (a)
     so = Neg (ao)
  }>
}
"""


@pytest.mark.parametrize(("trip", "cond"), [(0, True), (1, True), (7, True), (4, False)])
def test_a_trip_count_given_at_run_time(trip: int, cond: bool) -> None:
    rng = np.random.default_rng(trip)
    feeds = {"M": i64(trip), "cond": np.array(cond), "x0": rng.standard_normal((2, 3)).astype(np.float32)}
    check(RUN_TIME_TRIP, feeds)


OUTER = """
agraph (int64 M, float[N] x0, float[N] w, float[N, 2] table) => (float[N] y, float[K, N, 2] rows) {
  axes = Constant <value = int64[1] {1}> ()
  t = Constant <value = bool {1}> ()
  y, rows = Loop (M, t, x0) <body = outer (int64 i, bool c, float[N] a) => (bool co, float[N] ao, float[N, 2] ro) {
     co = Identity (c)
     ao = Add (a, w)
     col = Unsqueeze (ao, axes)
     ro = Mul (table, col)
  }>
}
"""


@pytest.mark.parametrize(("n", "trip"), [(1, 3), (5, 2), (4, 6)])
def test_a_body_reading_outer_values_at_a_symbolic_extent(n: int, trip: int) -> None:
    rng = np.random.default_rng(n)
    feeds = {
        "M": i64(trip),
        "x0": rng.standard_normal(n).astype(np.float32),
        "w": rng.standard_normal(n).astype(np.float32),
        "table": rng.standard_normal((n, 2)).astype(np.float32),
    }
    check(OUTER, feeds)


def test_a_carried_value_growing_stops_the_build_naming_the_loop() -> None:
    text = """
agraph (int64 M, float[3] x0) => (float[3] y) {
  t = Constant <value = bool {1}> ()
  y = Loop (M, t, x0) <body = grow (int64 i, bool c, float[3] a) => (bool co, float[6] ao) {
     co = Identity (c)
     ao = Concat <axis = 0> (a, a)
  }>
}
"""
    with pytest.raises(ShapeError, match=r"Loop node 'y'.*loop-carried value 'a' axis 0 keeps its extent"):
        build_for(model(text))


def test_a_carried_symbolic_extent_that_would_grow_is_owed_each_iteration() -> None:
    """2*N == N holds only for N = 0: the body owes it, and forward refuses any other N."""
    text = """
agraph (int64 M, float[N] x0) => (float[N] y) {
  t = Constant <value = bool {1}> ()
  y = Loop (M, t, x0) <body = grow (int64 i, bool c, float[N] a) => (bool co, float[N2] ao) {
     co = Identity (c)
     ao = Concat <axis = 0> (a, a)
  }>
}
"""
    _, result = built(text)
    feeds = {"M": i64(2), "x0": np.ones(3, np.float32)}
    with pytest.raises(result.module.ShapeError, match=r"2\*N == N \(Loop node 'y'\)"):
        run_built(result, feeds)
    # No iteration runs: nothing is owed, and y is x0.
    (y,) = run_built(result, {**feeds, "M": i64(0)})
    np.testing.assert_array_equal(y, feeds["x0"])


SLICED = """
agraph (int64 M, float[1] y0, float[5] x, int64[1] width) => (float[1] y) {
  zero = Constant <value = int64[1] {0}> ()
  t = Constant <value = bool {1}> ()
  y = Loop (M, t, y0) <body = sliced (int64 i, bool c, float[1] a) => (bool co, float[1] ao) {
     co = Identity (c)
     s = Unsqueeze (i, zero)
     e = Add (s, width)
     piece = Slice (x, s, e)
     ao = Add (a, piece)
  }>
}
"""


def test_a_carried_extent_only_an_iteration_knows_is_checked_each_iteration() -> None:
    text = SLICED
    x = np.arange(5, dtype=np.float32)
    feeds = {"M": i64(3), "y0": np.ones(1, np.float32), "x": x, "width": np.array([1], np.int64)}
    check(text, feeds)
    _, result = built(text)
    wide = {**feeds, "width": np.array([2], np.int64)}
    with pytest.raises(result.module.ShapeError, match="Loop node 'y'"):
        run_built(result, wide)


def test_the_wgsl_module_runs_a_loop_as_the_numpy_module_does() -> None:
    """The WGSL module's while (tests/backends/wgsl/test_control_flow.py has more) matches numpy's."""
    pytest.importorskip("wgpu")
    m, result = built(RUN_TIME_TRIP)
    on_device = build_for(m, backend="wgsl")
    x0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    for n, go in ((3, True), (0, True), (2, False)):
        feeds = {"M": i64(n), "cond": np.array(go), "x0": x0}
        assert_same(run_built(on_device, feeds), run_built(result, feeds))


NO_COND = """
agraph (int64 M, float[2] x0) => (float[2] y, float[K, 2] s) {
  y, s = Loop (M, "", x0) <body = b (int64 i, bool c, float[2] a) => (bool co, float[2] ao, float[2] so) {
     one = Constant <value = int64 {1}> ()
     co = Less (i, one)
     ao = Add (a, a)
     so = Identity (a)
  }>
}
"""


@pytest.mark.parametrize("trip", [0, 1, 4])
def test_without_a_cond_input_the_body_condition_still_stops_it_as_onnxruntime_does(trip: int) -> None:
    """ONNX's text calls the body's condition ignored without a cond input; onnxruntime (the oracle)
    stops on it, and so does Loam."""
    check(NO_COND, {"M": i64(trip), "x0": np.ones(2, np.float32)})
