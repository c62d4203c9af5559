"""The `stablehlo` input dialect: the StableHLO ops Loam reads, in the syntax JAX prints.

StableHLO is the second front end's input (`loam.frontends.stablehlo` lowers it into the `graph`
dialect).  xDSL 0.75 ships no StableHLO dialect, so this one defines the ops the reader translates,
each with the custom ("pretty") syntax `jax.jit(f).lower(...).as_text()` prints and, through xDSL's
generic parser, the generic form `"stablehlo.add"(%a, %b) : (...) -> ...`.  Tensors, element types,
`dense<...>` and `array<i64: ...>` are xDSL's builtin ones.  Verification checks what the reader
relies on (operand and result types agree), so a malformed file stops at the op that is wrong
rather than somewhere in the graph.

    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
           : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %1 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<16xf32>) -> tensor<4x16xf32>
    %2 = stablehlo.add %0, %1 : tensor<4x16xf32>
    %3 = stablehlo.compare  GT, %2, %z,  FLOAT : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xi1>
    %4 = stablehlo.reduce(%2 init: %c) applies stablehlo.add across dimensions = [1]
           : (tensor<4x16xf32>, tensor<f32>) -> tensor<4xf32>

Each op's custom syntax is an xDSL `assembly_format` (`StableHLOOp`) over a few custom directives,
the pieces MLIR's StableHLO spells its own way (`custom<IntList>` for `dims = [1, 0]`,
`custom<SameOperandsAndResultType>` for `: T`, ...); only `constant`, `reduce` and `custom_call`,
whose syntax no format expresses, parse and print by hand.

Only the ops listed in `StableHLO` exist here; any other `stablehlo.*` op is unknown to the parser,
which is how the reader refuses it (naming the op and its place in the file).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, ParametrizedAttribute, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    SameVariadicOperandSize,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
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
from xdsl.parser import AttrParser, Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import IsTerminator
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------------------------------
# Helpers shared by the attributes and ops


def ranked(value: SSAValue | Attribute, what: str) -> TensorType[Attribute]:
    """The ranked tensor type of `value` (a value or a type), or a VerifyException naming `what`."""
    t = value.type if isinstance(value, SSAValue) else value
    if not isinstance(t, TensorType):
        raise VerifyException(f"{what} must be a ranked tensor, got {t}")
    return t


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    """The dims of a ranked tensor value or type; `DYNAMIC_INDEX` stands for `?`."""
    return tuple(ranked(value, "value").get_shape())


def _compatible(a: Sequence[int], b: Sequence[int]) -> bool:
    """Two shapes that may be the same at run time (a `?` matches any extent)."""
    return len(a) == len(b) and all(x == y or DYNAMIC_INDEX in (x, y) for x, y in zip(a, b, strict=True))


def _ints(attr: Attribute | None) -> tuple[int, ...]:
    """The integers of an `array<i64: ...>`, an `[...]` of integers, or nothing."""
    if attr is None:
        return ()
    if isinstance(attr, DenseArrayBase):
        return tuple(int(v) for v in attr.get_values())
    if isinstance(attr, ArrayAttr):
        return tuple(int(a.data if isinstance(a, IntAttr) else a.value.data) for a in attr.data)  # type: ignore[union-attr]
    raise VerifyException(f"expected a list of integers, got {attr}")


def _i64_array(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


def _parse_int_list(parser: AttrParser) -> list[int]:
    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False))


def _print_int_list(printer: Printer, values: Sequence[int]) -> None:
    printer.print_string("[" + ", ".join(str(v) for v in values) + "]")


def _print_attrs(printer: Printer, op: Operation) -> None:
    if op.attributes:
        printer.print_string(" ")
        printer.print_attr_dict(op.attributes)


# --------------------------------------------------------------------------------------------------
# Attributes


class _EnumAttr(ParametrizedAttribute):
    """A StableHLO enum, spelled `#stablehlo<KIND VALUE>` (as MLIR prints it) or `#stablehlo.KIND<VALUE>`."""

    VALUES: ClassVar[tuple[str, ...]]
    value: StringAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        angled = parser.parse_optional_punctuation("<") is not None
        word = parser.parse_identifier()
        if word not in cls.VALUES:
            parser.raise_error(f"{cls.name}: expected one of {', '.join(cls.VALUES)}, got '{word}'")
        if angled:
            parser.parse_punctuation(">")
        return (StringAttr(word),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.value.data}>")

    @property
    def text(self) -> str:
        return self.value.data


@irdl_attr_definition
class ComparisonDirectionAttr(_EnumAttr):
    """
    The direction of `stablehlo.compare`.

    Syntax: `#stablehlo<comparison_direction GE>`; values EQ, NE, GE, GT, LE, LT.
    """

    name = "stablehlo.comparison_direction"
    VALUES: ClassVar[tuple[str, ...]] = ("EQ", "NE", "GE", "GT", "LE", "LT")
    value: StringAttr


@irdl_attr_definition
class ComparisonTypeAttr(_EnumAttr):
    """
    How `stablehlo.compare` orders its operands.

    Syntax: `#stablehlo<comparison_type FLOAT>`; values NOTYPE, FLOAT, TOTALORDER, SIGNED, UNSIGNED.
    """

    name = "stablehlo.comparison_type"
    VALUES: ClassVar[tuple[str, ...]] = ("NOTYPE", "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")
    value: StringAttr


@irdl_attr_definition
class PrecisionAttr(_EnumAttr):
    """
    A precision hint of `stablehlo.dot_general` (the reader computes in the operands' type either way).

    Syntax: `#stablehlo<precision DEFAULT>`; values DEFAULT, HIGH, HIGHEST.
    """

    name = "stablehlo.precision"
    VALUES: ClassVar[tuple[str, ...]] = ("DEFAULT", "HIGH", "HIGHEST")
    value: StringAttr


def _parse_keyed_lists(parser: AttrParser, keys: Sequence[str], scalars: Sequence[str] = ()) -> dict[str, object]:
    """`<key = [ints], key = int, ...>`: the keys given, each at most once."""
    found: dict[str, object] = {}

    def entry() -> None:
        key = parser.parse_identifier()
        if key not in keys and key not in scalars:
            parser.raise_error(f"unexpected key '{key}' (expected one of {', '.join([*keys, *scalars])})")
        if key in found:
            parser.raise_error(f"key '{key}' is given twice")
        parser.parse_punctuation("=")
        found[key] = parser.parse_integer(allow_boolean=False) if key in scalars else _parse_int_list(parser)

    parser.parse_comma_separated_list(parser.Delimiter.ANGLE, entry)
    return found


@irdl_attr_definition
class DotDimensionNumbersAttr(ParametrizedAttribute):
    """
    Which dims of `stablehlo.dot_general` are batch dims and which are contracted.

    Syntax: `#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0],
    lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>` (an empty list is left out).
    """

    name = "stablehlo.dot"
    KEYS: ClassVar[tuple[str, ...]] = (
        "lhs_batching_dimensions",
        "rhs_batching_dimensions",
        "lhs_contracting_dimensions",
        "rhs_contracting_dimensions",
    )

    lhs_batching: ArrayAttr[IntAttr]
    rhs_batching: ArrayAttr[IntAttr]
    lhs_contracting: ArrayAttr[IntAttr]
    rhs_contracting: ArrayAttr[IntAttr]

    def __init__(
        self,
        lhs_batching: Sequence[int],
        rhs_batching: Sequence[int],
        lhs_contracting: Sequence[int],
        rhs_contracting: Sequence[int],
    ) -> None:
        super().__init__(
            *(
                ArrayAttr([IntAttr(d) for d in dims])
                for dims in (lhs_batching, rhs_batching, lhs_contracting, rhs_contracting)
            )
        )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        found = _parse_keyed_lists(parser, cls.KEYS)
        return tuple(ArrayAttr([IntAttr(d) for d in found.get(key, [])]) for key in cls.KEYS)  # type: ignore[union-attr]

    def print_parameters(self, printer: Printer) -> None:
        parts = [
            f"{key} = [{', '.join(str(d.data) for d in dims.data)}]"
            for key, dims in zip(self.KEYS, self.parameters, strict=True)
            if dims.data
        ]  # type: ignore[union-attr]
        printer.print_string("<" + ", ".join(parts) + ">")

    def dims(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(lhs batch, rhs batch, lhs contracting, rhs contracting)."""
        return tuple(tuple(d.data for d in p.data) for p in self.parameters)  # type: ignore[return-value, union-attr]


@irdl_attr_definition
class GatherDimensionNumbersAttr(ParametrizedAttribute):
    """
    How `stablehlo.gather` reads its operand.

    Syntax: `#stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0],
    index_vector_dim = 2>` (also `operand_batching_dims` and `start_indices_batching_dims`).
    """

    name = "stablehlo.gather"
    KEYS: ClassVar[tuple[str, ...]] = (
        "offset_dims",
        "collapsed_slice_dims",
        "operand_batching_dims",
        "start_indices_batching_dims",
        "start_index_map",
    )

    offset_dims: ArrayAttr[IntAttr]
    collapsed_slice_dims: ArrayAttr[IntAttr]
    operand_batching_dims: ArrayAttr[IntAttr]
    start_indices_batching_dims: ArrayAttr[IntAttr]
    start_index_map: ArrayAttr[IntAttr]
    index_vector_dim: IntAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        found = _parse_keyed_lists(parser, cls.KEYS, scalars=("index_vector_dim",))
        lists = [ArrayAttr([IntAttr(d) for d in found.get(key, [])]) for key in cls.KEYS]  # type: ignore[union-attr]
        return (*lists, IntAttr(found.get("index_vector_dim", 0)))  # type: ignore[arg-type]

    def print_parameters(self, printer: Printer) -> None:
        parts = [
            f"{key} = [{', '.join(str(d.data) for d in dims.data)}]"
            for key, dims in zip(self.KEYS, self.parameters, strict=False)
            if isinstance(dims, ArrayAttr) and dims.data
        ]
        parts.append(f"index_vector_dim = {self.index_vector_dim.data}")
        printer.print_string("<" + ", ".join(parts) + ">")

    def field(self, key: str) -> tuple[int, ...]:
        return tuple(d.data for d in getattr(self, key).data)


# --------------------------------------------------------------------------------------------------
# The custom syntax: xDSL assembly formats, with a directive for each piece MLIR's StableHLO spells
# its own way (MLIR's StablehloOps.td declares the same ops with the same `custom<...>` pieces)


def _operand_count(state: ParsingState) -> int:
    return sum(len(operands) for operands in state.operands if operands is not None)


class _Signature(CustomDirective):
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
class FunctionalType(_Signature):
    """`(A, B) -> R`, always printed so; `T` (every operand and the result of type T) also reads."""

    operand_types: TypeDirective
    result_types: TypeDirective


@irdl_custom_directive
class SameOperandsAndResultType(_Signature):
    """`T` when the operands and the result share one type (as MLIR prints it), else a function type."""

    operand_types: TypeDirective
    result_types: TypeDirective

    def print_short(self, printer: Printer, inputs: Sequence[Attribute], outputs: Sequence[Attribute]) -> bool:
        if len({*inputs, *outputs}) != 1 or len(outputs) != 1:
            return False
        printer.print_attribute(outputs[0])
        return True


@irdl_custom_directive
class SelectOpType(_Signature):
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


@irdl_custom_directive
class CompareOpType(_Signature):
    """A function type, always printed so; `T` reads as both operands T and the result T's shape in i1."""

    operand_types: TypeDirective
    result_types: TypeDirective

    def parse_short(self, parser: Parser, count: int) -> tuple[list[Attribute], list[Attribute]]:
        shared = ranked(parser.parse_type(), "stablehlo.compare operand")
        return [shared, shared], [TensorType(IntegerType(1), shared.get_shape())]


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
        self.values.set(state, _i64_array(_parse_int_list(parser)))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        _print_int_list(printer, _ints(self.values.get(op)))


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
        assert issubclass(kind, _EnumAttr)
        self.value.set(state, kind(*kind.parse_parameters(parser)))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        attr = self.value.get(op)
        assert isinstance(attr, _EnumAttr)
        state.print_whitespace(printer)
        printer.print_string(attr.text)

    def is_present(self, op: IRDLOperation) -> bool:
        return self.value.is_present(op)

    def is_anchorable(self) -> bool:
        return self.value.is_anchorable()


@irdl_custom_directive
class CommaTerminatedOperands(CustomDirective):
    """`%a, %b,`: operands, each followed by a comma (MLIR's `custom<VariadicOperandWithAttribute>`)."""

    operands: VariadicOperandVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        operands: list[UnresolvedOperand] = []
        while (operand := parser.parse_optional_unresolved_operand()) is not None:
            operands.append(operand)
            parser.parse_punctuation(",")
        self.operands.set(state, operands)

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        operands = self.operands.get(op)
        if not operands:
            return
        state.print_whitespace(printer)
        printer.print_list(operands, printer.print_operand)
        printer.print_string(",")


@irdl_custom_directive
class KnownDimensions(CustomDirective):
    """`, known_expanding_dimensions = [0], known_nonexpanding_dimensions = [1]`: either, both (any
    order), or neither."""

    expanding: AttributeVariable
    nonexpanding: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        by_name = {v.name: v for v in (self.expanding, self.nonexpanding)}
        while parser.parse_optional_punctuation(","):
            key = parser.parse_keyword_in(tuple(by_name))
            parser.parse_punctuation("=")
            by_name[key].set(state, _i64_array(_parse_int_list(parser)))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        for variable in (self.expanding, self.nonexpanding):
            if (attr := variable.get(op)) is not None:
                printer.print_string(f", {variable.name} = ")
                _print_int_list(printer, _ints(attr))


@irdl_custom_directive
class SliceRanges(CustomDirective):
    """`[1:3, 0:4:2]`: `start:limit[:stride]` per dim (a stride of 1 is left out)."""

    start_indices: AttributeVariable
    limit_indices: AttributeVariable
    strides: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        def one() -> tuple[int, int, int]:
            start = parser.parse_integer(allow_boolean=False)
            parser.parse_punctuation(":")
            limit = parser.parse_integer(allow_boolean=False)
            stride = parser.parse_integer(allow_boolean=False) if parser.parse_optional_punctuation(":") else 1
            return start, limit, stride

        ranges = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, one)
        for i, variable in enumerate((self.start_indices, self.limit_indices, self.strides)):
            variable.set(state, _i64_array([r[i] for r in ranges]))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        starts, limits, strides = (_ints(v.get(op)) for v in (self.start_indices, self.limit_indices, self.strides))
        parts = [f"{a}:{b}" + (f":{c}" if c != 1 else "") for a, b, c in zip(starts, limits, strides, strict=True)]
        state.print_whitespace(printer)
        printer.print_string("[" + ", ".join(parts) + "]")


@irdl_custom_directive
class DotDimensionNumbers(CustomDirective):
    """`, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT]`:
    read in any order, each at most once; printed in that order, empty batching dims and an absent
    precision left out."""

    dimension_numbers: AttributeVariable
    precision_config: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        pairs: dict[str, tuple[list[int], list[int]]] = {}
        precision: ArrayAttr[Attribute] | None = None
        while parser.parse_optional_punctuation(","):
            key = parser.parse_identifier()
            parser.parse_punctuation("=")
            if key in ("batching_dims", "contracting_dims") and key not in pairs:
                lhs = _parse_int_list(parser)
                parser.parse_keyword("x")
                pairs[key] = (lhs, _parse_int_list(parser))
            elif key == "precision" and precision is None:

                def word() -> Attribute:
                    return PrecisionAttr(*PrecisionAttr.parse_parameters(parser))

                precision = ArrayAttr(parser.parse_comma_separated_list(parser.Delimiter.SQUARE, word))
            else:
                parser.raise_error(
                    f"stablehlo.dot_general: unexpected '{key}' (Loam reads batching_dims, contracting_dims, precision)"
                )
        if precision is not None:
            self.precision_config.set(state, precision)
        batch = pairs.get("batching_dims", ([], []))
        contract = pairs.get("contracting_dims", ([], []))
        self.dimension_numbers.set(state, DotDimensionNumbersAttr(batch[0], batch[1], contract[0], contract[1]))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        numbers = self.dimension_numbers.get(op)
        assert isinstance(numbers, DotDimensionNumbersAttr)
        lb, rb, lc, rc = numbers.dims()
        if lb:
            printer.print_string(f", batching_dims = {list(lb)} x {list(rb)}")
        printer.print_string(f", contracting_dims = {list(lc)} x {list(rc)}")
        if isinstance(precision := self.precision_config.get(op), ArrayAttr):
            names = [p.text for p in precision.data if isinstance(p, PrecisionAttr)]
            printer.print_string(f", precision = [{', '.join(names)}]")


class StableHLOOp(IRDLOperation):
    """
    Base of the ops whose custom syntax is an xDSL assembly format over the directives above: an op
    states its operands, properties and `assembly_format`, nothing else about its syntax.
    """

    custom_directives = (
        FunctionalType,
        SameOperandsAndResultType,
        SelectOpType,
        CompareOpType,
        OperandList,
        OperandTypes,
        IntList,
        I64,
        EnumWord,
        CommaTerminatedOperands,
        KnownDimensions,
        SliceRanges,
        DotDimensionNumbers,
    )


# --------------------------------------------------------------------------------------------------
# Elementwise ops: `stablehlo.OP %a, %b : T` (or a function type when the types differ)


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
            if not _compatible(t.get_shape(), out.get_shape()):
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
class NotOp(UnaryOp):
    """Elementwise not.  Syntax: `stablehlo.not %x : tensor<4xi1>`"""

    name = "stablehlo.not"


@irdl_op_definition
class ConvertOp(UnaryOp):
    """
    Elementwise conversion to the result's element type.

    Syntax: `stablehlo.convert %x : (tensor<4xf32>) -> tensor<4xi32>`
    """

    name = "stablehlo.convert"

    def check_element(self, index: int, operand: TensorType[Attribute], result: TensorType[Attribute]) -> None:
        return None


@irdl_op_definition
class SelectOp(ElementwiseOp):
    """
    `pred ? on_true : on_false`, elementwise (a scalar `pred` picks one operand whole).

    Syntax: `stablehlo.select %p, %a, %b : tensor<4xi1>, tensor<4xf32>` (the predicate's type, then
    the shared type of the other operands and the result), or a function type.
    """

    name = "stablehlo.select"
    ARITY: ClassVar[int] = 3

    assembly_format = "custom<OperandList>($args) attr-dict `:` custom<SelectOpType>(type(operands), type(results))"

    def verify_(self) -> None:
        if len(self.args) != 3:
            raise VerifyException(f"stablehlo.select takes 3 operands, got {len(self.args)}")
        pred = ranked(self.args[0], "stablehlo.select predicate")
        if pred.element_type != IntegerType(1):
            raise VerifyException(f"stablehlo.select predicate must be i1, got {pred}")
        out = ranked(self.result, "stablehlo.select result")
        if pred.get_shape() and not _compatible(pred.get_shape(), out.get_shape()):
            raise VerifyException(f"stablehlo.select predicate {pred} is neither a scalar nor shaped like {out}")
        for i in (1, 2):
            t = ranked(self.args[i], f"stablehlo.select operand {i}")
            if not _compatible(t.get_shape(), out.get_shape()) or t.element_type != out.element_type:
                raise VerifyException(f"stablehlo.select operand {i} is {t} but the result is {out}")


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
            if not _compatible(t.get_shape(), out.get_shape()):
                raise VerifyException(f"stablehlo.compare operand {t} is not shaped like the result {out}")


# --------------------------------------------------------------------------------------------------
# Constants, shapes and movement


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """
    A tensor literal.

    Syntax: `stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>` (parsed by hand: the result's type
    is the literal's, which an assembly format cannot infer).
    """

    name = "stablehlo.constant"

    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def()

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        attributes = parser.parse_optional_attr_dict()
        value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error(f"stablehlo.constant expects a dense<...> literal, got {value}")
        return cls.create(properties={"value": value}, result_types=[value.type], attributes=attributes)

    def print(self, printer: Printer) -> None:
        _print_attrs(printer, self)
        printer.print_string(" ")
        printer.print_attribute(self.value)

    def verify_(self) -> None:
        if self.value.type != self.result.type:
            raise VerifyException(f"stablehlo.constant value has type {self.value.type}, the result {self.result.type}")


@irdl_op_definition
class BroadcastInDimOp(StableHLOOp):
    """
    Broadcast into the result's shape; operand dim i becomes result dim `broadcast_dimensions[i]`.

    Syntax: `stablehlo.broadcast_in_dim %x, dims = [1] : (tensor<16xf32>) -> tensor<4x16xf32>`
    """

    name = "stablehlo.broadcast_in_dim"

    operand = operand_def()
    result = result_def()
    broadcast_dimensions = prop_def(DenseArrayBase)

    assembly_format = (
        "$operand `,` `dims` `=` custom<IntList>($broadcast_dimensions)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    @property
    def dims(self) -> tuple[int, ...]:
        return _ints(self.broadcast_dimensions)

    def verify_(self) -> None:
        _verify_broadcast(self.name, self.operand, self.result, self.dims)


def _verify_broadcast(name: str, operand: SSAValue, result: SSAValue, dims: Sequence[int]) -> None:
    src = ranked(operand, f"{name} operand")
    out = ranked(result, f"{name} result")
    if src.element_type != out.element_type:
        raise VerifyException(f"{name} changes the element type: {src} to {out}")
    if len(dims) != len(src.get_shape()):
        raise VerifyException(f"{name}: {len(dims)} dims for an operand of rank {len(src.get_shape())}")
    if len(set(dims)) != len(dims) or any(not 0 <= d < len(out.get_shape()) for d in dims):
        raise VerifyException(f"{name}: dims {list(dims)} must be distinct result dims (rank {len(out.get_shape())})")
    for i, d in enumerate(dims):
        have, want = src.get_shape()[i], out.get_shape()[d]
        if have not in (1, DYNAMIC_INDEX, want) and want != DYNAMIC_INDEX:
            raise VerifyException(f"{name}: operand dim {i} ({have}) cannot broadcast to result dim {d} ({want})")


@irdl_op_definition
class DynamicBroadcastInDimOp(StableHLOOp):
    """
    `stablehlo.broadcast_in_dim` to a shape computed at run time (the 1-D integer `output_dimensions`).

    Syntax: `stablehlo.dynamic_broadcast_in_dim %x, %shape, dims = [0, 1] : (tensor<1x16xf32>,
    tensor<2xi32>) -> tensor<?x16xf32>`
    """

    name = "stablehlo.dynamic_broadcast_in_dim"

    operand = operand_def()
    output_dimensions = operand_def()
    result = result_def()
    broadcast_dimensions = prop_def(DenseArrayBase)
    known_expanding_dimensions = opt_prop_def(DenseArrayBase)
    known_nonexpanding_dimensions = opt_prop_def(DenseArrayBase)

    assembly_format = (
        "$operand `,` $output_dimensions `,` `dims` `=` custom<IntList>($broadcast_dimensions)"
        " custom<KnownDimensions>($known_expanding_dimensions, $known_nonexpanding_dimensions)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    @property
    def dims(self) -> tuple[int, ...]:
        return _ints(self.broadcast_dimensions)

    def verify_(self) -> None:
        _verify_broadcast(self.name, self.operand, self.result, self.dims)
        _verify_shape_operand(self.name, self.output_dimensions, len(shape_of(self.result)))


def _verify_shape_operand(name: str, value: SSAValue, rank: int) -> None:
    t = ranked(value, f"{name} shape operand")
    if not isinstance(t.element_type, IntegerType) or t.get_shape() not in ((rank,), (DYNAMIC_INDEX,)):
        raise VerifyException(f"{name}: the shape operand must be a 1-D integer tensor of {rank} extents, got {t}")


@irdl_op_definition
class ReshapeOp(StableHLOOp):
    """
    The same elements in row-major order, in the result's (static) shape.

    Syntax: `stablehlo.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>`
    """

    name = "stablehlo.reshape"

    operand = operand_def()
    result = result_def()

    assembly_format = "$operand attr-dict `:` custom<FunctionalType>(type(operands), type(results))"

    def verify_(self) -> None:
        src, out = ranked(self.operand, "stablehlo.reshape operand"), ranked(self.result, "stablehlo.reshape result")
        if src.element_type != out.element_type:
            raise VerifyException(f"stablehlo.reshape changes the element type: {src} to {out}")
        a, b = src.get_shape(), out.get_shape()
        if DYNAMIC_INDEX not in (*a, *b) and _count(a) != _count(b):
            raise VerifyException(f"stablehlo.reshape: {src} and {out} hold different numbers of elements")


def _count(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@irdl_op_definition
class DynamicReshapeOp(StableHLOOp):
    """
    `stablehlo.reshape` to a shape computed at run time.

    Syntax: `stablehlo.dynamic_reshape %x, %shape : (tensor<?x8xf32>, tensor<3xi32>) -> tensor<?x2x4xf32>`
    """

    name = "stablehlo.dynamic_reshape"

    operand = operand_def()
    output_shape = operand_def()
    result = result_def()

    assembly_format = "$operand `,` $output_shape attr-dict `:` custom<FunctionalType>(type(operands), type(results))"

    def verify_(self) -> None:
        src, out = ranked(self.operand, "stablehlo.dynamic_reshape operand"), ranked(self.result, "result")
        if src.element_type != out.element_type:
            raise VerifyException(f"stablehlo.dynamic_reshape changes the element type: {src} to {out}")
        _verify_shape_operand(self.name, self.output_shape, len(out.get_shape()))


@irdl_op_definition
class TransposeOp(StableHLOOp):
    """
    Result dim i is operand dim `permutation[i]`.

    Syntax: `stablehlo.transpose %x, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>`
    """

    name = "stablehlo.transpose"

    operand = operand_def()
    result = result_def()
    permutation = prop_def(DenseArrayBase)

    assembly_format = (
        "$operand `,` `dims` `=` custom<IntList>($permutation)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    @property
    def perm(self) -> tuple[int, ...]:
        return _ints(self.permutation)

    def verify_(self) -> None:
        src, out = ranked(self.operand, "stablehlo.transpose operand"), ranked(self.result, "result")
        perm = self.perm
        if sorted(perm) != list(range(len(src.get_shape()))):
            raise VerifyException(
                f"stablehlo.transpose: dims {list(perm)} are not a permutation of rank {len(src.get_shape())}"
            )
        want = [src.get_shape()[p] for p in perm]
        if not _compatible(want, out.get_shape()) or src.element_type != out.element_type:
            raise VerifyException(f"stablehlo.transpose: {src} permuted by {list(perm)} is not {out}")


@irdl_op_definition
class ConcatenateOp(StableHLOOp):
    """
    The operands joined along `dimension`.

    Syntax: `stablehlo.concatenate %a, %b, dim = 0 : (tensor<1xi32>, tensor<2xi32>) -> tensor<3xi32>`
    """

    name = "stablehlo.concatenate"

    inputs = var_operand_def()
    result = result_def()
    dimension = prop_def(IntegerAttr)

    assembly_format = (
        "custom<CommaTerminatedOperands>($inputs) `dim` `=` custom<I64>($dimension)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    @property
    def dim(self) -> int:
        return int(self.dimension.value.data)

    def verify_(self) -> None:
        out = ranked(self.result, "stablehlo.concatenate result")
        rank = len(out.get_shape())
        if not self.inputs or not 0 <= self.dim < rank:
            raise VerifyException(
                f"stablehlo.concatenate: dim {self.dim} of rank {rank} with {len(self.inputs)} operands"
            )
        for i, arg in enumerate(self.inputs):
            t = ranked(arg, f"stablehlo.concatenate operand {i}")
            a, b = list(t.get_shape()), list(out.get_shape())
            if len(a) != rank or t.element_type != out.element_type:
                raise VerifyException(f"stablehlo.concatenate operand {i} is {t}, the result {out}")
            a[self.dim] = b[self.dim] = DYNAMIC_INDEX
            if not _compatible(a, b):
                raise VerifyException(
                    f"stablehlo.concatenate operand {i} is {t}; it must match {out} off dim {self.dim}"
                )


@irdl_op_definition
class SliceOp(StableHLOOp):
    """
    A static slice: `start:limit:stride` per dim.

    Syntax: `stablehlo.slice %x [1:3, 0:4:2] : (tensor<3x4xf32>) -> tensor<2x2xf32>`
    """

    name = "stablehlo.slice"

    operand = operand_def()
    result = result_def()
    start_indices = prop_def(DenseArrayBase)
    limit_indices = prop_def(DenseArrayBase)
    strides = prop_def(DenseArrayBase)

    assembly_format = (
        "$operand custom<SliceRanges>($start_indices, $limit_indices, $strides)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    @property
    def ranges(self) -> list[tuple[int, int, int]]:
        return list(zip(_ints(self.start_indices), _ints(self.limit_indices), _ints(self.strides), strict=True))

    def verify_(self) -> None:
        src, out = ranked(self.operand, "stablehlo.slice operand"), ranked(self.result, "result")
        shape = src.get_shape()
        starts, limits, strides = _ints(self.start_indices), _ints(self.limit_indices), _ints(self.strides)
        if not len(starts) == len(limits) == len(strides) == len(shape):
            raise VerifyException(f"stablehlo.slice: one start, limit and stride per dim of {src}")
        want: list[int] = []
        for i, (a, b, c) in enumerate(zip(starts, limits, strides, strict=True)):
            if c < 1 or a < 0 or b < a or (shape[i] != DYNAMIC_INDEX and b > shape[i]):
                raise VerifyException(f"stablehlo.slice: {a}:{b}:{c} is not a slice of dim {i} of {src}")
            want.append(-(-(b - a) // c))
        if not _compatible(want, out.get_shape()) or src.element_type != out.element_type:
            raise VerifyException(f"stablehlo.slice: slicing {src} gives shape {want}, not {out}")


@irdl_op_definition
class IotaOp(StableHLOOp):
    """
    0, 1, 2, ... along `iota_dimension`, repeated along the other dims.

    Syntax: `stablehlo.iota dim = 0 : tensor<6x4xi32>`
    """

    name = "stablehlo.iota"

    result = result_def()
    iota_dimension = prop_def(IntegerAttr)

    assembly_format = "`dim` `=` custom<I64>($iota_dimension) attr-dict `:` type($result)"

    @property
    def dim(self) -> int:
        return int(self.iota_dimension.value.data)

    def verify_(self) -> None:
        out = ranked(self.result, "stablehlo.iota result")
        if not 0 <= self.dim < len(out.get_shape()):
            raise VerifyException(f"stablehlo.iota: dim {self.dim} is not a dim of {out}")


@irdl_op_definition
class DynamicIotaOp(StableHLOOp):
    """
    `stablehlo.iota` of a shape computed at run time.

    Syntax: `stablehlo.dynamic_iota %shape, dim = 0 : (tensor<2xi32>) -> tensor<?x6xi32>`
    """

    name = "stablehlo.dynamic_iota"

    output_shape = operand_def()
    result = result_def()
    iota_dimension = prop_def(IntegerAttr)

    assembly_format = (
        "$output_shape `,` `dim` `=` custom<I64>($iota_dimension)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    @property
    def dim(self) -> int:
        return int(self.iota_dimension.value.data)

    def verify_(self) -> None:
        out = ranked(self.result, "stablehlo.dynamic_iota result")
        if not 0 <= self.dim < len(out.get_shape()):
            raise VerifyException(f"stablehlo.dynamic_iota: dim {self.dim} is not a dim of {out}")
        _verify_shape_operand(self.name, self.output_shape, len(out.get_shape()))


@irdl_op_definition
class GetDimensionSizeOp(StableHLOOp):
    """
    The extent of one dim, as a scalar i32.

    Syntax: `stablehlo.get_dimension_size %x, dim = 0 : (tensor<?x8xf32>) -> tensor<i32>`
    """

    name = "stablehlo.get_dimension_size"

    operand = operand_def()
    result = result_def()
    dimension = prop_def(IntegerAttr)

    assembly_format = (
        "$operand `,` `dim` `=` custom<I64>($dimension)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    @property
    def dim(self) -> int:
        return int(self.dimension.value.data)

    def verify_(self) -> None:
        src = ranked(self.operand, "stablehlo.get_dimension_size operand")
        out = ranked(self.result, "stablehlo.get_dimension_size result")
        if not 0 <= self.dim < len(src.get_shape()):
            raise VerifyException(f"stablehlo.get_dimension_size: dim {self.dim} is not a dim of {src}")
        if out.get_shape() or not isinstance(out.element_type, IntegerType):
            raise VerifyException(f"stablehlo.get_dimension_size result must be an integer scalar, got {out}")


# --------------------------------------------------------------------------------------------------
# Contractions, reductions and gathers


@irdl_op_definition
class DotGeneralOp(StableHLOOp):
    """
    A contraction: result dims are the batch dims, then lhs's free dims, then rhs's free dims.

    Syntax: `stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1],
    precision = [DEFAULT, DEFAULT] : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>`
    (`batching_dims` and `precision` are left out when empty).
    """

    name = "stablehlo.dot_general"

    lhs = operand_def()
    rhs = operand_def()
    result = result_def()
    dot_dimension_numbers = prop_def(DotDimensionNumbersAttr)
    precision_config = opt_prop_def(ArrayAttr)

    assembly_format = (
        "$lhs `,` $rhs custom<DotDimensionNumbers>($dot_dimension_numbers, $precision_config)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    def verify_(self) -> None:
        lhs, rhs = ranked(self.lhs, "stablehlo.dot_general lhs"), ranked(self.rhs, "stablehlo.dot_general rhs")
        out = ranked(self.result, "stablehlo.dot_general result")
        ls, rs = lhs.get_shape(), rhs.get_shape()
        lb, rb, lc, rc = self.dot_dimension_numbers.dims()
        if len(lb) != len(rb) or len(lc) != len(rc):
            raise VerifyException("stablehlo.dot_general: lhs and rhs need as many batch dims and contracting dims")
        for side, dims, rank in (("lhs", (*lb, *lc), len(ls)), ("rhs", (*rb, *rc), len(rs))):
            if len(set(dims)) != len(dims) or any(not 0 <= d < rank for d in dims):
                raise VerifyException(
                    f"stablehlo.dot_general: {side} batch/contracting dims {list(dims)} of rank {rank}"
                )
        for a, b in (*zip(lb, rb, strict=True), *zip(lc, rc, strict=True)):
            if ls[a] != rs[b] and DYNAMIC_INDEX not in (ls[a], rs[b]):
                raise VerifyException(f"stablehlo.dot_general: lhs dim {a} ({ls[a]}) and rhs dim {b} ({rs[b]}) differ")
        want = [ls[d] for d in lb]
        want += [e for d, e in enumerate(ls) if d not in lb and d not in lc]
        want += [e for d, e in enumerate(rs) if d not in rb and d not in rc]
        if not _compatible(want, out.get_shape()):
            raise VerifyException(f"stablehlo.dot_general: {lhs} and {rhs} give shape {want}, not {out}")


@irdl_op_definition
class ReturnOp(StableHLOOp):
    """
    The values a region of a StableHLO op yields (the body of `stablehlo.reduce`).

    Syntax: `stablehlo.return %x : tensor<f32>`
    """

    name = "stablehlo.return"

    values = var_operand_def()
    traits = traits_def(IsTerminator())

    assembly_format = "custom<OperandList>($values) attr-dict `:` custom<OperandTypes>(type($values))"


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """
    A reduction of `inputs` over `dimensions`, starting from `init_values`, combining with the body.

    Syntax (the body one op on the two block arguments):
        stablehlo.reduce(%x init: %c) applies stablehlo.add across dimensions = [1]
            : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
    or with the body written out:
        stablehlo.reduce(%x init: %c) across dimensions = [1] : (...) -> tensor<4xf32>
         reducer(%a: tensor<f32>, %b: tensor<f32>) { ... stablehlo.return %r : tensor<f32> }
    (parsed by hand: an assembly format has no way to say "a body of one op, or the region").
    """

    name = "stablehlo.reduce"

    operands_ = var_operand_def()  # the inputs, then as many init values
    outs = var_result_def()
    dimensions = prop_def(DenseArrayBase)
    body = region_def("single_block")

    irdl_options = (SameVariadicOperandSize(),)

    @property
    def inputs(self) -> Sequence[SSAValue]:
        return self.operands[: len(self.operands) // 2]

    @property
    def init_values(self) -> Sequence[SSAValue]:
        return self.operands[len(self.operands) // 2 :]

    @property
    def dims(self) -> tuple[int, ...]:
        return _ints(self.dimensions)

    @classmethod
    def parse(cls, parser: Parser) -> ReduceOp:
        def pair() -> tuple[UnresolvedOperand, UnresolvedOperand]:
            with parser.in_parens():
                x = parser.parse_unresolved_operand()
                parser.parse_keyword("init")
                parser.parse_punctuation(":")
                return x, parser.parse_unresolved_operand()

        pairs = parser.parse_comma_separated_list(parser.Delimiter.NONE, pair)
        applies = None
        if parser.parse_optional_keyword("applies") is not None:
            applies = parser.parse_identifier()
        parser.parse_keyword("across")
        parser.parse_keyword("dimensions")
        parser.parse_punctuation("=")
        dims = _parse_int_list(parser)
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        position = parser.pos
        function = parser.parse_function_type()
        unresolved = [p[0] for p in pairs] + [p[1] for p in pairs]
        values = parser.resolve_operands(unresolved, list(function.inputs.data), position)
        if applies is not None:
            body = _applies_region(parser, applies, [v.type for v in values[len(pairs) :]])
        else:
            parser.parse_keyword("reducer")
            args: list[Parser.Argument] = []
            while parser.parse_optional_punctuation("(") is not None:
                args += parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_argument)
                parser.parse_punctuation(")")
            body = parser.parse_region(_interleave_reducer_args(args))
        return cls.create(
            operands=values,
            result_types=list(function.outputs.data),
            properties={"dimensions": _i64_array(dims)},
            attributes=attributes,
            regions=[body],
        )

    def print(self, printer: Printer) -> None:
        printer.print_string("(")
        for i, (x, init) in enumerate(zip(self.inputs, self.init_values, strict=True)):
            printer.print_string(", (" if i else "")
            printer.print_operand(x)
            printer.print_string(" init: ")
            printer.print_operand(init)
            printer.print_string(")")
        applied = self.applied_op()
        if applied is not None:
            printer.print_string(f" applies {applied}")
        printer.print_string(" across dimensions = ")
        _print_int_list(printer, self.dims)
        _print_attrs(printer, self)
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)
        if applied is None:  # the arguments as pairs (accumulator, element), as MLIR prints them
            printer.print_string(" reducer")
            args, n = self.body.block.args, len(self.inputs)
            for i in range(n):
                printer.print_string("(")
                printer.print_list((args[i], args[n + i]), printer.print_block_argument)
                printer.print_string(")")
            printer.print_string(" ")
            printer.print_region(self.body, print_entry_block_args=False)

    def applied_op(self) -> str | None:
        """The op name when the body is that one op on the two block arguments, in order."""
        ops = list(self.body.block.ops)
        if len(ops) != 2 or len(self.inputs) != 1 or not isinstance(ops[1], ReturnOp):
            return None
        first, args = ops[0], self.body.block.args
        if tuple(first.operands) != tuple(args) or tuple(ops[1].values) != tuple(first.results):
            return None
        return first.name

    def verify_(self) -> None:
        n = len(self.operands) // 2
        if len(self.operands) % 2 or n == 0 or len(self.outs) != n:
            raise VerifyException("stablehlo.reduce: as many init values and results as inputs")
        dims = self.dims
        for x, init, out in zip(self.inputs, self.init_values, self.outs, strict=True):
            t = ranked(x, "stablehlo.reduce input")
            shape = t.get_shape()
            if len(set(dims)) != len(dims) or any(not 0 <= d < len(shape) for d in dims):
                raise VerifyException(f"stablehlo.reduce: dimensions {list(dims)} of rank {len(shape)}")
            i = ranked(init, "stablehlo.reduce init value")
            if i.get_shape() or i.element_type != t.element_type:
                raise VerifyException(f"stablehlo.reduce: the init value must be a scalar of {t.element_type}, got {i}")
            want = [e for d, e in enumerate(shape) if d not in dims]
            o = ranked(out, "stablehlo.reduce result")
            if not _compatible(want, o.get_shape()) or o.element_type != t.element_type:
                raise VerifyException(f"stablehlo.reduce: reducing {t} over {list(dims)} does not give {o}")
        if len(self.body.block.args) != 2 * n:
            raise VerifyException(f"stablehlo.reduce: the body takes {2 * n} scalars")


def _interleave_reducer_args(args: list[Parser.Argument]) -> list[Parser.Argument]:
    """The pretty form lists the body's arguments as pairs `(acc_i, x_i)`; the block takes accs first."""
    return args[0::2] + args[1::2]


def _applies_region(parser: Parser, op_name: str, scalar_types: Sequence[Attribute]) -> Region:
    """The body `applies OP` stands for: OP on the two block arguments, returned."""
    op_type = parser.ctx.get_optional_op(op_name)
    if op_type is None or not issubclass(op_type, BinaryOp):
        parser.raise_error(f"stablehlo.reduce applies '{op_name}', which is not a binary StableHLO op Loam reads")
    block = Block(arg_types=[*scalar_types, *scalar_types])
    combine = op_type.create(operands=list(block.args), result_types=[scalar_types[0]])
    block.add_ops([combine, ReturnOp.create(operands=list(combine.results))])
    return Region(block)


@irdl_op_definition
class GatherOp(IRDLOperation):
    """
    Slices of `operand` at the positions `start_indices` holds (JAX prints it in the generic form).

    Syntax: `"stablehlo.gather"(%table, %ids) <{dimension_numbers = #stablehlo.gather<...>,
    slice_sizes = array<i64: 1, 8>}> : (tensor<11x8xf32>, tensor<?x6x1xi32>) -> tensor<?x6x8xf32>`
    """

    name = "stablehlo.gather"

    operand = operand_def()
    start_indices = operand_def()
    result = result_def()
    dimension_numbers = prop_def(GatherDimensionNumbersAttr)
    slice_sizes = prop_def(DenseArrayBase)
    indices_are_sorted = opt_prop_def(BoolAttr)

    @property
    def sizes(self) -> tuple[int, ...]:
        return _ints(self.slice_sizes)

    def verify_(self) -> None:
        src = ranked(self.operand, "stablehlo.gather operand")
        idx = ranked(self.start_indices, "stablehlo.gather start indices")
        ranked(self.result, "stablehlo.gather result")
        if not isinstance(idx.element_type, IntegerType):
            raise VerifyException(f"stablehlo.gather start indices must be integers, got {idx}")
        if len(_ints(self.slice_sizes)) != len(src.get_shape()):
            raise VerifyException(f"stablehlo.gather: one slice size per dim of {src}")


# --------------------------------------------------------------------------------------------------
# Calls the JAX exporter adds


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


StableHLO = Dialect(
    "stablehlo",
    [
        AddOp,
        SubtractOp,
        MultiplyOp,
        DivideOp,
        MaximumOp,
        MinimumOp,
        PowerOp,
        AndOp,
        OrOp,
        NegateOp,
        AbsOp,
        ExponentialOp,
        LogOp,
        TanhOp,
        LogisticOp,
        SqrtOp,
        RsqrtOp,
        NotOp,
        ConvertOp,
        SelectOp,
        CompareOp,
        ConstantOp,
        BroadcastInDimOp,
        DynamicBroadcastInDimOp,
        ReshapeOp,
        DynamicReshapeOp,
        TransposeOp,
        ConcatenateOp,
        SliceOp,
        IotaOp,
        DynamicIotaOp,
        GetDimensionSizeOp,
        DotGeneralOp,
        ReduceOp,
        ReturnOp,
        GatherOp,
        CustomCallOp,
    ],
    [ComparisonDirectionAttr, ComparisonTypeAttr, PrecisionAttr, DotDimensionNumbersAttr, GatherDimensionNumbersAttr],
)
"""The ops Loam reads; `loam.frontends.stablehlo` says what each one becomes in the graph dialect."""
