"""The one-input math functions and activations (Exp, Sin, Floor, IsNaN, Not, Relu, Gelu, ...) and PRelu.

Each is an `ExprRule` (`loam.ops.elementwise`): a `UnaryRule` whose builder writes the node's Expr
from its attributes, or PRelu, a binary rule whose slope broadcasts one way and, before opset 7,
per channel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from loam.core.poly import Poly
from loam.dialects.expr import Expr
from loam.ops.arithmetic import BinaryRule
from loam.ops.base import Facts, NodeInfo, OpRule, broadcast_axes, float_attr, int_attr
from loam.ops.elementwise import INTS, NUMERIC, SIGNED, UINTS, Elems, ExprRule, operand, typed_const
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.lowering import compute_elem

if TYPE_CHECKING:
    from loam.dialects.tensor_axes import Axis


# -- unary operators ---------------------------------------------------------------------------

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
        return self.builder(node, operand(0), compute_elem(elem))


def _step(op: str) -> Builder:
    return lambda node, x, elem: x.unary(op)


def _leaky_relu(node: NodeInfo, x: Expr, elem: str) -> Expr:
    alpha = float_attr(node, "alpha", 0.01)
    scaled = x * Expr.const(alpha, elem)
    if 0.0 < alpha <= 1.0:
        # max(x, alpha * x) is the same number for every x (NaN, infinities and signed zeros included)
        # where 0 < alpha <= 1, in one pass instead of a comparison and a select (a tenth of the time).
        return x.binary("max", scaled)
    return Expr.select(x.binary("less", Expr.const(0.0, elem)), scaled, x)


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


# -- PRelu -----------------------------------------------------------------------------------------


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
        x, slope = operand(0), operand(1)
        return Expr.select(x.binary("less", typed_const(0.0, elems[0])), x * slope, x)


RULES: tuple[OpRule, ...] = (*_unary_rules(), PReluRule())
