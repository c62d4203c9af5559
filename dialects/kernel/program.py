"""The `kernel` program and its leaves: `kernel.program` (the body of `forward`), `kernel.return`
(forward's outputs, with their ONNX names), `kernel.weight` (an initializer read from `Weights`) and
`kernel.constant` (a folded tensor literal).

These are the ops that compute nothing: they hold the program together and give it the values the
kernels read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from loam.dialects.kernel.base import KernelOp, node_prop


@irdl_op_definition
class ProgramOp(IRDLOperation):
    """The body of `forward`.

    Syntax: `kernel.program "NAME" (%arg : TYPE, ...) names ["onnx_input", ...] [attributes {...}] { ... }`

    The block arguments are forward's inputs in order, `input_names` their ONNX names; the body
    ends in `kernel.return`.  `model` (optional) names the model for the generated docstring.

    Example:
        kernel.program "forward" (%x : !tensor_axes.tensor<f32, [N: 2]>) names ["x"] {
          kernel.return %x names ["y"] : !tensor_axes.tensor<f32, [N: 2]>
        }
    """

    name = "kernel.program"

    sym_name = prop_def(StringAttr)
    input_names = prop_def(ArrayAttr[StringAttr])
    model = opt_prop_def(StringAttr)
    body = region_def("single_block")

    traits = traits_def(IsolatedFromAbove())

    def __init__(
        self,
        input_types: Sequence[Attribute],
        input_names: Sequence[str],
        body: Region | None = None,
        *,
        sym_name: str = "forward",
        model: str | None = None,
    ) -> None:
        if body is None:
            body = Region(Block(arg_types=input_types))
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(sym_name),
            "input_names": ArrayAttr([StringAttr(n) for n in input_names]),
        }
        if model is not None:
            props["model"] = StringAttr(model)
        super().__init__(properties=props, regions=[body])

    @property
    def block(self) -> Block:
        """The single block of the body."""
        return self.body.block

    @property
    def return_op(self) -> ReturnOp:
        """The terminator."""
        last = self.block.last_op
        assert isinstance(last, ReturnOp)
        return last

    def verify_(self) -> None:
        n_args = len(self.body.block.args) if self.body.blocks else 0
        if len(self.input_names) != n_args:
            raise VerifyException(f"kernel.program has {n_args} inputs but {len(self.input_names)} input names")
        if not self.body.blocks or not isinstance(self.body.block.last_op, ReturnOp):
            raise VerifyException("kernel.program must end in kernel.return")

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        sym_name = parser.parse_str_literal(" (the program's name)")
        args = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_argument)
        parser.parse_keyword("names")
        names = parser.parse_attribute()
        attrs = parser.parse_optional_attr_dict_with_keyword()
        body = parser.parse_region(args)
        props: dict[str, Attribute] = {"sym_name": StringAttr(sym_name), "input_names": names}
        extra = dict(attrs.data) if attrs is not None else {}
        if "model" in extra:
            props["model"] = extra.pop("model")
        op = cls.create(properties=props, attributes=extra, regions=[body])
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.sym_name.data)
        printer.print_string(" (")
        printer.print_list(self.body.block.args, printer.print_block_argument)
        printer.print_string(") names ")
        printer.print_attribute(self.input_names)
        extra: dict[str, Attribute] = dict(self.attributes)
        if self.model is not None:
            extra["model"] = self.model
        printer.print_op_attributes(extra, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)


@irdl_op_definition
class ReturnOp(IRDLOperation):
    """The outputs of `forward`, with their ONNX names.

    Syntax: `kernel.return %v, ... names ["onnx_output", ...] : TYPE, ...`

    Example:
        kernel.return %y, %z names ["y", "z"] : !tensor_axes.tensor<f32, [N: 2]>,
            !tensor_axes.tensor<f32, [N: 2]>
    """

    name = "kernel.return"

    outputs = var_operand_def()
    output_names = prop_def(ArrayAttr[StringAttr])

    traits = traits_def(IsTerminator(), HasParent(ProgramOp))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$outputs `names` $output_names attr-dict `:` type($outputs)"

    def __init__(self, outputs: Sequence[SSAValue | Operation], names: Sequence[str]) -> None:
        super().__init__(
            operands=[outputs],
            properties={"output_names": ArrayAttr([StringAttr(n) for n in names])},
        )

    def verify_(self) -> None:
        if not self.outputs:
            raise VerifyException("kernel.return needs at least one output")
        if len(self.outputs) != len(self.output_names):
            raise VerifyException(
                f"kernel.return has {len(self.outputs)} outputs but {len(self.output_names)} output names"
            )


@irdl_op_definition
class WeightOp(IRDLOperation):
    """An initializer, read from `Weights` by its ONNX name.

    Syntax: `kernel.weight "NAME" [= #graph.data<...>] : TYPE`

    With data the graph carries the value itself, so the module can embed it (`Weights.embedded()`).

    Example:
        %w = kernel.weight "fc1.weight" : !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>
    """

    name = "kernel.weight"

    weight_name = prop_def(StringAttr)
    data = opt_prop_def(Attribute)
    result = result_def()

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$weight_name (`=` qualified($data)^)? attr-dict `:` type($result)"

    def __init__(self, weight_name: str, result_type: Attribute, data: Attribute | None = None) -> None:
        props: dict[str, Attribute] = {"weight_name": StringAttr(weight_name)}
        if data is not None:
            props["data"] = data
        super().__init__(properties=props, result_types=[result_type])


@irdl_op_definition
class ConstantOp(KernelOp):
    """A folded tensor literal (a `#graph.data` value).

    Syntax: `kernel.constant #graph.data<...> {node = "NODE"} : TYPE`

    Example:
        %p = kernel.constant #graph.data<i64, [3], ...> {node = "pos/Range"}
             : !tensor_axes.tensor<i64, [Seq: 3]>
    """

    name = "kernel.constant"

    value = prop_def(Attribute)
    node = node_prop()
    result = result_def()

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "qualified($value) attr-dict `:` type($result)"

    def __init__(self, value: Attribute, result_type: Attribute, node: str) -> None:
        super().__init__(properties={"value": value, "node": StringAttr(node)}, result_types=[result_type])
