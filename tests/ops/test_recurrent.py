"""RNN, GRU and LSTM (`loam/ops/recurrent.py`) beyond the conformance cases: run-time extents, layout 1
(which onnxruntime refuses), f64 (which it has no kernel for), folding, a bad length at run time, and
the build's refusals.

The conformance suites hold the numbers: ONNX's node cases, and the operators suite against
onnxruntime over directions, lengths, initial states, activations, clip and each operator's own
attributes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from loam.core.errors import LoamError, ShapeError, UnsupportedError
from loam.testing import build_for, run_built, run_onnxruntime

RNG = np.random.default_rng(7)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
OPS = list(GATES)


def _operands(op: str, seq: int, batch: int, dirs: int, *, layout: int = 0, dtype: Any = np.float32) -> dict[str, Any]:
    """Random X, W, R, B, sequence_lens, initial_h (and initial_c, P) with 4 inputs and 3 hidden units."""
    rows, state = GATES[op] * 3, (batch, dirs, 3) if layout else (dirs, batch, 3)
    values = {
        "x": RNG.standard_normal((batch, seq, 4) if layout else (seq, batch, 4)),
        "w": RNG.standard_normal((dirs, rows, 4)),
        "r": RNG.standard_normal((dirs, rows, 3)),
        "b": RNG.standard_normal((dirs, 2 * rows)),
        "lens": RNG.integers(0, seq + 1, batch).astype(np.int32),
        "h0": RNG.standard_normal(state),
    }
    if op == "LSTM":
        values |= {"c0": RNG.standard_normal(state), "p": RNG.standard_normal((dirs, 9))}
    return {k: v if k == "lens" else v.astype(dtype) for k, v in values.items()}


def _model(
    op: str,
    values: dict[str, Any],
    *,
    dims: dict[str, list[int | str]] | None = None,
    known: bool = False,
    elem: int = TensorProto.FLOAT,
    **attrs: Any,
) -> onnx.ModelProto:
    """A one-node model over `values` (graph inputs, or Constants when `known`) naming every output;
    `dims` overrides an input's extents (symbols)."""
    outs = ["y", "y_h", "y_c"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, list(values), outs, **{"hidden_size": 3, **attrs})
    inputs, constants = [], []
    for name, v in values.items():
        t = TensorProto.INT32 if name == "lens" else elem
        if known:  # a Constant, as an export carries a value the build knows (float initializers are weights)
            constants.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(v, name)))
        else:
            inputs.append(helper.make_tensor_value_info(name, t, (dims or {}).get(name, list(v.shape))))
    outputs = [helper.make_tensor_value_info(o, elem, None) for o in outs]
    graph = helper.make_graph([*constants, node], op.lower(), inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return onnx.shape_inference.infer_shapes(model)


def _close(got: list[np.ndarray], want: list[np.ndarray], rtol: float = 1e-4) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-5)


@pytest.mark.parametrize("op", OPS)
def test_a_sequence_and_batch_known_only_at_run_time_match_onnxruntime(op: str) -> None:
    values = _operands(op, 4, 3, 2)
    dims = {"x": ["S", "N", 4], "lens": ["N"], "h0": [2, "N", 3], "c0": [2, "N", 3]}
    model = _model(op, values, dims=dims, direction="bidirectional")
    built = build_for(model)
    for seq, batch in ((1, 1), (5, 2)):
        feeds = _operands(op, seq, batch, 2)
        _close(run_built(built, feeds), run_onnxruntime(model, feeds))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("direction", ["reverse", "bidirectional"])
def test_layout_1_computes_what_layout_0_does_with_the_batch_first(op: str, direction: str) -> None:
    dirs = 2 if direction == "bidirectional" else 1
    batch_first = _operands(op, 4, 3, dirs, layout=1)
    built = build_for(_model(op, batch_first, direction=direction, layout=1))
    seq_first = {k: v if v.ndim < 3 or k == "w" or k == "r" else v.swapaxes(0, 1) for k, v in batch_first.items()}
    want = run_onnxruntime(_model(op, seq_first, direction=direction), seq_first)  # onnxruntime has no layout 1
    want = [want[0].transpose(2, 0, 1, 3), *(s.swapaxes(0, 1) for s in want[1:])]
    _close(run_built(built, batch_first), want)


@pytest.mark.parametrize("op", OPS)
def test_f64_computes_in_f64(op: str) -> None:
    values = _operands(op, 3, 2, 1, dtype=np.float64)
    got = run_built(build_for(_model(op, values, elem=TensorProto.DOUBLE)), values)
    assert all(v.dtype == np.float64 for v in got)
    narrow = {k: v if k == "lens" else v.astype(np.float32) for k, v in values.items()}
    _close(got, run_onnxruntime(_model(op, narrow), narrow), rtol=1e-3)  # onnxruntime: f32 only


@pytest.mark.parametrize("op", OPS)
def test_known_operands_fold_at_build_time(op: str) -> None:
    values = _operands(op, 3, 2, 2)
    model = _model(op, values, known=True, direction="bidirectional")
    built = build_for(model)
    assert f"kernel_{op.lower()}(" not in built.source
    _close(run_built(built, {}), run_onnxruntime(model, {}))


def test_a_length_outside_the_sequence_is_refused_at_run_time() -> None:
    values = _operands("GRU", 3, 2, 1)
    built = build_for(_model("GRU", values))
    values["lens"][1] = 4
    with pytest.raises(built.module.DataError, match=r"GRU: sequence_lens\[1\] is 4; each length must lie in \[0, 3\]"):
        run_built(built, values)


REFUSED: list[tuple[str, dict[str, Any], type[LoamError], str]] = [
    ("RNN", {"activations": ["ThresholdedRelu"]}, UnsupportedError, "ONNX's default is 1.0, onnxruntime's is 0.0"),
    (
        "GRU",
        {"activations": ["Sigmoid", "ScaledTanh"], "activation_alpha": [2.0]},
        UnsupportedError,
        "activation_beta leaves activation ScaledTanh without a value",
    ),
    ("LSTM", {"activations": ["Sigmoid", "Affine", "Tanh"]}, UnsupportedError, "leaves activation Affine"),
    ("RNN", {"activations": ["tanh"]}, UnsupportedError, "activation 'tanh' is not one of Relu, Tanh"),
    ("GRU", {"activations": ["Sigmoid"]}, ShapeError, "activations names 1 function"),
    ("LSTM", {"clip": 0.0}, UnsupportedError, "clip 0.0 is not a positive threshold"),
    ("RNN", {"direction": "sideways"}, ShapeError, "direction 'sideways' is not one of"),
    ("GRU", {"hidden_size": 5}, ShapeError, "R's extent 2 against hidden_size: extents 3 and 5 differ"),
]


@pytest.mark.parametrize(("op", "attrs", "error", "message"), REFUSED)
def test_what_onnxruntime_and_onnx_would_read_differently_is_refused(
    op: str, attrs: dict[str, Any], error: type[LoamError], message: str
) -> None:
    values = _operands(op, 3, 2, 1)
    model = _model(op, values, **attrs)
    with pytest.raises(error, match=message):
        build_for(model)


def test_lower_case_activations_are_read_for_gru_as_onnxruntime_does() -> None:
    values = _operands("GRU", 3, 2, 1)
    model = _model("GRU", values, activations=["sigmoid", "tanh"])
    _close(run_built(build_for(model), values), run_onnxruntime(model, values))
