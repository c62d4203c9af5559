"""What every grad clause is written with: the `Backward` it emits into, and the small pieces several
clauses build (a permuted value, zeros, an extent as a scalar, a sum kept at extent 1, a forward op
that also returns what its backward reads, a kernel parameter read as the kind it is).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.ir import Operation, SSAValue

from loam.core.errors import UnsupportedError
from loam.core.poly import Poly
from loam.dialects.expr import Expr
from loam.dialects.graph import TensorDataAttr
from loam.dialects.kernel import ConstantOp, EinsumOp, PermuteOp, ReduceOp, SliceOp, ZipOp
from loam.dialects.kernel.library import LibraryOp, Param
from loam.dialects.shape_poly import ExtentAttr
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.elementwise import FLOATS


class Backward(Protocol):
    """What a clause emits into (`loam.grad.reverse.Reverse`)."""

    needed: set[SSAValue]
    adjoint: dict[SSAValue, SSAValue]

    def emit(self, op: Operation) -> SSAValue: ...

    def send(self, value: SSAValue, grad: SSAValue) -> None: ...

    def zip(self, inputs: Sequence[SSAValue], expr: Expr, result: AxesTensorType, node: str) -> SSAValue: ...

    def unbroadcast(self, grad: SSAValue, target: AxesTensorType, node: str) -> SSAValue: ...

    def run(self) -> None: ...

    def in_forward(self, op: Operation) -> Callable[[Operation], object] | None: ...

    def stand_for(self, op: Operation, values: Sequence[SSAValue]) -> None: ...

    def nested(
        self, sources: Sequence[SSAValue], ops: Sequence[Operation], emit: Callable[[Operation], object]
    ) -> Backward:
        """A walk of its own over `ops` (a clause's unrolled or re-run forward), emitting with `emit`."""
        ...


Clause = Callable[[Backward, Operation, SSAValue, str], None]


def type_of(value: SSAValue) -> AxesTensorType:
    t = value.type
    assert isinstance(t, AxesTensorType)
    return t


def is_float(value: SSAValue) -> bool:
    return isinstance(value.type, AxesTensorType) and value.type.elem.name in FLOATS


def node_of(op: Operation) -> str:
    node = op.properties.get("node")
    return node.data if isinstance(node, StringAttr) else op.name


def listed(names: Sequence[str]) -> str:
    """Names for a message: the first eight, then "..."."""
    return (", ".join(names[:8]) + (", ..." if len(names) > 8 else "")) or "none"


def refuse(op: Operation, why: str = "no grad clause for this kernel yet") -> UnsupportedError:
    return UnsupportedError(f"{op.name} '{node_of(op)}': {why} (a gradient asked for passes through it)")


def static_extents(op: Operation, t: AxesTensorType, first: int = 0) -> tuple[int, ...]:
    """`t`'s extents from axis `first` on, which the clause needs known at build time (the batch axis,
    before `first`, may be a symbol)."""
    if not all(e.is_const for e in t.shape[first:]):
        raise refuse(op, f"its grad clause needs static extents, and it has [{', '.join(map(str, t.shape))}]")
    return (*(0 for _ in t.shape[:first]), *(e.const_value for e in t.shape[first:]))


def static_extent(op: Operation, t: AxesTensorType, axis: int) -> int:
    """`t`'s extent along `axis`, which the clause needs known at build time."""
    if not t.shape[axis].is_const:
        raise refuse(
            op, f"its grad clause needs the extent of axis {axis} known at build time, and it is {t.shape[axis]}"
        )
    return t.shape[axis].const_value


# A library kernel's parameters as its clause reads them (`LibraryOp.params`), each of the kind its op's PARAMS
# declares and the verifier holds it to; a clause reads numbers, so an extent only the run knows is a TypeError.


def param_int(params: Mapping[str, Param], key: str, default: int | None = None) -> int:
    """The int parameter `key` (`default` where it is absent, if given)."""
    value = params[key] if default is None else params.get(key, default)
    if not isinstance(value, int):
        raise TypeError(f"parameter '{key}' is {value!r}, not a number")
    return value


def param_float(params: Mapping[str, Param], key: str, default: float | None = None) -> float:
    """The float parameter `key` (an int counts), as a float (`default` where it is absent, if given)."""
    value = params[key] if default is None else params.get(key, default)
    if not isinstance(value, int | float):
        raise TypeError(f"parameter '{key}' is {value!r}, not a number")
    return float(value)


def param_str(params: Mapping[str, Param], key: str) -> str:
    """The str parameter `key`."""
    value = params[key]
    if not isinstance(value, str):
        raise TypeError(f"parameter '{key}' is {value!r}, not a word")
    return value


def param_ints(params: Mapping[str, Param], key: str) -> tuple[int, ...]:
    """The tuple parameter `key`, every item a number."""
    value = params[key]
    if isinstance(value, tuple):
        items = tuple(v for v in value if isinstance(v, int))
        if len(items) == len(value):
            return items
    raise TypeError(f"parameter '{key}' is {value!r}, not a list of numbers")


def param_floats(params: Mapping[str, Param], key: str, default: tuple[float, ...] | None = None) -> tuple[float, ...]:
    """The tuple parameter `key`, every item a number (ints as they are), `default` where it is absent if given."""
    value = params[key] if default is None else params.get(key, default)
    if isinstance(value, tuple):
        items = tuple(v for v in value if isinstance(v, int | float))
        if len(items) == len(value):
            return items
    raise TypeError(f"parameter '{key}' is {value!r}, not a list of numbers")


def permuted(b: Backward, value: SSAValue, perm: Sequence[int], node: str) -> SSAValue:
    """`value` with its axes permuted by `perm` (`kernel.permute`)."""
    t = type_of(value)
    return b.emit(PermuteOp(value, perm, AxesTensorType(t.elem, [t.axes[p] for p in perm]), f"{node}.grad"))


def extent_scalar(b: Backward, extent: Poly, elem: str, node: str) -> SSAValue:
    """A scalar of `elem` holding `extent`: a constant, or a value the run computes from its extents."""
    return b.emit(ConstantOp(ArrayAttr([ExtentAttr(extent)]), AxesTensorType(elem, []), f"{node}.grad"))


def zeros_like(b: Backward, like: SSAValue, node: str) -> SSAValue:
    """Zeros of `like`'s type (a zip of a constant over it: `like`'s values never read)."""
    t = type_of(like)
    return b.emit(ZipOp([like], Expr.const(0.0, t.elem.name), t, f"{node}.grad"))


def kept_type(t: AxesTensorType, axes: Sequence[int]) -> AxesTensorType:
    """`t` with each of `axes` kept at extent 1 (a reduction's keepdims result)."""
    return AxesTensorType(t.elem, [Axis.named("Unit", 1) if a in axes else ax for a, ax in enumerate(t.axes)])


def sum_kept(b: Backward, value: SSAValue, axes: Sequence[int], node: str) -> SSAValue:
    """`value` summed over `axes`, kept at extent 1."""
    return b.emit(
        ReduceOp([value], [kept_type(type_of(value), axes)], f"{node}.grad", kind="sum", axes=tuple(axes), keepdims=1)
    )


def with_more_results(
    b: Backward, op: LibraryOp, results: Sequence[AxesTensorType], node: str, **params: Param
) -> LibraryOp:
    """`op` with `params` changed so that it also returns what its backward reads (`results`, its own first):
    put in the forward's place, so nothing is computed twice, or, where the forward is not the walk's to
    change (`Backward.in_forward`), run again in the backward."""
    forward = b.in_forward(op)
    again = type(op)(list(op.inputs), list(results), node if forward else f"{node}.grad", **{**op.params, **params})
    if forward is None:
        b.emit(again)
        return again
    forward(again)
    b.stand_for(op, again.results[: len(op.results)])
    return again


def cut(b: Backward, value: SSAValue, t: AxesTensorType, starts: Sequence[Poly | int], node: str) -> SSAValue:
    """The part of `value` of type `t` that begins at `starts` (`kernel.slice`, unit steps)."""
    bounds = tuple(Poly.lift(s) for s in starts)
    return b.emit(SliceOp([value], [t], f"{node}.grad", starts=bounds, counts=tuple(t.shape), steps=(1,) * t.rank))


def known(value: SSAValue) -> np.ndarray | None:
    """The numbers a build-time constant holds; None where the run gives them (or computes them from extents)."""
    owner = value.owner
    if isinstance(owner, ConstantOp) and isinstance(owner.value, TensorDataAttr):
        return np.asarray(owner.value.to_numpy())
    return None


def constant(b: Backward, values: np.ndarray, t: AxesTensorType, node: str) -> SSAValue:
    """A build-time tensor of type `t` holding `values` (converted to `t`'s element type)."""
    return b.emit(
        ConstantOp(TensorDataAttr.from_numpy(np.asarray(values).astype(t.elem.numpy), t.elem), t, f"{node}.grad")
    )


def through_matrix(b: Backward, value: SSAValue, axis: int, matrix: np.ndarray, to: Axis, node: str) -> SSAValue:
    """`value` with its axis `axis` (extent m) mapped to `to` (extent n) by a build-time [m, n] matrix: the sum
    over o of value[..., o, ...] * matrix[o, n] (an einsum), the adjoint of a forward that reads element
    (..., o, ...) from (..., n, ...) wherever matrix[o, n] is 1."""
    t = type_of(value)
    letters = string.ascii_letters[: t.rank + 1]
    term, moved = letters[: t.rank], letters[:axis] + letters[t.rank] + letters[axis + 1 : t.rank]
    table = constant(b, matrix, AxesTensorType(t.elem, [t.axes[axis], to]), node)
    result = AxesTensorType(t.elem, [*t.axes[:axis], to, *t.axes[axis + 1 :]])
    return b.emit(
        EinsumOp([value, table], [result], f"{node}.grad", equation=f"{term},{term[axis]}{letters[t.rank]}->{moved}")
    )
