"""`stablehlo.custom_call`: the calls of targets outside StableHLO that the JAX exporter adds (the
reader reads only `@shape_assertion`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import BoolAttr, IntegerAttr, StringAttr
from xdsl.ir import Attribute
from xdsl.irdl import IRDLOperation, irdl_op_definition, opt_prop_def, prop_def, var_operand_def, var_result_def
from xdsl.parser import Parser
from xdsl.printer import Printer


@irdl_op_definition
class CustomCallOp(IRDLOperation):
    """
    A call of a target outside StableHLO.  The reader reads only `@shape_assertion`, the check JAX's
    shape polymorphism adds on a symbolic dim (it drops it: `forward` checks its inputs itself).

    Syntax: `stablehlo.custom_call @shape_assertion(%ok, %b) {error_message = "..."} : (tensor<i1>,
    tensor<i32>) -> ()` (parsed by hand: the dictionary holds the optional properties too, printed
    ahead of the attributes).
    """

    name = "stablehlo.custom_call"

    inputs = var_operand_def()
    outs = var_result_def()
    call_target_name = prop_def(StringAttr)
    api_version = opt_prop_def(IntegerAttr)
    has_side_effect = opt_prop_def(BoolAttr)
    backend_config = opt_prop_def(Attribute)

    @classmethod
    def parse(cls, parser: Parser) -> CustomCallOp:
        target = parser.parse_symbol_name()
        operands = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_unresolved_operand)
        attributes = parser.parse_optional_attr_dict()
        props: dict[str, Attribute] = {"call_target_name": target}
        for key in ("api_version", "has_side_effect", "backend_config"):
            if key in attributes:
                props[key] = attributes.pop(key)
        parser.parse_punctuation(":")
        position = parser.pos
        function = parser.parse_function_type()
        values = parser.resolve_operands(operands, list(function.inputs.data), position)
        return cls.create(
            operands=values, result_types=list(function.outputs.data), properties=props, attributes=attributes
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.call_target_name.data)
        printer.print_string("(")
        printer.print_list(self.inputs, printer.print_operand)
        printer.print_string(")")
        shown = {k: v for k, v in self.properties.items() if k != "call_target_name"} | dict(self.attributes)
        if shown:
            printer.print_string(" ")
            printer.print_attr_dict(shown)
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)

    @property
    def target(self) -> str:
        return self.call_target_name.data
