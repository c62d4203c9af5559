"""Scan over a length the model fixes, unrolled at import (`loam.frontends.onnx_scan`), against
onnxruntime: states, directions, scan axes, body initializers, values read from around the Scan; then
a Scan over a length only the run knows, rewritten into a Loop and run at several lengths against
onnxruntime, its refusal of no iterations, and the opset 8 Scan the build still refuses."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import TensorProto, helper, numpy_helper

from loam.core.errors import UnsupportedError
from loam.dialects.graph import NodeOp
from loam.driver.pipeline import BuildResult
from loam.frontends.onnx_proto import import_model
from loam.testing import assert_same, build_for, run_built, run_onnxruntime


def _body() -> onnx.GraphProto:
    """state' = state * decay + x_t (decay a body initializer); out_t = state' + bias (bias from around)."""
    decay = numpy_helper.from_array(np.array([0.5, 2.0], np.float32), "decay")
    nodes = [
        helper.make_node("Mul", ["state", "decay"], ["scaled"]),
        helper.make_node("Add", ["scaled", "x_t"], ["next"]),
        helper.make_node("Add", ["next", "bias"], ["out_t"]),
    ]
    return helper.make_graph(
        nodes,
        "body",
        [helper.make_tensor_value_info("state", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("next", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("out_t", TensorProto.FLOAT, [2])],
        initializer=[decay],
    )  # fmt: skip


def _scan_model(x_shape: list[int | str], **attrs: object) -> onnx.ModelProto:
    scan = helper.make_node(
        "Scan", ["init", "x"], ["final", "ys"], name="scan", body=_body(), num_scan_inputs=1, **attrs
    )
    bias = helper.make_node("Constant", [], ["bias"], value=numpy_helper.from_array(np.array([1.0, -1.0], np.float32)))
    graph = helper.make_graph(
        [bias, scan],
        "g",
        [helper.make_tensor_value_info("init", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("final", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("ys", TensorProto.FLOAT, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])


@pytest.mark.parametrize(
    ("x_shape", "attrs"),
    [
        ([4, 2], {}),
        ([4, 2], {"scan_input_directions": [1]}),
        ([4, 2], {"scan_output_directions": [1]}),
        ([2, 5], {"scan_input_axes": [1], "scan_output_axes": [1]}),
        ([2, 3], {"scan_input_axes": [-1], "scan_output_axes": [-1], "scan_input_directions": [1]}),
    ],
    ids=["forward", "input_backward", "output_prepended", "axis1", "negative_axes_backward"],
)
def test_an_unrolled_scan_computes_what_onnxruntime_does(x_shape: list[int], attrs: dict[str, object]) -> None:
    model = _scan_model(x_shape, **attrs)
    rng = np.random.default_rng(3)
    feeds = {"init": rng.standard_normal(2).astype(np.float32), "x": rng.standard_normal(x_shape).astype(np.float32)}
    assert_same(run_built(build_for(model), feeds), run_onnxruntime(model, feeds))


def test_the_copies_name_the_iteration_and_the_scan() -> None:
    names = [op.node_name for op in import_model(_scan_model([3, 2])).walk() if isinstance(op, NodeOp)]
    assert "scan/iter0/Mul_0" in names and "scan/iter2/Add_2" in names
    assert not any(op == "Scan" for op in names)


def text_model(text: str, opset: int = 16) -> onnx.ModelProto:
    """A model from the text form of its graph."""
    return onnx.parser.parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>\n{text}')


@functools.cache
def built(text: str) -> tuple[onnx.ModelProto, BuildResult]:
    m = text_model(text)
    return m, build_for(m)


def f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


CUMSUM = """
agraph (float[2] init, float[T, 2] x) => (float[2] total, float[T, 2] sums) {
  total, sums = Scan <num_scan_inputs = 1, body = b (float[2] s, float[2] xt) => (float[2] so, float[2] yo) {
     so = Add (s, xt)
     yo = Identity (so)
  }> (init, x)
}
"""
REVERSED = CUMSUM.replace("<num_scan_inputs = 1,", "<num_scan_inputs = 1, scan_input_directions = [1],")
REVERSED_OUT = CUMSUM.replace("<num_scan_inputs = 1,", "<num_scan_inputs = 1, scan_output_directions = [1],")
AXIS1 = """
agraph (float[2] init, float[2, T] x) => (float[2] total, float[2, T] sums) {
  total, sums = Scan <num_scan_inputs = 1, scan_input_axes = [1], scan_output_axes = [1],
      body = b (float[2] s, float[2] xt) => (float[2] so, float[2] yo) {
     so = Add (s, xt)
     yo = Mul (so, xt)
  }> (init, x)
}
"""
TWO_INPUTS = """
agraph (float[3] init, float[T, 3] x, float[3, T] w) => (float[3] total, float[T, 3] prods, float[3, T] diffs) {
  total, prods, diffs = Scan <num_scan_inputs = 2, scan_input_axes = [0, -1], scan_output_axes = [0, -1],
      scan_input_directions = [0, 1], body = b (float[3] s, float[3] xt, float[3] wt)
      => (float[3] so, float[3] po, float[3] do) {
     po = Mul (xt, wt)
     so = Add (s, po)
     do = Sub (so, xt)
  }> (init, x, w)
}
"""
OUTER = """
agraph (float[N] init, float[T, N] x, float[N] scale) => (float[N] last, float[T, N] seen) {
  last, seen = Scan <num_scan_inputs = 1, body = b (float[N] s, float[N] xt) => (float[N] so, float[N] yo) {
     m = Mul (s, scale)
     so = Add (m, xt)
     yo = Sin (so)
  }> (init, x)
}
"""


def feeds_for(text: str, t: int, n: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(t)
    if text is TWO_INPUTS:
        return {"init": f32(rng, 3), "x": f32(rng, t, 3), "w": f32(rng, 3, t)}
    if text is OUTER:
        return {"init": f32(rng, n), "x": f32(rng, t, n), "scale": f32(rng, n)}
    return {"init": f32(rng, 2), "x": f32(rng, 2, t) if text is AXIS1 else f32(rng, t, 2)}


@pytest.mark.parametrize("t", [1, 2, 5])
@pytest.mark.parametrize(
    "text",
    [CUMSUM, REVERSED, REVERSED_OUT, AXIS1, TWO_INPUTS, OUTER],
    ids=["cumsum", "input_reversed", "output_reversed", "axis1", "two_inputs", "outer_value"],
)
def test_a_scan_over_a_length_only_the_run_knows_is_a_loop_computing_what_onnxruntime_does(text: str, t: int) -> None:
    m, result = built(text)
    feeds = feeds_for(text, t)
    assert_same(run_built(result, feeds), run_onnxruntime(m, feeds))
    assert "while " in result.source  # a loop, not an unrolled body


def test_the_symbolic_scan_imports_as_a_loop_named_after_it() -> None:
    nodes = {op.node_name: op.op_type for op in import_model(text_model(CUMSUM)).walk() if isinstance(op, NodeOp)}
    assert "Scan" not in nodes.values() and nodes.get("total") == "Loop"


def test_a_symbolic_scan_of_no_iterations_is_refused_at_run_time_as_onnxruntime_refuses_it() -> None:
    m, result = built(CUMSUM)
    feeds = feeds_for(CUMSUM, 0)
    with pytest.raises(Exception, match="Scan"):
        run_onnxruntime(m, feeds)
    with pytest.raises(result.module.ShapeError, match=r"1 <= T \(Gather node 'total/first_element'\)"):
        run_built(result, feeds)


def test_scan_inputs_of_different_lengths_are_refused_at_run_time_as_onnxruntime_refuses_them() -> None:
    text = TWO_INPUTS.replace("float[3, T] w", "float[3, U] w").replace("float[3, T] diffs", "float[3, U] diffs")
    m, result = built(text)
    rng = np.random.default_rng(0)
    feeds = {"init": f32(rng, 3), "x": f32(rng, 4, 3), "w": f32(rng, 3, 4)}
    assert_same(run_built(result, feeds), run_onnxruntime(m, feeds))
    for longer in (5, 1):  # longer, and a length that would broadcast
        feeds["w"] = f32(rng, 3, longer)
        with pytest.raises(Exception):  # noqa: B017 - any onnxruntime failure: ONNX refuses the inputs too
            run_onnxruntime(m, feeds)
        with pytest.raises(result.module.ShapeError, match=r"Concat node 'total/same_length'"):
            run_built(result, feeds)


def test_an_opset_8_scan_stays_and_the_build_refuses_it() -> None:
    text = """
agraph (float[1, 2] init, float[1, T, 2] x) => (float[1, 2] total, float[1, T, 2] sums) {
  total, sums = Scan <num_scan_inputs = 1, body = b (float[2] s, float[2] xt) => (float[2] so, float[2] yo) {
     so = Add (s, xt)
     yo = Identity (so)
  }> ("", init, x)
}
"""
    model = text_model(text, opset=8)
    assert "Scan" in [op.op_type for op in import_model(model).walk() if isinstance(op, NodeOp)]
    with pytest.raises(UnsupportedError, match=r"'Scan'"):
        build_for(model)
