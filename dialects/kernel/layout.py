"""Kernels that move elements without computing any: `kernel.permute` (ONNX Transpose) and
`kernel.regroup` (Reshape, Flatten, Squeeze, Unsqueeze: the same elements, row-major, under new
extents).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

from xdsl.dialects.builtin import DenseArrayBase, StringAttr, UnitAttr, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def, prop_def, result_def, traits_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from loam.core.poly import Poly
from loam.dialects.kernel.base import KernelOp, OneInputOp, element_count, extents_of, node_prop, same_count


@irdl_op_definition
class PermuteOp(KernelOp):
    """ONNX Transpose: result axis `i` is input axis `perm[i]`.

    Syntax: `kernel.permute %x [P, ...] {node = "NODE"} : T -> R`

    Example:
        %t = kernel.permute %w [1, 0] {node = "t"} : !tensor_axes.tensor<f32, [A: 2, B: 3]>
             -> !tensor_axes.tensor<f32, [B: 3, A: 2]>
    """

    name = "kernel.permute"

    input = operand_def()
    perm = prop_def(DenseArrayBase)
    node = node_prop()
    result = result_def()

    traits = traits_def(Pure())

    def __init__(self, input: SSAValue | Operation, perm: Sequence[int], result_type: Attribute, node: str):
        super().__init__(
            operands=[input],
            properties={"perm": DenseArrayBase.from_list(i64, list(perm)), "node": StringAttr(node)},
            result_types=[result_type],
        )

    @property
    def permutation(self) -> tuple[int, ...]:
        """`perm` as Python ints."""
        return tuple(int(p) for p in self.perm.get_values())

    def verify_(self) -> None:
        perm = self.permutation
        ext = extents_of(self.input.type)
        rank = len(ext) if ext is not None else len(perm)
        if sorted(perm) != list(range(rank)):
            raise VerifyException(
                f"kernel.permute '{self.node.data}': {list(perm)} is not a permutation of rank {rank}"
            )
        out = extents_of(self.result.type)
        if ext is not None and out is not None and list(out) != [ext[p] for p in perm]:
            raise VerifyException(
                f"kernel.permute '{self.node.data}': result extents do not follow permutation {list(perm)}"
            )

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        x = parser.parse_unresolved_operand()
        perm = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False)
        )
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        input_type = parser.parse_type()
        parser.parse_punctuation("->")
        result_type = parser.parse_type()
        props: dict[str, Attribute] = {"perm": DenseArrayBase.from_list(i64, perm)}
        if "node" in attrs:
            props["node"] = attrs.pop("node")
        operand = parser.resolve_operand(x, input_type)
        return cls.create(operands=[operand], properties=props, attributes=attrs, result_types=[result_type])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.input)
        printer.print_string(" [" + ", ".join(str(p) for p in self.permutation) + "]")
        printer.print_op_attributes({"node": self.node, **self.attributes})
        printer.print_string(" : ")
        printer.print_attribute(self.input.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)


def _owed_count(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether two element counts differ only as stage 0 owes them equal: one holds a derived symbol
    (a Reshape's -1 rounded down, `floordiv(N, 3)`), whose count forward checks before any kernel."""
    from loam.core.poly import derived_call

    pa, pb = Poly.lift(element_count(a)), Poly.lift(element_count(b))
    return any(derived_call(n) is not None for n in pa.symbols | pb.symbols)


@irdl_op_definition
class RegroupOp(OneInputOp):
    """ONNX Reshape/Flatten/Squeeze/Unsqueeze: the same elements in row-major order, regrouped.

    Syntax: `kernel.regroup %x {node = "NODE"} : T -> R`

    Example:
        %f = kernel.regroup %x {node = "flat"} : !tensor_axes.tensor<f32, [C: 2, W: 3]>
             -> !tensor_axes.tensor<f32, [(C W): 6]>
    """

    name = "kernel.regroup"

    # Set on the regroup of an outer value a branch reads at lengths it owes equal to the value's
    # own (`shape_poly.alias`): the counts differ in spelling only, and the owed check runs first.
    owed_equal = opt_prop_def(UnitAttr)

    def verify_(self) -> None:
        a, r = extents_of(self.input.type), extents_of(self.result.type)
        if a is None or r is None or self.owed_equal is not None:
            return
        if not same_count(a, r) and not _owed_count(a, r):
            raise VerifyException(
                f"kernel.regroup '{self.node.data}': {element_count(a)} elements cannot regroup into {element_count(r)}"
            )
