"""Products: MatMul (numpy matmul semantics, batch broadcast), Gemm (alpha*A'B' + beta*C), the
integer products of quantized models (MatMulInteger, QLinearMatMul) and the determinant (Det).

A contraction meets two axes, so name-axes requires them to carry one name.  Gemm lowers to the
product kernel followed by one `kernel.zip` for its scaling and bias, as the kernel dialect has no
Gemm of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import dtypes, owed
from loam.core.poly import Poly
from loam.ops.base import (
    Facts,
    LowerContext,
    NodeInfo,
    OpRule,
    broadcast_axes,
    broadcast_shapes,
    float_attr,
    int_attr,
    require_arity,
    same_axis,
)
from loam.ops.lowering import HALF_TYPES, axes_type
from loam.ops.operands import emit_library, given, optional, present_bits
from loam.runtime.kernels.common import narrowed, widened
from loam.runtime.kernels.products import kernel_det, kernel_matmul_integer, kernel_qlinear_matmul

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import AxesTensorType, Axis


def _check_contraction(node: NodeInfo, k_a: Poly, k_b: Poly) -> None:
    """The contracted extents are one length: equal numbers, or symbolic lengths the inputs owe equal."""
    if k_a.is_const and k_b.is_const and k_a != k_b:
        raise node.fail(f"contracted extents disagree: {k_a} in the first operand, {k_b} in the second")
    owed.require_equal(k_a, k_b, node, "the contracted axis")


def stretch_onto(node: NodeInfo, c: tuple[Poly, ...], y: tuple[Poly, ...], what: str) -> None:
    """ONNX's unidirectional broadcast of `c` onto `y`: each axis of `c`, aligned at the end, is 1 or `y`'s."""
    if len(c) > len(y):
        raise node.fail(f"{what} of rank {len(c)} does not stretch to rank {len(y)}")
    for i, (ce, ye) in enumerate(zip(c[::-1], y[::-1], strict=False)):
        if ce == Poly.const(1) or ce == ye:
            continue
        if ce.is_const and ye.is_const:
            if ye != Poly.const(1):
                raise node.fail(f"cannot broadcast extents {ye} and {ce} at output axis {len(y) - 1 - i}")
            raise node.fail(
                f"{what} of extents [{', '.join(map(str, c))}] does not stretch to [{', '.join(map(str, y))}]"
            )
        owed.require_equal(ce, ye, node, f"{what} stretched at axis {len(y) - 1 - i}")


def _check_contracted_axes(node: NodeInfo, a: Axis, b: Axis) -> None:
    same_axis(
        node,
        a,
        b,
        "in the contraction",
        f"contracts axis {a.name} of the first operand with axis {b.name} of the second; a contraction needs one "
        "axis name on both sides",
    )


# Element types the products compute (ONNX also allows ui32/ui64, which Loam does not carry).
PRODUCT_TYPES: tuple[str, ...] = ("f32", "f64", "f16", "bf16", "i32", "i64")


def _float_operands(node: NodeInfo, facts: Sequence[Facts]) -> None:
    """One element type for every operand, and one the products compute."""
    elem = facts[0].elem
    if elem.name not in PRODUCT_TYPES:
        raise node.unsupported(
            f"operands have element type {elem.name}; Loam computes {node.op_type} in {', '.join(PRODUCT_TYPES)}"
        )
    for f in facts[1:]:
        if f.elem != elem:
            raise node.fail(f"operands have element types {elem.name} and {f.elem.name}; ONNX needs one")


def _widened_operand(ctx: LowerContext, node: NodeInfo, value: SSAValue) -> SSAValue:
    """A half operand converted to f32 (exact), so the product runs in f32."""
    from loam.dialects.kernel import CastOp
    from loam.dialects.tensor_axes import AxesTensorType

    t = axes_type(value)
    op = CastOp(value, AxesTensorType("f32", t.axes), node.name)
    ctx.emit(op)
    return op.result


def product_of(
    ctx: LowerContext, node: NodeInfo, a: SSAValue, b: SSAValue, result_type: AxesTensorType, narrow: bool = True
) -> SSAValue:
    """One `kernel.matmul` (numpy.matmul) of operands of one of `PRODUCT_TYPES`.

    Halves (f16, bf16) are widened to f32, multiplied and summed there, and narrowed once to the
    result's type, as the rest of Loam computes halves; with `narrow` False the f32 product is
    returned, for a caller (Gemm) that goes on computing before it narrows.
    """
    from loam.dialects.kernel import CastOp, MatmulOp
    from loam.dialects.tensor_axes import AxesTensorType

    if result_type.elem.name not in HALF_TYPES:
        op = MatmulOp(a, b, result_type, node.name)
        ctx.emit(op)
        return op.result
    wide = MatmulOp(
        _widened_operand(ctx, node, a),
        _widened_operand(ctx, node, b),
        AxesTensorType("f32", result_type.axes),
        node.name,
    )
    ctx.emit(wide)
    if not narrow:
        return wide.result
    narrowed = CastOp(wide.result, result_type, node.name)
    ctx.emit(narrowed)
    return narrowed.result


def matmul_value(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy.matmul as the kernels compute it (halves in f32, narrowed once): stage 0's folding."""
    a, b = np.asarray(a), np.asarray(b)
    return narrowed(np.asarray(np.matmul(widened(a), widened(b))), a.dtype)


class MatMulRule(OpRule):
    """ONNX MatMul: numpy.matmul, rank 1 operands promoted and their unit axis removed again."""

    op_types = ("MatMul",)
    kernels: tuple[str, ...] = ("kernel.matmul", "kernel.cast")
    elem_types = PRODUCT_TYPES
    limitations = "halves are multiplied in f32 and narrowed once"
    b_index = 1  # where the second factor is among the inputs

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2)
        a, b = inputs
        if a is None or b is None:
            raise node.fail("an input is absent")
        _float_operands(node, [a, b])
        shape = self.product_shape(node, a, b)
        value = None
        if a.value is not None and b.value is not None:
            value = matmul_value(a.value, b.value)
        return [Facts(a.elem, shape, value)]

    @staticmethod
    def product_shape(node: NodeInfo, a: Facts, b: Facts) -> tuple[Poly, ...]:
        """numpy.matmul's result extents, the contraction checked."""
        if a.rank == 0 or b.rank == 0:
            raise node.fail("operands must have rank 1 or more")
        a_shape = a.shape if a.rank > 1 else (Poly.const(1), *a.shape)
        b_shape = b.shape if b.rank > 1 else (*b.shape, Poly.const(1))
        _check_contraction(node, a_shape[-1], b_shape[-2])
        batch = broadcast_shapes(node, [a_shape[:-2], b_shape[:-2]])
        return (*batch, *(a_shape[-2:-1] if a.rank > 1 else ()), *(b_shape[-1:] if b.rank > 1 else ()))

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        a, b = inputs[0], inputs[self.b_index]
        assert a is not None and b is not None
        k_a = a[-1]
        k_b = b[-2] if len(b) > 1 else b[-1]
        _check_contracted_axes(node, k_a, k_b)
        batch = broadcast_axes(node, [a[:-2], b[:-2]])
        return [(*batch, *(a[-2:-1] if len(a) > 1 else ()), *(b[-1:] if len(b) > 1 else ()))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        a, b = operands
        assert a is not None and b is not None
        return [product_of(ctx, node, a, b, ctx.result_types[0])]


class GemmRule(OpRule):
    """ONNX Gemm: Y = alpha * A' B' + beta * C, A' and B' optionally transposed, C stretched to Y.

    Opsets 1-6 carry a `broadcast` attribute: with 1, C stretches to [M, N] as from opset 7 on
    (numpy's rules, towards Y only); with 0 (the default), C must be [M, N] itself.
    """

    op_types = ("Gemm",)
    kernels: tuple[str, ...] = ("kernel.matmul", "kernel.permute", "kernel.zip")
    attributes = frozenset({"alpha", "beta", "transA", "transB", "broadcast"})
    elem_types = PRODUCT_TYPES
    limitations = "integer Gemm only with alpha 1 and beta 0 or 1"

    def _shapes(self, node: NodeInfo, a: Facts, b: Facts) -> tuple[Poly, Poly, Poly, Poly]:
        if a.rank != 2 or b.rank != 2:
            raise node.fail(f"A and B must have rank 2, got ranks {a.rank} and {b.rank}")
        m, k_a = a.shape[::-1] if int_attr(node, "transA", 0, (0, 1)) else a.shape
        k_b, n = b.shape[::-1] if int_attr(node, "transB", 0, (0, 1)) else b.shape
        return m, k_a, k_b, n

    @staticmethod
    def c_stretches(node: NodeInfo) -> bool:
        """Whether C may broadcast to [M, N]: always from opset 7, with `broadcast` 1 before."""
        if node.since >= 7:
            return True  # (a `broadcast` attribute at opset 7+ is refused as undefined by check_attributes)
        return bool(node.attr("broadcast", 0))

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 3)
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) == 3 else None
        if a is None or b is None:
            raise node.fail("A and B must be given")
        _float_operands(node, [a, b] + ([c] if c is not None else []))
        if not a.elem.is_float:
            alpha, beta = float_attr(node, "alpha", 1.0), float_attr(node, "beta", 1.0)
            if alpha != 1.0 or (c is not None and beta not in (0.0, 1.0)):
                raise node.unsupported(
                    f"integer Gemm with alpha {alpha} and beta {beta} is not supported (alpha 1, beta 0 or 1 only)"
                )
        m, k_a, k_b, n = self._shapes(node, a, b)
        _check_contraction(node, k_a, k_b)
        stretches = self.c_stretches(node)
        if c is not None:
            extents = ", ".join(map(str, c.shape))
            if c.rank > 2:
                raise node.fail(f"C must have rank 2 or less, got {c.rank}")
            if not stretches:
                pairs = zip(c.shape, (m, n), strict=False)
                if c.rank != 2 or any(ce.is_const and ye.is_const and ce != ye for ce, ye in pairs):
                    raise node.fail(
                        f"C of extents [{extents}] must be [{m}, {n}]: broadcast is 0 at opset {node.since}"
                    )
                for i, (ce, ye) in enumerate(zip(c.shape, (m, n), strict=True)):
                    owed.require_equal(ce, ye, node, f"C axis {i}")
            else:
                stretch_onto(node, c.shape, (m, n), "C")
        return [Facts(a.elem, (m, n))]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        a, b = inputs[0], inputs[1]
        assert a is not None and b is not None
        m, k_a = a[::-1] if int_attr(node, "transA", 0, (0, 1)) else a
        k_b, n = b[::-1] if int_attr(node, "transB", 0, (0, 1)) else b
        _check_contracted_axes(node, k_a, k_b)
        out: tuple[Axis, ...] = (m, n)
        c = inputs[2] if len(inputs) == 3 else None
        if c is not None:
            out = broadcast_axes(node, [c], onto=out)
        return [out]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.expr import Expr
        from loam.dialects.graph import set_name_hint
        from loam.ops.lowering import emit_zip, transposed

        a, b = operands[0], operands[1]
        c = operands[2] if len(operands) > 2 else None
        assert a is not None and b is not None
        if int_attr(node, "transA", 0, (0, 1)):
            a = transposed(ctx, node, a)
        if int_attr(node, "transB", 0, (0, 1)):
            b = transposed(ctx, node, b)
        alpha = float_attr(node, "alpha", 1.0)
        beta = float_attr(node, "beta", 1.0)
        result_type = ctx.result_types[0]
        plain = alpha == 1.0 and (c is None or beta == 0.0)
        # A half product stays in f32 until the zip below narrows it with the scaling and bias.
        product = product_of(ctx, node, a, b, result_type, narrow=plain)
        set_name_hint(product, f"{node.name}_product")  # not where the node's name is no valid SSA name
        if plain:
            return [product]
        # alpha * A'B' + beta * C as one zip; an integer Gemm reaches here only with alpha 1, beta 0 or 1.
        expr = Expr.operand(0)
        if alpha != 1.0:
            expr = expr.binary("mul", alpha)
        inputs = [product]
        if c is not None and beta != 0.0:
            bias = Expr.operand(1) if beta == 1.0 else Expr.operand(1).binary("mul", beta)
            expr = expr.binary("add", bias)
            inputs.append(c)
        return [emit_zip(ctx, node, inputs, expr)]


QUANTIZED_FACTORS: tuple[str, ...] = ("i8", "ui8")


def _zero_point(node: NodeInfo, zero: Facts | None, of: Facts, what: str, per: Poly | None) -> None:
    """A zero point has its factor's type and one value, or one per row (`per`: the extent) of it."""
    if zero is None:
        return
    if zero.elem != of.elem:
        raise node.fail(f"{what}'s zero point is {zero.elem.name} and {what} {of.elem.name}; ONNX needs one type")
    if zero.rank == 0 or zero.static_shape() == (1,):
        return
    if zero.rank != 1 or per is None:
        raise node.unsupported(f"{what}'s zero point must be one value or a vector along its matrix axis")
    owed.require_equal(zero.shape[0], per, node, f"{what}'s zero point and its matrix axis")


class MatMulIntegerRule(MatMulRule):
    """ONNX MatMulInteger (opset 10): (a - a_zero_point) @ (b - b_zero_point) in i32, for i8/ui8
    factors; a's zero point is one value or one per row, b's one value or one per column."""

    op_types = ("MatMulInteger",)
    kernels: tuple[str, ...] = ("kernel.matmul_integer",)
    elem_types = QUANTIZED_FACTORS
    limitations = ""
    first_opset = 10

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 4)
        a, b = given(node, inputs, 0, "A"), given(node, inputs, 1, "B")
        for what, f in (("A", a), ("B", b)):
            if f.elem.name not in QUANTIZED_FACTORS:
                raise node.unsupported(f"{what} has element type {f.elem.name}; ONNX takes i8 or ui8")
        shape = self.product_shape(node, a, b)
        _zero_point(node, optional(inputs, 2), a, "A", a.shape[-2] if a.rank > 1 else None)
        _zero_point(node, optional(inputs, 3), b, "B", b.shape[-1] if b.rank > 1 else None)
        value = None
        if all(f is None or f.value is not None for f in inputs):
            zeros = [np.asarray(f.value) for f in inputs[2:] if f is not None]
            value = kernel_matmul_integer(
                np.asarray(a.value), np.asarray(b.value), *zeros, zeros=present_bits(inputs[2:])
            )
        return [Facts(dtypes.by_name("i32"), shape, value)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import MatmulIntegerOp

        present = [v for v in operands if v is not None]
        op = MatmulIntegerOp(present, [ctx.result_types[0]], node.name, zeros=present_bits(operands[2:]))
        return emit_library(ctx, op)


class QLinearMatMulRule(MatMulRule):
    """ONNX QLinearMatMul (opset 10; f16/bf16 scales 21): the i32 product of (a - a_zero) and
    (b - b_zero), times a_scale * b_scale / y_scale, rounded to nearest even, plus y_zero, saturated
    to y_zero's type (i8 or ui8).  Scales and zero points are one value each (per tensor), or a's
    one per row and b's one per column."""

    op_types = ("QLinearMatMul",)
    kernels: tuple[str, ...] = ("kernel.qlinear_matmul",)
    elem_types = QUANTIZED_FACTORS
    limitations = ""
    first_opset = 10
    b_index = 3

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 8)
        names = ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point")
        a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = (
            given(node, inputs, k, name) for k, name in enumerate(names)
        )
        for what, f in (("a", a), ("b", b), ("y_zero_point", y_zero)):
            if f.elem.name not in QUANTIZED_FACTORS:
                raise node.unsupported(f"{what} has element type {f.elem.name}; ONNX takes i8 or ui8")
        for what, f in (("a_scale", a_scale), ("b_scale", b_scale), ("y_scale", y_scale)):
            if f.elem.name not in ("f32", "f16", "bf16") or f.elem != a_scale.elem:
                raise node.fail(f"{what} has element type {f.elem.name}; the scales share one float type")
        shape = self.product_shape(node, a, b)
        _zero_point(node, a_zero, a, "a", a.shape[-2] if a.rank > 1 else None)
        _zero_point(node, b_zero, b, "b", b.shape[-1] if b.rank > 1 else None)
        for what, scale, zero in (("a", a_scale, a_zero), ("b", b_scale, b_zero)):
            if scale.rank != zero.rank or scale.static_shape() != zero.static_shape():
                raise node.fail(f"{what}_scale and {what}_zero_point have different extents")
        if y_scale.static_shape() not in ((), (1,)) or y_zero.static_shape() not in ((), (1,)):
            raise node.fail("y_scale and y_zero_point must be one value each")
        value = None
        if all(f is not None and f.value is not None for f in inputs):
            value = kernel_qlinear_matmul(*(np.asarray(f.value) for f in inputs if f is not None))
        return [Facts(y_zero.elem, shape, value)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import QLinearMatmulOp

        present = [v for v in operands if v is not None]
        return emit_library(ctx, QLinearMatmulOp(present, [ctx.result_types[0]], node.name))


class DetRule(OpRule):
    """ONNX Det (opset 11): the determinant of each square matrix in the last two axes (LAPACK's LU;
    halves in f32)."""

    op_types = ("Det",)
    kernels: tuple[str, ...] = ("kernel.det",)
    elem_types = ("f32", "f64", "f16", "bf16")
    first_opset = 11

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "X")
        if x.elem.name not in self.elem_types:
            raise node.unsupported(
                f"X has element type {x.elem.name}; Loam computes Det in {', '.join(self.elem_types)}"
            )
        if x.rank < 2:
            raise node.fail(f"X has rank {x.rank}; Det takes square matrices in the last two axes")
        owed.require_equal(x.shape[-2], x.shape[-1], node, "the matrices' two axes")
        value = kernel_det(np.asarray(x.value)) if x.value is not None else None
        return [Facts(x.elem, x.shape[:-2], value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        assert inputs[0] is not None
        return [inputs[0][:-2]]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import DetOp

        x = operands[0]
        assert x is not None
        return emit_library(ctx, DetOp([x], [ctx.result_types[0]], node.name))


RULES: tuple[OpRule, ...] = (MatMulRule(), GemmRule(), MatMulIntegerRule(), QLinearMatMulRule(), DetRule())
