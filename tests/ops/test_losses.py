"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (`loam/ops/losses.py`) beyond the conformance
cases: run-time extents, a bad target at run time, and the build's refusals.

The conformance suites hold the numbers (ONNX's node cases; the operators suite against onnxruntime
over every reduction, weight and ignore_index combination, f16, f64 and i32 targets).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.core.errors import ShapeError
from loam.testing import build_for, run_built, run_onnxruntime

RNG = np.random.default_rng(12)


def _loss_model(op: str, batch: int | str, *, outputs: int = 1, **attrs: object) -> onnx.ModelProto:
    """`op` over scores [batch, 5, 3] and i64 targets [batch, 3], no weight."""
    node = helper.make_node(op, ["x", "t"], ["loss", "log_prob"][:outputs], **attrs)
    reduced = [batch, 3] if attrs.get("reduction") == "none" else []
    graph = helper.make_graph(
        [node],
        "loss",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 5, 3]),
            helper.make_tensor_value_info("t", TensorProto.INT64, [batch, 3]),
        ],
        [
            helper.make_tensor_value_info("loss", TensorProto.FLOAT, reduced),
            helper.make_tensor_value_info("log_prob", TensorProto.FLOAT, [batch, 5, 3]),
        ][:outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_a_loss_over_a_batch_known_only_at_run_time_matches_onnxruntime(op: str, reduction: str) -> None:
    model = _loss_model(op, "N", reduction=reduction, ignore_index=-1)
    built = build_for(model)
    for batch in (1, 4):
        feeds = {"x": RNG.standard_normal((batch, 5, 3)).astype(np.float32), "t": RNG.integers(0, 5, (batch, 3))}
        feeds["t"][0, 1] = -1  # ignored: counts for nothing, in the mean's denominator too
        got, want = run_built(built, feeds), run_onnxruntime(model, feeds)
        assert got[0].shape == want[0].shape
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_the_log_probabilities_come_out_as_the_second_output() -> None:
    model = _loss_model("SoftmaxCrossEntropyLoss", 2, outputs=2, reduction="sum")
    feeds = {"x": RNG.standard_normal((2, 5, 3)).astype(np.float32), "t": RNG.integers(0, 5, (2, 3))}
    got, want = run_built(build_for(model), feeds), run_onnxruntime(model, feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


WHY = {5: "5 is outside \\[0, 5\\) and is not ignore_index -1", -3: "-3 is outside"}


@pytest.mark.parametrize("target", WHY)
def test_a_target_outside_the_classes_is_refused_naming_it_not_wrapped(target: int) -> None:
    built = build_for(_loss_model("NegativeLogLikelihoodLoss", 2, reduction="sum", ignore_index=-1))
    t = np.zeros((2, 3), np.int64)
    t[1, 2] = target
    with pytest.raises(built.module.DataError, match=f"NegativeLogLikelihoodLoss: target value {WHY[target]}"):
        run_built(built, {"x": np.zeros((2, 5, 3), np.float32), "t": t})


def test_targets_whose_extents_disagree_with_the_scores_stop_the_build() -> None:
    model = _loss_model("NegativeLogLikelihoodLoss", 2)
    model.graph.input[1].type.tensor_type.shape.dim[1].dim_value = 4
    with pytest.raises(ShapeError, match="they must agree but for the class axis"):
        build_for(model)
