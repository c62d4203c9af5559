"""com.microsoft's GELU family: Gelu, BiasGelu, FastGelu, QuickGelu; one `kernel.zip` each.

onnxruntime's CPU kernels compute, with the bias (where the operator takes one) added first:

    Gelu(x)             0.5 x (1 + erf(x / sqrt 2))
    BiasGelu(x, b)      Gelu(x + b)
    FastGelu(x[, b])    0.5 y (1 + tanh(sqrt(2 / pi) (y + 0.044715 y^3))),  y = x + b
    QuickGelu(x)        x sigmoid(alpha x),  alpha = 1.702 unless given

The bias broadcasts as ONNX broadcasts (onnxruntime wants it 1-D over the last axis; a broadcast
shape that differs stops the build at the owed check, as for Add).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from loam.dialects.expr import Expr
from loam.ops.base import NodeInfo, OpRule, float_attr
from loam.ops.elementwise import Elems, ExprRule
from loam.ops.lowering import FLOAT_TYPES, compute_elem
from loam.ops.microsoft.domain import DOMAIN

GeluForm = Callable[[NodeInfo, Expr, str], Expr]


def _erf_gelu(node: NodeInfo, y: Expr, elem: str) -> Expr:
    inner = (y * Expr.const(1 / math.sqrt(2.0), elem)).unary("erf")
    return Expr.const(0.5, elem) * y * (Expr.const(1.0, elem) + inner)


def _tanh_gelu(node: NodeInfo, y: Expr, elem: str) -> Expr:
    cube = y * y * y
    inner = ((y + Expr.const(0.044715, elem) * cube) * Expr.const(math.sqrt(2 / math.pi), elem)).unary("tanh")
    return Expr.const(0.5, elem) * y * (Expr.const(1.0, elem) + inner)


def _quick_gelu(node: NodeInfo, y: Expr, elem: str) -> Expr:
    return y * (y * Expr.const(float_attr(node, "alpha", 1.702), elem)).unary("sigmoid")


class GeluRule(ExprRule):
    """A GELU of `x` (plus the bias, the second input, where there is one)."""

    domain = DOMAIN
    elem_types = FLOAT_TYPES

    def __init__(self, op_type: str, form: GeluForm, *, bias: str, attributes: frozenset[str] = frozenset()) -> None:
        self.op_types = (op_type,)
        self.form = form
        self.low, self.high = (2, 2) if bias == "required" else (1, 2) if bias == "optional" else (1, 1)
        self.attributes = attributes

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        elem = elems[0]
        assert elem is not None
        y = Expr.operand(0) if len([e for e in elems if e is not None]) == 1 else Expr.operand(0) + Expr.operand(1)
        return self.form(node, y, compute_elem(elem))


RULES: tuple[OpRule, ...] = (
    GeluRule("Gelu", _erf_gelu, bias="none"),
    GeluRule("BiasGelu", _erf_gelu, bias="required"),
    GeluRule("FastGelu", _tanh_gelu, bias="optional"),
    GeluRule("QuickGelu", _quick_gelu, bias="none", attributes=frozenset({"alpha"})),
)
