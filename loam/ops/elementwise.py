"""Elementwise operators: ONNX's broadcasting arithmetic, comparisons, logic and activations.

Each node is one `Expr` over its inputs (`kernel.zip`), built once by the rule's `build`: stage 0
folds known values by evaluating that Expr with the numpy functions the generated module calls
(`loam.dialects.expr.evaluate`), and the lowering emits it, so an operator's
numeric meaning is written once.  Halves are widened to f32 for the arithmetic and narrowed at
the end of the Expr (`typed_expr`), as onnxruntime rounds them once per node.

Older opsets are restated: the `broadcast`/`axis` attributes of the binary operators before opset
7 (the second operand aligned at `axis`, then broadcast as today), `consumed_inputs` of opset 1
(an optimisation hint with no meaning for inference), Clip's `min`/`max` attributes before opset
11, the equal shapes Max/Min/Sum/Mean required before opset 8, and Cast's `to` as a type name in
opset 1.  Cast and CastLike lower to `kernel.cast`.

Integer values the build knows only as polynomials of the symbols (a Shape of a symbolic tensor, and
what shape arithmetic makes of it) fold through the integer operators as the run computes them:
the ring operators exactly, Div/Mod/Max/Min/Abs and the comparisons through `loam.core.derived`'s
constructors, which decide the operation from bounds or name it as a derived symbol (`truncdiv(N,
2)`, `eq(N, 1)`), and an i32 result through `wrap32`.  A comparison's bool is the polynomial 0 or 1.
Float arithmetic over such a value is not folded: the kernel computes it from the symbols at run
time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

from loam.core import derived, dtypes
from loam.core.poly import Poly
from loam.dialects.expr import Expr, evaluate
from loam.dialects.kernel.narrow import ROUND_MODES
from loam.ops.base import (
    Facts,
    KeepsAxes,
    LowerContext,
    NodeInfo,
    OpRule,
    broadcast_axes,
    broadcast_shapes,
    elem_of,
    float_attr,
    int_attr,
    require_arity,
    same_axis,
)
from loam.ops.lowering import (
    COMPUTE_TYPES,
    NARROW_TYPES,
    axes_type,
    compute_elem,
    emit_zip,
    require_elem_types,
    typed_expr,
)
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.operands import emit_library, is_symbolic, polys_of
from loam.runtime.kernels.narrow import kernel_cast_narrow

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


def _x(i: int = 0) -> Expr:
    return Expr.operand(i)


def _c(value: float, elem: str | None) -> Expr:
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
        if expr == _x(0) and len(present) == 1 and present[0].type == ctx.result_types[0]:
            return [present[0]]  # a one-input Sum/Max/Min is its input
        return [emit_zip(ctx, node, present, expr, self.zip_types())]


# -- binary operators ----------------------------------------------------------------------------


class BinaryRule(ExprRule):
    """A two-input operator: one step over the operands (`add`, `less`, ...).

    Before opset 7 (for the operators that had them) `broadcast=1` aligns B with A starting at
    `axis` (by default B's axes are A's last ones); B is regrouped with unit axes after it so that
    numpy broadcasting then means the same.  Without `broadcast`, the shapes must be equal.
    """

    low = high = 2

    def __init__(
        self,
        op_type: str,
        step: str,
        elem_types: tuple[str, ...],
        *,
        boolean: bool = False,
        legacy: bool = True,
        attributes: frozenset[str] = frozenset(),
        first_opset: int = 1,
        limitations: str = "",
    ) -> None:
        self.op_types = (op_type,)
        self.step = step
        self.elem_types = elem_types
        self.boolean = boolean
        self.legacy = legacy
        legacy_attrs = {"broadcast", "axis", "consumed_inputs"} if legacy else set()
        self.attributes = frozenset(attributes | legacy_attrs)
        self.first_opset = first_opset
        self.limitations = limitations

    def result_elem(self, node: NodeInfo, elems: Elems) -> str:
        return "bool" if self.boolean else super().result_elem(node, elems)

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        return _x(0).binary(self.step, _x(1))

    # -- the old `broadcast`/`axis` attributes ----------------------------------------------------

    def _old_alignment(self, node: NodeInfo, a: tuple[Poly, ...], b: tuple[Poly, ...]) -> int | None:
        """Where B starts in A under the pre-7 rules, or None when the opset broadcasts as numpy does."""
        if not self.legacy or node.since >= 7:
            return None
        if not int_attr(node, "broadcast", 0):
            if a != b:
                raise node.fail(
                    f"opset {node.since} without broadcast=1 needs equal shapes, got "
                    f"[{', '.join(map(str, a))}] and [{', '.join(map(str, b))}]"
                )
            return len(a) - len(b)
        axis = len(a) - len(b) if node.attr("axis") is None else int_attr(node, "axis", 0)
        axis += len(a) if axis < 0 else 0
        if not 0 <= axis <= len(a) - len(b):
            raise node.fail(f"axis {node.attr('axis')} cannot align B of rank {len(b)} with A of rank {len(a)}")
        one = Poly.const(1)
        for j, extent in enumerate(b):
            if extent != a[axis + j] and extent != one:
                raise node.fail(f"B axis {j} has extent {extent}, A axis {axis + j} has {a[axis + j]}")
        return axis

    def shape(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, ...]:
        a, b = inputs[0], inputs[1]
        assert a is not None and b is not None
        if self._old_alignment(node, a.shape, b.shape) is not None:
            return a.shape
        return super().shape(node, inputs)

    def operand_values(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[np.ndarray]:
        a, b = super().operand_values(node, inputs)
        axis = self._old_alignment(node, tuple(Poly.const(d) for d in a.shape), tuple(Poly.const(d) for d in b.shape))
        if axis is not None:
            b = b.reshape(b.shape + (1,) * (a.ndim - axis - b.ndim))
        return [a, b]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        a, b = inputs[0], inputs[1]
        assert a is not None and b is not None
        axis = self._old_alignment(node, tuple(x.extent for x in a), tuple(x.extent for x in b))
        if axis is None:
            return super().axes(node, inputs, outputs)
        for j, axis_b in enumerate(b):
            if axis_b.extent != Poly.const(1):
                same_axis(node, a[axis + j], axis_b, f"B axis {j} aligned at A axis {axis + j}")
        return [a]

    def operands(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue | None]:
        from loam.dialects.kernel import RegroupOp
        from loam.dialects.tensor_axes import AxesTensorType, Axis

        a, b = operands[0], operands[1]
        assert a is not None and b is not None
        ta, tb = axes_type(a), axes_type(b)
        axis = self._old_alignment(node, ta.shape, tb.shape)
        if axis is None or axis + tb.rank == ta.rank:
            return [a, b]
        # B's axes then unit axes up to A's rank; each unit axis takes the name of the A axis it meets.
        units = [Axis(x.name, Poly.const(1), x.parts) for x in ta.axes[axis + tb.rank :]]
        op = RegroupOp(b, AxesTensorType(tb.elem, [*tb.axes, *units]), node.name)
        ctx.emit(op)
        return [a, op.result]


class ModRule(BinaryRule):
    """ONNX Mod: `fmod=0` takes the divisor's sign (Python's `%`), `fmod=1` the dividend's (C fmod).

    Before opset 28 ONNX left fmod=0 undefined for floats; Loam gives it opset 28's meaning.
    """

    def __init__(self) -> None:
        super().__init__("Mod", "mod", NUMERIC, legacy=False, attributes=frozenset({"fmod"}), first_opset=10)

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        return _x(0).binary("fmod" if int_attr(node, "fmod", 0, (0, 1)) else "mod", _x(1))


class PowRule(BinaryRule):
    """ONNX Pow: the exponent may have another numeric type; the result has the base's."""

    same_type_inputs = (0,)

    def __init__(self) -> None:
        super().__init__("Pow", "pow", ("i32", "i64", *FLOATS), limitations="exponent of any numeric type")
        self.exponent_types = NUMERIC

    def zip_types(self) -> tuple[str, ...]:
        return self.exponent_types

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts | None]:
        require_arity(node, inputs, 2)
        base, exponent = inputs
        if base is None or exponent is None:
            raise node.fail("an input is absent")
        require_elem_types(node, [base.elem.name], self.elem_types)
        require_elem_types(node, [exponent.elem.name], self.exponent_types)
        return list(inputs)


class BitShiftRule(BinaryRule):
    """ONNX BitShift, `direction` LEFT or RIGHT (signed types, from opset 28, shift arithmetically)."""

    def __init__(self) -> None:
        super().__init__(
            "BitShift", "shl", UINTS + INTS, legacy=False, attributes=frozenset({"direction"}), first_opset=11
        )

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        direction = node.attr("direction", None)
        if direction not in ("LEFT", "RIGHT"):
            raise node.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
        return _x(0).binary("shl" if direction == "LEFT" else "shr", _x(1))

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts | None]:
        checked = super().check(node, inputs)
        self.build(node, [])
        return checked


# -- variadic operators --------------------------------------------------------------------------


class VariadicRule(ExprRule):
    """Max, Min, Sum, Mean over 1 or more inputs (equal shapes before opset 8, broadcast from 8)."""

    high = 1 << 16

    def __init__(self, op_type: str, step: str, elem_types: tuple[str, ...], mean: bool = False) -> None:
        self.op_types = (op_type,)
        self.step = step
        self.elem_types = elem_types
        self.mean = mean
        self.attributes = frozenset({"consumed_inputs"})

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts | None]:
        checked = super().check(node, inputs)
        absent = [i for i, f in enumerate(checked) if f is None]
        if absent:
            raise node.fail(f"input {absent[0]} is absent; every input of {node.op_type} is required")
        return checked

    def shape(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, ...]:
        shapes = {f.shape for f in inputs if f is not None}
        if node.since < 8 and len(shapes) > 1:
            raise node.fail(f"opset {node.since} needs inputs of one shape (broadcasting came in opset 8)")
        return super().shape(node, inputs)

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        expr = _x(0)
        for i in range(1, len(elems)):
            expr = expr.binary(self.step, _x(i))
        if self.mean and len(elems) > 1:
            expr = expr.binary("div", _c(len(elems), elems[0]))
        return expr


# -- unary operators -----------------------------------------------------------------------------

Builder = Callable[[NodeInfo, Expr, str], Expr]
"""Builds a unary operator's Expr from the node, its input `x` and the compute element type."""


class UnaryRule(ExprRule):
    """A one-input operator whose Expr `builder` makes from its attributes."""

    def __init__(
        self,
        op_type: str,
        builder: Builder,
        elem_types: tuple[str, ...],
        *,
        attributes: frozenset[str] = frozenset(),
        boolean: bool = False,
        first_opset: int = 1,
        limitations: str = "",
    ) -> None:
        self.op_types = (op_type,)
        self.builder = builder
        self.elem_types = elem_types
        self.attributes = frozenset(attributes | {"consumed_inputs"})
        self.boolean = boolean
        self.first_opset = first_opset
        self.limitations = limitations

    def result_elem(self, node: NodeInfo, elems: Elems) -> str:
        return "bool" if self.boolean else super().result_elem(node, elems)

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        elem = elems[0]
        assert elem is not None
        return self.builder(node, _x(0), compute_elem(elem))


def _step(op: str) -> Builder:
    return lambda node, x, elem: x.unary(op)


def _leaky_relu(node: NodeInfo, x: Expr, elem: str) -> Expr:
    zero = Expr.const(0.0, elem)
    return Expr.select(x.binary("less", zero), x * Expr.const(float_attr(node, "alpha", 0.01), elem), x)


def _thresholded_relu(node: NodeInfo, x: Expr, elem: str) -> Expr:
    alpha = Expr.const(float_attr(node, "alpha", 1.0), elem)
    return Expr.select(x.binary("greater", alpha), x, Expr.const(0.0, elem))


def _shrink(node: NodeInfo, x: Expr, elem: str) -> Expr:
    """x + bias below -lambd, x - bias above lambd, 0 between."""
    lambd, bias = float_attr(node, "lambd", 0.5), Expr.const(float_attr(node, "bias", 0.0), elem)
    low = Expr.select(x.binary("less", Expr.const(-lambd, elem)), x + bias, Expr.const(0.0, elem))
    return Expr.select(x.binary("greater", Expr.const(lambd, elem)), x - bias, low)


def _mish(node: NodeInfo, x: Expr, elem: str) -> Expr:
    """x * tanh(softplus(x)); softplus as the backends compute it, without losing log(1 + e) for small e."""
    return x * x.unary("softplus").unary("tanh")


def _swish(node: NodeInfo, x: Expr, elem: str) -> Expr:
    """x * sigmoid(alpha * x)."""
    return x * (x * Expr.const(float_attr(node, "alpha", 1.0), elem)).unary("sigmoid")


def _elu(node: NodeInfo, x: Expr, elem: str) -> Expr:
    zero, one = Expr.const(0.0, elem), Expr.const(1.0, elem)
    alpha = Expr.const(float_attr(node, "alpha", 1.0), elem)
    return Expr.select(x.binary("less", zero), alpha * (x.unary("exp") - one), x)


def _selu(node: NodeInfo, x: Expr, elem: str) -> Expr:
    alpha = Expr.const(float_attr(node, "alpha", 1.67326319217681884765625), elem)
    gamma = Expr.const(float_attr(node, "gamma", 1.05070102214813232421875), elem)
    zero = Expr.const(0.0, elem)
    one = Expr.const(1.0, elem)
    # alpha * (exp(x) - 1) rather than ONNX's alpha * exp(x) - alpha: the same number, and -inf (not NaN) for
    # an infinite alpha, as onnxruntime gives.
    return Expr.select(x.binary("less_equal", zero), gamma * (alpha * (x.unary("exp") - one)), gamma * x)


def _celu(node: NodeInfo, x: Expr, elem: str) -> Expr:
    alpha = Expr.const(float_attr(node, "alpha", 1.0), elem)
    zero, one = Expr.const(0.0, elem), Expr.const(1.0, elem)
    negative = (alpha * ((x / alpha).unary("exp") - one)).binary("min", zero)
    return x.binary("max", zero) + negative


def _gelu(node: NodeInfo, x: Expr, elem: str) -> Expr:
    approximate = node.attr("approximate", "none")
    half, one = Expr.const(0.5, elem), Expr.const(1.0, elem)
    if approximate == "none":
        inner = (x * Expr.const(1 / math.sqrt(2.0), elem)).unary("erf")
    elif approximate == "tanh":
        cube = x * x * x
        inner = ((x + Expr.const(0.044715, elem) * cube) * Expr.const(math.sqrt(2 / math.pi), elem)).unary("tanh")
    else:
        raise node.fail(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return half * x * (one + inner)


def _hard_sigmoid(node: NodeInfo, x: Expr, elem: str, alpha: float | None = None, beta: float | None = None) -> Expr:
    a = Expr.const(float_attr(node, "alpha", 0.2) if alpha is None else alpha, elem)
    b = Expr.const(float_attr(node, "beta", 0.5) if beta is None else beta, elem)
    return (a * x + b).binary("min", Expr.const(1.0, elem)).binary("max", Expr.const(0.0, elem))


def _hard_swish(node: NodeInfo, x: Expr, elem: str) -> Expr:
    return x * _hard_sigmoid(node, x, elem, 1 / 6, 0.5)


def _is_inf(node: NodeInfo, x: Expr, elem: str) -> Expr:
    positive = int_attr(node, "detect_positive", 1, (0, 1))
    negative = int_attr(node, "detect_negative", 1, (0, 1))
    inf = x.unary("isinf")
    if positive and negative:
        return inf
    if positive:
        return inf.binary("and", x.binary("greater", Expr.const(0.0, elem)))
    if negative:
        return inf.binary("and", x.binary("less", Expr.const(0.0, elem)))
    return inf.binary("and", Expr.const(0.0, "bool"))


# ONNX op type -> (Expr step, element types) for the attribute-free unary operators.
_PLAIN_UNARY: dict[str, tuple[str, tuple[str, ...], int]] = {
    "Relu": ("relu", SIGNED, 1), "Sigmoid": ("sigmoid", FLOATS, 1), "Tanh": ("tanh", FLOATS, 1),
    "Exp": ("exp", FLOATS, 1), "Log": ("log", FLOATS, 1), "Sqrt": ("sqrt", FLOATS, 1),
    "Reciprocal": ("reciprocal", FLOATS, 1), "Neg": ("neg", SIGNED, 1), "Abs": ("abs", NUMERIC, 1),
    "Floor": ("floor", FLOATS, 1), "Ceil": ("ceil", FLOATS, 1), "Round": ("round", FLOATS, 11),
    "Sign": ("sign", NUMERIC, 9), "Erf": ("erf", FLOATS, 9), "Softplus": ("softplus", FLOATS, 1),
    "Softsign": ("softsign", FLOATS, 1), "Sin": ("sin", FLOATS, 7), "Cos": ("cos", FLOATS, 7),
    "Tan": ("tan", FLOATS, 7), "Asin": ("asin", FLOATS, 7), "Acos": ("acos", FLOATS, 7),
    "Atan": ("atan", FLOATS, 7), "Sinh": ("sinh", FLOATS, 9), "Cosh": ("cosh", FLOATS, 9),
    "Asinh": ("asinh", FLOATS, 9), "Acosh": ("acosh", FLOATS, 9), "Atanh": ("atanh", FLOATS, 9),
}  # fmt: skip


def _unary_rules() -> list[OpRule]:
    rules: list[OpRule] = [
        UnaryRule(op, _step(step), types, first_opset=first) for op, (step, types, first) in _PLAIN_UNARY.items()
    ]
    rules += [
        UnaryRule("Not", _step("not"), ("bool",)),
        UnaryRule("BitwiseNot", _step("bitnot"), INTS + UINTS, first_opset=18),
        UnaryRule("IsNaN", _step("isnan"), FLOATS, boolean=True, first_opset=9),
        UnaryRule(
            "IsInf", _is_inf, FLOATS, boolean=True, attributes=frozenset({"detect_positive", "detect_negative"}),
            first_opset=10,
        ),
        UnaryRule("LeakyRelu", _leaky_relu, FLOATS, attributes=frozenset({"alpha"})),
        UnaryRule("ThresholdedRelu", _thresholded_relu, FLOATS, attributes=frozenset({"alpha"}), first_opset=10),
        UnaryRule("Shrink", _shrink, FLOATS, attributes=frozenset({"lambd", "bias"}), first_opset=9),
        UnaryRule("Elu", _elu, FLOATS, attributes=frozenset({"alpha"})),
        UnaryRule("Selu", _selu, FLOATS, attributes=frozenset({"alpha", "gamma"})),
        UnaryRule("Celu", _celu, FLOATS, attributes=frozenset({"alpha"}), first_opset=12),
        UnaryRule("Gelu", _gelu, FLOATS, attributes=frozenset({"approximate"}), first_opset=20),
        UnaryRule("HardSigmoid", _hard_sigmoid, FLOATS, attributes=frozenset({"alpha", "beta"})),
        UnaryRule("HardSwish", _hard_swish, FLOATS, first_opset=14),
        UnaryRule("Mish", _mish, FLOATS, first_opset=18),
        UnaryRule("Swish", _swish, FLOATS, attributes=frozenset({"alpha"}), first_opset=24),
    ]  # fmt: skip
    return rules


# -- operators with several roles per input --------------------------------------------------------


class PReluRule(BinaryRule):
    """ONNX PRelu: `slope * x` where x < 0; the slope broadcasts one way, onto x's shape.

    Before opset 7 a slope is per channel: one value shared by every channel, or a slope whose
    axes are x's from axis 1 on (`[C]` for an NCHW input, as PyTorch's old exporter writes it);
    it is aligned there exactly as the binary operators' old `broadcast`/`axis` attributes align B.
    """

    def __init__(self) -> None:
        super().__init__("PRelu", "prelu", (*FLOATS, "i32", "i64", "ui32", "ui64"), legacy=False)
        self.attributes = frozenset({"consumed_inputs"})

    def _old_alignment(self, node: NodeInfo, a: tuple[Poly, ...], b: tuple[Poly, ...]) -> int | None:
        if node.since >= 7:
            return None
        one = Poly.const(1)
        if all(e == one for e in b) and len(b) <= len(a):
            return len(a) - len(b)
        axis = 1 if len(a) >= 2 else 0
        if axis + len(b) > len(a) or any(e != a[axis + j] and e != one for j, e in enumerate(b)):
            raise node.fail(
                f"opset {node.since} applies the slope per channel (from axis {axis}); slope "
                f"[{', '.join(map(str, b))}] does not fit input [{', '.join(map(str, a))}]"
            )
        return axis

    def shape(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, ...]:
        x = inputs[0]
        assert x is not None
        shape = super().shape(node, inputs)
        if shape != x.shape:
            raise node.fail("the slope must broadcast onto the input's shape (unidirectional broadcasting)")
        return shape

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x, slope = inputs[0], inputs[1]
        assert x is not None and slope is not None
        if self._old_alignment(node, tuple(a.extent for a in x), tuple(a.extent for a in slope)) is not None:
            return super().axes(node, inputs, outputs)
        broadcast_axes(node, [slope], onto=x)
        return [x]

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        x, slope = _x(0), _x(1)
        return Expr.select(x.binary("less", _c(0.0, elems[0])), x * slope, x)


class ClipRule(KeepsAxes, ExprRule):
    """ONNX Clip: min(max(x, lo), hi); `lo`/`hi` are attributes before opset 11, optional inputs after.

    A NaN input stays NaN, and `lo > hi` gives `hi`, as onnxruntime computes it.
    """

    op_types = ("Clip",)
    high = 3
    elem_types = NUMERIC
    attributes = frozenset({"min", "max", "consumed_inputs"})

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts | None]:
        if node.since < 11:
            require_arity(node, inputs, 1)
            x = inputs[0]
            if x is not None:
                # Clip-1/6 are float-only; their f32-valued min/max have no integer meaning.
                require_elem_types(node, [x.elem.name], FLOATS)
            for key in ("min", "max"):
                float_attr(node, key, 0.0)
        else:
            for key in ("min", "max"):
                if node.attr(key, None) is not None:
                    raise node.unsupported(f"attribute '{key}' of opset {node.since} is not supported")
        checked = super().check(node, inputs)
        x = checked[0]
        assert x is not None
        for which, f in zip(("min", "max"), checked[1:], strict=False):
            if f is not None and f.static_shape() not in ((), (1,)):
                raise node.fail(f"{which} must be a scalar, got extents [{', '.join(map(str, f.shape))}]")
        return checked

    def shape(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, ...]:
        x = inputs[0]
        assert x is not None
        return x.shape

    def operand_values(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[np.ndarray]:
        values = super().operand_values(node, inputs)
        return [values[0]] + [v.reshape(()) for v in values[1:]]

    def symbolic(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> Symbolic | None:
        if node.since < 11:
            return None  # Clip-1/6 compute floats only
        lo, hi = (len(inputs) > i and inputs[i] is not None for i in (1, 2))

        def clip(x: Poly, *limits: Poly) -> Poly:
            rest = iter(limits)
            if lo:
                x = derived.maximum(x, next(rest))
            if hi:
                x = derived.minimum(x, next(rest))
            return x

        return clip

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        x = _x(0)
        if node.since < 11:
            limit = float(np.finfo(np.float32).max)
            lo, hi = float_attr(node, "min", -limit), float_attr(node, "max", limit)
            return x.binary("max", _c(lo, elems[0])).binary("min", _c(hi, elems[0]))
        index = 1
        if len(elems) > 1 and elems[1] is not None:
            x = x.binary("max", _x(index))
            index += 1
        if len(elems) > 2 and elems[2] is not None:
            x = x.binary("min", _x(index))
        return x

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import RegroupOp
        from loam.dialects.tensor_axes import AxesTensorType
        from loam.ops.lowering import folded_scalar

        # A [1]-shaped bound would raise the result's rank for a rank-0 input: make it rank 0.
        x = operands[0]
        assert x is not None
        values: list[SSAValue | None] = [x]
        for v in operands[1:]:
            if v is not None and axes_type(v).rank and not axes_type(x).rank and folded_scalar(v) is None:
                op = RegroupOp(v, AxesTensorType(axes_type(v).elem, []), node.name)
                ctx.emit(op)
                v = op.result
            values.append(v)
        return super().lower(ctx, node, values)


class WhereRule(ExprRule):
    """ONNX Where: X where the condition holds, else Y, all three broadcast."""

    op_types = ("Where",)
    low = high = 3
    elem_types = ALL
    same_type_inputs = (1, 2)
    first_opset = 9

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts | None]:
        checked = super().check(node, inputs)
        cond = checked[0]
        assert cond is not None
        if cond.elem.name != "bool":
            raise node.fail(f"the condition must be bool, got {cond.elem.name}")
        return checked

    def result_elem(self, node: NodeInfo, elems: Elems) -> str:
        elem = elems[1]
        assert elem is not None
        return elem

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        return Expr.select(_x(0), _x(1), _x(2))


# -- Cast, CastLike ------------------------------------------------------------------------------


def _cast_target(node: NodeInfo) -> str:
    """Cast's `to` as a Loam element type (opset 1 spells it as a name, `"FLOAT"`)."""
    to = node.attr("to", None)
    if to is None:
        raise node.fail("has no 'to' attribute")
    if isinstance(to, (str, bytes)):
        name = to.decode() if isinstance(to, bytes) else to
        if name.upper() not in TensorProto.DataType.keys():
            raise node.fail(f"'to' names no ONNX element type: {name!r}")
        to = TensorProto.DataType.Value(name.upper())
    if isinstance(to, (bool, np.bool_)) or not isinstance(to, (int, np.integer)):
        raise node.fail(f"'to' must be an element type number or name, got {to!r}")
    return elem_of(node, "to", to).name


class CastRule(KeepsAxes):
    """ONNX Cast and CastLike: the same extents in another element type, as numpy's astype converts.

    Floats to integers truncate toward zero, anything to bool is `!= 0`, f32 to f16/bf16 rounds to
    nearest even.  Into a narrow type (float8, float4, 4- and 2-bit integers) the cast is
    `kernel.cast_narrow`: rounded to nearest even, float8 saturated as `saturate` says, float8e8m0
    rounded by `round_mode`; out of one it widens exactly.  Strings are refused.
    """

    op_types = ("Cast", "CastLike")
    kernels: tuple[str, ...] = ("kernel.cast", "kernel.cast_narrow")
    attributes = frozenset({"to", "saturate", "round_mode"})
    elem_types = ALL
    limitations = "no string type; a value known from symbolic extents folds to i64, i32 or bool, other casts of it run"

    def target(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> str:
        if node.op_type == "CastLike":
            like = inputs[1]
            assert like is not None
            return like.elem.name
        return _cast_target(node)

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2 if node.op_type == "CastLike" else 1)
        if any(f is None for f in inputs):
            raise node.fail("an input is absent")
        x = inputs[0]
        assert x is not None
        int_attr(node, "saturate", 1, (0, 1))  # a flag; another value is a malformed model
        self.round_mode(node)
        target = self.target(node, inputs)
        castable = (*COMPUTE_TYPES, *NARROW_TYPES)
        for which, elem in (("from", x.elem.name), ("to", target)):
            if elem not in castable:
                raise node.unsupported(f"casts {which} element type {elem}; Loam casts {', '.join(castable)}")
        value = None
        if is_symbolic(x):
            value = self.fold_symbolic(x, target)
        elif x.value is not None:
            value = self.cast_value(node, np.asarray(x.value), target)
        return [Facts(dtypes.by_name(target), x.shape, value)]

    @staticmethod
    def round_mode(node: NodeInfo) -> str:
        """`round_mode` (opset 24: how a cast into float8e8m0 rounds), checked."""
        mode = node.attr("round_mode", "up")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode not in ROUND_MODES:
            raise node.fail(f"round_mode must be one of {', '.join(ROUND_MODES)}, got {mode!r}")
        return str(mode)

    def cast_value(self, node: NodeInfo, x: np.ndarray, target: str) -> np.ndarray:
        """`x` cast as the module casts it (stage 0 folds a constant with this)."""
        dtype = dtypes.by_name(target).numpy
        assert dtype is not None
        if target in NARROW_TYPES:
            saturate = int_attr(node, "saturate", 1, (0, 1))
            return kernel_cast_narrow(x, to=dtype.name, saturate=saturate, round_mode=self.round_mode(node))
        with np.errstate(all="ignore"):
            return x.astype(dtype)

    @staticmethod
    def fold_symbolic(x: Facts, target: str) -> np.ndarray | None:
        """An integer value known as polynomials, cast: to i64 unchanged (it holds every such value),
        to i32 wrapped, to bool compared with 0; a cast to a float is computed by the run."""
        convert: Callable[[Poly], Poly] | None = {
            "i64": lambda v: v,
            "i32": derived.wrap32,
            "bool": _truth,
        }.get(target)
        if convert is None:
            return None
        values = polys_of(x.value)
        return np.array([convert(v) for v in values.reshape(-1)], dtype=object).reshape(values.shape)

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import CastNarrowOp, CastOp

        x = operands[0]
        assert x is not None
        result = ctx.result_types[0]
        if x.type == result:
            return [x]
        if result.elem.name in NARROW_TYPES:
            dtype = result.elem.numpy
            assert dtype is not None
            saturate = int_attr(node, "saturate", 1, (0, 1))
            mode = self.round_mode(node)
            return emit_library(
                ctx, CastNarrowOp([x], [result], node.name, to=dtype.name, saturate=saturate, round_mode=mode)
            )
        op = CastOp(x, result, node.name)
        ctx.emit(op)
        return [op.result]


# -- symbolic values ---------------------------------------------------------------------------------

Symbolic = Callable[..., Poly | None]
"""An operator on polynomials (the operands' elements), giving the result's element (None: the run's)."""

# The result types a symbolic value may have (stage 0 carries i64 and i32 values; a bool is 0 or 1).
SYMBOLIC_TYPES = ("i64", "i32", "bool")


def _truth(a: Poly) -> Poly:
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


_LOGIC = ("bool",)

RULES: tuple[OpRule, ...] = (
    BinaryRule("Add", "add", NUMERIC),
    BinaryRule("Sub", "sub", NUMERIC),
    BinaryRule("Mul", "mul", NUMERIC),
    BinaryRule("Div", "div", NUMERIC, limitations="integer division truncates toward zero"),
    PowRule(),
    ModRule(),
    BinaryRule("Equal", "equal", ALL, boolean=True),
    BinaryRule("Less", "less", NUMERIC, boolean=True),
    BinaryRule("Greater", "greater", NUMERIC, boolean=True),
    BinaryRule("LessOrEqual", "less_equal", NUMERIC, boolean=True, legacy=False, first_opset=12),
    BinaryRule("GreaterOrEqual", "greater_equal", NUMERIC, boolean=True, legacy=False, first_opset=12),
    BinaryRule("And", "and", _LOGIC, boolean=True),
    BinaryRule("Or", "or", _LOGIC, boolean=True),
    BinaryRule("Xor", "xor", _LOGIC, boolean=True),
    BinaryRule("BitwiseAnd", "bitand", INTS + UINTS, legacy=False, first_opset=18),
    BinaryRule("BitwiseOr", "bitor", INTS + UINTS, legacy=False, first_opset=18),
    BinaryRule("BitwiseXor", "bitxor", INTS + UINTS, legacy=False, first_opset=18),
    BitShiftRule(),
    VariadicRule("Max", "max", NUMERIC),
    VariadicRule("Min", "min", NUMERIC),
    VariadicRule("Sum", "add", FLOATS),
    VariadicRule("Mean", "add", FLOATS, mean=True),
    *_unary_rules(),
    PReluRule(),
    ClipRule(),
    WhereRule(),
    CastRule(),
)
