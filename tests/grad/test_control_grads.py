"""Gradients through ONNX If: the branch the condition takes sends the values it reads from the enclosing
graph their share, held to central finite differences for either condition; a Loop is refused by name."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.errors import LoamError
from loam.testing import build_for, run_built
from tests.grad.finite_differences import TRAINING, H

SHAPE = [2, 3]


def _branch(name: str, nodes: list[onnx.NodeProto], out: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.DOUBLE, SHAPE)])


def _model() -> onnx.ModelProto:
    """y = If(c, then: x * w, else: sin(x) * w + x * x, nested If on d inside else) + x * w, loss = sum(y r):
    x and w reach the loss through the If and beside it."""
    inner = helper.make_node(
        "If", ["d"], ["nested"], name="inner",
        then_branch=_branch("inner_then", [helper.make_node("Exp", ["x"], ["ex"])], "ex"),
        else_branch=_branch("inner_else", [helper.make_node("Neg", ["w"], ["nw"])], "nw"),
    )  # fmt: skip
    then = _branch("then", [helper.make_node("Mul", ["x", "w"], ["xw"])], "xw")
    other = _branch("else", [helper.make_node("Sin", ["x"], ["s"]), helper.make_node("Mul", ["s", "w"], ["sw"]),
                             helper.make_node("Mul", ["x", "x"], ["xx"]), inner,
                             helper.make_node("Sum", ["sw", "xx", "nested"], ["e"])], "e")  # fmt: skip
    nodes = [helper.make_node("If", ["c"], ["branch"], name="choose", then_branch=then, else_branch=other),
             helper.make_node("Mul", ["x", "w"], ["beside"]), helper.make_node("Add", ["branch", "beside"], ["y"]),
             helper.make_node("Mul", ["y", "r"], ["yr"]), helper.make_node("ReduceSum", ["yr"], ["loss"], keepdims=0),
             helper.make_node("Gradient", ["x", "w", "r"], ["d_x", "d_w"], domain=TRAINING, xs=["x", "w"],
                              zs=["r"], y="loss")]  # fmt: skip
    inputs = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, SHAPE) for n in ("x", "w", "r")]
    inputs += [helper.make_tensor_value_info(n, TensorProto.BOOL, []) for n in ("c", "d")]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])]
    outputs += [helper.make_tensor_value_info(n, TensorProto.DOUBLE, SHAPE) for n in ("d_x", "d_w")]
    graph = helper.make_graph(nodes, "if", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(TRAINING, 1)])


@pytest.mark.parametrize(("c", "d"), [(True, False), (False, True), (False, False)])
def test_an_if_sends_the_values_its_branch_reads_their_share(c: bool, d: bool) -> None:
    built = build_for(_model())
    assert "kernel.if" in built.report
    rng = np.random.default_rng(int(c) + 2 * int(d))
    feeds = {n: rng.standard_normal(SHAPE) for n in ("x", "w", "r")} | {"c": np.array(c), "d": np.array(d)}
    run = functools.partial(run_built, built)
    _, *grads = run(feeds)
    for name, grad in zip(("x", "w"), grads, strict=True):
        numeric = np.zeros(SHAPE)
        for index in np.ndindex(*SHAPE):
            losses = []
            for sign in (1.0, -1.0):
                moved = dict(feeds)
                moved[name] = feeds[name].copy()
                moved[name][index] += sign * H
                losses.append(float(run(moved)[0]))
            numeric[index] = (losses[0] - losses[1]) / (2 * H)
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6, err_msg=f"d loss / d {name}")


def test_a_gradient_through_a_loop_is_refused_naming_it() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Mul", ["acc", "x"], ["next"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.DOUBLE, SHAPE)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("next", TensorProto.DOUBLE, SHAPE)],
    )  # fmt: skip
    nodes = [helper.make_node("Loop", ["n", "", "x"], ["power"], name="repeat", body=body),
             helper.make_node("ReduceSum", ["power"], ["loss"], keepdims=0),
             helper.make_node("Gradient", ["x"], ["d_x"], domain=TRAINING, xs=["x"], y="loss")]  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", TensorProto.DOUBLE, SHAPE),
              helper.make_tensor_value_info("n", TensorProto.INT64, [])]  # fmt: skip
    outputs = [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, []),
               helper.make_tensor_value_info("d_x", TensorProto.DOUBLE, SHAPE)]  # fmt: skip
    graph = helper.make_graph(nodes, "loop", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(TRAINING, 1)])
    with pytest.raises(LoamError, match=r"kernel\.loop 'repeat': no grad clause for a Loop yet"):
        build_for(model)
