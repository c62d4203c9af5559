"""The rules of StableHLO's constants and data-movement ops: values made, reshaped, reordered, cut and padded.

    constant                                  Constant (a splat: its one element), or an embedded
                                              initializer (a weight carrying data)
    broadcast_in_dim (and dynamic_)           nothing, an Unsqueeze or a Transpose (kept lazy:
                                              `loam.frontends.stablehlo_broadcast`)
    reshape (and dynamic_), transpose         Reshape, Transpose
    concatenate, slice                        Concat, Slice
    iota (and dynamic_)                       Range (+ Unsqueeze)
    reverse, pad                              Slice (step -1); Pad and Slice (+ Reshape for
                                              interior padding)
    get_dimension_size                        Shape + Reshape + Cast

The rules register themselves in `loam.frontends.stablehlo_rules.RULES` when this module is imported.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
from xdsl.ir import Operation

from loam.core.dtypes import ElementType, by_name
from loam.dialects import stablehlo as hlo
from loam.frontends.stablehlo_broadcast import as_i64, broadcast_to, full
from loam.frontends.stablehlo_builder import Dim, GraphBuilder, LoweringError, Operand, int_attr, ints_attr
from loam.frontends.stablehlo_rules import result_of, rule

__all__ = ["dense_array"]


@rule(hlo.ConstantOp)
def _constant(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.ConstantOp)
    shape, elem = result_of(op)
    array = dense_array(op.value, elem)
    flat = array.reshape(-1)
    if flat.size and flat.tobytes() == flat[:1].tobytes() * flat.size:
        scalar = flat[:1].reshape(())  # a splat: one element, broadcast where it is read
        value = b.constant(scalar, elem)
        if not shape:
            return [Operand(value, shape, elem, known=scalar)]
        return [Operand(value, shape, elem, (), None, scalar)]
    if elem.is_float:
        return [Operand(b.weight(array, elem), shape, elem, known=array)]
    return [Operand(b.constant(array, elem), shape, elem, known=array)]


def dense_array(attr: DenseIntOrFPElementsAttr, elem: ElementType) -> np.ndarray:
    """The contents of a `dense<...>` literal as a numpy array of `elem`."""
    values = attr.get_values()
    shape = tuple(attr.get_shape())
    if elem.name == "bool":
        return np.array([v != 0 for v in values], dtype=np.bool_).reshape(shape)
    return np.array(values, dtype=np.float64 if elem.is_float else object).astype(elem.numpy).reshape(shape)


@rule(hlo.BroadcastInDimOp, hlo.DynamicBroadcastInDimOp)
def _broadcast(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.BroadcastInDimOp | hlo.DynamicBroadcastInDimOp)
    shape, _ = result_of(op)
    target = None
    if isinstance(op, hlo.DynamicBroadcastInDimOp) and None in shape:
        target = as_i64(b, xs[1])
    return [broadcast_to(b, xs[0], op.dims, shape, target)]


@rule(hlo.ReshapeOp, hlo.DynamicReshapeOp)
def _reshape(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = result_of(op)
    x = xs[0]
    if x.held_shape == () and x.actual is not None:  # a broadcast scalar stays one
        target = as_i64(b, xs[1]) if isinstance(op, hlo.DynamicReshapeOp) and None in shape else None
        return [Operand(x.value, shape, elem, (), target, x.known)]
    if isinstance(op, hlo.DynamicReshapeOp):
        target, zero = as_i64(b, xs[1]), True
    else:
        static = [d for d in shape if d is not None]
        target, zero = b.ints(static, "shape"), 0 in static
    attrs = {"allowzero": int_attr(1)} if zero else {}  # StableHLO's extents are literal: a 0 is a 0
    extents = [d for d in shape if d is not None]
    known = None if x.known is None or len(extents) < len(shape) else x.known.reshape(extents)
    return [Operand(b.node("Reshape", [full(b, x), target], attrs), shape, elem, known=known)]


@rule(hlo.TransposeOp)
def _transpose(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.TransposeOp)
    shape, elem = result_of(op)
    x = xs[0]
    if x.held_shape == () and x.actual is not None:
        return [Operand(x.value, shape, elem, (), x.target, x.known)]
    perm = list(op.perm)
    known = None if x.known is None or x.actual is not None else x.known.transpose(perm)
    return [Operand(b.node("Transpose", [full(b, x)], {"perm": ints_attr(perm)}), shape, elem, known=known)]


def _known_in_full(x: Operand) -> np.ndarray:
    """The contents of a constant `x` in its whole StableHLO shape, which is static."""
    extents = [d for d in x.shape if d is not None]
    assert x.known is not None and len(extents) == len(x.shape)
    return np.broadcast_to(x.known, extents)


@rule(hlo.ConcatenateOp)
def _concatenate(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.ConcatenateOp)
    shape, elem = result_of(op)
    known = None
    if all(x.known is not None for x in xs) and None not in shape:
        known = np.concatenate([_known_in_full(x) for x in xs], axis=op.dim)
    value = b.node("Concat", [full(b, x) for x in xs], {"axis": int_attr(op.dim)})
    return [Operand(value, shape, elem, known=known)]


@rule(hlo.SliceOp)
def _slice(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.SliceOp)
    shape, elem = result_of(op)
    x = xs[0]
    ranges = op.ranges
    if all(a == 0 and c == 1 and n == e for (a, n, c), e in zip(ranges, x.shape, strict=True)):
        return [x]
    starts = b.ints([a for a, _, _ in ranges], "starts")
    ends = b.ints([n for _, n, _ in ranges], "ends")
    axes = b.ints(range(len(ranges)), "axes")
    steps = b.ints([c for _, _, c in ranges], "steps")
    return [Operand(b.node("Slice", [full(b, x), starts, ends, axes, steps]), shape, elem)]


@rule(hlo.ReverseOp)
def _reverse(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """Slice with step -1 from the last element along each reversed dim."""
    assert isinstance(op, hlo.ReverseOp)
    shape, elem = result_of(op)
    dims = [d for d in op.dims if shape[d] != 1]
    if not dims:
        return [xs[0]]
    n = len(dims)
    starts, ends = b.ints([-1] * n, "starts"), b.ints([np.iinfo(np.int64).min] * n, "ends")
    steps = b.ints([-1] * n, "steps")
    return [Operand(b.node("Slice", [full(b, xs[0]), starts, ends, b.ints(dims, "axes"), steps]), shape, elem)]


@rule(hlo.PadOp)
def _pad(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """Interior padding per dim first (the dim unsqueezed, padded after its new unit axis, merged back
    and the padding after the last element cut off), then one Pad for the positive edge widths and
    one Slice for the negative ones (the elements they cut off)."""
    assert isinstance(op, hlo.PadOp)
    shape, elem = result_of(op)
    x, value = xs
    fill = full(b, value)
    current = full(b, x)
    extents: list[Dim] = list(x.shape)
    rank = len(extents)
    for d, (_, _, inner) in enumerate(op.widths):
        n = extents[d]
        if inner == 0 or n in (0, 1):
            continue
        if any(e is None for e in extents[d + 1 :]):
            raise LoweringError(f"interior padding of dim {d} before a dim of unknown extent is not supported")
        spread = b.node("Unsqueeze", [current, b.ints([d + 1], "axes")], what=f"spread{d}")
        pads = [0] * (2 * (rank + 1))
        pads[rank + 1 + d + 1] = inner
        spread = b.node("Pad", [spread, b.ints(pads, "pads"), fill], what=f"interior{d}")
        merged = [0] * d + [-1] + [e for e in extents[d + 1 :] if e is not None]
        current = b.node("Reshape", [spread, b.ints(merged, "shape")], what=f"merged{d}")
        end = -inner
        current = b.node(
            "Slice", [current, b.ints([0], "starts"), b.ints([end], "ends"), b.ints([d], "axes")], what=f"trim{d}"
        )
        extents[d] = None if n is None else n + (n - 1) * inner
    lows, highs = [w[0] for w in op.widths], [w[1] for w in op.widths]
    if any(w > 0 for w in lows + highs):
        pads = [max(w, 0) for w in lows] + [max(w, 0) for w in highs]
        current = b.node("Pad", [current, b.ints(pads, "pads"), fill], what="edges")
    cut = [d for d in range(rank) if lows[d] < 0 or highs[d] < 0]
    if cut:
        starts = b.ints([-min(lows[d], 0) for d in cut], "starts")
        ends = b.ints([highs[d] if highs[d] < 0 else np.iinfo(np.int64).max for d in cut], "ends")
        current = b.node("Slice", [current, starts, ends, b.ints(cut, "axes")], what="cut")
    return [Operand(current, shape, elem)]


@rule(hlo.IotaOp, hlo.DynamicIotaOp)
def _iota(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.IotaOp | hlo.DynamicIotaOp)
    shape, elem = result_of(op)
    counting = elem if elem.name in ("f32", "f64", "f16", "bf16", "i16", "i32", "i64") else by_name("i64")
    extent = shape[op.dim]
    target = None
    if isinstance(op, hlo.DynamicIotaOp) and None in shape:
        target = as_i64(b, xs[0])
    if extent is None:
        assert target is not None
        index = b.constant(np.array(op.dim, dtype=np.int64), by_name("i64"), "dim")
        limit = b.node("Gather", [target, index], {"axis": int_attr(0)}, what="extent")
        if counting.name != "i64":
            limit = b.node("Cast", [limit], {"to": int_attr(counting.onnx)}, what="extent_cast")
    else:
        limit = b.constant(np.array(extent), counting, "limit")
    start = b.constant(np.array(0), counting, "start")
    delta = b.constant(np.array(1), counting, "delta")
    value = b.node("Range", [start, limit, delta])
    if counting != elem:
        value = b.node("Cast", [value], {"to": int_attr(elem.onnx)}, what="cast")
    counted = Operand(value, (extent,), elem)
    return [broadcast_to(b, counted, [op.dim], shape, target)]


@rule(hlo.GetDimensionSizeOp)
def _dimension_size(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.GetDimensionSizeOp)
    shape, elem = result_of(op)
    x = xs[0]
    if x.shape[op.dim] is not None:
        extent = np.array(x.shape[op.dim])
        return [Operand(b.constant(extent, elem), shape, elem, known=extent.astype(elem.numpy))]
    extents = b.node("Shape", [full(b, x)], {"start": int_attr(op.dim), "end": int_attr(op.dim + 1)}, what="shape")
    scalar = b.node("Reshape", [extents, b.ints([], "scalar")], what="scalar")
    return [Operand(b.node("Cast", [scalar], {"to": int_attr(elem.onnx)}), shape, elem)]
