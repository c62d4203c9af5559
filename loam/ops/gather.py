"""The gathers: Gather, GatherElements and GatherND (`kernel.gather`, `kernel.gather_elements`,
`kernel.gather_nd`), library kernels whose numpy pieces also fold known values.

Known indices must lie within the axis they index (a symbolic axis owes it); indices known only as
polynomials (a Shape's entries) fold where the build settles them to positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import owed
from loam.core.derived import from_end
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, require_arity
from loam.ops.lowering import axes_type
from loam.ops.movement import AxesIn, AxesOut, MovementRule, check_movable
from loam.ops.operands import (
    emit_library,
    given,
    is_symbolic_array,
    norm_axis,
    polys_of,
    require_indices,
    require_within,
)
from loam.runtime.errors import DataError
from loam.runtime.kernels.indexing import kernel_gather, kernel_gather_elements, kernel_gather_nd

if TYPE_CHECKING:
    from xdsl.ir import SSAValue


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
        require_indices(node, i)
        axis = norm_axis(node, int(node.attr("axis", 0)), x.rank)
        extent = x.shape[axis]
        require_within(node, None if i.value is None else np.asarray(i.value), extent)
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
        axis = norm_axis(node, int(node.attr("axis", 0)), len(axes_type(x).axes))
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
        require_indices(node, i)
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
        require_within(node, None if i.value is None else np.asarray(i.value), dims[axis])
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
        axis = norm_axis(node, int(node.attr("axis", 0)), len(axes_type(x).axes))
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


RULES: tuple[OpRule, ...] = (GatherRule(), GatherElementsRule(), GatherNDRule())
