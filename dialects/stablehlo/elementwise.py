"""The elementwise StableHLO ops: each result element computed from the operands' elements at the
same place (`add` ... `not`, `convert`, `is_finite`, `clamp`), `select` and `compare`.

Syntax `stablehlo.OP %a, %b : T`, or a function type when the types differ; `select` and `compare`
have their own short forms (`SelectOpType`, `CompareOpType`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import IntegerType, TensorType
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def, prop_def, result_def, var_operand_def
from xdsl.irdl.declarative_assembly_format import TypeDirective, irdl_custom_directive
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from loam.dialects.stablehlo.attributes import ComparisonDirectionAttr, ComparisonTypeAttr
from loam.dialects.stablehlo.base import compatible, ranked
from loam.dialects.stablehlo.syntax import Signature, StableHLOOp


class ElementwiseOp(StableHLOOp):
    """Base of the ops that compute each result element from the operands' elements at that place."""

    ARITY: ClassVar[int]
    args = var_operand_def()
    result = result_def()

    assembly_format = (
        "custom<OperandList>($args) attr-dict `:` custom<SameOperandsAndResultType>(type(operands), type(results))"
    )

    def verify_(self) -> None:
        if len(self.args) != self.ARITY:
            raise VerifyException(f"{self.name} takes {self.ARITY} operands, got {len(self.args)}")
        out = ranked(self.result, f"{self.name} result")
        for i, arg in enumerate(self.args):
            t = ranked(arg, f"{self.name} operand {i}")
            if not compatible(t.get_shape(), out.get_shape()):
                raise VerifyException(f"{self.name} operand {i} has shape {t} but the result is {out}")
            self.check_element(i, t, out)

    def check_element(self, index: int, operand: TensorType[Attribute], result: TensorType[Attribute]) -> None:
        if operand.element_type != result.element_type:
            raise VerifyException(
                f"{self.name} operand {index} has element type {operand.element_type}, the result {result.element_type}"
            )


class UnaryOp(ElementwiseOp):
    ARITY: ClassVar[int] = 1


class BinaryOp(ElementwiseOp):
    ARITY: ClassVar[int] = 2


@irdl_op_definition
class AddOp(BinaryOp):
    """Elementwise sum.  Syntax: `stablehlo.add %a, %b : tensor<4xf32>`"""

    name = "stablehlo.add"


@irdl_op_definition
class SubtractOp(BinaryOp):
    """Elementwise difference.  Syntax: `stablehlo.subtract %a, %b : tensor<4xf32>`"""

    name = "stablehlo.subtract"


@irdl_op_definition
class MultiplyOp(BinaryOp):
    """Elementwise product.  Syntax: `stablehlo.multiply %a, %b : tensor<4xf32>`"""

    name = "stablehlo.multiply"


@irdl_op_definition
class DivideOp(BinaryOp):
    """Elementwise quotient; integers truncate toward zero.  Syntax: `stablehlo.divide %a, %b : tensor<4xf32>`"""

    name = "stablehlo.divide"


@irdl_op_definition
class MaximumOp(BinaryOp):
    """Elementwise maximum.  Syntax: `stablehlo.maximum %a, %b : tensor<4xf32>`"""

    name = "stablehlo.maximum"


@irdl_op_definition
class MinimumOp(BinaryOp):
    """Elementwise minimum.  Syntax: `stablehlo.minimum %a, %b : tensor<4xf32>`"""

    name = "stablehlo.minimum"


@irdl_op_definition
class PowerOp(BinaryOp):
    """Elementwise power.  Syntax: `stablehlo.power %a, %b : tensor<4xf32>`"""

    name = "stablehlo.power"


@irdl_op_definition
class AndOp(BinaryOp):
    """Elementwise and.  Syntax: `stablehlo.and %a, %b : tensor<4xi1>`"""

    name = "stablehlo.and"


@irdl_op_definition
class OrOp(BinaryOp):
    """Elementwise or.  Syntax: `stablehlo.or %a, %b : tensor<4xi1>`"""

    name = "stablehlo.or"


@irdl_op_definition
class NegateOp(UnaryOp):
    """Elementwise negation.  Syntax: `stablehlo.negate %x : tensor<4xf32>`"""

    name = "stablehlo.negate"


@irdl_op_definition
class AbsOp(UnaryOp):
    """Elementwise absolute value.  Syntax: `stablehlo.abs %x : tensor<4xf32>`"""

    name = "stablehlo.abs"


@irdl_op_definition
class ExponentialOp(UnaryOp):
    """Elementwise e^x.  Syntax: `stablehlo.exponential %x : tensor<4xf32>`"""

    name = "stablehlo.exponential"


@irdl_op_definition
class LogOp(UnaryOp):
    """Elementwise natural logarithm.  Syntax: `stablehlo.log %x : tensor<4xf32>`"""

    name = "stablehlo.log"


@irdl_op_definition
class TanhOp(UnaryOp):
    """Elementwise hyperbolic tangent.  Syntax: `stablehlo.tanh %x : tensor<4xf32>`"""

    name = "stablehlo.tanh"


@irdl_op_definition
class LogisticOp(UnaryOp):
    """Elementwise 1 / (1 + e^-x).  Syntax: `stablehlo.logistic %x : tensor<4xf32>`"""

    name = "stablehlo.logistic"


@irdl_op_definition
class SqrtOp(UnaryOp):
    """Elementwise square root.  Syntax: `stablehlo.sqrt %x : tensor<4xf32>`"""

    name = "stablehlo.sqrt"


@irdl_op_definition
class RsqrtOp(UnaryOp):
    """Elementwise 1 / sqrt(x).  Syntax: `stablehlo.rsqrt %x : tensor<4xf32>`"""

    name = "stablehlo.rsqrt"


@irdl_op_definition
class SineOp(UnaryOp):
    """Elementwise sine.  Syntax: `stablehlo.sine %x : tensor<4xf32>`"""

    name = "stablehlo.sine"


@irdl_op_definition
class CosineOp(UnaryOp):
    """Elementwise cosine.  Syntax: `stablehlo.cosine %x : tensor<4xf32>`"""

    name = "stablehlo.cosine"


@irdl_op_definition
class TanOp(UnaryOp):
    """Elementwise tangent.  Syntax: `stablehlo.tan %x : tensor<4xf32>`"""

    name = "stablehlo.tan"


@irdl_op_definition
class CbrtOp(UnaryOp):
    """Elementwise cube root.  Syntax: `stablehlo.cbrt %x : tensor<4xf32>`"""

    name = "stablehlo.cbrt"


@irdl_op_definition
class SignOp(UnaryOp):
    """Elementwise sign: -1, 0 or 1 (NaN stays NaN).  Syntax: `stablehlo.sign %x : tensor<4xf32>`"""

    name = "stablehlo.sign"


@irdl_op_definition
class FloorOp(UnaryOp):
    """Elementwise rounding down.  Syntax: `stablehlo.floor %x : tensor<4xf32>`"""

    name = "stablehlo.floor"


@irdl_op_definition
class CeilOp(UnaryOp):
    """Elementwise rounding up.  Syntax: `stablehlo.ceil %x : tensor<4xf32>`"""

    name = "stablehlo.ceil"


@irdl_op_definition
class RoundNearestEvenOp(UnaryOp):
    """
    Elementwise rounding to the nearest integer, ties to even.

    Syntax: `stablehlo.round_nearest_even %x : tensor<4xf32>`
    """

    name = "stablehlo.round_nearest_even"


@irdl_op_definition
class Atan2Op(BinaryOp):
    """
    Elementwise atan2(a, b): the angle of the point (b, a), in [-pi, pi].

    Syntax: `stablehlo.atan2 %a, %b : tensor<4xf32>`
    """

    name = "stablehlo.atan2"


@irdl_op_definition
class RemainderOp(BinaryOp):
    """
    Elementwise remainder with the dividend's sign (C's fmod).

    Syntax: `stablehlo.remainder %a, %b : tensor<4xf32>`
    """

    name = "stablehlo.remainder"


@irdl_op_definition
class NotOp(UnaryOp):
    """Elementwise not.  Syntax: `stablehlo.not %x : tensor<4xi1>`"""

    name = "stablehlo.not"


@irdl_op_definition
class ExponentialMinusOneOp(UnaryOp):
    """Elementwise e^x - 1, exact near 0.  Syntax: `stablehlo.exponential_minus_one %x : tensor<4xf32>`"""

    name = "stablehlo.exponential_minus_one"


@irdl_op_definition
class LogPlusOneOp(UnaryOp):
    """Elementwise log(1 + x), exact near 0.  Syntax: `stablehlo.log_plus_one %x : tensor<4xf32>`"""

    name = "stablehlo.log_plus_one"


@irdl_op_definition
class XorOp(BinaryOp):
    """Elementwise exclusive or (bitwise on integers).  Syntax: `stablehlo.xor %a, %b : tensor<4xi32>`"""

    name = "stablehlo.xor"


@irdl_op_definition
class IsFiniteOp(UnaryOp):
    """
    Elementwise "neither infinite nor NaN", into i1.

    Syntax: `stablehlo.is_finite %x : (tensor<4xf32>) -> tensor<4xi1>`
    """

    name = "stablehlo.is_finite"

    def check_element(self, index: int, operand: TensorType[Attribute], result: TensorType[Attribute]) -> None:
        if result.element_type != IntegerType(1):
            raise VerifyException(f"stablehlo.is_finite result must be i1, got {result}")


@irdl_op_definition
class ClampOp(ElementwiseOp):
    """
    `min(max(x, lo), hi)`, elementwise; `lo` and `hi` may each be a scalar.

    Syntax: `stablehlo.clamp %lo, %x, %hi : tensor<4xf32>`, or a function type when a bound is a scalar.
    """

    name = "stablehlo.clamp"
    ARITY: ClassVar[int] = 3

    def verify_(self) -> None:
        if len(self.args) != 3:
            raise VerifyException(f"stablehlo.clamp takes 3 operands, got {len(self.args)}")
        out = ranked(self.result, "stablehlo.clamp result")
        x = ranked(self.args[1], "stablehlo.clamp operand")
        if not compatible(x.get_shape(), out.get_shape()) or x.element_type != out.element_type:
            raise VerifyException(f"stablehlo.clamp operand is {x} but the result is {out}")
        for i, what in ((0, "min"), (2, "max")):
            t = ranked(self.args[i], f"stablehlo.clamp {what}")
            if t.get_shape() and not compatible(t.get_shape(), out.get_shape()):
                raise VerifyException(f"stablehlo.clamp {what} {t} is neither a scalar nor shaped like {out}")
            if t.element_type != out.element_type:
                raise VerifyException(
                    f"stablehlo.clamp {what} has element type {t.element_type}, not {out.element_type}"
                )


@irdl_op_definition
class ConvertOp(UnaryOp):
    """
    Elementwise conversion to the result's element type.

    Syntax: `stablehlo.convert %x : (tensor<4xf32>) -> tensor<4xi32>`
    """

    name = "stablehlo.convert"

    def check_element(self, index: int, operand: TensorType[Attribute], result: TensorType[Attribute]) -> None:
        return None


@irdl_custom_directive
class SelectOpType(Signature):
    """`P, T`: the predicate's type, then the shared type of the other operands and the result."""

    operand_types: TypeDirective
    result_types: TypeDirective

    def parse_short(self, parser: Parser, count: int) -> tuple[list[Attribute], list[Attribute]]:
        pred = parser.parse_type()
        parser.parse_punctuation(",")
        shared = parser.parse_type()
        return [pred, shared, shared], [shared]

    def print_short(self, printer: Printer, inputs: Sequence[Attribute], outputs: Sequence[Attribute]) -> bool:
        if len(inputs) != 3 or len(outputs) != 1 or not inputs[1] == inputs[2] == outputs[0]:
            return False
        printer.print_attribute(inputs[0])
        printer.print_string(", ")
        printer.print_attribute(outputs[0])
        return True


@irdl_op_definition
class SelectOp(ElementwiseOp):
    """
    `pred ? on_true : on_false`, elementwise (a scalar `pred` picks one operand whole).

    Syntax: `stablehlo.select %p, %a, %b : tensor<4xi1>, tensor<4xf32>` (the predicate's type, then
    the shared type of the other operands and the result), or a function type.
    """

    name = "stablehlo.select"
    ARITY: ClassVar[int] = 3

    custom_directives = (*StableHLOOp.custom_directives, SelectOpType)
    assembly_format = "custom<OperandList>($args) attr-dict `:` custom<SelectOpType>(type(operands), type(results))"

    def verify_(self) -> None:
        if len(self.args) != 3:
            raise VerifyException(f"stablehlo.select takes 3 operands, got {len(self.args)}")
        pred = ranked(self.args[0], "stablehlo.select predicate")
        if pred.element_type != IntegerType(1):
            raise VerifyException(f"stablehlo.select predicate must be i1, got {pred}")
        out = ranked(self.result, "stablehlo.select result")
        if pred.get_shape() and not compatible(pred.get_shape(), out.get_shape()):
            raise VerifyException(f"stablehlo.select predicate {pred} is neither a scalar nor shaped like {out}")
        for i in (1, 2):
            t = ranked(self.args[i], f"stablehlo.select operand {i}")
            if not compatible(t.get_shape(), out.get_shape()) or t.element_type != out.element_type:
                raise VerifyException(f"stablehlo.select operand {i} is {t} but the result is {out}")


@irdl_custom_directive
class CompareOpType(Signature):
    """A function type, always printed so; `T` reads as both operands T and the result T's shape in i1."""

    operand_types: TypeDirective
    result_types: TypeDirective

    def parse_short(self, parser: Parser, count: int) -> tuple[list[Attribute], list[Attribute]]:
        shared = ranked(parser.parse_type(), "stablehlo.compare operand")
        return [shared, shared], [TensorType(IntegerType(1), shared.get_shape())]


@irdl_op_definition
class CompareOp(StableHLOOp):
    """
    Elementwise comparison into i1.

    Syntax: `stablehlo.compare  DIR, %a, %b[,  TYPE] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>`
    with DIR one of EQ, NE, GE, GT, LE, LT and TYPE one of FLOAT, TOTALORDER, SIGNED, UNSIGNED.
    """

    name = "stablehlo.compare"

    lhs = operand_def()
    rhs = operand_def()
    result = result_def()
    comparison_direction = prop_def(ComparisonDirectionAttr)
    compare_type = opt_prop_def(ComparisonTypeAttr)

    custom_directives = (*StableHLOOp.custom_directives, CompareOpType)
    assembly_format = (
        "` ` custom<EnumWord>($comparison_direction) `,` $lhs `,` $rhs (`,` ` ` custom<EnumWord>($compare_type)^)?"
        " attr-dict `:` custom<CompareOpType>(type(operands), type(results))"
    )

    def verify_(self) -> None:
        lhs, rhs = ranked(self.lhs, "stablehlo.compare lhs"), ranked(self.rhs, "stablehlo.compare rhs")
        out = ranked(self.result, "stablehlo.compare result")
        if lhs.element_type != rhs.element_type:
            raise VerifyException(f"stablehlo.compare operands differ in element type: {lhs} and {rhs}")
        if out.element_type != IntegerType(1):
            raise VerifyException(f"stablehlo.compare result must be i1, got {out}")
        for t in (lhs, rhs):
            if not compatible(t.get_shape(), out.get_shape()):
                raise VerifyException(f"stablehlo.compare operand {t} is not shaped like the result {out}")
