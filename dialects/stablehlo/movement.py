"""The StableHLO ops that make, reshape and move tensors: `constant`, `broadcast_in_dim` (and its
dynamic form), `reshape` (and its dynamic form), `transpose`, `concatenate`, `slice`, `iota` (and its
dynamic form), `get_dimension_size`, `pad` and `reverse`.
dynamic form), `reshape` (and its dynamic form), `transpose`, `reverse`, `concatenate`, `slice`,
`iota` (and its dynamic form) and `get_dimension_size`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DYNAMIC_INDEX, DenseArrayBase, DenseIntOrFPElementsAttr, IntegerAttr, IntegerType
from xdsl.ir import SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.irdl.declarative_assembly_format import (
    AttributeVariable,
    CustomDirective,
    ParsingState,
    PrintingState,
    VariadicOperandVariable,
    irdl_custom_directive,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from loam.dialects.stablehlo.base import (
    compatible,
    i64_array,
    ints,
    parse_int_list,
    print_attrs,
    print_int_list,
    ranked,
    shape_of,
)
from loam.dialects.stablehlo.syntax import StableHLOOp


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
        print_attrs(printer, self)
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
        return ints(self.broadcast_dimensions)

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
            by_name[key].set(state, i64_array(parse_int_list(parser)))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        for variable in (self.expanding, self.nonexpanding):
            if (attr := variable.get(op)) is not None:
                printer.print_string(f", {variable.name} = ")
                print_int_list(printer, ints(attr))


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

    custom_directives = (*StableHLOOp.custom_directives, KnownDimensions)
    assembly_format = (
        "$operand `,` $output_dimensions `,` `dims` `=` custom<IntList>($broadcast_dimensions)"
        " custom<KnownDimensions>($known_expanding_dimensions, $known_nonexpanding_dimensions)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    @property
    def dims(self) -> tuple[int, ...]:
        return ints(self.broadcast_dimensions)

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
        return ints(self.permutation)

    def verify_(self) -> None:
        src, out = ranked(self.operand, "stablehlo.transpose operand"), ranked(self.result, "result")
        perm = self.perm
        if sorted(perm) != list(range(len(src.get_shape()))):
            raise VerifyException(
                f"stablehlo.transpose: dims {list(perm)} are not a permutation of rank {len(src.get_shape())}"
            )
        want = [src.get_shape()[p] for p in perm]
        if not compatible(want, out.get_shape()) or src.element_type != out.element_type:
            raise VerifyException(f"stablehlo.transpose: {src} permuted by {list(perm)} is not {out}")


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

    custom_directives = (*StableHLOOp.custom_directives, CommaTerminatedOperands)
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
            if not compatible(a, b):
                raise VerifyException(
                    f"stablehlo.concatenate operand {i} is {t}; it must match {out} off dim {self.dim}"
                )


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
            variable.set(state, i64_array([r[i] for r in ranges]))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        starts, limits, strides = (ints(v.get(op)) for v in (self.start_indices, self.limit_indices, self.strides))
        parts = [f"{a}:{b}" + (f":{c}" if c != 1 else "") for a, b, c in zip(starts, limits, strides, strict=True)]
        state.print_whitespace(printer)
        printer.print_string("[" + ", ".join(parts) + "]")


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

    custom_directives = (*StableHLOOp.custom_directives, SliceRanges)
    assembly_format = (
        "$operand custom<SliceRanges>($start_indices, $limit_indices, $strides)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    @property
    def ranges(self) -> list[tuple[int, int, int]]:
        return list(zip(ints(self.start_indices), ints(self.limit_indices), ints(self.strides), strict=True))

    def verify_(self) -> None:
        src, out = ranked(self.operand, "stablehlo.slice operand"), ranked(self.result, "result")
        shape = src.get_shape()
        starts, limits, strides = ints(self.start_indices), ints(self.limit_indices), ints(self.strides)
        if not len(starts) == len(limits) == len(strides) == len(shape):
            raise VerifyException(f"stablehlo.slice: one start, limit and stride per dim of {src}")
        want: list[int] = []
        for i, (a, b, c) in enumerate(zip(starts, limits, strides, strict=True)):
            if c < 1 or a < 0 or b < a or (shape[i] != DYNAMIC_INDEX and b > shape[i]):
                raise VerifyException(f"stablehlo.slice: {a}:{b}:{c} is not a slice of dim {i} of {src}")
            want.append(-(-(b - a) // c))
        if not compatible(want, out.get_shape()) or src.element_type != out.element_type:
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


@irdl_op_definition
class PadOp(StableHLOOp):
    """
    `operand` with `low`/`high` elements of `padding_value` before/after each dim (negative: cut off)
    and `interior` ones between neighbours.

    Syntax: `stablehlo.pad %x, %v, low = [1, 0], high = [2, -1], interior = [0, 1]
                 : (tensor<3x4xf32>, tensor<f32>) -> tensor<6x6xf32>`
    """

    name = "stablehlo.pad"

    operand = operand_def()
    padding_value = operand_def()
    result = result_def()
    edge_padding_low = prop_def(DenseArrayBase)
    edge_padding_high = prop_def(DenseArrayBase)
    interior_padding = prop_def(DenseArrayBase)

    assembly_format = (
        "$operand `,` $padding_value `,` `low` `=` custom<IntList>($edge_padding_low)"
        " `,` `high` `=` custom<IntList>($edge_padding_high) `,` `interior` `=` custom<IntList>($interior_padding)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    @property
    def widths(self) -> list[tuple[int, int, int]]:
        """(low, high, interior) per dim."""
        return list(
            zip(ints(self.edge_padding_low), ints(self.edge_padding_high), ints(self.interior_padding), strict=True)
        )

    def verify_(self) -> None:
        src, out = ranked(self.operand, "stablehlo.pad operand"), ranked(self.result, "result")
        value = ranked(self.padding_value, "stablehlo.pad padding value")
        shape = src.get_shape()
        if value.get_shape() or value.element_type != src.element_type:
            raise VerifyException(f"stablehlo.pad: the padding value must be a scalar of {src.element_type}")
        lows, highs, interiors = (
            ints(a) for a in (self.edge_padding_low, self.edge_padding_high, self.interior_padding)
        )
        if not len(lows) == len(highs) == len(interiors) == len(shape):
            raise VerifyException(f"stablehlo.pad: one low, high and interior width per dim of {src}")
        want: list[int] = []
        for i, (lo, hi, inner) in enumerate(zip(lows, highs, interiors, strict=True)):
            if inner < 0:
                raise VerifyException(f"stablehlo.pad: interior padding {inner} of dim {i} is negative")
            if shape[i] == DYNAMIC_INDEX:
                want.append(DYNAMIC_INDEX)
                continue
            extent = lo + shape[i] + max(shape[i] - 1, 0) * inner + hi
            if extent < 0:
                raise VerifyException(f"stablehlo.pad: dim {i} of {src} padded by {lo}, {hi}, {inner} is negative")
            want.append(extent)
        if not compatible(want, out.get_shape()) or src.element_type != out.element_type:
            raise VerifyException(f"stablehlo.pad: padding {src} gives shape {want}, not {out}")


@irdl_op_definition
class ReverseOp(StableHLOOp):
    """
    `operand` with the order of its elements along `dimensions` reversed.

    Syntax: `stablehlo.reverse %x, dims = [0] : tensor<3x4xf32>`
    """

    name = "stablehlo.reverse"

    operand = operand_def()
    result = result_def()
    dimensions = prop_def(DenseArrayBase)

    assembly_format = (
        "$operand `,` `dims` `=` custom<IntList>($dimensions)"
        " attr-dict `:` custom<SameOperandsAndResultType>(type(operands), type(results))"
    )

    @property
    def dims(self) -> tuple[int, ...]:
        return ints(self.dimensions)

    def verify_(self) -> None:
        src, out = ranked(self.operand, "stablehlo.reverse operand"), ranked(self.result, "result")
        rank = len(src.get_shape())
        if len(set(self.dims)) != len(self.dims) or any(not 0 <= d < rank for d in self.dims):
            raise VerifyException(f"stablehlo.reverse: dims {list(self.dims)} of rank {rank}")
        if not compatible(src.get_shape(), out.get_shape()) or src.element_type != out.element_type:
            raise VerifyException(f"stablehlo.reverse: {src} reversed is not {out}")
