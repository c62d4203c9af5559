"""The grad clauses of the quantized kernels: the activations' share of the products over a weight kept
packed, and the float scale's share of a dequantization.  The packed integers (and the scales of a packed
weight) stay fixed, as fine-tuning an adapter on a quantized base model wants.

- `kernel.matmul_nbits` (y = A @ W^T + bias, W [N, K] = (q - zero point) * scale): dA = g @ W.  No
  kernel widens B by itself, so the backward materialises W^T [K, N] once by the forward's own kernel
  over the identity (`kernel.matmul_nbits` of I_K, same B, scales, zero points and g_idx, no bias;
  I_K made by a zip of two aranges, never a K x K constant), exact up to the kernel's float32 rounding
  of each widened element (and A's type: a half A gets a half W), then a `kernel.matmul` of g by it
  transposed.  This costs a K-row forward product per backward.  dbias = g summed over A's leading axes.
  The scales and zero points of A's type are refused by name.
- `kernel.matmul_packed` (y = x @ W^T, `transposed` 1, or x @ W, `transposed` 0, W in ggml blocks):
  dx = g @ W (resp. g @ W^T), which is the same kernel over the same blocks with `transposed` flipped
  (blocks run along W's rows either way), so nothing is widened beyond what the forward widens.  The
  weight's share is refused.
- `kernel.dequantize_linear` (y = (x - zero point) * scale, scale per tensor, per axis or per block of
  `block_size` along `axis`): dscale = g * (x - zero point) summed over what each scale multiplies.
  x - zero point is the same kernel with ones for the scale (exact: integers widened to float32); the
  sum is a `kernel.reduce` (per tensor, per axis) or a 0/1 [extent, blocks] table along the axis
  (`base.through_matrix`, per block).  x and the zero point are integers (or float8) and take none.
- `kernel.gather_packed`, `kernel.gather_block_quantized`: their only float operand is the packed
  weight (resp. the scales); a gradient asked of it is refused by name.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation, SSAValue

from loam.dialects.expr import Expr
from loam.dialects.kernel import (
    DequantizeLinearOp,
    GatherBlockQuantizedOp,
    GatherPackedOp,
    MatmulNbitsOp,
    MatmulOp,
    MatmulPackedOp,
    ReduceOp,
    RegroupOp,
)
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import (
    Backward,
    Clause,
    constant,
    is_float,
    permuted,
    refuse,
    static_extent,
    through_matrix,
    type_of,
)

FIXED = "the quantized weight is fixed: only the activations take a gradient here"


def _matmul_nbits(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, MatmulNbitsOp)
    a, packed, scales, *rest = op.inputs
    present = int(op.param("present"))
    zero = rest.pop(0) if present & 1 else None
    g_idx = rest.pop(0) if present & 2 else None
    bias = rest.pop(0) if present & 4 else None
    if scales in b.needed:
        raise refuse(op, f"no grad clause for the scales' share ({FIXED})")
    if zero is not None and is_float(zero) and zero in b.needed:
        raise refuse(op, f"no grad clause for the zero points' share ({FIXED})")
    if bias is not None and bias in b.needed:
        b.send(bias, b.unbroadcast(g, type_of(bias), node))
    if a not in b.needed:
        return
    at, gt = type_of(a), type_of(g)
    e = at.elem.name
    k = int(op.param("k"))
    k_axis, n_axis, unit, inner = at.axes[-1], gt.axes[-1], Axis.named("Unit", 1), Axis.named("Identity", k)
    rows = constant(b, np.arange(k).reshape(k, 1), AxesTensorType("i64", [k_axis, unit]), node)
    columns = constant(b, np.arange(k).reshape(1, k), AxesTensorType("i64", [unit, inner]), node)
    one = Expr.select(Expr.operand(0).binary("equal", Expr.operand(1)), Expr.const(1.0, e), Expr.const(0.0, e))
    identity = b.zip([rows, columns], one, AxesTensorType(e, [k_axis, inner]), f"{node}.grad")
    # I_K @ W^T = W^T [K, N], widened by the forward's kernel (no bias).
    operands = [identity, packed, scales, *(v for v in (zero, g_idx) if v is not None)]
    params = {**op.params, "present": present & 3}
    w_t = b.emit(MatmulNbitsOp(operands, [AxesTensorType(e, [k_axis, n_axis])], f"{node}.grad", **params))
    w = permuted(b, w_t, [1, 0], node)
    b.send(a, b.emit(MatmulOp(g, w, AxesTensorType(e, [*gt.axes[:-1], k_axis]), f"{node}.grad")))


def _matmul_packed(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, MatmulPackedOp)
    x, w = op.inputs
    if w in b.needed:
        raise refuse(op, f"no grad clause for the packed weight's share ({FIXED})")
    flipped = 1 - int(op.param("transposed"))
    b.send(x, b.emit(MatmulPackedOp([g, w], [type_of(x)], f"{node}.grad", transposed=flipped)))


def _dequantize_linear(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, DequantizeLinearOp)
    x, scale = op.inputs[0], op.inputs[1]
    if not is_float(scale) or scale not in b.needed:
        return
    st, yt = type_of(scale), type_of(op.outputs[0])
    e = yt.elem.name
    # x - zero point: the forward's kernel with ones for the scale.
    ones = b.zip([scale], Expr.const(1.0, st.elem.name), st, f"{node}.grad")
    shifted = b.emit(DequantizeLinearOp([x, ones, *op.inputs[2:]], [yt], f"{node}.grad", **op.params))
    share = b.zip([g, shifted], Expr.operand(0) * Expr.operand(1), AxesTensorType(e, yt.axes), f"{node}.grad")
    axis, block = int(op.param("axis")), int(op.param("block_size"))
    if block > 0:  # each scale multiplies a block of `block` along the axis (the last one cut short)
        extent = static_extent(op, yt, axis)
        blocks = static_extent(op, st, axis)
        table = np.zeros((extent, blocks))
        table[np.arange(extent), np.arange(extent) // block] = 1.0
        summed = through_matrix(b, share, axis, table, st.axes[axis], node)
    else:  # one scale for every element, or one per index of the axis
        per_tensor = all(d.is_const and d.const_value == 1 for d in st.shape)
        axes = tuple(range(yt.rank)) if per_tensor else tuple(a for a in range(yt.rank) if a != axis)
        kept = [] if per_tensor else [yt.axes[axis]]
        summed = b.emit(ReduceOp([share], [AxesTensorType(e, kept)], f"{node}.grad", kind="sum", axes=axes, keepdims=0))
    if type_of(summed).elem != st.elem:
        summed = b.zip(
            [summed], Expr.operand(0).cast(st.elem.name), AxesTensorType(st.elem, type_of(summed).axes), node
        )
    if type_of(summed) != st:
        summed = b.emit(RegroupOp(summed, st, f"{node}.grad"))
    b.send(scale, summed)


def _gather_packed(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, GatherPackedOp)
    if op.inputs[0] in b.needed:
        raise refuse(op, f"no grad clause for the packed weight's share ({FIXED})")


def _gather_block_quantized(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, GatherBlockQuantizedOp)
    if op.inputs[2] in b.needed:
        raise refuse(op, f"no grad clause for the scales' share ({FIXED})")


CLAUSES: dict[type[Operation], Clause] = {
    MatmulNbitsOp: _matmul_nbits,
    MatmulPackedOp: _matmul_packed,
    DequantizeLinearOp: _dequantize_linear,
    GatherPackedOp: _gather_packed,
    GatherBlockQuantizedOp: _gather_block_quantized,
}
