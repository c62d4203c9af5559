"""The finite-difference harness every grad clause test uses: one ONNX operator node over float64
operands, loss = sum of y * r over its outputs for a random r, and ONNX's Gradient node of the loss with
respect to the operands, so one module computes the loss and its gradients (the walk is the same `Reverse`
the `differentiate` pass runs).  The oracle is (loss(x + h e_i) - loss(x - h e_i)) / 2h from the module's
own forward (which the conformance suite holds to onnxruntime), one element at a time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from loam.testing import build_for, run_built

TRAINING = "ai.onnx.preview.training"
H = 1e-6


@dataclass
class Case:
    """One operator node `op` over the float64 inputs `shapes` (all differentiated), its outputs of the
    shapes `outs` (the loss reads every one); `consts` are int64 initializers it reads (axes, pads, ...)."""

    op: str
    shapes: dict[str, tuple[int, ...]]
    outs: list[tuple[int, ...]]
    attrs: dict[str, object] = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    positive: bool = False  # operands drawn in [0.5, 2] (a log's domain) rather than from N(0, 1)
    unread: int = 0  # outputs after those in `outs` that the loss does not read (TopK's indices)
    order: tuple[str, ...] = ()  # the node's inputs in order, where not `shapes` then `consts`
    opset: int = 18  # the default domain's version the model imports
    zeros: int = 0  # elements of each operand set to exactly 0 (a product's derivative there), at drawn places


def model_of(case: Case, elem: int = TensorProto.DOUBLE) -> onnx.ModelProto:
    inputs = list(case.order) or [*case.shapes, *case.consts]
    ys = [f"y{k}" for k in range(len(case.outs))]
    unread = [f"unread{k}" for k in range(case.unread)]
    nodes = [helper.make_node(case.op, inputs, [*ys, *unread], name="op", **case.attrs)]  # type: ignore[arg-type]
    terms = []
    for k, y in enumerate(ys):
        nodes += [helper.make_node("Mul", [y, f"r{k}"], [f"yr{k}"]),
                  helper.make_node("ReduceSum", [f"yr{k}"], [f"s{k}"], keepdims=0)]  # fmt: skip
        terms.append(f"s{k}")
    nodes.append(helper.make_node("Sum", terms, ["loss"]))
    diff = list(case.shapes)
    zs = [f"r{k}" for k in range(len(case.outs))]
    nodes.append(helper.make_node("Gradient", [*diff, *zs], [f"d_{n}" for n in diff], domain=TRAINING,
                                  xs=diff, zs=zs, y="loss"))  # fmt: skip
    value_infos = [helper.make_tensor_value_info(n, elem, s) for n, s in case.shapes.items()]
    value_infos += [helper.make_tensor_value_info(f"r{k}", elem, s) for k, s in enumerate(case.outs)]
    outputs = [helper.make_tensor_value_info("loss", elem, [])]
    outputs += [helper.make_tensor_value_info(f"d_{n}", elem, case.shapes[n]) for n in diff]
    initializers = [onnx.numpy_helper.from_array(v, n) for n, v in case.consts.items()]
    graph = helper.make_graph(nodes, case.op.lower(), value_infos, outputs, initializers)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", case.opset), helper.make_opsetid(TRAINING, 1)]
    )


def feeds_for(case: Case, seed: int, dtype: type = np.float64) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {n: rng.uniform(0.5, 2, s) if case.positive else rng.standard_normal(s) for n, s in case.shapes.items()}
    for name in list(feeds)[: len(case.shapes)]:
        flat = feeds[name].reshape(-1)
        flat[rng.permutation(flat.size)[: case.zeros]] = 0.0
    feeds |= {f"r{k}": rng.standard_normal(s) for k, s in enumerate(case.outs)}
    return {n: v.astype(dtype) for n, v in feeds.items()}


def central_differences(
    loss: Callable[[dict[str, np.ndarray]], float], feeds: dict[str, np.ndarray], name: str
) -> np.ndarray:
    """d loss / d feeds[name] by central differences, (loss(x + h e_i) - loss(x - h e_i)) / 2h, element by element."""
    numeric = np.zeros_like(feeds[name])
    for index in np.ndindex(numeric.shape):
        values = []
        for sign in (1.0, -1.0):
            moved = dict(feeds)
            moved[name] = feeds[name].copy()
            moved[name][index] += sign * H
            values.append(loss(moved))
        numeric[index] = (values[0] - values[1]) / (2 * H)
    return numeric


def check(
    case: Case, seed: int, feeds: dict[str, np.ndarray] | None = None, model: onnx.ModelProto | None = None
) -> None:
    """The module's gradients of `case` (its model, or `model`) against central differences of its own loss;
    `feeds` replace drawn operands."""
    feeds = feeds_for(case, seed) | (feeds or {})
    run = functools.partial(run_built, build_for(model or model_of(case)))
    _, *grads = run(feeds)
    for name, grad in zip(case.shapes, grads, strict=True):
        numeric = central_differences(lambda moved: float(run(moved)[0]), feeds, name)
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6, err_msg=f"{case.op}: d loss / d {name}")


def compare_on_wgsl(case: Case, feeds: dict[str, np.ndarray], model: onnx.ModelProto | None = None) -> None:
    """`case` (or `model`, float32 `feeds`) built for WGSL computes the numpy module's loss and gradients, within
    1e-4 (the host computes only what has no WGSL kernel at all)."""
    model = model or model_of(case, TensorProto.FLOAT)
    want = run_built(build_for(model), feeds)
    got = run_built(build_for(model, backend="wgsl", fuse="dispatch", host_fallback=True), feeds)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{case.op}: output {k}")


dims = st.integers(1, 4)
SETTINGS = settings(max_examples=4, deadline=None, derandomize=True)


def fd_test(draw_case: Callable[[st.DrawFn], Case], examples: int = 4) -> Callable[[], None]:
    @settings(max_examples=examples, deadline=None, derandomize=True)
    @given(st.composite(draw_case)(), st.integers(0, 2**16))
    def test(case: Case, seed: int) -> None:
        check(case, seed)

    test.__doc__ = draw_case.__doc__
    return test
