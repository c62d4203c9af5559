"""Operator rules of the movement family: operators that move elements without arithmetic.

Expand lowers to a `kernel.zip` that only broadcasts; Concat, Split, Slice, Pad, Tile and Trilu
to library kernels.  Shape and Size always fold, to polynomials over symbolic extents.  (The
regrouping operators -- Transpose, Reshape, Flatten, Squeeze, Unsqueeze, DepthToSpace,
SpaceToDepth -- live in `loam.ops.regroup`.)  Each rule restates the operator's older opsets in
its current meaning (an attribute that later became an input is read either way) and refuses
what it does not restate.

Every operand that shapes the result (Slice bounds, Pad widths, Split sizes, ...) must be known at
build time, as numbers or as polynomials over the input symbols (a Shape of a symbolic tensor):
the result's extents would otherwise depend on a run-time value.  What a symbolic extent needs of
the inputs (a Split's parts within the axis, a Concat's other axes equal) is owed (`loam.owed`):
forward checks it before any kernel runs.  Clamps, from-the-end indices and rounded counts are
decided where the build can, else they are derived symbols (`loam.derived`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam import dtypes, owed
from loam.bounds import Verdict
from loam.derived import ceildiv, clamp, decide, exact_quotient, floordiv, from_end, maximum, minimum
from loam.limits import foldable
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, elem_attr, int_attr, require_arity, same_axis
from loam.ops.lowering import COMPUTE_TYPES, NARROW_TYPES
from loam.ops.operands import (
    emit_library,
    facts,
    from_run,
    given,
    ints_of,
    is_symbolic,
    keep_unchanged,
    known_extents,
    known_ints,
    norm_axes,
    norm_axis,
    operand_facts,
    optional,
    present_bits,
    run_time_length,
)
from loam.poly import Poly, derived_call, poly_product, poly_sum
from loam.runtime.errors import DataError
from loam.runtime.kernels.movement import (
    kernel_bitcast,
    kernel_concat,
    kernel_pad,
    kernel_reverse_sequence,
    kernel_slice,
    kernel_split,
    kernel_tile,
    kernel_trilu,
    pad_order_matters,
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


class _ResizesAxes(MovementRule):
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
                if k != axis:
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


class SplitRule(_ResizesAxes):
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
            chunk = -(-e // num)
            return [Poly.const(min(chunk, max(e - chunk * i, 0))) for i in range(num)]
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
            op = SplitByOp(list(operands[:2]), ctx.result_types, node.name, axis=axis, parts=len(sizes))
            return emit_library(ctx, op)
        if len(sizes) == 1:
            return [operands[0]]
        return emit_library(ctx, SplitOp([operands[0]], ctx.result_types, node.name, axis=axis, sizes=tuple(sizes)))


def slice_plan(
    node: NodeInfo,
    dims: Sequence[Poly],
    starts: Sequence[Poly],
    ends: Sequence[Poly],
    axes: Sequence[int] | None,
    steps: Sequence[int] | None,
) -> tuple[tuple[Poly, ...], tuple[Poly, ...], tuple[int, ...]]:
    """ONNX Slice bounds normalised per axis to (start, count, step).

    A negative bound counts from the end, and one out of range (an INT_MAX end included) clamps: to
    [0, d] for a positive step, start to [0, d - 1] and end to [-1, d - 1] for a negative one.  The
    count is the steps between them rounded up, never below 0.  Over symbolic extents or bounds each
    operation is decided where the build can (`loam.derived`), else it is a derived symbol forward
    computes before any kernel.
    """
    rank = len(dims)
    axes = norm_axes(node, axes, rank) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise node.fail(
            f"starts, ends, axes and steps differ in length ({len(starts)}, {len(ends)}, {len(axes)}, {len(steps)})"
        )
    if len(axes) > rank:
        raise node.fail(f"slices {len(axes)} axes of a rank-{rank} input")
    bounds = owed.bounds()
    first = [Poly()] * rank
    counts = list(dims)
    strides = [1] * rank
    for axis, s, e, p in zip(axes, starts, ends, steps, strict=True):
        d = dims[axis]
        if p == 0:
            raise node.fail(f"step 0 at axis {axis}")
        s, e = from_end(s, d, bounds), from_end(e, d, bounds)
        if p > 0:
            s, e = _clamp(s, 0, d), _clamp(e, 0, d)
            span = ceildiv(e - s, p, bounds)
        else:
            s, e = _clamp(s, 0, d - 1), _clamp(e, -1, d - 1)
            span = ceildiv(s - e, -p, bounds)
        count = span if _holds_by_cases(span) else maximum(0, span, bounds)
        first[axis], counts[axis], strides[axis] = (Poly() if count == Poly() else s), count, p
    return tuple(first), tuple(counts), tuple(strides)


def _clamp(x: Poly, lo: Poly | int, hi: Poly | int) -> Poly:
    """x clamped to [lo, hi], one side dropped where the build shows x within it (and lo <= hi)."""
    bounds = owed.bounds()
    if _holds_by_cases(Poly.lift(hi) - lo):
        if _holds_by_cases(Poly.lift(hi) - x):
            return maximum(x, lo, bounds)
        if _holds_by_cases(x - lo):
            return minimum(x, hi, bounds)
    return clamp(x, lo, hi, bounds)


def _holds_by_cases(p: Poly) -> bool:
    """Whether `p >= 0` for every input, taking each min or max in `p` as each of its operands in
    turn (it is one of them, so `N - max(0, N - 2)` holds: N - 0 and N - (N - 2) both do)."""
    bounds = owed.bounds()
    if decide(p, bounds) is Verdict.HOLDS:
        return True
    names = [n for n in sorted(p.symbols) if (c := derived_call(n)) is not None and c.function in ("min", "max")]
    if not names or len(names) > 3:
        return False
    call = derived_call(names[0])
    assert call is not None
    return all(_holds_by_cases(p.substitute(names[0], operand)) for operand in call.args)


class SliceRule(_ResizesAxes):
    """ONNX Slice: starts/ends/axes attributes before opset 10; inputs (and steps) from 10.

    Starts and ends may be extents from Shape, and the sliced axes symbolic: the clamped bounds and
    the count are then derived symbols (`min(N, 8)`), and the kernel reads the starts as parameters
    forward computes.  Where the run gives a bound, the axes or the steps, the sliced extents are
    lengths only the run knows (`kernel.slice_by`; every extent, where the run gives the axes).
    """

    op_types = ("Slice",)
    kernels: tuple[str, ...] = ("kernel.slice", "kernel.slice_by")
    attributes = frozenset({"starts", "ends", "axes"})
    limitations = "bounds only the run gives need their length known; symbolic axes and steps are not read"

    def plan(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[tuple[Poly, ...], ...]:
        x = given(node, inputs, 0, "data")
        if node.since < 10:
            require_arity(node, inputs, 1)
            starts, ends = node.attr("starts"), node.attr("ends")
            if starts is None or ends is None:
                raise node.fail("needs the starts and ends attributes")
            axes = node.attr("axes")
            lift = [Poly.const(int(v)) for v in starts], [Poly.const(int(v)) for v in ends]
            return slice_plan(node, x.shape, *lift, axes, None)
        require_arity(node, inputs, 3, 5)
        starts = known_extents(node, given(node, inputs, 1, "starts"), "starts")
        ends = known_extents(node, given(node, inputs, 2, "ends"), "ends")
        return slice_plan(
            node, x.shape, starts, ends, ints_of(node, inputs, 3, "axes"), ints_of(node, inputs, 4, "steps")
        )

    @staticmethod
    def from_run(node: NodeInfo, inputs: Sequence[Facts | None]) -> bool:
        """Whether a bound, the axes or the steps are only the run's (`kernel.slice_by`)."""
        return node.since >= 10 and any(from_run(optional(inputs, k)) for k in range(1, 5))

    def run_time_extents(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> tuple[Poly, ...]:
        """The result's extents when the run gives a bound, the axes or the steps: the sliced axes'
        (every axis, where the run gives the axes) are lengths only the run knows."""
        require_arity(node, inputs, 3, 5)
        lengths = {}
        for k, what in enumerate(("starts", "ends", "axes", "steps"), start=1):
            f = optional(inputs, k)
            if f is not None:
                lengths[what] = run_time_length(node, f, what) if from_run(f) else len(known_extents(node, f, what))
        if len(set(lengths.values())) > 1:
            raise node.fail(f"starts, ends, axes and steps differ in length ({lengths})")
        axes_input = optional(inputs, 3)
        if axes_input is None:
            sliced = set(range(lengths["starts"]))
        elif from_run(axes_input):
            sliced = set(range(x.rank))
        else:
            sliced = set(norm_axes(node, known_ints(node, axes_input, "axes"), x.rank))
        if len(sliced) > x.rank:
            raise node.fail(f"slices {len(sliced)} axes of a rank-{x.rank} input")
        return tuple(node.result_length(0, a) if a in sliced else d for a, d in enumerate(x.shape))

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x = given(node, inputs, 0, "data")
        check_movable(node, x)
        if self.from_run(node, inputs):
            return [Facts(x.elem, self.run_time_extents(node, x, inputs))]
        starts, counts, steps = self.plan(node, inputs)
        value = None
        if x.value is not None and all(p.is_const for p in (*starts, *counts)):
            value = np.array(
                kernel_slice(
                    np.asarray(x.value),
                    starts=tuple(p.const_value for p in starts),
                    counts=tuple(p.const_value for p in counts),
                    steps=steps,  # type: ignore[arg-type]
                )
            )
        return [Facts(x.elem, counts, value)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import SliceByOp, SliceOp

        x = operands[0]
        assert x is not None
        if self.from_run(node, operand_facts(operands)):
            present = [v for v in operands[3:5] if v is not None]
            op = SliceByOp(
                [*operands[:3], *present], [ctx.result_types[0]], node.name, present=present_bits(operands[3:5])
            )
            return emit_library(ctx, op)
        starts, counts, steps = self.plan(node, operand_facts(operands))
        if all(s == Poly() for s in starts) and all(p == 1 for p in steps) and x.type == ctx.result_types[0]:
            return [x]
        op = SliceOp([x], [ctx.result_types[0]], node.name, starts=starts, counts=counts, steps=steps)
        return emit_library(ctx, op)


PAD_MODES = ("constant", "reflect", "edge", "wrap")


class PadRule(_ResizesAxes):
    """ONNX Pad: `paddings` (opset 1) / `pads` and `value` attributes (2-10), inputs from 11, `axes` from 18.

    Pads list the begins and then the ends of the padded axes; a negative pad crops.  Pads only the
    run gives make the padded axes' extents lengths only the run knows (`kernel.pad_by`); the axes
    input chooses which axes those are, so the build must know it.
    """

    op_types = ("Pad",)
    kernels: tuple[str, ...] = ("kernel.pad", "kernel.pad_by")
    attributes = frozenset({"mode", "pads", "paddings", "value"})
    limitations = (
        "pads known at build time must be numbers, and axes always; a symbolic axis is not both padded and "
        "cropped outside constant mode"
    )

    @staticmethod
    def mode(node: NodeInfo) -> str:
        mode = node.attr("mode", "constant")
        if mode not in PAD_MODES:
            raise node.unsupported(f"mode '{mode}' is not supported (Loam pads {', '.join(PAD_MODES)})")
        return str(mode)

    @staticmethod
    def from_run(node: NodeInfo, inputs: Sequence[Facts | None]) -> bool:
        """Whether the pads are only the run's (`kernel.pad_by`)."""
        return node.since >= 11 and from_run(optional(inputs, 1))

    def run_time_axes(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> list[int]:
        """The axes pads only the run gives pad: those the axes input names (which the build must
        know: it chooses the axes), else all."""
        require_arity(node, inputs, 2, 4)
        self.mode(node)
        given_axes = ints_of(node, inputs, 3, "axes")
        axes = norm_axes(node, given_axes, x.rank) if given_axes is not None else list(range(x.rank))
        count = run_time_length(node, given(node, inputs, 1, "pads"), "pads")
        if count != 2 * len(axes):
            raise node.fail(f"the pads input holds {count} entries; {len(axes)} axes need two each")
        return axes

    def plan(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[tuple[int, ...], str, float]:
        x = given(node, inputs, 0, "data")
        dims = x.shape
        rank = len(dims)
        mode = self.mode(node)
        value = 0.0
        if node.since < 11:
            require_arity(node, inputs, 1)
            pads = node.attr("paddings" if node.since < 2 else "pads")
            if pads is None:
                raise node.fail("has no pads attribute")
            pads = [int(p) for p in pads]
            value = float(node.attr("value", 0.0))
            axes = list(range(rank))
        else:
            require_arity(node, inputs, 2, 4)
            pads = known_ints(node, given(node, inputs, 1, "pads"), "pads")
            given_axes = ints_of(node, inputs, 3, "axes")
            axes = norm_axes(node, given_axes, rank) if given_axes is not None else list(range(rank))
        if len(pads) != 2 * len(axes):
            raise node.fail(f"pads {pads} needs two entries for each of {len(axes)} axes")
        full = [0] * (2 * rank)
        for i, a in enumerate(axes):
            full[a], full[rank + a] = pads[i], pads[len(axes) + i]
        for a in range(rank):
            d, begin, end = dims[a], full[a], full[rank + a]
            if not d.is_const:
                self.symbolic_axis(node, a, d, begin, end, mode)
                continue
            n = d.const_value
            if n + begin + end < 0:
                raise node.fail(f"pads {pads} crop axis {a} of extent {n} below nothing")
            if mode != "constant" and (begin > 0 or end > 0) and n == 0:
                raise node.fail(f"cannot pad the empty axis {a} in mode '{mode}'")
            if pad_order_matters(n, begin, end, mode):
                # Padding that reads input the crop removes depends on whether the crop comes first (as in
                # onnxruntime) or after; ONNX does not say, so no order is guessed where it matters.
                raise node.unsupported(
                    f"pads {pads} both pad and crop axis {a} in mode '{mode}', and the padding reads what "
                    "the crop removes; ONNX leaves their order open"
                )
        return tuple(full), mode, value

    @staticmethod
    def symbolic_axis(node: NodeInfo, a: int, d: Poly, begin: int, end: int, mode: str) -> None:
        """What padding a symbolic axis owes: a crop leaves something, a reading mode has something to read."""
        owed.owe(d + begin + end, node, f"the pads leave axis {a} a length")
        if mode != "constant" and (begin > 0 or end > 0):
            if min(begin, end) < 0:
                raise node.unsupported(
                    f"pads both pad and crop the symbolic axis {a} ({d}) in mode '{mode}'; ONNX leaves their order open"
                )
            owed.owe(d - 1, node, f"mode '{mode}' pads axis {a}, which must not be empty")
            if mode == "reflect":
                owed.owe(d - 1 - max(begin, end), node, f"mode 'reflect' reads within axis {a}")

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x = given(node, inputs, 0, "data")
        check_movable(node, x)
        fill = optional(inputs, 2)
        if fill is not None and fill.elem != x.elem:
            raise node.fail(f"constant_value has element type {fill.elem.name}, the data {x.elem.name}")
        if self.from_run(node, inputs):
            axes = self.run_time_axes(node, x, inputs)
            return [Facts(x.elem, tuple(node.result_length(0, a) if a in axes else d for a, d in enumerate(x.shape)))]
        pads, mode, value = self.plan(node, inputs)
        rank = x.rank
        dims = tuple(d + pads[a] + pads[rank + a] for a, d in enumerate(x.shape))
        out = None
        if x.value is not None and (fill is None or fill.value is not None):
            fill_value = None if fill is None else np.asarray(fill.value)
            out = kernel_pad(np.asarray(x.value), fill_value, pads=pads, mode=mode, value=value)
        return [Facts(x.elem, dims, out)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import PadByOp, PadOp

        x = operands[0]
        assert x is not None
        facts_in = operand_facts(operands)
        fill = operands[2] if len(operands) > 2 and self.mode(node) == "constant" else None
        if self.from_run(node, facts_in):
            axes = self.run_time_axes(node, facts_in[0], facts_in)  # type: ignore[arg-type]
            kernel_inputs = [x, operands[1], *([fill] if fill is not None else [])]
            params = {"present": present_bits([fill]), "mode": self.mode(node), "axes": tuple(axes)}
            return emit_library(ctx, PadByOp(kernel_inputs, [ctx.result_types[0]], node.name, **params))  # type: ignore[arg-type]
        pads, mode, value = self.plan(node, facts_in)
        if not any(pads) and x.type == ctx.result_types[0]:
            return [x]
        kernel_inputs = [x] if fill is None else [x, fill]
        params: dict[str, object] = {"pads": pads, "mode": mode}
        if fill is None and mode == "constant":
            params["value"] = value
        return emit_library(ctx, PadOp(kernel_inputs, [ctx.result_types[0]], node.name, **params))  # type: ignore[arg-type]


class TileRule(_ResizesAxes):
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
            return emit_library(ctx, TileByOp(list(operands[:2]), [ctx.result_types[0]], node.name))
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
        if x.value is not None and lens.value is not None and foldable(x.shape):
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
    SliceRule(),
    PadRule(),
    TileRule(),
    TriluRule(),
    ReverseSequenceRule(),
    BitCastRule(),
    ShapeRule(),
    SizeRule(),
)
