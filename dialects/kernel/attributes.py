"""The `kernel` dialect's attributes: the computations its ops carry as data.

`#kernel.expr<[...]>` holds an `Expr` (`loam.dialects.expr`), the elementwise computation of a
`kernel.zip` or of a product's epilogue; `#kernel.tile_program<...>` holds a `TileProgram`
(`loam.dialects.tile_program`).  Both are data, never closures, so passes can compose them and each
backend prints them its own way.
"""

from __future__ import annotations

from xdsl.ir import Data
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer

from loam.dialects.expr import Expr
from loam.dialects.tile_program import TileProgram, parse_program


@irdl_attr_definition
class ExprAttr(Data[Expr]):
    """An `Expr` as an attribute.

    Syntax: `#kernel.expr<[operand 0, const 0.5 : f32, mul 0 1, tanh 2]>`
    """

    name = "kernel.expr"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> Expr:
        with parser.in_angle_brackets():
            return Expr.parse_steps(parser)

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string(f"<{self.data}>")


@irdl_attr_definition
class TileProgramAttr(Data[TileProgram]):
    """A `TileProgram` as an attribute (see `loam.dialects.tile_program`).

    Syntax: `#kernel.tile_program<tile 128, [program, param 0, iota, ...]>`
    """

    name = "kernel.tile_program"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> TileProgram:
        with parser.in_angle_brackets():
            return parse_program(parser)

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string(f"<{self.data}>")
