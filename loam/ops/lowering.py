"""Builders the operator rules share to emit kernel-dialect ops.

Kept apart from the rules so that each rule says what a node computes and these say how a kernel
op is spelled: element-type checks, constant folding into an `Expr`, and result types.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.ir import SSAValue

from loam.core.dtypes import ElementType
from loam.dialects.expr import Convert, Expr
from loam.dialects.kernel import ConstantOp, PermuteOp, ZipOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.ops.base import LowerContext, NodeInfo

# Element types Loam's kernels compute in (each operator allows those of them ONNX allows it).
COMPUTE_TYPES: tuple[str, ...] = (
    "f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64", "bool",
)  # fmt: skip
# Element types held (through ml_dtypes) but never computed in: Cast converts into and out of them.
NARROW_TYPES: tuple[str, ...] = (
    "f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f8E8M0FNU", "f4E2M1", "i4", "ui4", "i2", "ui2",
)  # fmt: skip
FLOAT_TYPES: tuple[str, ...] = ("f32", "f64", "f16", "bf16")
# Halves are computed in f32 and narrowed where the node's result is stored.
HALF_TYPES: tuple[str, ...] = ("f16", "bf16")


def axes_type(value: SSAValue) -> AxesTensorType:
    t = value.type
    assert isinstance(t, AxesTensorType), f"expected a !tensor_axes.tensor, got {t}"
    return t


def require_compute_type(node: NodeInfo, values: Sequence[SSAValue], allowed: Sequence[str] = COMPUTE_TYPES) -> None:
    """Stop the build, naming the type, where a value's element type is not one of `allowed`."""
    require_elem_types(node, [axes_type(v).elem.name for v in values], allowed)


def require_elem_types(node: NodeInfo, elems: Sequence[str], allowed: Sequence[str] = COMPUTE_TYPES) -> None:
    """`require_compute_type` over element type names (stage 0 checks these before any lowering)."""
    for elem in elems:
        if elem not in allowed:
            raise node.unsupported(f"computes in element type {elem}; Loam computes it in {', '.join(allowed)}")


def compute_elem(elem: str) -> str:
    """The element type arithmetic on `elem` runs in: f32 for halves, `elem` itself otherwise."""
    return "f32" if elem in HALF_TYPES else elem


def typed_expr(expr: Expr, operand_elems: Sequence[str], result_elem: str) -> Expr:
    """`expr` with half operands widened to f32 at its start and a half result narrowed at its end.

    The same Expr both folds in stage 0 and runs in the module, so the two round alike; the
    narrowing sits in the Expr (not around the kernel) so that fusing two zips keeps the rounding
    between the nodes that onnxruntime does.
    """
    if any(e in HALF_TYPES for e in operand_elems):
        expr = expr.substitute(
            [Expr.operand(i).cast("f32") if e in HALF_TYPES else Expr.operand(i) for i, e in enumerate(operand_elems)]
        )
    last = expr.steps[-1]
    if result_elem in HALF_TYPES and not (isinstance(last, Convert) and last.elem == result_elem):
        expr = expr.cast(result_elem)
    return expr


def folded_scalar(value: SSAValue) -> float | None:
    """The number a one-element float constant holds, so an Expr can carry it instead of a tensor."""
    from loam.dialects.graph import TensorDataAttr

    op = value.owner
    # A constant of polynomials (a symbolic value) is computed by the run from the symbols: an operand.
    if not isinstance(op, ConstantOp) or not isinstance(op.value, TensorDataAttr):
        return None
    array = op.value.to_numpy()
    if array.size != 1 or array.dtype.kind != "f":
        return None
    return float(np.asarray(array, dtype=np.float64).reshape(()))


def emit_zip(
    ctx: LowerContext,
    node: NodeInfo,
    operands: Sequence[SSAValue],
    expr: Expr,
    allowed: Sequence[str] = COMPUTE_TYPES,
) -> SSAValue:
    """A `kernel.zip` computing `expr` over `operands`; one-element float constants fold into it.

    Half operands and results are widened and narrowed around `expr` (`typed_expr`).  The zip
    keeps the node's result type, so where a folded constant of higher rank set the result's rank
    (x[3] * c[1, 1] is [1, 3]), the kernel stretches its value to that type.
    """
    require_compute_type(node, operands, allowed)
    result_type = ctx.result_types[0]
    expr = typed_expr(expr, [axes_type(v).elem.name for v in operands], result_type.elem.name)
    substitutes: list[Expr] = []
    kept: list[SSAValue] = []
    for v in operands:
        scalar = folded_scalar(v)
        if scalar is not None:
            substitutes.append(Expr.const(scalar, axes_type(v).elem.name))
        else:
            substitutes.append(Expr.operand(len(kept)))
            kept.append(v)
    expr = expr.substitute(substitutes)
    # Stage 0 folds a node whose operands are all known, so one operand is always left.
    assert kept, f"{node.where()}: every operand folded"
    op = ZipOp(kept, expr, result_type, node.name)
    ctx.emit(op)
    return op.result


def scalar_constant(ctx: LowerContext, value: np.ndarray, elem: ElementType, node: NodeInfo) -> SSAValue:
    """A rank-0 `kernel.constant` holding `value`'s one element."""
    from loam.dialects.graph import TensorDataAttr

    op = ConstantOp(TensorDataAttr.from_numpy(value.reshape(()), elem), AxesTensorType(elem, []), node.name)
    ctx.emit(op)
    return op.result


def filled(ctx: LowerContext, scalar: SSAValue, result_type: AxesTensorType, node: NodeInfo) -> SSAValue:
    """`scalar` at every position of `result_type`, whose extents may be symbolic: a `kernel.zip` whose
    broadcasting is all it does."""
    op = ZipOp([scalar], Expr.operand(0), result_type, node.name)
    ctx.emit(op)
    return op.result


def zip_of(
    ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue], step: str, allowed: Sequence[str] = COMPUTE_TYPES
) -> SSAValue:
    """One elementwise step over the operands (`add`, `relu`, ...)."""
    x = Expr.operand(0)
    expr = x.unary(step) if len(operands) == 1 else x.binary(step, Expr.operand(1))
    return emit_zip(ctx, node, operands, expr, allowed)


def transposed(ctx: LowerContext, node: NodeInfo, value: SSAValue) -> SSAValue:
    """A rank-2 operand with its two axes swapped (a view in numpy)."""
    t = axes_type(value)
    op = PermuteOp(value, (1, 0), AxesTensorType(t.elem, t.axes[::-1]), node.name)
    ctx.emit(op)
    if value.name_hint:
        op.result.name_hint = f"{value.name_hint}_T"
    return op.result
