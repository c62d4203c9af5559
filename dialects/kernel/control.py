"""Control flow: `kernel.if` (ONNX If, one block per branch) and `kernel.yield` (the values a branch
gives the If's results), listed in `CONTROL_OPS`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import HasParent, IsTerminator
from xdsl.utils.exceptions import VerifyException

from loam.dialects.kernel.base import KernelOp, node_prop


@irdl_op_definition
class IfOp(KernelOp):
    """ONNX If: run one of two blocks on a one-element bool; each ends in `kernel.yield`.

    The blocks read values of the enclosing program directly, and each starts with the owed
    conditions (`shape_poly.owe`) only its branch relies on.  A result's type is the If's output
    type; a yielded value may name an axis differently (the printer relabels nothing: types are
    descriptions, the data is the same).  Printed in the generic form.
    """

    name = "kernel.if"

    cond = operand_def()
    outputs = var_result_def()
    node = node_prop()
    then_region = region_def("single_block")
    else_region = region_def("single_block")

    irdl_options = (ParsePropInAttrDict(),)

    def __init__(
        self, cond: SSAValue | Operation, result_types: Sequence[Attribute], node: str, then: Region, other: Region
    ) -> None:
        super().__init__(
            operands=[cond],
            result_types=[list(result_types)],
            properties={"node": StringAttr(node)},
            regions=[then, other],
        )

    def verify_(self) -> None:
        for key, region in (("then", self.then_region), ("else", self.else_region)):
            last = region.block.last_op
            if not isinstance(last, YieldOp):
                raise VerifyException(f"kernel.if '{self.node.data}': the {key} block must end in kernel.yield")
            if len(last.values) != len(self.outputs):
                raise VerifyException(
                    f"kernel.if '{self.node.data}': the {key} block yields {len(last.values)} values "
                    f"for {len(self.outputs)} results"
                )


@irdl_op_definition
class YieldOp(IRDLOperation):
    """The values a `kernel.if` block gives its results.

    Syntax: `kernel.yield %a, %b : A, B`
    """

    name = "kernel.yield"

    values = var_operand_def()

    traits = traits_def(IsTerminator(), HasParent(IfOp))
    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, values: Sequence[SSAValue | Operation]) -> None:
        super().__init__(operands=[values])


CONTROL_OPS: tuple[type[IRDLOperation], ...] = (IfOp, YieldOp)
