"""What only the weights determine is computed once, when `Weights` is made (`passes/weight_only.py`).

A graph computes a transposed weight for its product, a sum of two bias weights, and returns a
transposed weight as an output.  The module matches onnxruntime; forward reads the first two as
attributes `_prepare` set (so replacing the weights they came from after `Weights` is made changes
nothing forward computes); the returned one stays in forward, so what the caller gets is never an
attribute of `Weights` (writing into it cannot change a later call).
"""

from __future__ import annotations

import re

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from loam.testing import assert_same, build_for, run_onnxruntime


def _model() -> object:
    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("Transpose", ["W"], ["Wt"], name="wt", perm=[1, 0]),
        helper.make_node("MatMul", ["x", "Wt"], ["xw"], name="product"),
        helper.make_node("Add", ["b1", "b2"], ["bias"], name="bias"),
        helper.make_node("Add", ["xw", "bias"], ["y"], name="add"),
        helper.make_node("Transpose", ["W"], ["t"], name="returned", perm=[1, 0]),
    ]
    graph = helper.make_graph(
        nodes,
        "load_time",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("t", TensorProto.FLOAT, [4, 3]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_weight_only_kernels_run_once_at_load() -> None:
    model = _model()
    result = build_for(model)  # type: ignore[arg-type]
    module = result.module
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    weights = module.Weights.embedded()
    got = module.forward(weights, x)
    assert_same(list(got), run_onnxruntime(model, {"x": x}))  # type: ignore[arg-type]

    forward = result.source.split("def forward(")[1].split("\n\n\n")[0]
    assert not re.search(r"weights\.(b1|b2)\b", forward), forward  # the bias sum is an attribute
    assert forward.count(".transpose(") == 1, forward  # only the returned transpose is left in forward

    # Forward no longer reads the weights the prepared values came from.
    weights.W = np.zeros_like(weights.W)
    weights.b1 = np.full_like(weights.b1, np.nan)
    again = module.forward(weights, x)
    np.testing.assert_array_equal(again.y, got.y)


def test_a_returned_value_is_not_kept_in_weights() -> None:
    model = _model()
    module = build_for(model).module  # type: ignore[arg-type]
    weights = module.Weights.embedded()
    x = np.ones((2, 4), np.float32)
    first = module.forward(weights, x)
    held = [getattr(weights, a) for a in type(weights).__slots__ if isinstance(getattr(weights, a), np.ndarray)]
    assert not any(np.shares_memory(first.t, h) and first.t.flags.writeable for h in held)
    expected = first.t.copy()
    if first.t.flags.writeable:
        first.t[...] = 0.0
    np.testing.assert_array_equal(module.forward(weights, x).t, expected)
