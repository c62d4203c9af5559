"""The StableHLO op that contracts dims: `dot_general`, with its `batching_dims`/`contracting_dims`
syntax (`gather`, which reads slices at positions an index tensor holds, is in `indexing`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import DYNAMIC_INDEX, ArrayAttr
from xdsl.ir import Attribute
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, opt_prop_def, prop_def, result_def
from xdsl.irdl.declarative_assembly_format import (
    AttributeVariable,
    CustomDirective,
    ParsingState,
    PrintingState,
    irdl_custom_directive,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from loam.dialects.stablehlo.attributes import DotDimensionNumbersAttr, PrecisionAttr
from loam.dialects.stablehlo.base import compatible, parse_int_list, ranked
from loam.dialects.stablehlo.syntax import StableHLOOp


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
                lhs = parse_int_list(parser)
                parser.parse_keyword("x")
                pairs[key] = (lhs, parse_int_list(parser))
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

    custom_directives = (*StableHLOOp.custom_directives, DotDimensionNumbers)
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
        if not compatible(want, out.get_shape()):
            raise VerifyException(f"stablehlo.dot_general: {lhs} and {rhs} give shape {want}, not {out}")
