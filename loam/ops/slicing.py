"""Operator rules of Slice and Pad: an input's axes cut to a window, or widened (a negative pad crops).

Starts, ends and pads known at build time, as numbers or polynomials over the input symbols (a
Shape of a symbolic tensor), settle the result's extents there: clamps, from-the-end indices and
rounded counts are decided where the build can, else they are derived symbols (`loam.core.derived`),
and what the inputs owe is checked by forward before any kernel runs.  Bounds or widths only the
run gives make the extents they decide lengths only the run knows (`kernel.slice_by`,
`kernel.pad_by`); the axes an operand chooses (Pad's `axes`) must be known at build time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import owed
from loam.core.bounds import INPUT_INTERVAL, Interval, Verdict
from loam.core.derived import ceildiv, clamp, decide, from_end, maximum, minimum
from loam.core.poly import Poly, derived_call
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, require_arity
from loam.ops.movement import ResizesAxes, check_movable
from loam.ops.operands import (
    emit_library,
    from_run,
    given,
    ints_of,
    known_extents,
    known_ints,
    norm_axes,
    operand_facts,
    optional,
    present_bits,
    run_time_length,
)
from loam.runtime.kernels.movement import kernel_pad, kernel_slice, pad_order_matters

if TYPE_CHECKING:
    from xdsl.ir import SSAValue


def extents_bounds(bounds: Mapping[str, Interval], dims: Sequence[Poly]) -> dict[str, Interval]:
    """`bounds` narrowed by what the data's extents say of their symbols: each is a length, so an extent
    `a*S + c` (a > 0) holds S >= ceil(-c / a).  A torch export slicing a [L, 2L - 1] table of relative
    positions from L - 1 then knows L >= 1, so the start is L - 1 and the count L, not a derived
    symbol only owed equal to L."""
    narrowed = dict(bounds)
    for d in dims:
        name = next(iter(d.symbols)) if len(d.symbols) == 1 else None
        if name is None or derived_call(name) is not None:
            continue
        slope = d.substitute(name, Poly.const(1)) - d.substitute(name, Poly.const(0))
        rest = d - slope * Poly.symbol(name)
        if not (slope.is_const and rest.is_const and slope.const_value > 0):
            continue  # not linear in its one symbol
        low = -(rest.const_value // slope.const_value)  # ceil(-c / a)
        known = narrowed.get(name, INPUT_INTERVAL)
        if low > known.lo:
            narrowed[name] = Interval(low, max(low, known.hi))
    return narrowed


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
    operation is decided where the build can (`loam.core.derived`), else it is a derived symbol forward
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
    bounds = extents_bounds(owed.bounds(), dims)
    first = [Poly()] * rank
    counts = list(dims)
    strides = [1] * rank
    for axis, s, e, p in zip(axes, starts, ends, steps, strict=True):
        d = dims[axis]
        if p == 0:
            raise node.fail(f"step 0 at axis {axis}")
        s, e = from_end(s, d, bounds), from_end(e, d, bounds)
        if p > 0:
            s, e = _clamp(s, 0, d, bounds), _clamp(e, 0, d, bounds)
            span = ceildiv(e - s, p, bounds)
        else:
            s, e = _clamp(s, 0, d - 1, bounds), _clamp(e, -1, d - 1, bounds)
            span = ceildiv(s - e, -p, bounds)
        count = span if _holds_by_cases(span, bounds) else maximum(0, span, bounds)
        first[axis], counts[axis], strides[axis] = (Poly() if count == Poly() else s), count, p
    return tuple(first), tuple(counts), tuple(strides)


def _clamp(x: Poly, lo: Poly | int, hi: Poly | int, bounds: Mapping[str, Interval]) -> Poly:
    """x clamped to [lo, hi], one side dropped where the build shows x within it (and lo <= hi)."""
    if _holds_by_cases(Poly.lift(hi) - lo, bounds):
        if _holds_by_cases(Poly.lift(hi) - x, bounds):
            return maximum(x, lo, bounds)
        if _holds_by_cases(x - lo, bounds):
            return minimum(x, hi, bounds)
    return clamp(x, lo, hi, bounds)


def _holds_by_cases(p: Poly, bounds: Mapping[str, Interval]) -> bool:
    """Whether `p >= 0` for every input within `bounds`, taking each min or max in `p` as each of its
    operands in turn (it is one of them, so `N - max(0, N - 2)` holds: N - 0 and N - (N - 2) both do)."""
    if decide(p, bounds) is Verdict.HOLDS:
        return True
    names = [n for n in sorted(p.symbols) if (c := derived_call(n)) is not None and c.function in ("min", "max")]
    if not names or len(names) > 3:
        return False
    call = derived_call(names[0])
    assert call is not None
    return all(_holds_by_cases(p.substitute(names[0], operand), bounds) for operand in call.args)


class SliceRule(ResizesAxes):
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

    def plan(
        self, node: NodeInfo, inputs: Sequence[Facts | None]
    ) -> tuple[tuple[Poly, ...], tuple[Poly, ...], tuple[int, ...]]:
        """Each sliced axis' (start, count, step), as `slice_plan` normalises them."""
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
                    steps=steps,
                )
            )
        return [Facts(x.elem, counts, value)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import SliceByOp, SliceOp

        x = operands[0]
        assert x is not None
        if self.from_run(node, operand_facts(operands)):
            required = [v for v in operands[:3] if v is not None]  # data, starts, ends: infer requires them
            present = [v for v in operands[3:5] if v is not None]
            by = SliceByOp([*required, *present], [ctx.result_types[0]], node.name, present=present_bits(operands[3:5]))
            return emit_library(ctx, by)
        starts, counts, steps = self.plan(node, operand_facts(operands))
        if all(s == Poly() for s in starts) and all(p == 1 for p in steps) and x.type == ctx.result_types[0]:
            return [x]
        op = SliceOp([x], [ctx.result_types[0]], node.name, starts=starts, counts=counts, steps=steps)
        return emit_library(ctx, op)


PAD_MODES = ("constant", "reflect", "edge", "wrap")


class PadRule(ResizesAxes):
    """ONNX Pad: `paddings` (opset 1) / `pads` and `value` attributes (2-10), inputs from 11, `axes` from 18.

    Pads list the begins and then the ends of the padded axes; a negative pad crops.  Pads only the
    run gives make the padded axes' extents lengths only the run knows (`kernel.pad_by`); the axes
    input chooses which axes those are, so the build must know it.
    """

    op_types = ("Pad",)
    kernels: tuple[str, ...] = ("kernel.pad", "kernel.pad_by")
    attributes = frozenset({"mode", "pads", "paddings", "value"})
    limitations = (
        "axes must be known at build time; pads may be extents a Shape gives; outside constant mode an axis "
        "with a symbolic extent or pad is not both padded and cropped"
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

    def plan(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[tuple[int | Poly, ...], str, float]:
        """The pads over every axis (begins, then ends: numbers, or extents a Shape gave), the mode and
        the constant value, with what each axis owes."""
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
            pads = [Poly.const(int(p)) for p in pads]
            value = float(node.attr("value", 0.0))
            axes = list(range(rank))
        else:
            require_arity(node, inputs, 2, 4)
            pads = known_extents(node, given(node, inputs, 1, "pads"), "pads")
            given_axes = ints_of(node, inputs, 3, "axes")
            axes = norm_axes(node, given_axes, rank) if given_axes is not None else list(range(rank))
        shown = "[" + ", ".join(map(str, pads)) + "]"  # as a list of numbers prints
        if len(pads) != 2 * len(axes):
            raise node.fail(f"pads {shown} needs two entries for each of {len(axes)} axes")
        full = [Poly()] * (2 * rank)
        for i, a in enumerate(axes):
            full[a], full[rank + a] = pads[i], pads[len(axes) + i]
        for a in range(rank):
            d, begin, end = dims[a], full[a], full[rank + a]
            if not (d.is_const and begin.is_const and end.is_const):
                self.symbolic_axis(node, a, d, begin, end, mode)
                continue
            n, low, high = d.const_value, begin.const_value, end.const_value
            if n + low + high < 0:
                raise node.fail(f"pads {shown} crop axis {a} of extent {n} below nothing")
            if mode != "constant" and (low > 0 or high > 0) and n == 0:
                raise node.fail(f"cannot pad the empty axis {a} in mode '{mode}'")
            if pad_order_matters(n, low, high, mode):
                # Padding that reads input the crop removes depends on whether the crop comes first (as in
                # onnxruntime) or after; ONNX does not say, so no order is guessed where it matters.
                raise node.unsupported(
                    f"pads {shown} both pad and crop axis {a} in mode '{mode}', and the padding reads what "
                    "the crop removes; ONNX leaves their order open"
                )
        return tuple(p.const_value if p.is_const else p for p in full), mode, value

    @staticmethod
    def symbolic_axis(node: NodeInfo, a: int, d: Poly, begin: Poly, end: Poly, mode: str) -> None:
        """What padding a symbolic axis, or an axis padded by symbolic pads, owes: a crop leaves
        something, a reading mode has something to read (reflect: more than either pad)."""
        owed.owe(d + begin + end, node, f"the pads leave axis {a} a length")
        if mode == "constant" or begin == end == Poly():
            return
        if decide(begin) is not Verdict.HOLDS or decide(end) is not Verdict.HOLDS:
            if (begin.is_const and begin.const_value <= 0) and (end.is_const and end.const_value <= 0):
                return  # a crop on both sides reads nothing beyond the axis
            raise node.unsupported(
                f"pads [{begin}, {end}] may both pad and crop axis {a} ({d}) in mode '{mode}'; ONNX leaves their "
                "order open, so Loam pads symbolically only where neither pad is negative"
            )
        owed.owe(d - 1, node, f"mode '{mode}' pads axis {a}, which must not be empty")
        if mode == "reflect" and begin.is_const and end.is_const:
            owed.owe(d - 1 - max(begin.const_value, end.const_value), node, f"mode 'reflect' reads within axis {a}")
        elif mode == "reflect":
            for side, pad in (("begin", begin), ("end", end)):
                owed.owe(d - 1 - pad, node, f"mode 'reflect' reads within axis {a}, longer than its {side} pad")

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
        numbers = tuple(p for p in pads if isinstance(p, int))
        if len(numbers) == len(pads) and x.value is not None and (fill is None or fill.value is not None):
            fill_value = None if fill is None else np.asarray(fill.value)
            out = kernel_pad(np.asarray(x.value), fill_value, pads=numbers, mode=mode, value=value)
        return [Facts(x.elem, dims, out)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import PadByOp, PadOp

        x = operands[0]
        assert x is not None
        facts_in = operand_facts(operands)
        fill = operands[2] if len(operands) > 2 and self.mode(node) == "constant" else None
        if self.from_run(node, facts_in):
            x_facts, pads_in = facts_in[0], operands[1]
            assert x_facts is not None and pads_in is not None  # the run gives the pads: an operand
            axes = self.run_time_axes(node, x_facts, facts_in)
            kernel_inputs = [x, pads_in, *([fill] if fill is not None else [])]
            by = PadByOp(
                kernel_inputs,
                [ctx.result_types[0]],
                node.name,
                present=present_bits([fill]),
                mode=self.mode(node),
                axes=tuple(axes),
            )
            return emit_library(ctx, by)
        pads, mode, value = self.plan(node, facts_in)
        if all(p == 0 for p in pads) and x.type == ctx.result_types[0]:
            return [x]
        kernel_inputs = [x] if fill is None else [x, fill]
        if fill is None and mode == "constant":
            op = PadOp(kernel_inputs, [ctx.result_types[0]], node.name, pads=pads, mode=mode, value=value)
        else:
            op = PadOp(kernel_inputs, [ctx.result_types[0]], node.name, pads=pads, mode=mode)
        return emit_library(ctx, op)


RULES: tuple[OpRule, ...] = (SliceRule(), PadRule())
