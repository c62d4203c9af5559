"""RNN, GRU and LSTM on the device (`loam/backends/wgsl_kernels/recurrent.py`) against onnxruntime.

Nodes drawn with varied attributes (directions, activations with alpha and beta, clip,
sequence_lens with entries of 0, initial states, peepholes, linear_before_reset, input_forget,
layout 1, any subset of the outputs named), built with `--backend wgsl` and run on the machine's
WebGPU adapter; one case is big enough that a step spans several workgroups, and one binds its
sequence length and batch only at run time.  onnxruntime has no layout 1: such a node is checked
against onnxruntime's layout-0 node over the same values with the batch moved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.testing import assert_same, build_for, run_built, run_onnxruntime

pytest.importorskip("wgpu")

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
PER_DIRECTION = {"RNN": 1, "GRU": 2, "LSTM": 3}
OPTIONAL = {"RNN": ("b", "lens", "h0"), "GRU": ("b", "lens", "h0"), "LSTM": ("b", "lens", "h0", "c0", "p")}
ACTIVATIONS = (
    "Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu",
    "Softsign", "Softplus",
)  # fmt: skip
BOUNDED = ("Sigmoid", "HardSigmoid", "Softsign", "Tanh")
READS_ALPHA = ("Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu")
READS_BETA = ("Affine", "ScaledTanh", "HardSigmoid")


@dataclass
class Node:
    """One recurrent node: its operator, extents, attributes, optional operands and named outputs."""

    op: str
    seq: int
    batch: int
    size: int
    hidden: int
    direction: str = "forward"
    layout: int = 0
    given: tuple[str, ...] = ()
    named: tuple[int, ...] = (0, 1)
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def dirs(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    def values(self, rng: np.random.Generator, seq: int | None = None, batch: int | None = None) -> dict[str, Any]:
        """Random operands (weights scaled so that the states stay in a useful range)."""
        seq, batch = seq or self.seq, batch or self.batch
        rows, d, h = GATES[self.op] * self.hidden, self.dirs, self.hidden
        state = (batch, d, h) if self.layout else (d, batch, h)
        scale = 1.0 / np.sqrt(self.size + h)
        every = {
            "x": rng.standard_normal((batch, seq, self.size) if self.layout else (seq, batch, self.size)),
            "w": rng.standard_normal((d, rows, self.size)) * 2 * scale,
            "r": rng.standard_normal((d, rows, h)) * 2 * scale,
            "b": rng.standard_normal((d, 2 * rows)) * 0.5,
            "lens": rng.integers(0, seq + 1, batch).astype(np.int32),
            "h0": rng.standard_normal(state),
            "c0": rng.standard_normal(state),
            "p": rng.standard_normal((d, 3 * h)),
        }
        return {
            k: v if k == "lens" else v.astype(np.float32) for k, v in every.items() if k in ("x", "w", "r", *self.given)
        }

    def model(self, layout: int | None = None, dims: dict[str, list[Any]] | None = None) -> onnx.ModelProto:
        """The one-node model (in `layout`, default the node's own), outputs not in `named` left unnamed."""
        layout = self.layout if layout is None else layout
        d, h = self.dirs, self.hidden
        state = [self.batch, d, h] if layout else [d, self.batch, h]
        shapes = {
            "x": [self.batch, self.seq, self.size] if layout else [self.seq, self.batch, self.size],
            "w": [d, GATES[self.op] * h, self.size],
            "r": [d, GATES[self.op] * h, h],
            "b": [d, 2 * GATES[self.op] * h],
            "lens": [self.batch],
            "h0": state,
            "c0": state,
            "p": [d, 3 * h],
        }
        shapes.update(dims or {})
        names = [n for n in OPTIONAL[self.op] if n in self.given]
        last = max((OPTIONAL[self.op].index(n) for n in names), default=-1)
        inputs = ["x", "w", "r"] + [n if n in self.given else "" for n in OPTIONAL[self.op][: last + 1]]
        outs = ["y", "y_h", "y_c"][: 3 if self.op == "LSTM" else 2]
        outputs = [o if k in self.named else "" for k, o in enumerate(outs)]
        while outputs[-1] == "":
            outputs.pop()
        attrs = {"hidden_size": h, "direction": self.direction, **self.attrs}
        if layout:
            attrs["layout"] = 1
        node = helper.make_node(self.op, inputs, outputs, **attrs)
        infos = [
            helper.make_tensor_value_info(n, TensorProto.INT32 if n == "lens" else TensorProto.FLOAT, shapes[n])
            for n in ["x", "w", "r", *names]
        ]
        outs_info = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o]
        graph = helper.make_graph([node], self.op.lower(), infos, outs_info)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def draw(rng: np.random.Generator, op: str) -> Node:
    """A node of `op` with attributes drawn: direction, layout, activations (alpha and beta given to
    those that read them), clip, the optional operands, the operator's flag, the outputs named."""
    direction = str(rng.choice(["forward", "reverse", "bidirectional"]))
    dirs = 2 if direction == "bidirectional" else 1
    node = Node(op, int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(1, 6)))
    node.direction, node.layout = direction, int(rng.integers(0, 2))
    node.given = tuple(n for n in OPTIONAL[op] if rng.random() < 0.6)
    outputs = 3 if op == "LSTM" else 2
    named = tuple(k for k in range(outputs) if rng.random() < 0.7)
    node.named = named or (int(rng.integers(0, outputs)),)
    if rng.random() < 0.6:
        # A GRU's and an LSTM's gates (f) bounded, lest an unbounded one blow the states up to inf
        per = PER_DIRECTION[op]
        acts = [str(rng.choice(BOUNDED if k % per == 0 and per > 1 else ACTIVATIONS)) for k in range(per * dirs)]
        node.attrs["activations"] = acts
        alphas = [round(float(rng.uniform(0.1, 1.5)), 3) for a in acts if a in READS_ALPHA]
        betas = [round(float(rng.uniform(-0.5, 0.5)), 3) for a in acts if a in READS_BETA]
        node.attrs.update({k: v for k, v in (("activation_alpha", alphas), ("activation_beta", betas)) if v})
    if rng.random() < 0.4:
        node.attrs["clip"] = round(float(rng.uniform(0.3, 3.0)), 3)
    if op == "GRU":
        node.attrs["linear_before_reset"] = int(rng.integers(0, 2))
    if op == "LSTM" and rng.random() < 0.3:
        node.attrs["input_forget"] = 1
    return node


def check(node: Node, values: dict[str, Any], built: Any | None = None, atol: float = 1e-6) -> None:
    """The WGSL module's outputs against onnxruntime's (its layout-0 node for layout 1), within rtol
    1e-5 and `atol`."""
    built = built or build_for(node.model(), fuse="dispatch", backend="wgsl")
    assert "for _step in _p_" in built.source  # on the device, one dispatch per step
    got = run_built(built, values)
    if node.layout:
        moved = {k: v.swapaxes(0, 1) if k in ("x", "h0", "c0") else v for k, v in values.items()}
        want = run_onnxruntime(node.model(layout=0), moved)
        keys = [k for k in range(3) if k in node.named]
        want = [w.transpose(2, 0, 1, 3) if k == 0 else w.swapaxes(0, 1) for k, w in zip(keys, want, strict=True)]
    else:
        want = run_onnxruntime(node.model(), values)
    assert_same(got, want, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("op", list(GATES))
def test_drawn_nodes_match_onnxruntime(op: str, seed: int) -> None:
    rng = np.random.default_rng(1000 * seed + 7 * list(GATES).index(op))
    node = draw(rng, op)
    check(node, node.values(rng))


ELU_HARD = {"activations": ["Elu", "HardSigmoid"], "activation_alpha": [0.7, 0.3], "activation_beta": [0.4]}
LSTM_ACTS = {
    "activations": ["HardSigmoid", "Softsign", "Softplus"],
    "activation_alpha": [0.3],
    "activation_beta": [0.6],
}
CHOSEN = {
    "rnn_elu_hard_sigmoid": Node(
        "RNN", 3, 4, 5, 6, "bidirectional", 0, ("b", "lens", "h0"), attrs=ELU_HARD | {"clip": 1.2}
    ),
    "gru_reverse_lens": Node("GRU", 4, 3, 2, 5, "reverse", 0, ("b", "lens"), attrs={"linear_before_reset": 0}),
    "gru_bidi_layout1_lbr": Node("GRU", 4, 3, 2, 5, "bidirectional", 1, ("b", "h0"), (1,), {"linear_before_reset": 1}),
    "lstm_bidi_all": Node("LSTM", 4, 3, 3, 4, "bidirectional", 0, ("b", "lens", "h0", "c0", "p"), (0, 1, 2)),
    "lstm_if_y_c": Node("LSTM", 5, 2, 3, 4, "reverse", 1, ("lens", "c0", "p"), (2,), {"input_forget": 1, "clip": 0.8}),
    "lstm_acts": Node("LSTM", 3, 2, 3, 4, "forward", 0, ("p",), (0,), LSTM_ACTS),
}


@pytest.mark.parametrize("node", list(CHOSEN.values()), ids=list(CHOSEN))
def test_chosen_nodes_match_onnxruntime(node: Node) -> None:
    check(node, node.values(np.random.default_rng(3)))


@pytest.mark.parametrize("op", list(GATES))
def test_a_step_over_several_workgroups_matches_onnxruntime(op: str) -> None:
    # 2 directions x 3 entries x 40 hidden units: 240 invocations a step, 4 workgroups, over 12 steps.
    node = Node(
        op, 12, 3, 7, 40, "bidirectional", given=("b", "lens", "h0"), named=tuple(range(3 if op == "LSTM" else 2))
    )
    if op == "GRU":
        node.attrs["linear_before_reset"] = 0
    values = node.values(np.random.default_rng(5))
    values["lens"] = np.array([12, 0, 7], np.int32)
    # Sums of 47 products near 1 in another order leave about 1e-6 on a state near 0 after a few steps
    # (the numpy module differs from onnxruntime by as much here).
    check(node, values, atol=1e-5)


def test_a_sequence_and_batch_bound_at_run_time() -> None:
    node = Node("GRU", 4, 2, 3, 5, "bidirectional", given=("b", "lens", "h0"), named=(0, 1))
    dims = {"x": ["S", "N", 3], "lens": ["N"], "h0": [2, "N", 5]}
    built = build_for(node.model(dims=dims), fuse="dispatch", backend="wgsl")
    rng = np.random.default_rng(8)
    for seq, batch in ((1, 1), (6, 3), (2, 4)):
        node.seq, node.batch = seq, batch
        check(node, node.values(rng), built)
