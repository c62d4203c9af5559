"""Builders the operator rules share to emit kernel-dialect ops.

Kept apart from the rules so that each rule says what a node computes and these say how a kernel
op is spelled: element-type checks, constant folding into an `Expr`, and result types.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.ir import SSAValue

from loam.dialects.kernel import ConstantOp, Expr, MatmulOp, PermuteOp, ZipOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.ops.base import LowerContext, NodeInfo

# Element types the numpy and WGSL kernels compute in.
COMPUTE_TYPES = ("f32",)


def axes_type(value: SSAValue) -> AxesTensorType:
    t = value.type
    assert isinstance(t, AxesTensorType), f"expected a !tensor_axes.tensor, got {t}"
    return t


def require_compute_type(node: NodeInfo, values: Sequence[SSAValue]) -> None:
    """Arithmetic kernels compute in f32; any other element type stops the build naming it."""
    for v in values:
        elem = axes_type(v).elem
        if elem.name not in COMPUTE_TYPES:
            raise node.unsupported(
                f"computes in element type {elem.name}; Loam's kernels compute in {', '.join(COMPUTE_TYPES)}"
            )


def folded_scalar(value: SSAValue) -> float | None:
    """The number a one-element float constant holds, so an Expr can carry it instead of a tensor."""
    op = value.owner
    if not isinstance(op, ConstantOp):
        return None
    array = op.value.to_numpy()
    if array.size != 1 or array.dtype.kind != "f":
        return None
    return float(np.asarray(array, dtype=np.float64).reshape(()))


def emit_zip(ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue], expr: Expr) -> SSAValue:
    """A `kernel.zip` computing `expr` over `operands`; one-element float constants fold into it.

    The zip keeps the node's result type, so where a folded constant of higher rank set the
    result's rank (x[3] * c[1, 1] is [1, 3]), the kernel stretches its value to that type.
    """
    require_compute_type(node, operands)
    result_type = ctx.result_types[0]
    substitutes: list[Expr] = []
    kept: list[SSAValue] = []
    for v in operands:
        scalar = folded_scalar(v)
        if scalar is not None:
            substitutes.append(Expr.const(scalar))
        else:
            substitutes.append(Expr.operand(len(kept)))
            kept.append(v)
    expr = expr.substitute(substitutes)
    # Stage 0 folds a node whose operands are all known, so one operand is always left.
    assert kept, f"{node.where()}: every operand folded"
    op = ZipOp(kept, expr, result_type, node.name)
    ctx.emit(op)
    return op.result


def zip_of(ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue], step: str) -> SSAValue:
    """One elementwise step over the operands (`add`, `relu`, ...)."""
    x = Expr.operand(0)
    expr = x.unary(step) if len(operands) == 1 else x.binary(step, Expr.operand(1))
    return emit_zip(ctx, node, operands, expr)


def matmul_of(ctx: LowerContext, node: NodeInfo, a: SSAValue, b: SSAValue, result_type: AxesTensorType) -> SSAValue:
    require_compute_type(node, [a, b])
    op = MatmulOp(a, b, result_type, node.name)
    ctx.emit(op)
    return op.result


def transposed(ctx: LowerContext, node: NodeInfo, value: SSAValue) -> SSAValue:
    """A rank-2 operand with its two axes swapped (a view in numpy)."""
    t = axes_type(value)
    op = PermuteOp(value, (1, 0), AxesTensorType(t.elem, t.axes[::-1]), node.name)
    ctx.emit(op)
    if value.name_hint:
        op.result.name_hint = f"{value.name_hint}_T"
    return op.result


def gemm_of(ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> SSAValue:
    """Gemm as a product and one zip: alpha * A' B' + beta * C."""
    a, b = operands[0], operands[1]
    c = operands[2] if len(operands) > 2 else None
    assert a is not None and b is not None
    if node.attr("transA", 0):
        a = transposed(ctx, node, a)
    if node.attr("transB", 0):
        b = transposed(ctx, node, b)
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    product = matmul_of(ctx, node, a, b, ctx.result_types[0])
    product.name_hint = f"{node.name}_product"
    expr = Expr.operand(0)
    if alpha != 1.0:
        expr = expr.binary("mul", alpha)
    inputs = [product]
    if c is not None and beta != 0.0:
        bias = Expr.operand(1) if beta == 1.0 else Expr.operand(1).binary("mul", beta)
        expr = expr.binary("add", bias)
        inputs.append(c)
    if len(inputs) == 1 and alpha == 1.0:
        return product
    return emit_zip(ctx, node, inputs, expr)
