"""ONNX's optimizers (Adagrad, Momentum, Adam of ai.onnx.preview.training) against the formulas ONNX's
node cases are computed by (`onnx.backend.test.case.node.*.apply_*`, numpy in the inputs' precision):
update counts 0 (no bias correction, Momentum's first step) and past it, two tensors of their own
shapes, float32 and float64, numpy and WGSL.  Malformed nodes are refused by name."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.backend.test.case.node.adagrad import apply_adagrad
from onnx.backend.test.case.node.adam import apply_adam
from onnx.backend.test.case.node.momentum import apply_momentum, apply_nesterov

from loam.core.errors import LoamError
from loam.testing import assert_same, build_for, run_built

DOMAIN = "ai.onnx.preview.training"
SHAPES = [(3, 4), (5,)]
STATES = {"Adagrad": ["H"], "Momentum": ["V"], "Adam": ["V", "H"]}
ATTRIBUTES: dict[str, list[dict[str, object]]] = {
    "Adagrad": [{}, {"decay_factor": 0.1, "epsilon": 1e-6, "norm_coefficient": 0.01}],
    "Momentum": [
        {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.01},
        {"alpha": 0.8, "beta": 1.0, "mode": "nesterov", "norm_coefficient": 0.0},
    ],
    "Adam": [{}, {"alpha": 0.8, "beta": 0.7, "epsilon": 1e-6, "norm_coefficient": 0.01, "norm_coefficient_post": 0.1}],
}


def optimizer_model(op: str, attributes: Mapping[str, object], elem: int = TensorProto.FLOAT) -> onnx.ModelProto:
    groups = ["X", "G", *STATES[op]]
    names = [f"{g}{i}" for g in groups for i in range(len(SHAPES))]
    outputs = [f"{g}{i}_new" for g in ["X", *STATES[op]] for i in range(len(SHAPES))]
    node = helper.make_node(op, ["R", "T", *names], outputs, domain=DOMAIN, **attributes)  # type: ignore[arg-type]
    shapes = {f"{g}{i}": list(s) for g in groups for i, s in enumerate(SHAPES)}
    graph = helper.make_graph(
        [node],
        op.lower(),
        [
            helper.make_tensor_value_info("R", elem, []),
            helper.make_tensor_value_info("T", TensorProto.INT64, []),
            *(helper.make_tensor_value_info(n, elem, shapes[n]) for n in names),
        ],
        [helper.make_tensor_value_info(n, elem, shapes[n.removesuffix("_new")]) for n in outputs],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def expected(op: str, attributes: Mapping[str, object], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Each tensor's new X, then its new state, by ONNX's formulas with the attributes as the model stores
    them (float32)."""
    a = {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in attributes.items()}
    r, t = feeds["R"], feeds["T"]
    per: list[tuple[np.ndarray, ...]] = []
    for i in range(len(SHAPES)):
        x, g, *state = (feeds[f"{n}{i}"] for n in ["X", "G", *STATES[op]])
        if op == "Adagrad":
            args = (a.get("norm_coefficient", 0.0), a.get("epsilon", 0.0), a.get("decay_factor", 0.0))
            per.append(apply_adagrad(r, t, x, g, *state, *args))
        elif op == "Momentum":
            apply = apply_momentum if a["mode"] == "standard" else apply_nesterov
            per.append(apply(r, t, x, g, *state, a["norm_coefficient"], a["alpha"], a["beta"]))
        else:
            defaults = {
                "norm_coefficient": 0.0,
                "norm_coefficient_post": 0.0,
                "alpha": 0.9,
                "beta": 0.999,
                "epsilon": 0.0,
            }
            coefficients = [a.get(k, float(np.float32(d))) for k, d in defaults.items()]
            per.append(apply_adam(r, t, x, g, *state, *coefficients))
    return [np.asarray(p[k], x.dtype) for k in range(len(per[0])) for p in per]


def feeds_for(op: str, t: int, dtype: type, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {"R": np.array(0.05, dtype), "T": np.array(t, np.int64)}
    for g in ["X", "G", *STATES[op]]:
        for i, s in enumerate(SHAPES):
            value = rng.standard_normal(s)
            feeds[f"{g}{i}"] = (np.abs(value) if g == "H" else value).astype(dtype)  # H is a sum of squares
    return feeds


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
@pytest.mark.parametrize("t", [0, 1, 7])
@pytest.mark.parametrize("case", range(2))
@pytest.mark.parametrize("op", sorted(STATES))
def test_optimizer_matches_onnx_reference(op: str, case: int, t: int, backend: str) -> None:
    dtypes = [np.float32] if backend == "wgsl" else [np.float32, np.float64]
    for dtype in dtypes:
        model = optimizer_model(
            op, ATTRIBUTES[op][case], TensorProto.FLOAT if dtype is np.float32 else TensorProto.DOUBLE
        )
        feeds = feeds_for(op, t, dtype, seed=case * 10 + t)
        want = expected(op, ATTRIBUTES[op][case], feeds)
        got = run_built(build_for(model, backend=backend), feeds)
        tol = 1e-5 if dtype is np.float32 else 1e-12
        assert_same(got, want, rtol=tol, atol=tol)


def test_a_training_step_with_momentum_lowers_the_loss() -> None:
    """Momentum fed its own outputs for 100 steps minimises a quadratic: the optimizer as a training loop uses it."""
    model = optimizer_model("Momentum", ATTRIBUTES["Momentum"][0])
    module = build_for(model)
    feeds = feeds_for("Momentum", 0, np.float32, seed=3)
    target = [np.full(s, 2.0, np.float32) for s in SHAPES]
    losses = []
    for t in range(100):
        xs = [feeds[f"X{i}"] for i in range(len(SHAPES))]
        losses.append(sum(float(((x - c) ** 2).sum()) for x, c in zip(xs, target, strict=True)))
        feeds.update(
            {f"G{i}": 2 * (x - c) for i, (x, c) in enumerate(zip(xs, target, strict=True))} | {"T": np.array(t)}
        )
        out = run_built(module, feeds)
        feeds.update(
            {f"X{i}": out[i] for i in range(len(SHAPES))} | {f"V{i}": out[len(SHAPES) + i] for i in range(len(SHAPES))}
        )
    assert losses[-1] < 1e-3 * losses[0], losses


def test_an_optimizer_node_with_a_misshapen_state_is_refused() -> None:
    model = optimizer_model("Adam", {})
    h1 = next(i for i in model.graph.input if i.name == "H1")
    h1.type.tensor_type.shape.dim[0].dim_value = 4
    with pytest.raises(LoamError, match=r"Adam node .*input 9 has extents \[4\]; X_2 has \[5\]"):
        build_for(model)


def test_an_optimizer_node_with_an_input_short_is_refused() -> None:
    model = optimizer_model("Adagrad", {})
    del model.graph.node[0].input[-1]
    with pytest.raises(
        LoamError, match=r"Adagrad node .*takes R, T and 3 inputs per tensor .* got 7 inputs and 4 outputs"
    ):
        build_for(model)


def test_momentum_without_its_required_attributes_is_refused() -> None:
    model = optimizer_model("Momentum", {"alpha": 0.9, "beta": 0.5, "norm_coefficient": 0.0})
    with pytest.raises(LoamError, match=r"Momentum node .*has no 'mode' attribute"):
        build_for(model)
