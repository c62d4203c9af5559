"""Gradients through ONNX If: the branch the condition takes sends the values it reads from the enclosing
graph their share, held to central finite differences for either condition; a Loop is refused by name."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.core.errors import LoamError
from loam.testing import build_for, run_built
from tests.grad.finite_differences import TRAINING, central_differences

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
        numeric = central_differences(lambda moved: float(run(moved)[0]), feeds, name)
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6, err_msg=f"d loss / d {name}")


def _loop_model(trips: str, cond: str | None) -> onnx.ModelProto:
    """acc = acc * x + w per iteration (carried), each iteration's acc * i also a scan output; loss reads both."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Mul", ["acc", "x"], ["ax"]),
         helper.make_node("Add", ["ax", "w"], ["next"]), helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.DOUBLE),
         helper.make_node("Mul", ["next", "fi"], ["scan"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.DOUBLE, SHAPE)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("next", TensorProto.DOUBLE, SHAPE),
         helper.make_tensor_value_info("scan", TensorProto.DOUBLE, SHAPE)],
    )  # fmt: skip
    nodes = [helper.make_node("Loop", [trips, cond or "", "init"], ["final", "scans"], name="repeat", body=body),
             helper.make_node("Mul", ["final", "r"], ["fr"]), helper.make_node("ReduceSum", ["fr"], ["l1"], keepdims=0),
             helper.make_node("Sin", ["scans"], ["ss"]), helper.make_node("ReduceSum", ["ss"], ["l2"], keepdims=0),
             helper.make_node("Add", ["l1", "l2"], ["loss"]),
             helper.make_node("Gradient", ["x", "w", "init", "r"], ["d_x", "d_w", "d_init"], domain=TRAINING,
                              xs=["x", "w", "init"], zs=["r"], y="loss")]  # fmt: skip
    inputs = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, SHAPE) for n in ("x", "w", "init", "r")]
    if trips == "n":
        inputs.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
    outputs = [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])]
    outputs += [helper.make_tensor_value_info(n, TensorProto.DOUBLE, SHAPE) for n in ("d_x", "d_w", "d_init")]
    # Constant nodes: an initializer is a weight, whose value only the run knows.
    known = [
        helper.make_node("Constant", [], ["trips"], value=helper.make_tensor("t", TensorProto.INT64, [], [3])),
        helper.make_node("Constant", [], ["go"], value=helper.make_tensor("g", TensorProto.BOOL, [], [True])),
    ]
    nodes = [k for k in known if k.output[0] in (trips, cond)] + nodes
    graph = helper.make_graph(nodes, "loop", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(TRAINING, 1)])


@pytest.mark.parametrize("cond", [None, "go"])
def test_a_loop_of_a_known_trip_count_is_unrolled_in_the_backward(cond: str | None) -> None:
    """Carried values and scan outputs: d x, d w and d init held to central finite differences."""
    built = build_for(_loop_model("trips", cond))
    assert "kernel.loop" in built.report
    rng = np.random.default_rng(5)
    feeds = {n: rng.standard_normal(SHAPE) * 0.7 for n in ("x", "w", "init", "r")}
    run = functools.partial(run_built, built)
    _, *grads = run(feeds)
    for name, grad in zip(("x", "w", "init"), grads, strict=True):
        numeric = central_differences(lambda moved: float(run(moved)[0]), feeds, name)
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6, err_msg=f"d loss / d {name}")


def test_a_loop_of_a_trip_count_the_run_gives_is_refused_naming_it() -> None:
    with pytest.raises(LoamError, match=r"kernel\.loop 'repeat': no grad clause for a Loop whose trip count the build"):
        build_for(_loop_model("n", None))


def test_the_differentiate_pass_unrolls_the_loop_in_its_place() -> None:
    """With `--grad`, the unrolled body stands in the Loop's place in the forward (run once); the weight's
    gradient from both results equals central finite differences of forward."""
    from onnx import numpy_helper

    from loam.driver.draft import draft_layout
    from loam.driver.pipeline import build

    model = _loop_model("trips", None)
    graph = model.graph
    keep = [n for n in graph.node if n.op_type in ("Constant", "Loop")]
    del graph.node[:]
    graph.node.extend(keep)
    rng = np.random.default_rng(9)
    w = rng.standard_normal(SHAPE) * 0.7
    del graph.input[:]
    graph.input.extend([helper.make_tensor_value_info(n, TensorProto.DOUBLE, SHAPE) for n in ("x", "init")])
    graph.initializer.append(numpy_helper.from_array(w, "w"))
    del graph.output[:]
    graph.output.extend([helper.make_tensor_value_info("final", TensorProto.DOUBLE, SHAPE),
                         helper.make_tensor_value_info("scans", TensorProto.DOUBLE, [3, *SHAPE])])  # fmt: skip
    built = build(model, options=draft_layout(model).options(None), grad=("w",))
    assert "kernel.loop" not in built.report
    module = built.module
    x, init = rng.standard_normal(SHAPE) * 0.7, rng.standard_normal(SHAPE)
    g_final, g_scans = rng.standard_normal(SHAPE), rng.standard_normal((3, *SHAPE))

    def loss(weights: dict[str, np.ndarray]) -> float:
        final, scans, _ = module.forward(module.Weights(**weights), x, init, g_final, g_scans)
        return float(np.sum(final * g_final) + np.sum(scans * g_scans))

    *_, grad = module.forward(module.Weights(w=w), x, init, g_final, g_scans)
    np.testing.assert_allclose(grad, central_differences(loss, {"w": w}, "w"), rtol=1e-5, atol=1e-6)
