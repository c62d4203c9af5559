"""Control flow: `kernel.if` (ONNX If, one block per branch), `kernel.loop` (ONNX Loop, one body
block) and `kernel.yield` (the values a branch gives the If's results, or a body the next iteration),
listed in `CONTROL_OPS`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    prop_def,
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
class LoopOp(KernelOp):
    """ONNX Loop: run the body block while the trip count and the condition allow.

    Operands: the max trip count (one i64) where `has_trip` is 1, the condition (one bool) where
    `has_cond` is 1, then the initial loop-carried values.  The body's arguments are the iteration
    number (i64, rank 0), the condition (bool, rank 0) and the carried values; it ends in
    `kernel.yield` of the condition, the carried values and the scan outputs, and reads values of the
    enclosing program directly.  Results: the final carried values, then each scan output stacked
    along a new first axis.  Printed in the generic form.
    """

    name = "kernel.loop"

    inputs = var_operand_def()
    outputs = var_result_def()
    node = node_prop()
    has_trip = prop_def(IntegerAttr)
    has_cond = prop_def(IntegerAttr)
    body = region_def("single_block")

    irdl_options = (ParsePropInAttrDict(),)

    def __init__(
        self,
        trip: SSAValue | None,
        cond: SSAValue | None,
        carried: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        node: str,
        body: Region,
    ) -> None:
        operands = [v for v in (trip, cond) if v is not None] + list(carried)
        super().__init__(
            operands=[operands],
            result_types=[list(result_types)],
            properties={
                "node": StringAttr(node),
                "has_trip": IntegerAttr(int(trip is not None), i64),
                "has_cond": IntegerAttr(int(cond is not None), i64),
            },
            regions=[body],
        )

    @property
    def trip(self) -> SSAValue | None:
        return self.inputs[0] if self.has_trip.value.data else None

    @property
    def cond(self) -> SSAValue | None:
        return self.inputs[self.has_trip.value.data] if self.has_cond.value.data else None

    @property
    def carried(self) -> Sequence[SSAValue]:
        return self.inputs[self.has_trip.value.data + self.has_cond.value.data :]

    def verify_(self) -> None:
        block = self.body.block
        carried = len(self.carried)
        if len(block.args) != 2 + carried:
            raise VerifyException(
                f"kernel.loop '{self.node.data}': the body takes {len(block.args)} arguments for {carried} "
                "carried values (needs the iteration number and the condition first)"
            )
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException(f"kernel.loop '{self.node.data}': the body must end in kernel.yield")
        if len(last.values) != 1 + len(self.outputs):
            raise VerifyException(
                f"kernel.loop '{self.node.data}': the body yields {len(last.values)} values for the condition "
                f"and {len(self.outputs)} results"
            )


@irdl_op_definition
class YieldOp(IRDLOperation):
    """The values a `kernel.if` block gives its results, or a `kernel.loop` body the next iteration
    (the condition, the carried values, then the scan outputs).

    Syntax: `kernel.yield %a, %b : A, B`
    """

    name = "kernel.yield"

    values = var_operand_def()

    traits = traits_def(IsTerminator(), HasParent(IfOp, LoopOp))
    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, values: Sequence[SSAValue | Operation]) -> None:
        super().__init__(operands=[values])


CONTROL_OPS: tuple[type[IRDLOperation], ...] = (IfOp, LoopOp, YieldOp)
