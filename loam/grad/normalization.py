"""The grad clause of `kernel.normalize` as layer normalization (scale and bias broadcast numpy-style).

With x^ = (x - mean) * r, r = 1 / sqrt(var + epsilon) over the normalised axes, and y = x^ * scale + bias:

    d bias  = g summed to bias's extents
    d scale = g x^ summed to scale's extents
    d x     = r (d x^ - mean(d x^) - x^ mean(d x^ x^)),   d x^ = g scale,  means over the normalised axes

x^ and r come from the normalize kernel run again with its statistics (`stats`, no scale or bias), in the
forward's stash type; the clause recomputes them rather than keeping the forward's.  Instance
normalization (scale and bias along a channel axis) has no clause yet and is refused.
"""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from loam.dialects.expr import Expr
from loam.dialects.kernel import NormalizeOp, ReduceOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.grad.base import Backward, kept_type, refuse, type_of

_STASH = {"float32": "f32", "float64": "f64"}


def _normalize(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, NormalizeOp)
    if op.param("channel_axis") != -1:
        raise refuse(op, "no grad clause for instance normalization yet")
    x, scale, bias = (op.inputs[k] if k < len(op.inputs) else None for k in range(3))
    assert x is not None
    t = type_of(x)
    axes = tuple(op.param("axes"))  # type: ignore[call-overload]
    stats = AxesTensorType(_STASH[str(op.param("stash"))], kept_type(t, axes).axes)
    again = NormalizeOp([x], [t, stats, stats], f"{node}.grad", **{**op.params, "stats": 1})
    b.emit(again)
    xhat, r = again.outputs[0], again.outputs[2]
    o = Expr.operand
    if bias is not None and bias in b.needed:
        b.send(bias, b.unbroadcast(g, type_of(bias), node))
    if scale is not None and scale in b.needed:
        b.send(scale, b.unbroadcast(b.zip([g, xhat], o(0) * o(1), t, f"{node}.grad"), type_of(scale), node))
    if x not in b.needed:
        return
    dxhat = g if scale is None else b.zip([g, scale], o(0) * o(1), t, f"{node}.grad")
    moments = []
    for value in (dxhat, b.zip([dxhat, xhat], o(0) * o(1), t, f"{node}.grad")):
        reduce = ReduceOp([value], [kept_type(t, axes)], f"{node}.grad", kind="mean", axes=axes, keepdims=1)
        moments.append(b.emit(reduce))
    expr = o(0).cast(t.elem.name) * (o(1) - o(2) - o(3) * o(4))
    b.send(x, b.zip([r, dxhat, moments[0], xhat, moments[1]], expr, t, f"{node}.grad"))


CLAUSES = {NormalizeOp: _normalize}
