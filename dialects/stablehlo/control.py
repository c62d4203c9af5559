"""The StableHLO control-flow ops: `while` (JAX's `lax.while_loop`, `fori_loop` and `scan`) and `case`
(`lax.cond`, `lax.switch`).  Their regions end in `stablehlo.return` (`loam.dialects.stablehlo.reduce`).

`while` has MLIR's custom form, which names the loop-carried values in its header; both regions
take them as block arguments:

    %r:2 = stablehlo.while(%i = %c0, %x = %x0) : tensor<i32>, tensor<4xf32>
     cond { ... stablehlo.return %p : tensor<i1> }
     do { ... stablehlo.return %i1, %x1 : tensor<i32>, tensor<4xf32> }

`case` has none: JAX prints it in the generic form, `"stablehlo.case"(%index) ({...}, {...}) : ...`.
Both print in the generic form.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntegerType, TensorType
from xdsl.ir import Attribute, Block, Region
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    region_def,
    var_operand_def,
    var_region_def,
    var_result_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.utils.exceptions import VerifyException

from loam.dialects.stablehlo.base import compatible, ranked
from loam.dialects.stablehlo.reduce import ReturnOp


def _returned(block: Block, what: str) -> ReturnOp:
    last = block.last_op
    if not isinstance(last, ReturnOp):
        raise VerifyException(f"{what} must end in stablehlo.return")
    return last


def _same_types(types: Sequence[Attribute], want: Sequence[Attribute], what: str) -> None:
    """`types` are `want`, one for one (a `?` matching any extent)."""
    if len(types) != len(want):
        raise VerifyException(f"{what} gives {len(types)} values, not {len(want)}")
    for i, (t, w) in enumerate(zip(types, want, strict=True)):
        if not isinstance(t, TensorType) or not isinstance(w, TensorType):
            raise VerifyException(f"{what}: value {i} is {t}, not a ranked tensor {w}")
        if t.element_type != w.element_type or not compatible(t.get_shape(), w.get_shape()):
            raise VerifyException(f"{what}: value {i} is {t}, not {w}")


@irdl_op_definition
class WhileOp(IRDLOperation):
    """
    Runs `body` on the carried values while `cond` of them holds; the results are the last values.

    Syntax: `stablehlo.while(%a = %x, ...) : T, ... cond { ... } do { ... }`, or the generic form.
    """

    name = "stablehlo.while"

    operands_ = var_operand_def()
    outs = var_result_def()
    cond = region_def("single_block")
    body = region_def("single_block")

    @classmethod
    def parse(cls, parser: Parser) -> WhileOp:
        def binding() -> tuple[Parser.UnresolvedArgument, UnresolvedOperand]:
            name = parser.parse_argument(expect_type=False)
            parser.parse_punctuation("=")
            return name, parser.parse_unresolved_operand()

        pairs = parser.parse_comma_separated_list(parser.Delimiter.PAREN, binding)
        parser.parse_punctuation(":")
        position = parser.pos
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type) if pairs else []
        values = parser.resolve_operands([p[1] for p in pairs], types, position)
        attributes = parser.parse_optional_attr_dict_with_keyword()
        regions: list[Region] = []
        for keyword in ("cond", "do"):
            parser.parse_keyword(keyword)
            regions.append(parser.parse_region([p[0].resolve(t) for p, t in zip(pairs, types, strict=True)]))
        return cls.create(
            operands=values,
            result_types=types,
            attributes=dict(attributes.data) if attributes is not None else {},
            regions=regions,
        )

    def verify_(self) -> None:
        types = [v.type for v in self.operands]
        _same_types([r.type for r in self.outs], types, "stablehlo.while results")
        for region, what in ((self.cond, "cond"), (self.body, "body")):
            _same_types([a.type for a in region.block.args], types, f"stablehlo.while {what} arguments")
        pred = _returned(self.cond.block, "stablehlo.while cond").values
        if len(pred) != 1:
            raise VerifyException(f"stablehlo.while cond returns {len(pred)} values, not one i1")
        p = ranked(pred[0], "stablehlo.while cond value")
        if p.get_shape() or p.element_type != IntegerType(1):
            raise VerifyException(f"stablehlo.while cond returns {p}, not tensor<i1>")
        returned = _returned(self.body.block, "stablehlo.while body").values
        _same_types([v.type for v in returned], types, "stablehlo.while body")


@irdl_op_definition
class CaseOp(IRDLOperation):
    """
    Runs the branch `index` picks (the last one for an index out of range); its results are the op's.

    Syntax (generic only): `"stablehlo.case"(%i) ({ ... }, { ... }) : (tensor<i32>) -> tensor<4xf32>`
    """

    name = "stablehlo.case"

    index = operand_def()
    outs = var_result_def()
    branches = var_region_def("single_block")

    def verify_(self) -> None:
        i = ranked(self.index, "stablehlo.case index")
        if i.get_shape() or i.element_type != IntegerType(32):
            raise VerifyException(f"stablehlo.case index must be tensor<i32>, got {i}")
        if not self.branches:
            raise VerifyException("stablehlo.case has no branches")
        for k, branch in enumerate(self.branches):
            if branch.block.args:
                raise VerifyException(f"stablehlo.case branch {k} takes arguments; branches take none")
            returned = _returned(branch.block, f"stablehlo.case branch {k}").values
            _same_types([v.type for v in returned], [r.type for r in self.outs], f"stablehlo.case branch {k}")
