"""The grad clause of `kernel.grid_sample` (`loam.grad.sampling`'s, kept apart for its length).

The forward reads X (N, C, *S) at grid (N, *O, r): along spatial axis a (the grid's component r - 1 - a)
the coordinate is c = ((p + 1) L - 1) / 2, or (p + 1) / 2 (L - 1) with align_corners, and each output
point reads taps base + j (nearest: base = round(c), j = 0; linear: base = floor(c), j = 0, 1; cubic:
j = -1..2) weighted by w_j(t), t = c - base: linear 1 - |j - t|, cubic Keys' kernel (a = -0.75) at
|j - t|.  The padding mode only says where a tap reads (zeros: a tap outside weighs 0; border: the
nearest edge; reflection: the tap folded back into the input), never moves c.  So, with W the product
of the axes' weights over each combination of taps and I its flat position in X:

- dX = g W scattered (added) at I: one `kernel.scatter_elements` over every combination of taps;
- dgrid[.., r - 1 - a] = sum over C and the combinations of g X[I] dW/dc_a dc_a/dp, dW/dc_a being W with
  axis a's weight replaced by its derivative (linear -+1, cubic Keys' derivative times d|j - t|/dt), and
  dc_a/dp = L / 2 (or (L - 1) / 2); nearest's weights are constant, so the grid's share is zero.

The taps, weights and their derivatives are computed in the backward from the grid (zips), as the forward
computes them; positions where a tap changes (whole coordinates; half ones for nearest) are where the
forward is not differentiable, and the clause gives the one-sided derivative of the taps it picks.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import Operation, SSAValue

from loam.dialects.expr import Expr
from loam.dialects.kernel import (
    ConcatOp,
    GatherElementsOp,
    GridSampleOp,
    ReduceOp,
    RegroupOp,
    ScatterElementsOp,
)
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad import base
from loam.grad.base import Backward, cut, refuse, static_extents, type_of, zeros_like

# Keys' cubic kernel (a = -0.75, as the forward) at distance d <= 1 (near) and 1 < d < 2 (far), and their
# derivatives in d.
_A = -0.75


def _near(d: Expr, e: str) -> Expr:
    return ((d * Expr.const(_A + 2, e) - Expr.const(_A + 3, e)) * d * d) + Expr.const(1.0, e)


def _far(d: Expr, e: str) -> Expr:
    return ((d * Expr.const(_A, e) - Expr.const(5 * _A, e)) * d + Expr.const(8 * _A, e)) * d - Expr.const(4 * _A, e)


def _near_slope(d: Expr, e: str) -> Expr:
    return (d * Expr.const(3 * (_A + 2), e) - Expr.const(2 * (_A + 3), e)) * d


def _far_slope(d: Expr, e: str) -> Expr:
    return (d * Expr.const(3 * _A, e) - Expr.const(10 * _A, e)) * d + Expr.const(8 * _A, e)


class _Taps:
    """One spatial axis's taps for every output point, as (N, P, k): where each reads (i64), its weight and
    the weight's derivative in the grid's component (zero where zeros padding drops the tap)."""

    def __init__(self, index: SSAValue, weight: SSAValue, slope: SSAValue | None) -> None:
        self.index, self.weight, self.slope = index, weight, slope


def grid_sample(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, GridSampleOp)
    x, grid = op.inputs[0], op.inputs[1]
    xt, gt = type_of(x), type_of(grid)
    if xt.elem != gt.elem:
        raise refuse(op, f"no grad clause for a grid_sample of {xt.elem.name} X at a {gt.elem.name} grid")
    spatial = static_extents(op, xt, 2)[2:]
    out = static_extents(op, gt, 1)[1:-1]
    mode, padding, align = str(op.param("mode")), str(op.param("padding_mode")), int(op.param("align_corners"))
    r, points, size = len(spatial), math.prod(out), math.prod(spatial)
    e = xt.elem.name
    n_ax, c_ax = xt.axes[0], xt.axes[1]
    p_ax, comp_ax = Axis.named("Points", points), gt.axes[-1]
    flat_grid = b.emit(RegroupOp(grid, AxesTensorType(e, [n_ax, p_ax, comp_ax]), f"{node}.grad"))
    taps = [_axis_taps(b, flat_grid, a, length, mode, padding, align, node) for a, length in enumerate(spatial)]
    k = type_of(taps[0].index).shape[-1].const_value
    combos = k**r
    # Every combination of taps (axis 0's slowest), (N, P, k, ..., k), then as (N, 1, P, K).
    tap_axes = [Axis.named(f"Taps{a}", k) for a in range(r)]
    spread = [n_ax, p_ax, *tap_axes]

    def on_axis(value: SSAValue, a: int) -> SSAValue:
        axes = [n_ax, p_ax, *(tap_axes[i] if i == a else Axis.named("Unit", 1) for i in range(r))]
        return b.emit(RegroupOp(value, AxesTensorType(type_of(value).elem, axes), f"{node}.grad"))

    def combined(values: list[SSAValue], expr: Expr, elem: str) -> SSAValue:
        joined = b.zip(values, expr, AxesTensorType(elem, spread), f"{node}.grad")
        shape = [n_ax, Axis.named("Unit", 1), p_ax, Axis.named("Combos", combos)]
        return b.emit(RegroupOp(joined, AxesTensorType(elem, shape), f"{node}.grad"))

    strides = [math.prod(spatial[a + 1 :]) for a in range(r)]
    at = sum((Expr.operand(a) * Expr.const(strides[a], "i64") for a in range(1, r)),
             Expr.operand(0) * Expr.const(strides[0], "i64"))  # fmt: skip
    index = combined([on_axis(t.index, a) for a, t in enumerate(taps)], at, "i64")
    weights = [on_axis(t.weight, a) for a, t in enumerate(taps)]
    product = math.prod((Expr.operand(a) for a in range(1, r)), start=Expr.operand(0))
    g4 = b.emit(RegroupOp(g, AxesTensorType(e, [n_ax, c_ax, p_ax, Axis.named("Unit", 1)]), f"{node}.grad"))
    every = AxesTensorType(e, [n_ax, c_ax, p_ax, Axis.named("Combos", combos)])
    flat = AxesTensorType(e, [n_ax, c_ax, Axis.named("Reads", points * combos)])
    spread_index = b.zip([index], Expr.operand(0), AxesTensorType("i64", every.axes), f"{node}.grad")
    flat_index = b.emit(RegroupOp(spread_index, AxesTensorType("i64", flat.axes), f"{node}.grad"))
    x_flat = b.emit(RegroupOp(x, AxesTensorType(e, [n_ax, c_ax, Axis.named("Positions", size)]), f"{node}.grad"))
    if x in b.needed:  # dX = g W added at I
        w = combined(weights, product, e)
        updates = b.emit(RegroupOp(b.zip([g4, w], Expr.operand(0) * Expr.operand(1), every, f"{node}.grad"), flat,
                                   f"{node}.grad"))  # fmt: skip
        operands = [zeros_like(b, x_flat, node), flat_index, updates]
        added = b.emit(ScatterElementsOp(operands, [type_of(x_flat)], f"{node}.grad", axis=2, reduction="add"))
        b.send(x, b.emit(RegroupOp(added, xt, f"{node}.grad")))
    if grid not in b.needed:
        return
    if mode == "nearest":  # piecewise constant in the grid
        b.send(grid, zeros_like(b, grid, node))
        return
    # sum over C of g X[I], (N, P, K, 1)
    read = b.emit(GatherElementsOp([x_flat, flat_index], [flat], f"{node}.grad", axis=2))
    read = b.emit(RegroupOp(read, every, f"{node}.grad"))
    weighted = b.zip([g4, read], Expr.operand(0) * Expr.operand(1), every, f"{node}.grad")
    summed_type = AxesTensorType(e, [n_ax, p_ax, Axis.named("Combos", combos)])
    summed = b.emit(ReduceOp([weighted], [summed_type], f"{node}.grad", kind="sum", axes=(1,), keepdims=0))
    summed = b.emit(RegroupOp(summed, AxesTensorType(e, [*summed_type.axes, Axis.named("Unit", 1)]), f"{node}.grad"))
    # dW/dc_a dc_a/dp for each grid component (component i is axis r - 1 - i), (N, P, K, r).
    slopes = []
    for a in reversed(range(r)):
        slope_a = taps[a].slope
        assert slope_a is not None  # only nearest's taps have none, and nearest returned above
        factors = [on_axis(slope_a if i == a else t.weight, i) for i, t in enumerate(taps)]
        slope = combined(factors, product, e)
        unit_last = [n_ax, p_ax, Axis.named("Combos", combos), Axis.named("Unit", 1)]
        slopes.append(b.emit(RegroupOp(slope, AxesTensorType(e, unit_last), f"{node}.grad")))
    stacked_type = AxesTensorType(e, [n_ax, p_ax, Axis.named("Combos", combos), comp_ax])
    if r == 1:
        stacked = b.emit(RegroupOp(slopes[0], stacked_type, f"{node}.grad"))
    else:
        stacked = b.emit(ConcatOp(slopes, [stacked_type], f"{node}.grad", axis=3))
    terms = b.zip([summed, stacked], Expr.operand(0) * Expr.operand(1), stacked_type, f"{node}.grad")
    dgrid = b.emit(ReduceOp([terms], [type_of(flat_grid)], f"{node}.grad", kind="sum", axes=(2,), keepdims=0))
    b.send(grid, b.emit(RegroupOp(dgrid, gt, f"{node}.grad")))


def _axis_taps(
    b: Backward, flat_grid: SSAValue, a: int, length: int, mode: str, padding: str, align: int, node: str
) -> _Taps:
    """Spatial axis `a`'s taps (`_Taps`) read from the grid (N, P, r)."""
    gt = type_of(flat_grid)
    e = gt.elem.name
    r = gt.shape[-1].const_value
    n_ax, p_ax = gt.axes[0], gt.axes[1]
    column = AxesTensorType(e, [n_ax, p_ax, Axis.named("Unit", 1)])
    p = cut(b, flat_grid, column, (0, 0, r - 1 - a), node)
    one, two = Expr.const(1.0, e), Expr.const(2.0, e)
    pos = Expr.operand(0)
    if align:
        coordinate, scale = (pos + one) / two * Expr.const(length - 1, e), (length - 1) / 2
    else:
        coordinate, scale = ((pos + one) * Expr.const(length, e) - one) / two, length / 2
    c = b.zip([p], coordinate, column, f"{node}.grad")
    offsets = {"nearest": [0], "linear": [0, 1], "cubic": [-1, 0, 1, 2]}[mode]
    k = len(offsets)
    tap_type = AxesTensorType(e, [n_ax, p_ax, Axis.named(f"Taps{a}", k)])
    js = constant(b, np.array(offsets, np.float64), [f"Taps{a}"], e, node)
    # d|j - t|/dt: t lies in [0, 1), so +1 for the taps at or left of base, -1 for those right of it.
    signs = constant(b, np.array([1.0 if j <= 0 else -1.0 for j in offsets]), [f"Taps{a}"], e, node)
    base = c_expr = Expr.operand(0)
    base = base.unary("round" if mode == "nearest" else "floor")
    position = b.zip(
        [c, js], (base + Expr.operand(1)).cast("i64"), AxesTensorType("i64", tap_type.axes), f"{node}.grad"
    )
    index, inside = _read_at(b, position, length, padding, align, node)
    zero = Expr.const(0.0, e)

    def masked(expr: Expr) -> SSAValue:
        """`expr` over (c, j, sign of d|j - t|/dt[, inside]), zero where zeros padding drops the tap."""
        operands = [c, js, signs] + ([inside] if inside is not None else [])
        if inside is not None:
            expr = Expr.select(Expr.operand(3), expr, zero)
        return b.zip(operands, expr, tap_type, f"{node}.grad")

    d = (Expr.operand(1) - (c_expr - base)).unary("abs")
    if mode == "nearest":
        return _Taps(index, masked(one), None)
    if mode == "linear":
        weight, slope = one - d, -Expr.operand(2)
    else:
        weight = Expr.select(d.binary("less_equal", one), _near(d, e), _far(d, e))
        slope = Expr.select(d.binary("less_equal", one), _near_slope(d, e), _far_slope(d, e)) * Expr.operand(2)
    return _Taps(index, masked(weight), masked(slope * Expr.const(scale, e)))


def _read_at(
    b: Backward, position: SSAValue, length: int, padding: str, align: int, node: str
) -> tuple[SSAValue, SSAValue | None]:
    """Where taps at `position` (i64) read on an axis of `length`, and (zeros padding) which lie inside, as
    the forward's `grid_sample_index` settles them (reflection folded with whole numbers)."""
    t = type_of(position)
    i = Expr.operand(0)
    last = Expr.const(length - 1, "i64")
    clipped = i.binary("max", Expr.const(0, "i64")).binary("min", last)
    if padding == "zeros":
        ok = i.binary("greater_equal", Expr.const(0, "i64")).binary("and", i.binary("less_equal", last))
        return b.zip([position], clipped, t, f"{node}.grad"), b.zip(
            [position], ok, AxesTensorType("bool", t.axes), f"{node}.grad"
        )
    if padding == "border" or length == 1:
        return b.zip([position], clipped, t, f"{node}.grad"), None
    # Reflection about the borders -0.5 and L - 0.5 (0 and L - 1 with align_corners): period 2L (2L - 2).
    period = 2 * (length - 1) if align else 2 * length
    m = i.binary("mod", Expr.const(period, "i64"))
    mirror = Expr.const(period if align else period - 1, "i64") - m
    folded = Expr.select(m.binary("greater", last), mirror, m)
    return b.zip([position], folded, t, f"{node}.grad"), None


def constant(b: Backward, values: np.ndarray, names: list[str], elem: str, node: str) -> SSAValue:
    """A build-time constant holding `values` as `elem`, its axes named `names`."""
    axes = [Axis.named(n, e) for n, e in zip(names, values.shape, strict=True)]
    return base.constant(b, values, AxesTensorType(elem, axes), node)
