"""Products: MatMul (numpy matmul semantics, batch broadcast) and Gemm (alpha*A'B' + beta*C).

A contraction meets two axes, so name-axes requires them to carry one name.  Gemm lowers to the
product kernel followed by one `kernel.zip` for its scaling and bias, as the WEP's kernel set has no
Gemm of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.ops.base import (
    Facts,
    LowerContext,
    NodeInfo,
    OpRule,
    broadcast_axes,
    broadcast_shapes,
    require_arity,
    same_axis,
)
from loam.poly import Poly

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis


def _check_contraction(node: NodeInfo, k_a: Poly, k_b: Poly) -> None:
    if k_a != k_b:
        raise node.fail(f"contracted extents disagree: {k_a} in the first operand, {k_b} in the second")


def _check_contracted_axes(node: NodeInfo, a: Axis, b: Axis) -> None:
    same_axis(
        node,
        a,
        b,
        "in the contraction",
        f"contracts axis {a.name} of the first operand with axis {b.name} of the second; a contraction needs one "
        "axis name on both sides",
    )


def _float_operands(node: NodeInfo, facts: Sequence[Facts]) -> None:
    elem = facts[0].elem
    for f in facts[1:]:
        if f.elem != elem:
            raise node.fail(f"operands have element types {elem.name} and {f.elem.name}; ONNX needs one")


class MatMulRule(OpRule):
    """ONNX MatMul: numpy.matmul, rank 1 operands promoted and their unit axis removed again."""

    op_types = ("MatMul",)

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2)
        a, b = inputs
        if a is None or b is None:
            raise node.fail("an input is absent")
        _float_operands(node, [a, b])
        if a.rank == 0 or b.rank == 0:
            raise node.fail("operands must have rank 1 or more")
        a_shape = a.shape if a.rank > 1 else (Poly.const(1), *a.shape)
        b_shape = b.shape if b.rank > 1 else (*b.shape, Poly.const(1))
        _check_contraction(node, a_shape[-1], b_shape[-2])
        batch = broadcast_shapes(node, [a_shape[:-2], b_shape[:-2]])
        shape = (*batch, *(a_shape[-2:-1] if a.rank > 1 else ()), *(b_shape[-1:] if b.rank > 1 else ()))
        value = None
        if a.value is not None and b.value is not None:
            value = np.matmul(a.value, b.value)
        return [Facts(a.elem, shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        a, b = inputs
        assert a is not None and b is not None
        k_a = a[-1]
        k_b = b[-2] if len(b) > 1 else b[-1]
        _check_contracted_axes(node, k_a, k_b)
        batch = broadcast_axes(node, [a[:-2], b[:-2]])
        return [(*batch, *(a[-2:-1] if len(a) > 1 else ()), *(b[-1:] if len(b) > 1 else ()))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.ops.lowering import matmul_of

        a, b = operands
        assert a is not None and b is not None
        return [matmul_of(ctx, node, a, b, ctx.result_types[0])]


class GemmRule(OpRule):
    """ONNX Gemm: Y = alpha * A' B' + beta * C, A' and B' optionally transposed, C stretched to Y."""

    op_types = ("Gemm",)
    attributes = frozenset({"alpha", "beta", "transA", "transB"})

    def _shapes(self, node: NodeInfo, a: Facts, b: Facts) -> tuple[Poly, Poly, Poly, Poly]:
        if a.rank != 2 or b.rank != 2:
            raise node.fail(f"A and B must have rank 2, got ranks {a.rank} and {b.rank}")
        m, k_a = a.shape[::-1] if node.attr("transA", 0) else a.shape
        k_b, n = b.shape[::-1] if node.attr("transB", 0) else b.shape
        return m, k_a, k_b, n

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 3)
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) == 3 else None
        if a is None or b is None:
            raise node.fail("A and B must be given")
        _float_operands(node, [a, b] + ([c] if c is not None else []))
        m, k_a, k_b, n = self._shapes(node, a, b)
        _check_contraction(node, k_a, k_b)
        if c is not None:
            if c.rank > 2:
                raise node.fail(f"C must have rank 2 or less, got {c.rank}")
            stretched = broadcast_shapes(node, [(m, n), c.shape])
            if stretched != (m, n):
                raise node.fail(f"C of extents [{', '.join(map(str, c.shape))}] does not stretch to [{m}, {n}]")
        return [Facts(a.elem, (m, n))]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        a, b = inputs[0], inputs[1]
        assert a is not None and b is not None
        m, k_a = a[::-1] if node.attr("transA", 0) else a
        k_b, n = b[::-1] if node.attr("transB", 0) else b
        _check_contracted_axes(node, k_a, k_b)
        out: tuple[Axis, ...] = (m, n)
        c = inputs[2] if len(inputs) == 3 else None
        if c is not None:
            out = broadcast_axes(node, [c], onto=out)
        return [out]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.ops.lowering import gemm_of

        return [gemm_of(ctx, node, operands)]


RULES: tuple[OpRule, ...] = (MatMulRule(), GemmRule())
