"""Reading a node's operands: known values, static extents, axes; emitting a library kernel.

Every operator family reads its operands the same way: an input it requires, the integers an
operand the build must know holds (a Reshape target, reduced axes, Pad widths, ...), extents as
numbers (symbolic extents are a later issue), an axis attribute in [-rank, rank).  `lower`
reads the same operands again from the kernel graph (`operand_facts`) and recomputes a kernel's
parameters with the code `infer` used.  One version of each lives here, so a rule and its
refusals read alike in every family.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from loam.core import dtypes, owed
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo

if TYPE_CHECKING:
    from xdsl.ir import Operation, SSAValue

    from loam.dialects.kernel import ConstantOp
    from loam.dialects.tensor_axes import Axis

T = TypeVar("T")

# The element types an operand holding integers (a shape, axes, pads) may have.
INTEGER_TYPES: tuple[str, ...] = ("i64", "i32", "i16", "i8", "ui8", "ui16", "ui32", "ui64")
# Indices, axes and counts where ONNX allows only these.
INDEX_TYPES: tuple[str, ...] = ("i32", "i64")


def given(node: NodeInfo, inputs: Sequence[Facts | None], index: int, what: str) -> Facts:
    """Input `index`, which the operator requires."""
    f = optional(inputs, index)
    if f is None:
        raise node.fail(f"the {what} input is absent")
    return f


def optional(inputs: Sequence[Facts | None], index: int) -> Facts | None:
    """Input `index`, None when absent or beyond the inputs given."""
    return inputs[index] if index < len(inputs) else None


def known_ints(node: NodeInfo, f: Facts | None, what: str, types: Sequence[str] = INTEGER_TYPES) -> list[int]:
    """The integers input `what` holds, which the build must know (a shape, axes, k, pads, ...)."""
    if f is None:
        raise node.fail(f"the {what} input is absent")
    if f.elem.name not in types:
        needs = "integers" if tuple(types) == INTEGER_TYPES else " or ".join(types)
        raise node.fail(f"the {what} input has element type {f.elem.name}; ONNX needs {needs}")
    if f.value is None:
        raise node.unsupported(
            f"the {what} input must be known at build time (a Constant, an integer initializer, a Shape or "
            "a value the build folds from them); this one is computed from a run-time value: where a graph input "
            "gives it, give its value with --value NAME=V or [values]"
        )
    if is_symbolic(f):
        values = ", ".join(str(v) for v in np.asarray(f.value).reshape(-1).tolist())
        raise node.unsupported(f"the {what} input depends on symbolic extents ([{values}]); it must be numbers here")
    return [int(v) for v in np.asarray(f.value).reshape(-1)]


def known_extents(node: NodeInfo, f: Facts | None, what: str, types: Sequence[str] = INTEGER_TYPES) -> list[Poly]:
    """The integers input `what` holds as polynomials: numbers, or what a Shape of a symbolic tensor
    gave (a Reshape target, Slice bounds, a Range's limit, ...); the build must know them."""
    if is_symbolic(f):
        assert f is not None
        if f.elem.name not in types:
            raise node.fail(f"the {what} input has element type {f.elem.name}; ONNX needs integers")
        return [Poly.lift(v if isinstance(v, Poly) else int(v)) for v in np.asarray(f.value).reshape(-1).tolist()]
    return [Poly.const(v) for v in known_ints(node, f, what, types)]


def from_run(f: Facts | None) -> bool:
    """Whether `f` is an operand only the run gives: no value at build time, not even as polynomials.
    An extent operand (a Reshape shape, Slice bounds, Pad widths, ...) may be one: the extents it
    decides are then lengths only the run knows (`NodeInfo.result_length`)."""
    return f is not None and f.value is None


def run_time_length(node: NodeInfo, f: Facts, what: str, types: Sequence[str] = INTEGER_TYPES) -> int:
    """How many integers the 1-D operand `what`, which only the run gives, holds: that count (a rank,
    a count of axes or parts) the build must know."""
    if f.elem.name not in types:
        raise node.fail(f"the {what} input has element type {f.elem.name}; ONNX needs integers")
    if f.rank != 1 or not f.shape[0].is_const:
        raise node.unsupported(
            f"the {what} input is computed at run time, and its extents [{', '.join(map(str, f.shape))}] must be "
            "one number known at build time (how many entries it holds)"
        )
    return f.shape[0].const_value


def polys_of(value: object) -> np.ndarray:
    """`value` (numbers or polynomials) as an object array of `Poly`, for arithmetic over extents."""
    arr = np.asarray(value)
    flat = [v if isinstance(v, Poly) else Poly.const(int(v)) for v in arr.reshape(-1).tolist()]
    return np.array(flat, dtype=object).reshape(arr.shape)


def is_symbolic(f: Facts | None) -> bool:
    """Whether `f`'s value is known as polynomials rather than numbers (a Shape of a symbolic tensor)."""
    return f is not None and f.value is not None and np.asarray(f.value).dtype == object


def is_symbolic_array(value: object) -> bool:
    """Whether `value` holds polynomials (an object array) rather than numbers."""
    return np.asarray(value).dtype == object


def require_indices(node: NodeInfo, f: Facts) -> None:
    """Indices of a gather or scatter are i32 or i64, as ONNX asks."""
    if f.elem.name not in INDEX_TYPES:
        raise node.fail(f"the indices have element type {f.elem.name}; ONNX needs i32 or i64")


def require_within(node: NodeInfo, indices: np.ndarray | None, extent: Poly) -> None:
    """Known indices must lie in [-extent, extent): the build says so rather than numpy at run time.

    Over a symbolic extent, or with indices known only as polynomials, the inputs owe it."""
    if indices is None or indices.size == 0:
        return
    if not extent.is_const or is_symbolic_array(indices):
        for index in polys_of(indices).reshape(-1).tolist():
            owed.owe(index + extent, node, f"index {index} lies within the extent {extent}")
            owed.owe(extent - 1 - index, node, f"index {index} lies within the extent {extent}")
        return
    n = extent.const_value
    low, high = int(indices.min()), int(indices.max())
    if low < -n or high >= n:
        raise node.fail(f"index {low if low < -n else high} is outside [{-n}, {n - 1}]")


def ints_of(
    node: NodeInfo, inputs: Sequence[Facts | None], index: int, what: str, types: Sequence[str] = INTEGER_TYPES
) -> list[int] | None:
    """Optional integer input `index` (None when absent), which the build must know when given."""
    f = optional(inputs, index)
    return None if f is None else known_ints(node, f, what, types)


def static_extents(node: NodeInfo, f: Facts, what: str = "the data") -> tuple[int, ...]:
    """`f`'s extents as integers; a symbolic extent stops the build (symbolic extents come later)."""
    shape = f.static_shape()
    if shape is None:
        raise node.unsupported(
            f"{what} has symbolic extents [{', '.join(map(str, f.shape))}]; {node.op_type} needs them as numbers "
            "at build time, so fix them with the `dims` option"
        )
    return shape


def norm_axis(node: NodeInfo, axis: int, rank: int, what: str = "axis") -> int:
    """`axis` in [-rank, rank) as a non-negative index; anything else stops the build."""
    if not -rank <= axis < rank:
        raise node.fail(f"{what} {axis} is out of range for rank {rank} (it must lie in [{-rank}, {rank - 1}])")
    return axis + rank if axis < 0 else axis


def norm_axes(node: NodeInfo, axes: Sequence[int], rank: int, what: str = "axes") -> list[int]:
    """Each of `axes` as by `norm_axis`; naming one axis twice stops the build."""
    out = [norm_axis(node, a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise node.fail(f"{what} {list(axes)} name an axis twice")
    return out


def require_elem(node: NodeInfo, f: Facts, allowed: Sequence[str], what: str = "the input") -> None:
    """Stop the build when `f` has an element type the rule does not compute."""
    if f.elem.name not in allowed:
        raise node.unsupported(
            f"{what} has element type {f.elem.name}; Loam computes this operator in {', '.join(allowed)}"
        )


def required_inputs(node: NodeInfo, inputs: Sequence[Facts | None], names: Sequence[str]) -> list[Facts]:
    """The inputs named in `names`, each required."""
    found: list[Facts] = []
    for f, name in zip(inputs, names, strict=False):
        if f is None:
            raise node.fail(f"input {name} is absent")
        found.append(f)
    if len(found) < len(names):
        raise node.fail(f"takes inputs {', '.join(names)}, got {len(inputs)}")
    return found


def require_elem_like(node: NodeInfo, x: Facts, others: Sequence[Facts], names: Sequence[str]) -> None:
    """Stop the build when one of `others` (named by `names`) has another element type than X, where
    ONNX would allow it and Loam computes one type."""
    for f, name in zip(others, names, strict=True):
        if f.elem != x.elem:
            raise node.unsupported(
                f"{name} has element type {f.elem.name} and X {x.elem.name}; Loam needs one element type"
            )


def require_same_elem(node: NodeInfo, facts: Sequence[Facts]) -> None:
    """All of `facts` share one element type, as ONNX's type constraint asks."""
    elem = facts[0].elem
    for f in facts[1:]:
        if f.elem != elem:
            raise node.fail(f"operands have element types {elem.name} and {f.elem.name}; ONNX needs one")


def keep_unchanged(inp: tuple[Axis, ...], out: Facts) -> tuple[Axis | None, ...]:
    """Each input axis whose extent the operator left alone; a resized axis is new (None)."""
    return tuple(a if a.extent == e else None for a, e in zip(inp, out.shape, strict=True))


def facts(elem: dtypes.ElementType, dims: Sequence[int], value: np.ndarray | None = None) -> Facts:
    """Facts of a value with the static extents `dims`."""
    return Facts(elem, tuple(Poly.const(int(d)) for d in dims), value)


def fold_if_known(inputs: Sequence[Facts | None], compute: Callable[..., T]) -> T | None:
    """The value `compute(*values)` when every present input is known, else None (stage 0 folding)."""
    present = [f for f in inputs if f is not None]
    if not all(f.value is not None for f in present):
        return None
    return compute(*[np.asarray(f.value) for f in present])


# ---------------------------------------------------------------------------------------------
# Operands read again at lowering
# ---------------------------------------------------------------------------------------------


def operand_facts(operands: Sequence[SSAValue | None]) -> list[Facts | None]:
    """What `lower` knows of its operands: extents, and the value of a folded constant.

    Lowering recomputes a kernel's parameters from these with the same code `infer` used.
    """
    from loam.dialects.graph import TensorDataAttr
    from loam.dialects.kernel import ConstantOp, WeightOp
    from loam.ops.lowering import axes_type

    out: list[Facts | None] = []
    for v in operands:
        if v is None:
            out.append(None)
            continue
        t = axes_type(v)
        value = None
        if isinstance(v.owner, ConstantOp):
            value = constant_value(v.owner)
        elif isinstance(v.owner, WeightOp) and v.owner.data is not None and t.elem.name in INTEGER_TYPES:
            # An integer initializer: stage 0 read it as known (weights are the float ones, never read).
            data = v.owner.data
            assert isinstance(data, TensorDataAttr)  # the data a weight carries is a #graph.data value
            value = np.asarray(data.to_numpy())
        out.append(Facts(t.elem, tuple(a.extent for a in t.axes), value))
    return out


def constant_value(op: ConstantOp) -> np.ndarray:
    """A `kernel.constant`'s value: numbers, or an object array of `Poly` for symbolic values."""
    from xdsl.dialects.builtin import ArrayAttr

    from loam.dialects.graph import TensorDataAttr
    from loam.ops.lowering import axes_type

    value = op.value
    if isinstance(value, ArrayAttr):
        shape = [a.extent.const_value for a in axes_type(op.results[0]).axes]
        return np.array([e.data for e in value.data], dtype=object).reshape(shape)
    assert isinstance(value, TensorDataAttr)  # a constant holds extents (an array) or a #graph.data value
    return np.asarray(value.to_numpy())


def lowered_extents(value: SSAValue) -> tuple[int, ...]:
    """The static extents of a lowered operand."""
    from loam.ops.lowering import axes_type

    return tuple(d.const_value for d in axes_type(value).shape)


def present_bits(optional_operands: Sequence[object | None]) -> int:
    """Bit i set where optional operand i is given: a library kernel is passed only the operands
    present, and this parameter says which they are."""
    return sum(1 << i for i, v in enumerate(optional_operands) if v is not None)


def emit_library(ctx: LowerContext, op: Operation) -> list[SSAValue]:
    """Emit `op` (a library kernel, or any op) and return all its results."""
    ctx.emit(op)
    return list(op.results)
