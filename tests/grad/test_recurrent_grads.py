"""The grad clauses of RNN, GRU and LSTM (`loam.grad.recurrent`) equal central finite differences in float64.

Each case is one recurrent node over hypothesis-drawn shapes and attributes (direction, layout, activations
with their alphas and betas, clip, GRU's linear_before_reset, LSTM's input_forget, which optional operands
are given, sequence_lens); the loss reads every result (Y, Y_h, and Y_c for an LSTM), or one of them, and
the gradient is asked of every float operand (`tests.grad.finite_differences`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from loam.core.errors import UnsupportedError
from loam.ops.recurrent import ACTIVATIONS, ALPHA_DEFAULTS, BETA_DEFAULTS
from loam.testing import build_for, run_built
from tests.grad import finite_differences
from tests.grad.finite_differences import (
    SETTINGS,
    Case,
    central_differences,
    check,
    compare_on_wgsl,
    fd_test,
    feeds_for,
    model_of,
)

KINDS: dict[str, tuple[int, tuple[str, ...]]] = {
    "RNN": (1, ("Tanh",)),
    "GRU": (3, ("Sigmoid", "Tanh")),
    "LSTM": (4, ("Sigmoid", "Tanh", "Tanh")),
}
"""Each operator's gate blocks in W's rows and its default activations per direction."""
OPTIONAL = {"RNN": ("B", "sequence_lens", "initial_h"), "GRU": ("B", "sequence_lens", "initial_h")}
OPTIONAL["LSTM"] = (*OPTIONAL["RNN"], "initial_c", "P")


def recurrent_case(draw: st.DrawFn, op: str, activation: str | None = None) -> Case:
    """`op` over drawn extents (sequence 1-4, batch 1-2, hidden 1-3, input 1-3) and attributes; every
    activation `activation` where given, else each drawn (its default among them)."""
    gates, defaults = KINDS[op]
    seq, batch = draw(st.integers(1, 4)), draw(st.integers(1, 2))
    hidden, size = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    dirs = 2 if direction == "bidirectional" else 1
    layout = draw(st.integers(0, 1))
    names = [activation or draw(st.sampled_from([default, *ACTIVATIONS])) for default in defaults * dirs]
    attrs: dict[str, object] = {"hidden_size": hidden, "direction": direction, "layout": layout, "activations": names}
    alphas = [draw(st.sampled_from([0.3, 0.8, 1.5])) for n in names if n in ALPHA_DEFAULTS]
    betas = [draw(st.sampled_from([-0.2, 0.4])) for n in names if n in BETA_DEFAULTS]
    attrs |= {"activation_alpha": alphas} if alphas else {}
    attrs |= {"activation_beta": betas} if betas else {}
    clip = draw(st.sampled_from([None, 0.5, 3.0]))
    attrs |= {"clip": clip} if clip else {}
    if op == "GRU":
        attrs["linear_before_reset"] = draw(st.integers(0, 1))
    if op == "LSTM":
        attrs["input_forget"] = draw(st.integers(0, 1))
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    shapes = {
        "X": (batch, seq, size) if layout else (seq, batch, size),
        "W": (dirs, gates * hidden, size),
        "R": (dirs, gates * hidden, hidden),
    }
    optional = {
        "B": (dirs, 2 * gates * hidden),
        "initial_h": state,
        "initial_c": state,
        "P": (dirs, 3 * hidden),
    }
    given_names = [n for n in OPTIONAL[op] if draw(st.booleans())]
    shapes |= {n: optional[n] for n in given_names if n != "sequence_lens"}
    consts = {}
    if "sequence_lens" in given_names:  # 0 among them: an entry with no step has zero final states
        lens = draw(st.lists(st.integers(0, seq), min_size=batch, max_size=batch))
        consts["sequence_lens"] = np.array(lens, np.int32)
    order = ["X", "W", "R", *(n if n in given_names else "" for n in OPTIONAL[op])]
    while not order[-1]:
        order.pop()
    outs = [(batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden), state]
    outs += [state] if op == "LSTM" else []
    return Case(op, shapes, outs, attrs, consts, order=tuple(order))


def _rnn(draw: st.DrawFn) -> Case:
    """RNN: every direction and layout, drawn activations and clip, optional B, sequence_lens, initial_h."""
    return recurrent_case(draw, "RNN")


def _gru(draw: st.DrawFn) -> Case:
    """GRU: as RNN, and linear_before_reset 0 and 1."""
    return recurrent_case(draw, "GRU")


def _lstm(draw: st.DrawFn) -> Case:
    """LSTM: as RNN, and input_forget, initial_c and the peepholes P."""
    return recurrent_case(draw, "LSTM")


test_rnn = fd_test(_rnn, 12)
test_gru = fd_test(_gru, 16)
test_lstm = fd_test(_lstm, 16)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@settings(max_examples=2, deadline=None, derandomize=True)
@given(data=st.data())
def test_every_activation(activation: str, data: st.DataObject) -> None:
    """Each of ONNX's recurrent activations (with its alpha and beta) in every slot of a drawn operator."""
    op = data.draw(st.sampled_from(sorted(KINDS)))
    check(recurrent_case(data.draw, op, activation), data.draw(st.integers(0, 2**16)))


def _reading_only(model: onnx.ModelProto, read: set[int]) -> onnx.ModelProto:
    """`model` (`model_of`'s) with its loss reading only the recurrent node's results `read`; the others
    are left unnamed, so no gradient reaches them."""
    graph = model.graph
    dropped = {f"{prefix}{k}" for k in range(3) if k not in read for prefix in ("y", "r", "yr", "s")}
    nodes = [n for n in graph.node if not (n.op_type in ("Mul", "ReduceSum") and set(n.input) & dropped)]
    for n in nodes:
        if n.op_type in KINDS:  # an output left unnamed: the node still gives it, nothing reads it
            outputs = ["" if name in dropped else name for name in n.output]
            del n.output[:]
            n.output.extend(outputs)
        else:
            inputs = [name for name in n.input if name not in dropped]
            del n.input[:]
            n.input.extend(inputs)
        for attr in n.attribute:
            if attr.name == "zs":
                zs = [z for z in attr.strings if z.decode() not in dropped]
                del attr.strings[:]
                attr.strings.extend(zs)
    del graph.node[:]
    graph.node.extend(nodes)
    inputs = [i for i in graph.input if i.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)
    return model


@SETTINGS
@given(data=st.data())
def test_a_gradient_from_one_result(data: st.DataObject) -> None:
    """The loss reads one result alone (Y, Y_h or Y_c): the others get no adjoint."""
    op = data.draw(st.sampled_from(sorted(KINDS)))
    case = recurrent_case(data.draw, op)
    read = data.draw(st.integers(0, len(case.outs) - 1))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(finite_differences, "model_of", lambda c: _reading_only(model_of(c), {read}))
        check(case, data.draw(st.integers(0, 2**16)))


def _with_symbolic(model: onnx.ModelProto, axes: dict[str, int], name: str) -> onnx.ModelProto:
    """`model` with the extent of each value in `axes` at that axis given as the symbol `name`."""
    for value in (*model.graph.input, *model.graph.output):
        if value.name in axes:
            value.type.tensor_type.shape.dim[axes[value.name]].dim_param = name
    return model


def test_a_symbolic_batch_gives_the_same_gradients() -> None:
    """The batch extent only the run knows: the gradients equal those of the static build."""
    case = Case("LSTM", {"X": (3, 2, 2), "W": (2, 8, 2), "R": (2, 8, 2), "initial_h": (2, 2, 2)},
                [(3, 2, 2, 2), (2, 2, 2), (2, 2, 2)], {"hidden_size": 2, "direction": "bidirectional"},
                order=("X", "W", "R", "", "", "initial_h"))  # fmt: skip
    batch_axis = {"X": 1, "d_X": 1, "initial_h": 1, "d_initial_h": 1, "r0": 2, "r1": 1, "r2": 1}
    feeds = feeds_for(case, 7)
    want = run_built(build_for(model_of(case)), feeds)
    got = run_built(build_for(_with_symbolic(model_of(case), batch_axis, "N")), feeds)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"output {k}")


@pytest.mark.parametrize("op", sorted(KINDS))
def test_a_symbolic_sequence_length_is_refused(op: str) -> None:
    """The clause unrolls the sequence: a length only the run knows is refused, naming the op and its node."""
    gates, _ = KINDS[op]
    outs: Sequence[tuple[int, ...]] = [(3, 1, 2, 2), (1, 2, 2), (1, 2, 2)][: 3 if op == "LSTM" else 2]
    case = Case(op, {"X": (3, 2, 2), "W": (1, 2 * gates, 2), "R": (1, 2 * gates, 2)}, list(outs), {"hidden_size": 2})
    model = _with_symbolic(model_of(case), {"X": 0, "d_X": 0, "r0": 0}, "S")
    with pytest.raises(UnsupportedError, match=rf"kernel\.{op.lower()} 'op': its grad clause unrolls the sequence"):
        build_for(model)


@pytest.mark.parametrize("op", sorted(KINDS))
@settings(max_examples=2, deadline=None, derandomize=True)
@given(data=st.data())
def test_the_wgsl_module_computes_the_numpy_modules_gradients(op: str, data: st.DataObject) -> None:
    """The same clauses on the device: float32 gradients within 1e-4 of the numpy module's."""
    pytest.importorskip("wgpu")
    case = recurrent_case(data.draw, op)
    compare_on_wgsl(case, feeds_for(case, data.draw(st.integers(0, 2**16)), np.float32))


def test_the_differentiate_pass_computes_the_steps_once() -> None:
    """With `--grad`, the unrolled steps take the LSTM kernel's place in the forward (its values kept for the
    backward, not computed twice); every weight's gradient equals central finite differences of forward."""
    from loam.driver.draft import draft_layout
    from loam.driver.pipeline import build

    rng = np.random.default_rng(3)
    steps, batch, size, hidden = 3, 2, 2, 2
    values = {"W": rng.standard_normal((1, 4 * hidden, size)), "R": rng.standard_normal((1, 4 * hidden, hidden)),
              "B": rng.standard_normal((1, 8 * hidden))}  # fmt: skip
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["", "y_h"], name="lstm", hidden_size=hidden)
    graph = helper.make_graph(
        [node],
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [steps, batch, size])],
        [helper.make_tensor_value_info("y_h", TensorProto.DOUBLE, [1, batch, hidden])],
        [numpy_helper.from_array(v, n) for n, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    built = build(model, options=draft_layout(model).options(None), grad=())
    assert "kernel.lstm" not in built.report  # the steps stand in its place
    # The forward's steps are named `lstm.steps`; steps run again in the backward would be `lstm.grad` products.
    lines = built.source.splitlines()
    assert any("matmul" in line and line.endswith("# lstm.steps") for line in lines)
    assert not any("matmul" in line and line.endswith("# lstm.grad") for line in lines)
    module = built.module
    x, g = rng.standard_normal((steps, batch, size)), rng.standard_normal((1, batch, hidden))
    _, *grads = module.forward(module.Weights(**values), x, g)
    for name, grad in zip(("W", "R", "B"), grads, strict=True):
        numeric = central_differences(lambda moved: float(np.sum(module.forward(module.Weights(**moved), x, g)[0] * g)),
                                      values, name)  # fmt: skip
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6, err_msg=f"d loss / d {name}")
