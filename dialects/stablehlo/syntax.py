"""The pieces of StableHLO's custom syntax that several ops share, as xDSL assembly-format directives,
and `StableHLOOp`, the base of the ops whose syntax is an `assembly_format` over them.

MLIR declares the StableHLO ops with assembly formats and a few `custom<...>` pieces of its own
(`custom<SameOperandsAndResultType>`, `custom<DenseI64Array>`, ...); these are those pieces in
xDSL 0.75's terms, so that an op states its syntax in one format string:

    $operand `,` `dims` `=` custom<IntList>($permutation) attr-dict `:` custom<FunctionalType>(...)

A piece only one op uses lives next to that op (`SliceRanges`, `DotDimensionNumbers`, ...) and is
added to its `custom_directives`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.ir import Attribute
from xdsl.irdl import IRDLOperation
from xdsl.irdl.declarative_assembly_format import (
    AttributeVariable,
    CustomDirective,
    ParsingState,
    PrintingState,
    TypeDirective,
    UniqueBaseAttributeVariable,
    VariadicOperandVariable,
    irdl_custom_directive,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from loam.dialects.stablehlo.base import EnumAttr, i64_array, ints, parse_int_list, print_int_list


def _operand_count(state: ParsingState) -> int:
    return sum(len(operands) for operands in state.operands if operands is not None)


class Signature(CustomDirective):
    """
    After the `:`: a function type `(A, B) -> R`, or a short form (`parse_short`, `print_short`).

    Each subclass is one form; it declares the two parameters again because `irdl_custom_directive`
    reads a class's own annotations only.
    """

    operand_types: TypeDirective
    result_types: TypeDirective

    def parse(self, parser: Parser, state: ParsingState) -> None:
        position, count = parser.pos, _operand_count(state)
        if (function := parser.parse_optional_function_type()) is not None:
            inputs, outputs = list(function.inputs.data), list(function.outputs.data)
        else:
            inputs, outputs = self.parse_short(parser, count)
        if len(inputs) != count:
            parser.raise_error(f"expected {len(inputs)} operand types but had {count}", position)
        self.operand_types.set(state, inputs)
        try:
            self.result_types.set(state, outputs)
        except VerifyException as e:
            parser.raise_error(str(e), position)

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        inputs, outputs = self.operand_types.get(op), self.result_types.get(op)
        if not self.print_short(printer, inputs, outputs):
            printer.print_function_type(inputs, outputs)

    def parse_short(self, parser: Parser, count: int) -> tuple[list[Attribute], list[Attribute]]:
        """One type every operand and the result share."""
        shared = parser.parse_type()
        return [shared] * count, [shared]

    def print_short(self, printer: Printer, inputs: Sequence[Attribute], outputs: Sequence[Attribute]) -> bool:
        """Print the short form and say so, or print nothing (the function type follows)."""
        return False


@irdl_custom_directive
class FunctionalType(Signature):
    """`(A, B) -> R`, always printed so; `T` (every operand and the result of type T) also reads."""

    operand_types: TypeDirective
    result_types: TypeDirective


@irdl_custom_directive
class SameOperandsAndResultType(Signature):
    """`T` when the operands and the result share one type (as MLIR prints it), else a function type."""

    operand_types: TypeDirective
    result_types: TypeDirective

    def print_short(self, printer: Printer, inputs: Sequence[Attribute], outputs: Sequence[Attribute]) -> bool:
        if len({*inputs, *outputs}) != 1 or len(outputs) != 1:
            return False
        printer.print_attribute(outputs[0])
        return True


@irdl_custom_directive
class OperandList(CustomDirective):
    """`%a, %b`: one or more operands."""

    operands: VariadicOperandVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        self.operands.set(
            state, parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        )

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        printer.print_list(self.operands.get(op), printer.print_operand)


@irdl_custom_directive
class OperandTypes(CustomDirective):
    """`T, U`: the operands' types, one or more."""

    types: TypeDirective

    def parse(self, parser: Parser, state: ParsingState) -> None:
        position, count = parser.pos, _operand_count(state)
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        if len(types) != count:
            parser.raise_error(f"expected {len(types)} operand types but had {count}", position)
        self.types.set(state, types)

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        printer.print_list(self.types.get(op), printer.print_attribute)


@irdl_custom_directive
class IntList(CustomDirective):
    """`[1, 0]`: an `array<i64: ...>` property (MLIR's `custom<DenseI64Array>`)."""

    values: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        self.values.set(state, i64_array(parse_int_list(parser)))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        print_int_list(printer, ints(self.values.get(op)))


@irdl_custom_directive
class I64(CustomDirective):
    """`0`: an i64 integer property, its value alone."""

    value: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        self.value.set(state, IntegerAttr(parser.parse_integer(allow_boolean=False), i64))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        attr = self.value.get(op)
        assert isinstance(attr, IntegerAttr)
        state.print_whitespace(printer)
        printer.print_string(str(attr.value.data))


@irdl_custom_directive
class EnumWord(CustomDirective):
    """`GT`: a StableHLO enum property, its word alone (`<GT>` also reads); it may anchor an optional group."""

    value: UniqueBaseAttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        kind = self.value.unique_base
        assert issubclass(kind, EnumAttr)
        self.value.set(state, kind(*kind.parse_parameters(parser)))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        attr = self.value.get(op)
        assert isinstance(attr, EnumAttr)
        state.print_whitespace(printer)
        printer.print_string(attr.text)

    def is_present(self, op: IRDLOperation) -> bool:
        return self.value.is_present(op)

    def is_anchorable(self) -> bool:
        return self.value.is_anchorable()


class StableHLOOp(IRDLOperation):
    """
    Base of the ops whose custom syntax is an xDSL assembly format: an op states its operands,
    properties and `assembly_format`, nothing else about its syntax.  The directives here are
    available to every such op; one with a piece of its own adds it to `custom_directives`.
    """

    custom_directives: ClassVar[tuple[type[CustomDirective], ...]] = (
        FunctionalType,
        SameOperandsAndResultType,
        OperandList,
        OperandTypes,
        IntList,
        I64,
        EnumWord,
    )
