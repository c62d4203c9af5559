"""Functions expanded into their bodies at import (`loam.frontends.onnx_functions`): model-local
functions and operators ONNX defines by a body, run against onnxruntime, and the refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.core.errors import ModelError, UnsupportedError
from loam.core.limits import LimitError
from loam.dialects.graph import NodeOp
from loam.frontends.onnx_proto import import_model
from loam.testing import assert_same, build_for, run_built, run_onnxruntime


def _model(nodes: list[onnx.NodeProto], functions: list[onnx.FunctionProto], opset: int = 18) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(
        graph,
        functions=functions,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("local", 1)],
        ir_version=10,
    )


def _scaled_relu() -> onnx.FunctionProto:
    """ScaledRelu<scale: float = 2.0>(a) = Relu(a) * scale, then Inner(...) adds 1 (a call of a call)."""
    body = [
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Constant", [], ["s"], value_float=0.0),
        helper.make_node("Mul", ["r", "s"], ["m"]),
        helper.make_node("Inner", ["m"], ["b"], domain="local"),
    ]
    body[1].attribute[0].ref_attr_name = "scale"
    function = helper.make_function(
        "local", "ScaledRelu", ["a"], ["b"], body, [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]
    )
    function.attribute_proto.append(helper.make_attribute("scale", 2.0))
    return function


def _inner() -> onnx.FunctionProto:
    one = helper.make_node("Constant", [], ["one"], value_float=1.0)
    return helper.make_function(
        "local",
        "Inner",
        ["p"],
        ["q"],
        [one, helper.make_node("Add", ["p", "one"], ["q"])],
        [helper.make_opsetid("", 18)],
    )


@pytest.mark.parametrize("scale", [None, -3.0])
def test_local_functions_compute_what_onnxruntime_does(scale: float | None) -> None:
    attrs = {} if scale is None else {"scale": scale}
    call = helper.make_node("ScaledRelu", ["x"], ["y"], name="act", domain="local", **attrs)
    model = _model([call], [_scaled_relu(), _inner()])
    x = np.array([[-1.0, 0.5, 2.0], [3.0, -0.25, 0.0]], np.float32)
    assert_same(run_built(build_for(model), {"x": x}), run_onnxruntime(model, {"x": x}))
    names = [op.node_name for op in import_model(model).walk() if isinstance(op, NodeOp)]
    assert names == ["act/Relu_0", "act/Constant_1", "act/Mul_2", "act/Inner_3/Constant_0", "act/Inner_3/Add_1"]


def test_an_operator_with_a_rule_keeps_its_node_and_one_without_is_expanded() -> None:
    nodes = [
        helper.make_node("MeanVarianceNormalization", ["x"], ["s"], name="sw", axes=[0, 1]),  # a body, no rule
        helper.make_node("Gelu", ["s"], ["y"], name="ge"),  # a body too, but Loam's rule computes it
    ]
    model = _model(nodes, [], opset=24)
    ops = [(op.op_type, op.node_name) for op in import_model(model).walk() if isinstance(op, NodeOp)]
    assert ("Gelu", "ge") in ops and not any(op == "MeanVarianceNormalization" for op, _ in ops)
    assert all(name.startswith("sw/") for op, name in ops if op != "Gelu")
    x = np.linspace(-4, 4, 6, dtype=np.float32).reshape(2, 3)
    assert_same(run_built(build_for(model), {"x": x}), run_onnxruntime(model, {"x": x}))


def test_a_function_that_calls_itself_is_refused_at_the_nesting_limit() -> None:
    loop = helper.make_function(
        "local",
        "Loop1",
        ["a"],
        ["b"],
        [helper.make_node("Loop1", ["a"], ["b"], domain="local")],
        [helper.make_opsetid("local", 1)],
    )
    model = _model([helper.make_node("Loop1", ["x"], ["y"], name="l", domain="local")], [loop])
    with pytest.raises(LimitError, match=r"function bodies call each other 64 deep.*calls itself"):
        import_model(model, source="m.onnx")


def test_a_function_written_for_another_default_opset_is_refused() -> None:
    inner = _inner()
    inner.opset_import[0].version = 13
    model = _model([helper.make_node("Inner", ["x"], ["y"], name="i", domain="local")], [inner])
    with pytest.raises(
        UnsupportedError, match=r"Inner node 'i': function 'Inner' imports opset 13 of the default domain, the model 18"
    ):
        import_model(model, source="m.onnx")


def test_a_call_with_more_inputs_than_the_function_takes_is_refused() -> None:
    model = _model([helper.make_node("Inner", ["x", "x"], ["y"], name="i", domain="local")], [_inner()])
    with pytest.raises(ModelError, match=r"Inner node 'i': 2 inputs and 1 outputs, but its function 'Inner' takes 1"):
        import_model(model, source="m.onnx")


def test_a_model_without_functions_is_returned_unchanged() -> None:
    from loam.frontends.onnx_functions import expand_functions

    model = _model([helper.make_node("Relu", ["x"], ["y"])], [])
    assert expand_functions(model, "m.onnx", lambda op: True) is model
