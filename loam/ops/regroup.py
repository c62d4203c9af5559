"""Operator rules of the regrouping family: operators that keep every element and only rename its place.

Transpose lowers to `kernel.permute`; Reshape, Flatten, Squeeze and Unsqueeze to `kernel.regroup`
(the same elements in row-major order); DepthToSpace and SpaceToDepth compose a regroup, a permute
and a regroup.  Their output axes are named from the input axes by the regrouping rule
(`regroup_axes`: one axis to one keeps it, several to one merge, a merge splits back into its
parts) or by position (`positional_axes`, for Squeeze and Unsqueeze).  Each rule restates the
operator's older opsets in its current meaning (an attribute that later became an input is read
either way) and refuses what it does not restate; Squeeze/Unsqueeze axes must be known at build
time.  Extents may be symbolic: a Reshape target may hold extents from Shape (`[B, S, 12, 64]`),
its -1 is the exact quotient of the element counts where the polynomials divide, and what only
the run can confirm (the counts agree, a -1 that rounds) is owed.  A Reshape target only the run
gives (`kernel.reshape_to`) makes every result extent a length only the run knows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import owed
from loam.core.bounds import Verdict
from loam.core.derived import decide, exact_quotient, floordiv, reading_where, select
from loam.core.errors import AxisError
from loam.core.poly import Poly, poly_product
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, int_attr, require_arity
from loam.ops.lowering import axes_type
from loam.ops.movement import AxesIn, AxesOut, MovementRule, check_movable
from loam.ops.operands import (
    emit_library,
    facts,
    from_run,
    given,
    ints_of,
    known_extents,
    known_ints,
    lowered_extents,
    norm_axes,
    operand_facts,
    run_time_length,
    static_extents,
)

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import AxesTensorType, Axis


# ---------------------------------------------------------------------------------------------
# Naming a regrouping's output axes; emitting a regroup or a permute
# ---------------------------------------------------------------------------------------------


def _parts(axis: Axis) -> tuple[str, ...]:
    return axis.parts or (axis.name,)


def _grows_first(a: Poly, b: Poly) -> bool | None:
    """Which side of a regrouping run to extend while the products `a` (input) and `b` (output)
    differ: the input's (True) where `a` is the smaller number, or divides `b` as a polynomial; the
    output's (False) the other way round; None where neither tells (the run is left unnamed)."""
    if a.is_const and b.is_const:
        return a.const_value < b.const_value
    if exact_quotient(b, a) is not None:
        return True
    if exact_quotient(a, b) is not None:
        return False
    return None


def regroup_axes(inp: tuple[Axis, ...], out_dims: Sequence[Poly | int]) -> tuple[Axis | None, ...]:
    """Name a row-major regrouping's output axes from its input axes: a merged axis splits into its parts,
    and parts merge back into one.

    Extent-1 axes hold nothing to regroup: an input one is dropped, an output one is new.  The
    other axes pair up in consecutive runs whose extents multiply alike (as polynomials, so
    `[B, S, 16]` into `[B*S, 16]` merges B and S): one axis to one keeps the axis, several to one
    is their merge `(A B)`, and one merge to as many axes as it has parts splits it back into its
    parts.  Any other run is new (None): the layout names it.
    """
    dims = [Poly.lift(d) for d in out_dims]
    result: list[Axis | None] = [None] * len(dims)
    zero, one = Poly(), Poly.const(1)
    if any(a.extent == zero for a in inp) or zero in dims:
        return tuple(result)
    ins = [i for i, a in enumerate(inp) if a.extent != one]
    outs = [j for j, d in enumerate(dims) if d != one]
    i = j = 0
    while i < len(ins) and j < len(outs):
        group_in, group_out = [ins[i]], [outs[j]]
        p_in, p_out = inp[ins[i]].extent, dims[outs[j]]
        i, j = i + 1, j + 1
        while p_in != p_out:
            grow_in = _grows_first(p_in, p_out)
            if grow_in is True and i < len(ins):
                group_in.append(ins[i])
                p_in = p_in * inp[ins[i]].extent
                i += 1
            elif grow_in is False and j < len(outs):
                group_out.append(outs[j])
                p_out = p_out * dims[outs[j]]
                j += 1
            else:
                return tuple(result)
        axes = [inp[k] for k in group_in]
        try:
            if len(group_in) == 1 and len(group_out) == 1:
                result[group_out[0]] = axes[0]
            elif len(group_out) == 1:
                parts = [p for a in axes for p in _parts(a)]
                from loam.dialects.tensor_axes import Axis

                result[group_out[0]] = Axis.merged(parts, p_out)
            elif len(group_in) == 1 and len(axes[0].parts) == len(group_out):
                from loam.dialects.tensor_axes import Axis

                for part, k in zip(axes[0].parts, group_out, strict=True):
                    result[k] = Axis.named(part, dims[k])
        except AxisError:
            pass  # a merge naming one part twice ([Hidden, Hidden]) has no name: the layout gives one
    return tuple(result)


def positional_axes(inp: tuple[Axis, ...], out_dims: Sequence[Poly | int]) -> tuple[Axis | None, ...]:
    """Squeeze and Unsqueeze carry every other axis by its position; an inserted axis is new.

    The output's extents are the input's with extent-1 axes dropped or inserted.  `axes` sees
    extents, not the node's axes operand, so where extent-1 axes sit side by side the earliest
    ones are taken as the kept ones (the unit axes are interchangeable in what they hold).
    """
    result: list[Axis | None] = []
    i = 0
    for d in map(Poly.lift, out_dims):
        if i < len(inp) and inp[i].extent == d:
            result.append(inp[i])
            i += 1
            continue
        while i < len(inp) and inp[i].extent == Poly.const(1) and len(inp) - i > len(out_dims) - len(result):
            i += 1  # a squeezed axis
        if i < len(inp) and inp[i].extent == d:
            result.append(inp[i])
            i += 1
        else:
            result.append(None)
    return tuple(result)


def regroup(ctx: LowerContext, node: NodeInfo, x: SSAValue, result_type: AxesTensorType) -> SSAValue:
    """`x` regrouped to `result_type` (no kernel when nothing changes)."""
    from loam.dialects.kernel import RegroupOp

    if x.type == result_type:
        return x
    op = RegroupOp(x, result_type, node.name)
    ctx.emit(op)
    return op.result


def permute(
    ctx: LowerContext, node: NodeInfo, x: SSAValue, perm: Sequence[int], result_type: AxesTensorType
) -> SSAValue:
    from loam.dialects.kernel import PermuteOp

    if list(perm) == list(range(len(perm))) and x.type == result_type:
        return x
    op = PermuteOp(x, perm, result_type, node.name)
    ctx.emit(op)
    return op.result


class _RegroupRule(MovementRule):
    """A rule whose output is its input regrouped (Reshape, Flatten, Squeeze, Unsqueeze)."""

    kernels: tuple[str, ...] = ("kernel.regroup",)

    def out_dims(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> list[Poly]:
        raise NotImplementedError

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x = given(node, inputs, 0, "data")
        check_movable(node, x)
        dims = self.out_dims(node, x, inputs)
        value = None
        if x.value is not None and all(d.is_const for d in dims):
            value = np.reshape(x.value, [d.const_value for d in dims])
        return [Facts(x.elem, tuple(dims), value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [regroup_axes(inputs[0], outputs[0].shape)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        assert operands[0] is not None
        return [regroup(ctx, node, operands[0], ctx.result_types[0])]


# ---------------------------------------------------------------------------------------------
# Transpose, Reshape, Flatten, Squeeze, Unsqueeze
# ---------------------------------------------------------------------------------------------


class TransposeRule(MovementRule):
    """ONNX Transpose: output axis i is input axis perm[i]; perm defaults to reversing the axes."""

    op_types = ("Transpose",)
    kernels: tuple[str, ...] = ("kernel.permute",)
    keeps_values = True
    attributes = frozenset({"perm"})

    def perm(self, node: NodeInfo, rank: int) -> list[int]:
        perm = node.attr("perm")
        if perm is None:
            return list(range(rank))[::-1]
        perm = [int(p) for p in perm]
        if sorted(perm) != list(range(rank)):
            raise node.fail(f"perm {perm} is not a permutation of the {rank} axes")
        return perm

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "data")
        check_movable(node, x)
        perm = self.perm(node, x.rank)
        value = None if x.value is None else np.transpose(x.value, perm)
        return [Facts(x.elem, tuple(x.shape[p] for p in perm), value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [tuple(inputs[0][p] for p in self.perm(node, len(inputs[0])))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        assert operands[0] is not None
        rank = len(ctx.result_types[0].axes)
        return [permute(ctx, node, operands[0], self.perm(node, rank), ctx.result_types[0])]


class ReshapeRule(_RegroupRule):
    """ONNX Reshape: 0 copies the input extent (unless allowzero), -1 takes what is left.

    Opsets 1-4 give the shape as an attribute, 5+ as an input: known at build time (numbers, or
    extents from Shape), or only at run time (`kernel.reshape_to`: the result's extents are then
    lengths only the run knows, its rank the shape's length, which the build must know).
    """

    op_types = ("Reshape",)
    kernels: tuple[str, ...] = ("kernel.regroup", "kernel.reshape_to")
    keeps_values = True
    attributes = frozenset({"shape", "allowzero", "consumed_inputs"})
    limitations = (
        "a symbolic shape entry owes that it is not -1, and is 0 only where the extent it would copy is; "
        "a shape only the run gives needs its length known"
    )

    def out_dims(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> list[Poly]:
        if node.since < 5:
            require_arity(node, inputs, 1)
            shape = node.attr("shape")
            if shape is None:
                raise node.fail("has no shape attribute")
            target = [Poly.const(int(t)) for t in shape]
        else:
            require_arity(node, inputs, 2)
            shape = given(node, inputs, 1, "shape")
            if from_run(shape):  # every extent of the result is then a length only the run knows
                return [node.result_length(0, k) for k in range(run_time_length(node, shape, "shape"))]
            target = known_extents(node, shape, "shape")
        return reshape_extents(node, x.shape, target, int_attr(node, "allowzero", 0, (0, 1)))

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        if any(d == node.result_length(0, k) for k, d in enumerate(outputs[0].shape)):
            return [(None,) * outputs[0].rank]  # a shape only the run gives: every result axis is new
        return super().axes(node, inputs, outputs)

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ReshapeToOp

        shape = operand_facts(operands[1:2])[0] if len(operands) > 1 else None
        if from_run(shape):
            allowzero = int_attr(node, "allowzero", 0, (0, 1))
            present = [v for v in operands[:2] if v is not None]  # the data and the shape the run gives
            op = ReshapeToOp(present, [ctx.result_types[0]], node.name, allowzero=allowzero)
            return emit_library(ctx, op)
        return super().lower(ctx, node, operands)


def reshape_extents(node: NodeInfo, dims: Sequence[Poly], target: Sequence[Poly], allowzero: int) -> list[Poly]:
    """The extents ONNX Reshape gives `dims` for `target`, with what the inputs owe for them.

    A 0 copies the data's extent at its position (unless `allowzero`), a -1 takes what is left.  A
    symbolic target entry is the data's extent at its position where it is or reads as it; any
    other owes that it is not -1, and that it is 0 only where the extent it would copy is 0 too
    (so the entry means itself either way).  The -1 is the element count divided by
    the other extents, exactly where the polynomials divide, else rounded down (`floordiv`), owing
    that they divide the count; either way the other extents owe that they do not multiply to 0.
    Last, the element counts must agree.
    """
    zero, minus_one = Poly(), Poly.const(-1)
    shown = "[" + ", ".join(map(str, target)) + "]"
    if allowzero and zero in target and minus_one in target:
        raise node.fail("with allowzero=1 a shape cannot hold both 0 and -1")
    out: list[Poly | None] = []
    for i, t in enumerate(target):
        if t.is_const:
            v = t.const_value
            if v == 0 and not allowzero:
                if i >= len(dims):
                    raise node.fail(f"shape {shown} copies axis {i}, which the data ({len(dims)} axes) lacks")
                out.append(dims[i])
            elif v == -1:
                out.append(None)
            elif v < -1:
                raise node.fail(f"shape {shown} holds {v}")
            else:
                out.append(t)
            continue
        if not allowzero and i < len(dims):
            slacks = reading_where(t - dims[i], lambda p: p == Poly(), owed.bounds())
            if slacks is not None:  # the data's extent itself: a 0 would copy the same length
                for slack in slacks:
                    owed.owe(slack, node, f"shape entry {i} reads as the data's extent {dims[i]}")
                out.append(dims[i])
                continue
        if allowzero or i >= len(dims):
            owed.owe(
                t if allowzero else t - 1, node, f"shape entry {i} ({t}) is not {'-1' if allowzero else '0 or -1'}"
            )
        else:
            # A 0 copies the data's extent here, so where t is 0 that extent must be 0 as well: the
            # exact condition, `select(t, t, d) == t`, accepts every input ONNX does.
            owed.owe(t, node, f"shape entry {i} ({t}) is not -1")
            copied = select(t, t, dims[i], owed.bounds())
            lone = t.lone_symbol
            if copied != t and lone is not None and decide(dims[i].substitute(lone, 0) - 1) is Verdict.HOLDS:
                # Where t is 0 the data's extent is not: the plain condition says the same.
                owed.owe(t - 1, node, f"shape entry {i} ({t}) is not 0")
            elif copied != t:
                owed.current().owe_equal(copied, t, node, f"shape entry {i} ({t}) is 0 only where {dims[i]} is")
        out.append(t)
    if out.count(None) > 1:
        raise node.fail(f"shape {shown} holds -1 more than once")
    total = poly_product(dims)
    if None in out:
        known = poly_product(d for d in out if d is not None)
        if known.is_const and total.is_const:
            if known.const_value == 0 or total.const_value % known.const_value:
                raise node.fail(f"cannot reshape {total} elements into {shown}")
            rest = Poly.const(total.const_value // known.const_value)
        else:
            owed.owe(known - 1, node, "the extents beside -1 multiply to more than 0")
            exact = exact_quotient(total, known) if known != zero else None
            rest = floordiv(total, known, owed.bounds()) if exact is None else exact
        out[out.index(None)] = rest
    final = [d for d in out if d is not None]
    count = poly_product(final)
    if total.is_const and count.is_const:
        if total != count:
            raise node.fail(
                f"cannot reshape {total} elements [{', '.join(map(str, dims))}] into [{', '.join(map(str, final))}]"
            )
    else:
        owed.require_equal(total, count, node, "the element counts of the data and the result")
    return final


class FlattenRule(_RegroupRule):
    """ONNX Flatten: axes [0, axis) and [axis, rank) merge into two (negative axis from opset 11)."""

    op_types = ("Flatten",)
    keeps_values = True
    attributes = frozenset({"axis"})

    def out_dims(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> list[Poly]:
        require_arity(node, inputs, 1)
        dims = x.shape
        axis = int(node.attr("axis", 1))
        if not -len(dims) <= axis <= len(dims):
            raise node.fail(f"axis {axis} is outside [{-len(dims)}, {len(dims)}]")
        axis = axis + len(dims) if axis < 0 else axis
        return [poly_product(dims[:axis]), poly_product(dims[axis:])]


class _UnitAxesRule(_RegroupRule):
    """A regrouping that only drops or inserts extent-1 axes (Squeeze, Unsqueeze): the others keep their place."""

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [positional_axes(inputs[0], outputs[0].shape)]


class SqueezeRule(_UnitAxesRule):
    """ONNX Squeeze: drop the named extent-1 axes, or every one (axes attribute before 13, input from 13)."""

    op_types = ("Squeeze",)
    keeps_values = True
    attributes = frozenset({"axes"})
    limitations = (
        "the axes input must be known at build time; without axes, every extent must be a number "
        "(which symbolic one is 1 only the run knows)"
    )

    def dropped(self, node: NodeInfo, dims: Sequence[Poly], inputs: Sequence[Facts | None]) -> list[int]:
        one = Poly.const(1)
        if node.since < 13:
            require_arity(node, inputs, 1)
            axes = node.attr("axes")
        else:
            require_arity(node, inputs, 1, 2)
            axes = ints_of(node, inputs, 1, "axes")
        if axes is None:
            symbolic = [str(d) for d in dims if not d.is_const]
            if symbolic:
                # Which axes go would depend on the run (an extent that is 1 there is squeezed too).
                raise node.unsupported(
                    f"squeezes every extent-1 axis of [{', '.join(map(str, dims))}], and whether "
                    f"{', '.join(symbolic)} is 1 only the run knows; name the axes to squeeze"
                )
            return [i for i, d in enumerate(dims) if d == one]
        if not len(axes) and one in dims:
            # onnxruntime drops every extent-1 axis, ONNX's reference none: the meaning is not settled.
            raise node.unsupported("the axes given are empty; ONNX does not say whether that squeezes every unit axis")
        dropped = norm_axes(node, [int(a) for a in axes], len(dims))
        for a in dropped:
            if dims[a] == one:
                continue
            if dims[a].is_const:
                raise node.fail(f"cannot squeeze axis {a} of extent {dims[a]}")
            owed.require_equal(dims[a], one, node, f"squeezed axis {a}")
        return dropped

    def out_dims(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> list[Poly]:
        dims = x.shape
        dropped = self.dropped(node, dims, inputs)
        return [d for i, d in enumerate(dims) if i not in dropped]


class UnsqueezeRule(_UnitAxesRule):
    """ONNX Unsqueeze: insert extent-1 axes at the output positions named (attribute before 13, input from 13)."""

    op_types = ("Unsqueeze",)
    keeps_values = True
    attributes = frozenset({"axes"})
    limitations = "the axes input must be known at build time"

    def inserted(self, node: NodeInfo, rank: int, inputs: Sequence[Facts | None]) -> list[int]:
        if node.since < 13:
            require_arity(node, inputs, 1)
            axes = node.attr("axes")
            if axes is None:
                raise node.fail("has no axes attribute")
        else:
            require_arity(node, inputs, 2)
            axes = known_ints(node, given(node, inputs, 1, "axes"), "axes")
        return norm_axes(node, [int(a) for a in axes], rank + len(axes))

    def out_dims(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> list[Poly]:
        dims = list(x.shape)
        inserted = self.inserted(node, len(dims), inputs)
        rest = iter(dims)
        return [Poly.const(1) if i in inserted else next(rest) for i in range(len(dims) + len(inserted))]


# ---------------------------------------------------------------------------------------------
# DepthToSpace and SpaceToDepth: regroup, permute, regroup
# ---------------------------------------------------------------------------------------------


def _fresh(node: NodeInfo, what: str) -> str:
    """A name for an axis only a composition's intermediate value carries."""
    stem = re.sub(r"\W+", "_", node.name).strip("_")
    return f"Block{what}_{stem}" if stem else f"Block{what}"


class _BlockRule(MovementRule):
    """DepthToSpace and SpaceToDepth over [N, C, H, W] with `blocksize` b, mode DCR or CRD."""

    kernels: tuple[str, ...] = ("kernel.permute", "kernel.regroup")

    attributes = frozenset({"blocksize", "mode"})
    limitations = "the input's extents must be numbers (fix symbolic ones with the `dims` option)"

    def params(self, node: NodeInfo) -> tuple[int, str]:
        b = node.attr("blocksize")
        if b is None or int(b) < 1:
            raise node.fail("needs a positive blocksize")
        mode = node.attr("mode", "DCR")
        if mode not in ("DCR", "CRD"):
            raise node.fail(f"mode '{mode}' is neither DCR nor CRD")
        return int(b), mode

    def out_dims(self, node: NodeInfo, dims: Sequence[int], b: int) -> list[int]:
        raise NotImplementedError

    def steps(self, dims: Sequence[int], b: int, mode: str) -> tuple[list[int], list[int]]:
        """The 6-axis regrouping of the input and the permutation that follows it."""
        raise NotImplementedError

    def compute(self, x: np.ndarray, out: Sequence[int], b: int, mode: str) -> np.ndarray:
        grouped, perm = self.steps(x.shape, b, mode)
        return np.reshape(np.transpose(np.reshape(x, grouped), perm), out)

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "input")
        check_movable(node, x, "input")
        dims = static_extents(node, x, "the input")
        if len(dims) != 4:
            raise node.fail(f"the input has rank {len(dims)}; {node.op_type} needs [N, C, H, W]")
        b, mode = self.params(node)
        out = self.out_dims(node, dims, b)
        value = None if x.value is None else self.compute(np.asarray(x.value), out, b, mode)
        return [facts(x.elem, out, value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [(inputs[0][0], None, None, None)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.tensor_axes import AxesTensorType, Axis

        x = operands[0]
        assert x is not None
        xt = axes_type(x)
        b, mode = self.params(node)
        grouped, perm = self.steps(lowered_extents(x), b, mode)
        names = [_fresh(node, str(k)) for k in range(len(grouped))]
        g_axes = [Axis.named(n, d) for n, d in zip(names, grouped, strict=True)]
        g = regroup(ctx, node, x, AxesTensorType(xt.elem, g_axes))
        p = permute(ctx, node, g, perm, AxesTensorType(xt.elem, [g_axes[i] for i in perm]))
        return [regroup(ctx, node, p, ctx.result_types[0])]


class DepthToSpaceRule(_BlockRule):
    """ONNX DepthToSpace: channel blocks moved into b x b spatial blocks (DCR before opset 11)."""

    op_types = ("DepthToSpace",)

    def out_dims(self, node: NodeInfo, dims: Sequence[int], b: int) -> list[int]:
        n, c, h, w = dims
        if c % (b * b):
            raise node.fail(f"channels {c} are not a multiple of blocksize {b} squared")
        return [n, c // (b * b), h * b, w * b]

    def steps(self, dims: Sequence[int], b: int, mode: str) -> tuple[list[int], list[int]]:
        n, c, h, w = dims
        if mode == "DCR":
            return [n, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
        return [n, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]


class SpaceToDepthRule(_BlockRule):
    """ONNX SpaceToDepth: b x b spatial blocks moved into channels (the inverse of DepthToSpace)."""

    op_types = ("SpaceToDepth",)

    def out_dims(self, node: NodeInfo, dims: Sequence[int], b: int) -> list[int]:
        n, c, h, w = dims
        if h % b or w % b:
            raise node.fail(f"spatial extents {h}x{w} are not multiples of blocksize {b}")
        return [n, c * b * b, h // b, w // b]

    def steps(self, dims: Sequence[int], b: int, mode: str) -> tuple[list[int], list[int]]:
        n, c, h, w = dims
        grouped = [n, c, h // b, b, w // b, b]
        return grouped, ([0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4])


RULES: tuple[OpRule, ...] = (
    TransposeRule(),
    ReshapeRule(),
    FlattenRule(),
    SqueezeRule(),
    UnsqueezeRule(),
    DepthToSpaceRule(),
    SpaceToDepthRule(),
)
