"""Lazy broadcasts: a StableHLO value held as a smaller graph value, expanded only where it must be.

StableHLO spells every broadcast out (`broadcast_in_dim` to the full shape) where ONNX's
elementwise ops broadcast implicitly, right-aligned, as numpy does.  So an `Operand` may stand for
a graph value of a smaller shape that broadcasts to its StableHLO shape; elementwise ops read it
as it is, and any other op (or a function result) first expands it (`Expand`).  A bias added after
a product thus reads the bias itself, as in an ONNX export, and the two front ends reach the same
kernels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.ir import SSAValue

from loam.core.dtypes import ElementType, by_name
from loam.frontends.stablehlo_builder import (
    Dim,
    GraphBuilder,
    LoweringError,
    Operand,
    Shape,
    int_attr,
    ints_attr,
    spell_shape,
)

__all__ = ["as_i64", "broadcast_to", "elementwise_result", "full"]


def full(b: GraphBuilder, x: Operand) -> SSAValue:
    """`x`'s value in its whole StableHLO shape: expanded when it is held smaller."""
    if x.actual is None:
        return x.value
    extents = [d for d in x.shape if d is not None]
    static = len(extents) == len(x.shape)
    if x.known is not None and static and int(np.prod(extents)) <= 16:
        return b.constant(np.broadcast_to(x.known, extents), x.elem, "expanded")
    if static:
        target = b.ints(extents, "shape")
    elif x.target is not None:
        target = x.target
    else:
        raise LoweringError(f"cannot expand a value of shape {spell_shape(x.held_shape)} to {spell_shape(x.shape)}")
    return b.node("Expand", [x.value, target], what="expand")


def _strip(shape: Shape) -> Shape:
    """A shape without its leading 1s (ONNX broadcasting adds them back)."""
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return shape[i:]


def broadcast_to(b: GraphBuilder, x: Operand, dims: Sequence[int], shape: Shape, target: SSAValue | None) -> Operand:
    """`broadcast_in_dim`: x's dim i becomes dim `dims[i]` of `shape`, kept lazy."""
    held = x.held_shape
    rank_in = len(x.shape)
    padded: list[Dim] = [*([1] * (rank_in - len(held))), *held]
    value, held_dims = x.value, list(dims[rank_in - len(held) :])
    known = x.known
    if list(dims) != sorted(dims):  # the operand's dims come in another order: transpose it first
        if len(held) < rank_in:
            value = b.node("Unsqueeze", [value, b.ints(range(rank_in - len(held)), "axes")], what="rank")
            known = None if known is None else known.reshape([1] * (rank_in - len(held)) + list(known.shape))
        perm = sorted(range(rank_in), key=lambda i: dims[i])
        value = b.node("Transpose", [value], {"perm": ints_attr(perm)}, what="order")
        known = None if known is None else known.transpose(perm)
        padded = [padded[p] for p in perm]
        dims = [dims[p] for p in perm]
        held, held_dims = tuple(padded), list(dims)
    placed: list[Dim] = [1] * len(shape)
    for i, d in enumerate(dims):
        placed[d] = padded[i]
    if not held_dims or _strip(tuple(placed)) == _strip(tuple(held)):
        actual = tuple(held)
    else:  # give the value the result's rank from its first dim on: insert the 1s between
        first = held_dims[0]
        axes = [j - first for j in range(first, len(shape)) if j not in held_dims]
        value = b.node("Unsqueeze", [value, b.ints(axes, "axes")], what="align")
        actual = tuple(placed[first:])
        known = None if known is None else known.reshape([1 if d is None else d for d in actual])
    if actual == shape:
        return Operand(value, shape, x.elem, known=known)
    return Operand(value, shape, x.elem, actual, target, known)


def elementwise_result(value: SSAValue, operands: Sequence[Operand], shape: Shape, elem: ElementType) -> Operand:
    """An elementwise op's result: held at the broadcast of its operands' held shapes."""
    held = [o.held_shape for o in operands]
    rank = max((len(h) for h in held), default=0)
    out: list[Dim] = []
    for k in range(rank, 0, -1):
        dims = [h[len(h) - k] if k <= len(h) else 1 for h in held]
        out.append(None if any(d is None for d in dims) else max(d for d in dims if d is not None))
    if tuple(out) == shape:
        return Operand(value, shape, elem)
    target = next((o.target for o in operands if o.target is not None), None)
    return Operand(value, shape, elem, tuple(out), target)


def as_i64(b: GraphBuilder, x: Operand) -> SSAValue:
    value = full(b, x)
    if x.elem.name == "i64":
        return value
    return b.node("Cast", [value], {"to": int_attr(by_name("i64").onnx)}, what="i64")
