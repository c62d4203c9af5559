"""The `kernel` dialect: what the generated module computes, one kernel call per op.

A `kernel.program` is the body of `forward`: its block arguments are forward's inputs, its ops
run in order, and `kernel.return` hands back the outputs.  Every value is typed
`!tensor_axes.tensor<...>` (the op definitions accept any type, so this module does not import
`tensor_axes`; verifiers read `.axes` where the type has them, and the backends require it).
Every compute op carries `node`, the ONNX node it computes, for comments and the fusion report.

Example:

```mlir
kernel.program "forward" (%x : !tensor_axes.tensor<f32, [Batch: 4, In: 8]>) names ["x"] {
  %w = kernel.weight "fc1.weight" : !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>
  %b = kernel.weight "fc1.bias" : !tensor_axes.tensor<f32, [Hidden: 16]>
  %0 = kernel.matmul %x, %w {node = "fc1"} : (...) -> !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>
  %1 = kernel.zip(%0, %b) #kernel.expr<[operand 0, operand 1, add 0 1, relu 2]> {node = "fc1"}
       : (...) -> !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>
  kernel.return %1 names ["y"] : !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>
}
```

An elementwise computation is an `Expr`: data, never a closure, so fusion can compose it and a
backend can print it as numpy or WGSL.  `#kernel.expr<[step, ...]>` lists its steps; each step is
`operand I`, `const V : ELEM`, `UNARY J`, `BINARY J K`, `select C A B` or `cast J : ELEM`, reading
earlier steps by index; the last step is the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Self

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Block, Data, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from loam.dialects.expr import Expr
from loam.dialects.shape_poly import ExtentAttr
from loam.dialects.tile_program import TileProgram, parse_program
from loam.poly import Poly


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


# ---------------------------------------------------------------------------------------------
# Type helpers (duck-typed: `!tensor_axes.tensor` has `.elem` and `.axes`)
# ---------------------------------------------------------------------------------------------


def _extents(t: Attribute) -> tuple[Any, ...] | None:
    """The extents (Polys) of a tensor_axes type, or None for a type without axes."""
    axes = getattr(t, "axes", None)
    if axes is None:
        return None
    return tuple(a.extent for a in axes)


def _is_one(extent: Any) -> bool:
    return bool(extent.is_const) and extent.const_value == 1


def _product(extents: Sequence[Any]) -> Any:
    """The element count as a Poly, or the int 1 for rank 0."""
    total: Any = None
    for e in extents:
        total = e if total is None else total * e
    return 1 if total is None else total


def _same_count(a: Sequence[Any], b: Sequence[Any]) -> bool:
    pa, pb = _product(a), _product(b)
    if isinstance(pa, int) or isinstance(pb, int):
        other = pb if isinstance(pa, int) else pa
        return isinstance(other, int) or _is_one(other)
    return bool(pa == pb)


def _node_prop() -> Any:
    return prop_def(StringAttr)


class _KernelOp(IRDLOperation):
    """Shared helpers for ops with a `node` property."""

    @property
    def node_name(self) -> str:
        """The ONNX node this op computes."""
        node = self.properties.get("node")
        return node.data if isinstance(node, StringAttr) else ""


# ---------------------------------------------------------------------------------------------
# Ops
# ---------------------------------------------------------------------------------------------


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
class ConstantOp(_KernelOp):
    """A folded tensor literal (a `#graph.data` value).

    Syntax: `kernel.constant #graph.data<...> {node = "NODE"} : TYPE`

    Example:
        %p = kernel.constant #graph.data<i64, [3], ...> {node = "pos/Range"}
             : !tensor_axes.tensor<i64, [Seq: 3]>
    """

    name = "kernel.constant"

    value = prop_def(Attribute)
    node = _node_prop()
    result = result_def()

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "qualified($value) attr-dict `:` type($result)"

    def __init__(self, value: Attribute, result_type: Attribute, node: str) -> None:
        super().__init__(properties={"value": value, "node": StringAttr(node)}, result_types=[result_type])


def _check_broadcast(operands: Sequence[SSAValue], result: SSAValue, what: str) -> None:
    """Each of `operands` broadcasts (ONNX multidirectional) to `result`'s extents."""
    out = _extents(result.type)
    if out is None:
        return
    for i, v in enumerate(operands):
        ext = _extents(v.type)
        if ext is None:
            continue
        if len(ext) > len(out):
            raise VerifyException(f"{what} operand {i} has rank {len(ext)}, result {len(out)}")
        for j, e in enumerate(ext):
            o = out[len(out) - len(ext) + j]
            if e != o and not _is_one(e):
                raise VerifyException(f"{what} operand {i} axis {j} is {e}, which does not broadcast to {o}")


@irdl_op_definition
class MatmulOp(_KernelOp):
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
    node = _node_prop()
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
            _check_broadcast(self.extras, self.result, f"kernel.matmul '{self.node.data}' extra")
        a, b, r = (_extents(v.type) for v in (self.lhs, self.rhs, self.result))
        if a is None or b is None or r is None:
            return
        for side, ext in (("lhs", a), ("rhs", b)):
            if not 1 <= len(ext) <= 4:
                raise VerifyException(f"kernel.matmul '{self.node.data}': {side} has rank {len(ext)}, not 1 to 4")
        k_a = a[-1]
        k_b = b[0] if len(b) == 1 else b[-2]
        if k_a != k_b:
            raise VerifyException(
                f"kernel.matmul '{self.node.data}': contraction extents disagree: lhs {k_a}, rhs {k_b}"
            )
        batch_a, batch_b = a[:-2], b[:-2]
        batch: list[Any] = []
        for i in range(max(len(batch_a), len(batch_b))):
            ea = batch_a[len(batch_a) - 1 - i] if i < len(batch_a) else None
            eb = batch_b[len(batch_b) - 1 - i] if i < len(batch_b) else None
            if ea is None or (eb is not None and _is_one(ea)):
                batch.append(eb)
            elif eb is None or _is_one(eb) or ea == eb:
                batch.append(ea)
            else:
                raise VerifyException(f"kernel.matmul '{self.node.data}': batch extents {ea} and {eb} do not broadcast")
        expected = [*reversed(batch)]
        if len(a) > 1:
            expected.append(a[-2])
        if len(b) > 1:
            expected.append(b[-1])
        if list(r) != expected:
            raise VerifyException(
                f"kernel.matmul '{self.node.data}': result extents [{', '.join(map(str, r))}] "
                f"should be [{', '.join(map(str, expected))}]"
            )


@irdl_op_definition
class PermuteOp(_KernelOp):
    """ONNX Transpose: result axis `i` is input axis `perm[i]`.

    Syntax: `kernel.permute %x [P, ...] {node = "NODE"} : T -> R`

    Example:
        %t = kernel.permute %w [1, 0] {node = "t"} : !tensor_axes.tensor<f32, [A: 2, B: 3]>
             -> !tensor_axes.tensor<f32, [B: 3, A: 2]>
    """

    name = "kernel.permute"

    input = operand_def()
    perm = prop_def(DenseArrayBase)
    node = _node_prop()
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
        ext = _extents(self.input.type)
        rank = len(ext) if ext is not None else len(perm)
        if sorted(perm) != list(range(rank)):
            raise VerifyException(
                f"kernel.permute '{self.node.data}': {list(perm)} is not a permutation of rank {rank}"
            )
        out = _extents(self.result.type)
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


@irdl_op_definition
class ZipOp(_KernelOp):
    """Elementwise: the operands broadcast (ONNX multidirectional) to the result, then `expr`.

    Syntax: `kernel.zip(%a, ...) #kernel.expr<[...]> {node = "NODE"} : (A, ...) -> R`

    Example:
        %y = kernel.zip(%x, %b) #kernel.expr<[operand 0, operand 1, add 0 1, relu 2]> {node = "fc1"}
             : (!tensor_axes.tensor<f32, [B: 4, H: 16]>, !tensor_axes.tensor<f32, [H: 16]>)
             -> !tensor_axes.tensor<f32, [B: 4, H: 16]>
    """

    name = "kernel.zip"

    inputs = var_operand_def()
    expr = prop_def(ExprAttr)
    node = _node_prop()
    result = result_def()

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "`(` $inputs `)` qualified($expr) attr-dict `:` functional-type($inputs, $result)"

    def __init__(
        self, inputs: Sequence[SSAValue | Operation], expr: Expr | ExprAttr, result_type: Attribute, node: str
    ) -> None:
        if isinstance(expr, Expr):
            expr = ExprAttr(expr)
        super().__init__(
            operands=[inputs], properties={"expr": expr, "node": StringAttr(node)}, result_types=[result_type]
        )

    def verify_(self) -> None:
        expr = self.expr.data
        n = len(self.inputs)
        if expr.operand_indices != frozenset(range(n)):
            raise VerifyException(
                f"kernel.zip '{self.node.data}': {n} operands but the expression reads operands "
                f"{sorted(expr.operand_indices)}"
            )
        _check_broadcast(self.inputs, self.result, f"kernel.zip '{self.node.data}':")


class _OneInputOp(_KernelOp):
    """The shape of `kernel.cast` and `kernel.regroup`: one operand, one result, `node`.

    Syntax: `kernel.NAME %x {node = "NODE"} : T -> R`
    """

    input = operand_def()
    node = _node_prop()
    result = result_def()

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue | Operation, result_type: Attribute, node: str) -> None:
        super().__init__(operands=[input], properties={"node": StringAttr(node)}, result_types=[result_type])


@irdl_op_definition
class CastOp(_OneInputOp):
    """ONNX Cast: the same extents, converted to the result's element type.

    Syntax: `kernel.cast %x {node = "NODE"} : T -> R`

    Example:
        %f = kernel.cast %ids {node = "c"} : !tensor_axes.tensor<i64, [N: 3]>
             -> !tensor_axes.tensor<f32, [N: 3]>
    """

    name = "kernel.cast"

    def verify_(self) -> None:
        a, r = _extents(self.input.type), _extents(self.result.type)
        if a is not None and r is not None and a != r:
            raise VerifyException(f"kernel.cast '{self.node.data}': a cast keeps the extents")


def _owed_count(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether two element counts differ only as stage 0 owes them equal: one holds a derived symbol
    (a Reshape's -1 rounded down, `floordiv(N, 3)`), whose count forward checks before any kernel."""
    from loam.poly import derived_call

    pa, pb = Poly.lift(_product(a)), Poly.lift(_product(b))
    return any(derived_call(n) is not None for n in pa.symbols | pb.symbols)


@irdl_op_definition
class RegroupOp(_OneInputOp):
    """ONNX Reshape/Flatten/Squeeze/Unsqueeze: the same elements in row-major order, regrouped.

    Syntax: `kernel.regroup %x {node = "NODE"} : T -> R`

    Example:
        %f = kernel.regroup %x {node = "flat"} : !tensor_axes.tensor<f32, [C: 2, W: 3]>
             -> !tensor_axes.tensor<f32, [(C W): 6]>
    """

    name = "kernel.regroup"

    def verify_(self) -> None:
        a, r = _extents(self.input.type), _extents(self.result.type)
        if a is None or r is None:
            return
        if not _same_count(a, r) and not _owed_count(a, r):
            raise VerifyException(
                f"kernel.regroup '{self.node.data}': {_product(a)} elements cannot regroup into {_product(r)}"
            )


# ---------------------------------------------------------------------------------------------
# Library kernels: one op per computation the backends implement as one library function
# ---------------------------------------------------------------------------------------------

Param = int | float | str | Poly | tuple[int | Poly, ...] | tuple[float, ...]
"""A library kernel's parameter value: a number, a word, an extent only the run knows (a `Poly` over
the symbols forward binds, such as a Slice start `min(N, 8)`), or a list of numbers or extents."""


def param_attr(value: Param) -> Attribute:
    """`value` as the attribute that carries it (`1 : i64`, `5.0e-01 : f64`, `"max"`, `array<i64: 1, 2>`).

    A symbolic extent is `#shape_poly.extent<N - 1>`; a list holding one is an array of extents
    (`[#shape_poly.extent<0>, #shape_poly.extent<min(8, N)>]`), constants included, so one list
    keeps one kind.
    """
    if isinstance(value, bool):
        return IntegerAttr(int(value), i64)
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, Poly):
        return IntegerAttr(value.const_value, i64) if value.is_const else ExtentAttr(value)
    if isinstance(value, float):
        return FloatAttr(value, f64)
    if isinstance(value, str):
        return StringAttr(value)
    items = list(value)
    if any(isinstance(v, Poly) and not v.is_const for v in items):
        return ArrayAttr([ExtentAttr(Poly.lift(v)) for v in items])  # type: ignore[arg-type]
    items = [v.const_value if isinstance(v, Poly) else v for v in items]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        return DenseArrayBase.from_list(i64, [int(v) for v in items])
    return DenseArrayBase.from_list(f64, [float(v) for v in items])


def _extent_value(p: Poly) -> int | Poly:
    return p.const_value if p.is_const else p


def param_value(attr: Attribute) -> Param:
    """The Python value `attr` carries (the inverse of `param_attr`): an int for a constant extent,
    a `Poly` for a symbolic one."""
    if isinstance(attr, IntegerAttr):
        return int(attr.value.data)
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, ExtentAttr):
        return _extent_value(attr.data)
    if isinstance(attr, DenseArrayBase):
        values = attr.get_values()
        return tuple(int(v) for v in values) if attr.elt_type == i64 else tuple(float(v) for v in values)
    if isinstance(attr, ArrayAttr) and all(isinstance(a, ExtentAttr) for a in attr.data):
        return tuple(_extent_value(a.data) for a in attr.data)  # type: ignore[attr-defined]
    raise VerifyException(f"{attr} is not a kernel parameter (a number, a string, an extent or an array)")


def _param_kind_ok(value: Param, kind: type) -> bool:
    """Whether `value` is of the PARAMS kind `kind` (an extent only the run knows counts as an int)."""
    if kind is float and isinstance(value, int):
        return True
    if kind is int and isinstance(value, Poly):
        return True
    return isinstance(value, kind)


class LibraryOp(_KernelOp):
    """Base of the kernels a backend computes with one library function each.

    Syntax: `kernel.NAME(%a, ...) {node = "NODE", PARAM = VALUE, ...} : (A, ...) -> (R, ...)`

    `PARAMS` maps each parameter the kernel reads to its Python type (`int`, `float`, `str`,
    `tuple`); `OPTIONAL` lists those that may be absent.  An `int` parameter, or an item of a
    `tuple` one, may be an extent only the run knows (a `Poly`, carried as `#shape_poly.extent`).
    The parameters are plain attributes, so the generic and the custom form print them alike, and
    the numpy backend calls `kernel_NAME(operands..., PARAM=VALUE, ...)` (see
    `loam/runtime/kernels/`), computing a symbolic parameter from the bound symbols.
    """

    PARAMS: ClassVar[dict[str, type]] = {}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()

    inputs = var_operand_def()
    outputs = var_result_def()
    node = _node_prop()

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "`(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)"

    def __init__(
        self,
        inputs: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
        node: str,
        **params: Param,
    ) -> None:
        super().__init__(
            operands=[inputs],
            result_types=[list(result_types)],
            properties={"node": StringAttr(node)},
            attributes={k: param_attr(v) for k, v in params.items()},
        )

    @property
    def kernel_name(self) -> str:
        """The op's name without the dialect prefix (`conv` for `kernel.conv`)."""
        return self.name.split(".", 1)[1]

    @property
    def params(self) -> dict[str, Param]:
        """The parameters as Python values, in `PARAMS` order."""
        return {k: param_value(self.attributes[k]) for k in self.PARAMS if k in self.attributes}

    def param(self, key: str) -> Any:
        return param_value(self.attributes[key])

    def verify_(self) -> None:
        where = f"{self.name} '{self.node.data}'"
        for key in self.attributes:
            if key not in self.PARAMS:
                raise VerifyException(f"{where}: unknown parameter '{key}'")
        for key, kind in self.PARAMS.items():
            if key not in self.attributes:
                if key in self.OPTIONAL:
                    continue
                raise VerifyException(f"{where}: missing parameter '{key}'")
            value = param_value(self.attributes[key])
            if not _param_kind_ok(value, kind):
                raise VerifyException(f"{where}: parameter '{key}' must be {kind.__name__}, got {value!r}")
        self.verify_kernel()

    def verify_kernel(self) -> None:
        """Kernel-specific checks of operand and result types; override where there are any."""


# Each family below lists its ops in a tuple the dialect collects.  Keep one section per family.

# -- movement: transpose-free regrouping, slicing, concatenation, padding, tiling ---------------


def _library_types(op: LibraryOp) -> tuple[list[tuple[Any, ...] | None], list[tuple[Any, ...] | None]]:
    """The extents of a library op's operands and results (None for a type without axes)."""
    return [_extents(v.type) for v in op.inputs], [_extents(v.type) for v in op.outputs]


def _require(op: LibraryOp, ok: bool, message: str) -> None:
    if not ok:
        raise VerifyException(f"{op.name} '{op.node.data}': {message}")


@irdl_op_definition
class ConcatOp(LibraryOp):
    """ONNX Concat: the operands joined along `axis`; every other extent is shared.

    Example: `%y = kernel.concat(%a, %b) {node = "cat", axis = 1 : i64} : (A, B) -> R`
    """

    name = "kernel.concat"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int}

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, len(ins) >= 1 and len(outs) == 1, "takes one or more operands and gives one result")
        if any(e is None for e in (*ins, *outs)):
            return
        axis, out = self.param("axis"), outs[0]
        assert out is not None
        _require(self, 0 <= axis < len(out), f"axis {axis} is outside the result's rank {len(out)}")
        for i, ext in enumerate(ins):
            assert ext is not None
            same = len(ext) == len(out) and all(
                e == o for j, (e, o) in enumerate(zip(ext, out, strict=True)) if j != axis
            )
            _require(self, same, f"operand {i} does not match the result outside axis {axis}")


@irdl_op_definition
class SplitOp(LibraryOp):
    """ONNX Split: consecutive chunks of `sizes` elements along `axis`, one result per chunk.

    Example: `%a, %b = kernel.split(%x) {node = "s", axis = 0 : i64, sizes = array<i64: 2, 1>} : (X) -> (A, B)`
    """

    name = "kernel.split"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "sizes": tuple}

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        sizes = self.param("sizes")
        _require(self, len(ins) == 1 and len(outs) == len(sizes), "takes one operand and gives one result per size")


@irdl_op_definition
class SliceOp(LibraryOp):
    """ONNX Slice, normalised: per axis `counts[i]` elements from `starts[i]`, every `steps[i]`.

    Example: `%y = kernel.slice(%x) {node = "s", starts = array<i64: 1>, counts = array<i64: 2>,
    steps = array<i64: 1>} : (X) -> Y`; over a symbolic axis the starts and counts may be extents
    (`starts = [#shape_poly.extent<N - 2>]`), the steps are numbers.
    """

    name = "kernel.slice"
    PARAMS: ClassVar[dict[str, type]] = {"starts": tuple, "counts": tuple, "steps": tuple}

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, len(ins) == 1 and len(outs) == 1, "takes one operand and gives one result")
        starts, counts, steps = self.param("starts"), self.param("counts"), self.param("steps")
        _require(self, len(starts) == len(counts) == len(steps), "starts, counts and steps differ in length")
        _require(self, all(isinstance(s, int) and s != 0 for s in steps), "a step is 0 or not a number")
        out = outs[0]
        if out is not None:
            _require(self, len(out) == len(counts), "the result's rank differs from the slice's")
            same = all(e == Poly.lift(c) for e, c in zip(out, counts, strict=True))
            _require(self, same, "the result's extents are not the counts")


@irdl_op_definition
class PadOp(LibraryOp):
    """ONNX Pad: `pads` (begins, then ends, per axis; negative crops) in mode constant/reflect/edge/wrap.

    An optional second operand is the constant fill computed at run time; otherwise `value` is.
    Example: `%y = kernel.pad(%x) {node = "p", pads = array<i64: 1, 1>, mode = "constant", value = 0.0 : f64}`
    """

    name = "kernel.pad"
    PARAMS: ClassVar[dict[str, type]] = {"pads": tuple, "mode": str, "value": float}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"value"})

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, len(ins) in (1, 2) and len(outs) == 1, "takes one or two operands and gives one result")
        mode = self.param("mode")
        _require(self, mode in ("constant", "reflect", "edge", "wrap"), f"unknown mode '{mode}'")
        x = ins[0]
        if x is not None:
            _require(self, len(self.param("pads")) == 2 * len(x), "pads needs two entries per axis")


@irdl_op_definition
class TileOp(LibraryOp):
    """ONNX Tile: the operand repeated `repeats[i]` times along axis i.

    Example: `%y = kernel.tile(%x) {node = "t", repeats = array<i64: 2, 1>} : (X) -> Y`
    """

    name = "kernel.tile"
    PARAMS: ClassVar[dict[str, type]] = {"repeats": tuple}

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, len(ins) == 1 and len(outs) == 1, "takes one operand and gives one result")
        x = ins[0]
        if x is not None:
            _require(self, len(self.param("repeats")) == len(x), "repeats needs one entry per axis")


@irdl_op_definition
class TriluOp(LibraryOp):
    """ONNX Trilu over the last two axes: `upper` (1) or lower (0) triangle from diagonal `offset`.

    An optional second operand is the diagonal offset `k` computed at run time.
    Example: `%y = kernel.trilu(%x) {node = "t", upper = 1 : i64, offset = 0 : i64} : (X) -> Y`
    """

    name = "kernel.trilu"
    PARAMS: ClassVar[dict[str, type]] = {"upper": int, "offset": int}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"offset"})

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, len(ins) in (1, 2) and len(outs) == 1, "takes one or two operands and gives one result")
        _require(self, ins[0] is None or len(ins[0]) >= 2, "the operand needs rank 2 or more")


MOVEMENT_OPS: tuple[type[LibraryOp], ...] = (ConcatOp, SplitOp, SliceOp, PadOp, TileOp, TriluOp)

# -- indexing: gather, scatter, ranges -----------------------------------------------------------


@irdl_op_definition
class GatherOp(LibraryOp):
    """ONNX Gather: the data indexed along `axis` by an index tensor of any rank.

    Example: `%y = kernel.gather(%x, %i) {node = "g", axis = 0 : i64} : (X, I) -> Y`
    """

    name = "kernel.gather"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int}

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, len(ins) == 2 and len(outs) == 1, "takes data and indices and gives one result")
        x, i, out = ins[0], ins[1], outs[0]
        if x is not None and i is not None and out is not None:
            axis = self.param("axis")
            _require(self, 0 <= axis < len(x), f"axis {axis} is outside the data's rank {len(x)}")
            want = [*x[:axis], *i, *x[axis + 1 :]]
            _require(self, list(out) == want, "the result's extents are not data[:axis] + indices + data[axis+1:]")


@irdl_op_definition
class GatherElementsOp(LibraryOp):
    """ONNX GatherElements: out[i][j] = data[indices[i][j]][j] (axis 0); the result has the indices' extents.

    Example: `%y = kernel.gather_elements(%x, %i) {node = "g", axis = 1 : i64} : (X, I) -> Y`
    """

    name = "kernel.gather_elements"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int}

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, len(ins) == 2 and len(outs) == 1, "takes data and indices and gives one result")
        if ins[1] is not None and outs[0] is not None:
            _require(self, ins[1] == outs[0], "the result's extents are not the indices' extents")


@irdl_op_definition
class ScatterElementsOp(LibraryOp):
    """ONNX ScatterElements: a copy of the data with updates written (or reduced) at indices along `axis`.

    Example: `%y = kernel.scatter_elements(%x, %i, %u) {node = "s", axis = 0 : i64, reduction = "add"}`
    """

    name = "kernel.scatter_elements"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "reduction": str}

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, len(ins) == 3 and len(outs) == 1, "takes data, indices and updates and gives one result")
        reduction = self.param("reduction")
        _require(self, reduction in ("none", "add", "mul", "max", "min"), f"unknown reduction '{reduction}'")
        if ins[0] is not None and outs[0] is not None:
            _require(self, ins[0] == outs[0], "the result's extents are not the data's")


@irdl_op_definition
class ScatterNDOp(LibraryOp):
    """ONNX ScatterND: a copy of the data with updates written (or reduced) at the index tuples that
    the indices' last axis holds (k entries each, addressing the data's first k axes).

    The updates' extents are the indices' but the last, then the data's after k: where both sides
    are numbers they must agree (symbolic ones the build proved or owes equal).
    Example: `%y = kernel.scatter_nd(%x, %i, %u) {node = "s", reduction = "none"} : (X, I, U) -> Y`
    """

    name = "kernel.scatter_nd"
    PARAMS: ClassVar[dict[str, type]] = {"reduction": str}

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, len(ins) == 3 and len(outs) == 1, "takes data, indices and updates and gives one result")
        reduction = self.param("reduction")
        _require(self, reduction in ("none", "add", "mul", "max", "min"), f"unknown reduction '{reduction}'")
        x, i, u = ins
        if x is not None and outs[0] is not None:
            _require(self, x == outs[0], "the result's extents are not the data's")
        if x is None or i is None or u is None:
            return
        _require(self, len(i) >= 1, "the indices have rank 0")
        k = i[-1]
        _require(self, k.is_const and k.const_value <= len(x), f"the indices' last extent {k} is not a number <= rank")
        want = (*i[:-1], *x[k.const_value :])
        _require(self, len(u) == len(want), "the updates' rank is not the indices' rank - 1 + the data's rank - k")
        agree = all(a == b or not (a.is_const and b.is_const) for a, b in zip(u, want, strict=True))
        _require(self, agree, "the updates' extents are not indices[:-1] + data[k:]")


@irdl_op_definition
class RangeOp(LibraryOp):
    """ONNX Range over integers the run knows: `start`, `start + delta`, ... below `limit` (above it
    for a negative delta), as `dtype`; start and limit may be extents only the run knows.

    Example: `%p = kernel.range() {node = "r", start = 0 : i64, limit = #shape_poly.extent<S>,
    delta = 1 : i64, dtype = "int64"} : () -> R`
    """

    name = "kernel.range"
    PARAMS: ClassVar[dict[str, type]] = {"start": int, "limit": int, "delta": int, "dtype": str}

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, not ins and len(outs) == 1, "takes no operand and gives one result")
        _require(
            self, self.param("dtype") in ("int64", "int32"), f"dtype '{self.param('dtype')}' is not int64 or int32"
        )
        _require(self, outs[0] is None or len(outs[0]) == 1, "the result has rank 1")


INDEXING_OPS: tuple[type[LibraryOp], ...] = (GatherOp, GatherElementsOp, ScatterElementsOp, ScatterNDOp, RangeOp)

# -- products and gathers over weights kept in a checkpoint's block form (`pack-quantized`) --------


@irdl_op_definition
class MatmulPackedOp(LibraryOp):
    """x @ W^T (`transposed = 1`: an ONNX MatMul of x by Transpose(W), a linear layer's W [N, K]) or
    x @ W (`transposed = 0`: W [K, N]) over a weight that `Weights` may keep in ggml's block form
    (Q4_0, Q4_1, Q8_0, blocks along W's rows); `pack-quantized` gives products this kernel.

    Example: `%y = kernel.matmul_packed(%x, %w) {node = "q", transposed = 1 : i64} : (X [.., K], W [N, K]) -> Y [.., N]`
    """

    name = "kernel.matmul_packed"
    PARAMS: ClassVar[dict[str, type]] = {"transposed": int}

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, len(ins) == 2 and len(outs) == 1, "takes x and a weight and gives one result")
        _require(self, self.param("transposed") in (0, 1), "transposed is 0 or 1")
        x, w, y = ins[0], ins[1], outs[0]
        if x is not None and w is not None and y is not None:
            _require(self, len(w) == 2, "the weight has rank 2")
            k, n = (w[1], w[0]) if self.param("transposed") else (w[0], w[1])
            _require(self, len(x) >= 1 and x[-1] == k, "x's last extent is not the weight's K")
            _require(self, list(y) == [*x[:-1], n], "the result's extents are not x's with K replaced by N")


@irdl_op_definition
class GatherPackedOp(LibraryOp):
    """ONNX Gather along axis 0 of a weight that `Weights` may keep in ggml's block form: the rows
    picked, then widened (an embedding lookup).

    Example: `%y = kernel.gather_packed(%w, %i) {node = "embed", axis = 0 : i64} : (W, I) -> Y`
    """

    name = "kernel.gather_packed"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int}

    def verify_kernel(self) -> None:
        ins, outs = _library_types(self)
        _require(self, len(ins) == 2 and len(outs) == 1, "takes a weight and indices and gives one result")
        _require(self, self.param("axis") == 0, "gathers along axis 0 only")
        w, i, y = ins[0], ins[1], outs[0]
        if w is not None and i is not None and y is not None:
            _require(self, list(y) == [*i, *w[1:]], "the result's extents are not indices + weight[1:]")


PACKED_OPS: tuple[type[LibraryOp], ...] = (MatmulPackedOp, GatherPackedOp)

# -- reductions, arg-reductions, top-k, cumulative sums, softmax ---------------------------------

REDUCE_KINDS = frozenset({"sum", "mean", "max", "min", "prod", "l1", "l2", "log_sum", "log_sum_exp", "sum_square"})
"""The reductions `kernel.reduce` computes (ONNX's Reduce* operators, in snake case)."""


def _kernel_rank(op: LibraryOp, value: SSAValue) -> int | None:
    ext = _extents(value.type)
    return None if ext is None else len(ext)


def _check_axes(op: LibraryOp, axes: Sequence[int], rank: int | None) -> None:
    where = f"{op.name} '{op.node.data}'"
    if len(set(axes)) != len(axes):
        raise VerifyException(f"{where}: axes {list(axes)} repeat an axis")
    if rank is not None and any(not 0 <= a < rank for a in axes):
        raise VerifyException(f"{where}: axes {list(axes)} are not all in [0, {rank})")


@irdl_op_definition
class ReduceOp(LibraryOp):
    """ONNX Reduce*: `kind` over the (non-negative, resolved) `axes`, keeping them as extent 1 with `keepdims`.

    An axis of extent 0 reduces to the identity of the reduction (0 for sums, 1 for a product,
    the lowest value for a maximum, NaN for a mean).

    Example:
        %s = kernel.reduce(%x) {node = "r", kind = "sum", axes = array<i64: 1>, keepdims = 1 : i64}
             : (!tensor_axes.tensor<f32, [N: 2, C: 3]>) -> !tensor_axes.tensor<f32, [N: 2, Unit: 1]>
    """

    name = "kernel.reduce"
    PARAMS: ClassVar[dict[str, type]] = {"kind": str, "axes": tuple, "keepdims": int}

    def verify_kernel(self) -> None:
        if self.param("kind") not in REDUCE_KINDS:
            raise VerifyException(f"kernel.reduce '{self.node.data}': unknown kind {self.param('kind')!r}")
        _check_axes(self, self.param("axes"), _kernel_rank(self, self.inputs[0]))


@irdl_op_definition
class ArgReduceOp(LibraryOp):
    """ONNX ArgMax/ArgMin: the i64 index of the first (or, with `select_last_index`, last) extreme along `axis`."""

    name = "kernel.arg_reduce"
    PARAMS: ClassVar[dict[str, type]] = {"kind": str, "axis": int, "keepdims": int, "select_last_index": int}

    def verify_kernel(self) -> None:
        if self.param("kind") not in ("max", "min"):
            raise VerifyException(f"kernel.arg_reduce '{self.node.data}': kind must be 'max' or 'min'")
        _check_axes(self, (self.param("axis"),), _kernel_rank(self, self.inputs[0]))


@irdl_op_definition
class TopKOp(LibraryOp):
    """ONNX TopK: the `k` largest (or smallest) values along `axis` and their i64 indices, ties by lower index."""

    name = "kernel.topk"
    PARAMS: ClassVar[dict[str, type]] = {"k": int, "axis": int, "largest": int, "sorted": int}

    def verify_kernel(self) -> None:
        if len(self.outputs) != 2:
            raise VerifyException(f"kernel.topk '{self.node.data}': has two results, values and indices")
        _check_axes(self, (self.param("axis"),), _kernel_rank(self, self.inputs[0]))


@irdl_op_definition
class CumSumOp(LibraryOp):
    """ONNX CumSum along `axis`, `exclusive` (each sum leaves its own element out) and/or `reverse`."""

    name = "kernel.cumsum"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "exclusive": int, "reverse": int}

    def verify_kernel(self) -> None:
        _check_axes(self, (self.param("axis"),), _kernel_rank(self, self.inputs[0]))


@irdl_op_definition
class SoftmaxOp(LibraryOp):
    """ONNX Softmax/LogSoftmax/Hardmax (`kind`), normalising over the `axes` jointly.

    From opset 13 `axes` is one axis; before, it is every axis from ONNX's `axis` on (the input
    flattened to 2-D at `axis`).  Hardmax marks the first maximum of the joint block.
    """

    name = "kernel.softmax"
    PARAMS: ClassVar[dict[str, type]] = {"kind": str, "axes": tuple}

    def verify_kernel(self) -> None:
        if self.param("kind") not in ("softmax", "log_softmax", "hardmax"):
            raise VerifyException(f"kernel.softmax '{self.node.data}': unknown kind {self.param('kind')!r}")
        _check_axes(self, self.param("axes"), _kernel_rank(self, self.inputs[0]))


REDUCE_OPS: tuple[type[LibraryOp], ...] = (ReduceOp, ArgReduceOp, TopKOp, CumSumOp, SoftmaxOp)

# -- normalisations and einsum ---------------------------------------------------------------------


@irdl_op_definition
class NormalizeOp(LibraryOp):
    """LayerNormalization / InstanceNormalization: (x - mean) / sqrt(var + epsilon) * scale + bias.

    Mean and variance are taken over `axes`, computed in `stash` (a numpy float dtype name).
    `channel_axis` -1 broadcasts scale and bias numpy-style (LayerNorm); otherwise they are 1-D
    along that axis (InstanceNorm).  With `stats` 1 the kernel also returns the mean and
    1/sqrt(var + epsilon), keeping the reduced axes as extent 1.
    """

    name = "kernel.normalize"
    PARAMS: ClassVar[dict[str, type]] = {
        "axes": tuple, "epsilon": float, "channel_axis": int, "stash": str, "stats": int,
    }  # fmt: skip

    def verify_kernel(self) -> None:
        _check_axes(self, self.param("axes"), _kernel_rank(self, self.inputs[0]))
        want = 3 if self.param("stats") else 1
        if len(self.outputs) != want:
            raise VerifyException(
                f"kernel.normalize '{self.node.data}': stats={self.param('stats')} gives {want} results"
            )


@irdl_op_definition
class GroupNormOp(LibraryOp):
    """ONNX GroupNormalization: channels split into `num_groups`, each normalised over itself and the
    spatial axes, then scaled per channel (or per group, opset 18's meaning, with `per_group`)."""

    name = "kernel.group_norm"
    PARAMS: ClassVar[dict[str, type]] = {"num_groups": int, "epsilon": float, "per_group": int, "stash": str}


@irdl_op_definition
class LrnOp(LibraryOp):
    """ONNX LRN: x / (bias + alpha / size * (sum of squares over `size` neighbouring channels)) ** beta."""

    name = "kernel.lrn"
    PARAMS: ClassVar[dict[str, type]] = {"size": int, "alpha": float, "beta": float, "bias": float}


@irdl_op_definition
class EinsumOp(LibraryOp):
    """ONNX Einsum: numpy.einsum's meaning of `equation` (always with an explicit output)."""

    name = "kernel.einsum"
    PARAMS: ClassVar[dict[str, type]] = {"equation": str}


NORMALIZATION_OPS: tuple[type[LibraryOp], ...] = (NormalizeOp, GroupNormOp, LrnOp, EinsumOp)

# -- convolution, pooling, resize ------------------------------------------------------------------


@irdl_op_definition
class ConvOp(LibraryOp):
    """ONNX Conv with its geometry resolved: `(x, w[, b])`, explicit begin/end `pads`, `group`."""

    name = "kernel.conv"
    PARAMS: ClassVar[dict[str, type]] = {"strides": tuple, "pads": tuple, "dilations": tuple, "group": int}


@irdl_op_definition
class ConvTransposeOp(LibraryOp):
    """ONNX ConvTranspose: `(x, w[, b])`; `pads` crop the full scatter, `output_padding` extends its end."""

    name = "kernel.conv_transpose"
    PARAMS: ClassVar[dict[str, type]] = {
        "strides": tuple,
        "pads": tuple,
        "dilations": tuple,
        "group": int,
        "output_padding": tuple,
    }


@irdl_op_definition
class PoolOp(LibraryOp):
    """Max/average/Lp pooling over the axes after N and C; with two results max also gives indices."""

    name = "kernel.pool"
    PARAMS: ClassVar[dict[str, type]] = {
        "mode": str,
        "kernel_shape": tuple,
        "strides": tuple,
        "pads": tuple,
        "dilations": tuple,
        "out_shape": tuple,
        "count_include_pad": int,
        "p": float,
        "storage_order": int,
        "indices": int,
        "nan_rule": str,
    }
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"count_include_pad", "p", "storage_order", "indices", "nan_rule"})

    def verify_kernel(self) -> None:
        if self.param("mode") not in ("max", "avg", "lp"):
            raise VerifyException(f"{self.name} '{self.node.data}': mode must be max, avg or lp")
        if self.params.get("nan_rule", "ignore") not in ("ignore", "first"):
            raise VerifyException(f"{self.name} '{self.node.data}': nan_rule must be ignore or first")


@irdl_op_definition
class ResizeOp(LibraryOp):
    """ONNX Resize with the output extents (`sizes`) and the mapping's `scales` settled by the build."""

    name = "kernel.resize"
    PARAMS: ClassVar[dict[str, type]] = {
        "mode": str,
        "coordinate_mode": str,
        "nearest_mode": str,
        "scales": tuple,
        "sizes": tuple,
        "roi": tuple,
        "cubic_coeff_a": float,
        "exclude_outside": int,
        "extrapolation_value": float,
    }
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"roi", "cubic_coeff_a", "exclude_outside", "extrapolation_value"})


CONV_OPS: tuple[type[LibraryOp], ...] = (ConvOp, ConvTransposeOp, PoolOp, ResizeOp)


# -- control: ONNX If as one branch of forward per region ------------------------------------------


@irdl_op_definition
class IfOp(_KernelOp):
    """ONNX If: run one of two blocks on a one-element bool; each ends in `kernel.yield`.

    The blocks read values of the enclosing program directly, and each starts with the owed
    conditions (`shape_poly.owe`) only its branch relies on.  A result's type is the If's output
    type; a yielded value may name an axis differently (the printer relabels nothing: types are
    descriptions, the data is the same).  Printed in the generic form.
    """

    name = "kernel.if"

    cond = operand_def()
    outputs = var_result_def()
    node = _node_prop()
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


@irdl_op_definition
class TileProgramOp(LibraryOp):
    """A kernel written as a tile program (`program`), run over a launch `grid` (the program count
    along one axis, or a tuple of one to three counts, one per axis) with the run-time `numbers` it
    reads as `param K`.  Its operands are the tensors it loads, its results those it stores
    (row-major, contiguous; every element is stored).  A `fused` list, when present, names the ONNX
    nodes of the fused product this op took over (kept for the build report).

    Example: `%y = kernel.tile_program(%x) {node = "sm", grid = #shape_poly.extent<4*N>,
    numbers = [#shape_poly.extent<64>], program = #kernel.tile_program<tile 64, [...]>} : (X) -> Y`
    """

    name = "kernel.tile_program"
    PARAMS: ClassVar[dict[str, type]] = {"grid": int, "numbers": tuple}

    program = prop_def(TileProgramAttr)

    def __init__(
        self,
        inputs: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
        node: str,
        program: TileProgram,
        grid: int | Poly,
        numbers: tuple[int | Poly, ...],
    ) -> None:
        super().__init__(inputs, result_types, node, grid=grid, numbers=numbers)
        self.properties["program"] = TileProgramAttr(program)

    def verify_(self) -> None:
        # A library op's checks, but `grid` may be a tuple and a `fused` list may come along.
        where = f"{self.name} '{self.node.data}'"
        for key, attr in self.attributes.items():
            if key == "fused":
                if not (isinstance(attr, ArrayAttr) and all(isinstance(m, StringAttr) for m in attr.data)):
                    raise VerifyException(f"{where}: fused must list ONNX node names")
            elif key not in self.PARAMS:
                raise VerifyException(f"{where}: unknown parameter '{key}'")
        for key in self.PARAMS:
            if key not in self.attributes:
                raise VerifyException(f"{where}: missing parameter '{key}'")
        grid, numbers = self.param("grid"), self.param("numbers")
        axes = grid if isinstance(grid, tuple) else (grid,)
        if not isinstance(numbers, tuple) or not 1 <= len(axes) <= 3 or any(isinstance(e, float) for e in axes):
            raise VerifyException(f"{where}: grid must be one to three extents and numbers a list of them")
        rank = self.program.data.grid_rank
        if len(axes) < rank:
            raise VerifyException(f"{where}: the program reads {rank} grid axes, the grid has {len(axes)}")
        self.verify_kernel()

    def verify_kernel(self) -> None:
        program = self.program.data
        if program.operands != len(self.inputs) or program.results != len(self.outputs):
            raise VerifyException(
                f"kernel.tile_program '{self.node.data}': the program loads {program.operands} operands and "
                f"stores {program.results} results; the op has {len(self.inputs)} and {len(self.outputs)}"
            )


Kernel = Dialect(
    "kernel",
    [
        ProgramOp,
        ReturnOp,
        WeightOp,
        ConstantOp,
        MatmulOp,
        PermuteOp,
        ZipOp,
        CastOp,
        RegroupOp,
        *MOVEMENT_OPS,
        *INDEXING_OPS,
        *PACKED_OPS,
        *REDUCE_OPS,
        *NORMALIZATION_OPS,
        *CONV_OPS,
        *CONTROL_OPS,
        TileProgramOp,
    ],
    [ExprAttr, TileProgramAttr],
)
"""The `kernel` dialect."""
