"""Normalisations per channel of NCHW data (axis 1): BatchNormalization, InstanceNormalization,
GroupNormalization and LRN.

BatchNormalization at inference is one affine map per channel, so it is composed from existing
kernels: each parameter regrouped to [C, 1, ...] and one `kernel.zip`.  The others take moments of
the data and are library kernels (`kernel.normalize`, `kernel.group_norm`, `kernel.lrn`, computed by
`loam/runtime/kernels/normalization.py`), as is BatchNormalization in training mode
(`kernel.batch_norm_train`).

Opset history restated here: BatchNormalization's `is_test`/`spatial` (opsets 1-8: only the
inference, spatial meaning is compiled; before opset 14 more than one output means training with
saved statistics and is refused); `training_mode` 1 (opset 14 on) normalises by the batch's own
statistics; GroupNormalization's scale and bias were per group at opset 18 and per channel from 21.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from loam.core import owed
from loam.core.poly import Poly
from loam.dialects.tensor_axes import Axis
from loam.ops.base import Facts, KeepsAxes, LowerContext, NodeInfo, OpRule, int_attr, require_arity, same_axis
from loam.ops.layer_norms import NormalizeParams
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.lowering import axes_type
from loam.ops.operands import emit_library, require_elem, require_elem_like, required_inputs
from loam.ops.reduce import unit_axis
from loam.runtime.kernels.normalization import kernel_group_norm, kernel_lrn, kernel_normalize

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.expr import Expr


class BatchNormTrainParams(TypedDict):
    """`kernel.batch_norm_train`'s parameters."""

    epsilon: float
    momentum: float


class GroupNormParams(TypedDict):
    """`kernel.group_norm`'s parameters."""

    num_groups: int
    epsilon: float
    per_group: int
    stash: str


class LrnParams(TypedDict):
    """`kernel.lrn`'s parameters."""

    size: int
    alpha: float
    beta: float
    bias: float


def _channel_vector(node: NodeInfo, f: Facts, channels: Poly, name: str) -> None:
    """`f` holds one value per channel: equal numbers, or a symbolic length the inputs owe equal."""
    if f.rank != 1 or (f.shape[0].is_const and channels.is_const and f.shape[0] != channels):
        raise node.fail(f"{name} must have extents [{channels}], got [{', '.join(map(str, f.shape))}]")
    owed.require_equal(channels, f.shape[0], node, f"{name}'s one value per channel")


def _per_channel_axes(
    node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], names: Sequence[str]
) -> tuple[Axis, ...]:
    """X's axes, after checking each per-channel parameter's axis is X's channel axis (axis 1)."""
    x = inputs[0]
    assert x is not None
    for p, name in zip(inputs[1:], names, strict=True):
        assert p is not None
        same_axis(node, x[1], p[0], f"between X's channel axis and {name}")
    return x


def _stash(x: Facts) -> str:
    """The numpy dtype the moments are computed in: f64 for f64 data, f32 otherwise."""
    return "float64" if x.elem.name == "f64" else "float32"


# ---------------------------------------------------------------------------------------------
# BatchNormalization
# ---------------------------------------------------------------------------------------------


class BatchNormRule(OpRule):
    """ONNX BatchNormalization: (X - mean) / sqrt(var + epsilon) * scale + B per channel.

    At inference mean and var are the inputs.  With training_mode 1 (opset 14 on) they are X's own
    statistics per channel (mean and population variance over every other axis), and the optional
    outputs running_mean and running_var move the inputs toward them: `input * momentum + batch
    statistic * (1 - momentum)`."""

    op_types = ("BatchNormalization",)
    kernels: tuple[str, ...] = ("kernel.regroup", "kernel.zip", "kernel.batch_norm_train")
    attributes = frozenset({"epsilon", "momentum", "training_mode", "is_test", "spatial", "consumed_inputs"})
    elem_types = FLOATS
    limitations = (
        "training (batch statistics) only as opset 14 on defines it, training_mode 1 with outputs Y, running_mean "
        "and running_var; opsets 1-13 compile inference only (one output; is_test 0 is refused); spatial 1 only"
    )

    def training(self, node: NodeInfo) -> bool:
        """Whether the node normalises by the batch's statistics (training_mode 1, opset 14 on)."""
        return node.since >= 14 and bool(int_attr(node, "training_mode", 0, (0, 1)))

    def check(self, node: NodeInfo, outputs: int) -> None:
        if outputs > 1 and node.since < 14:
            raise node.unsupported(
                f"more than one output at opset {node.since} means training with its saved statistics; "
                "Loam compiles training as opset 14 on defines it, or export for inference"
            )
        if outputs > 3:
            raise node.fail(f"names {outputs} outputs; BatchNormalization has 3 (Y, running_mean, running_var)")
        if outputs > 1 and not self.training(node):
            raise node.fail("running_mean and running_var are outputs of training_mode 1 only")
        if self.training(node) and outputs != 3:
            raise node.fail(
                f"training_mode 1 gives three outputs (Y, running_mean, running_var), as ONNX's shape inference "
                f"requires; the node names {outputs}"
            )
        if node.since < 7 and not int_attr(node, "is_test", 0, (0, 1)):
            raise node.unsupported(f"is_test 0 at opset {node.since} means training; export for inference")
        if node.since < 9 and not int_attr(node, "spatial", 1, (0, 1)):
            raise node.unsupported("spatial 0 (per-activation statistics) is not supported")

    def train_params(self, node: NodeInfo) -> BatchNormTrainParams:
        """The `kernel.batch_norm_train` parameters."""
        momentum = float(node.attr("momentum", 0.9))
        if not np.isfinite(momentum):
            raise node.fail(f"momentum must be finite, got {momentum}")
        return {"epsilon": float(node.attr("epsilon", 1e-5)), "momentum": momentum}

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 5)
        self.check(node, node.outputs)
        x, scale, bias, mean, var = required_inputs(node, inputs, ("X", "scale", "B", "mean", "var"))
        require_elem(node, x, self.elem_types, "X")
        self.check_elems(node, (x, scale, bias, mean, var))
        if x.rank < 2:
            raise node.fail(f"X must have rank 2 or more, got {x.rank}")
        for f, name in ((scale, "scale"), (bias, "B"), (mean, "mean"), (var, "var")):
            _channel_vector(node, f, x.shape[1], name)
        known = all(f.value is not None for f in (x, scale, bias, mean, var))
        if self.training(node):
            from loam.runtime.kernels.normalization import kernel_batch_norm_train

            values: Sequence[np.ndarray | None] = [None] * 3
            if known:
                arrays = [np.asarray(f.value) for f in (x, scale, bias, mean, var)]
                values = kernel_batch_norm_train(*arrays, **self.train_params(node))
            facts = [Facts(x.elem, x.shape, values[0]), Facts(mean.elem, mean.shape, values[1])]
            facts.append(Facts(var.elem, var.shape, values[2]))
            return facts
        value = None
        if known:
            value = self.fold(node, x, scale, bias, mean, var)
        return [Facts(x.elem, x.shape, value)]

    @staticmethod
    def type_groups(node: NodeInfo) -> tuple[tuple[int, ...], ...]:
        """Which of (X, scale, B, mean, var) share one element type at the node's opset.

        Before 14 all five (T); at 14 mean and var may differ from X (U); from 15 scale and B
        (T1) and mean and var (T2) each may.
        """
        if node.since >= 15:
            return ((0,), (1, 2), (3, 4))
        if node.since == 14:
            return ((0, 1, 2), (3, 4))
        return ((0, 1, 2, 3, 4),)

    def check_elems(self, node: NodeInfo, facts: Sequence[Facts]) -> None:
        names = ("X", "scale", "B", "mean", "var")
        for f, name in zip(facts[1:], names[1:], strict=True):
            require_elem(node, f, self.elem_types, name)
        for group in self.type_groups(node):
            first = facts[group[0]].elem
            for i in group[1:]:
                if facts[i].elem != first:
                    raise node.fail(
                        f"{names[i]} has element type {facts[i].elem.name} and {names[group[0]]} {first.name}; "
                        f"ONNX needs one at opset {node.since}"
                    )

    @staticmethod
    def compute_type(elems: Sequence[str]) -> str:
        """The type the affine map runs in: f64 when any operand is f64, else f32 (halves widened)."""
        return "f64" if "f64" in elems else "f32"

    def affine(self, node: NodeInfo, elems: Sequence[str]) -> Expr:
        """(X - mean) / sqrt(var + epsilon) * scale + B over the operands (X, scale, B, mean, var).

        Operands of mixed types (opset 14+) meet in one compute type and the result takes X's;
        `typed_expr` widens halves to f32 itself, so only a widening beyond that is written here.
        """
        from loam.dialects.expr import Expr
        from loam.ops.lowering import compute_elem

        wide = self.compute_type(elems)
        xs, scale, bias, mean, var = (
            Expr.operand(i) if compute_elem(e) == wide else Expr.operand(i).cast(wide) for i, e in enumerate(elems)
        )
        expr = (xs - mean) / (var + float(node.attr("epsilon", 1e-5))).unary("sqrt") * scale + bias
        return expr.cast(elems[0]) if compute_elem(elems[0]) != wide else expr

    def fold(self, node: NodeInfo, *facts: Facts) -> np.ndarray:
        """The value of a node whose every input is known: the same Expr its kernel computes."""
        from loam.dialects.expr import evaluate
        from loam.ops.lowering import typed_expr

        elems = [f.elem.name for f in facts]
        x, *params = (np.asarray(f.value) for f in facts)
        shape = (-1,) + (1,) * (x.ndim - 2)
        return evaluate(typed_expr(self.affine(node, elems), elems, elems[0]), [x, *(p.reshape(shape) for p in params)])

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        y = _per_channel_axes(node, inputs, ("scale", "B", "mean", "var"))
        mean, var = inputs[3], inputs[4]
        assert mean is not None and var is not None
        return [y, mean, var] if len(outputs) == 3 else [y]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import BatchNormTrainOp, RegroupOp
        from loam.dialects.tensor_axes import AxesTensorType
        from loam.ops.lowering import emit_zip

        x = operands[0]
        assert x is not None
        if self.training(node):
            present = [v for v in operands if v is not None]
            train = BatchNormTrainOp(present, ctx.result_types, node.name, **self.train_params(node))
            return emit_library(ctx, train)
        x_type = axes_type(x)
        trailing = x_type.rank - 2
        params: list[SSAValue] = []
        for p in operands[1:]:
            assert p is not None
            p_type = axes_type(p)
            if trailing == 0:
                params.append(p)
                continue
            # [C] -> [C, 1, ...]: the parameters stretch over the spatial axes.
            taken = [p_type.axes[0].name]
            units: list[Axis] = []
            for _ in range(trailing):
                units.append(unit_axis(taken))
                taken.append(units[-1].name)
            op = RegroupOp(p, AxesTensorType(p_type.elem, [p_type.axes[0], *units]), node.name)
            ctx.emit(op)
            params.append(op.result)
        elems = [x_type.elem.name] + [axes_type(p).elem.name for p in params]
        return [emit_zip(ctx, node, [x, *params], self.affine(node, elems))]


# ---------------------------------------------------------------------------------------------
# InstanceNormalization: kernel.normalize over the spatial axes
# ---------------------------------------------------------------------------------------------


class InstanceNormRule(OpRule):
    """ONNX InstanceNormalization: each (sample, channel) normalised over the spatial axes, then scale + B."""

    op_types = ("InstanceNormalization",)
    kernels: tuple[str, ...] = ("kernel.normalize",)
    attributes = frozenset({"epsilon", "consumed_inputs"})
    elem_types = FLOATS

    def params(self, node: NodeInfo, rank: int, stash: str) -> NormalizeParams:
        return {
            "axes": tuple(range(2, rank)),
            "epsilon": float(node.attr("epsilon", 1e-5)),
            "channel_axis": 1,
            "stash": stash,
            "stats": 0,
        }

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3)
        x, scale, bias = required_inputs(node, inputs, ("input", "scale", "B"))
        require_elem(node, x, self.elem_types, "the input")
        require_elem_like(node, x, (scale, bias), ("scale", "B"))
        if x.rank < 3:
            raise node.fail(f"the input must have rank 3 or more, got {x.rank}")
        _channel_vector(node, scale, x.shape[1], "scale")
        _channel_vector(node, bias, x.shape[1], "B")
        value = None
        if x.value is not None and scale.value is not None and bias.value is not None:
            y = kernel_normalize(x.value, scale.value, bias.value, **self.params(node, x.rank, _stash(x)))
            assert isinstance(y, np.ndarray)  # stats 0: the kernel gives Y alone
            value = y
        return [Facts(x.elem, x.shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        return [_per_channel_axes(node, inputs, ("scale", "B"))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import NormalizeOp

        x = operands[0]
        assert x is not None
        t = axes_type(x)
        params = self.params(node, t.rank, "float64" if t.elem.name == "f64" else "float32")
        present = [v for v in operands if v is not None]  # all three: infer requires them
        return emit_library(ctx, NormalizeOp(present, ctx.result_types, node.name, **params))


# ---------------------------------------------------------------------------------------------
# GroupNormalization and LRN
# ---------------------------------------------------------------------------------------------


class GroupNormRule(OpRule):
    """ONNX GroupNormalization: channels in `num_groups` groups, each normalised with the spatial axes.

    At opset 18 scale and bias hold one value per group; from 21 one per channel (the kernel
    repeats the per-group values for opset 18).
    """

    op_types = ("GroupNormalization",)
    kernels: tuple[str, ...] = ("kernel.group_norm",)
    attributes = frozenset({"epsilon", "num_groups", "stash_type"})
    first_opset = 18
    elem_types = FLOATS
    limitations = "stash_type must be f32 (1); the channel extent must be a number"

    def params(self, node: NodeInfo, elem: str) -> GroupNormParams:
        if int(node.attr("stash_type", 1)) != 1:
            raise node.unsupported(f"stash_type {node.attr('stash_type')} is not supported (f32 = 1)")
        return {
            "num_groups": int(node.attr("num_groups", 0)),
            "epsilon": float(node.attr("epsilon", 1e-5)),
            "per_group": int(node.since < 21),
            "stash": "float64" if elem == "f64" else "float32",
        }

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3)
        x, scale, bias = required_inputs(node, inputs, ("X", "scale", "bias"))
        require_elem(node, x, self.elem_types, "X")
        require_elem_like(node, x, (scale, bias), ("scale", "bias"))
        if node.attr("num_groups") is None:
            raise node.fail("has no num_groups attribute")
        params = self.params(node, x.elem.name)
        groups = params["num_groups"]
        if x.rank < 2:
            raise node.fail(f"X must have rank 2 or more, got {x.rank}")
        channels = x.shape[1]
        if not channels.is_const or groups <= 0 or channels.const_value % groups:
            if not channels.is_const and groups > 0:
                raise node.unsupported(
                    f"the channel extent {channels} is symbolic; GroupNormalization needs it as a number to split "
                    f"it into num_groups = {groups} groups, so fix it with the `dims` option"
                )
            raise node.fail(f"{channels} channels do not split into num_groups = {groups} groups")
        per = Poly.const(groups) if params["per_group"] else channels
        _channel_vector(node, scale, per, "scale")
        _channel_vector(node, bias, per, "bias")
        value = None
        if x.value is not None and scale.value is not None and bias.value is not None:
            value = kernel_group_norm(x.value, scale.value, bias.value, **params)
        return [Facts(x.elem, x.shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        if node.since >= 21:
            for p, name in zip(inputs[1:], ("scale", "bias"), strict=True):
                assert p is not None
                same_axis(node, x[1], p[0], f"between X's channel axis and {name}")
        return [x]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import GroupNormOp

        x = operands[0]
        assert x is not None
        params = self.params(node, axes_type(x).elem.name)
        present = [v for v in operands if v is not None]  # all three: infer requires them
        return emit_library(ctx, GroupNormOp(present, ctx.result_types, node.name, **params))


class LrnRule(KeepsAxes):
    """ONNX LRN: local response normalisation across channels (axis 1)."""

    op_types = ("LRN",)
    kernels: tuple[str, ...] = ("kernel.lrn",)
    attributes = frozenset({"size", "alpha", "beta", "bias"})
    elem_types = FLOATS

    def params(self, node: NodeInfo) -> LrnParams:
        size = node.attr("size")
        if size is None or int(size) < 1:
            raise node.fail("needs a size attribute of 1 or more")
        return {
            "size": int(size),
            "alpha": float(node.attr("alpha", 1e-4)),
            "beta": float(node.attr("beta", 0.75)),
            "bias": float(node.attr("bias", 1.0)),
        }

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        (x,) = required_inputs(node, inputs, ("X",))
        require_elem(node, x, self.elem_types, "X")
        if x.rank < 2:
            raise node.fail(f"X must have rank 2 or more, got {x.rank}")
        params = self.params(node)
        value = kernel_lrn(x.value, **params) if x.value is not None else None
        return [Facts(x.elem, x.shape, value)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import LrnOp

        x = operands[0]
        assert x is not None
        return emit_library(ctx, LrnOp([x], ctx.result_types, node.name, **self.params(node)))


RULES: tuple[OpRule, ...] = (BatchNormRule(), InstanceNormRule(), GroupNormRule(), LrnRule())
