"""Operator rules of the movement family: operators that move elements without arithmetic.

Transpose lowers to `kernel.permute`; Reshape, Flatten, Squeeze and Unsqueeze to `kernel.regroup`
(the same elements in row-major order); Expand to a `kernel.zip` that only broadcasts; Concat,
Split, Slice, Pad, Tile and Trilu to library kernels; DepthToSpace and SpaceToDepth compose a
regroup, a permute and a regroup.  Shape, Size and ConstantOfShape always fold, since this issue's
extents are static.  Each rule restates the operator's older opsets in its current meaning (an
attribute that later became an input is read either way) and refuses what it does not restate.

Every operand that shapes the result (a Reshape target, Slice bounds, Pad widths, ...) must be
known at build time: the result's extents would otherwise depend on a run-time value, which needs
symbolic extents (a later issue).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam import dtypes
from loam.backends.numpy_kernels.movement import _k_concat, _k_pad, _k_slice, _k_split, _k_tile, _k_trilu
from loam.errors import AxisError
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, int_attr, require_arity, same_axis
from loam.poly import Poly

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import AxesTensorType, Axis

# Element types the movement and indexing kernels carry: every type plain numpy (or ml_dtypes'
# bfloat16) holds; strings and the sub-byte and 8-bit float types stop the build.
MOVABLE: tuple[str, ...] = (
    "f32",
    "f64",
    "f16",
    "bf16",
    "i8",
    "i16",
    "i32",
    "i64",
    "ui8",
    "ui16",
    "ui32",
    "ui64",
    "bool",
)
INDEX_TYPES: tuple[str, ...] = ("i32", "i64")
# ONNX spells "to the end" as INT64_MAX (and exporters as INT32_MAX); both clamp like any end.

AxesIn = Sequence["tuple[Axis, ...] | None"]
AxesOut = list["tuple[Axis | None, ...]"]


# ---------------------------------------------------------------------------------------------
# Helpers the movement and indexing rules share
# ---------------------------------------------------------------------------------------------


def given(node: NodeInfo, inputs: Sequence[Facts | None], index: int, what: str) -> Facts:
    """Input `index`, which the operator requires."""
    f = inputs[index] if index < len(inputs) else None
    if f is None:
        raise node.fail(f"the {what} input is absent")
    return f


def optional(inputs: Sequence[Facts | None], index: int) -> Facts | None:
    return inputs[index] if index < len(inputs) else None


def check_movable(node: NodeInfo, f: Facts, what: str = "data") -> None:
    if f.elem.name not in MOVABLE:
        raise node.unsupported(f"the {what} has element type {f.elem.name}; Loam moves {', '.join(MOVABLE)}")


def static(node: NodeInfo, f: Facts, what: str = "data") -> tuple[int, ...]:
    """`f`'s extents as integers; a symbolic extent stops the build (symbolic extents come later)."""
    shape = f.static_shape()
    if shape is None:
        raise node.unsupported(
            f"the {what} has symbolic extents [{', '.join(map(str, f.shape))}]; this operator needs numbers"
        )
    return shape


def known_ints(node: NodeInfo, f: Facts, what: str) -> list[int]:
    """The integers input `what` holds, which the build must know."""
    if f.value is None:
        raise node.unsupported(
            f"the {what} input must be known at build time (a Constant, an integer initializer or a value "
            f"the build folds); a {what} computed from a run-time value needs symbolic extents, not supported yet"
        )
    if f.elem.name not in ("i64", "i32", "i16", "i8", "ui8", "ui16", "ui32", "ui64"):
        raise node.fail(f"the {what} input has element type {f.elem.name}; ONNX needs integers")
    return [int(v) for v in np.asarray(f.value).reshape(-1)]


def ints_of(node: NodeInfo, inputs: Sequence[Facts | None], index: int, what: str) -> list[int] | None:
    """Optional integer input `index` (None when absent)."""
    f = optional(inputs, index)
    return None if f is None else known_ints(node, f, what)


def norm_axis(node: NodeInfo, axis: int, rank: int, what: str = "axis") -> int:
    """`axis` in [-rank, rank) as a non-negative index."""
    if not -rank <= axis < rank:
        raise node.fail(f"{what} {axis} is outside [{-rank}, {rank - 1}] for rank {rank}")
    return axis + rank if axis < 0 else axis


def norm_axes(node: NodeInfo, axes: Sequence[int], rank: int, what: str = "axes") -> list[int]:
    out = [norm_axis(node, a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise node.fail(f"{what} {list(axes)} name an axis twice")
    return out


def facts(elem: dtypes.ElementType, dims: Sequence[int], value: np.ndarray | None = None) -> Facts:
    return Facts(elem, tuple(Poly.const(int(d)) for d in dims), value)


def const_of(t: AxesTensorType) -> tuple[int, ...]:
    return tuple(a.extent.const_value for a in t.axes)


def keep_unchanged(inp: tuple[Axis, ...], out: Facts) -> tuple[Axis | None, ...]:
    """Each input axis whose extent the operator left alone; a resized axis is new (None)."""
    return tuple(a if a.extent == e else None for a, e in zip(inp, out.shape, strict=True))


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


def emit_library(ctx: LowerContext, op: object) -> list[SSAValue]:
    ctx.emit(op)  # type: ignore[arg-type]
    return list(op.results)  # type: ignore[attr-defined]


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


class MovementRule(OpRule):
    """Base of the rules here: every element type Loam holds moves."""

    elem_types = MOVABLE


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
        return [regroup_axes(inputs[0], static(node, outputs[0], "output"))]

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
        dims = static(node, x)
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
        dims = static(node, x)
        axis = int(node.attr("axis", 1))
        if not -len(dims) <= axis <= len(dims):
            raise node.fail(f"axis {axis} is outside [{-len(dims)}, {len(dims)}]")
        axis = axis + len(dims) if axis < 0 else axis
        return [int(np.prod(dims[:axis], dtype=np.int64)), int(np.prod(dims[axis:], dtype=np.int64))]


class SqueezeRule(_RegroupRule):
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
        dims = static(node, x)
        dropped = self.dropped(node, dims, inputs)
        return [d for i, d in enumerate(dims) if i not in dropped]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [positional_axes(inputs[0], static(node, outputs[0], "output"))]


class UnsqueezeRule(_RegroupRule):
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
        dims = list(static(node, x))
        inserted = self.inserted(node, len(dims), inputs)
        rest = iter(dims)
        return [1 if i in inserted else next(rest) for i in range(len(dims) + len(inserted))]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [positional_axes(inputs[0], static(node, outputs[0], "output"))]


# ---------------------------------------------------------------------------------------------
# Operands read again at lowering
# ---------------------------------------------------------------------------------------------


def operand_facts(operands: Sequence[SSAValue | None]) -> list[Facts | None]:
    """What `lower` knows of its operands: extents, and the value of a folded constant.

    Lowering recomputes a kernel's parameters from these with the same code `infer` used.
    """
    from loam.dialects.kernel import ConstantOp, WeightOp

    out: list[Facts | None] = []
    for v in operands:
        if v is None:
            out.append(None)
            continue
        t = v.type
        value = None
        if isinstance(v.owner, ConstantOp):
            value = np.asarray(v.owner.value.to_numpy())  # type: ignore[attr-defined]
        elif isinstance(v.owner, WeightOp) and v.owner.data is not None and v.type.elem.name in ("i64", "i32"):  # type: ignore[attr-defined]
            # An integer initializer: stage 0 read it as known (weights are the float ones).
            value = np.asarray(v.owner.data.to_numpy())
        out.append(Facts(t.elem, tuple(a.extent for a in t.axes), value))  # type: ignore[attr-defined]
    return out


# ---------------------------------------------------------------------------------------------
# Expand, Concat, Split, Slice, Pad, Tile, Trilu
# ---------------------------------------------------------------------------------------------


class ExpandRule(MovementRule):
    """ONNX Expand: the input broadcast (both ways, numpy-style) with a shape known at build time."""

    op_types = ("Expand",)
    first_opset = 8
    limitations = "the shape input must be known at build time"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        from loam.ops.base import broadcast_shapes

        require_arity(node, inputs, 2)
        x = given(node, inputs, 0, "input")
        check_movable(node, x, "input")
        target = known_ints(node, given(node, inputs, 1, "shape"), "shape")
        shape = broadcast_shapes(node, [x.shape, tuple(Poly.const(t) for t in target)])
        value = None
        if x.value is not None:
            value = np.array(np.broadcast_to(x.value, [d.const_value for d in shape]))
        return [Facts(x.elem, shape, value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        x = inputs[0]
        assert x is not None
        out = outputs[0].shape
        lead = len(out) - len(x)
        return [tuple(x[k - lead] if k >= lead and x[k - lead].extent == e else None for k, e in enumerate(out))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import Expr, ZipOp

        x = operands[0]
        assert x is not None
        if x.type == ctx.result_types[0]:
            return [x]
        op = ZipOp([x], Expr.operand(0), ctx.result_types[0], node.name)  # broadcasting is all it does
        ctx.emit(op)
        return [op.result]


class ConcatRule(MovementRule):
    """ONNX Concat: inputs joined along `axis` (required from opset 4; 1 by default before)."""

    op_types = ("Concat",)
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
        for i, f in enumerate(parts):
            for k, (a, b) in enumerate(zip(first.shape, f.shape, strict=True)):
                if k != axis and a != b:
                    raise node.fail(f"input {i} has extent {b} at axis {k}, input 0 has {a}")
        total = first.shape[axis]
        for f in parts[1:]:
            total = total + f.shape[axis]
        shape = tuple(total if k == axis else d for k, d in enumerate(first.shape))
        value = None
        if all(f.value is not None for f in parts):
            value = _k_concat(*[np.asarray(f.value) for f in parts], axis=axis)
        return [Facts(first.elem, shape, value)]

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


class SplitRule(MovementRule):
    """ONNX Split: consecutive chunks along `axis`.

    The sizes come from the `split` attribute (before 13) or input (13+), else from `num_outputs`
    (18+, the last chunk smaller when uneven) or the number of outputs (equal chunks).
    """

    op_types = ("Split",)
    attributes = frozenset({"axis", "split", "num_outputs"})
    limitations = "the split input must be known at build time"

    def plan(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[int, list[int]]:
        x = given(node, inputs, 0, "input")
        dims = static(node, x, "input")
        axis = norm_axis(node, int(node.attr("axis", 0)), len(dims))
        extent = dims[axis]
        sizes: list[int] | None
        if node.since < 13 and node.attr("split") is not None:
            require_arity(node, inputs, 1)
            sizes = [int(s) for s in node.attr("split")]
        else:
            require_arity(node, inputs, 1, 2)
            sizes = ints_of(node, inputs, 1, "split")
        count = node.outputs
        if sizes is None:
            num = node.attr("num_outputs")
            if num is None:
                if extent % count:
                    raise node.fail(f"cannot split extent {extent} into {count} equal parts")
                sizes = [extent // count] * count
            else:
                num = int(num)
                if num < 1:
                    raise node.fail(f"num_outputs {num} is not positive")
                if count is not None and count != num:  # before listing num sizes: num may be huge
                    raise node.fail(f"num_outputs is {num}, but the node has {count} outputs")
                chunk = -(-extent // num)
                sizes = [min(chunk, max(extent - chunk * i, 0)) for i in range(num)]
        if sum(sizes) != extent or any(s < 0 for s in sizes):
            raise node.fail(f"split sizes {sizes} do not add up to the extent {extent} of axis {axis}")
        if count is not None and count != len(sizes):
            raise node.fail(f"splits into {len(sizes)} parts, but the node has {count} outputs")
        return axis, sizes

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x = given(node, inputs, 0, "input")
        check_movable(node, x, "input")
        axis, sizes = self.plan(node, inputs)
        dims = static(node, x, "input")
        values: Sequence[np.ndarray | None] = [None] * len(sizes)
        if x.value is not None:
            values = _k_split(np.asarray(x.value), axis=axis, sizes=tuple(sizes))
        out = []
        for s, v in zip(sizes, values, strict=True):
            out.append(facts(x.elem, [s if k == axis else d for k, d in enumerate(dims)], v))
        return out

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [keep_unchanged(inputs[0], f) for f in outputs]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import SplitOp

        axis, sizes = self.plan(node, operand_facts(operands))
        assert operands[0] is not None
        if len(sizes) == 1:
            return [operands[0]]
        return emit_library(ctx, SplitOp([operands[0]], ctx.result_types, node.name, axis=axis, sizes=tuple(sizes)))


def slice_plan(
    node: NodeInfo,
    dims: Sequence[int],
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None,
    steps: Sequence[int] | None,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """ONNX Slice bounds normalised per axis to (start, count, step): negative indices count from
    the end, and out-of-range ones (INT_MAX ends included) clamp."""
    rank = len(dims)
    axes = norm_axes(node, axes, rank) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise node.fail(
            f"starts, ends, axes and steps differ in length ({len(starts)}, {len(ends)}, {len(axes)}, {len(steps)})"
        )
    if len(axes) > rank:
        raise node.fail(f"slices {len(axes)} axes of a rank-{rank} input")
    first = [0] * rank
    counts = list(dims)
    strides = [1] * rank
    for axis, s, e, p in zip(axes, starts, ends, steps, strict=True):
        d = dims[axis]
        if p == 0:
            raise node.fail(f"step 0 at axis {axis}")
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if p > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
            count = max(0, -(-(e - s) // p))
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
            count = max(0, -(-(s - e) // -p)) if d else 0
        first[axis], counts[axis], strides[axis] = (s if count else 0), count, p
    return tuple(first), tuple(counts), tuple(strides)


class SliceRule(MovementRule):
    """ONNX Slice: starts/ends/axes attributes before opset 10; inputs (and steps) from 10."""

    op_types = ("Slice",)
    attributes = frozenset({"starts", "ends", "axes"})
    limitations = "starts, ends, axes and steps must be known at build time"

    def plan(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[tuple[int, ...], ...]:
        x = given(node, inputs, 0, "data")
        dims = static(node, x)
        if node.since < 10:
            require_arity(node, inputs, 1)
            starts, ends = node.attr("starts"), node.attr("ends")
            if starts is None or ends is None:
                raise node.fail("needs the starts and ends attributes")
            axes = node.attr("axes")
            return slice_plan(node, dims, starts, ends, axes, None)
        require_arity(node, inputs, 3, 5)
        starts = known_ints(node, given(node, inputs, 1, "starts"), "starts")
        ends = known_ints(node, given(node, inputs, 2, "ends"), "ends")
        return slice_plan(node, dims, starts, ends, ints_of(node, inputs, 3, "axes"), ints_of(node, inputs, 4, "steps"))

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x = given(node, inputs, 0, "data")
        check_movable(node, x)
        starts, counts, steps = self.plan(node, inputs)
        value = None
        if x.value is not None:
            value = np.array(_k_slice(np.asarray(x.value), starts=starts, counts=counts, steps=steps))
        return [facts(x.elem, counts, value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [keep_unchanged(inputs[0], outputs[0])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import SliceOp

        x = operands[0]
        assert x is not None
        starts, counts, steps = self.plan(node, operand_facts(operands))
        if all(s == 0 for s in starts) and all(p == 1 for p in steps) and x.type == ctx.result_types[0]:
            return [x]
        op = SliceOp([x], [ctx.result_types[0]], node.name, starts=starts, counts=counts, steps=steps)
        return emit_library(ctx, op)


PAD_MODES = ("constant", "reflect", "edge", "wrap")


class PadRule(MovementRule):
    """ONNX Pad: `paddings` (opset 1) / `pads` and `value` attributes (2-10), inputs from 11, `axes` from 18.

    Pads list the begins and then the ends of the padded axes; a negative pad crops.
    """

    op_types = ("Pad",)
    attributes = frozenset({"mode", "pads", "paddings", "value"})
    limitations = "pads and axes must be known at build time"

    def plan(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[tuple[int, ...], str, float]:
        x = given(node, inputs, 0, "data")
        dims = static(node, x)
        rank = len(dims)
        mode = node.attr("mode", "constant")
        if mode not in PAD_MODES:
            raise node.unsupported(f"mode '{mode}' is not supported (Loam pads {', '.join(PAD_MODES)})")
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
            if dims[a] + full[a] + full[rank + a] < 0:
                raise node.fail(f"pads {pads} crop axis {a} of extent {dims[a]} below nothing")
            if mode != "constant" and (full[a] > 0 or full[rank + a] > 0) and dims[a] == 0:
                raise node.fail(f"cannot pad the empty axis {a} in mode '{mode}'")
            if mode != "constant" and min(full[a], full[rank + a]) < 0 < max(full[a], full[rank + a]):
                # Padding that reads input the crop removes depends on whether the crop comes first (as in
                # onnxruntime) or after; ONNX does not say, so no order is guessed where it matters.
                kept = dims[a] + min(full[a], 0) + min(full[rank + a], 0)
                added = max(full[a], full[rank + a])
                if mode == "wrap" or (mode == "edge" and kept < 1) or (mode == "reflect" and added > kept - 1):
                    raise node.unsupported(
                        f"pads {pads} both pad and crop axis {a} in mode '{mode}', and the padding reads what "
                        "the crop removes; ONNX leaves their order open"
                    )
        return tuple(full), mode, value

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x = given(node, inputs, 0, "data")
        check_movable(node, x)
        pads, mode, value = self.plan(node, inputs)
        rank = x.rank
        dims = [d + pads[a] + pads[rank + a] for a, d in enumerate(static(node, x))]
        fill = optional(inputs, 2)
        if fill is not None and fill.elem != x.elem:
            raise node.fail(f"constant_value has element type {fill.elem.name}, the data {x.elem.name}")
        out = None
        if x.value is not None and (fill is None or fill.value is not None):
            fill_value = None if fill is None else np.asarray(fill.value)
            out = _k_pad(np.asarray(x.value), fill_value, pads=pads, mode=mode, value=value)
        return [facts(x.elem, dims, out)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [keep_unchanged(inputs[0], outputs[0])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import PadOp

        x = operands[0]
        assert x is not None
        pads, mode, value = self.plan(node, operand_facts(operands))
        if not any(pads) and x.type == ctx.result_types[0]:
            return [x]
        fill = operands[2] if len(operands) > 2 else None
        kernel_inputs = [x] if fill is None or mode != "constant" else [x, fill]
        params: dict[str, object] = {"pads": pads, "mode": mode}
        if fill is None and mode == "constant":
            params["value"] = value
        return emit_library(ctx, PadOp(kernel_inputs, [ctx.result_types[0]], node.name, **params))  # type: ignore[arg-type]


class TileRule(MovementRule):
    """ONNX Tile (opset 6+): the input repeated along each axis; the repeats known at build time."""

    op_types = ("Tile",)
    first_opset = 6
    limitations = "the repeats input must be known at build time"

    def repeats(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[int, ...]:
        if node.since < 6:
            raise node.unsupported("Tile before opset 6 (tiles and axis inputs) is not supported")
        require_arity(node, inputs, 2)
        x = given(node, inputs, 0, "input")
        reps = known_ints(node, given(node, inputs, 1, "repeats"), "repeats")
        if len(reps) != x.rank or any(r < 0 for r in reps):
            raise node.fail(f"repeats {reps} must hold one non-negative count per axis ({x.rank})")
        return tuple(reps)

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        x = given(node, inputs, 0, "input")
        check_movable(node, x, "input")
        reps = self.repeats(node, inputs)
        dims = [d * r for d, r in zip(static(node, x, "input"), reps, strict=True)]
        value = None if x.value is None else _k_tile(np.asarray(x.value), repeats=reps)
        return [facts(x.elem, dims, value)]

    def axes(self, node: NodeInfo, inputs: AxesIn, outputs: Sequence[Facts]) -> AxesOut:
        assert inputs[0] is not None
        return [keep_unchanged(inputs[0], outputs[0])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import TileOp

        x = operands[0]
        assert x is not None
        reps = self.repeats(node, operand_facts(operands))
        if all(r == 1 for r in reps):
            return [x]
        return emit_library(ctx, TileOp([x], [ctx.result_types[0]], node.name, repeats=reps))


class TriluRule(MovementRule):
    """ONNX Trilu (opset 14): the upper or lower triangle of the last two axes from diagonal k."""

    op_types = ("Trilu",)
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
            value = _k_trilu(
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
        dims = static(node, x, "input")
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
        grouped, perm = self.steps(const_of(xt), b, mode)
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


# ---------------------------------------------------------------------------------------------
# Shape and Size: known at build time, since extents are
# ---------------------------------------------------------------------------------------------


class ShapeRule(MovementRule):
    """ONNX Shape: the input's extents as i64 (start/end from opset 15, clamped); always folds."""

    op_types = ("Shape",)
    attributes = frozenset({"start", "end"})
    limitations = "folds at build time; symbolic extents are not supported yet"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        dims = static(node, given(node, inputs, 0, "data"))
        rank = len(dims)
        start, end = int(node.attr("start", 0)), node.attr("end")
        end = rank if end is None else int(end)
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        value = np.array(dims[start:end], dtype=np.int64).reshape(-1)
        return [facts(dtypes.by_name("i64"), value.shape, value)]


class SizeRule(MovementRule):
    """ONNX Size: the input's element count as an i64 scalar; always folds."""

    op_types = ("Size",)
    limitations = "folds at build time; symbolic extents are not supported yet"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        dims = static(node, given(node, inputs, 0, "data"))
        return [facts(dtypes.by_name("i64"), (), np.array(int(np.prod(dims, dtype=np.int64)), dtype=np.int64))]


RULES: tuple[OpRule, ...] = (
    TransposeRule(),
    ReshapeRule(),
    FlattenRule(),
    SqueezeRule(),
    UnsqueezeRule(),
    ExpandRule(),
    ConcatRule(),
    SplitRule(),
    SliceRule(),
    PadRule(),
    TileRule(),
    TriluRule(),
    DepthToSpaceRule(),
    SpaceToDepthRule(),
    ShapeRule(),
    SizeRule(),
)
