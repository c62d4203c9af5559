"""The matrix product: `kernel.matmul` (ONNX MatMul, batch axes broadcast), with the optional
elementwise epilogue (bias, activation, residual) the `fuse` pass gives it.

Products over weights kept in a checkpoint's ggml blocks are library kernels, in `packed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from loam.dialects.expr import Expr
from loam.dialects.kernel.attributes import ExprAttr
from loam.dialects.kernel.base import (
    KernelOp,
    check_broadcast,
    extents_of,
    is_one,
    node_prop,
    same_extent,
    same_extents,
)


@irdl_op_definition
class MatmulOp(KernelOp):
    """ONNX MatMul (opset 13): a matrix product over the last two axes, batch axes broadcast.

    Ranks 1 to 4; a rank-1 operand is a row (lhs) or a column (rhs) whose unit axis the result drops.

    An optional `epilogue` (an elementwise `Expr`, put there by the `fuse` pass) is applied to the
    product before it is stored: its operand 0 is the product, operand i the `extras[i - 1]`, which
    broadcast to the product's extents (a bias, a residual).  The epilogue keeps the product's
    extents and element type, so a backend can compute it in the product's own buffer.

    Syntax: `kernel.matmul %a, %b [then #kernel.expr<...> (%extra, ...)] {node = "NODE"} : (A, B, ...) -> R`

    Example:
        %y = kernel.matmul %x, %w then #kernel.expr<[operand 0, operand 1, add 0 1, relu 2]> (%b)
             {node = "fc1"} : (!tensor_axes.tensor<f32, [B: 4, In: 8]>,
             !tensor_axes.tensor<f32, [In: 8, H: 16]>, !tensor_axes.tensor<f32, [H: 16]>)
             -> !tensor_axes.tensor<f32, [B: 4, H: 16]>
    """

    name = "kernel.matmul"

    lhs = operand_def()
    rhs = operand_def()
    extras = var_operand_def()
    epilogue = opt_prop_def(ExprAttr)
    node = node_prop()
    result = result_def()

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$lhs `,` $rhs (`then` qualified($epilogue)^ `(` $extras `)`)? attr-dict `:` functional-type(operands, results)"
    )

    def __init__(
        self,
        lhs: SSAValue | Operation,
        rhs: SSAValue | Operation,
        result_type: Attribute,
        node: str,
        epilogue: Expr | None = None,
        extras: Sequence[SSAValue | Operation] = (),
    ):
        props: dict[str, Attribute] = {"node": StringAttr(node)}
        if epilogue is not None:
            props["epilogue"] = ExprAttr(epilogue)
        super().__init__(operands=[lhs, rhs, list(extras)], properties=props, result_types=[result_type])

    def verify_(self) -> None:
        if self.epilogue is None:
            if self.extras:
                raise VerifyException(f"kernel.matmul '{self.node.data}': extra operands without an epilogue")
        else:
            reads = self.epilogue.data.operand_indices
            if reads - frozenset(range(1 + len(self.extras))) or len(reads) != 1 + len(self.extras):
                raise VerifyException(
                    f"kernel.matmul '{self.node.data}': the epilogue reads operands {sorted(reads)}, "
                    f"but the product and {len(self.extras)} extras are operands 0 to {len(self.extras)}"
                )
            check_broadcast(self.extras, self.result, f"kernel.matmul '{self.node.data}' extra")
        a, b, r = (extents_of(v.type) for v in (self.lhs, self.rhs, self.result))
        if a is None or b is None or r is None:
            return
        for side, ext in (("lhs", a), ("rhs", b)):
            if not 1 <= len(ext) <= 4:
                raise VerifyException(f"kernel.matmul '{self.node.data}': {side} has rank {len(ext)}, not 1 to 4")
        k_a = a[-1]
        k_b = b[0] if len(b) == 1 else b[-2]
        if not same_extent(k_a, k_b):
            raise VerifyException(
                f"kernel.matmul '{self.node.data}': contraction extents disagree: lhs {k_a}, rhs {k_b}"
            )
        batch_a, batch_b = a[:-2], b[:-2]
        batch: list[Any] = []
        for i in range(max(len(batch_a), len(batch_b))):
            ea = batch_a[len(batch_a) - 1 - i] if i < len(batch_a) else None
            eb = batch_b[len(batch_b) - 1 - i] if i < len(batch_b) else None
            if ea is None or (eb is not None and is_one(ea)):
                batch.append(eb)
            elif eb is None or is_one(eb) or same_extent(ea, eb):
                batch.append(ea)
            else:
                raise VerifyException(f"kernel.matmul '{self.node.data}': batch extents {ea} and {eb} do not broadcast")
        expected = [*reversed(batch)]
        if len(a) > 1:
            expected.append(a[-2])
        if len(b) > 1:
            expected.append(b[-1])
        if not same_extents(list(r), expected):
            raise VerifyException(
                f"kernel.matmul '{self.node.data}': result extents [{', '.join(map(str, r))}] "
                f"should be [{', '.join(map(str, expected))}]"
            )
