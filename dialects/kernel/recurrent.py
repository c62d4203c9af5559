"""Library kernels of recurrent networks (ONNX RNN, GRU and LSTM), listed in `RECURRENT_OPS`.

Each takes X, W and R, then the optional operands present in ONNX's order (B, sequence_lens,
initial_h, and for an LSTM initial_c and P); `present` says which, one bit each in that order
(1, 2, 4, 8, 16).  Each gives every output of its operator (Y and Y_h, and Y_c for an LSTM),
whichever of them the graph reads.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from loam.dialects.kernel.library import LibraryOp, library_types, require

DIRECTIONS = ("forward", "reverse", "bidirectional")
"""ONNX's `direction` values."""


class RecurrentOp(LibraryOp):
    """What the three recurrent kernels share: their parameters and the check of their operands.

    `activations` names each direction's activation functions (ONNX's spelling, comma-joined);
    `alphas` and `betas` hold one value per activation (0 where it reads none); `clip` bounds the
    gates' inputs to [-clip, clip] (0: no clip); `layout` 1 puts the batch axis first.
    """

    PARAMS: ClassVar[dict[str, type]] = {
        "direction": str,
        "activations": str,
        "alphas": tuple,
        "betas": tuple,
        "clip": float,
        "layout": int,
        "present": int,
    }
    OPTIONAL_OPERANDS: ClassVar[int] = 3
    """How many optional operands follow X, W and R (their bits in `present`)."""
    OUTPUTS: ClassVar[int] = 2
    PER_DIRECTION: ClassVar[int] = 1
    """How many activations each direction reads."""

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        present = self.param("present")
        optional = bin(present).count("1")
        require(self, 0 <= present < 1 << self.OPTIONAL_OPERANDS, f"present {present} names no operand set")
        require(self, len(ins) == 3 + optional, f"present {present} says {3 + optional} operands, not {len(ins)}")
        require(self, len(outs) == self.OUTPUTS, f"gives {self.OUTPUTS} results, not {len(outs)}")
        direction = self.param("direction")
        require(self, direction in DIRECTIONS, f"direction {direction!r} is not one of {', '.join(DIRECTIONS)}")
        per = self.PER_DIRECTION * (2 if direction == "bidirectional" else 1)
        count = len(self.param("activations").split(","))
        require(self, count == per, f"{direction} takes {per} activations, not {count}")
        for key in ("alphas", "betas"):
            require(self, len(self.param(key)) == per, f"{key} must hold one value per activation ({per})")
        require(self, self.param("clip") >= 0, "clip must not be negative")
        require(self, self.param("layout") in (0, 1), "layout must be 0 or 1")


@irdl_op_definition
class RnnOp(RecurrentOp):
    """ONNX RNN: H = f(X W^T + H R^T + Wb + Rb), per step and direction.

    Example: `%y, %yh = kernel.rnn(%x, %w, %r) {direction = "forward", activations = "Tanh",
    alphas = array<f64: 0.000000e+00>, betas = array<f64: 0.000000e+00>, clip = 0.000000e+00 : f64,
    layout = 0 : i64, present = 0 : i64, node = "rnn"} : (X, W, R) -> (Y, YH)`
    """

    name = "kernel.rnn"


@irdl_op_definition
class GruOp(RecurrentOp):
    """ONNX GRU: update and reset gates through f, the hidden gate through g; `linear_before_reset`
    applies R's product before the reset gate.

    Example: `%y, %yh = kernel.gru(%x, %w, %r, %b) {direction = "forward", activations = "Sigmoid,Tanh", ...,
    linear_before_reset = 1 : i64, present = 1 : i64, node = "gru"} : (X, W, R, B) -> (Y, YH)`
    """

    name = "kernel.gru"
    PARAMS: ClassVar[dict[str, type]] = {
        **{k: v for k, v in RecurrentOp.PARAMS.items() if k != "present"},
        "linear_before_reset": int,
        "present": int,
    }
    PER_DIRECTION: ClassVar[int] = 2


@irdl_op_definition
class LstmOp(RecurrentOp):
    """ONNX LSTM: input, forget and output gates through f (with peepholes P), the cell gate through
    g, the output through h; `input_forget` couples the forget gate to the input gate (1 - i).

    Example: `%y, %yh, %yc = kernel.lstm(%x, %w, %r) {direction = "reverse", activations = "Sigmoid,Tanh,Tanh",
    ..., input_forget = 0 : i64, present = 0 : i64, node = "lstm"} : (X, W, R) -> (Y, YH, YC)`
    """

    name = "kernel.lstm"
    PARAMS: ClassVar[dict[str, type]] = {
        **{k: v for k, v in RecurrentOp.PARAMS.items() if k != "present"},
        "input_forget": int,
        "present": int,
    }
    OPTIONAL_OPERANDS: ClassVar[int] = 5
    OUTPUTS: ClassVar[int] = 3
    PER_DIRECTION: ClassVar[int] = 3


RECURRENT_OPS: tuple[type[LibraryOp], ...] = (RnnOp, GruOp, LstmOp)
