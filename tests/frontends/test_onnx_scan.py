"""Scan over a length the model fixes, unrolled at import (`loam.frontends.onnx_scan`), against
onnxruntime: states, directions, scan axes, body initializers, values read from around the Scan; and
the refusals of a length only the run knows."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from loam.dialects.graph import NodeOp
from loam.errors import UnsupportedError
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


def test_a_scan_over_a_length_only_the_run_knows_stays_and_the_build_refuses_it() -> None:
    model = _scan_model(["T", 2])
    assert "Scan" in [op.op_type for op in import_model(model).walk() if isinstance(op, NodeOp)]
    with pytest.raises(UnsupportedError, match=r"node 'scan' uses operator 'Scan', .*known only at run time"):
        build_for(model)
