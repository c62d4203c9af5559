"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both read scores x [N, C, d1, ...] and integer targets [N, d1, ...] (one class per position), an
optional weight [C] per class, `reduction` (none: the loss per position; sum; mean: the sum over
the weights the targets take) and an optional `ignore_index` (a target that counts for nothing).
NegativeLogLikelihoodLoss is one library kernel (`kernel.nll_loss`, computed by
`loam/runtime/kernels/losses.py`); SoftmaxCrossEntropyLoss is the log-softmax over the classes
(`kernel.softmax`, also its optional second output) and then the same kernel, as ONNX defines it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from loam.core import owed
from loam.core.poly import Poly
from loam.dialects.tensor_axes import Axis
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, require_arity, same_axis
from loam.ops.lowering import FLOAT_TYPES
from loam.ops.operands import INDEX_TYPES, emit_library, given, optional, require_elem
from loam.runtime.errors import DataError
from loam.runtime.kernels.losses import kernel_nll_loss
from loam.runtime.kernels.reduce import kernel_softmax

if TYPE_CHECKING:
    from xdsl.ir import SSAValue


class NllLossParams(TypedDict):
    """`kernel.nll_loss`'s parameters."""

    reduction: str
    ignore_index: int
    ignores: int


class NllLossRule(OpRule):
    """ONNX NegativeLogLikelihoodLoss (opset 12 on): loss = -x[n, target, d...] * weight[target]."""

    op_types = ("NegativeLogLikelihoodLoss",)
    kernels: tuple[str, ...] = ("kernel.nll_loss",)
    attributes = frozenset({"reduction", "ignore_index"})
    first_opset = 12
    elem_types = FLOAT_TYPES
    limitations = "a target outside [0, C) that is not ignore_index raises the module's DataError at run time"
    scores = "input"

    def params(self, node: NodeInfo) -> NllLossParams:
        reduction = node.attr("reduction", "mean")
        reduction = reduction.decode() if isinstance(reduction, bytes) else str(reduction)
        if reduction not in ("none", "sum", "mean"):
            raise node.fail(f"reduction {reduction!r} is not none, sum or mean")
        ignore = node.attr("ignore_index", None)
        return {"reduction": reduction, "ignore_index": int(ignore or 0), "ignores": int(ignore is not None)}

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Facts, Facts, Facts | None]:
        """The scores, the targets and the weight, their types and extents checked against each other."""
        require_arity(node, inputs, 2, 3)
        x, target, weight = given(node, inputs, 0, self.scores), given(node, inputs, 1, "target"), optional(inputs, 2)
        require_elem(node, x, self.elem_types, self.scores)
        require_elem(node, target, INDEX_TYPES, "target")
        if x.rank < 2:
            raise node.fail(f"{self.scores} must be [N, C, d1, ...] (rank 2 or more), not rank {x.rank}")
        if weight is not None and (weight.rank != 1 or weight.elem != x.elem):
            raise node.fail(f"the weight must be [C] of {x.elem.name}, not {weight.elem.name} of rank {weight.rank}")
        positions = (x.shape[0], *x.shape[2:])
        if target.rank != len(positions):
            raise node.fail(f"target must have rank {len(positions)} ({self.scores} without its class axis)")
        pairs = list(zip(positions, target.shape, strict=True))
        if weight is not None:
            pairs.append((x.shape[1], weight.shape[0]))
        for a, b in pairs:
            if a.is_const and b.is_const and a != b:
                extents = f"[{', '.join(map(str, x.shape))}], target [{', '.join(map(str, target.shape))}]"
                raise node.fail(f"{self.scores} has extents {extents}: they must agree but for the class axis")
            if a != b:
                owed.require_equal(a, b, node, f"target and weight extents against {self.scores}'s")
        return x, target, weight

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x, target, weight = self.check(node, inputs)
        params = self.params(node)
        shape = target.shape if params["reduction"] == "none" else ()
        value = None
        if x.value is not None and target.value is not None and (weight is None or weight.value is not None):
            try:
                value = kernel_nll_loss(x.value, target.value, None if weight is None else weight.value, **params)
            except DataError as err:  # constant targets outside the classes: the graph is wrong, not its input
                raise node.fail(str(err)) from None
        return [Facts(x.elem, shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x, target, weight = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
        assert x is not None and target is not None
        for i, (a, b) in enumerate(zip((x[0], *x[2:]), target, strict=True)):
            if a.extent != Poly.const(1) and b.extent != Poly.const(1):
                same_axis(node, b, a, f"where target axis {i} meets {self.scores} axis {i + (i > 0)}")
        if weight is not None:
            same_axis(node, weight[0], x[1], f"where the weight meets {self.scores}'s class axis")
        return [target if self.params(node)["reduction"] == "none" else ()]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import NllLossOp

        present = [v for v in operands if v is not None]
        return emit_library(ctx, NllLossOp(present, ctx.result_types[:1], node.name, **self.params(node)))


class SoftmaxCrossEntropyLossRule(NllLossRule):
    """ONNX SoftmaxCrossEntropyLoss (opset 12 on): the negative log-likelihood of the log-softmax of
    the scores over the classes, which is also the optional second output."""

    op_types = ("SoftmaxCrossEntropyLoss",)
    kernels: tuple[str, ...] = ("kernel.softmax", "kernel.nll_loss")
    scores = "scores"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x, target, weight = self.check(node, inputs)
        log_prob = None
        if x.value is not None:
            log_prob = kernel_softmax(x.value, kind="log_softmax", axes=(1,))
        facts = [
            *super().infer(node, [Facts(x.elem, x.shape, log_prob), target, weight]),
            Facts(x.elem, x.shape, log_prob),
        ]
        return facts[: node.outputs]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        return [*super().axes(node, inputs, outputs), x][: len(outputs)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import NllLossOp, SoftmaxOp
        from loam.dialects.tensor_axes import AxesTensorType
        from loam.ops.lowering import axes_type

        x, *rest = operands
        assert x is not None
        t = axes_type(x)
        log_prob_type = ctx.result_types[1] if len(ctx.result_types) > 1 else AxesTensorType(t.elem, t.axes)
        (log_prob,) = emit_library(ctx, SoftmaxOp([x], [log_prob_type], node.name, kind="log_softmax", axes=(1,)))
        present = [log_prob, *(v for v in rest if v is not None)]
        (loss,) = emit_library(ctx, NllLossOp(present, ctx.result_types[:1], node.name, **self.params(node)))
        return [loss, log_prob][: len(ctx.result_types)]


RULES: tuple[OpRule, ...] = (NllLossRule(), SoftmaxCrossEntropyLossRule())
