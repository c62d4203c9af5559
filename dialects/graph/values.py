"""The `graph` ops that give a value without computing it: an initializer, a folded constant, and
the value of an absent optional input.

Apart from `ops` (the model, its graphs and nodes) because each stands alone: one result, defined by
an attribute or by nothing; the structural ops only read them (a graph's ONNX names include its
initializers').
"""

from __future__ import annotations

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, Block, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, opt_operand_def, opt_prop_def, prop_def, result_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from loam.dialects.graph.attributes import TensorDataAttr
from loam.dialects.graph.syntax import parse_defined_operand, parse_text
from loam.dialects.graph.types import NoneType, TensorType


@irdl_op_definition
class InitializerOp(IRDLOperation):
    """
    An ONNX initializer: a named constant tensor, with its data unless it has been stripped.

    `default_of` names the graph input this initializer gives a default value (an ONNX
    initializer that shares its name with an input); nodes then read the input.

    Syntax: `%v = graph.initializer "NAME" [default_of %input] [= #graph.data<...>] : T`

    Examples:
        %w = graph.initializer "fc1.weight" : !graph.tensor<f32, [8, 16]>
        %b = graph.initializer "fc1.bias" = #graph.data<f32, [1], "0x0000803f"> : !graph.tensor<f32, [1]>
    """

    name = "graph.initializer"

    onnx_name = prop_def(StringAttr)
    value = opt_prop_def(TensorDataAttr)
    default_of = opt_operand_def()
    result = result_def()

    def __init__(
        self,
        onnx_name: str,
        result_type: Attribute,
        value: TensorDataAttr | None = None,
        default_of: SSAValue | None = None,
    ) -> None:
        props: dict[str, Attribute] = {"onnx_name": StringAttr(onnx_name)}
        if value is not None:
            props["value"] = value
        super().__init__(
            operands=[[default_of] if default_of is not None else []],
            properties=props,
            result_types=[result_type],
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.onnx_name.data)
        if self.default_of is not None:
            printer.print_string(" default_of ")
            printer.print_operand(self.default_of)
        if self.value is not None:
            printer.print_string(" = ")
            printer.print_attribute(self.value)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> InitializerOp:
        name = parse_text(parser)
        default_of = parse_defined_operand(parser) if parser.parse_optional_keyword("default_of") else None
        value = parser.parse_attribute() if parser.parse_optional_punctuation("=") else None
        parser.parse_punctuation(":")
        result_type = parser.parse_type()
        if value is not None and not isinstance(value, TensorDataAttr):
            parser.raise_error("graph.initializer value must be a #graph.data")
        return cls(name, result_type, value, default_of)

    def verify_(self) -> None:
        if self.default_of is not None and not isinstance(self.default_of.owner, Block):
            raise VerifyException(f"graph.initializer '{self.onnx_name.data}': default_of must be a graph input")


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """
    A folded tensor value (stage 0 writes it; the importer never does).

    Syntax: `%c = graph.constant #graph.data<...> : T`

    Example: `%c = graph.constant #graph.data<i64, [1], "0x0200000000000000"> : !graph.tensor<i64, [1]>`
    """

    name = "graph.constant"

    value = prop_def(TensorDataAttr)
    result = result_def()
    assembly_format = "qualified($value) attr-dict `:` type($result)"

    def __init__(self, value: TensorDataAttr, result_type: Attribute | None = None) -> None:
        if result_type is None:
            result_type = TensorType(value.elem, value.shape)
        super().__init__(properties={"value": value}, result_types=[result_type])


@irdl_op_definition
class NoneOp(IRDLOperation):
    """
    The value of an absent optional node input (`""` in ONNX).

    Syntax and example: `%none = graph.none`
    """

    name = "graph.none"

    result = result_def(NoneType)
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__(result_types=[NoneType()])
