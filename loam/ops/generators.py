"""Operators that make a tensor from a few values rather than from an operand's elements: Range,
ConstantOfShape, OneHot and EyeLike.

Range and ConstantOfShape make values whose extents come from their inputs, so the build must know
those inputs: as numbers (the node folds) or as polynomials over the input symbols (a Shape of a
symbolic tensor), when the extent is symbolic and a kernel fills the value at run time.  A Range or a
ConstantOfShape over values only the run gives makes lengths only the run knows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import dtypes, owed
from loam.core.bounds import Verdict
from loam.core.derived import ceildiv, decide, maximum
from loam.core.limits import MAX_FOLD_ELEMENTS, foldable
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, elem_attr, require_arity
from loam.ops.lowering import filled, scalar_constant
from loam.ops.movement import MOVABLE
from loam.ops.operands import (
    emit_library,
    facts,
    from_run,
    given,
    is_symbolic,
    is_symbolic_array,
    known_extents,
    norm_axis,
    operand_facts,
    polys_of,
    run_time_length,
)
from loam.runtime.kernels.indexing import kernel_eye_like, kernel_one_hot, kernel_range_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis


RANGE_TYPES = ("f32", "f64", "f16", "bf16", "i16", "i32", "i64")


class RangeRule(OpRule):
    """ONNX Range (opset 11): start, start + delta, ... below limit.

    Known numbers fold.  Integer start, limit and delta known as polynomials (extents from Shape)
    give max(0, ceil((limit - start) / delta)) elements, a derived symbol where the build cannot
    settle it, and the node is a `kernel.range` whose bounds forward computes.  The delta's sign
    decides which way it counts, so the build must know it; a delta that may be 0 owes that it is not.
    """

    op_types = ("Range",)
    kernels: tuple[str, ...] = ("kernel.range", "kernel.range_of")
    first_opset = 11
    elem_types = RANGE_TYPES
    limitations = (
        "integer start, limit and delta known as extents from Shape need delta's sign known at build time; "
        "values only the run gives make a length only it knows"
    )

    def operands(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Facts, Facts, Facts]:
        require_arity(node, inputs, 3)
        start, limit, delta = (given(node, inputs, k, w) for k, w in enumerate(("start", "limit", "delta")))
        elem = start.elem
        if elem.name not in RANGE_TYPES:
            raise node.unsupported(f"element type {elem.name} is not supported ({', '.join(RANGE_TYPES)})")
        for f in (start, limit, delta):
            if f.elem != elem:
                raise node.fail(f"inputs have element types {elem.name} and {f.elem.name}; ONNX needs one")
            if f.static_shape() not in ((), (1,)):
                raise node.fail("start, limit and delta must be scalars")
        return start, limit, delta

    def symbolic_plan(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, Poly, Poly, Poly]:
        """(start, limit, delta, count) of a Range over polynomials, with what the inputs owe for it."""
        start, limit, delta = (polys_of(f.value).reshape(-1)[0] for f in self.operands(node, inputs))
        bounds = owed.bounds()
        if decide(delta - 1, bounds) is not Verdict.HOLDS and decide(-delta - 1, bounds) is not Verdict.HOLDS:
            if decide(delta, bounds) is Verdict.HOLDS:
                owed.owe(delta - 1, node, "delta is not 0")
            elif decide(-delta, bounds) is Verdict.HOLDS:
                owed.owe(-delta - 1, node, "delta is not 0")
            else:
                raise node.unsupported(
                    f"the sign of delta {delta} depends on the input, and it decides which way Range counts"
                )
        count = maximum(0, ceildiv(limit - start, delta, bounds), bounds)
        return start, limit, delta, count

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        start, limit, delta = self.operands(node, inputs)
        elem = start.elem
        if any(f.value is None for f in (start, limit, delta)):  # the run's values: a length only it knows
            return [Facts(elem, (node.result_length(0, 0),))]
        if any(is_symbolic_array(f.value) for f in (start, limit, delta)):
            if elem.name not in ("i64", "i32"):
                raise node.unsupported(f"a Range of element type {elem.name} over symbolic extents is not supported")
            first, end, step, count = self.symbolic_plan(node, inputs)
            value = None
            if count.is_const:  # a known number of values, each a polynomial
                value = np.array([first + step * k for k in range(count.const_value)], dtype=object)
            # Every element lies between start and the last step short of limit.
            up = decide(step - 1, owed.bounds()) is Verdict.HOLDS
            span = (first, end - 1) if up else (end + 1, first)
            return [Facts(elem, (count,), value, None if value is not None else span)]
        assert elem.numpy is not None
        s, lim, d = (np.asarray(f.value, dtype=elem.numpy).reshape(()) for f in (start, limit, delta))
        if d == 0:
            raise node.fail("delta is 0")
        # ONNX: max(ceil((limit - start) / delta), 0) elements, element i being start + i * delta.
        if elem.is_float:
            n = max(math.ceil((float(lim) - float(s)) / float(d)), 0)
        else:
            n = max(-(-(int(lim) - int(s)) // int(d)), 0)
        if not foldable([n], node.where()):
            raise node.fail(
                f"makes {n} elements, past the {MAX_FOLD_ELEMENTS} the build computes for one value "
                "(loam.core.limits.MAX_FOLD_ELEMENTS)"
            )
        return [facts(elem, (n,), kernel_range_of(s, lim, d))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import RangeOfOp, RangeOp

        known = operand_facts(operands)
        if any(f is None or f.value is None for f in known):
            present = [v for v in operands if v is not None]
            return emit_library(ctx, RangeOfOp(present, [ctx.result_types[0]], node.name))
        start, limit, delta, _ = self.symbolic_plan(node, known)
        dtype = "int32" if ctx.result_types[0].elem.name == "i32" else "int64"
        op = RangeOp([], [ctx.result_types[0]], node.name, start=start, limit=limit, delta=delta, dtype=dtype)
        return emit_library(ctx, op)


class ConstantOfShapeRule(OpRule):
    """ONNX ConstantOfShape (opset 9): a tensor of the given extents filled with `value` (0.0 f32 by default).

    Known numbers fold; a shape known as polynomials (from Shape) gives symbolic extents, and the
    value is then filled at run time (the one-element value broadcast to them); a shape only the run
    gives makes them lengths only the run knows (`kernel.expand_to` of the value).
    """

    op_types = ("ConstantOfShape",)
    kernels: tuple[str, ...] = ("kernel.constant", "kernel.zip", "kernel.expand_to")
    attributes = frozenset({"value"})
    first_opset = 9
    elem_types = MOVABLE
    limitations = "a shape only the run gives needs its length known"

    def fill(self, node: NodeInfo) -> tuple[dtypes.ElementType, np.ndarray]:
        given_value = node.attr("value")
        fill = np.zeros((1,), np.float32) if given_value is None else np.asarray(given_value)
        if fill.size != 1:
            raise node.fail("value must hold one element")
        elem = next((e for e in dtypes.BY_ONNX.values() if e.numpy == fill.dtype and e.name != "string"), None)
        if elem is None or elem.name not in MOVABLE:
            raise node.unsupported(f"a value of numpy dtype {fill.dtype} is not supported")
        return elem, fill

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        shape = given(node, inputs, 0, "shape")
        if from_run(shape):  # the fill then broadcasts to extents only the run knows
            count = run_time_length(node, shape, "shape")
            return [Facts(self.fill(node)[0], tuple(node.result_length(0, k) for k in range(count)))]
        dims = known_extents(node, shape, "shape")
        shown = "[" + ", ".join(map(str, dims)) + "]"
        for k, d in enumerate(dims):
            if d.is_const and d.const_value < 0:
                raise node.fail(f"shape {shown} holds a negative extent")
            owed.owe(d, node, f"extent {k} of shape {shown} is not negative")
        elem, fill = self.fill(node)
        value = None
        if all(d.is_const for d in dims) and foldable([d.const_value for d in dims], node.where()):
            value = np.full([d.const_value for d in dims], fill.reshape(-1)[0], dtype=fill.dtype)
        return [Facts(elem, tuple(dims), value)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ExpandToOp

        elem, fill = self.fill(node)
        scalar = scalar_constant(ctx, fill, elem, node)
        shape = operands[0]
        assert shape is not None  # infer requires the shape input
        if from_run(operand_facts(operands)[0]):
            return emit_library(ctx, ExpandToOp([scalar, shape], [ctx.result_types[0]], node.name))
        return [filled(ctx, scalar, ctx.result_types[0], node)]


class OneHotRule(OpRule):
    """ONNX OneHot (opset 9 on): a new axis of `depth` positions at `axis`, `values[1]` where the
    position is the index and `values[0]` elsewhere.  A depth only the run gives makes the new axis
    a length only it knows (the kernel reads depth; one below 1 is the module's DataError)."""

    op_types = ("OneHot",)
    kernels: tuple[str, ...] = ("kernel.one_hot",)
    attributes = frozenset({"axis"})
    first_opset = 9
    elem_types = tuple(e for e in MOVABLE if e != "bool")
    limitations = "a depth from symbolic extents (a Shape) is refused; a float index is truncated toward zero"

    def depth(self, node: NodeInfo, f: Facts | None) -> int | None:
        """depth as the build knows it, or None where the run gives it."""
        if f is None:
            raise node.fail("the depth input is absent")
        if f.elem.name == "bool" or f.elem.name not in MOVABLE:
            raise node.fail(f"depth has element type {f.elem.name}; ONNX needs a number")
        if f.value is None:
            if f.static_shape() not in ((), (1,)):
                raise node.fail(f"depth must be one number, not a tensor of extents [{', '.join(map(str, f.shape))}]")
            return None
        if is_symbolic(f):
            raise node.unsupported("depth depends on symbolic extents; it must be a number or a run-time value")
        flat = np.asarray(f.value).reshape(-1)
        if flat.size != 1 or not flat[0] >= 1:
            raise node.fail(f"depth must be one number of at least 1, not {flat.tolist()}")
        return int(flat[0])

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3)
        indices, values = given(node, inputs, 0, "indices"), given(node, inputs, 2, "values")
        depth = self.depth(node, inputs[1])
        for f, what in ((indices, "indices"), (values, "values")):
            if f.elem.name not in MOVABLE or (f.elem.name == "bool" and what == "indices"):
                raise node.unsupported(f"{what} of element type {f.elem.name} are not supported")
        if values.shape != (Poly.const(2),):
            raise node.fail(f"values must be [off, on] (extents [2]), not [{', '.join(map(str, values.shape))}]")
        axis = norm_axis(node, int(node.attr("axis", -1)), indices.rank + 1)
        extent = node.result_length(0, axis) if depth is None else Poly.const(depth)
        shape = (*indices.shape[:axis], extent, *indices.shape[axis:])
        value = None
        if depth is not None and indices.value is not None and values.value is not None and not is_symbolic(indices):
            value = kernel_one_hot(indices.value, values.value, depth=depth, axis=axis)
        return [Facts(values.elem, shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        indices = inputs[0]
        assert indices is not None
        axis = norm_axis(node, int(node.attr("axis", -1)), len(indices) + 1)
        return [(*indices[:axis], None, *indices[axis:])]  # the new axis: the layout names it

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import OneHotOp

        indices, depth, values = operands
        assert indices is not None and depth is not None and values is not None
        result = ctx.result_types[0]
        axis = norm_axis(node, int(node.attr("axis", -1)), len(result.axes))
        size = result.axes[axis].extent
        if not size.is_const:  # depth only the run gives: the kernel reads it
            return emit_library(ctx, OneHotOp([indices, values, depth], [result], node.name, axis=axis))
        return emit_library(ctx, OneHotOp([indices, values], [result], node.name, depth=size.const_value, axis=axis))


class EyeLikeRule(OpRule):
    """ONNX EyeLike (opset 9): ones on diagonal `k` of a matrix with the input's extents, zeros
    elsewhere, of type `dtype` (the input's by default).  Known extents fold to a constant."""

    op_types = ("EyeLike",)
    kernels: tuple[str, ...] = ("kernel.eye_like",)
    attributes = frozenset({"dtype", "k"})
    first_opset = 9
    elem_types = MOVABLE

    def result(self, node: NodeInfo, x: Facts) -> dtypes.ElementType:
        elem = elem_attr(node, "dtype")
        if elem is None:
            return x.elem
        if elem.name not in MOVABLE:
            raise node.unsupported(f"makes element type {elem.name}")
        return elem

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "input")
        if x.rank != 2:
            raise node.fail(f"the input has rank {x.rank}; EyeLike takes a matrix")
        elem = self.result(node, x)
        dims = x.static_shape()
        value = None
        if dims is not None and foldable(list(dims), node.where()):
            assert elem.numpy is not None
            value = kernel_eye_like(np.empty(dims, np.bool_), k=int(node.attr("k", 0)), to=elem.numpy.name)
        return [Facts(elem, x.shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        assert inputs[0] is not None
        return [inputs[0]]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import EyeLikeOp

        x = operands[0]
        assert x is not None
        result = ctx.result_types[0]
        dtype = result.elem.numpy
        assert dtype is not None
        return emit_library(ctx, EyeLikeOp([x], [result], node.name, k=int(node.attr("k", 0)), to=dtype.name))


RULES: tuple[OpRule, ...] = (RangeRule(), ConstantOfShapeRule(), OneHotRule(), EyeLikeRule())
