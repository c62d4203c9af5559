"""Operator rules of the movement family: operators that move elements without arithmetic.

Expand lowers to a `kernel.zip` that only broadcasts; Concat, Split, Tile, Trilu, ReverseSequence
and BitCast to library kernels.  Shape and Size always fold, to polynomials over symbolic extents.
(Slice and Pad live in `loam.ops.slicing`; the regrouping operators -- Transpose, Reshape, Flatten,
Squeeze, Unsqueeze, DepthToSpace, SpaceToDepth -- in `loam.ops.regroup`.)  Each rule restates the
operator's older opsets in its current meaning (an attribute that later became an input is read
either way) and refuses what it does not restate.

An operand that shapes the result (an Expand shape, Split sizes, Tile repeats) known at build time,
as numbers or as polynomials over the input symbols (a Shape of a symbolic tensor), settles the
result's extents there; what a symbolic extent needs of the inputs (a Split's parts within the
axis, a Concat's other axes equal) is owed (`loam.core.owed`), and forward checks it before any kernel
runs.  One only the run gives makes the extents it decides lengths only the run knows
(`NodeInfo.result_length`), which forward binds after the kernel (`kernel.expand_to`,
`kernel.split_by`, `kernel.tile_by`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import dtypes, owed
from loam.core.derived import ceildiv, exact_quotient, floordiv
from loam.core.limits import foldable
from loam.core.poly import Poly, poly_product, poly_sum
from loam.ops.base import (
    Facts,
    LowerContext,
    NodeInfo,
    OpRule,
    elem_attr,
    int_attr,
    is_unit_axis,
    require_arity,
    same_axis,
)
from loam.ops.lowering import COMPUTE_TYPES, NARROW_TYPES
from loam.ops.operands import (
    emit_library,
    facts,
    from_run,
    given,
    is_symbolic,
    keep_unchanged,
    known_extents,
    norm_axis,
    operand_facts,
    optional,
    run_time_length,
)
from loam.runtime.errors import DataError
from loam.runtime.kernels.movement import (
    kernel_bitcast,
    kernel_concat,
    kernel_reverse_sequence,
    kernel_split,
    kernel_tile,
    kernel_trilu,
)

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

# Element types the movement and indexing kernels carry: every type plain numpy (or ml_dtypes'
# bfloat16) holds; strings and the sub-byte and 8-bit float types stop the build.
MOVABLE: tuple[str, ...] = COMPUTE_TYPES
# ONNX spells "to the end" as INT64_MAX (and exporters as INT32_MAX); both clamp like any end.

AxesIn = Sequence["tuple[Axis, ...] | None"]
AxesOut = list["tuple[Axis | None, ...]"]


# ---------------------------------------------------------------------------------------------
# Helpers the movement, regrouping and indexing rules share
# ---------------------------------------------------------------------------------------------


def check_movable(node: NodeInfo, f: Facts, what: str = "data") -> None:
    if f.elem.name not in MOVABLE:
        raise node.unsupported(f"the {what} has element type {f.elem.name}; Loam moves {', '.join(MOVABLE)}")


class MovementRule(OpRule):
    """Base of the rules here: every element type Loam holds moves."""

    elem_types = MOVABLE


class ResizesAxes(MovementRule):
    """A rule whose outputs keep the input's axes, resizing some (Split, Slice, Pad, Tile): a resized axis is new."""

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [keep_unchanged(inputs[0], f) for f in outputs]


# ---------------------------------------------------------------------------------------------
# Expand, Concat, Split, Slice, Pad, Tile, Trilu
# ---------------------------------------------------------------------------------------------


class ExpandRule(MovementRule):
    """ONNX Expand: the input broadcast (both ways, numpy-style) with a shape known at build time,
    as numbers or as polynomials (a Shape of a symbolic tensor); a shape only the run gives makes
    the extents it decides lengths only the run knows (`kernel.expand_to`)."""

    op_types = ("Expand",)
    kernels: tuple[str, ...] = ("kernel.zip", "kernel.expand_to")
    keeps_values = True
    first_opset = 8
    limitations = (
        "a symbolic shape entry meeting another extent owes their equality rather than broadcasting a run-time 1; "
        "a shape only the run gives needs its length known"
    )

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        from loam.ops.base import broadcast_shapes

        require_arity(node, inputs, 2)
        x = given(node, inputs, 0, "input")
        check_movable(node, x, "input")
        shape_input = given(node, inputs, 1, "shape")
        if shape_input.value is None:  # the run gives it: the extents it decides are lengths only it knows
            if shape_input.rank != 1 or not shape_input.shape[0].is_const:
                raise node.unsupported("the shape input's length (the result's rank) must be known at build time")
            rank = max(x.rank, shape_input.shape[0].const_value)
            kept = (None,) * (rank - x.rank) + tuple(d if d.is_const and d.const_value != 1 else None for d in x.shape)
            return [Facts(x.elem, tuple(node.result_length(0, k) if d is None else d for k, d in enumerate(kept)))]
        target = known_extents(node, shape_input, "shape")
        for k, t in enumerate(target):
            if t.is_const and t.const_value < 0:
                raise node.fail(f"shape [{', '.join(map(str, target))}] holds the negative extent {t} at {k}")
        shape = broadcast_shapes(node, [x.shape, tuple(target)])
        value = None
        if (
            x.value is not None
            and all(d.is_const for d in shape)
            and foldable([d.const_value for d in shape], node.where())
        ):
            value = np.array(np.broadcast_to(x.value, [d.const_value for d in shape]))
        return [Facts(x.elem, shape, value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        x = inputs[0]
        assert x is not None
        out = outputs[0].shape
        lead = len(out) - len(x)
        return [tuple(x[k - lead] if k >= lead and x[k - lead].extent == e else None for k, e in enumerate(out))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.expr import Expr
        from loam.dialects.kernel import ExpandToOp, ZipOp

        x, shape = operands
        assert x is not None and shape is not None
        shape_facts = operand_facts([shape])[0]
        if shape_facts is None or shape_facts.value is None:
            return emit_library(ctx, ExpandToOp([x, shape], [ctx.result_types[0]], node.name))
        if x.type == ctx.result_types[0]:
            return [x]
        op = ZipOp([x], Expr.operand(0), ctx.result_types[0], node.name)  # broadcasting is all it does
        ctx.emit(op)
        return [op.result]


class ConcatRule(MovementRule):
    """ONNX Concat: inputs joined along `axis` (required from opset 4; 1 by default before).

    The joined extent is the sum of the inputs' (`N + M`); two symbolic extents meeting on another
    axis are owed equal.
    """

    op_types = ("Concat",)
    kernels: tuple[str, ...] = ("kernel.concat",)
    attributes = frozenset({"axis"})

    def axis(self, node: NodeInfo, rank: int) -> int:
        axis = node.attr("axis")
        if axis is None:
            if node.since >= 4:
                raise node.fail("has no axis attribute (required from opset 4)")
            axis = 1
        return norm_axis(node, int(axis), rank)

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        if not inputs or any(f is None for f in inputs):
            raise node.fail("needs one or more inputs, none absent")
        parts = [f for f in inputs if f is not None]
        first = parts[0]
        for f in parts:
            check_movable(node, f, "input")
            if f.elem != first.elem:
                raise node.fail(f"inputs have element types {first.elem.name} and {f.elem.name}; ONNX needs one")
            if f.rank != first.rank:
                raise node.fail(f"inputs have ranks {first.rank} and {f.rank}")
        axis = self.axis(node, first.rank)
        shape = list(first.shape)
        for i, f in enumerate(parts):
            for k, (a, b) in enumerate(zip(first.shape, f.shape, strict=True)):
                if k == axis or a == b:
                    continue
                if a.is_const and b.is_const:
                    raise node.fail(f"input {i} has extent {b} at axis {k}, input 0 has {a}")
                shape[k] = owed.require_equal(shape[k], b, node, f"input {i} at axis {k}")
        shape[axis] = poly_sum(f.shape[axis] for f in parts)
        value = None
        if all(f.value is not None for f in parts):
            value = kernel_concat(*[np.asarray(f.value) for f in parts], axis=axis)
        return [Facts(first.elem, tuple(shape), value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        parts = [a for a in inputs if a is not None]
        first = parts[0]
        axis = self.axis(node, len(first))
        for i, other in enumerate(parts[1:], start=1):
            for k in range(len(first)):
                a, b = first[k], other[k]
                if k == axis or (a.extent == b.extent == Poly.const(1) and (is_unit_axis(a) or is_unit_axis(b))):
                    continue  # an extent-1 axis no layout named (Unit, Unit1, ...) is one with any extent-1 axis
                same_axis(node, first[k], other[k], f"axis {k} of input {i}")
        out = outputs[0].shape
        return [tuple(None if k == axis and a.extent != out[k] else a for k, a in enumerate(first))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ConcatOp

        present = [v for v in operands if v is not None]
        if len(present) == 1:
            return [present[0]]
        axis = self.axis(node, len(ctx.result_types[0].axes))
        return emit_library(ctx, ConcatOp(present, [ctx.result_types[0]], node.name, axis=axis))


class SplitRule(ResizesAxes):
    """ONNX Split: consecutive chunks along `axis`.

    The sizes come from the `split` attribute (before 13) or input (13+, numbers or extents from
    Shape), else from `num_outputs` (18+, the last chunk smaller when uneven) or the number of
    outputs (equal chunks).  Over a symbolic axis each part owes that it lies within the axis and
    the parts that they sum to it; equal chunks of a symbolic axis owe that they divide it.  Sizes
    only the run gives make each part's length one only the run knows (`kernel.split_by`).
    """

    op_types = ("Split",)
    kernels: tuple[str, ...] = ("kernel.split", "kernel.split_by")
    attributes = frozenset({"axis", "split", "num_outputs"})

    def plan(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[int, list[Poly]]:
        x = given(node, inputs, 0, "input")
        axis = norm_axis(node, int(node.attr("axis", 0)), x.rank)
        extent = x.shape[axis]
        sizes: list[Poly] | None
        if node.since < 13 and node.attr("split") is not None:
            require_arity(node, inputs, 1)
            sizes = [Poly.const(int(s)) for s in node.attr("split")]
        else:
            require_arity(node, inputs, 1, 2)
            split = optional(inputs, 1)
            if split is not None and from_run(split):  # each part's length is then only the run's
                parts = run_time_length(node, split, "split")
                if parts != node.outputs:
                    raise node.fail(f"the split input holds {parts} sizes, but the node has {node.outputs} outputs")
                return axis, [node.result_length(k, axis) for k in range(parts)]
            sizes = None if split is None else known_extents(node, split, "split")
        count = node.outputs
        if sizes is None:
            sizes = self.chunks(node, extent, count)
        if count is not None and count != len(sizes):
            raise node.fail(f"splits into {len(sizes)} parts, but the node has {count} outputs")
        total = poly_sum(sizes)
        if extent.is_const and total.is_const and all(p.is_const for p in sizes):
            if total != extent or any(p.const_value < 0 for p in sizes):
                shown = [p.const_value for p in sizes]
                raise node.fail(f"split sizes {shown} do not add up to the extent {extent} of axis {axis}")
            return axis, sizes
        # Parts that are not negative and sum to the axis each lie within it.
        for k, part in enumerate(sizes):
            owed.owe(part, node, f"part {k} is not negative")
        owed.require_equal(extent, total, node, f"the parts sum to axis {axis}")
        return axis, sizes

    def chunks(self, node: NodeInfo, extent: Poly, count: int) -> list[Poly]:
        """The sizes of equal chunks: `count` of them, or `num_outputs` (18+) with the last smaller."""
        num = node.attr("num_outputs")
        if num is None:
            if extent.is_const:
                if extent.const_value % count:
                    raise node.fail(f"cannot split extent {extent} into {count} equal parts")
                return [Poly.const(extent.const_value // count)] * count
            part = exact_quotient(extent, Poly.const(count))
            if part is None:
                part = floordiv(extent, count, owed.bounds())
                owed.require_equal(extent, part * count, node, f"{count} equal parts of {extent}")
            return [part] * count
        num = int(num)
        if num < 1:
            raise node.fail(f"num_outputs {num} is not positive")
        if count is not None and count != num:  # before listing num sizes: num may be huge
            raise node.fail(f"num_outputs is {num}, but the node has {count} outputs")
        if extent.is_const:
            e = extent.const_value
            most = -(-e // num)
            return [Poly.const(min(most, max(e - most * i, 0))) for i in range(num)]
        # ONNX 18: parts of ceil(extent / num), the last one what remains (which owes not to be negative).
        chunk = ceildiv(extent, num, owed.bounds())
        return [chunk] * (num - 1) + [extent - chunk * (num - 1)]

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x = given(node, inputs, 0, "input")
        check_movable(node, x, "input")
        axis, sizes = self.plan(node, inputs)
        values: Sequence[np.ndarray | None] = [None] * len(sizes)
        if x.value is not None and all(p.is_const for p in sizes):
            values = kernel_split(np.asarray(x.value), axis=axis, sizes=tuple(p.const_value for p in sizes))
        out = []
        for size, v in zip(sizes, values, strict=True):
            out.append(Facts(x.elem, tuple(size if k == axis else d for k, d in enumerate(x.shape)), v))
        return out

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import SplitByOp, SplitOp

        facts_in = operand_facts(operands)
        axis, sizes = self.plan(node, facts_in)
        assert operands[0] is not None
        if len(facts_in) > 1 and from_run(facts_in[1]):
            present = [v for v in operands[:2] if v is not None]  # the input and the split sizes the run gives
            op = SplitByOp(present, ctx.result_types, node.name, axis=axis, parts=len(sizes))
            return emit_library(ctx, op)
        if len(sizes) == 1:
            return [operands[0]]
        return emit_library(ctx, SplitOp([operands[0]], ctx.result_types, node.name, axis=axis, sizes=tuple(sizes)))


class TileRule(ResizesAxes):
    """ONNX Tile (opset 6+): the input repeated along each axis; the repeats known at build time
    (numbers, or extents from Shape) or only at run time (`kernel.tile_by`: every result extent is
    then a length only the run knows)."""

    op_types = ("Tile",)
    kernels: tuple[str, ...] = ("kernel.tile", "kernel.tile_by")
    keeps_values = True
    first_opset = 6

    def repeats(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, ...]:
        if node.since < 6:
            raise node.unsupported("Tile before opset 6 (tiles and axis inputs) is not supported")
        require_arity(node, inputs, 2)
        x = given(node, inputs, 0, "input")
        reps = known_extents(node, given(node, inputs, 1, "repeats"), "repeats")
        if len(reps) != x.rank or any(r.is_const and r.const_value < 0 for r in reps):
            raise node.fail(
                f"repeats [{', '.join(map(str, reps))}] must hold one non-negative count per axis ({x.rank})"
            )
        for k, r in enumerate(reps):
            owed.owe(r, node, f"the repeats of axis {k} are not negative")
        return tuple(reps)

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x = given(node, inputs, 0, "input")
        check_movable(node, x, "input")
        if node.since >= 6 and from_run(optional(inputs, 1)):
            count = run_time_length(node, given(node, inputs, 1, "repeats"), "repeats")
            if count != x.rank:
                raise node.fail(f"repeats holds {count} counts for {x.rank} axes")
            return [Facts(x.elem, tuple(node.result_length(0, k) for k in range(x.rank)))]
        reps = self.repeats(node, inputs)
        dims = tuple(d * r for d, r in zip(x.shape, reps, strict=True))
        value = None
        if (
            x.value is not None
            and all(r.is_const for r in reps)
            and all(d.is_const for d in dims)
            and foldable([d.const_value for d in dims], node.where())
        ):
            value = kernel_tile(np.asarray(x.value), repeats=tuple(r.const_value for r in reps))
        return [Facts(x.elem, dims, value)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import TileByOp, TileOp

        x = operands[0]
        assert x is not None
        if from_run(operand_facts(operands)[1]):
            present = [v for v in operands[:2] if v is not None]  # the input and the repeats the run gives
            return emit_library(ctx, TileByOp(present, [ctx.result_types[0]], node.name))
        reps = self.repeats(node, operand_facts(operands))
        if all(r == Poly.const(1) for r in reps):
            return [x]
        return emit_library(ctx, TileOp([x], [ctx.result_types[0]], node.name, repeats=reps))


class TriluRule(MovementRule):
    """ONNX Trilu (opset 14): the upper or lower triangle of the last two axes from diagonal k."""

    op_types = ("Trilu",)
    kernels: tuple[str, ...] = ("kernel.trilu",)
    attributes = frozenset({"upper"})
    first_opset = 14

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1, 2)
        x = given(node, inputs, 0, "input")
        check_movable(node, x, "input")
        if x.rank < 2:
            raise node.fail(f"the input has rank {x.rank}; Trilu needs 2 or more")
        k = optional(inputs, 1)
        if k is not None and (k.elem.name != "i64" or k.rank not in (0, 1) or k.static_shape() not in ((), (1,))):
            raise node.fail("k must be an i64 scalar (one value)")
        value = None
        if x.value is not None and (k is None or k.value is not None):
            value = kernel_trilu(
                np.asarray(x.value), None if k is None else k.value, upper=int_attr(node, "upper", 1, (0, 1))
            )
        return [Facts(x.elem, x.shape, value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [inputs[0]]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import TriluOp

        x = operands[0]
        assert x is not None
        k = operands[1] if len(operands) > 1 else None
        upper = int_attr(node, "upper", 1, (0, 1))
        k_facts = operand_facts([k])[0]
        if k is None or (k_facts is not None and k_facts.value is not None):
            offset = 0 if k_facts is None else int(np.asarray(k_facts.value).reshape(-1)[0])
            return emit_library(ctx, TriluOp([x], [ctx.result_types[0]], node.name, upper=upper, offset=offset))
        return emit_library(ctx, TriluOp([x, k], [ctx.result_types[0]], node.name, upper=upper))


class ReverseSequenceRule(MovementRule):
    """ONNX ReverseSequence (opset 10): along `time_axis`, the first sequence_lens[b] entries of each
    batch entry b reversed; a length outside [0, T] raises the module's DataError at run time."""

    op_types = ("ReverseSequence",)
    kernels: tuple[str, ...] = ("kernel.reverse_sequence",)
    attributes = frozenset({"batch_axis", "time_axis"})
    first_opset = 10

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2)
        x, lens = given(node, inputs, 0, "input"), given(node, inputs, 1, "sequence_lens")
        check_movable(node, x, "input")
        batch, time = self.axes_of(node)
        if x.rank < 2:
            raise node.fail(f"the input has rank {x.rank}; ReverseSequence needs 2 or more")
        if lens.elem.name != "i64" or lens.rank != 1:
            raise node.fail(f"sequence_lens must be an i64 vector, got {lens.elem.name} of rank {lens.rank}")
        owed.require_equal(lens.shape[0], x.shape[batch], node, f"sequence_lens and the batch axis {batch}")
        value = None
        dims = x.static_shape()
        if x.value is not None and lens.value is not None and dims is not None and foldable(dims, node.where()):
            try:
                value = kernel_reverse_sequence(np.asarray(x.value), np.asarray(lens.value), batch_axis=batch,
                                                time_axis=time)  # fmt: skip
            except DataError as err:
                raise node.fail(str(err)) from None
        return [Facts(x.elem, x.shape, value)]

    @staticmethod
    def axes_of(node: NodeInfo) -> tuple[int, int]:
        batch, time = int_attr(node, "batch_axis", 1, (0, 1)), int_attr(node, "time_axis", 0, (0, 1))
        if batch == time:
            raise node.fail(f"batch_axis and time_axis are both {batch}")
        return batch, time

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [inputs[0]]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ReverseSequenceOp

        x, lens = operands
        assert x is not None and lens is not None
        batch, time = self.axes_of(node)
        op = ReverseSequenceOp([x, lens], [ctx.result_types[0]], node.name, batch_axis=batch, time_axis=time)
        return emit_library(ctx, op)


class BitCastRule(MovementRule):
    """ONNX BitCast (opset 26): the input's bits read as `to`, a type of the same bit width (no
    string); a 4- or 2-bit value keeps its bits, sign-extended into a signed type."""

    op_types = ("BitCast",)
    kernels: tuple[str, ...] = ("kernel.bitcast",)
    attributes = frozenset({"to"})
    first_opset = 26
    elem_types = (*COMPUTE_TYPES, *NARROW_TYPES)

    def target(self, node: NodeInfo, x: Facts) -> dtypes.ElementType:
        target = elem_attr(node, "to", required=True)
        assert target is not None
        for which, elem in (("from", x.elem), ("to", target)):
            if elem.name not in self.elem_types:
                raise node.unsupported(f"reinterprets {which} element type {elem.name}")
        if target.bits != x.elem.bits:
            raise node.fail(
                f"{x.elem.name} has {x.elem.bits} bits and {target.name} {target.bits}; BitCast keeps the width"
            )
        return target

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "input")
        target = self.target(node, x)
        value = None
        if x.value is not None and not is_symbolic(x):
            assert target.numpy is not None
            value = kernel_bitcast(np.asarray(x.value, dtype=x.elem.numpy), to=target.numpy.name)
        return [Facts(target, x.shape, value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [inputs[0]]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import BitCastOp

        x = operands[0]
        assert x is not None
        result = ctx.result_types[0]
        if x.type == result:
            return [x]
        dtype = result.elem.numpy
        assert dtype is not None
        return emit_library(ctx, BitCastOp([x], [result], node.name, to=dtype.name))


# ---------------------------------------------------------------------------------------------
# Shape and Size: known at build time, since extents are
# ---------------------------------------------------------------------------------------------


class ShapeRule(MovementRule):
    """ONNX Shape: the input's extents as i64 (start/end from opset 15, clamped); always folds, to
    polynomials where an extent is symbolic."""

    op_types = ("Shape",)
    kernels: tuple[str, ...] = ("kernel.constant",)
    attributes = frozenset({"start", "end"})
    limitations = "folds at build time (symbolic extents as polynomials)"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        dims = given(node, inputs, 0, "data").shape
        rank = len(dims)
        start, end = int(node.attr("start", 0)), node.attr("end")
        end = rank if end is None else int(end)
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        value = np.array(list(dims[start:end]), dtype=object).reshape(-1)
        return [facts(dtypes.by_name("i64"), value.shape, value)]


class SizeRule(MovementRule):
    """ONNX Size: the input's element count as an i64 scalar; always folds."""

    op_types = ("Size",)
    kernels: tuple[str, ...] = ("kernel.constant",)
    limitations = "folds at build time (a polynomial where an extent is symbolic)"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        count = poly_product(given(node, inputs, 0, "data").shape)
        return [facts(dtypes.by_name("i64"), (), np.array(count, dtype=object))]


RULES: tuple[OpRule, ...] = (
    ExpandRule(),
    ConcatRule(),
    SplitRule(),
    TileRule(),
    TriluRule(),
    ReverseSequenceRule(),
    BitCastRule(),
    ShapeRule(),
    SizeRule(),
)
