"""Recurrent networks: ONNX RNN, GRU and LSTM (opset 7 on, `layout` from 14), as onnxruntime computes them.

Each is one library kernel (`kernel.rnn`, `kernel.gru`, `kernel.lstm`, computed by
`loam/runtime/kernels/recurrent.py`) that gives every output of its operator; the node reads those
the graph names.  The number of hidden units comes from R's last extent and the sequence length from
X's, so both may be symbolic; `sequence_lens` is read at run time (a length outside [0, seq_length]
raises the module's DataError; an entry of length 0 has zero final states, as onnxruntime gives).

`activation_alpha` and `activation_beta` are consumed in order by the activations that read them, as
ONNX says and onnxruntime does.  An activation left without a value takes the default its ONNX
operator has where onnxruntime's is the same (LeakyRelu 0.01, HardSigmoid 0.2 and 0.5, Elu 1.0,
Affine's beta 0); where the two differ (ThresholdedRelu, Affine's alpha, ScaledTanh) the build
refuses the node rather than pick one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from loam.core import owed
from loam.core.limits import foldable
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, float_attr, int_attr, require_arity, same_axis
from loam.ops.operands import emit_library, given, is_symbolic, present_bits, require_elem
from loam.runtime.errors import DataError
from loam.runtime.kernels.recurrent import kernel_gru, kernel_lstm, kernel_rnn

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

ACTIVATIONS = (
    "Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu",
    "Softsign", "Softplus",
)  # fmt: skip
"""The activation functions ONNX lists for its recurrent operators, in its spelling."""

# For each activation that reads alpha (beta): ONNX's default (its operator's; None where that has
# none) and onnxruntime's, for an activation the attribute leaves without a value.
ALPHA_DEFAULTS: dict[str, tuple[float | None, float]] = {
    "Affine": (1.0, 0.0),
    "LeakyRelu": (0.01, 0.01),
    "ThresholdedRelu": (1.0, 0.0),
    "ScaledTanh": (None, 0.0),
    "HardSigmoid": (0.2, 0.2),
    "Elu": (1.0, 1.0),
}
BETA_DEFAULTS: dict[str, tuple[float | None, float]] = {
    "Affine": (0.0, 0.0),
    "ScaledTanh": (None, 0.0),
    "HardSigmoid": (0.5, 0.5),
}

DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
"""ONNX's `direction` values and their number of directions."""


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RecurrentRule(OpRule):
    """What RNN, GRU and LSTM share: their operands' checks, their outputs' extents and axes, and
    the kernel's parameters read from the attributes."""

    attributes = frozenset(
        {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout"}
    )
    first_opset = 7
    elem_types = ("f32", "f64", "f16")
    limitations = (
        "activation_alpha/beta are consumed in order by the activations that read them; ThresholdedRelu, "
        "ScaledTanh and Affine's alpha need a value (ONNX's and onnxruntime's defaults differ); clip must be "
        "positive; a sequence_lens entry outside [0, seq_length] raises the module's DataError at run time, "
        "and one of 0 gives zero final states (as onnxruntime does)"
    )
    gates: ClassVar[int] = 1
    defaults: ClassVar[tuple[str, ...]] = ("Tanh",)
    """Each direction's activations when the node names none."""
    optional_inputs: ClassVar[tuple[str, ...]] = ("B", "sequence_lens", "initial_h")
    flag: ClassVar[str | None] = None
    """The operator's own 0/1 attribute (GRU's linear_before_reset, LSTM's input_forget)."""

    @property
    def outputs(self) -> int:
        return 3 if "initial_c" in self.optional_inputs else 2

    # -- attributes ----------------------------------------------------------------------------

    def direction(self, node: NodeInfo) -> str:
        direction = _text(node.attr("direction", "forward"))
        if direction not in DIRECTIONS:
            raise node.fail(f"direction {direction!r} is not one of {', '.join(DIRECTIONS)}")
        return direction

    def activations(self, node: NodeInfo, directions: int) -> list[str]:
        """Each direction's activation functions in turn, in ONNX's spelling."""
        names = [_text(v) for v in node.attr("activations", None) or self.defaults * directions]
        per = len(self.defaults)
        if per == 1 and directions == 1 and len(names) == 2:
            names = names[:1]  # RNN's schema default lists two; one direction reads the first
        if len(names) != per * directions:
            raise node.fail(f"activations names {len(names)} function(s); {node.op_type} takes {per} per direction")
        spelled = {a.lower(): a for a in ACTIVATIONS}
        out: list[str] = []
        for name in names:
            # onnxruntime reads GRU's and LSTM's activations in any case, RNN's only as ONNX spells them
            canonical = name if name in ACTIVATIONS else spelled.get(name.lower()) if per > 1 else None
            if canonical is None:
                raise node.unsupported(f"activation {name!r} is not one of {', '.join(ACTIVATIONS)}")
            out.append(canonical)
        return out

    def scales(
        self, node: NodeInfo, names: Sequence[str], key: str, table: dict[str, tuple[float | None, float]]
    ) -> tuple[float, ...]:
        """One value per activation: `key`'s values consumed in order by the activations that read
        them; a reader left without one takes the default ONNX and onnxruntime share."""
        values = [float(v) for v in node.attr(key, None) or ()]
        out: list[float] = []
        for name in names:
            if name not in table:
                out.append(0.0)
                continue
            if values:
                out.append(values.pop(0))
                continue
            onnx_default, ort_default = table[name]
            if onnx_default != ort_default:
                onnx_says = "ONNX defines no default" if onnx_default is None else f"ONNX's default is {onnx_default}"
                raise node.unsupported(
                    f"{key} leaves activation {name} without a value: {onnx_says}, onnxruntime's is {ort_default}; "
                    "give it one"
                )
            out.append(ort_default)
        return tuple(out)

    def params(self, node: NodeInfo) -> dict[str, Any]:
        """The kernel's parameters but `present` (which depends on the operands)."""
        direction = self.direction(node)
        names = self.activations(node, DIRECTIONS[direction])
        clip = 0.0  # none
        if node.attr("clip", None) is not None:
            clip = float_attr(node, "clip", 0.0)
            if not (clip > 0 and math.isfinite(clip)):
                raise node.unsupported(f"clip {clip} is not a positive threshold")
        params: dict[str, Any] = {
            "direction": direction,
            "activations": ",".join(names),
            "alphas": self.scales(node, names, "activation_alpha", ALPHA_DEFAULTS),
            "betas": self.scales(node, names, "activation_beta", BETA_DEFAULTS),
            "clip": clip,
            "layout": int_attr(node, "layout", 0, (0, 1)),
        }
        if self.flag is not None:
            params[self.flag] = int_attr(node, self.flag, 0, (0, 1))
        return params

    # -- stage 0 -------------------------------------------------------------------------------

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, Poly, Poly, Poly]:
        """The operands checked against each other: (seq_length, num_directions, batch, hidden)."""
        if node.since < self.first_opset:
            raise node.unsupported(f"opset {node.since} is older than {self.first_opset}, the first Loam reads")
        require_arity(node, inputs, 3, 3 + len(self.optional_inputs))
        if node.outputs > self.outputs:
            raise node.fail(f"names {node.outputs} outputs; {node.op_type} has {self.outputs}")
        x, w, r = given(node, inputs, 0, "X"), given(node, inputs, 1, "W"), given(node, inputs, 2, "R")
        require_elem(node, x, self.elem_types, "X")
        params = self.params(node)
        layout = params["layout"]
        directions = Poly.const(DIRECTIONS[params["direction"]])
        named = {"X": x, "W": w, "R": r}
        named.update({n: f for n, f in zip(self.optional_inputs, inputs[3:], strict=False) if f is not None})
        for name, f in named.items():
            rank = 1 if name == "sequence_lens" else 2 if name in ("B", "P") else 3
            if f.rank != rank:
                raise node.fail(f"{name} has rank {f.rank}; {node.op_type} needs {rank}")
            if name == "sequence_lens":
                if f.elem.name != "i32":
                    raise node.fail(f"sequence_lens has element type {f.elem.name}; ONNX needs i32")
            elif f.elem != x.elem:
                raise node.fail(f"{name} has element type {f.elem.name}, X {x.elem.name}; ONNX needs one")
        seq, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
        hidden = r.shape[2]
        size = node.attr("hidden_size", None)
        if size is not None:
            attr = Poly.const(int_attr(node, "hidden_size", 0))
            owed.require_equal(hidden, attr, node, "R's extent 2 against hidden_size")
        g = self.gates
        rows, dirs, size = (hidden * g, f"{g} x hidden_size"), (directions, "num_directions"), (hidden, "hidden_size")
        state = ((batch, "batch_size"), dirs, size) if layout else (dirs, (batch, "batch_size"), size)
        # Each operand's extents and what fixes them (hidden_size is R's extent 2, batch_size X's).
        wants: dict[str, tuple[tuple[Poly, str], ...]] = {
            "W": (dirs, rows, (x.shape[2], "input_size (X's last extent)")),
            "R": (dirs, rows),
            "B": (dirs, (hidden * (2 * g), f"{2 * g} x hidden_size")),
            "sequence_lens": ((batch, "batch_size"),),
            "initial_h": state,
            "initial_c": state,
            "P": (dirs, (hidden * 3, "3 x hidden_size")),
        }
        for name, f in named.items():
            for axis, (want, what) in enumerate(wants.get(name, ())):
                owed.require_equal(f.shape[axis], want, node, f"{name}'s extent {axis} is {what}")
        return seq, directions, batch, hidden

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        seq, directions, batch, hidden = self.check(node, inputs)
        x = inputs[0]
        assert x is not None
        params = self.params(node)
        state = (batch, directions, hidden) if params["layout"] else (directions, batch, hidden)
        y = (batch, seq, directions, hidden) if params["layout"] else (seq, directions, batch, hidden)
        shapes = [y, *[state] * (self.outputs - 1)]
        values: Sequence[np.ndarray | None] = [None] * self.outputs
        present = [f for f in inputs if f is not None]
        dims = [d.const_value if d.is_const else 0 for d in y]
        if all(f.value is not None and not is_symbolic(f) for f in present) and foldable(dims, node.where()):
            try:
                values = self.compute(inputs, params)
            except DataError as err:  # a constant length outside the sequence: the graph is wrong
                raise node.fail(str(err)) from None
        return [Facts(x.elem, s, v) for s, v in zip(shapes, values, strict=True)][: node.outputs]

    def compute(self, inputs: Sequence[Facts | None], params: dict[str, Any]) -> tuple[np.ndarray, ...]:
        """The kernel over known operands (stage 0's fold)."""
        kernels: dict[str, Callable[..., tuple[np.ndarray, ...]]] = {
            "RNN": kernel_rnn,
            "GRU": kernel_gru,
            "LSTM": kernel_lstm,
        }
        kernel = kernels[self.op_types[0]]
        operands = [np.asarray(f.value) for f in inputs if f is not None]
        return kernel(*operands, present=present_bits(inputs[3:]), **params)

    # -- name-axes -----------------------------------------------------------------------------

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x, w, r = inputs[0], inputs[1], inputs[2]
        assert x is not None and w is not None and r is not None
        layout = self.params(node)["layout"]
        seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
        directions, hidden = w[0], r[2]

        def meet(a: Axis, b: Axis, where: str) -> None:
            if a.extent != Poly.const(1) and b.extent != Poly.const(1):
                same_axis(node, a, b, where)

        meet(w[2], x[2], "where W's input axis meets X's")
        meet(r[0], w[0], "where R's direction axis meets W's")
        meet(r[1], w[1], "where R's gate axis meets W's")
        state = (batch, directions, hidden) if layout else (directions, batch, hidden)
        for name, axes in zip(self.optional_inputs, inputs[3:], strict=False):
            if axes is None:
                continue
            if name in ("B", "P"):
                meet(axes[0], directions, f"where {name}'s direction axis meets W's")
            elif name == "sequence_lens":
                meet(axes[0], batch, "where sequence_lens meets X's batch axis")
            else:
                for i, (a, b) in enumerate(zip(axes, state, strict=True)):
                    meet(a, b, f"at {name}'s axis {i}")
        y = (batch, seq, directions, hidden) if layout else (seq, directions, batch, hidden)
        results: list[tuple[Axis | None, ...]] = [y, *[state] * (self.outputs - 1)]
        return results[: len(outputs)]

    # -- lower-to-kernel -----------------------------------------------------------------------

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects import kernel
        from loam.dialects.tensor_axes import AxesTensorType

        op_class = {"RNN": kernel.RnnOp, "GRU": kernel.GruOp, "LSTM": kernel.LstmOp}[self.op_types[0]]
        params = self.params(node)
        types = list(ctx.result_types)
        y = types[0]
        # The kernel gives every output; one the graph does not name has the states' type.
        keep = (0, 2, 3) if params["layout"] else (1, 2, 3)
        while len(types) < self.outputs:
            types.append(AxesTensorType(y.elem, [y.axes[i] for i in keep]))
        present = [v for v in operands if v is not None]
        op = op_class(present, types, node.name, **params, present=present_bits(operands[3:]))
        return emit_library(ctx, op)[: len(ctx.result_types)]


class RnnRule(RecurrentRule):
    """ONNX RNN (opset 7 on): H = f(X W^T + H R^T + Wb + Rb), f Tanh by default."""

    op_types = ("RNN",)
    kernels: tuple[str, ...] = ("kernel.rnn",)


class GruRule(RecurrentRule):
    """ONNX GRU (opset 7 on): gates z, r, h; activations f (Sigmoid), g (Tanh); linear_before_reset."""

    op_types = ("GRU",)
    kernels: tuple[str, ...] = ("kernel.gru",)
    attributes = RecurrentRule.attributes | {"linear_before_reset"}
    gates = 3
    defaults = ("Sigmoid", "Tanh")
    flag = "linear_before_reset"


class LstmRule(RecurrentRule):
    """ONNX LSTM (opset 7 on): gates i, o, f, c; activations f (Sigmoid), g, h (Tanh); peepholes P
    and input_forget; outputs Y, Y_h and Y_c."""

    op_types = ("LSTM",)
    kernels: tuple[str, ...] = ("kernel.lstm",)
    attributes = RecurrentRule.attributes | {"input_forget"}
    gates = 4
    defaults = ("Sigmoid", "Tanh", "Tanh")
    optional_inputs = ("B", "sequence_lens", "initial_h", "initial_c", "P")
    flag = "input_forget"


RULES: tuple[OpRule, ...] = (RnnRule(), GruRule(), LstmRule())
