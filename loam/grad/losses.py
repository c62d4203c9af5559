"""The grad clause of `kernel.nll_loss` (NegativeLogLikelihoodLoss, and SoftmaxCrossEntropyLoss after its
log-softmax): what the scores receive.

loss[n, d...] = -x[n, t, d...] w[t] (0 where t is ignore_index), so x receives -g w[t] at (n, t, d...) and
nothing elsewhere; with reduction sum every position's g is the one g, with mean it is g over the weights
taken (the count of targets not ignored, without weights).  It is added into zeros of x at the targets
along the class axis (`kernel.scatter_elements`, an ignored target pointing at class 0 with nothing to
add).  The class weights receive, at each position's target class, -x[n, t, d...] times what that position's
loss is worth (g; with mean, (-x - loss) g / total, the total being a sum of weights too), added by class.
"""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from loam.dialects.expr import Expr
from loam.dialects.kernel import GatherElementsOp, GatherOp, NllLossOp, ReduceOp, RegroupOp, ScatterElementsOp
from loam.dialects.kernel.base import element_count
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, Clause, type_of, zeros_like


def _nll_loss(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, NllLossOp)
    x, target = op.inputs[0], op.inputs[1]
    weight = op.inputs[2] if len(op.inputs) > 2 else None
    t, it = type_of(x), type_of(target)
    elem, o = t.elem.name, Expr.operand
    # Targets with the class axis kept at extent 1: [N, 1, d...], as the scatter along axis 1 reads them.
    picks_type = AxesTensorType(it.elem, [it.axes[0], Axis.named("Unit", 1), *it.axes[1:]])
    picks = b.emit(RegroupOp(target, picks_type, f"{node}.grad"))
    ignore = Expr.const(op.param("ignore_index"), it.elem.name)
    taken = (o(0).binary("equal", ignore).unary("not")) if op.param("ignores") else None
    safe = picks if taken is None else b.zip([picks], Expr.select(taken, o(0), Expr.const(0, it.elem.name)), picks_type,
                                             f"{node}.grad")  # fmt: skip
    share_type = AxesTensorType(t.elem, picks_type.axes)
    # What each position takes: w[t] (1 without weights), 0 where ignored.
    one, zero = Expr.const(1.0, elem), Expr.const(0.0, elem)
    if weight is not None:
        weights = b.emit(GatherOp([weight, safe], [share_type], f"{node}.grad", axis=0))
        if taken is not None:
            kept = Expr.select(taken.remap_operands({0: 1}), o(0), zero)
            weights = b.zip([weights, picks], kept, share_type, f"{node}.grad")
        share = weights
    else:
        share = b.zip([picks], one if taken is None else Expr.select(taken, one, zero), share_type, f"{node}.grad")
    reduction = op.param("reduction")
    # What each position's loss is worth to the loss reduced: g (none), the one g (sum), g / total (mean).
    if reduction == "none":
        per = b.emit(RegroupOp(g, share_type, f"{node}.grad"))
    elif reduction == "sum":
        per = g
    else:  # mean: over the weights taken
        total = b.emit(ReduceOp([share], [AxesTensorType(t.elem, [])], f"{node}.grad", kind="sum",
                                axes=tuple(range(share_type.rank)), keepdims=0))  # fmt: skip
        per = b.zip([g, total], o(0) / o(1), AxesTensorType(t.elem, []), f"{node}.grad")
    if x in b.needed:
        updates = b.zip([share, per], -(o(0) * o(1)), share_type, f"{node}.grad")
        scattered = ScatterElementsOp([zeros_like(b, x, node), safe, updates], [t], f"{node}.grad", axis=1,
                                      reduction="add")  # fmt: skip
        b.send(x, b.emit(scattered))
    if weight is not None and weight in b.needed:
        # w[c] is read at the positions whose target is c: each adds -x there (mean: minus the loss too, the
        # total's share), times what its loss is worth; ignored positions add nothing.
        picked = b.emit(GatherElementsOp([x, safe], [share_type], f"{node}.grad", axis=1))
        expr = -o(0) if reduction != "mean" else -o(0) - o(3)
        kept = Expr.select(taken.remap_operands({0: 2}), expr * o(1), zero) if taken is not None else expr * o(1)
        operands = [picked, per, picks, *([op.outputs[0]] if reduction == "mean" else [])]
        each = b.zip(operands, kept, share_type, f"{node}.grad")
        flat = [Axis.named("Positions", element_count(share_type.shape))]
        rows = [b.emit(RegroupOp(v, AxesTensorType(type_of(v).elem, flat), f"{node}.grad")) for v in (safe, each)]
        b.send(weight, b.emit(ScatterElementsOp([zeros_like(b, weight, node), *rows], [type_of(weight)],
                                                f"{node}.grad", axis=0, reduction="add")))  # fmt: skip


CLAUSES: dict[type[Operation], Clause] = {NllLossOp: _nll_loss}
