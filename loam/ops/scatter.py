"""The scatters: ScatterElements (and opset 9's Scatter), ScatterND and TensorScatter (`kernel.scatter_elements`,
`kernel.scatter_nd`, `kernel.tensor_scatter`): a copy of the data with updates written, or reduced, at
indices.  Library kernels whose numpy pieces also fold known values; known indices must lie within the
data (a symbolic axis owes it), and indices computed at run time are checked by the kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import owed
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, require_arity, same_axis
from loam.ops.lowering import axes_type
from loam.ops.movement import MOVABLE, AxesIn, AxesOut, MovementRule, check_movable
from loam.ops.operands import (
    emit_library,
    given,
    is_symbolic,
    is_symbolic_array,
    norm_axis,
    polys_of,
    require_indices,
    require_within,
)
from loam.runtime.errors import DataError
from loam.runtime.kernels.indexing import kernel_scatter_elements, kernel_scatter_nd, kernel_tensor_scatter

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis


REDUCTIONS = ("none", "add", "mul", "max", "min")


def scatter_reduction(node: NodeInfo) -> str:
    """A scatter's `reduction` attribute ("none" when absent); one Loam does not compute stops the build."""
    reduction = node.attr("reduction", "none")
    if reduction not in REDUCTIONS:
        raise node.unsupported(f"reduction '{reduction}' is not supported ({', '.join(REDUCTIONS)})")
    return reduction


class ScatterElementsRule(MovementRule):
    """ONNX ScatterElements (11+; `reduction` from 16) and Scatter (9-10, the same without reduction)."""

    op_types = ("ScatterElements", "Scatter")
    kernels: tuple[str, ...] = ("kernel.scatter_elements",)
    attributes = frozenset({"axis", "reduction"})
    first_opset = 9

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3)
        x, i, u = (given(node, inputs, k, w) for k, w in enumerate(("data", "indices", "updates")))
        check_movable(node, x)
        require_indices(node, i)
        if u.elem != x.elem:
            raise node.fail(f"updates have element type {u.elem.name}, the data {x.elem.name}")
        if not x.rank == i.rank == u.rank:
            raise node.fail(f"data, indices and updates have ranks {x.rank}, {i.rank}, {u.rank}; ONNX needs one")
        for k, (a, b) in enumerate(zip(i.shape, u.shape, strict=True)):
            if a != b:
                if a.is_const and b.is_const:
                    raise node.fail("indices and updates have different extents")
                owed.require_equal(a, b, node, f"axis {k} of the indices and the updates")
        axis = norm_axis(node, int(node.attr("axis", 0)), x.rank)
        reduction = scatter_reduction(node)
        for k, (d, e) in enumerate(zip(x.shape, i.shape, strict=True)):
            if k != axis and not (d.is_const and e.is_const):
                owed.owe(d - e, node, f"the indices' axis {k} lies within the data's")
        require_within(node, None if i.value is None else np.asarray(i.value), x.shape[axis])
        value = None
        if x.value is not None and i.value is not None and u.value is not None and not is_symbolic_array(i.value):
            value = kernel_scatter_elements(
                np.asarray(x.value), np.asarray(i.value), np.asarray(u.value), axis=axis, reduction=reduction
            )
        return [Facts(x.elem, x.shape, value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [inputs[0]]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ScatterElementsOp

        x, i, u = operands
        assert x is not None and i is not None and u is not None
        axis = norm_axis(node, int(node.attr("axis", 0)), len(axes_type(x).axes))
        reduction = scatter_reduction(node)
        op = ScatterElementsOp([x, i, u], [ctx.result_types[0]], node.name, axis=axis, reduction=reduction)
        return emit_library(ctx, op)


class ScatterNDRule(MovementRule):
    """ONNX ScatterND (11+; `reduction` add/mul from 16, max/min from 18): a copy of the data with
    updates written (or reduced) at index tuples.

    The indices' last extent k (a number) says how many leading data axes a tuple addresses; the
    updates' extents must be the indices' but the last, then the data's from axis k on, which the
    build proves or the inputs owe.  Known tuples must lie within the data (a symbolic axis owes
    it); tuples computed at run time are checked by the kernel.  Known data, indices and updates fold.
    """

    op_types = ("ScatterND",)
    kernels: tuple[str, ...] = ("kernel.scatter_nd",)
    attributes = frozenset({"reduction"})
    first_opset = 11
    limitations = (
        "the indices' last extent must be a number; run-time indices are checked by the numpy kernel and "
        "clamped by the WGSL one; with reduction none a repeated tuple keeps its last update (as onnxruntime)"
    )

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3)
        x, i, u = (given(node, inputs, k, w) for k, w in enumerate(("data", "indices", "updates")))
        check_movable(node, x)
        if i.elem.name != "i64":
            raise node.fail(f"the indices have element type {i.elem.name}; ONNX needs i64")
        if u.elem != x.elem:
            raise node.fail(f"updates have element type {u.elem.name}, the data {x.elem.name}")
        reduction = scatter_reduction(node)
        if i.rank == 0:
            raise node.fail("the indices are a scalar; ONNX needs rank 1 or more (the last axis holds each tuple)")
        depth = i.shape[-1]
        if not depth.is_const:
            raise node.unsupported(
                f"the indices' last extent is {depth}; it says how many data axes a tuple addresses, so the build "
                "must know it as a number (fix it with the `dims` option)"
            )
        k = depth.const_value
        if k > x.rank:
            raise node.fail(f"the indices' last extent {k} exceeds the data's rank {x.rank}")
        want = (*i.shape[:-1], *x.shape[k:])
        if u.rank != len(want):
            raise node.fail(
                f"the updates have rank {u.rank}; ONNX needs {len(want)} (the indices' extents but the last, "
                f"then the data's from axis {k})"
            )
        for a, (got, need) in enumerate(zip(u.shape, want, strict=True)):
            source = f"indices axis {a}" if a < i.rank - 1 else f"data axis {k + a - (i.rank - 1)}"
            owed.require_equal(got, need, node, f"updates axis {a} against {source}")
        value = None
        if i.value is not None:
            known = np.asarray(i.value)
            for axis in range(k):
                require_within(node, known[..., axis], x.shape[axis])
            value = self.fold(x, known, u, reduction)
        return [Facts(x.elem, x.shape, value)]

    @staticmethod
    def fold(x: Facts, indices: np.ndarray, u: Facts, reduction: str) -> np.ndarray | None:
        """The value where the build knows all three inputs: numbers, or (moved as they are, with
        reduction none) polynomials; tuples known only as polynomials leave it to the run."""
        if x.value is None or u.value is None or is_symbolic_array(indices):
            return None
        data, updates = np.asarray(x.value), np.asarray(u.value)
        if is_symbolic_array(data) or is_symbolic_array(updates):
            if reduction != "none":
                return None
            data, updates = polys_of(data), polys_of(updates)
        return kernel_scatter_nd(data, indices, updates, reduction=reduction)

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [inputs[0]]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ScatterNDOp

        x, i, u = operands
        assert x is not None and i is not None and u is not None
        op = ScatterNDOp([x, i, u], [ctx.result_types[0]], node.name, reduction=scatter_reduction(node))
        return emit_library(ctx, op)


class TensorScatterRule(OpRule):
    """ONNX TensorScatter (opset 24): a KV cache `past_cache` with `update` written along `axis` (the
    sequence axis, never the batch axis 0) from position write_indices[b] of each batch row b (absent:
    0); mode `circular` wraps the positions round the axis.  A negative write index or a linear write
    past the axis' end raises the module's DataError at run time."""

    op_types = ("TensorScatter",)
    kernels: tuple[str, ...] = ("kernel.tensor_scatter",)
    attributes = frozenset({"axis", "mode"})
    first_opset = 24
    elem_types = MOVABLE

    def settled(self, node: NodeInfo, rank: int) -> tuple[int, str]:
        """The written axis (non-negative, never the batch axis) and the mode."""
        axis = norm_axis(node, int(node.attr("axis", -2)), rank)
        if axis == 0:
            raise node.fail("axis is 0, the batch axis; TensorScatter writes along another axis")
        mode = str(node.attr("mode", "linear"))
        if mode not in ("linear", "circular"):
            raise node.unsupported(f"mode {mode!r} is not supported (ONNX defines linear and circular)")
        return axis, mode

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 3)
        past, update = given(node, inputs, 0, "past_cache"), given(node, inputs, 1, "update")
        check_movable(node, past)
        if update.elem != past.elem:
            raise node.fail(f"update is {update.elem.name} and past_cache {past.elem.name}; ONNX needs one type")
        if past.rank < 2 or update.rank != past.rank:
            raise node.fail(f"past_cache has rank {past.rank} and update {update.rank}; they must agree, at least 2")
        axis, mode = self.settled(node, past.rank)
        for k, (a, b) in enumerate(zip(past.shape, update.shape, strict=True)):
            if k != axis:
                owed.require_equal(a, b, node, f"axis {k} of past_cache and update")
        if update.shape[axis].is_const and past.shape[axis].is_const:
            if update.shape[axis].const_value > past.shape[axis].const_value:
                raise node.fail(f"update's axis {axis} ({update.shape[axis]}) is longer than the cache's")
        w = inputs[2] if len(inputs) == 3 else None
        if w is not None:
            if w.elem.name != "i64":
                raise node.fail(f"write_indices has element type {w.elem.name}; ONNX takes i64")
            if w.rank != 1:
                raise node.fail(f"write_indices has rank {w.rank}; it holds one index per batch row")
            owed.require_equal(w.shape[0], past.shape[0], node, "write_indices and the batch axis")
        value = None
        if past.value is not None and update.value is not None and (w is None or w.value is not None):
            if not any(is_symbolic(f) for f in (past, update, w)):
                rest = [np.asarray(w.value)] if w is not None else []
                try:
                    value = kernel_tensor_scatter(
                        np.asarray(past.value), np.asarray(update.value), *rest, axis=axis, mode=mode
                    )
                except DataError as err:
                    raise node.fail(str(err)) from None
        return [Facts(past.elem, past.shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        past, update = inputs[0], inputs[1]
        assert past is not None and update is not None
        axis, _ = self.settled(node, len(past))
        for k, (a, b) in enumerate(zip(past, update, strict=True)):
            if k != axis:
                same_axis(node, a, b, f"at axis {k} of past_cache and update")
        w = inputs[2] if len(inputs) == 3 else None
        if w is not None:
            same_axis(node, w[0], past[0], "at the batch axis of write_indices and past_cache")
        return [past]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import TensorScatterOp

        present = [v for v in operands if v is not None]
        axis, mode = self.settled(node, len(ctx.result_types[0].axes))
        return emit_library(ctx, TensorScatterOp(present, ctx.result_types[:1], node.name, axis=axis, mode=mode))


RULES: tuple[OpRule, ...] = (ScatterElementsRule(), ScatterNDRule(), TensorScatterRule())
