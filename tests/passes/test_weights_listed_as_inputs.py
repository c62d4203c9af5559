"""Old exports (ONNX IR < 4) list every initializer among the graph inputs: those are weights."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from loam.testing import assert_same, build_for, forward_inputs, run_built, run_onnxruntime


def test_an_initializer_listed_as_an_input_is_a_weight_not_an_input() -> None:
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2]), helper.make_tensor_value_info("w", 1, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    result = build_for(model)
    assert forward_inputs(result) == ["x"]
    assert 'kernel.weight "w"' in str(result.ir)
    x = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
    assert_same(run_built(result, {"x": x}), run_onnxruntime(model, {"x": x}))
