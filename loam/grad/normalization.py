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
from loam.dialects.kernel import (
    BatchNormTrainOp,
    GroupNormOp,
    LrnOp,
    NormalizeOp,
    PadOp,
    ReduceOp,
    RegroupOp,
    ZipOp,
)
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, Clause, cut, kept_type, refuse, type_of, with_more_results

_STASH = {"float32": "f32", "float64": "f64"}


def _normalize(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, NormalizeOp)
    x, scale, bias = (op.inputs[k] if k < len(op.inputs) else None for k in range(3))
    assert x is not None
    axes = tuple(op.param("axes"))
    mean, r = _statistics(b, op, node)
    _normalized(b, (x, scale, bias), g, (mean, r), axes, int(op.param("channel_axis")), node)


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
    b.send(x, _input_share(b, r, dxhat, xhat, axes, node))


def _input_share(
    b: Backward, r: SSAValue, dxhat: SSAValue, xhat: SSAValue, axes: tuple[int, ...], node: str
) -> SSAValue:
    """r (d x^ - mean(d x^) - x^ mean(d x^ x^)), the means over `axes`: what x receives through x^."""
    t = type_of(xhat)
    o = Expr.operand
    moments = []
    for value in (dxhat, b.zip([dxhat, xhat], o(0) * o(1), t, f"{node}.grad")):
        reduce = ReduceOp([value], [kept_type(t, axes)], f"{node}.grad", kind="mean", axes=axes, keepdims=1)
        moments.append(b.emit(reduce))
    expr = o(0).cast(t.elem.name) * (o(1) - o(2) - o(3) * o(4))
    return b.zip([r, dxhat, moments[0], xhat, moments[1]], expr, t, f"{node}.grad")


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
    stats = AxesTensorType(_STASH[str(op.param("stash"))], kept_type(t, tuple(op.param("axes"))).axes)
    with_stats = with_more_results(b, op, [type_of(op.outputs[0]), stats, stats], node, stats=1)
    return with_stats.outputs[1], with_stats.outputs[2]


def _group_norm(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    """GroupNormalization: instance normalization's derivative over x regrouped to [N, G, C / G, ...], each
    group normalised over its channels and the spatial axes; scale and bias per channel ([G, C / G, 1, ...]
    there) or per group ([G, 1, ...])."""
    assert isinstance(op, GroupNormOp)
    x, scale, bias = op.inputs[0], op.inputs[1], op.inputs[2]
    t = type_of(x)
    if not t.shape[1].is_const:
        raise refuse(op, f"its grad clause needs the channel count known at build time, and it is {t.shape[1]}")
    groups = int(op.param("num_groups"))
    group = Axis.named("Groups", groups)
    spatial = t.axes[2:]
    units = [Axis.named("Unit", 1) for _ in spatial]
    grouped = AxesTensorType(
        t.elem, [t.axes[0], group, Axis.named("GroupChannels", t.shape[1].const_value // groups), *spatial]
    )
    if op.param("per_group"):
        view = AxesTensorType(t.elem, [group, Axis.named("Unit", 1), *units])
    else:
        view = AxesTensorType(t.elem, [*grouped.axes[1:3], *units])
    axes = tuple(range(2, grouped.rank))
    xr, gr = (b.emit(RegroupOp(v, grouped, f"{node}.grad")) for v in (x, g))
    stash = str(op.param("stash"))
    stats = AxesTensorType(_STASH[stash], kept_type(grouped, axes).axes)
    moments = NormalizeOp([xr], [grouped, stats, stats], f"{node}.grad", axes=axes, epsilon=op.param("epsilon"),
                          channel_axis=-1, stash=stash, stats=1)  # fmt: skip
    b.emit(moments)
    mean, r = moments.outputs[1], moments.outputs[2]
    o = Expr.operand
    xhat = b.zip([xr, mean, r], ((o(0).cast(stats.elem.name) - o(1)) * o(2)).cast(t.elem.name), grouped, f"{node}.grad")
    for param, grad in ((bias, gr), (scale, b.zip([gr, xhat], o(0) * o(1), grouped, f"{node}.grad"))):
        if param in b.needed:
            summed = b.unbroadcast(grad, view, node)
            b.send(param, b.emit(RegroupOp(summed, type_of(param), f"{node}.grad")))
    if x in b.needed:
        dxhat = b.zip([gr, b.emit(RegroupOp(scale, view, f"{node}.grad"))], o(0) * o(1), grouped, f"{node}.grad")
        b.send(x, b.emit(RegroupOp(_input_share(b, r, dxhat, xhat, axes, node), t, f"{node}.grad")))


def _lrn(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    """LRN: with s_c = bias + alpha / size * (sum of x_j^2 over c's window) and y = x s^-beta,

        d x_k = g_k s_k^-beta - 2 alpha beta / size * x_k * (sum of g_c x_c s_c^(-beta - 1) over the c whose
                window holds k)

    the windows that hold k being k's own window mirrored (its channels before and after exchanged)."""
    assert isinstance(op, LrnOp)
    x = op.inputs[0]
    t = type_of(x)
    elem = t.elem.name
    size = int(op.param("size"))
    alpha, beta, bias = (float(op.param(k)) for k in ("alpha", "beta", "bias"))
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    o = Expr.operand

    def c(value: float) -> Expr:
        return Expr.const(value, elem)

    squares = _window_sum(b, b.zip([x], o(0) * o(0), t, f"{node}.grad"), before, after, node)
    s = b.zip([squares], c(bias) + c(alpha / size) * o(0), t, f"{node}.grad")
    read = b.zip([g, x, s], o(0) * o(1) * o(2).binary("pow", c(-beta - 1)), t, f"{node}.grad")
    spread = _window_sum(b, read, after, before, node)
    expr = o(0) * o(1).binary("pow", c(-beta)) - c(2 * alpha * beta / size) * o(2) * o(3)
    b.send(x, b.zip([g, s, x, spread], expr, t, f"{node}.grad"))


def _window_sum(b: Backward, value: SSAValue, before: int, after: int, node: str) -> SSAValue:
    """Each channel's sum of `value` over itself, the `before` channels before and the `after` after (zeros
    past the ends): one zip over the shifted slices of `value` padded along axis 1."""
    t = type_of(value)
    pads = [0] * (2 * t.rank)
    pads[1], pads[t.rank + 1] = before, after
    wide = AxesTensorType(t.elem, [t.axes[0], Axis.named("Window", t.shape[1] + before + after), *t.axes[2:]])
    padded = b.emit(PadOp([value], [wide], f"{node}.grad", pads=tuple(pads), mode="constant", value=0.0))
    shifted = []
    for offset in range(before + after + 1):
        shifted.append(cut(b, padded, t, [offset if a == 1 else 0 for a in range(t.rank)], node))
    total = Expr.operand(0)
    for k in range(1, len(shifted)):
        total = total + Expr.operand(k)
    return b.emit(ZipOp(shifted, total, t, f"{node}.grad"))


CLAUSES: dict[type[Operation], Clause] = {
    NormalizeOp: _normalize,
    BatchNormTrainOp: _batch_norm_train,
    GroupNormOp: _group_norm,
    LrnOp: _lrn,
}
