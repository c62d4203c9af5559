"""The StableHLO elementwise ops' rules: one ONNX node each, or a few where ONNX has no counterpart.

    add/subtract/multiply/divide/maximum/minimum/power   Add/Sub/Mul/Div/Max/Min/Pow
    and/or/not                                           And/Or/Not (booleans)
    negate/abs/exponential/log/tanh/logistic/sqrt        Neg/Abs/Exp/Log/Tanh/Sigmoid/Sqrt
    rsqrt                                                Reciprocal(Sqrt)
    exponential_minus_one, log_plus_one                  composed from Exp/Log, exact near 0 (Kahan)
    is_finite, clamp, xor                                Not(IsInf or IsNaN), Min(Max), BitwiseXor/Xor
    sine/cosine/tan/sign/floor/ceil/round_nearest_even   Sin/Cos/Tan/Sign/Floor/Ceil/Round
    chlo.erf/sinh/cosh/asin/acos/atan, chlo.square       Erf/Sinh/Cosh/Asin/Acos/Atan, Mul(x, x)
    remainder                                            Mod (fmod = 1)
    cbrt, atan2                                          composed from Sign/Abs/Pow, Atan/Where (floats)
    maximum(x, 0)                                        Relu (a zero constant on either side)
    compare EQ/NE/LT/LE/GT/GE                            Equal/Not(Equal)/Less/LessOrEqual/Greater/GreaterOrEqual
    select, convert                                      Where, Cast

Their operands are read as they are held (`loam.frontends.stablehlo_broadcast`): ONNX broadcasts.
The rules register themselves in `loam.frontends.stablehlo_rules.RULES` when this module is imported.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from xdsl.ir import Operation, SSAValue

from loam.core.dtypes import ElementType
from loam.dialects import stablehlo as hlo
from loam.frontends.stablehlo_broadcast import elementwise_result
from loam.frontends.stablehlo_builder import GraphBuilder, LoweringError, Operand, int_attr
from loam.frontends.stablehlo_rules import result_of, rule

_ELEMENTWISE: dict[type[Operation], str] = {
    hlo.AddOp: "Add",
    hlo.SubtractOp: "Sub",
    hlo.MultiplyOp: "Mul",
    hlo.DivideOp: "Div",
    hlo.MaximumOp: "Max",
    hlo.MinimumOp: "Min",
    hlo.PowerOp: "Pow",
    hlo.AndOp: "And",
    hlo.OrOp: "Or",
    hlo.NegateOp: "Neg",
    hlo.AbsOp: "Abs",
    hlo.ExponentialOp: "Exp",
    hlo.LogOp: "Log",
    hlo.TanhOp: "Tanh",
    hlo.LogisticOp: "Sigmoid",
    hlo.SqrtOp: "Sqrt",
    hlo.SineOp: "Sin",
    hlo.CosineOp: "Cos",
    hlo.TanOp: "Tan",
    hlo.SignOp: "Sign",
    hlo.FloorOp: "Floor",
    hlo.CeilOp: "Ceil",
    hlo.RoundNearestEvenOp: "Round",  # ONNX rounds halves to even
    hlo.ErfOp: "Erf",
    hlo.SinhOp: "Sinh",
    hlo.CoshOp: "Cosh",
    hlo.AsinOp: "Asin",
    hlo.AcosOp: "Acos",
    hlo.AtanOp: "Atan",
    hlo.NotOp: "Not",
    hlo.SelectOp: "Where",
}
_BOOLEAN_ONLY = {"And", "Or", "Not"}


def _is_zero(x: Operand) -> bool:
    """A float 0 broadcast from one element (a splat constant)."""
    return x.known is not None and x.elem.is_float and x.held_shape == () and not np.any(x.known)


@rule(*_ELEMENTWISE)
def _elementwise(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = result_of(op)
    op_type = _ELEMENTWISE[type(op)]
    if op_type in _BOOLEAN_ONLY and elem.name != "bool":
        raise LoweringError(f"{op.name} of {elem.name} (bitwise) has no ONNX counterpart Loam compiles")
    if op_type == "Max" and (_is_zero(xs[0]) or _is_zero(xs[1])):
        x = xs[1] if _is_zero(xs[0]) else xs[0]  # max(x, 0) is what ONNX calls Relu
        return [elementwise_result(b.node("Relu", [x.value]), [x], shape, elem)]
    return [elementwise_result(b.node(op_type, [x.value for x in xs]), xs, shape, elem)]


@rule(hlo.RsqrtOp)
def _rsqrt(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = result_of(op)
    root = b.node("Sqrt", [xs[0].value], what="sqrt")
    return [elementwise_result(b.node("Reciprocal", [root]), xs, shape, elem)]


@rule(hlo.SquareOp)
def _square(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = result_of(op)
    return [elementwise_result(b.node("Mul", [xs[0].value, xs[0].value]), xs, shape, elem)]


@rule(hlo.RemainderOp)
def _remainder(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = result_of(op)  # the dividend's sign, as C's fmod (for integers too)
    return [elementwise_result(b.node("Mod", [x.value for x in xs], {"fmod": int_attr(1)}), xs, shape, elem)]


def _float_only(op: Operation, elem: ElementType) -> None:
    if not elem.is_float:
        raise LoweringError(f"{op.name} of {elem.name} is not supported (floats only)")


@rule(hlo.CbrtOp)
def _cbrt(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """cbrt(x) = sign(x) * |x|^(1/3): ONNX has no cube root (NaN and the infinities come out right)."""
    shape, elem = result_of(op)
    _float_only(op, elem)
    x = xs[0].value
    third = b.constant(np.array(1 / 3), elem, "third")
    root = b.node("Pow", [b.node("Abs", [x], what="abs"), third], what="root")
    return [elementwise_result(b.node("Mul", [b.node("Sign", [x], what="sign"), root]), xs, shape, elem)]


def _sign_bit(b: GraphBuilder, x: SSAValue, zero: SSAValue, one: SSAValue, what: str) -> SSAValue:
    """x < 0, or x is -0 (1 / -0 is -inf): the sign bit, without a bit cast (ONNX 17 has none)."""
    is_zero = b.node("Equal", [x, zero], what=f"{what}_is_zero")
    signed = b.node("Where", [is_zero, b.node("Div", [one, x], what=f"{what}_inverse"), x], what=f"{what}_signed")
    return b.node("Less", [signed, zero], what=f"{what}_negative")


@rule(hlo.Atan2Op)
def _atan2(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """atan2(y, x) from Atan: r = atan(min(|y|, |x|) / max(|y|, |x|)) in [0, pi/4] (0 where both are 0,
    pi/4 where both are infinite), then pi/2 - r where |y| > |x|, pi - r where x's sign bit is set,
    and -r where y's is: every quadrant, the axes and the signed zeros as C's atan2 (and JAX) give
    them: atan2(+-0, +0) = +-0, atan2(+-0, -0) = +-pi.  A NaN operand gives NaN."""
    shape, elem = result_of(op)
    _float_only(op, elem)
    y, x = xs[0].value, xs[1].value
    zero, one = b.constant(np.array(0), elem, "zero"), b.constant(np.array(1), elem, "one")
    ay, ax = b.node("Abs", [y], what="abs_y"), b.node("Abs", [x], what="abs_x")
    low, high = b.node("Min", [ay, ax], what="low"), b.node("Max", [ay, ax], what="high")
    ratio = b.node("Div", [low, high], what="ratio")
    ratio = b.node("Where", [b.node("Equal", [high, zero], what="both_zero"), zero, ratio], what="ratio_zero")
    ratio = b.node("Where", [b.node("IsInf", [low], what="both_inf"), one, ratio], what="ratio_inf")
    r = b.node("Atan", [ratio], what="base")
    half_pi, pi = b.constant(np.array(np.pi / 2), elem, "half_pi"), b.constant(np.array(np.pi), elem, "pi")
    steep = b.node("Greater", [ay, ax], what="steep")
    r = b.node("Where", [steep, b.node("Sub", [half_pi, r], what="from_half_pi"), r], what="octant")
    r = b.node("Where", [_sign_bit(b, x, zero, one, "x"), b.node("Sub", [pi, r], what="from_pi"), r], what="half")
    r = b.node("Where", [_sign_bit(b, y, zero, one, "y"), b.node("Neg", [r], what="negated"), r], what="signed")
    nan = b.node("Or", [b.node("IsNaN", [y], what="y_nan"), b.node("IsNaN", [x], what="x_nan")], what="nan")
    value = b.node("Where", [nan, b.node("Add", [y, x], what="nan_value"), r])
    return [elementwise_result(value, xs, shape, elem)]


@rule(hlo.ExponentialMinusOneOp)
def _expm1(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """e^x - 1 without the cancellation near 0 (Kahan): with u = e^x, x where u is 1, -1 where u - 1 is
    -1, u where u is infinite, else (u - 1) * x / log(u).  A NaN comes out NaN."""
    shape, elem = result_of(op)
    _float_only(op, elem)
    x = xs[0].value
    one = b.constant(np.array(1), elem, "one")
    u = b.node("Exp", [x], what="exp")
    less = b.node("Sub", [u, one], what="less")
    r = b.node("Div", [b.node("Mul", [less, x], what="scaled"), b.node("Log", [u], what="log")], what="ratio")
    r = b.node("Where", [b.node("Equal", [u, one], what="tiny"), x, r], what="near_zero")
    minus_one = b.constant(np.array(-1), elem, "minus_one")
    r = b.node("Where", [b.node("Equal", [less, minus_one], what="floor"), minus_one, r], what="low")
    value = b.node("Where", [b.node("IsInf", [u], what="huge"), u, r])
    return [elementwise_result(value, xs, shape, elem)]


@rule(hlo.LogPlusOneOp)
def _log1p(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """log(1 + x) without the rounding of 1 + x near 0 (Kahan): with u = 1 + x, x where u - 1 is 0,
    u where u is infinite, else log(u) * x / (u - 1).  -1 gives -inf, below -1 and NaN give NaN."""
    shape, elem = result_of(op)
    _float_only(op, elem)
    x = xs[0].value
    one = b.constant(np.array(1), elem, "one")
    zero = b.constant(np.array(0), elem, "zero")
    u = b.node("Add", [x, one], what="shifted")
    step = b.node("Sub", [u, one], what="step")
    r = b.node("Mul", [b.node("Log", [u], what="log"), b.node("Div", [x, step], what="ratio")], what="scaled")
    r = b.node("Where", [b.node("Equal", [step, zero], what="tiny"), x, r], what="near_zero")
    value = b.node("Where", [b.node("IsInf", [u], what="huge"), u, r])
    return [elementwise_result(value, xs, shape, elem)]


@rule(hlo.IsFiniteOp)
def _is_finite(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = result_of(op)
    _float_only(op, xs[0].elem)
    x = xs[0].value
    bad = b.node("Or", [b.node("IsInf", [x], what="inf"), b.node("IsNaN", [x], what="nan")], what="bad")
    return [elementwise_result(b.node("Not", [bad]), xs, shape, elem)]


@rule(hlo.ClampOp)
def _clamp(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """min(max(x, lo), hi): Max and Min broadcast a scalar bound (a NaN anywhere gives NaN, as XLA's)."""
    shape, elem = result_of(op)
    lo, x, hi = xs
    low = b.node("Max", [x.value, lo.value], what="low")
    return [elementwise_result(b.node("Min", [low, hi.value]), xs, shape, elem)]


@rule(hlo.XorOp)
def _xor(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = result_of(op)
    kind = "Xor" if elem.name == "bool" else "BitwiseXor"
    return [elementwise_result(b.node(kind, [x.value for x in xs]), xs, shape, elem)]


_COMPARISONS = {"EQ": "Equal", "LT": "Less", "LE": "LessOrEqual", "GT": "Greater", "GE": "GreaterOrEqual"}


@rule(hlo.CompareOp)
def _compare(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.CompareOp)
    shape, elem = result_of(op)
    kind = op.compare_type.text if op.compare_type is not None else None
    if kind == "TOTALORDER":
        raise LoweringError("a TOTALORDER comparison (NaNs ordered) has no ONNX counterpart")
    if kind == "UNSIGNED" and not xs[0].elem.name.startswith("ui"):
        raise LoweringError(f"an UNSIGNED comparison of {xs[0].elem.name} has no ONNX counterpart")
    direction = op.comparison_direction.text
    if direction == "NE":
        equal = b.node("Equal", [x.value for x in xs], what="equal")
        return [elementwise_result(b.node("Not", [equal]), xs, shape, elem)]
    return [elementwise_result(b.node(_COMPARISONS[direction], [x.value for x in xs]), xs, shape, elem)]


@rule(hlo.ConvertOp)
def _convert(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = result_of(op)
    x = xs[0]
    if elem == x.elem:
        return [x]
    cast = b.node("Cast", [x.value], {"to": int_attr(elem.onnx)})
    known = None if x.known is None else x.known.astype(elem.numpy)
    return [replace(elementwise_result(cast, xs, shape, elem), known=known)]
