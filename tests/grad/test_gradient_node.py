"""ONNX's Gradient node (ai.onnx.preview.training): ONNX's own model cases, a loss over an MLP against central
finite differences of onnxruntime's forward in float64, a y of many elements (the gradient of its sum), an
intermediate tensor in xs, a second derivative, and the refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.backend.test.case.model import collect_testcases

from loam.core.errors import LoamError
from loam.testing import assert_same, build_for, run_built, run_onnxruntime
from tests.grad.finite_differences import central_differences

TRAINING = "ai.onnx.preview.training"


def model_of(nodes: list[onnx.NodeProto], inputs: dict[str, list[int]], outputs: dict[str, list[int]],
             elem: int = TensorProto.FLOAT) -> onnx.ModelProto:  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, elem, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, elem, s) for n, s in outputs.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TRAINING, 1)])


def gradient(xs: list[str], y: str, outputs: list[str], zs: tuple[str, ...] = (), name: str = "grad") -> onnx.NodeProto:
    extra = {"zs": list(zs)} if zs else {}
    return helper.make_node("Gradient", [*xs, *zs], outputs, domain=TRAINING, name=name, xs=xs, y=y, **extra)


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
@pytest.mark.parametrize("case", [c for c in collect_testcases() if c.name.startswith("test_gradient")], ids=str)
def test_onnx_gradient_model_case(case: object, backend: str) -> None:
    model = case.model  # type: ignore[attr-defined]
    built = build_for(model, backend=backend)
    for inputs, outputs in case.data_sets:  # type: ignore[attr-defined]
        feeds = {i.name: v for i, v in zip(model.graph.input, inputs, strict=True)}
        assert_same(run_built(built, feeds), outputs)


MLP_NODES = [
    helper.make_node("MatMul", ["x", "w1"], ["xw"]),
    helper.make_node("Add", ["xw", "b1"], ["pre"]),
    helper.make_node("Tanh", ["pre"], ["h"]),
    helper.make_node("MatMul", ["h", "w2"], ["o"]),
    helper.make_node("Softmax", ["o"], ["p"], axis=-1),
    helper.make_node("Mul", ["p", "t"], ["pt"]),
    helper.make_node("ReduceSum", ["pt"], ["loss"], keepdims=0),
]
MLP_INPUTS = {"x": [4, 3], "w1": [3, 5], "b1": [5], "w2": [5, 2], "t": [4, 2]}


def mlp_feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s) for n, s in MLP_INPUTS.items()}


def onnxruntime_differences(name: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """d loss / d feeds[name] by central differences of onnxruntime's forward (no Gradient node), in float64."""
    forward = model_of(MLP_NODES, MLP_INPUTS, {"loss": []}, TensorProto.DOUBLE)
    return central_differences(lambda moved: float(run_onnxruntime(forward, moved)[0]), feeds, name)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_gradient_of_an_mlp_loss_equals_central_differences(seed: int) -> None:
    xs = ["w1", "b1", "w2"]
    nodes = [*MLP_NODES, gradient(xs, "loss", [f"d_{n}" for n in xs], zs=("x", "t"))]
    outputs = {"loss": [], **{f"d_{n}": MLP_INPUTS[n] for n in xs}}
    model = model_of(nodes, MLP_INPUTS, outputs, TensorProto.DOUBLE)
    feeds = mlp_feeds(seed)
    loss, *grads = run_built(build_for(model), feeds)
    assert_same([loss], run_onnxruntime(model_of(MLP_NODES, MLP_INPUTS, {"loss": []}, TensorProto.DOUBLE), feeds))
    for name, got in zip(xs, grads, strict=True):
        np.testing.assert_allclose(got, onnxruntime_differences(name, feeds), rtol=1e-6, atol=1e-8, err_msg=name)


def test_the_gradient_with_respect_to_an_intermediate_tensor() -> None:
    """xs may name a value the graph computes (h): its adjoint, here d loss / dh = (p * (t - sum(p t))) w2^T."""
    nodes = [*MLP_NODES, gradient(["h"], "loss", ["d_h"])]
    model = model_of(nodes, MLP_INPUTS, {"d_h": [4, 5]}, TensorProto.DOUBLE)
    feeds = mlp_feeds(2)
    (got,) = run_built(build_for(model), feeds)
    h = np.tanh(feeds["x"] @ feeds["w1"] + feeds["b1"])
    o = h @ feeds["w2"]
    p = np.exp(o - o.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    t = feeds["t"]
    do = p * (t - (p * t).sum(-1, keepdims=True))
    np.testing.assert_allclose(got, do @ feeds["w2"].T, rtol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_a_y_of_many_elements_gives_the_gradient_of_its_sum_and_a_second_gradient_the_second_derivative(
    backend: str,
) -> None:
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["x2"]),
        helper.make_node("Mul", ["x2", "x"], ["y"]),
        gradient(["x"], "y", ["dy"], name="first"),
        gradient(["x"], "dy", ["d2y"], name="second"),
    ]
    model = model_of(nodes, {"x": [5]}, {"dy": [5], "d2y": [5]})
    x = np.array([1.0, 2.0, -3.0, 0.5, 0.0], np.float32)
    assert_same(run_built(build_for(model, backend=backend), {"x": x}), [3 * x * x, 6 * x])


def test_a_gradient_at_values_other_than_the_named_tensors_is_refused() -> None:
    nodes = [helper.make_node("Mul", ["a", "b"], ["y"]),
             helper.make_node("Gradient", ["b"], ["dy"], domain=TRAINING, name="g", xs=["a"], y="y")]  # fmt: skip
    with pytest.raises(
        LoamError, match=r"Gradient node 'g': its inputs \[b\] are not the tensors xs and zs name \[a\]"
    ):
        build_for(model_of(nodes, {"a": [2], "b": [2]}, {"dy": [2]}))


def test_a_gradient_through_argmax_alone_is_refused() -> None:
    nodes = [
        helper.make_node("ArgMax", ["x"], ["i"], axis=0, keepdims=0),
        helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT),
        gradient(["x"], "y", ["dx"], name="g"),
    ]
    with pytest.raises(LoamError, match=r"Gradient node 'g': no gradient reaches 'x' from y: every path from it "
                       r"to y passes kernel\.arg_reduce 'i', which has no derivative"):  # fmt: skip
        build_for(model_of(nodes, {"x": [3]}, {"dx": [3]}))


def test_a_gradient_of_a_value_the_build_computes_is_refused() -> None:
    c = helper.make_tensor("c", TensorProto.FLOAT, [2], [1.0, 2.0])
    nodes = [helper.make_node("Constant", [], ["k"], value=c),
             helper.make_node("Mul", ["k", "k"], ["y"]), gradient(["k"], "y", ["dk"], name="g")]  # fmt: skip
    with pytest.raises(LoamError, match=r"Gradient node 'g': 'k', 'y' are computed at build time"):
        build_for(model_of(nodes, {"x": [2]}, {"dk": [2]}))


UPDATED = ["W_new", "b_new", "VW_new", "Vb_new"]


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_a_training_step_graph_of_gradient_and_momentum_fits_a_linear_model(backend: str) -> None:
    """One ONNX graph is one training step: the loss, its Gradient with respect to W and b, and Momentum's
    update of both; fed its own outputs, Loam's module follows the same schedule computed in numpy (the
    gradient of the mean squared error by hand, Momentum's formula) and fits the data."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["pred"]),
        helper.make_node("Sub", ["pred", "t"], ["err"]),
        helper.make_node("Mul", ["err", "err"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
        gradient(["W", "b"], "loss", ["dW", "db"], zs=("x", "t")),
        helper.make_node("Momentum", ["R", "T", "W", "b", "dW", "db", "VW", "Vb"], UPDATED, domain=TRAINING,
                         alpha=0.9, beta=1.0, mode="standard", norm_coefficient=0.0),
    ]  # fmt: skip
    shapes = {"x": [16, 3], "t": [16, 2], "W": [3, 2], "b": [2], "VW": [3, 2], "Vb": [2]}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    inputs += [helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
               helper.make_tensor_value_info("T", TensorProto.INT64, [])]  # fmt: skip
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n.removesuffix("_new")]) for n in UPDATED]
    graph = helper.make_graph(nodes, "step", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TRAINING, 1)])
    built = build_for(model, backend=backend)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 3)).astype(np.float32)
    t = (x @ np.array([[1.0, -2.0], [0.5, 0.0], [0.0, 3.0]]) + np.array([0.3, -0.1])).astype(np.float32)
    state = {n: np.zeros(shapes[n], np.float32) for n in ("W", "b", "VW", "Vb")}
    mirror = {n: v.astype(np.float64) for n, v in state.items()}
    losses = []
    for step in range(60):
        loss, *new = run_built(built, {"x": x, "t": t, "R": np.array(0.05, np.float32), "T": np.array(step), **state})
        state = dict(zip(("W", "b", "VW", "Vb"), new, strict=True))
        losses.append(float(loss))
        err = x @ mirror["W"] + mirror["b"] - t  # the same step in float64 numpy
        dw, db = 2 * x.T @ err / err.size, 2 * err.sum(0) / err.size
        for p, v, d in (("W", "VW", dw), ("b", "Vb", db)):
            mirror[v] = 0.9 * mirror[v] + d
            mirror[p] = mirror[p] - 0.05 * mirror[v]
        for n in state:
            np.testing.assert_allclose(state[n], mirror[n], rtol=1e-3, atol=1e-4, err_msg=f"step {step}: {n}")
    assert losses[-1] < 1e-2 * losses[0], losses


def test_a_gradient_through_a_layer_norms_mean_output_is_refused_rather_than_dropped() -> None:
    """LayerNormalization's Mean output read downstream: its clause reads Y's gradient only, so the
    build stops instead of leaving the Mean's share out."""
    nodes = [
        helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean"], name="ln"),
        helper.make_node("ReduceSum", ["mean"], ["m"], keepdims=0),
        helper.make_node("ReduceSum", ["y"], ["t"], keepdims=0),
        helper.make_node("Add", ["m", "t"], ["loss"]),
        gradient(["x"], "loss", ["dx"], zs=("s",), name="g"),
    ]
    with pytest.raises(LoamError, match=r"kernel\.normalize 'ln': a gradient reaches its later results"):
        build_for(model_of(nodes, {"x": [2, 3], "s": [3]}, {"dx": [2, 3]}))
