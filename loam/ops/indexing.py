"""Operator rules of the indexing family: Gather, GatherElements, ScatterElements, ScatterND, Range,
ConstantOfShape, OneHot, EyeLike, TensorScatter.

Gathers and scatters lower to library kernels (`kernel.gather`, `kernel.gather_elements`,
`kernel.scatter_elements`, `kernel.scatter_nd`) whose numpy pieces also fold known values.  Range
and ConstantOfShape make values whose extents come from their inputs, so the build must know those
inputs: as numbers (the node folds) or as polynomials over the input symbols (a Shape of a symbolic
tensor), when the extent is symbolic and a kernel fills the value at run time.  A Range over a
run-time value would have an extent no polynomial states, and is refused naming the node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import dtypes, owed
from loam.core.bounds import Verdict
from loam.core.derived import ceildiv, decide, from_end, maximum
from loam.core.limits import MAX_FOLD_ELEMENTS, foldable
from loam.core.poly import Poly, poly_product
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, elem_attr, int_attr, require_arity, same_axis
from loam.ops.lowering import axes_type
from loam.ops.movement import MOVABLE, AxesIn, AxesOut, MovementRule, check_movable
from loam.ops.operands import (
    INDEX_TYPES,
    emit_library,
    facts,
    from_run,
    given,
    is_symbolic,
    known_extents,
    norm_axis,
    operand_facts,
    polys_of,
    run_time_length,
)
from loam.runtime.errors import DataError
from loam.runtime.kernels.indexing import (
    kernel_eye_like,
    kernel_gather,
    kernel_gather_elements,
    kernel_gather_nd,
    kernel_nonzero,
    kernel_one_hot,
    kernel_range_of,
    kernel_scatter_elements,
    kernel_scatter_nd,
    kernel_tensor_scatter,
)

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis


def _indices(node: NodeInfo, f: Facts) -> None:
    if f.elem.name not in INDEX_TYPES:
        raise node.fail(f"the indices have element type {f.elem.name}; ONNX needs i32 or i64")


def _bounded(node: NodeInfo, indices: np.ndarray | None, extent: Poly) -> None:
    """Known indices must lie in [-extent, extent): the build says so rather than numpy at run time.

    Over a symbolic extent, or with indices known only as polynomials, the inputs owe it."""
    if indices is None or indices.size == 0:
        return
    if not extent.is_const or is_symbolic_array(indices):
        for index in polys_of(indices).reshape(-1).tolist():
            owed.owe(index + extent, node, f"index {index} lies within the extent {extent}")
            owed.owe(extent - 1 - index, node, f"index {index} lies within the extent {extent}")
        return
    extent = extent.const_value  # type: ignore[assignment]
    low, high = int(indices.min()), int(indices.max())
    if low < -extent or high >= extent:
        raise node.fail(f"index {low if low < -extent else high} is outside [{-extent}, {extent - 1}]")


def is_symbolic_array(value: object) -> bool:
    return np.asarray(value).dtype == object


def _index_numbers(indices: object, extent: Poly) -> np.ndarray:
    """Known indices as numbers for folding a gather: an index known as a polynomial (a length less
    two) is read from the end where negative, as ONNX does; one the build cannot settle stays
    symbolic, so the value is not folded (the caller gets an object array only when all settle)."""
    arr = np.asarray(indices)
    if not is_symbolic_array(arr):
        return arr
    flat = []
    for v in polys_of(arr).reshape(-1).tolist():
        index = from_end(v, extent, owed.bounds())
        flat.append(index.const_value if index.is_const else index)
    if all(isinstance(v, int) for v in flat):
        return np.array(flat, dtype=np.int64).reshape(arr.shape)
    raise _Unsettled


class _Unsettled(Exception):
    """Gather indices the build knows only as polynomials it cannot settle to positions."""


class GatherRule(MovementRule):
    """ONNX Gather: data[..., indices, ...] along `axis`; indices of any rank, negative from the end.

    Known data folds with known indices, including a Shape's entries gathered at a constant index
    (negative ones read from the end); the data's gathered axis may be symbolic.
    """

    op_types = ("Gather",)
    kernels: tuple[str, ...] = ("kernel.gather",)
    attributes = frozenset({"axis"})
    limitations = (
        "indices known at build time owe that they lie within a symbolic axis; indices computed at run "
        "time are checked by the kernel, not before it"
    )

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2)
        x, i = given(node, inputs, 0, "data"), given(node, inputs, 1, "indices")
        check_movable(node, x)
        _indices(node, i)
        axis = norm_axis(node, int(node.attr("axis", 0)), x.rank)
        extent = x.shape[axis]
        _bounded(node, None if i.value is None else np.asarray(i.value), extent)
        if i.value is None and i.span is not None:
            # Indices the run computes from the symbols (a Range of positions): they must lie in
            # [-extent, extent - 1] (ONNX), which the inputs owe.
            lo, hi = i.span
            owed.owe(extent - 1 - hi, node, f"the indices (up to {hi}) lie within axis {axis} ({extent})")
            owed.owe(lo + extent, node, f"the indices (from {lo}) lie within axis {axis} ({extent})")
        shape = (*x.shape[:axis], *i.shape, *x.shape[axis + 1 :])
        value = None
        if x.value is not None and i.value is not None:
            try:
                value = kernel_gather(np.asarray(x.value), _index_numbers(i.value, extent), axis=axis)
            except _Unsettled:
                value = None
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
    kernels: tuple[str, ...] = ("kernel.gather_elements",)
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
        dims, idims = x.shape, i.shape
        for k, (d, e) in enumerate(zip(dims, idims, strict=True)):
            if k == axis:
                continue
            if d.is_const and e.is_const:
                if e.const_value > d.const_value:
                    raise node.fail(f"indices extent {e} exceeds the data's {d} at axis {k}")
            else:
                owed.owe(d - e, node, f"the indices' axis {k} lies within the data's")
        _bounded(node, None if i.value is None else np.asarray(i.value), dims[axis])
        value = None
        if x.value is not None and i.value is not None and not is_symbolic_array(i.value):
            value = kernel_gather_elements(np.asarray(x.value), np.asarray(i.value), axis=axis)
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


class GatherNDRule(MovementRule):
    """ONNX GatherND (opset 11; `batch_dims` from 12): out[b..., i...] = data[b..., indices[b..., i..., :], ...].

    The tuples' length k (the indices' last extent) must be known at build time: it decides which axes
    the result keeps.  An entry outside its axis raises the module's DataError at run time."""

    op_types = ("GatherND",)
    kernels: tuple[str, ...] = ("kernel.gather_nd",)
    attributes = frozenset({"batch_dims"})
    first_opset = 11
    limitations = "the indices' last extent must be known at build time"

    def split(self, node: NodeInfo, data_rank: int, indices: Sequence[Poly]) -> tuple[int, int]:
        """(batch_dims, k), checked against the ranks."""
        b = int(node.attr("batch_dims", 0))
        if not indices or not indices[-1].is_const:
            raise node.unsupported("the indices' last extent (the tuples' length) must be known at build time")
        k = indices[-1].const_value
        if b < 0 or b >= len(indices) or not 1 <= k <= data_rank - b:
            raise node.fail(f"batch_dims {b} and tuples of {k} do not fit data of rank {data_rank}")
        return b, k

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2)
        x, i = given(node, inputs, 0, "data"), given(node, inputs, 1, "indices")
        check_movable(node, x)
        if i.elem.name != "i64":
            raise node.fail(f"the indices have element type {i.elem.name}; ONNX needs i64")
        b, k = self.split(node, x.rank, i.shape)
        for axis, (d, e) in enumerate(zip(x.shape[:b], i.shape[:b], strict=True)):
            if d.is_const and e.is_const and d != e:
                raise node.fail(f"batch axis {axis}: data has {d}, indices {e}")
            if d != e:
                owed.require_equal(d, e, node, f"batch axis {axis} of data and indices")
        value = None
        if x.value is not None and i.value is not None and not is_symbolic_array(i.value):
            try:
                value = kernel_gather_nd(np.asarray(x.value), np.asarray(i.value), batch_dims=b)
            except DataError as err:
                raise node.fail(str(err)) from None
        return [Facts(x.elem, (*i.shape[:-1], *x.shape[b + k :]), value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        x, i = inputs[0], inputs[1]
        assert x is not None and i is not None
        b, k = self.split(node, len(x), [a.extent for a in i])
        return [(*i[:-1], *x[b + k :])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import GatherNDOp

        x, i = operands
        assert x is not None and i is not None
        b = int(node.attr("batch_dims", 0))
        return emit_library(ctx, GatherNDOp([x, i], [ctx.result_types[0]], node.name, batch_dims=b))


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
        _indices(node, i)
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
        _bounded(node, None if i.value is None else np.asarray(i.value), x.shape[axis])
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
        axis = norm_axis(node, int(node.attr("axis", 0)), len(x.type.axes))  # type: ignore[attr-defined]
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
                _bounded(node, known[..., axis], x.shape[axis])
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
        start, limit, delta = (polys_of(f.value).reshape(-1)[0] for f in self.operands(node, inputs))  # type: ignore[arg-type]
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
            first, limit, step, count = self.symbolic_plan(node, inputs)
            value = None
            if count.is_const:  # a known number of values, each a polynomial
                value = np.array([first + step * k for k in range(count.const_value)], dtype=object)
            # Every element lies between start and the last step short of limit.
            up = decide(step - 1, owed.bounds()) is Verdict.HOLDS
            span = (first, limit - 1) if up else (limit + 1, first)
            return [Facts(elem, (count,), value, None if value is not None else span)]
        assert elem.numpy is not None
        s, lim, d = (np.asarray(f.value, dtype=elem.numpy).reshape(()) for f in (start, limit, delta))  # type: ignore[union-attr]
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
        from loam.dialects.expr import Expr
        from loam.dialects.graph import TensorDataAttr
        from loam.dialects.kernel import ConstantOp, ExpandToOp, ZipOp
        from loam.dialects.tensor_axes import AxesTensorType

        elem, fill = self.fill(node)
        scalar = ConstantOp(TensorDataAttr.from_numpy(fill.reshape(()), elem), AxesTensorType(elem, []), node.name)
        ctx.emit(scalar)
        if from_run(operand_facts(operands)[0]):
            return emit_library(ctx, ExpandToOp([scalar.result, operands[0]], [ctx.result_types[0]], node.name))
        op = ZipOp([scalar.result], Expr.operand(0), ctx.result_types[0], node.name)  # broadcasting is all it does
        ctx.emit(op)
        return [op.result]


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


RULES: tuple[OpRule, ...] = (
    GatherRule(),
    GatherElementsRule(),
    GatherNDRule(),
    ScatterElementsRule(),
    ScatterNDRule(),
    RangeRule(),
    ConstantOfShapeRule(),
    OneHotRule(),
    EyeLikeRule(),
    NonZeroRule(),
    CompressRule(),
    UniqueRule(),
    TensorScatterRule(),
)
