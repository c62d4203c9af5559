"""Reductions: Reduce*, ArgMax/ArgMin, TopK, CumSum and the softmax family.

Every rule here resolves ONNX's conventions to explicit, non-negative axes before anything is
emitted: negative axes count from the end, an empty axes list reduces every axis (unless
`noop_with_empty_axes`), and the opset changes are restated in the current meaning (Reduce*'s
`axes` attribute became an input at opset 18, ReduceSum's at 13; TopK's `k` at 10; Softmax and
its siblings normalised the whole trailing block from `axis` on before 13).  Operands that decide
a shape (axes, k, CumSum's axis) must be known at build time.

The kernels are library ops (`kernel.reduce`, `kernel.arg_reduce`, `kernel.topk`,
`kernel.cumsum`, `kernel.softmax`) computed by `loam/runtime/kernels/reduce.py`, whose functions
also fold the values the build knows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import combinations
from typing import TYPE_CHECKING, NotRequired, TypedDict

import numpy as np

from loam.core import dtypes, owed
from loam.core.poly import Poly
from loam.dialects.tensor_axes import Axis
from loam.ops.base import UNIT_AXIS, Facts, KeepsAxes, LowerContext, NodeInfo, OpRule, int_attr, require_arity
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.lowering import axes_type
from loam.ops.operands import (
    INDEX_TYPES,
    emit_library,
    given,
    ints_of,
    is_symbolic,
    known_ints,
    norm_axis,
    operand_facts,
    polys_of,
    require_elem,
)
from loam.runtime.kernels.reduce import (
    kernel_arg_reduce,
    kernel_cumprod,
    kernel_cumsum,
    kernel_reduce,
    kernel_softmax,
    kernel_topk,
)

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

INTS = ("i32", "i64")


def unit_axis(taken: Iterable[str]) -> Axis:
    """An extent-1 axis named `Unit`, `Unit1`, ... (the first name not in `taken`), as name-axes names them.

    A reduced axis kept by `keepdims` holds one element, so it needs no name from the layout.
    """
    used = set(taken)
    i = 0
    while f"{UNIT_AXIS}{i or ''}" in used:
        i += 1
    return Axis.named(f"{UNIT_AXIS}{i or ''}", 1)


def dropped_axes(x: Sequence[Axis], out: Sequence[Poly]) -> tuple[Axis | None, ...]:
    """The output's axes when some of `x`'s axes are dropped, named where the extents say which.

    Every way of dropping `len(x) - len(out)` axes that leaves the output's extents is tried; an
    output axis takes the input axis every such way gives it, and is left to the layout (None)
    where two ways disagree (reducing one of two equally long axes through an axes input).
    """
    drop = len(x) - len(out)
    choices: list[set[str]] = [set() for _ in out]
    by_name: dict[str, Axis] = {}
    for dropped in combinations(range(len(x)), drop):
        kept = [a for i, a in enumerate(x) if i not in dropped]
        if [a.extent for a in kept] != list(out):
            continue
        for j, a in enumerate(kept):
            choices[j].add(a.name)
            by_name[a.name] = a
    return tuple(by_name[next(iter(c))] if len(c) == 1 else None for c in choices)


def kept_unit_axes(x: Sequence[Axis], out: Sequence[Poly]) -> tuple[Axis, ...]:
    """The output's axes when reduced axes stay as extent 1: an axis whose extent became 1 is a unit axis.

    An axis of extent 1 reduced or not is the same axis, so it keeps its name.
    """
    one = Poly.const(1)
    taken = {a.name for a, d in zip(x, out, strict=True) if a.extent == d}
    result: list[Axis] = []
    for a, d in zip(x, out, strict=True):
        if a.extent == d:
            result.append(a)
        else:
            assert d == one
            unit = unit_axis(taken)
            taken.add(unit.name)
            result.append(unit)
    return tuple(result)


def symbolic_reduce(x: np.ndarray, kind: str, axes: tuple[int, ...], keepdims: bool, elem: str) -> np.ndarray | None:
    """Reduce<kind> of an integer value known as polynomials (ReduceProd of a Shape is an element count),
    as `kernel_reduce` computes it on numbers; None for the kinds with no integer meaning here (logs, roots).

    An i32 result saturates at the type's range, as the kernel's does; an i64 one is left exact, since
    a polynomial in extents (a count, a length) lies far inside it."""
    from loam.core import derived

    polys = polys_of(x)
    bits = 32 if elem == "i32" else 64
    identity = {
        "sum": 0,
        "l1": 0,
        "sum_square": 0,
        "mean": 0,
        "prod": 1,
        "max": -(2 ** (bits - 1)),
        "min": 2 ** (bits - 1) - 1,
    }
    if kind not in identity:
        return None
    kept = [i for i in range(polys.ndim) if i not in axes]
    count = int(np.prod([polys.shape[i] for i in axes], dtype=np.int64))
    rows = np.transpose(polys, kept + list(axes)).reshape([polys.shape[i] for i in kept] + [count])
    out = np.empty(rows.shape[:-1], dtype=object)
    for index in np.ndindex(out.shape):
        total = Poly.const(identity[kind])
        for v in rows[index]:
            if kind in ("sum", "mean"):
                total = total + v
            elif kind == "l1":
                total = total + derived.maximum(v, -v)
            elif kind == "sum_square":
                total = total + v * v
            elif kind == "prod":
                total = total * v
            elif kind == "max":
                total = derived.maximum(total, v)
            else:
                total = derived.minimum(total, v)
        if kind == "mean":
            total = derived.truncdiv(total, max(count, 1))
        out[index] = derived.clamp(total, -(2**31), 2**31 - 1) if elem == "i32" else total
    if keepdims:
        out = out.reshape([1 if i in axes else d for i, d in enumerate(polys.shape)])
    return out


# ONNX op type -> `kernel.reduce` kind.
REDUCE_KINDS: dict[str, str] = {
    "ReduceSum": "sum",
    "ReduceMean": "mean",
    "ReduceMax": "max",
    "ReduceMin": "min",
    "ReduceProd": "prod",
    "ReduceL1": "l1",
    "ReduceL2": "l2",
    "ReduceLogSum": "log_sum",
    "ReduceLogSumExp": "log_sum_exp",
    "ReduceSumSquare": "sum_square",
}

# Reductions whose value over no axis is their input: the others (l1, l2, log_sum, log_sum_exp,
# sum_square) still apply their elementwise part when `noop_with_empty_axes` skips the reduction.
PASS_THROUGH_KINDS = frozenset({"sum", "mean", "max", "min", "prod"})


class ArgReduceParams(TypedDict):
    """`kernel.arg_reduce`'s parameters."""

    kind: str
    axis: int
    keepdims: int
    select_last_index: int


class TopKParams(TypedDict):
    """`kernel.topk`'s parameters; without `k` the kernel reads it from its second operand."""

    k: NotRequired[int]
    axis: int
    largest: int
    sorted: int


class ReduceRule(OpRule):
    """ONNX Reduce*: axes (attribute, or input from opset 18 / ReduceSum 13), keepdims, noop_with_empty_axes."""

    op_types = tuple(REDUCE_KINDS)
    kernels: tuple[str, ...] = ("kernel.reduce",)
    attributes = frozenset({"axes", "keepdims", "noop_with_empty_axes"})
    elem_types = (*FLOATS, *INTS, "i8", "ui8", "bool")
    limitations = (
        "the axes input must be known at build time; i8, ui8 and bool only for ReduceMax/ReduceMin; "
        "integers other than by ReduceMax/ReduceMin reduce in f64 and saturate at the type's range, as onnxruntime's "
        "CPU kernels do"
    )

    @staticmethod
    def axes_are_input(node: NodeInfo) -> bool:
        return node.since >= (13 if node.op_type == "ReduceSum" else 18)

    def reduced_axes(self, node: NodeInfo, given: list[int] | None, rank: int) -> tuple[int, ...]:
        """The axes reduced, sorted; empty when `noop_with_empty_axes` skips the reduction.

        `given` is the axes input's value (None when absent); before the input existed the
        attribute says.  Skipping the reduction still applies the operator's elementwise part, as
        onnxruntime and ONNX's reference evaluator do (ReduceL1 gives |x|, ReduceSumSquare x * x,
        ReduceLogSum log(x)): a reduction over no axis is exactly that.
        """
        if self.axes_are_input(node):
            axes = given or []
            noop = bool(int_attr(node, "noop_with_empty_axes", 0, (0, 1)))
        else:
            axes = [int(a) for a in node.attr("axes", None) or []]
            noop = False
        if not axes:
            return () if noop else tuple(range(rank))
        resolved = [norm_axis(node, a, rank, "reduced axis") for a in axes]
        if len(set(resolved)) != len(resolved):
            raise node.fail(f"axes {axes} name one axis twice")
        return tuple(sorted(resolved))

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        if self.axes_are_input(node):
            require_arity(node, inputs, 1, 2)
        else:
            require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "data")
        kind = REDUCE_KINDS[node.op_type]
        allowed = (*FLOATS, *INTS, "i8", "ui8", "bool") if kind in ("max", "min") else (*FLOATS, *INTS)
        require_elem(node, x, allowed)
        axes = self.reduced_axes(node, ints_of(node, inputs, 1, "axes", INDEX_TYPES), x.rank)
        if not axes and kind in PASS_THROUGH_KINDS:
            return [x]
        keep = bool(int_attr(node, "keepdims", 1, (0, 1)))
        one = Poly.const(1)
        shape = tuple(one if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
        value = None
        if is_symbolic(x):
            value = symbolic_reduce(np.asarray(x.value), kind, axes, keep, x.elem.name)
        elif x.value is not None:
            value = kernel_reduce(x.value, kind=kind, axes=axes, keepdims=int(keep))
        return [Facts(x.elem, shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        out = outputs[0].shape
        if len(out) == len(x):
            return [kept_unit_axes(x, out)]
        return [dropped_axes(x, out)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ReduceOp

        x = operands[0]
        assert x is not None
        axes_in = ints_of(node, operand_facts(operands), 1, "axes", INDEX_TYPES)
        rank = len(axes_type(x).axes)
        axes = self.reduced_axes(node, axes_in, rank)
        kind = REDUCE_KINDS[node.op_type]
        if not axes and kind in PASS_THROUGH_KINDS:
            return [x]
        keep = int_attr(node, "keepdims", 1, (0, 1))
        return emit_library(ctx, ReduceOp([x], ctx.result_types, node.name, kind=kind, axes=axes, keepdims=keep))


class ArgReduceRule(OpRule):
    """ONNX ArgMax/ArgMin: i64 indices along `axis` (default 0), keepdims, select_last_index (opset 12)."""

    op_types = ("ArgMax", "ArgMin")
    kernels: tuple[str, ...] = ("kernel.arg_reduce",)
    attributes = frozenset({"axis", "keepdims", "select_last_index"})
    elem_types = (*FLOATS, *INTS, "i8", "i16", "ui8")

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "data")
        require_elem(node, x, self.elem_types)
        if x.rank == 0:
            raise node.fail("the input must have rank 1 or more")
        axis = norm_axis(node, int(node.attr("axis", 0)), x.rank)
        keep = bool(int_attr(node, "keepdims", 1, (0, 1)))
        shape = tuple(Poly.const(1) if i == axis else d for i, d in enumerate(x.shape) if keep or i != axis)
        if x.shape[axis] == Poly.const(0):
            raise node.fail(f"axis {axis} has extent 0, which has no {node.op_type[3:].lower()}imum")
        owed.owe(x.shape[axis] - 1, node, f"axis {axis} has an {node.op_type[3:].lower()}imum")
        value = None
        if x.value is not None and not is_symbolic(x):
            value = kernel_arg_reduce(x.value, **self.params(node, x.rank))
        return [Facts(dtypes.by_name("i64"), shape, value)]

    def params(self, node: NodeInfo, rank: int) -> ArgReduceParams:
        return {
            "kind": "max" if node.op_type == "ArgMax" else "min",
            "axis": norm_axis(node, int(node.attr("axis", 0)), rank),
            "keepdims": int_attr(node, "keepdims", 1, (0, 1)),
            "select_last_index": int_attr(node, "select_last_index", 0, (0, 1)),
        }

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        axis = norm_axis(node, int(node.attr("axis", 0)), len(x))
        if bool(int_attr(node, "keepdims", 1, (0, 1))):
            if x[axis].extent == Poly.const(1):
                return [x]
            others = [a.name for i, a in enumerate(x) if i != axis]
            return [tuple(unit_axis(others) if i == axis else a for i, a in enumerate(x))]
        return [tuple(a for i, a in enumerate(x) if i != axis)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ArgReduceOp

        x = operands[0]
        assert x is not None
        params = self.params(node, len(axes_type(x).axes))
        return emit_library(ctx, ArgReduceOp([x], ctx.result_types, node.name, **params))


class TopKRule(OpRule):
    """ONNX TopK: `k` (attribute before opset 10, an input from 10) along `axis` (default -1).

    `largest` and `sorted` arrived at opset 11 (before: the largest, sorted).  Ties go to the lower
    index, as onnxruntime breaks them; the results are always sorted.  A k only the run gives makes
    the results' extent along `axis` a length only it knows (the kernel reads k; a k outside
    [0, extent] is the module's DataError).
    """

    op_types = ("TopK",)
    kernels: tuple[str, ...] = ("kernel.topk",)
    attributes = frozenset({"axis", "k", "largest", "sorted"})
    elem_types = (*FLOATS, *INTS, "i8", "i16", "ui8", "ui16", "ui32", "ui64")
    limitations = "a k from symbolic extents (a Shape) is refused; results are always sorted"

    def k_of(self, node: NodeInfo, given: list[int] | None) -> int:
        if node.since < 10:
            k = node.attr("k")
            if k is None:
                raise node.fail("has no k attribute")
            return int(k)
        if given is None or len(given) != 1:
            raise node.fail("k must be a tensor of one integer")
        return given[0]

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1 if node.since < 10 else 2)
        x = given(node, inputs, 0, "data")
        require_elem(node, x, self.elem_types)
        if x.rank == 0:
            raise node.fail("the input must have rank 1 or more")
        axis = norm_axis(node, int(node.attr("axis", -1)), x.rank)
        extent = x.shape[axis]
        k_input = inputs[1] if node.since >= 10 else None
        if k_input is not None and k_input.value is None:  # the run gives k: a length only it knows
            if k_input.elem.name not in INDEX_TYPES or k_input.static_shape() != (1,):
                raise node.fail(
                    f"k must be a tensor of one integer (i64[1]), not {k_input.elem.name}{list(k_input.shape)}"
                )
            shape = tuple(node.result_length(0, axis) if i == axis else d for i, d in enumerate(x.shape))
            return [Facts(x.elem, shape), Facts(dtypes.by_name("i64"), shape)]
        k = self.k_of(node, known_ints(node, k_input, "k", INDEX_TYPES) if node.since >= 10 else None)
        if k < 0 or (extent.is_const and k > extent.const_value):
            raise node.fail(f"k = {k} is not in [0, {extent}], the extent of axis {axis}")
        owed.owe(extent - k, node, f"k = {k} of the extent of axis {axis}")
        shape = tuple(Poly.const(k) if i == axis else d for i, d in enumerate(x.shape))
        values = indices = None
        if x.value is not None and not is_symbolic(x):
            values, indices = kernel_topk(x.value, **self.params(node, k, x.rank))
        return [Facts(x.elem, shape, values), Facts(dtypes.by_name("i64"), shape, indices)]

    def params(self, node: NodeInfo, k: int | None, rank: int) -> TopKParams:
        """The kernel's parameters; without `k` (None) the kernel reads it from its second operand."""
        axis = norm_axis(node, int(node.attr("axis", -1)), rank)
        largest, ordered = int_attr(node, "largest", 1, (0, 1)), int_attr(node, "sorted", 1, (0, 1))
        if k is None:
            return {"axis": axis, "largest": largest, "sorted": ordered}
        return {"k": k, "axis": axis, "largest": largest, "sorted": ordered}

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        axis = norm_axis(node, int(node.attr("axis", -1)), len(x))
        # k of n elements is a new axis (the layout names it) unless it keeps them all.
        kept = x[axis] if outputs[0].shape[axis] == x[axis].extent else None
        named = tuple(kept if i == axis else a for i, a in enumerate(x))
        return [named, named]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import TopKOp

        x = operands[0]
        assert x is not None
        rank = len(axes_type(x).axes)
        axis = norm_axis(node, int(node.attr("axis", -1)), rank)
        k = ctx.result_types[0].shape[axis]
        if not k.is_const:  # k only the run gives: the kernel reads it
            count = operands[1]
            assert count is not None
            return emit_library(ctx, TopKOp([x, count], ctx.result_types, node.name, **self.params(node, None, rank)))
        return emit_library(ctx, TopKOp([x], ctx.result_types, node.name, **self.params(node, k.const_value, rank)))


class CumSumRule(KeepsAxes):
    """ONNX CumSum (and CumProd, opset 26): running sums (products) along the axis input (known at
    build time), exclusive and/or reverse."""

    op_types = ("CumSum", "CumProd")
    kernels: tuple[str, ...] = ("kernel.cumsum", "kernel.cumprod")
    attributes = frozenset({"exclusive", "reverse"})
    first_opset = 11
    elem_types = (*FLOATS, *INTS)
    limitations = "the axis input must be known at build time"

    def params(self, node: NodeInfo, axis: list[int] | None, rank: int) -> dict[str, int]:
        if axis is None or len(axis) != 1:
            raise node.fail("the axis input must hold one integer")
        return {
            "axis": norm_axis(node, axis[0], rank),
            "exclusive": int_attr(node, "exclusive", 0, (0, 1)),
            "reverse": int_attr(node, "reverse", 0, (0, 1)),
        }

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2)
        x = given(node, inputs, 0, "data")
        require_elem(node, x, self.elem_types)
        if x.rank == 0:
            raise node.fail("the input must have rank 1 or more")
        params = self.params(node, known_ints(node, inputs[1], "axis", INDEX_TYPES), x.rank)
        kernel = kernel_cumprod if node.op_type == "CumProd" else kernel_cumsum
        value = kernel(x.value, **params) if x.value is not None and not is_symbolic(x) else None
        return [Facts(x.elem, x.shape, value)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import CumProdOp, CumSumOp

        x = operands[0]
        assert x is not None
        params = self.params(
            node, ints_of(node, operand_facts(operands), 1, "axis", INDEX_TYPES), len(axes_type(x).axes)
        )
        kernel_op = CumProdOp if node.op_type == "CumProd" else CumSumOp
        return emit_library(ctx, kernel_op([x], ctx.result_types, node.name, **params))


SOFTMAX_KINDS: dict[str, str] = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "Hardmax": "hardmax"}


class SoftmaxRule(KeepsAxes):
    """ONNX Softmax/LogSoftmax/Hardmax.

    From opset 13 they normalise along `axis` (default -1).  Before, the input is read as a 2-D
    matrix [prod(dims before axis), prod(dims from axis on)] (default axis 1) and normalised along
    its rows: that is the joint block of every axis from `axis` on, which is what Loam computes.
    """

    op_types = tuple(SOFTMAX_KINDS)
    kernels: tuple[str, ...] = ("kernel.softmax",)
    attributes = frozenset({"axis"})
    elem_types = FLOATS

    def normalised_axes(self, node: NodeInfo, rank: int) -> tuple[int, ...]:
        if node.since >= 13:
            return (norm_axis(node, int(node.attr("axis", -1)), rank),)
        # Opsets 1-11 accept axis = rank (an empty trailing block): each element is its own row.
        axis = int(node.attr("axis", 1))
        if not -rank <= axis <= rank:
            raise node.fail(f"axis {axis} is out of range for rank {rank}")
        axis = axis + rank if axis < 0 else axis
        return tuple(range(axis, rank))

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "data")
        require_elem(node, x, self.elem_types)
        if x.rank == 0 and node.since >= 13:
            raise node.fail("the input must have rank 1 or more")
        axes = self.normalised_axes(node, x.rank)
        value = kernel_softmax(x.value, kind=SOFTMAX_KINDS[node.op_type], axes=axes) if x.value is not None else None
        return [Facts(x.elem, x.shape, value)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import SoftmaxOp

        x = operands[0]
        assert x is not None
        axes = self.normalised_axes(node, len(axes_type(x).axes))
        kind = SOFTMAX_KINDS[node.op_type]
        return emit_library(ctx, SoftmaxOp([x], ctx.result_types, node.name, kind=kind, axes=axes))


RULES: tuple[OpRule, ...] = (ReduceRule(), ArgReduceRule(), TopKRule(), CumSumRule(), SoftmaxRule())
