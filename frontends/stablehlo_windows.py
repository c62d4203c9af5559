"""What `stablehlo.convolution` and `stablehlo.reduce_window` become: ONNX `Conv` and pooling.

JAX writes images channels-last (flax's NHWC input, HWIO kernel); ONNX's `Conv`, `MaxPool` and
friends read channels-first (NCHW, OIHW).  So the operands are transposed into ONNX's layout, the
node computes, and its result is transposed back into the layout StableHLO names; a layout that is
ONNX's already costs nothing.

    convolution                       Conv (strides, pads, dilations, group), Transposes around it
    reduce_window, body maximum       MaxPool (padding reads as -inf, as the init value -inf does)
    reduce_window, body minimum       Neg(MaxPool(Neg))
    reduce_window, body add           a depthwise Conv with a kernel of ones: the window's exact sum
                                      (zero padding, as the init value 0 pads); avg_pool divides after

Refused by name: a convolution with batch_group_count > 1, lhs dilation (a transposed
convolution), window reversal or negative padding; a reduce_window of several operands, with
another body, base dilations, negative padding, padding with an init value that is not the
body's identity, or windows over more than three dims or beside more than two others.
The rules register themselves in `loam.frontends.stablehlo_ops.RULES` when this module is imported
(the reader, `loam.frontends.stablehlo`, imports it).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import IntAttr, IntegerAttr, i64
from xdsl.ir import Operation, SSAValue

from loam.dialects import stablehlo as hlo
from loam.dialects.graph import ListAttr
from loam.frontends.stablehlo_ops import (
    GraphBuilder,
    LoweringError,
    Operand,
    _elementwise_result,
    _identity,
    _result,
    full,
    reduction_body,
    rule,
)


def _ints(values: list[int]) -> ListAttr:
    return ListAttr("ints", [IntAttr(v) for v in values])


def _transposed(b: GraphBuilder, value: SSAValue, perm: list[int], what: str) -> SSAValue:
    if perm == sorted(perm):
        return value
    return b.node("Transpose", [value], {"perm": _ints(perm)}, what=what)


def _inverse(perm: list[int]) -> list[int]:
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return inverse


@rule(hlo.ConvolutionOp)
def _convolution(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.ConvolutionOp)
    shape, elem = _result(op)
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
        "strides": _ints(list(op.window("window_strides"))),
        "pads": _ints([lo for lo, _ in pads] + [hi for _, hi in pads]),
        "dilations": _ints(list(op.window("rhs_dilation"))),
        "group": IntegerAttr(op.feature_group_count.value.data, i64),
    }
    y = b.node("Conv", [x, w], attrs, what="conv")
    onnx_axis = {ob: 0, of: 1, **{d: 2 + j for j, d in enumerate(os)}}
    value = _transposed(b, y, [onnx_axis[k] for k in range(len(shape))], "nhwc")
    return [Operand(value, shape, elem)]


_POOLING = {hlo.MaximumOp: "ReduceMax", hlo.MinimumOp: "ReduceMin", hlo.AddOp: "ReduceSum"}
_JOIN = {"ReduceMax": "Max", "ReduceMin": "Min", "ReduceSum": "Add"}


@rule(hlo.ReduceWindowOp)
def _reduce_window(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.ReduceWindowOp)
    if len(op.outs) != 1:
        raise LoweringError(f"a reduce_window of {len(op.outs)} operands at once is not supported")
    _, reduction = reduction_body(
        op.body.block, _POOLING, "stablehlo.maximum, minimum or add (max, min and sum pooling)"
    )
    shape, elem = _result(op)
    x, init = xs
    if not elem.is_float:
        raise LoweringError(f"a reduce_window over {elem.name} is not supported (floats only)")
    window, strides = list(op.window("window_dimensions")), list(op.window("window_strides"))
    dilations, pads = list(op.window("window_dilations")), op.padding_pairs()
    if any(d != 1 for d in op.window("base_dilations")):
        raise LoweringError(f"base_dilations = {list(op.window('base_dilations'))} is not supported")
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        raise LoweringError(f"negative padding {pads} is not supported")
    identity = init.known is not None and bool(np.all(init.known == _identity(reduction, elem)))
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
            "kernel_shape": _ints(kernel_shape),
            "strides": _ints([strides[d] for d in spatial]),
            "pads": _ints([pads[d][0] for d in spatial] + [pads[d][1] for d in spatial]),
            "dilations": _ints([dilations[d] for d in spatial]),
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
        return [_elementwise_result(value, held, shape, elem)]
    combined = b.node(_JOIN[reduction], [value, init.value], what="init")
    return [_elementwise_result(combined, [*held, init], shape, elem)]
