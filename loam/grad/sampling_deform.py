"""The grad clause of `kernel.deform_conv` (`loam.grad.sampling`'s, kept apart for its length).

The forward (`loam.runtime.kernels.sampling.kernel_deform_conv`) reads X (N, C, H, W) in offset_group
blocks of C / offset_group channels: kernel tap k = (i, j) of output position p = (r, c) sits at
y = r s0 - pad0 + i d0 + dy[n, og, k, p] (x likewise with dx), and reads the bilinear sample
v = sum over the four corners q of w_q(y, x) X[corner q] (w = hy hx, hy lx, ly hx, ly lx with
ly = y - floor(y), hy = 1 - ly), a corner outside the map reading 0 and a sample with y <= -1, y >= H,
x <= -1 or x >= W reading 0 altogether.  The columns cols = mask v (mask 1 where none is given) are
multiplied by W in each of the `group` blocks: y[n, m, p] = sum over c, k of W[m, c, k] cols[n, c, k, p]
+ B[m].  So, with dcols = W^T g per group:

- dW = g cols^T per group (`kernel.einsum`), dB = g summed over N, OH, OW;
- dX = mask dcols w_q added at each corner that reads X (one `kernel.scatter_elements`);
- dmask = sum over the block's channels of dcols v;
- doffset (dy, dx) = sum over the block's channels and the corners of mask dcols X[corner q] dw_q/dy
  (or dx): dw/dy = -hx, -lx, hx, lx and dw/dx = -hy, hy, -ly, ly, zero at corners that read 0.

The corners, weights and slopes are computed from the offsets in the backward (zips), as the forward
computes them; at whole coordinates (where a corner changes) the forward is not differentiable, and the
clause gives the one-sided derivative of the corners it picks.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation, SSAValue

from loam.dialects.expr import Expr
from loam.dialects.kernel import (
    DeformConvOp,
    EinsumOp,
    GatherElementsOp,
    ReduceOp,
    RegroupOp,
    ScatterElementsOp,
)
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, cut, param_int, param_ints, static_extents, type_of, zeros_like
from loam.grad.sampling_grid import constant


def deform_conv(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, DeformConvOp)
    p = op.params
    given = param_int(p, "given")
    x, w, offset = op.inputs[0], op.inputs[1], op.inputs[2]
    rest = list(op.inputs[3:])
    bias = rest.pop(0) if given & 1 else None
    mask = rest.pop(0) if given & 2 else None
    xt, wt, ot = type_of(x), type_of(w), type_of(offset)
    _, c, h, wd = static_extents(op, xt, 1)
    m, cg, kh, kw = static_extents(op, wt)
    _, _, oh, ow = static_extents(op, ot, 1)
    groups, og = param_int(p, "group"), param_int(p, "offset_group")
    strides, pads, dilations = (param_ints(p, k) for k in ("strides", "pads", "dilations"))
    e = xt.elem.name
    k, points, co = kh * kw, oh * ow, c // og
    n_ax = xt.axes[0]

    def ax(name: str, extent: int) -> Axis:
        return Axis.named(name, extent)

    unit = ax("Unit", 1)
    og_ax, co_ax, k_ax, p_ax = ax("OffsetGroups", og), ax("Channels", co), ax("Taps", k), ax("Points", points)
    q_ax, comp_ax = ax("Corners", 4), ax("Components", 2)
    g_ax, cg_ax, mg_ax = ax("Groups", groups), ax("GroupChannels", cg), ax("GroupOutputs", m // groups)

    def laid(value: SSAValue, axes: list[Axis]) -> SSAValue:
        return b.emit(RegroupOp(value, AxesTensorType(type_of(value).elem, [n_ax, *axes]), f"{node}.grad"))

    def summed(value: SSAValue, axis: int) -> SSAValue:
        t = type_of(value)
        kept = AxesTensorType(t.elem, [a for i, a in enumerate(t.axes) if i != axis])
        return b.emit(ReduceOp([value], [kept], f"{node}.grad", kind="sum", axes=(axis,), keepdims=0))

    def zipped(values: list[SSAValue], expr: Expr, axes: list[Axis], elem: str = e) -> SSAValue:
        return b.zip(values, expr, AxesTensorType(elem, [n_ax, *axes]), f"{node}.grad")

    if bias is not None and bias in b.needed:  # dB = g summed over N, OH, OW
        db = b.emit(ReduceOp([g], [type_of(bias)], f"{node}.grad", kind="sum", axes=(0, 2, 3), keepdims=0))
        b.send(bias, db)
    if not any(v in b.needed for v in (x, w, offset, mask)):
        return

    # The tap places without offsets, (K, 1, P, 1): r s0 - pad0 + i d0 (rows), c s1 - pad1 + j d1 (columns).
    tap_i, tap_j = np.divmod(np.arange(k), kw)
    out_r, out_c = np.divmod(np.arange(points), ow)
    rows = (out_r * strides[0] - pads[0])[None, :] + (tap_i * dilations[0])[:, None]
    columns = (out_c * strides[1] - pads[1])[None, :] + (tap_j * dilations[1])[:, None]
    base_names = ["Taps", "Unit", "Points", "Unit"]
    base_y = constant(b, rows.reshape(k, 1, points, 1).astype(np.float64), base_names, e, node)
    base_x = constant(b, columns.reshape(k, 1, points, 1).astype(np.float64), base_names, e, node)
    # Which corner (low or high row, low or high column) and, for the slopes, which component (dy, dx).
    corner_y = constant(b, np.array([0.0, 0.0, 1.0, 1.0]), ["Corners"], e, node)
    corner_x = constant(b, np.array([0.0, 1.0, 0.0, 1.0]), ["Corners"], e, node)
    component = constant(b, np.array([0.0, 1.0]).reshape(2, 1, 1), ["Components", "Unit", "Unit"], e, node)

    # The offsets (N, og, K, 2, P) and each component as (N, og, K, 1, P, 1).
    moves = laid(offset, [og_ax, k_ax, comp_ax, p_ax])
    one_move = AxesTensorType(e, [n_ax, og_ax, k_ax, unit, p_ax])

    def move(i: int) -> SSAValue:
        return laid(cut(b, moves, one_move, (0, 0, 0, i, 0), node), [og_ax, k_ax, unit, p_ax, unit])

    dy, dx = move(0), move(1)
    operands = [dy, dx, base_y, base_x, corner_y, corner_x, component]
    one, zero = Expr.const(1.0, e), Expr.const(0.0, e)
    y, xx = Expr.operand(2) + Expr.operand(0), Expr.operand(3) + Expr.operand(1)
    qy, qx, comp = Expr.operand(4), Expr.operand(5), Expr.operand(6)
    inside = (y.binary("greater", Expr.const(-1.0, e)).binary("and", y.binary("less", Expr.const(float(h), e)))
              .binary("and", xx.binary("greater", Expr.const(-1.0, e)))
              .binary("and", xx.binary("less", Expr.const(float(wd), e))))  # fmt: skip
    y0, x0 = y.unary("floor"), xx.unary("floor")
    ly, lx = y - y0, xx - x0
    wy, wx = qy * ly + (one - qy) * (one - ly), qx * lx + (one - qx) * (one - lx)
    yi, xi = y0 + qy, x0 + qx
    reads = (inside.binary("and", yi.binary("greater_equal", zero))
             .binary("and", yi.binary("less_equal", Expr.const(h - 1.0, e)))
             .binary("and", xi.binary("greater_equal", zero))
             .binary("and", xi.binary("less_equal", Expr.const(wd - 1.0, e))))  # fmt: skip
    corners = [og_ax, k_ax, unit, p_ax, q_ax]
    at = zipped(operands, Expr.select(reads, yi * Expr.const(float(wd), e) + xi, zero).cast("i64"), corners, "i64")
    weight = zipped(operands, Expr.select(reads, wy * wx, zero), corners)

    # X at the corners, (N, og, C/og, K, P, 4), each block's channels reading its corners.
    spread = [og_ax, co_ax, k_ax, p_ax, q_ax]
    flat = [og_ax, co_ax, ax("Reads", k * points * 4)]
    at_spread = laid(zipped([laid(at, [og_ax, unit, k_ax, p_ax, q_ax])], Expr.operand(0), spread, "i64"), flat)
    x_flat = laid(x, [og_ax, co_ax, ax("Pixels", h * wd)])
    read_type = AxesTensorType(e, type_of(at_spread).axes)
    gathered = GatherElementsOp([x_flat, at_spread], [read_type], f"{node}.grad", axis=3)
    read = laid(b.emit(gathered), spread)
    weight_spread = laid(weight, [og_ax, unit, k_ax, p_ax, q_ax])
    sample = summed(zipped([read, weight_spread], Expr.operand(0) * Expr.operand(1), spread), 5)  # v
    block = [og_ax, co_ax, k_ax, p_ax]
    mask_block = laid(mask, [og_ax, unit, k_ax, p_ax]) if mask is not None else None
    by_group = [g_ax, cg_ax, k_ax, p_ax]
    g_group = laid(g, [g_ax, mg_ax, p_ax])
    w_group = b.emit(RegroupOp(w, AxesTensorType(e, [g_ax, mg_ax, cg_ax, k_ax]), f"{node}.grad"))

    if w in b.needed:  # dW = g cols^T per group
        cols = sample if mask_block is None else zipped([sample, mask_block], Expr.operand(0) * Expr.operand(1), block)
        dw_type = AxesTensorType(e, [g_ax, mg_ax, cg_ax, k_ax])
        dw = b.emit(EinsumOp([g_group, laid(cols, by_group)], [dw_type], f"{node}.grad", equation="ngmp,ngckp->gmck"))
        b.send(w, b.emit(RegroupOp(dw, wt, f"{node}.grad")))
    if not any(v in b.needed for v in (x, offset, mask)):
        return
    # dcols = W^T g per group, as (N, og, C/og, K, P).
    dcols_type = AxesTensorType(e, [n_ax, *by_group])
    dcols = laid(b.emit(EinsumOp([w_group, g_group], [dcols_type], f"{node}.grad", equation="gmck,ngmp->ngckp")), block)
    if mask is not None and mask in b.needed:  # dmask = sum over the block's channels of dcols v
        dmask = summed(zipped([dcols, sample], Expr.operand(0) * Expr.operand(1), block), 2)
        b.send(mask, b.emit(RegroupOp(dmask, type_of(mask), f"{node}.grad")))
    dv = dcols if mask_block is None else zipped([dcols, mask_block], Expr.operand(0) * Expr.operand(1), block)
    dv = laid(dv, [og_ax, co_ax, k_ax, p_ax, unit])
    if x in b.needed:  # dX = dv w_q added at each corner
        updates = laid(zipped([dv, weight_spread], Expr.operand(0) * Expr.operand(1), spread), flat)
        operands_x = [zeros_like(b, x_flat, node), at_spread, updates]
        added = b.emit(ScatterElementsOp(operands_x, [type_of(x_flat)], f"{node}.grad", axis=3, reduction="add"))
        b.send(x, b.emit(RegroupOp(added, xt, f"{node}.grad")))
    if offset not in b.needed:
        return
    # d sample / d (dy, dx) at each corner, (N, og, K, 2, P, 4): dw_q/dy = (2 qy - 1) wx, dw_q/dx = wy (2 qx - 1).
    two = Expr.const(2.0, e)
    slope_y, slope_x = (two * qy - one) * wx, wy * (two * qx - one)
    slope = Expr.select(reads, Expr.select(comp.binary("equal", zero), slope_y, slope_x), zero)
    by_component = [og_ax, k_ax, comp_ax, p_ax, q_ax]
    slopes = zipped(operands, slope, by_component)
    # sum over the block's channels of dv X[corner], (N, og, K, 1, P, 4), then times the slopes, summed over corners.
    pulled = summed(zipped([dv, read], Expr.operand(0) * Expr.operand(1), spread), 2)
    pulled = laid(pulled, corners)
    doffset = summed(zipped([pulled, slopes], Expr.operand(0) * Expr.operand(1), by_component), 5)
    b.send(offset, b.emit(RegroupOp(doffset, ot, f"{node}.grad")))
