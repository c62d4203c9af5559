"""Operator rules of the indexing family: Gather, GatherElements, ScatterElements, Range, ConstantOfShape.

Gathers and scatters lower to library kernels (`kernel.gather`, `kernel.gather_elements`,
`kernel.scatter_elements`) whose numpy pieces also fold known values.  Range and ConstantOfShape
make values whose extents come from their inputs, so the build must know those inputs and folds
the node: a Range over a run-time value would have an extent no number gives (symbolic extents
are a later issue), and is refused naming the node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam import dtypes
from loam.backends.numpy_kernels.indexing import _k_gather, _k_gather_elements, _k_scatter_elements
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, require_arity
from loam.ops.movement import MOVABLE, AxesIn, AxesOut, MovementRule, check_movable
from loam.ops.operands import INDEX_TYPES, emit_library, facts, given, known_ints, norm_axis, static_extents

if TYPE_CHECKING:
    from xdsl.ir import SSAValue


def _indices(node: NodeInfo, f: Facts) -> None:
    if f.elem.name not in INDEX_TYPES:
        raise node.fail(f"the indices have element type {f.elem.name}; ONNX needs i32 or i64")


def _bounded(node: NodeInfo, indices: np.ndarray | None, extent: int) -> None:
    """Known indices must lie in [-extent, extent): the build says so rather than numpy at run time."""
    if indices is None or indices.size == 0:
        return
    low, high = int(indices.min()), int(indices.max())
    if low < -extent or high >= extent:
        raise node.fail(f"index {low if low < -extent else high} is outside [{-extent}, {extent - 1}]")


class GatherRule(MovementRule):
    """ONNX Gather: data[..., indices, ...] along `axis`; indices of any rank, negative from the end."""

    op_types = ("Gather",)
    attributes = frozenset({"axis"})

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2)
        x, i = given(node, inputs, 0, "data"), given(node, inputs, 1, "indices")
        check_movable(node, x)
        _indices(node, i)
        axis = norm_axis(node, int(node.attr("axis", 0)), x.rank)
        extent = x.shape[axis]
        if extent.is_const:
            _bounded(node, i.value, extent.const_value)
        shape = (*x.shape[:axis], *i.shape, *x.shape[axis + 1 :])
        value = None
        if x.value is not None and i.value is not None:
            value = _k_gather(np.asarray(x.value), np.asarray(i.value), axis=axis)
        return [Facts(x.elem, shape, value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        x, i = inputs
        assert x is not None and i is not None
        axis = norm_axis(node, int(node.attr("axis", 0)), len(x))
        return [(*x[:axis], *i, *x[axis + 1 :])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import GatherOp

        x, i = operands
        assert x is not None and i is not None
        axis = norm_axis(node, int(node.attr("axis", 0)), len(x.type.axes))  # type: ignore[attr-defined]
        return emit_library(ctx, GatherOp([x, i], [ctx.result_types[0]], node.name, axis=axis))


class GatherElementsRule(MovementRule):
    """ONNX GatherElements (opset 11+): out[i][j] = data[indices[i][j]][j] for axis 0, and so on."""

    op_types = ("GatherElements",)
    attributes = frozenset({"axis"})
    first_opset = 11

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2)
        x, i = given(node, inputs, 0, "data"), given(node, inputs, 1, "indices")
        check_movable(node, x)
        _indices(node, i)
        if x.rank != i.rank:
            raise node.fail(f"data and indices have ranks {x.rank} and {i.rank}; ONNX needs one")
        axis = norm_axis(node, int(node.attr("axis", 0)), x.rank)
        dims, idims = static_extents(node, x), static_extents(node, i, "the indices")
        for k, (d, e) in enumerate(zip(dims, idims, strict=True)):
            if k != axis and e > d:
                raise node.fail(f"indices extent {e} exceeds the data's {d} at axis {k}")
        _bounded(node, i.value, dims[axis])
        value = None
        if x.value is not None and i.value is not None:
            value = _k_gather_elements(np.asarray(x.value), np.asarray(i.value), axis=axis)
        return [Facts(x.elem, i.shape, value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[1] is not None
        return [inputs[1]]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import GatherElementsOp

        x, i = operands
        assert x is not None and i is not None
        axis = norm_axis(node, int(node.attr("axis", 0)), len(x.type.axes))  # type: ignore[attr-defined]
        return emit_library(ctx, GatherElementsOp([x, i], [ctx.result_types[0]], node.name, axis=axis))


REDUCTIONS = ("none", "add", "mul", "max", "min")


class ScatterElementsRule(MovementRule):
    """ONNX ScatterElements (11+; `reduction` from 16) and Scatter (9-10, the same without reduction)."""

    op_types = ("ScatterElements", "Scatter")
    attributes = frozenset({"axis", "reduction"})
    first_opset = 9

    def reduction(self, node: NodeInfo) -> str:
        reduction = node.attr("reduction", "none")
        if reduction not in REDUCTIONS:
            raise node.unsupported(f"reduction '{reduction}' is not supported ({', '.join(REDUCTIONS)})")
        return reduction

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3)
        x, i, u = (given(node, inputs, k, w) for k, w in enumerate(("data", "indices", "updates")))
        check_movable(node, x)
        _indices(node, i)
        if u.elem != x.elem:
            raise node.fail(f"updates have element type {u.elem.name}, the data {x.elem.name}")
        if not x.rank == i.rank == u.rank:
            raise node.fail(f"data, indices and updates have ranks {x.rank}, {i.rank}, {u.rank}; ONNX needs one")
        if i.shape != u.shape:
            raise node.fail("indices and updates have different extents")
        axis = norm_axis(node, int(node.attr("axis", 0)), x.rank)
        reduction = self.reduction(node)
        dims = static_extents(node, x)
        _bounded(node, i.value, dims[axis])
        value = None
        if x.value is not None and i.value is not None and u.value is not None:
            value = _k_scatter_elements(
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
        axis = norm_axis(node, int(node.attr("axis", 0)), len(x.type.axes))  # type: ignore[attr-defined]
        op = ScatterElementsOp([x, i, u], [ctx.result_types[0]], node.name, axis=axis, reduction=self.reduction(node))
        return emit_library(ctx, op)


RANGE_TYPES = ("f32", "f64", "f16", "bf16", "i16", "i32", "i64")


class RangeRule(OpRule):
    """ONNX Range (opset 11): start, start + delta, ... below limit; folded, since its extent is its value."""

    op_types = ("Range",)
    first_opset = 11
    elem_types = RANGE_TYPES
    limitations = "start, limit and delta must be known at build time (the node folds)"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3)
        start, limit, delta = (given(node, inputs, k, w) for k, w in enumerate(("start", "limit", "delta")))
        elem = start.elem
        if elem.name not in RANGE_TYPES:
            raise node.unsupported(f"element type {elem.name} is not supported ({', '.join(RANGE_TYPES)})")
        for f in (start, limit, delta):
            if f.elem != elem:
                raise node.fail(f"inputs have element types {elem.name} and {f.elem.name}; ONNX needs one")
            if f.value is None:
                raise node.unsupported(
                    "start, limit and delta must be known at build time: a Range over a run-time value has an "
                    "extent only symbolic extents could state, not supported yet"
                )
            if np.asarray(f.value).size != 1:
                raise node.fail("start, limit and delta must be scalars")
        assert elem.numpy is not None
        s, lim, d = (np.asarray(f.value, dtype=elem.numpy).reshape(()) for f in (start, limit, delta))  # type: ignore[union-attr]
        if d == 0:
            raise node.fail("delta is 0")
        # ONNX: max(ceil((limit - start) / delta), 0) elements, element i being start + i * delta.
        if elem.is_float:
            count = max(math.ceil((float(lim) - float(s)) / float(d)), 0)
            # Halves compute in f32, as every Loam kernel does, and narrow at the end.
            wide = np.float64 if elem.name == "f64" else np.float32
            value = (wide(s) + np.arange(count, dtype=wide) * wide(d)).astype(elem.numpy)
        else:
            count = max(-(-(int(lim) - int(s)) // int(d)), 0)
            value = (int(s) + np.arange(count, dtype=np.int64) * int(d)).astype(elem.numpy)
        return [facts(elem, (count,), value)]


class ConstantOfShapeRule(OpRule):
    """ONNX ConstantOfShape (opset 9): a tensor of the given extents filled with `value` (0.0 f32 by default)."""

    op_types = ("ConstantOfShape",)
    attributes = frozenset({"value"})
    first_opset = 9
    elem_types = MOVABLE
    limitations = "the shape input must be known at build time (the node folds)"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        dims = known_ints(node, given(node, inputs, 0, "shape"), "shape")
        if any(d < 0 for d in dims):
            raise node.fail(f"shape {dims} holds a negative extent")
        given_value = node.attr("value")
        fill = np.zeros((1,), np.float32) if given_value is None else np.asarray(given_value)
        if fill.size != 1:
            raise node.fail("value must hold one element")
        elem = next((e for e in dtypes.BY_ONNX.values() if e.numpy == fill.dtype and e.name != "string"), None)
        if elem is None or elem.name not in MOVABLE:
            raise node.unsupported(f"a value of numpy dtype {fill.dtype} is not supported")
        return [facts(elem, dims, np.full(dims, fill.reshape(-1)[0], dtype=fill.dtype))]


RULES: tuple[OpRule, ...] = (
    GatherRule(),
    GatherElementsRule(),
    ScatterElementsRule(),
    RangeRule(),
    ConstantOfShapeRule(),
)
