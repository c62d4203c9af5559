"""Elementwise kernels: `kernel.zip` (an `Expr` over operands broadcast, ONNX-style, to the result)
and `kernel.cast` (the same extents in another element type).

The `fuse` pass composes chains of zips into one zip, and a backend prints a zip's `Expr` as numpy
or WGSL.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import ParsePropInAttrDict, irdl_op_definition, prop_def, result_def, traits_def, var_operand_def
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from loam.dialects.expr import Expr
from loam.dialects.kernel.attributes import ExprAttr
from loam.dialects.kernel.base import KernelOp, OneInputOp, check_broadcast, extents_of, node_prop, same_extents


@irdl_op_definition
class ZipOp(KernelOp):
    """Elementwise: the operands broadcast (ONNX multidirectional) to the result, then `expr`.

    `expr` may leave an operand unread (a constant over an operand's extents, `#kernel.expr<[const
    0.0 : f32]>`); the result is still a new array of its own extents, never the unread operand.

    Syntax: `kernel.zip(%a, ...) #kernel.expr<[...]> {node = "NODE"} : (A, ...) -> R`

    Example:
        %y = kernel.zip(%x, %b) #kernel.expr<[operand 0, operand 1, add 0 1, relu 2]> {node = "fc1"}
             : (!tensor_axes.tensor<f32, [B: 4, H: 16]>, !tensor_axes.tensor<f32, [H: 16]>)
             -> !tensor_axes.tensor<f32, [B: 4, H: 16]>
    """

    name = "kernel.zip"

    inputs = var_operand_def()
    expr = prop_def(ExprAttr)
    node = node_prop()
    result = result_def()

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "`(` $inputs `)` qualified($expr) attr-dict `:` functional-type($inputs, $result)"

    def __init__(
        self, inputs: Sequence[SSAValue | Operation], expr: Expr | ExprAttr, result_type: Attribute, node: str
    ) -> None:
        if isinstance(expr, Expr):
            expr = ExprAttr(expr)
        # Operation's own constructor: IRDL's generic one checks every argument against the definition
        # first, about three times the cost of the op, at every node of a large graph; these are the
        # definition's already (one operand group, no segment sizes), and `verify` checks them as before.
        Operation.__init__(
            self,
            operands=[SSAValue.get(v) for v in inputs],
            result_types=[result_type],
            properties={"expr": expr, "node": StringAttr(node)},
        )

    def verify_(self) -> None:
        expr = self.expr.data
        n = len(self.inputs)
        if not expr.operand_indices <= frozenset(range(n)):
            raise VerifyException(
                f"kernel.zip '{self.node.data}': {n} operands but the expression reads operands "
                f"{sorted(expr.operand_indices)}"
            )
        check_broadcast(self.inputs, self.result, f"kernel.zip '{self.node.data}':")


@irdl_op_definition
class CastOp(OneInputOp):
    """ONNX Cast: the same extents, converted to the result's element type.

    Syntax: `kernel.cast %x {node = "NODE"} : T -> R`

    Example:
        %f = kernel.cast %ids {node = "c"} : !tensor_axes.tensor<i64, [N: 3]>
             -> !tensor_axes.tensor<f32, [N: 3]>
    """

    name = "kernel.cast"

    def verify_(self) -> None:
        a, r = extents_of(self.input.type), extents_of(self.result.type)
        if a is not None and r is not None and not same_extents(a, r):
            raise VerifyException(f"kernel.cast '{self.node.data}': a cast keeps the extents")
