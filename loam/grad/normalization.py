"""The grad clauses of `kernel.normalize` (layer normalization: scale and bias broadcast numpy-style;
instance normalization: scale and bias 1-D along the channel axis) and `kernel.batch_norm_train`
(BatchNormalization in training mode: the batch axis normalised too).

With x^ = (x - mean) * r, r = 1 / sqrt(var + epsilon) over the normalised axes, and y = x^ * scale + bias:

    d bias  = g summed to bias's extents
    d scale = g x^ summed to scale's extents
    d x     = r (d x^ - mean(d x^) - x^ mean(d x^ x^)),   d x^ = g scale,  means over the normalised axes

The mean and r are the forward's: in the `differentiate` pass the clause puts a normalize that also
returns them (`stats`) in the forward's place, so nothing is computed twice; under ONNX's Gradient node,
whose forward the lowering still maps, the normalize runs again in the backward for them.  x^ is
(x - mean) r in the stash type.
"""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from loam.dialects.expr import Expr
from loam.dialects.kernel import BatchNormTrainOp, NormalizeOp, ReduceOp, RegroupOp
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, kept_type, type_of, with_more_results

_STASH = {"float32": "f32", "float64": "f64"}


def _normalize(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, NormalizeOp)
    x, scale, bias = (op.inputs[k] if k < len(op.inputs) else None for k in range(3))
    assert x is not None
    axes = tuple(op.param("axes"))  # type: ignore[call-overload]
    mean, r = _statistics(b, op, node)
    _normalized(b, (x, scale, bias), g, (mean, r), axes, int(op.param("channel_axis")), node)  # type: ignore[call-overload]


def _batch_norm_train(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    """BatchNormalization in training mode: instance normalization's derivative with the batch axis
    normalised too (the batch's own mean and variance; the running statistics it also returns take no
    part in Y).  The batch statistics come from a normalize kernel run in the backward."""
    assert isinstance(op, BatchNormTrainOp)
    x, scale, bias = op.inputs[0], op.inputs[1], op.inputs[2]
    t = type_of(x)
    axes = (0, *range(2, t.rank))
    stash = "f64" if t.elem.name == "f64" else "f32"
    stats = AxesTensorType(stash, kept_type(t, axes).axes)
    moments = NormalizeOp([x], [t, stats, stats], f"{node}.grad", axes=axes, epsilon=op.param("epsilon"),
                          channel_axis=-1, stash={"f64": "float64", "f32": "float32"}[stash], stats=1)  # fmt: skip
    b.emit(moments)
    _normalized(b, (x, scale, bias), g, (moments.outputs[1], moments.outputs[2]), axes, 1, node)


def _normalized(
    b: Backward,
    operands: tuple[SSAValue, SSAValue | None, SSAValue | None],
    g: SSAValue,
    statistics: tuple[SSAValue, SSAValue],
    axes: tuple[int, ...],
    channel: int,
    node: str,
) -> None:
    """What x, scale and bias receive from g, given the mean and r of x over `axes` (kept at extent 1);
    scale and bias broadcast numpy-style (`channel` -1) or are 1-D along `channel`."""
    x, scale, bias = operands
    mean, r = statistics
    t = type_of(x)
    o = Expr.operand
    xhat = b.zip([x, mean, r], ((o(0).cast(type_of(r).elem.name) - o(1)) * o(2)).cast(t.elem.name), t, f"{node}.grad")

    def send_summed(param: SSAValue, grad: SSAValue) -> None:
        summed = b.unbroadcast(grad, _broadcast_type(t, type_of(param), channel), node)
        b.send(param, summed if channel < 0 else b.emit(RegroupOp(summed, type_of(param), f"{node}.grad")))

    if bias is not None and bias in b.needed:
        send_summed(bias, g)
    if scale is not None and scale in b.needed:
        send_summed(scale, b.zip([g, xhat], o(0) * o(1), t, f"{node}.grad"))
    if x not in b.needed:
        return
    if scale is not None and channel >= 0:  # [C] along the channel axis: [C, 1, ...] broadcasts
        scale = b.emit(RegroupOp(scale, _broadcast_type(t, type_of(scale), channel), f"{node}.grad"))
    dxhat = g if scale is None else b.zip([g, scale], o(0) * o(1), t, f"{node}.grad")
    moments = []
    for value in (dxhat, b.zip([dxhat, xhat], o(0) * o(1), t, f"{node}.grad")):
        reduce = ReduceOp([value], [kept_type(t, axes)], f"{node}.grad", kind="mean", axes=axes, keepdims=1)
        moments.append(b.emit(reduce))
    expr = o(0).cast(t.elem.name) * (o(1) - o(2) - o(3) * o(4))
    b.send(x, b.zip([r, dxhat, moments[0], xhat, moments[1]], expr, t, f"{node}.grad"))


def _broadcast_type(t: AxesTensorType, param: AxesTensorType, channel: int) -> AxesTensorType:
    """A scale's or bias's type as it broadcasts onto x: itself (layer norm), or [C, 1, ...] from the channel
    axis on (instance norm's 1-D parameter)."""
    if channel < 0:
        return param
    return AxesTensorType(param.elem, [t.axes[channel], *(Axis.named("Unit", 1) for _ in t.axes[channel + 1 :])])


def _statistics(b: Backward, op: NormalizeOp, node: str) -> tuple[SSAValue, SSAValue]:
    """The mean and 1 / sqrt(var + epsilon) of `op`'s normalised axes: its own results, once the forward
    op is one that returns them too, else a normalize kernel run again in the backward."""
    if op.param("stats"):
        return op.outputs[1], op.outputs[2]
    t = type_of(op.inputs[0])
    stats = AxesTensorType(_STASH[str(op.param("stash"))], kept_type(t, tuple(op.param("axes"))).axes)  # type: ignore[call-overload]
    with_stats = with_more_results(b, op, [type_of(op.outputs[0]), stats, stats], node, stats=1)
    return with_stats.outputs[1], with_stats.outputs[2]


CLAUSES = {NormalizeOp: _normalize, BatchNormTrainOp: _batch_norm_train}
