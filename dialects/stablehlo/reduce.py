"""`stablehlo.reduce` and `stablehlo.return`, the terminator of its body.

The body is written out (`reducer(%a: ..., %b: ...) { ... }`) or, when it is one binary op on its
two arguments, shortened to `applies stablehlo.OP`; the parse and print here handle both by hand.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DenseArrayBase
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    SameVariadicOperandSize,
    irdl_op_definition,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import IsTerminator
from xdsl.utils.exceptions import VerifyException

from loam.dialects.stablehlo.base import (
    compatible,
    i64_array,
    ints,
    parse_int_list,
    print_attrs,
    print_int_list,
    ranked,
)
from loam.dialects.stablehlo.elementwise import BinaryOp
from loam.dialects.stablehlo.syntax import StableHLOOp


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
        return ints(self.dimensions)

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
        dims = parse_int_list(parser)
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
            properties={"dimensions": i64_array(dims)},
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
        print_int_list(printer, self.dims)
        print_attrs(printer, self)
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
            if not compatible(want, o.get_shape()) or o.element_type != t.element_type:
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
