"""Loop and If on the device (`loam/backends/wgsl_module.py`, `collect_loop` and `collect_if`) against
onnxruntime.

Small models drawn to reach each way a Loop's values can be handed on: a trip count only, a
condition only, both; scan outputs (stacked on the host); a carried value the body returns
unchanged, carried values swapped (each read by the other's next value), a body returning a value
from outside it; a Loop inside an If branch and an If on a computed condition inside a Loop body;
an If whose condition the device computes; zero iterations; a trip count past the i32 range (only
the host reads it).  Each module is run twice, so a second
call with the same extents reuses its buffers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.testing import assert_same, build_for, run_built, run_onnxruntime

pytest.importorskip("wgpu")

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def scalar(name: str, elem: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [])


def vec(name: str, elem: int = F, n: int = 3) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [n])


def const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape, value.reshape(-1).tolist()))  # fmt: skip


def model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
          outputs: Sequence[onnx.ValueInfoProto]) -> onnx.ModelProto:  # fmt: skip
    graph = helper.make_graph(list(nodes), "control", list(inputs), list(outputs))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def check(m: onnx.ModelProto, feeds: Sequence[dict[str, np.ndarray]]) -> None:
    """The WGSL module's outputs are onnxruntime's, for each feed, each one twice (the module reads a
    condition or a scan element back from the device)."""
    built = build_for(m, fuse="dispatch", backend="wgsl")
    assert "g.sync(" in built.source
    for f in feeds:
        want = run_onnxruntime(m, f)
        for _ in range(2):
            assert_same(run_built(built, f), want)


def body(nodes: Sequence[onnx.NodeProto], carried: Sequence[onnx.ValueInfoProto],
         outputs: Sequence[onnx.ValueInfoProto]) -> onnx.GraphProto:  # fmt: skip
    """A Loop body over (iteration, cond_in, *carried) giving `outputs` (cond_out first)."""
    ins = [scalar("it", I64), scalar("cond_in", B), *carried]
    return helper.make_graph(list(nodes), "body", ins, list(outputs))


def x_feed(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(3).astype(np.float32)


def test_a_trip_count_only_loop_with_a_scan_output() -> None:
    """x <- x * 1.5 + w, M times; each iteration's x stacked (M known only at run time)."""
    loop_body = body(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["x_in", "k"], ["scaled"]),
         helper.make_node("Add", ["scaled", "w"], ["x_out"]),
         helper.make_node("Neg", ["x_out"], ["scan"])],
        [vec("x_in")], [scalar("cond_out", B), vec("x_out"), vec("scan")],
    )  # fmt: skip
    m = model(
        [const("k", np.array([1.5], np.float32)),
         helper.make_node("Loop", ["m", "", "x"], ["y", "ys"], body=loop_body)],
        [scalar("m", I64), vec("x"), vec("w")], [vec("y"), helper.make_tensor_value_info("ys", F, ["T", 3])],
    )  # fmt: skip
    rng = np.random.default_rng(0)
    w = x_feed(rng)
    check(m, [{"m": np.array(n, np.int64), "x": x_feed(rng), "w": w} for n in (4, 0, 1)])


def test_a_condition_only_loop_stops_on_a_value_the_device_computes() -> None:
    """x <- x + 1 while sum(x) < limit: the condition read back every iteration."""
    loop_body = body(
        [const("one", np.array([1.0], np.float32)),
         helper.make_node("Add", ["x_in", "one"], ["x_out"]),
         helper.make_node("ReduceSum", ["x_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"])],
        [vec("x_in")], [scalar("cond_out", B), vec("x_out")],
    )  # fmt: skip
    m = model(
        [helper.make_node("ReduceSum", ["x"], ["start"], keepdims=0),
         helper.make_node("Less", ["start", "limit"], ["go"]),
         helper.make_node("Loop", ["", "go", "x"], ["y"], body=loop_body)],
        [vec("x"), scalar("limit", F)], [vec("y")],
    )  # fmt: skip
    rng = np.random.default_rng(1)
    feeds = [{"x": x_feed(rng), "limit": np.array(v, np.float32)} for v in (10.0, -100.0, 30.5)]
    check(m, feeds)


def test_trip_count_and_condition_with_swapped_carried_values_and_an_unchanged_one() -> None:
    """(a, b) <- (b, a + b * c) while max(b) < 50 and at most M times; c is carried unchanged, and the
    scan outputs are an outer value and the iteration number."""
    loop_body = body(
        [helper.make_node("Mul", ["b_in", "c_in"], ["bc"]),
         helper.make_node("Add", ["a_in", "bc"], ["b_out"]),
         helper.make_node("Identity", ["b_in"], ["a_out"]),
         helper.make_node("ReduceMax", ["b_out"], ["top"], keepdims=0),
         helper.make_node("Less", ["top", "fifty"], ["cond_out"]),
         helper.make_node("Identity", ["outer"], ["outer_scan"]),
         helper.make_node("Identity", ["it"], ["it_scan"])],
        [vec("a_in"), vec("b_in"), vec("c_in")],
        [scalar("cond_out", B), vec("a_out"), vec("b_out"), vec("c_in"), vec("outer_scan"), scalar("it_scan", I64)],
    )  # fmt: skip
    m = model(
        [const("fifty", np.array(50.0, np.float32)),
         helper.make_node("Abs", ["x"], ["outer"]),
         helper.make_node("Loop", ["m", "go", "a", "b", "c"], ["ra", "rb", "rc", "outers", "its"], body=loop_body)],
        [scalar("m", I64), scalar("go", B), vec("a"), vec("b"), vec("c"), vec("x")],
        [vec("ra"), vec("rb"), vec("rc"), helper.make_tensor_value_info("outers", F, ["T", 3]),
         helper.make_tensor_value_info("its", I64, ["T"])],
    )  # fmt: skip
    rng = np.random.default_rng(2)
    feeds = []
    for n, go in ((20, True), (2, True), (20, False), (2**63 - 1, True)):  # the last: no bound but the condition
        a, b, c, x = (np.abs(x_feed(rng)) + 0.5 for _ in range(4))
        feeds.append({"m": np.array(n, np.int64), "go": np.array(go), "a": a, "b": b, "c": c, "x": x})
    check(m, feeds)


def test_an_if_on_a_computed_condition() -> None:
    """sum(x) > 0 decides on the device's value; each branch computes a kernel of its own."""
    then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [], [vec("t")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vec("e")])
    m = model(
        [const("zero", np.array(0.0, np.float32)),
         helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["p"]),
         helper.make_node("If", ["p"], ["r"], then_branch=then, else_branch=other),
         helper.make_node("Add", ["r", "x"], ["y"])],
        [vec("x")], [vec("y")],
    )  # fmt: skip
    check(m, [{"x": np.array(v, np.float32)} for v in ([1, 2, -0.5], [-1, -2, 0.5])])


def test_a_loop_inside_an_if_branch() -> None:
    """If n > 0 (computed): a Loop doubling x n times; else x itself."""
    loop_body = body(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["x_in", "x_in"], ["x_out"])],
        [vec("x_in")], [scalar("cond_out", B), vec("x_out")],
    )  # fmt: skip
    then = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["doubled"], body=loop_body)], "then", [], [vec("doubled")]
    )
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["same"])], "else", [], [vec("same")])
    m = model(
        [const("zero", np.array(0, np.int64)),
         helper.make_node("Greater", ["n", "zero"], ["p"]),
         helper.make_node("If", ["p"], ["r"], then_branch=then, else_branch=other),
         helper.make_node("Sub", ["r", "x"], ["y"])],
        [scalar("n", I64), vec("x")], [vec("y")],
    )  # fmt: skip
    rng = np.random.default_rng(3)
    check(m, [{"n": np.array(n, np.int64), "x": x_feed(rng)} for n in (3, 0, -2)])


def test_an_if_on_a_computed_condition_inside_a_loop_body() -> None:
    """Each iteration: x <- x * 0.5 where max(x) > 1 else x + 1 (the If's condition read back per
    iteration), M times, with a nested Loop adding the iteration number twice."""
    then = helper.make_graph([helper.make_node("Mul", ["x_in", "half"], ["t"])], "then", [], [vec("t")])
    other = helper.make_graph([helper.make_node("Add", ["x_in", "one"], ["e"])], "else", [], [vec("e")])
    inner = helper.make_graph(
        [helper.make_node("Identity", ["cond_in2"], ["cond_out2"]),
         helper.make_node("Add", ["z_in", "itf"], ["z_out"])],
        "inner", [scalar("it2", I64), scalar("cond_in2", B), vec("z_in")], [scalar("cond_out2", B), vec("z_out")],
    )  # fmt: skip
    loop_body = body(
        [helper.make_node("ReduceMax", ["x_in"], ["top"], keepdims=0),
         helper.make_node("Greater", ["top", "onef"], ["p"]),
         helper.make_node("If", ["p"], ["r"], then_branch=then, else_branch=other),
         helper.make_node("Cast", ["it"], ["itf"], to=F),
         helper.make_node("Loop", ["two", "", "r"], ["x_out"], body=inner),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        [vec("x_in")], [scalar("cond_out", B), vec("x_out")],
    )  # fmt: skip
    m = model(
        [const("half", np.array(0.5, np.float32)),
         const("one", np.array([1.0], np.float32)),
         const("onef", np.array(1.0, np.float32)),
         const("two", np.array(2, np.int64)),
         helper.make_node("Loop", ["m", "", "x"], ["y"], body=loop_body)],
        [scalar("m", I64), vec("x")], [vec("y")],
    )  # fmt: skip
    rng = np.random.default_rng(4)
    check(m, [{"m": np.array(n, np.int64), "x": x_feed(rng) * 4} for n in (5, 1, 0)])
