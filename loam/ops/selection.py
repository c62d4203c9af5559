"""Operators whose result's length depends on the values: NonZero, Compress and Unique.

How many elements they keep is a length only the run knows (`result_length`), bound once the node
ran; NonZero over known values folds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import dtypes
from loam.core.poly import Poly, poly_product
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, int_attr, require_arity
from loam.ops.lowering import axes_type
from loam.ops.movement import MOVABLE, check_movable
from loam.ops.operands import emit_library, given, is_symbolic, norm_axis
from loam.runtime.kernels.indexing import kernel_nonzero

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis


def _selected_axis(node: NodeInfo, rank: int) -> tuple[int, int]:
    """(axis, flat) of Compress and Unique: the axis they select along, or 0 with `flat` where the
    node names none (they then read the input flattened)."""
    axis = node.attr("axis", None)
    return (0, 1) if axis is None else (norm_axis(node, int(axis), rank), 0)


class NonZeroRule(OpRule):
    """ONNX NonZero (opset 9): the indices of the nonzero elements, [rank, count] (i64).  The count
    depends on values: it is a length only the run knows (`result_length`), bound once the node ran."""

    op_types = ("NonZero",)
    kernels: tuple[str, ...] = ("kernel.nonzero",)
    first_opset = 9
    elem_types = MOVABLE

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "X")
        check_movable(node, x, "X")
        if x.value is not None and not is_symbolic(x):
            value = kernel_nonzero(np.asarray(x.value))
            return [Facts(dtypes.by_name("i64"), tuple(Poly.const(d) for d in value.shape), value)]
        return [Facts(dtypes.by_name("i64"), (Poly.const(x.rank), node.result_length(0, 1)))]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        return [(None, None)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import NonZeroOp

        x = operands[0]
        assert x is not None
        return emit_library(ctx, NonZeroOp([x], [ctx.result_types[0]], node.name))


class CompressRule(OpRule):
    """ONNX Compress (opset 9): the slices along `axis` (of the input flattened without one) where
    the condition is true.  How many depends on values: a length only the run knows."""

    op_types = ("Compress",)
    kernels: tuple[str, ...] = ("kernel.compress",)
    attributes = frozenset({"axis"})
    first_opset = 9
    elem_types = MOVABLE

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2)
        x, cond = given(node, inputs, 0, "input"), given(node, inputs, 1, "condition")
        check_movable(node, x, "input")
        if cond.elem.name != "bool" or cond.rank != 1:
            raise node.fail(f"the condition must be a bool vector, got {cond.elem.name} of rank {cond.rank}")
        axis, flat = _selected_axis(node, x.rank)
        shape = (
            (node.result_length(0, 0),)
            if flat
            else tuple(node.result_length(0, axis) if k == axis else d for k, d in enumerate(x.shape))
        )
        return [Facts(x.elem, shape)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        axis, flat = _selected_axis(node, len(x))
        return [(None,) if flat else tuple(None if k == axis else a for k, a in enumerate(x))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import CompressOp

        x, cond = operands
        assert x is not None and cond is not None
        axis, flat = _selected_axis(node, len(axes_type(x).axes))
        return emit_library(ctx, CompressOp([x, cond], [ctx.result_types[0]], node.name, axis=axis, flat=flat))


class UniqueRule(OpRule):
    """ONNX Unique (opset 11): the distinct elements (or slices along `axis`), sorted or in order of
    first occurrence, with their first indices, each element's position among them, and their
    counts.  How many there are depends on values: a length only the run knows."""

    op_types = ("Unique",)
    kernels: tuple[str, ...] = ("kernel.unique",)
    attributes = frozenset({"axis", "sorted"})
    first_opset = 11
    elem_types = MOVABLE

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "X")
        check_movable(node, x, "X")
        int_attr(node, "sorted", 1, (0, 1))
        axis, flat = _selected_axis(node, x.rank)
        count = node.result_length(0, axis)
        y = (count,) if flat else tuple(count if k == axis else d for k, d in enumerate(x.shape))
        i64 = dtypes.by_name("i64")
        positions = poly_product(x.shape) if flat else x.shape[axis]
        return [Facts(x.elem, y), Facts(i64, (count,)), Facts(i64, (positions,)), Facts(i64, (count,))][: node.outputs]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        axis, flat = _selected_axis(node, len(x))
        y: tuple[Axis | None, ...] = (None,) if flat else tuple(None if k == axis else a for k, a in enumerate(x))
        positions: tuple[Axis | None, ...] = (None,) if flat else (x[axis],)
        return [y, (None,), positions, (None,)][: len(outputs)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import UniqueOp

        x = operands[0]
        assert x is not None
        axis, flat = _selected_axis(node, len(axes_type(x).axes))
        op = UniqueOp([x], ctx.result_types, node.name, axis=axis, flat=flat, ordered=int_attr(node, "sorted", 1))
        return emit_library(ctx, op)


RULES: tuple[OpRule, ...] = (NonZeroRule(), CompressRule(), UniqueRule())
