"""The grad clause of each kernel op: what it sends its operands, written as more kernel ops.

`clause_for(op)` gives the function that, given the gradient `g` of `op`'s (first) result, emits the
kernel ops computing each operand's share and hands it to `Backward.send`.  `loam.grad.reverse.Reverse`
walks the ops in reverse and calls them (for the `differentiate` pass and ONNX's Gradient node); the
clauses know only the `Backward` they are given (`loam.grad.base`), so each reads as the derivative it is:

- `kernel.zip`: the `Expr`'s vector-Jacobian product (`loam.grad.elementwise.vjp`), summed over the axes
  an operand was broadcast along;
- `kernel.matmul` (no epilogue): dA = g @ B^T, dB = A^T @ g, a vector operand taken as a matrix of one
  row or column;
- `kernel.permute`: the inverse permutation; `kernel.regroup`: the regroup back; `kernel.cast` between
  floats: the gradient cast back;
- `kernel.softmax`: softmax y * (g - sum(g * y)), log_softmax g - exp(y) * sum(g), over its axes;
  hardmax sends nothing (it is piecewise constant);
- `kernel.reduce`: sum and mean spread g over the reduced axes (divided by their count for mean, a
  value the run computes where an extent is symbolic); max and min share it evenly among the elements
  equal to the extreme (torch's amax); l1, l2, sum_square, log_sum and log_sum_exp by their derivative;
  prod by the product of the others (exclusive products from either end, no quotient a zero would spoil);
- `kernel.conv` (static extents but the batch): dx = conv_transpose(g, w) at the same strides, pads,
  dilations and groups; dw = conv(x^T, g^T) with strides and dilations exchanged, permuted back (with
  groups, x^T holds each group's images as that group's channels); db = sum(g);
- `kernel.conv_transpose`: dx = conv(g, w) at the same geometry, dw the convolution's weight share with
  x and g in each other's place, db = sum(g);
- `kernel.pool` max: g scattered (added) to the tap each window kept (the first maximum, as ONNX's
  indices say), the forward pool returning its indices too; average: g over each window's count,
  spread to its taps by a transposed convolution of ones, one group per channel; lp: sign(x) |x|^(p-1)
  times the windows' g y^(1-p), spread alike;
- `kernel.gather` (an embedding lookup, a pooler's first token): g's rows added into the rows they were
  read from (`kernel.scatter_nd` with reduction add, the gathered axis first; a negative index counts
  from the end);
- `kernel.cumsum`: g summed cumulatively the other way (as exclusive as the forward); `kernel.cumprod`:
  through an [n, n] table of each element's products with that element set to 1 (static extent).

The other kinds' clauses live beside their concept, each module's docstring saying the derivatives:

- `loam.grad.movement`: slice, pad, concat, split, tile, trilu, reverse_sequence, dropout;
- `loam.grad.indexing`: gather_elements, gather_nd, topk, the scatters, compress, tensor_scatter;
- `loam.grad.normalization`: normalize, batch_norm_train, group_norm, lrn;
- `loam.grad.losses`: nll_loss; `loam.grad.einsum`: einsum; `loam.grad.linalg`: det;
- `loam.grad.generators`: one_hot, eye_like, range_of;
- `loam.grad.control`: if, and loop where the build knows its trip count (unrolled);
- `loam.grad.signal`: dft, stft; `loam.grad.quantized`: the activations' share of matmul_nbits and
  matmul_packed, dequantize_linear's scale;
- `loam.grad.sampling` (with `sampling_grid` and `sampling_deform`): resize, grid_sample, affine_grid,
  roi_align, col2im, max_unpool, deform_conv;
- `loam.grad.recurrent`: rnn, gru, lstm;
- `loam.grad.runtime_shaped`: reshape_to, expand_to, slice_by, pad_by, split_by, tile_by.

Any other op (or an unsupported case of one of these) raises UnsupportedError naming it and its node.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from xdsl.ir import Operation, SSAValue

from loam.core.poly import Poly
from loam.dialects.expr import Expr
from loam.dialects.kernel import (
    CastOp,
    ConvOp,
    ConvTransposeOp,
    CumProdOp,
    CumSumOp,
    GatherOp,
    MatmulOp,
    PermuteOp,
    PoolOp,
    ReduceOp,
    RegroupOp,
    ScatterElementsOp,
    ScatterNDOp,
    SoftmaxOp,
    ZipOp,
)
from loam.dialects.kernel.base import element_count
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad import (
    control,
    einsum,
    generators,
    indexing,
    linalg,
    losses,
    movement,
    normalization,
    quantized,
    recurrent,
    runtime_shaped,
    sampling,
    signal,
)
from loam.grad.base import (
    Backward,
    Clause,
    constant,
    cut,
    extent_scalar,
    is_float,
    kept_type,
    param_int,
    param_ints,
    permuted,
    refuse,
    static_extent,
    static_extents,
    sum_kept,
    type_of,
    with_more_results,
    zeros_like,
)
from loam.grad.elementwise import vjp

# -- elementwise, products, layout --------------------------------------------------------------------


def _zip(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, ZipOp)
    elems = [type_of(v).elem.name for v in op.inputs]
    for k, operand in enumerate(op.inputs):
        if not is_float(operand) or operand not in b.needed:
            continue
        expr = vjp(op.expr.data, k, elems)
        if expr is not None:
            grad = b.zip([*op.inputs, g], expr, type_of(op.result), f"{node}.grad")
            b.send(operand, b.unbroadcast(grad, type_of(operand), node))


def _last_two_swapped(rank: int) -> list[int]:
    return [*range(rank - 2), rank - 1, rank - 2]


def _matmul(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, MatmulOp)
    lhs, rhs = op.lhs, op.rhs
    if op.epilogue is not None:
        raise refuse(op, "no grad clause for a product with an epilogue (differentiate runs before fuse)")
    # A vector operand is a matrix of one row (lhs) or one column (rhs), and the result has that axis at 1.
    unit = Axis.named("Unit", 1)
    lt, rt, out = type_of(lhs), type_of(rhs), type_of(op.result)
    a = lhs if lt.rank > 1 else b.emit(RegroupOp(lhs, AxesTensorType(lt.elem, [unit, *lt.axes]), f"{node}.grad"))
    c = rhs if rt.rank > 1 else b.emit(RegroupOp(rhs, AxesTensorType(rt.elem, [*rt.axes, unit]), f"{node}.grad"))
    batch = out.axes[: out.rank - (lt.rank > 1) - (rt.rank > 1)]
    rows = out.axes[len(batch)] if lt.rank > 1 else unit
    columns = out.axes[-1] if rt.rank > 1 else unit
    if lt.rank < 2 or rt.rank < 2:
        g = b.emit(RegroupOp(g, AxesTensorType(out.elem, [*batch, rows, columns]), f"{node}.grad"))

    def send(operand: SSAValue, as_matrix: SSAValue, grad: AxesTensorType, product: tuple[SSAValue, SSAValue]) -> None:
        summed = b.unbroadcast(b.emit(MatmulOp(*product, grad, f"{node}.grad")), type_of(as_matrix), node)
        b.send(operand, summed if operand is as_matrix else b.emit(RegroupOp(summed, type_of(operand), f"{node}.grad")))

    if lhs in b.needed:  # dA = g @ B^T
        c_t = permuted(b, c, _last_two_swapped(type_of(c).rank), node)
        send(lhs, a, AxesTensorType(out.elem, [*batch, rows, type_of(a).axes[-1]]), (g, c_t))
    if rhs in b.needed:  # dB = A^T @ g
        a_t = permuted(b, a, _last_two_swapped(type_of(a).rank), node)
        send(rhs, c, AxesTensorType(out.elem, [*batch, type_of(c).axes[-2], columns]), (a_t, g))


def _permute(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, PermuteOp)
    inverse = [op.permutation.index(a) for a in range(len(op.permutation))]
    b.send(op.operands[0], permuted(b, g, inverse, node))


def _regroup(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    operand = op.operands[0]
    b.send(operand, b.emit(RegroupOp(g, type_of(operand), f"{node}.grad")))


def _cast(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    operand = op.operands[0]
    b.send(operand, b.zip([g], Expr.operand(0).cast(type_of(operand).elem.name), type_of(operand), f"{node}.grad"))


# -- reductions ---------------------------------------------------------------------------------------


def _softmax(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, SoftmaxOp)
    x, y = op.inputs[0], op.outputs[0]
    axes = tuple(op.param("axes"))
    kind = op.param("kind")
    if kind == "hardmax":
        return  # piecewise constant: no gradient flows
    t = type_of(x)
    if kind == "softmax":  # y * (g - sum(g * y))
        gy = b.zip([g, y], Expr.operand(0) * Expr.operand(1), t, f"{node}.grad")
        s = sum_kept(b, gy, axes, node)
        expr = Expr.operand(0) * (Expr.operand(1) - Expr.operand(2))
        b.send(x, b.zip([y, g, s], expr, t, f"{node}.grad"))
    else:  # log_softmax: g - exp(y) * sum(g)
        s = sum_kept(b, g, axes, node)
        expr = Expr.operand(0) - Expr.operand(1).unary("exp") * Expr.operand(2)
        b.send(x, b.zip([g, y, s], expr, t, f"{node}.grad"))


# What x receives from the gradient g of y = reduce(x), both kept at x's rank (operands: x, y, g), in
# x's element type.
_x, _y, _g = (Expr.operand(i) for i in range(3))
_REDUCE_VJP: dict[str, Callable[[str], Expr]] = {
    "l1": lambda e: _g * _x.unary("sign"),
    "l2": lambda e: Expr.select(_y.binary("equal", Expr.const(0.0, e)), Expr.const(0.0, e), _g * _x / _y),
    "sum_square": lambda e: _g * _x * Expr.const(2.0, e),
    "log_sum": lambda e: _g / _y.unary("exp"),
    "log_sum_exp": lambda e: _g * (_x - _y).unary("exp"),
}


def _reduce(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, ReduceOp)
    x = op.inputs[0]
    kind = str(op.param("kind"))
    axes = tuple(op.param("axes"))
    if kind not in ("sum", "mean", "max", "min", "prod", *_REDUCE_VJP):
        raise refuse(op, f"no grad clause for reduce {kind} yet")
    t = type_of(x)
    elem = t.elem.name

    def kept(value: SSAValue) -> SSAValue:
        return value if op.param("keepdims") else b.emit(RegroupOp(value, kept_type(t, axes), f"{node}.grad"))

    gk = kept(g)
    if kind == "sum":
        b.send(x, b.emit(ZipOp([gk], Expr.operand(0), t, f"{node}.grad")))
        return
    if kind == "mean":
        counted = extent_scalar(b, Poly.lift(element_count([t.shape[a] for a in axes])), "i64", node)
        spread = Expr.operand(0) / Expr.operand(1).cast(elem)
        b.send(x, b.emit(ZipOp([gk, counted], spread, t, f"{node}.grad")))
        return
    if kind == "prod":
        b.send(
            x, b.zip([gk, _product_of_others(b, x, axes, node)], Expr.operand(0) * Expr.operand(1), t, f"{node}.grad")
        )
        return
    yk = kept(op.outputs[0])
    if kind in ("max", "min"):  # g shared evenly by the elements equal to the extreme (torch's amax, amin)
        one, zero = Expr.const(1.0, elem), Expr.const(0.0, elem)
        hits = b.zip([x, yk], Expr.select(_x.binary("equal", _y), one, zero), t, f"{node}.grad")
        ties = sum_kept(b, hits, axes, node)
        b.send(x, b.zip([hits, ties, gk], Expr.operand(0) / Expr.operand(1) * Expr.operand(2), t, f"{node}.grad"))
        return
    b.send(x, b.zip([x, yk, gk], _REDUCE_VJP[kind](elem), t, f"{node}.grad"))


def _cumsum(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, CumSumOp)
    x = op.inputs[0]
    # Element i reaches the sums after it (before it, reversed): g summed the other way, as exclusive.
    back = CumSumOp([g], [type_of(x)], f"{node}.grad", axis=op.param("axis"), exclusive=op.param("exclusive"),
                    reverse=1 - int(op.param("reverse")))  # fmt: skip
    b.send(x, b.emit(back))


def _product_of_others(b: Backward, x: SSAValue, axes: tuple[int, ...], node: str) -> SSAValue:
    """Each element's product of the other elements of its reduction over `axes` (no quotient, which a zero
    would spoil): the exclusive products from either end, multiplied, over the axes moved last as one."""
    t = type_of(x)
    rest = [a for a in range(t.rank) if a not in axes]
    perm = [*rest, *axes]
    moved = permuted(b, x, perm, node)
    count = Poly.lift(element_count([t.shape[a] for a in axes]))
    flat = AxesTensorType(t.elem, [*(t.axes[a] for a in rest), Axis.named("Reduced", count)])
    row = b.emit(RegroupOp(moved, flat, f"{node}.grad"))
    last = flat.rank - 1
    ends = [b.emit(CumProdOp([row], [flat], f"{node}.grad", axis=last, exclusive=1, reverse=r)) for r in (0, 1)]
    others = b.zip(ends, Expr.operand(0) * Expr.operand(1), flat, f"{node}.grad")
    back = b.emit(RegroupOp(others, type_of(moved), f"{node}.grad"))
    return permuted(b, back, [perm.index(a) for a in range(t.rank)], node)


def _cumprod(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    """y_i = the product of x_j over j <= i (j < i exclusive; j >= i reversed): x_k reaches every y_i whose
    range holds it, through the product of the range's other elements.  With n the axis's extent, that is an
    [n (k), n (i)] table per row: x with x_k set to 1 in row k, multiplied cumulatively as the forward does,
    kept where i's range holds k; d x_k = sum over i of g_i times it (no quotient, which a zero would spoil)."""
    assert isinstance(op, CumProdOp)
    x = op.inputs[0]
    t = type_of(x)
    axis = int(op.param("axis"))
    exclusive, reverse = int(op.param("exclusive")), int(op.param("reverse"))
    n = static_extent(op, t, axis)
    perm = [*(a for a in range(t.rank) if a != axis), axis]
    rows = [t.axes[a] for a in perm[:-1]]
    k_axis, i_axis = Axis.named("Held", n), t.axes[axis]
    table = AxesTensorType(t.elem, [*rows, k_axis, i_axis])
    unit = [Axis.named("Unit", 1)]
    x_row, g_row = (b.emit(RegroupOp(permuted(b, v, perm, node), AxesTensorType(t.elem, [*rows, *unit, i_axis]),
                                     f"{node}.grad")) for v in (x, g))  # fmt: skip
    k, i = np.indices((n, n))
    holds = (i <= k if reverse else i >= k) & ((i != k) if exclusive else True)
    elem = t.elem
    eye, held = (constant(b, m, AxesTensorType(elem, [k_axis, i_axis]), node) for m in (np.eye(n), holds))
    o = Expr.operand
    with_one = b.zip([x_row, eye], Expr.select(o(1).binary("equal", Expr.const(1.0, elem.name)),
                                               Expr.const(1.0, elem.name), o(0)), table, f"{node}.grad")  # fmt: skip
    products = b.emit(CumProdOp([with_one], [table], f"{node}.grad", axis=table.rank - 1, exclusive=exclusive,
                                reverse=reverse))  # fmt: skip
    terms = b.zip([products, g_row, held], o(0) * o(1) * o(2), table, f"{node}.grad")
    summed = b.emit(ReduceOp([terms], [AxesTensorType(elem, [*rows, t.axes[axis]])], f"{node}.grad", kind="sum",
                             axes=(table.rank - 1,), keepdims=0))  # fmt: skip
    b.send(x, permuted(b, summed, [perm.index(a) for a in range(t.rank)], node))


# -- convolution and pooling ----------------------------------------------------------------------------


def _conv(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, ConvOp)
    x, w = op.inputs[0], op.inputs[1]
    p = op.params
    groups = param_int(p, "group")
    xs, ws, gs = static_extents(op, type_of(x), 1), static_extents(op, type_of(w)), static_extents(op, type_of(g), 1)
    strides, pads, dilations = param_ints(p, "strides"), param_ints(p, "pads"), param_ints(p, "dilations")
    nsp = len(xs) - 2
    if x in b.needed:  # dx = conv_transpose(g, w), its output padded to x's extents
        full = [(gs[2 + k] - 1) * strides[k] - pads[k] - pads[nsp + k] + dilations[k] * (ws[2 + k] - 1) + 1
                for k in range(nsp)]  # fmt: skip
        extra = tuple(xs[2 + k] - full[k] for k in range(nsp))
        if any(e < 0 or e >= max(strides[k], dilations[k]) for k, e in enumerate(extra)):
            raise refuse(op, "no grad clause for these strides, pads and dilations yet")
        b.send(x, b.emit(ConvTransposeOp([g, w], [type_of(x)], f"{node}.grad", strides=strides, pads=pads,
                                         dilations=dilations, group=groups, output_padding=extra)))  # fmt: skip
    if w in b.needed:
        b.send(w, _weight_share(b, op, (x, g), w, node))
    if len(op.inputs) > 2 and op.inputs[2] in b.needed:
        b.send(op.inputs[2], _bias_share(b, g, op.inputs[2], node))


def _conv_transpose(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    """y = conv_transpose(x, w) reads x[n, c, i] into y[n, o, i*s + k*d - p] through w[c, o, k]: the convolution
    reads it back, so dx = conv(g, w) at the same strides, pads, dilations and groups; dw is the convolution's
    weight share with x and g in each other's place (x at the outputs' places, g at the inputs')."""
    assert isinstance(op, ConvTransposeOp)
    x, w = op.inputs[0], op.inputs[1]
    p = op.params
    groups = param_int(p, "group")
    strides, pads, dilations = param_ints(p, "strides"), param_ints(p, "pads"), param_ints(p, "dilations")
    if x in b.needed:
        ws, gs = static_extents(op, type_of(w)), static_extents(op, type_of(g), 1)
        nsp = len(gs) - 2
        # An output_padding of a stride or more adds outputs no input reaches: the convolution reads them as
        # more places past x's end, cut off.
        t = type_of(x)
        reads = [(gs[2 + k] + pads[k] + pads[nsp + k] - dilations[k] * (ws[2 + k] - 1) - 1) // strides[k] + 1
                 for k in range(nsp)]  # fmt: skip
        wide = AxesTensorType(t.elem, [*t.axes[:2], *(Axis.named(f"Reads{k}", n) for k, n in enumerate(reads))])
        dx = b.emit(ConvOp([g, w], [wide if reads != list(static_extents(op, t, 1)[2:]) else t], f"{node}.grad",
                           strides=strides, pads=pads, dilations=dilations, group=groups))  # fmt: skip
        if type_of(dx) != t:
            dx = cut(b, dx, t, [0] * t.rank, node)
        b.send(x, dx)
    if w in b.needed:
        b.send(w, _weight_share(b, op, (g, x), w, node))
    if len(op.inputs) > 2 and op.inputs[2] in b.needed:
        b.send(op.inputs[2], _bias_share(b, g, op.inputs[2], node))


def _weight_share(
    b: Backward, op: ConvOp | ConvTransposeOp, images_grads: tuple[SSAValue, SSAValue], w: SSAValue, node: str
) -> SSAValue:
    """dw[m, c, k] = sum over n, o of grads[n, m, o] images[n, c, o*s + k*d - p]: one convolution of the images
    (N and C exchanged) by the grads (N and M exchanged), strides and dilations exchanged, permuted back."""
    images, grads = images_grads
    p = op.params
    groups = param_int(p, "group")
    strides, pads, dilations = param_ints(p, "strides"), param_ints(p, "pads"), param_ints(p, "dilations")
    xs, ws, gs = (static_extents(op, type_of(v), 1) for v in (images, w, grads))
    nsp = len(xs) - 2
    # The windows span (o - 1) s + (k - 1) d + 1 of the padded images: the end pads are cut to that, and images
    # a stride leaves unread at the end are cropped (the convolution would read them as more taps).
    ends, read = [], list(type_of(images).axes)
    for k in range(nsp):
        end = strides[k] * (gs[2 + k] - 1) + dilations[k] * (ws[2 + k] - 1) + 1 - xs[2 + k] - pads[k]
        if end < 0:
            read[2 + k] = Axis.named(f"Read{k}", xs[2 + k] + end)
        ends.append(max(end, 0))
    if read != list(type_of(images).axes):
        images = cut(b, images, AxesTensorType(type_of(images).elem, read), [0] * len(read), node)
    perm = [1, 0, *range(2, len(xs))]  # N and C exchanged: x^T's batch is C, g^T's channels are N
    xt = permuted(b, images, perm, node) if groups == 1 else _grouped_transpose(b, images, groups, node)
    gt = permuted(b, grads, perm, node)
    pads = (*pads[:nsp], *ends)
    wt_type = AxesTensorType(type_of(w).elem, [type_of(w).axes[1], type_of(w).axes[0], *type_of(w).axes[2:]])
    dwt = b.emit(ConvOp([xt, gt], [wt_type], f"{node}.grad", strides=dilations, pads=pads, dilations=strides,
                        group=groups))  # fmt: skip
    return b.emit(PermuteOp(dwt, perm, type_of(w), f"{node}.grad"))


def _bias_share(b: Backward, g: SSAValue, bias: SSAValue, node: str) -> SSAValue:
    """db = g summed over N and the spatial axes."""
    axes = (0, *range(2, type_of(g).rank))
    return b.emit(ReduceOp([g], [type_of(bias)], f"{node}.grad", kind="sum", axes=axes, keepdims=0))


def _grouped_transpose(b: Backward, x: SSAValue, groups: int, node: str) -> SSAValue:
    """x [N, G*Cg, ...] as [Cg, G*N, ...]: a group's channels become the batch and its images the channels
    of group j, so the weight's gradient is one convolution with `groups` groups."""
    t = type_of(x)
    n, c = t.shape[0], t.shape[1]
    per = Axis.named("GroupChannels", Poly.lift(c).const_value // groups)
    split = b.emit(RegroupOp(x, AxesTensorType(t.elem, [t.axes[0], Axis.named("Groups", groups), per, *t.axes[2:]]),
                             f"{node}.grad"))  # fmt: skip
    moved = permuted(b, split, [2, 1, 0, *range(3, t.rank + 1)], node)
    joined = AxesTensorType(t.elem, [per, Axis.named("GroupImages", Poly.lift(n) * groups), *t.axes[2:]])
    return b.emit(RegroupOp(moved, joined, f"{node}.grad"))


def _pool(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, PoolOp)
    p = op.params
    if p["mode"] == "avg":
        _avg_pool(b, op, g, node)
        return
    if p["mode"] == "lp":
        _lp_pool(b, op, g, node)
        return
    if p["mode"] != "max" or p.get("storage_order", 0):
        raise refuse(op, f"no grad clause for {p['mode']} pooling yet")
    x = op.inputs[0]
    t = type_of(x)
    index_type = AxesTensorType("i64", type_of(op.outputs[0]).axes)
    # Where each window's maximum was: the forward's own indices once its pool returns them too, else the
    # pool run again in the backward.
    if p.get("indices"):
        indices = op.outputs[1]
    else:
        indices = with_more_results(b, op, [type_of(op.outputs[0]), index_type], node, indices=1).outputs[1]
    # Each plane (n, c) scatters apart: a window's kept tap lies in its own plane, at its flat index mod
    # the plane's size; so the scatter runs along rows of H*W (a llvmpipe shader loops over one row, not
    # the whole tensor).
    planes = t.shape[0] * t.shape[1]
    size, taps = math.prod(static_extents(op, t, 2)[2:]), math.prod(static_extents(op, index_type, 2)[2:])
    rows = Axis.named("Planes", planes)
    plane = AxesTensorType(t.elem, [rows, Axis.named("Positions", size)])
    tap_axes = [rows, Axis.named("Taps", taps)]
    flat_indices = b.emit(RegroupOp(indices, AxesTensorType("i64", tap_axes), f"{node}.grad"))
    local = b.emit(ZipOp([flat_indices], Expr.operand(0).binary("mod", Expr.const(size, "i64")),
                         AxesTensorType("i64", tap_axes), f"{node}.grad"))  # fmt: skip
    flat_g = b.emit(RegroupOp(g, AxesTensorType(t.elem, tap_axes), f"{node}.grad"))
    zeros = zeros_like(b, b.emit(RegroupOp(x, plane, f"{node}.grad")), node)
    operands = [zeros, local, flat_g]
    scattered = b.emit(ScatterElementsOp(operands, [plane], f"{node}.grad", axis=1, reduction="add"))
    b.send(x, b.emit(RegroupOp(scattered, t, f"{node}.grad")))


def _pool_geometry(op: PoolOp) -> tuple[tuple[int, ...], ...]:
    """The input's extents (static but the batch), the kernel shape, strides, dilations, pads and output shape."""
    p = op.params
    xs = static_extents(op, type_of(op.inputs[0]), 1)
    kernel, strides, dilations, pads, outs = (
        param_ints(p, k) for k in ("kernel_shape", "strides", "dilations", "pads", "out_shape")
    )
    return xs, kernel, strides, dilations, pads, outs


def _avg_pool(b: Backward, op: PoolOp, g: SSAValue, node: str) -> None:
    """g divided by each window's count, spread to its taps."""
    p = op.params
    t = type_of(op.inputs[0])
    xs, kernel, strides, dilations, pads, outs = _pool_geometry(op)
    nsp = len(kernel)
    counts = np.ones(outs, np.float64)
    for k in range(nsp):  # the taps of each window inside the input (and its pads, with count_include_pad)
        low, high = (-pads[k], xs[2 + k] + pads[nsp + k]) if p.get("count_include_pad") else (0, xs[2 + k])
        taps = np.arange(outs[k])[:, None] * strides[k] - pads[k] + np.arange(kernel[k])[None, :] * dilations[k]
        shape = [1] * nsp
        shape[k] = outs[k]
        counts = counts * ((taps >= low) & (taps < high)).sum(1).reshape(shape)
    counted = constant(b, counts, AxesTensorType(t.elem, type_of(g).axes[2:]), node)
    scaled = b.zip([g, counted], Expr.operand(0) / Expr.operand(1), type_of(g), f"{node}.grad")
    b.send(op.inputs[0], _spread_to_taps(b, op, scaled, node))


def _lp_pool(b: Backward, op: PoolOp, g: SSAValue, node: str) -> None:
    """y = (sum of |x|^p over each window)^(1/p): d x = sign(x) |x|^(p-1) times the windows' g y^(1-p), spread
    to their taps (a window whose y is 0 has every tap 0 and sends nothing)."""
    x, y = op.inputs[0], op.outputs[0]
    t, elem = type_of(x), type_of(x).elem.name
    p = float(op.param("p"))
    o = Expr.operand

    def c(value: float) -> Expr:
        return Expr.const(value, elem)

    per_window = Expr.select(o(1).binary("equal", c(0.0)), c(0.0), o(0) * o(1).binary("pow", c(1.0 - p)))
    spread = _spread_to_taps(b, op, b.zip([g, y], per_window, type_of(g), f"{node}.grad"), node)
    expr = o(1) * o(0).unary("sign") * o(0).unary("abs").binary("pow", c(p - 1.0))
    b.send(x, b.zip([x, spread], expr, t, f"{node}.grad"))


def _spread_to_taps(b: Backward, op: PoolOp, per_window: SSAValue, node: str) -> SSAValue:
    """Each window's value added to every tap it reads: a transposed convolution of one-valued kernels, one
    group per channel.  Taps a ceil-mode window reads past the padded input are cut."""
    t = type_of(op.inputs[0])
    xs, kernel, strides, dilations, pads, outs = _pool_geometry(op)
    nsp = len(kernel)
    ones_type = AxesTensorType(
        t.elem, [t.axes[1], Axis.named("Unit", 1), *(Axis.named(f"Taps{k}", n) for k, n in enumerate(kernel))]
    )
    ones = constant(b, np.ones((xs[1], 1, *kernel)), ones_type, node)
    ends = list(pads[nsp:])
    extra = []
    for k in range(nsp):
        full = (outs[k] - 1) * strides[k] - pads[k] - ends[k] + dilations[k] * (kernel[k] - 1) + 1
        if full > xs[2 + k]:  # ceil mode: windows past the padded input; their taps there are cut
            ends[k] += full - xs[2 + k]
            full = xs[2 + k]
        extra.append(xs[2 + k] - full)
        if extra[k] >= max(strides[k], dilations[k]):
            raise refuse(op, "no grad clause for these strides, pads and dilations yet")
    spread = ConvTransposeOp([per_window, ones], [t], f"{node}.grad", strides=strides, pads=(*pads[:nsp], *ends),
                             dilations=dilations, group=xs[1], output_padding=tuple(extra))  # fmt: skip
    return b.emit(spread)


def _gather(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, GatherOp)
    data, indices = op.inputs[0], op.inputs[1]
    axis = int(op.param("axis"))
    t, it = type_of(data), type_of(indices)
    # Along another axis, the same with that axis first: data [D_axis, the others], g [the picks, the others].
    data_perm = [axis, *range(axis), *range(axis + 1, t.rank)]
    if axis:
        picks = list(range(axis, axis + it.rank))
        g = permuted(b, g, [*picks, *range(axis), *range(axis + it.rank, type_of(g).rank)], node)
        t = AxesTensorType(t.elem, [t.axes[a] for a in data_perm])
    rows = Axis.named("Picked", element_count(it.shape))
    # Negative indices count from the end, as the gather read them.
    extent = extent_scalar(b, t.shape[0], it.elem.name, node)
    picked = b.emit(RegroupOp(indices, AxesTensorType(it.elem, [rows, Axis.named("Unit", 1)]), f"{node}.grad"))
    zero = Expr.const(0, it.elem.name)
    wrap = Expr.select(Expr.operand(0).binary("less", zero), Expr.operand(0) + Expr.operand(1), Expr.operand(0))
    picked = b.emit(ZipOp([picked, extent], wrap, type_of(picked), f"{node}.grad"))
    updates = b.emit(RegroupOp(g, AxesTensorType(t.elem, [rows, *t.axes[1:]]), f"{node}.grad"))
    zeros = zeros_like(b, permuted(b, data, data_perm, node) if axis else data, node)
    scattered = b.emit(ScatterNDOp([zeros, picked, updates], [t], f"{node}.grad", reduction="add"))
    if axis:
        scattered = permuted(b, scattered, [data_perm.index(a) for a in range(t.rank)], node)
    b.send(data, scattered)


CLAUSES: dict[type[Operation], Clause] = {
    GatherOp: _gather,
    ZipOp: _zip,
    MatmulOp: _matmul,
    PermuteOp: _permute,
    RegroupOp: _regroup,
    CastOp: _cast,
    SoftmaxOp: _softmax,
    ReduceOp: _reduce,
    ConvOp: _conv,
    ConvTransposeOp: _conv_transpose,
    PoolOp: _pool,
    CumSumOp: _cumsum,
    CumProdOp: _cumprod,
    **control.CLAUSES,
    **einsum.CLAUSES,
    **generators.CLAUSES,
    **linalg.CLAUSES,
    **movement.CLAUSES,
    **indexing.CLAUSES,
    **losses.CLAUSES,
    **normalization.CLAUSES,
    **recurrent.CLAUSES,
    **runtime_shaped.CLAUSES,
    **sampling.CLAUSES,
    **signal.CLAUSES,
    **quantized.CLAUSES,
}
EVERY_RESULT = (
    control.EVERY_RESULT
    | movement.EVERY_RESULT
    | recurrent.EVERY_RESULT
    | sampling.EVERY_RESULT
    | runtime_shaped.EVERY_RESULT
)


def reads_every_result(op: Operation) -> bool:
    """Whether `op`'s clause reads each result's adjoint itself, so a gradient may reach any of them
    (every other clause is given its first result's)."""
    return type(op) in EVERY_RESULT


def clause_for(op: Operation) -> Clause:
    """The grad clause of `op`'s kind; UnsupportedError naming the op and its node where there is none."""
    clause = CLAUSES.get(type(op))
    if clause is None:
        raise refuse(op)
    return clause
