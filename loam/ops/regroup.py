"""Operator rules of the regrouping family: operators that keep every element and only rename its place.

Transpose lowers to `kernel.permute`; Reshape, Flatten, Squeeze and Unsqueeze to `kernel.regroup`
(the same elements in row-major order); DepthToSpace and SpaceToDepth compose a regroup, a permute
and a regroup.  Their output axes are named from the input axes by the regrouping rule
(`regroup_axes`: one axis to one keeps it, several to one merge, a merge splits back into its
parts) or by position (`positional_axes`, for Squeeze and Unsqueeze).  Each rule restates the
operator's older opsets in its current meaning (an attribute that later became an input is read
either way) and refuses what it does not restate; a Reshape target or Squeeze/Unsqueeze axes must
be known at build time (symbolic extents are a later issue).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.errors import AxisError
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, int_attr, require_arity
from loam.ops.movement import AxesIn, AxesOut, MovementRule, check_movable
from loam.ops.operands import (
    facts,
    given,
    ints_of,
    known_ints,
    lowered_extents,
    norm_axes,
    static_extents,
)
from loam.poly import Poly

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import AxesTensorType, Axis


# ---------------------------------------------------------------------------------------------
# Naming a regrouping's output axes; emitting a regroup or a permute
# ---------------------------------------------------------------------------------------------


def _parts(axis: Axis) -> tuple[str, ...]:
    return axis.parts or (axis.name,)


def regroup_axes(inp: tuple[Axis, ...], out_dims: Sequence[int]) -> tuple[Axis | None, ...]:
    """Name a row-major regrouping's output axes from its input axes (the WEP's regrouping rule).

    Extent-1 axes hold nothing to regroup: an input one is dropped, an output one is new.  The
    other axes pair up in consecutive runs whose extents multiply alike: one axis to one keeps
    the axis, several to one is their merge `(A B)`, and one merge to as many axes as it has parts
    splits it back into its parts.  Any other run is new (None): the layout names it.
    """
    result: list[Axis | None] = [None] * len(out_dims)
    if any(not a.extent.is_const or a.extent.const_value == 0 for a in inp) or 0 in out_dims:
        return tuple(result)
    ins = [i for i, a in enumerate(inp) if a.extent.const_value != 1]
    outs = [j for j, d in enumerate(out_dims) if d != 1]
    i = j = 0
    while i < len(ins) and j < len(outs):
        group_in, group_out = [ins[i]], [outs[j]]
        p_in, p_out = inp[ins[i]].extent.const_value, out_dims[outs[j]]
        i, j = i + 1, j + 1
        while p_in != p_out:
            if p_in < p_out and i < len(ins):
                group_in.append(ins[i])
                p_in *= inp[ins[i]].extent.const_value
                i += 1
            elif p_out < p_in and j < len(outs):
                group_out.append(outs[j])
                p_out *= out_dims[outs[j]]
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
                    result[k] = Axis.named(part, out_dims[k])
        except AxisError:
            pass  # a merge naming one part twice ([Hidden, Hidden]) has no name: the layout gives one
    return tuple(result)


def positional_axes(inp: tuple[Axis, ...], out_dims: Sequence[int]) -> tuple[Axis | None, ...]:
    """Squeeze and Unsqueeze carry every other axis by its position; an inserted axis is new.

    The output's extents are the input's with extent-1 axes dropped or inserted.  `axes` sees
    extents, not the node's axes operand, so where extent-1 axes sit side by side the earliest
    ones are taken as the kept ones (the unit axes are interchangeable in what they hold).
    """
    result: list[Axis | None] = []
    i = 0
    for d in out_dims:
        if i < len(inp) and inp[i].extent == Poly.const(d):
            result.append(inp[i])
            i += 1
            continue
        while i < len(inp) and inp[i].extent == Poly.const(1) and len(inp) - i > len(out_dims) - len(result):
            i += 1  # a squeezed axis
        if i < len(inp) and inp[i].extent == Poly.const(d):
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

    def out_dims(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> list[int]:
        raise NotImplementedError

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x = given(node, inputs, 0, "data")
        check_movable(node, x)
        dims = self.out_dims(node, x, inputs)
        value = None if x.value is None else np.reshape(x.value, dims)
        return [facts(x.elem, dims, value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [regroup_axes(inputs[0], static_extents(node, outputs[0], "the output"))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        assert operands[0] is not None
        return [regroup(ctx, node, operands[0], ctx.result_types[0])]


# ---------------------------------------------------------------------------------------------
# Transpose, Reshape, Flatten, Squeeze, Unsqueeze
# ---------------------------------------------------------------------------------------------


class TransposeRule(MovementRule):
    """ONNX Transpose: output axis i is input axis perm[i]; perm defaults to reversing the axes."""

    op_types = ("Transpose",)
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

    Opsets 1-4 give the shape as an attribute, 5+ as an input the build must know.
    """

    op_types = ("Reshape",)
    attributes = frozenset({"shape", "allowzero", "consumed_inputs"})
    limitations = "the shape input must be known at build time"

    def out_dims(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> list[int]:
        if node.since < 5:
            require_arity(node, inputs, 1)
            target = node.attr("shape")
            if target is None:
                raise node.fail("has no shape attribute")
            target = [int(t) for t in target]
        else:
            require_arity(node, inputs, 2)
            target = known_ints(node, given(node, inputs, 1, "shape"), "shape")
        dims = static_extents(node, x)
        allowzero = int_attr(node, "allowzero", 0, (0, 1))
        if allowzero and 0 in target and -1 in target:
            raise node.fail("with allowzero=1 a shape cannot hold both 0 and -1")
        out: list[int] = []
        for i, t in enumerate(target):
            if t == 0 and not allowzero:
                if i >= len(dims):
                    raise node.fail(f"shape {target} copies axis {i}, which the data ({len(dims)} axes) lacks")
                out.append(dims[i])
            elif t < -1:
                raise node.fail(f"shape {target} holds {t}")
            else:
                out.append(t)
        total = int(np.prod(dims, dtype=np.int64))
        if out.count(-1) > 1:
            raise node.fail(f"shape {target} holds -1 more than once")
        if -1 in out:
            known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
            if known == 0 or total % known:
                raise node.fail(f"cannot reshape {total} elements into {target}")
            out[out.index(-1)] = total // known
        if int(np.prod(out, dtype=np.int64)) != total:
            raise node.fail(f"cannot reshape {total} elements [{', '.join(map(str, dims))}] into {out}")
        return out


class FlattenRule(_RegroupRule):
    """ONNX Flatten: axes [0, axis) and [axis, rank) merge into two (negative axis from opset 11)."""

    op_types = ("Flatten",)
    attributes = frozenset({"axis"})

    def out_dims(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> list[int]:
        require_arity(node, inputs, 1)
        dims = static_extents(node, x)
        axis = int(node.attr("axis", 1))
        if not -len(dims) <= axis <= len(dims):
            raise node.fail(f"axis {axis} is outside [{-len(dims)}, {len(dims)}]")
        axis = axis + len(dims) if axis < 0 else axis
        return [int(np.prod(dims[:axis], dtype=np.int64)), int(np.prod(dims[axis:], dtype=np.int64))]


class _UnitAxesRule(_RegroupRule):
    """A regrouping that only drops or inserts extent-1 axes (Squeeze, Unsqueeze): the others keep their place."""

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [positional_axes(inputs[0], static_extents(node, outputs[0], "the output"))]


class SqueezeRule(_UnitAxesRule):
    """ONNX Squeeze: drop the named extent-1 axes, or every one (axes attribute before 13, input from 13)."""

    op_types = ("Squeeze",)
    attributes = frozenset({"axes"})
    limitations = "the axes input must be known at build time"

    def dropped(self, node: NodeInfo, dims: Sequence[int], inputs: Sequence[Facts | None]) -> list[int]:
        if node.since < 13:
            require_arity(node, inputs, 1)
            axes = node.attr("axes")
        else:
            require_arity(node, inputs, 1, 2)
            axes = ints_of(node, inputs, 1, "axes")
        if axes is None:
            return [i for i, d in enumerate(dims) if d == 1]
        if not len(axes) and 1 in dims:
            # onnxruntime drops every extent-1 axis, ONNX's reference none: the meaning is not settled.
            raise node.unsupported("the axes given are empty; ONNX does not say whether that squeezes every unit axis")
        dropped = norm_axes(node, [int(a) for a in axes], len(dims))
        for a in dropped:
            if dims[a] != 1:
                raise node.fail(f"cannot squeeze axis {a} of extent {dims[a]}")
        return dropped

    def out_dims(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> list[int]:
        dims = static_extents(node, x)
        dropped = self.dropped(node, dims, inputs)
        return [d for i, d in enumerate(dims) if i not in dropped]


class UnsqueezeRule(_UnitAxesRule):
    """ONNX Unsqueeze: insert extent-1 axes at the output positions named (attribute before 13, input from 13)."""

    op_types = ("Unsqueeze",)
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

    def out_dims(self, node: NodeInfo, x: Facts, inputs: Sequence[Facts | None]) -> list[int]:
        dims = list(static_extents(node, x))
        inserted = self.inserted(node, len(dims), inputs)
        rest = iter(dims)
        return [1 if i in inserted else next(rest) for i in range(len(dims) + len(inserted))]


# ---------------------------------------------------------------------------------------------
# DepthToSpace and SpaceToDepth: regroup, permute, regroup
# ---------------------------------------------------------------------------------------------


def _fresh(node: NodeInfo, what: str) -> str:
    """A name for an axis only a composition's intermediate value carries."""
    stem = re.sub(r"\W+", "_", node.name).strip("_")
    return f"Block{what}_{stem}" if stem else f"Block{what}"


class _BlockRule(MovementRule):
    """DepthToSpace and SpaceToDepth over [N, C, H, W] with `blocksize` b, mode DCR or CRD."""

    attributes = frozenset({"blocksize", "mode"})

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
        xt: AxesTensorType = x.type  # type: ignore[assignment]
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
