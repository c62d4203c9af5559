"""What `stablehlo.convolution`, `stablehlo.reduce_window` and `stablehlo.select_and_scatter` become:
ONNX `Conv`, pooling, and the gradient of max pooling.

JAX writes images channels-last (flax's NHWC input, HWIO kernel); ONNX's `Conv`, `MaxPool` and
friends read channels-first (NCHW, OIHW).  So the operands are transposed into ONNX's layout, the
node computes, and its result is transposed back into the layout StableHLO names; a layout that is
ONNX's already costs nothing.

    convolution                       Conv (strides, pads, dilations, group), Transposes around it
    reduce_window, body maximum       MaxPool (padding reads as -inf, as the init value -inf does)
    reduce_window, body minimum       Neg(MaxPool(Neg))
    reduce_window, body add           a depthwise Conv with a kernel of ones: the window's exact sum
                                      (zero padding, as the init value 0 pads); avg_pool divides after
    select_and_scatter, select GE     per window tap (row-major): a strided Slice of the operand, the
      (GT, LE, LT), scatter add       select's compare with the element kept so far and Where keeping
                                      it or the tap (and the tap's number); then ScatterElements
                                      (reduction add) of the source at the picked taps into the init
                                      value, along the window dims flattened

select_and_scatter is `jax.grad` of max pooling.  Its select region keeps the element it has while
`select(kept, next)` holds, over each window in row-major order: GE keeps the first maximum, GT the
last, LE and LT the first and last minimum; a NaN is kept only while no later element follows it
(GE of NaN is false), exactly as the StableHLO interpreter runs it.  Padding is never picked (the
interpreter skips it; JAX pads with -inf itself, a `stablehlo.pad` before the op, and slices the
result after), and a window of padding alone scatters nothing.  Every element then holds
`init_value` plus the source elements of the windows that picked it: overlapping windows (strides
smaller than the window) may pick one element twice, and both add.  The taps are unrolled, one
Slice, compare and two Wheres each, so a window has at most `MAX_TAPS` of them.

Refused by name: a convolution with batch_group_count > 1, lhs dilation (a transposed
convolution), window reversal or negative padding; a reduce_window of several operands, with
another body, base dilations, negative padding, padding with an init value that is not the
body's identity, or windows over more than three dims or beside more than two others; a
select_and_scatter whose select region is not one compare GE, GT, LE or LT of its two arguments
(or a TOTALORDER one), whose scatter region is not one add of its two arguments, over booleans,
with an extent only the run knows, or with windows of more than `MAX_TAPS` elements.
The rules register themselves in `loam.frontends.stablehlo_rules.RULES` when this module is imported
(`loam.frontends.stablehlo_ops` imports it).
"""

from __future__ import annotations

import itertools

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64
from xdsl.ir import Block, Operation, SSAValue

from loam.core.dtypes import by_name
from loam.dialects import stablehlo as hlo
from loam.frontends.stablehlo_broadcast import elementwise_result, full
from loam.frontends.stablehlo_builder import GraphBuilder, LoweringError, Operand, ints_attr, spell_shape
from loam.frontends.stablehlo_reductions import reduction_body, reduction_identity
from loam.frontends.stablehlo_rules import result_of, rule


def _transposed(b: GraphBuilder, value: SSAValue, perm: list[int], what: str) -> SSAValue:
    if perm == sorted(perm):
        return value
    return b.node("Transpose", [value], {"perm": ints_attr(perm)}, what=what)


def _inverse(perm: list[int]) -> list[int]:
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return inverse


@rule(hlo.ConvolutionOp)
def _convolution(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.ConvolutionOp)
    shape, elem = result_of(op)
    lhs, rhs = xs
    if not elem.is_float or lhs.elem != elem or rhs.elem != elem:
        raise LoweringError(
            f"a convolution of {lhs.elem.name} and {rhs.elem.name} into {elem.name} (floats of one type only)"
        )
    if (groups := op.batch_group_count.value.data) != 1:
        raise LoweringError(f"batch_group_count = {groups} has no ONNX counterpart (only 1 is supported)")
    if any(d != 1 for d in op.window("lhs_dilation")):
        raise LoweringError(
            f"lhs_dilate = {list(op.window('lhs_dilation'))} (a transposed convolution) is not supported"
        )
    if any(op.reversed_dims()):
        raise LoweringError(f"window reversal {list(op.reversed_dims())} is not supported")
    pads = op.padding_pairs()
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        raise LoweringError(f"negative padding {pads} is not supported")
    if op.spatial_rank == 0:
        raise LoweringError("a convolution without spatial dims is not supported")
    numbers = op.dimension_numbers
    lb, lf, ls = numbers.positions("lhs", "b", "f")
    ro, ri, rs = numbers.positions("rhs", "o", "i")
    ob, of, os = numbers.positions("out", "b", "f")
    x = _transposed(b, full(b, lhs), [lb, lf, *ls], "lhs_nchw")
    w = _transposed(b, full(b, rhs), [ro, ri, *rs], "rhs_oihw")
    attrs = {
        "strides": ints_attr(list(op.window("window_strides"))),
        "pads": ints_attr([lo for lo, _ in pads] + [hi for _, hi in pads]),
        "dilations": ints_attr(list(op.window("rhs_dilation"))),
        "group": IntegerAttr(op.feature_group_count.value.data, i64),
    }
    y = b.node("Conv", [x, w], attrs, what="conv")
    onnx_axis = {ob: 0, of: 1, **{d: 2 + j for j, d in enumerate(os)}}
    value = _transposed(b, y, [onnx_axis[k] for k in range(len(shape))], "nhwc")
    return [Operand(value, shape, elem)]


_POOLING: dict[type[Operation], str] = {hlo.MaximumOp: "ReduceMax", hlo.MinimumOp: "ReduceMin", hlo.AddOp: "ReduceSum"}
_JOIN = {"ReduceMax": "Max", "ReduceMin": "Min", "ReduceSum": "Add"}


@rule(hlo.ReduceWindowOp)
def _reduce_window(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.ReduceWindowOp)
    if len(op.outs) != 1:
        raise LoweringError(f"a reduce_window of {len(op.outs)} operands at once is not supported")
    _, reduction = reduction_body(
        op.body.block, _POOLING, "stablehlo.maximum, minimum or add (max, min and sum pooling)"
    )
    shape, elem = result_of(op)
    x, init = xs
    if not elem.is_float:
        raise LoweringError(f"a reduce_window over {elem.name} is not supported (floats only)")
    window, strides = list(op.window("window_dimensions")), list(op.window("window_strides"))
    dilations, pads = list(op.window("window_dilations")), op.padding_pairs()
    if any(d != 1 for d in op.window("base_dilations")):
        raise LoweringError(f"base_dilations = {list(op.window('base_dilations'))} is not supported")
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        raise LoweringError(f"negative padding {pads} is not supported")
    identity = init.known is not None and bool(np.all(init.known == reduction_identity(reduction, elem)))
    if not identity and any(p != (0, 0) for p in pads):
        raise LoweringError("padding with an init value that is not the body's identity is not supported")
    rank = len(shape)
    spatial = [d for d in range(rank) if window[d] != 1 or strides[d] != 1 or pads[d] != (0, 0)]
    outer = [d for d in range(rank) if d not in spatial]
    if not spatial:
        value, held = full(b, x), [x]
    else:
        if len(spatial) > 3 or len(outer) > 2:
            raise LoweringError(
                f"windows over dims {spatial} beside dims {outer}: ONNX pools over at most 3 dims beside 2"
            )
        perm = [*outer, *spatial]
        value = _transposed(b, full(b, x), perm, "nchw")
        if len(outer) < 2:
            value = b.node("Unsqueeze", [value, b.ints(range(2 - len(outer)), "axes")], what="nc")
        kernel_shape = [window[d] for d in spatial]
        attrs = {
            "kernel_shape": ints_attr(kernel_shape),
            "strides": ints_attr([strides[d] for d in spatial]),
            "pads": ints_attr([pads[d][0] for d in spatial] + [pads[d][1] for d in spatial]),
            "dilations": ints_attr([dilations[d] for d in spatial]),
        }
        if reduction == "ReduceMax":
            value = b.node("MaxPool", [value], attrs, what="pool")
        elif reduction == "ReduceMin":
            negated = b.node("Neg", [value], what="negated")
            value = b.node("Neg", [b.node("MaxPool", [negated], attrs, what="pool")], what="pooled")
        else:
            channels = x.shape[outer[-1]] if outer else 1  # ONNX's C: the last of the other dims
            if channels is None:
                raise LoweringError(f"a sum over windows needs a static extent of dim {outer[-1]}")
            kernel = b.constant(np.ones((channels, 1, *kernel_shape)), elem, "ones")
            summing = {**attrs, "group": IntegerAttr(channels, i64)}
            value = b.node("Conv", [value, kernel], summing, what="sum")
        if len(outer) < 2:
            value = b.node("Squeeze", [value, b.ints(range(2 - len(outer)), "squeeze_axes")], what="squeezed")
        value = _transposed(b, value, _inverse(perm), "back")
        held = [Operand(value, shape, elem)]
    if identity:
        return [elementwise_result(value, held, shape, elem)]
    combined = b.node(_JOIN[reduction], [value, init.value], what="init")
    return [elementwise_result(combined, [*held, init], shape, elem)]


MAX_TAPS = 64
"""The most elements a select_and_scatter window may hold: each is unrolled into a few nodes."""

_SELECTS = {"GE": "GreaterOrEqual", "GT": "Greater", "LE": "LessOrEqual", "LT": "Less"}
_MIRRORED = {"GE": "LE", "GT": "LT", "LE": "GE", "LT": "GT"}  # compare(next, kept) as compare(kept, next)


def _computes(block: Block) -> str:
    return ", ".join(o.name for o in list(block.ops)[:-1]) or "nothing"


def _select_direction(block: Block, elem_name: str) -> str:
    """The direction of `compare(kept, next)` the select region computes, or a LoweringError naming it."""
    body = list(block.ops)
    compare = body[0] if len(body) == 2 else None
    args = tuple(block.args)
    if (
        not isinstance(compare, hlo.CompareOp)
        or not isinstance(body[1], hlo.ReturnOp)
        or tuple(body[1].values) != tuple(compare.results)
        or set(compare.operands) != set(args)
        or len(args) != 2
    ):
        raise LoweringError(
            f"its select region computes {_computes(block)}; Loam reads one stablehlo.compare "
            "GE, GT, LE or LT of its two arguments"
        )
    direction = compare.comparison_direction.text
    if direction not in _SELECTS:
        raise LoweringError(
            f"its select region compares {direction}; Loam reads GE, GT, LE or LT (a first or last maximum or minimum)"
        )
    kind = compare.compare_type.text if compare.compare_type is not None else None
    if kind == "TOTALORDER":
        raise LoweringError("its select region compares in TOTALORDER (NaNs ordered), which has no ONNX counterpart")
    if kind == "UNSIGNED" and not elem_name.startswith("ui"):
        raise LoweringError(f"its select region compares {elem_name} UNSIGNED, which has no ONNX counterpart")
    return direction if tuple(compare.operands) == args else _MIRRORED[direction]


def _scatter_is_add(block: Block) -> None:
    body = list(block.ops)
    add = body[0] if len(body) == 2 else None
    if (
        not isinstance(add, hlo.AddOp)
        or not isinstance(body[1], hlo.ReturnOp)
        or tuple(body[1].values) != tuple(add.results)
        or set(add.operands) != set(block.args)
        or len(block.args) != 2
    ):
        raise LoweringError(
            f"its scatter region computes {_computes(block)}; Loam reads one stablehlo.add of its two arguments"
        )


@rule(hlo.SelectAndScatterOp)
def _select_and_scatter(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.SelectAndScatterOp)
    shape, elem = result_of(op)
    x, source, init = xs
    compare = _SELECTS[_select_direction(op.select.block, elem.name)]
    _scatter_is_add(op.scatter.block)
    if elem.name == "bool":
        raise LoweringError("a select_and_scatter of booleans is not supported (its add has no ONNX counterpart)")
    if None in x.shape or None in source.shape:
        raise LoweringError(
            f"a select_and_scatter of {spell_shape(x.shape)} into {spell_shape(source.shape)} windows: "
            "the extents must be static"
        )
    rank = len(shape)
    window, strides = op.window("window_dimensions"), op.window("window_strides")
    pads = op.padding_pairs()
    extents = [int(e) for e in x.shape if e is not None]
    out = [int(e) for e in source.shape if e is not None]
    if 0 in out or 0 in extents:  # no window, or nothing to pick: init everywhere
        return [Operand(init.value, shape, elem, (), None, init.known)]
    # The dims a window moves along; on the others each window reads the element at its own place.
    spatial = [d for d in range(rank) if window[d] != 1 or strides[d] != 1 or pads[d] != (0, 0)]
    taps = list(itertools.product(*(range(window[d]) for d in spatial)))  # row-major over the window
    if len(taps) > MAX_TAPS:
        raise LoweringError(f"a window of {len(taps)} elements; Loam unrolls at most {MAX_TAPS}")
    grid = [out[d] if d in spatial else 1 for d in range(rank)]

    def inside(offsets: tuple[int, ...]) -> np.ndarray:
        """Which windows' tap at `offsets` lies in the operand, not in its padding: shaped `grid`."""
        mask = np.ones(grid, dtype=bool)
        for d, w in zip(spatial, offsets, strict=True):
            at = np.arange(out[d]) * strides[d] + w - pads[d][0]
            mask &= ((at >= 0) & (at < extents[d])).reshape([-1 if k == d else 1 for k in range(rank)])
        return mask

    padded = full(b, x)
    if any(p != (0, 0) for p in pads):  # never picked: any value will do
        widths = b.ints([lo for lo, _ in pads] + [hi for _, hi in pads], "pads")
        padded = b.node("Pad", [padded, widths, b.constant(np.array(0), elem, "zero")], what="padded")
    axes, steps = b.ints(spatial, "axes"), b.ints([strides[d] for d in spatial], "steps")
    # Tap numbers and positions in i32 where they fit: the WGSL backend scatters with i32 indices only.
    index = by_name("i32" if int(np.prod(extents, dtype=np.int64)) < 2**31 else "i64")
    kept: SSAValue | None = None  # the element each window keeps so far, and its tap's number
    tap: SSAValue | None = None
    seen = np.zeros(grid, dtype=bool)  # the windows that have read a tap inside the operand
    for t, offsets in enumerate(taps):
        mask = inside(offsets)
        if not mask.any():
            continue
        starts = b.ints(list(offsets), f"starts{t}")
        ends = b.ints([w + (out[d] - 1) * strides[d] + 1 for d, w in zip(spatial, offsets, strict=True)], f"ends{t}")
        value = b.node("Slice", [padded, starts, ends, axes, steps], what=f"tap{t}")
        number = b.constant(np.array(t), index, f"number{t}")
        if kept is None or tap is None:
            kept = value
            tap = number if mask.all() else b.constant(np.where(mask, t, -1), index, f"first{t}")
            seen = mask
            continue
        first, later = mask & ~seen, mask & seen  # windows this tap starts, and those it competes in
        take: SSAValue | None = None  # None: every window takes this tap
        if later.any():
            stays = b.node(compare, [kept, value], what=f"stays{t}")
            take = b.node("Not", [stays], what=f"moves{t}")
            if not later.all():
                take = b.node("And", [b.constant(later, by_name("bool"), f"competes{t}"), take], what=f"moves{t}_in")
            if first.any():
                take = b.node("Or", [b.constant(first, by_name("bool"), f"starts{t}"), take], what=f"takes{t}")
        elif not first.all():
            take = b.constant(first, by_name("bool"), f"takes{t}")
        if take is None:
            kept, tap = value, number
        else:
            kept = b.node("Where", [take, value, kept], what=f"kept{t}")
            tap = b.node("Where", [take, number, tap], what=f"picked{t}")
        seen = seen | mask
    assert tap is not None
    # Where each window's pick lies in the operand, its window dims flattened (row-major).
    pitch = [1] * len(spatial)
    for k in range(len(spatial) - 2, -1, -1):
        pitch[k] = pitch[k + 1] * extents[spatial[k + 1]]
    positions = np.array([sum(w * p for w, p in zip(o, pitch, strict=True)) for o in taps], dtype=np.int64)
    base = np.zeros(grid, dtype=np.int64)
    for d, p in zip(spatial, pitch, strict=True):
        at = (np.arange(out[d]) * strides[d] - pads[d][0]) * p
        base = base + at.reshape([-1 if k == d else 1 for k in range(rank)])
    table = b.constant(positions, index, "offsets")
    picked = b.node("Gather", [table, tap], {"axis": IntegerAttr(0, i64)}, what="offset")
    where = b.node("Add", [b.constant(base, index, "base"), picked], what="position")
    updates = full(b, source)
    if not seen.all():  # a window of padding alone scatters nothing: 0 added to the first element
        read = b.constant(seen, by_name("bool"), "read")
        where = b.node("Where", [read, where, b.constant(np.array(0), index, "origin")], what="placed")
        updates = b.node("Where", [read, updates, b.constant(np.array(0), elem, "nothing")], what="updates")
    where = b.node("Expand", [where, b.ints(out, "windows")], what="positions")
    # The scatter runs along the window dims flattened, between the dims before and after them.
    outer = [d for d in range(rank) if d not in spatial]
    contiguous = spatial == list(range(spatial[0], spatial[-1] + 1))
    perm = list(range(rank)) if contiguous else [*outer, *spatial]
    before = [d for d in perm[: perm.index(spatial[0])]]
    after = [d for d in perm[perm.index(spatial[-1]) + 1 :]]

    def extent(dims: list[int], of: list[int]) -> int:
        return int(np.prod([of[d] for d in dims], dtype=np.int64))

    lines = [extent(before, extents), extent(spatial, out), extent(after, extents)]
    updates = b.node("Reshape", [_transposed(b, updates, perm, "updates_t"), b.ints(lines, "lines")], what="flat")
    where = b.node("Reshape", [_transposed(b, where, perm, "positions_t"), b.ints(lines, "lines")], what="flat_at")
    room = [lines[0], extent(spatial, extents), lines[2]]
    data = b.node("Expand", [init.value, b.ints(room, "room")], what="init")
    attrs = {"axis": IntegerAttr(1, i64), "reduction": StringAttr("add")}
    y = b.node("ScatterElements", [data, where, updates], attrs, what="scatter")
    y = b.node("Reshape", [y, b.ints([extents[d] for d in perm], "shape")], what="result")
    return [Operand(_transposed(b, y, _inverse(perm), "back"), shape, elem)]
