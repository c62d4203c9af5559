"""What every elementwise rule shares: one `Expr` per node, folded over numbers and polynomials.

Each elementwise node is one `Expr` over its inputs (`kernel.zip`), built once by the rule's `build`:
stage 0 folds known values by evaluating that Expr with the numpy functions the generated module
calls (`loam.dialects.expr.evaluate`), and the lowering emits it, so an operator's numeric meaning
is written once.  Halves are widened to f32 for the arithmetic and narrowed at the end of the Expr
(`typed_expr`), as onnxruntime rounds them once per node.  The operators are in
`loam.ops.arithmetic` (broadcasting arithmetic, comparisons, logic, Max/Min/Sum/Mean, Clip, Where),
`loam.ops.activations` (the one-input math functions and activations, PRelu) and `loam.ops.cast`
(Cast, CastLike); `consumed_inputs` of opset 1, an optimisation hint with no meaning for inference,
is read and ignored by each.

Integer values the build knows only as polynomials of the symbols (a Shape of a symbolic tensor, and
what shape arithmetic makes of it) fold through the integer operators as the run computes them:
the ring operators exactly, Div/Mod/Max/Min/Abs and the comparisons through `loam.core.derived`'s
constructors, which decide the operation from bounds or name it as a derived symbol (`truncdiv(N,
2)`, `eq(N, 1)`), and an i32 result through `wrap32`.  A comparison's bool is the polynomial 0 or 1.
Float arithmetic over such a value is not folded: the kernel computes it from the symbols at run
time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import derived, dtypes
from loam.core.poly import Poly
from loam.dialects.expr import Expr, evaluate
from loam.ops.base import (
    Facts,
    LowerContext,
    NodeInfo,
    OpRule,
    broadcast_axes,
    broadcast_shapes,
    int_attr,
    require_arity,
)
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.lowering import axes_type, compute_elem, emit_zip, require_elem_types, typed_expr
from loam.ops.operands import is_symbolic, polys_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

INTS = ("i8", "i16", "i32", "i64")
UINTS = ("ui8", "ui16", "ui32", "ui64")
NUMERIC = FLOATS + INTS + UINTS
SIGNED = FLOATS + INTS
ALL = (*NUMERIC, "bool")

Elems = Sequence[str | None]
"""The element types of a node's inputs, None where an optional input is absent."""


def operand(i: int = 0) -> Expr:
    """The node's `i`-th present input in a rule's Expr."""
    return Expr.operand(i)


def typed_const(value: float, elem: str | None) -> Expr:
    """A constant in the type arithmetic on `elem` runs in."""
    assert elem is not None
    return Expr.const(value, compute_elem(elem))


class ExprRule(OpRule):
    """A node computed by one Expr over its present inputs, broadcast numpy-style.

    Subclasses give the input count (`low`, `high`), the element types (`elem_types`, checked on
    every input unless `checked_inputs` narrows it), the result's element type and `build`.
    """

    kernels: tuple[str, ...] = ("kernel.zip",)

    low: int = 1
    high: int = 1
    # Which inputs must have one element type (None: all present inputs).
    same_type_inputs: tuple[int, ...] | None = None
    checked_inputs: tuple[int, ...] | None = None

    def zip_types(self) -> tuple[str, ...]:
        """The element types the kernel's operands may have (those `check` allows)."""
        return self.elem_types

    def result_elem(self, node: NodeInfo, elems: Elems) -> str:
        first = elems[0]
        assert first is not None
        return first

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        """The Expr over the present inputs (`operand i` is the i-th present input)."""
        raise NotImplementedError

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts | None]:
        require_arity(node, inputs, self.low, self.high)
        if inputs[0] is None:
            raise node.fail("the first input is absent")
        if self.low > 1 and any(f is None for f in inputs[: self.low]):
            raise node.fail("a required input is absent")
        checked = range(len(inputs)) if self.checked_inputs is None else self.checked_inputs
        require_elem_types(
            node, [f.elem.name for i, f in enumerate(inputs) if i in checked and f is not None], self.elem_types
        )
        same = range(len(inputs)) if self.same_type_inputs is None else self.same_type_inputs
        kinds = list(dict.fromkeys(f.elem.name for i, f in enumerate(inputs) if i in same and f is not None))
        if len(kinds) > 1:
            raise node.fail(f"operands have element types {' and '.join(kinds)}; ONNX needs one")
        return list(inputs)

    def shape(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, ...]:
        return broadcast_shapes(node, [f.shape for f in inputs if f is not None])

    def operand_values(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[np.ndarray]:
        return [np.asarray(f.value) for f in inputs if f is not None]

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        inputs = self.check(node, inputs)
        elems: list[str | None] = [f.elem.name if f is not None else None for f in inputs]
        result = self.result_elem(node, elems)
        shape = self.shape(node, inputs)
        value = None
        present = [f for f in inputs if f is not None]
        if all(f.value is not None for f in present) and any(is_symbolic(f) for f in present):
            value = self.fold_symbolic(node, inputs, result, shape)
        elif all(f.value is not None for f in present):
            expr = typed_expr(self.build(node, elems), [e for e in elems if e is not None], result)
            folded = evaluate(expr, self.operand_values(node, inputs))
            dims = tuple(d.const_value for d in shape)
            dtype = dtypes.by_name(result).numpy
            assert dtype is not None
            # astype copies into a fresh contiguous array of exactly `dims` (np.ascontiguousarray would
            # give a rank-0 result rank 1).
            value = np.broadcast_to(folded, dims).astype(dtype)
        return [Facts(dtypes.by_name(result), shape, value)]

    def symbolic(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> Symbolic | None:
        """The operator on integers known as polynomials, one element at a time; None: not folded."""
        make = SYMBOLIC.get(node.op_type)
        return None if make is None else make(node)

    def fold_symbolic(
        self, node: NodeInfo, inputs: Sequence[Facts | None], result: str, shape: tuple[Poly, ...]
    ) -> np.ndarray | None:
        """The value over operands some of which hold polynomials, broadcast as numpy broadcasts;
        None where the result is no integer (float arithmetic is the run's) or the operator has no
        symbolic meaning here."""
        if result not in SYMBOLIC_TYPES:
            return None
        step = self.symbolic(node, inputs)
        if step is None:
            return None
        stretched = np.broadcast_arrays(*[polys_of(v) for v in self.operand_values(node, inputs)])
        out = np.empty(stretched[0].shape, dtype=object)
        for index in np.ndindex(out.shape):
            v = step(*[a[index] for a in stretched])
            if v is None:
                return None
            # An int32 result wraps as the run's int32 arithmetic does (only where it may leave int32).
            out[index] = derived.wrap32(v) if result == "i32" else v
        return out.reshape(tuple(d.const_value for d in shape))

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        return [broadcast_axes(node, [a for a in inputs if a is not None])]

    def operands(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue | None]:
        """The kernel operands (a rule restating an old opset may regroup one first)."""
        return list(operands)

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        values = self.operands(ctx, node, operands)
        elems: list[str | None] = [axes_type(v).elem.name if v is not None else None for v in values]
        present = [v for v in values if v is not None]
        expr = self.build(node, elems)
        if expr == operand(0) and len(present) == 1 and present[0].type == ctx.result_types[0]:
            return [present[0]]  # a one-input Sum/Max/Min is its input
        return [emit_zip(ctx, node, present, expr, self.zip_types())]


# -- symbolic values ---------------------------------------------------------------------------------

Symbolic = Callable[..., Poly | None]
"""An operator on polynomials (the operands' elements), giving the result's element (None: the run's)."""

# The result types a symbolic value may have (stage 0 carries i64 and i32 values; a bool is 0 or 1).
SYMBOLIC_TYPES = ("i64", "i32", "bool")


def truth(a: Poly) -> Poly:
    """1 where `a` is nonzero, else 0 (a Cast to bool)."""
    return 1 - derived.equal(a, 0)


def _power(node: NodeInfo) -> Symbolic | None:
    def power(base: Poly, exponent: Poly) -> Poly | None:
        if not exponent.is_const or exponent.const_value < 0:
            return None  # the run computes it
        result = Poly.const(1)
        for _ in range(exponent.const_value):
            result = result * base
        return result

    return power


def _variadic(step: Callable[[Poly, Poly], Poly]) -> Callable[[NodeInfo], Symbolic]:
    def fold(*values: Poly) -> Poly:
        result = values[0]
        for v in values[1:]:
            result = step(result, v)
        return result

    return lambda node: fold


# ONNX op type -> the operator over one element of each operand, for a node whose result is an integer
# (or bool) and some operand holds polynomials.  Booleans are the polynomials 0 and 1; each entry gives
# 0 or 1 for them (And as select(a, b, 0), not a * b, so the result's bounds stay [0, 1]).
SYMBOLIC: dict[str, Callable[[NodeInfo], Symbolic | None]] = {
    "Add": lambda node: lambda a, b: a + b,
    "Sub": lambda node: lambda a, b: a - b,
    "Mul": lambda node: lambda a, b: a * b,
    "Div": lambda node: derived.truncdiv,
    "Mod": lambda node: lambda a, b: derived.modulo(a, b, fmod=bool(int_attr(node, "fmod", 0, (0, 1)))),
    "Pow": _power,
    "Neg": lambda node: lambda a: -a,
    "Abs": lambda node: lambda a: derived.maximum(a, -a),
    "Sign": lambda node: lambda a: derived.less(0, a) - derived.less(a, 0),
    "Relu": lambda node: lambda a: derived.maximum(a, 0),
    "Max": _variadic(derived.maximum),
    "Min": _variadic(derived.minimum),
    "Equal": lambda node: derived.equal,
    "Less": lambda node: derived.less,
    "Greater": lambda node: lambda a, b: derived.less(b, a),
    "LessOrEqual": lambda node: lambda a, b: 1 - derived.less(b, a),
    "GreaterOrEqual": lambda node: lambda a, b: 1 - derived.less(a, b),
    "Not": lambda node: lambda a: 1 - a,
    "And": lambda node: lambda a, b: derived.select(a, b, 0),
    "Or": lambda node: lambda a, b: derived.select(a, 1, b),
    "Xor": lambda node: lambda a, b: derived.select(a, 1 - b, b),
    "Where": lambda node: derived.select,
}
