"""The `graph` dialect's structure: the model, its graphs, the nodes with their subgraph regions,
and the graphs' outputs.

One `graph.node` stands for every ONNX operator, so what this module verifies is the graph as a
whole: an ONNX name defined once per graph, each graph attribute naming one of the node's regions,
every body ending in `graph.return`.  The value-defining ops it reads are in `values`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FloatAttr, IntAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_region_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import IsTerminator, NoTerminator
from xdsl.utils.exceptions import VerifyException

from loam.dialects.graph.attributes import (
    BytesValueAttr,
    ListAttr,
    SparseDataAttr,
    SubgraphAttr,
    TensorDataAttr,
    attr_to_python,
)
from loam.dialects.graph.syntax import parse_defined_operand, parse_text, resolve_defined
from loam.dialects.graph.values import InitializerOp


def _print_names(printer: Printer, names: ArrayAttr[StringAttr]) -> None:
    printer.print_string("[")
    printer.print_list(names.data, lambda s: printer.print_string_literal(s.data))
    printer.print_string("]")


def _parse_names(parser: Parser) -> ArrayAttr[StringAttr]:
    names = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_text(parser))
    return ArrayAttr([StringAttr(n) for n in names])


@functools.lru_cache(maxsize=64)
def _opset(version: int) -> IntegerAttr:
    """The attribute of opset `version`, made once per version: making an IntegerAttr checks its value,
    about 20 us, at every node of a large graph."""
    return IntegerAttr(version, i64)


def _names(names: Sequence[str]) -> ArrayAttr[StringAttr]:
    return ArrayAttr([StringAttr(n) for n in names])


def set_name_hint(value: SSAValue, onnx_name: str) -> None:
    """Show the ONNX name as the SSA name where xDSL accepts it (`%fc1.weight`, not `%0`)."""
    if onnx_name and SSAValue.is_valid_name(onnx_name):
        value.name_hint = onnx_name


def _check_printable(text: str, what: str) -> None:
    """Names reach a module's comments and messages, where a line break or a NUL would end a comment and
    run the rest as code: the ONNX readers refuse them in the file, and these verifiers in IR text."""
    if not text.isprintable():
        raise VerifyException(f"{what}: the name {text!r} holds a character that is not printable")


def _check_unique(names: Iterable[str], where: str) -> None:
    seen: set[str] = set()
    for name in names:
        if not name:
            continue
        _check_printable(name, where)
        if name in seen:
            raise VerifyException(f"{where}: ONNX name '{name}' is defined twice")
        seen.add(name)


@irdl_op_definition
class ModelOp(IRDLOperation):
    """
    An ONNX model: its header fields and one region holding one `graph.graph`.

    `opset_import` maps each domain to its opset version; `metadata_props` maps keys to strings.
    Model-local functions are not supported (the importer refuses them).

    Syntax: `graph.model {field = value, ...} { graph.graph ... }`

    Example:
        graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}, producer_name = "torch"} {
          graph.graph "main" () inputs [] { graph.return [] }
        }
    """

    name = "graph.model"

    ir_version = prop_def(IntegerAttr)
    opset_import = prop_def(DictionaryAttr)
    producer_name = opt_prop_def(StringAttr)
    producer_version = opt_prop_def(StringAttr)
    domain = opt_prop_def(StringAttr)
    model_version = opt_prop_def(IntegerAttr)
    doc_string = opt_prop_def(StringAttr)
    metadata_props = opt_prop_def(DictionaryAttr)

    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, properties: dict[str, Attribute], body: Region) -> None:
        super().__init__(properties=properties, regions=[body])

    @property
    def graph(self) -> GraphOp:
        op = self.body.block.first_op
        assert isinstance(op, GraphOp)
        return op

    def opsets(self) -> dict[str, int]:
        """Domain → opset version (`ai.onnx` spelled `""`)."""
        out: dict[str, int] = {}
        for key, value in self.opset_import.data.items():
            assert isinstance(value, IntegerAttr)
            out["" if key == "ai.onnx" else key] = int(value.value.data)
        return out

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attr_dict(self.properties)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)

    @classmethod
    def parse(cls, parser: Parser) -> ModelOp:
        props = parser.parse_optional_attr_dict()
        body = parser.parse_region()
        return cls(props, body)

    def verify_(self) -> None:
        ops = list(self.body.block.ops)
        if len(ops) != 1 or not isinstance(ops[0], GraphOp):
            raise VerifyException("graph.model holds exactly one graph.graph")
        for key, value in self.opset_import.data.items():
            if not isinstance(value, IntegerAttr):
                raise VerifyException(f"graph.model: opset_import '{key}' is not an integer")
        if self.metadata_props is not None:
            for key, value in self.metadata_props.data.items():
                if not isinstance(value, StringAttr):
                    raise VerifyException(f"graph.model: metadata_props '{key}' is not a string")


def _graph_names(block: Block, input_names: Sequence[str]) -> list[str]:
    names = list(input_names)
    for op in block.ops:
        if isinstance(op, InitializerOp):
            if op.default_of is None:
                names.append(op.onnx_name.data)
        elif isinstance(op, NodeOp):
            names.extend(op.output_names)
    return names


@irdl_op_definition
class GraphOp(IRDLOperation):
    """
    An ONNX graph: block arguments are its inputs (with their ONNX names), then initializers and
    nodes in ONNX's topological order, ending in `graph.return`.  Node regions use the same syntax
    without the `graph.graph` header (see `graph.node`).

    Syntax: `graph.graph "NAME" (%arg : T, ...) inputs ["name", ...] [doc "..."] { ... }`

    Example:
        graph.graph "g" (%x: !graph.tensor<f32, [2]>) inputs ["x"] {
          %y = graph.node "Relu" "" since 17 (%x) -> ["y"] : !graph.unknown
          graph.return %y ["y"] : !graph.tensor<f32, [2]>
        }
    """

    name = "graph.graph"

    graph_name = prop_def(StringAttr)
    input_names = prop_def(ArrayAttr[StringAttr])
    doc_string = opt_prop_def(StringAttr)
    body = region_def("single_block")

    def __init__(
        self, graph_name: str, input_names: Sequence[str], body: Region, doc_string: str | None = None
    ) -> None:
        props: dict[str, Attribute] = {
            "graph_name": StringAttr(graph_name),
            "input_names": _names(input_names),
        }
        if doc_string:
            props["doc_string"] = StringAttr(doc_string)
        super().__init__(properties=props, regions=[body])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.graph_name.data)
        printer.print_string(" (")
        printer.print_list(self.body.block.args, printer.print_block_argument)
        printer.print_string(") inputs ")
        _print_names(printer, self.input_names)
        if self.doc_string is not None:
            printer.print_string(" doc ")
            printer.print_string_literal(self.doc_string.data)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)

    @classmethod
    def parse(cls, parser: Parser) -> GraphOp:
        name = parse_text(parser)
        args = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_argument)
        parser.parse_keyword("inputs")
        inputs = [s.data for s in _parse_names(parser).data]
        doc = parse_text(parser) if parser.parse_optional_keyword("doc") else None
        body = parser.parse_region(args)
        return cls(name, inputs, body, doc)

    def verify_(self) -> None:
        block = self.body.block
        where = f"graph.graph '{self.graph_name.data}'"
        _check_printable(self.graph_name.data, "graph.graph")
        if len(block.args) != len(self.input_names.data):
            raise VerifyException(
                f"{where}: {len(block.args)} block arguments but {len(self.input_names.data)} input names"
            )
        if not isinstance(block.last_op, ReturnOp):
            raise VerifyException(f"{where}: the body must end in graph.return")
        _check_unique(_graph_names(block, [s.data for s in self.input_names.data]), where)


@irdl_op_definition
class NodeOp(IRDLOperation):
    """
    One ONNX node: any operator of any domain.

    `since` is the opset version of the node's domain in force in the model.  `attrs` holds the
    ONNX attributes in their order (encoding: see the module docstring); each graph-valued
    attribute refers to one of the node's regions by index.  An absent optional input is a
    `graph.none` operand; an absent optional output has the name "".

    Syntax:
        graph.node "OP_TYPE" "NAME" [domain "D"] since V (%in, ...) [{attrs}] -> ["out", ...]
                   [: T, ...] [regions ({...}, ...)] [doc "..."]

    Example:
        %y = graph.node "Gemm" "fc1" since 13 (%x, %w, %b) {transB = 1 : i64} -> ["y"] : !graph.unknown
    """

    name = "graph.node"

    op_type_attr = prop_def(StringAttr, prop_name="op_type")
    node_name_attr = prop_def(StringAttr, prop_name="node_name")
    domain_attr = prop_def(StringAttr, prop_name="domain")
    since_attr = prop_def(IntegerAttr, prop_name="since")
    attrs = prop_def(DictionaryAttr)
    output_names_attr = prop_def(ArrayAttr[StringAttr], prop_name="output_names")
    doc_string = opt_prop_def(StringAttr)

    args = var_operand_def()
    outs = var_result_def()
    subgraphs = var_region_def()

    def __init__(
        self,
        op_type: str,
        inputs: Sequence[SSAValue],
        output_types: Sequence[Attribute],
        output_names: Sequence[str],
        *,
        node_name: str = "",
        domain: str = "",
        since: int = 0,
        attrs: Mapping[str, Attribute] | None = None,
        regions: Sequence[Region] = (),
        doc_string: str | None = None,
    ) -> None:
        props: dict[str, Attribute] = {
            "op_type": StringAttr(op_type),
            "node_name": StringAttr(node_name),
            "domain": StringAttr(domain),
            "since": _opset(since),
            "attrs": DictionaryAttr(attrs or {}),
            "output_names": _names(output_names),
        }
        if doc_string:
            props["doc_string"] = StringAttr(doc_string)
        # Operation's own constructor: IRDL's generic one checks every argument against the definition
        # first, about three times the cost of the op, at every node of a large graph; these are the
        # definition's already (one group each of operands, results and regions: no segment sizes), and
        # `verify` checks them as before.
        Operation.__init__(
            self, operands=list(inputs), result_types=list(output_types), properties=props, regions=list(regions)
        )

    # ---- Python API

    @property
    def op_type(self) -> str:
        return self.op_type_attr.data

    @property
    def node_name(self) -> str:
        return self.node_name_attr.data

    @property
    def domain(self) -> str:
        return self.domain_attr.data

    @property
    def since(self) -> int:
        return int(self.since_attr.value.data)

    @property
    def output_names(self) -> list[str]:
        return [s.data for s in self.output_names_attr.data]

    def attr_names(self) -> list[str]:
        return list(self.attrs.data)

    def get_attr(self, name: str, default: Any = None) -> Any:
        """The ONNX attribute `name` as a plain Python value, or `default` when absent."""
        attr = self.attrs.data.get(name)
        return default if attr is None else attr_to_python(attr)

    def subgraph(self, name: str) -> Region:
        """The region holding graph-valued attribute `name` (KeyError when it is not one)."""
        attr = self.attrs.data.get(name)
        if not isinstance(attr, SubgraphAttr):
            raise KeyError(f"node '{self.node_name}' ({self.op_type}) has no graph attribute '{name}'")
        return self.subgraphs[attr.index.data]

    # ---- syntax

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.op_type)
        printer.print_string(" ")
        printer.print_string_literal(self.node_name)
        if self.domain:
            printer.print_string(" domain ")
            printer.print_string_literal(self.domain)
        printer.print_string(f" since {self.since} (")
        printer.print_list(self.args, printer.print_operand)
        printer.print_string(")")
        if self.attrs.data:
            printer.print_string(" ")
            printer.print_attr_dict(self.attrs.data)
        printer.print_string(" -> ")
        _print_names(printer, self.output_names_attr)
        if self.outs:
            printer.print_string(" : ")
            printer.print_list([r.type for r in self.outs], printer.print_attribute)
        if self.subgraphs:
            printer.print_string(" regions (")
            printer.print_list(self.subgraphs, lambda r: _print_subgraph_region(printer, r))
            printer.print_string(")")
        if self.doc_string is not None:
            printer.print_string(" doc ")
            printer.print_string_literal(self.doc_string.data)

    @classmethod
    def parse(cls, parser: Parser) -> NodeOp:
        op_type = parse_text(parser)
        node_name = parse_text(parser)
        domain = parse_text(parser) if parser.parse_optional_keyword("domain") else ""
        parser.parse_keyword("since")
        since = parser.parse_integer(allow_boolean=False)
        inputs = parser.parse_comma_separated_list(parser.Delimiter.PAREN, lambda: parse_defined_operand(parser))
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation("->")
        names = [s.data for s in _parse_names(parser).data]
        types: list[Attribute] = []
        if parser.parse_optional_punctuation(":"):
            types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        regions: list[Region] = []
        if parser.parse_optional_keyword("regions"):
            regions = parser.parse_comma_separated_list(parser.Delimiter.PAREN, lambda: _parse_subgraph_region(parser))
        doc = parse_text(parser) if parser.parse_optional_keyword("doc") else None
        return cls(
            op_type, inputs, types, names, node_name=node_name, domain=domain, since=since,
            attrs=attrs, regions=regions, doc_string=doc,
        )  # fmt: skip

    def verify_(self) -> None:
        where = f"graph.node '{self.node_name}' ({self.op_type})"
        _check_printable(self.node_name, "graph.node")
        _check_printable(self.op_type, f"graph.node {self.node_name!r}: op type")
        _check_printable(self.domain, f"graph.node {self.node_name!r}: domain")
        if len(self.output_names_attr.data) != len(self.outs):
            raise VerifyException(
                f"{where}: {len(self.outs)} results but {len(self.output_names_attr.data)} output names"
            )
        used: list[int] = []
        for key, attr in self.attrs.data.items():
            if isinstance(attr, SubgraphAttr):
                used.append(attr.index.data)
            elif isinstance(attr, ListAttr) and attr.kind.data == "graphs":
                used.extend(i.data for i in attr.items.data if isinstance(i, IntAttr))
            elif not isinstance(
                attr,
                IntegerAttr
                | FloatAttr
                | StringAttr
                | BytesValueAttr
                | TensorDataAttr
                | SparseDataAttr
                | ListAttr
                | TypeAttribute,
            ):
                raise VerifyException(f"{where}: attribute '{key}' is not an ONNX attribute value: {attr}")
        if sorted(used) != list(range(len(self.subgraphs))):
            raise VerifyException(
                f"{where}: {len(self.subgraphs)} regions but the graph attributes refer to regions {used}"
            )
        for region in self.subgraphs:
            block = region.block
            if not isinstance(block.last_op, ReturnOp):
                raise VerifyException(f"{where}: a subgraph region must end in graph.return")
            first = block.first_op
            names = first.input_names.data if isinstance(first, SubgraphInfoOp) else ()
            if len(names) != len(block.args):
                raise VerifyException(
                    f"{where}: a subgraph with {len(block.args)} inputs needs graph.subgraph_info naming them"
                )
            _check_unique(_graph_names(block, [s.data for s in names]), where)


def _print_subgraph_region(printer: Printer, region: Region) -> None:
    printer.print_string("(")
    printer.print_list(region.block.args, printer.print_block_argument)
    printer.print_string(") ")
    printer.print_region(region, print_entry_block_args=False)


def _parse_subgraph_region(parser: Parser) -> Region:
    args = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_argument)
    return parser.parse_region(args)


@irdl_op_definition
class SubgraphInfoOp(IRDLOperation):
    """
    The header of a subgraph region (If/Loop/Scan bodies): its ONNX name and input names.  It is the
    first op of every `graph.node` region; the region's block arguments are the inputs.

    Syntax: `graph.subgraph_info "NAME" inputs ["name", ...] [doc "..."]`

    Example: `graph.subgraph_info "then_branch" inputs []`
    """

    name = "graph.subgraph_info"

    graph_name = prop_def(StringAttr)
    input_names = prop_def(ArrayAttr[StringAttr])
    doc_string = opt_prop_def(StringAttr)

    def __init__(self, graph_name: str, input_names: Sequence[str], doc_string: str | None = None) -> None:
        props: dict[str, Attribute] = {
            "graph_name": StringAttr(graph_name),
            "input_names": _names(input_names),
        }
        if doc_string:
            props["doc_string"] = StringAttr(doc_string)
        super().__init__(properties=props)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.graph_name.data)
        printer.print_string(" inputs ")
        _print_names(printer, self.input_names)
        if self.doc_string is not None:
            printer.print_string(" doc ")
            printer.print_string_literal(self.doc_string.data)

    @classmethod
    def parse(cls, parser: Parser) -> SubgraphInfoOp:
        name = parse_text(parser)
        parser.parse_keyword("inputs")
        names = [s.data for s in _parse_names(parser).data]
        doc = parse_text(parser) if parser.parse_optional_keyword("doc") else None
        return cls(name, names, doc)


@irdl_op_definition
class ReturnOp(IRDLOperation):
    """
    The outputs of a graph or subgraph: values, their ONNX names and their declared types (which
    may differ from the value's own type: a node result is typed by value_info, an output by the
    graph's output list).

    Syntax: `graph.return %v, ... ["name", ...] : T, ...`

    Example: `graph.return %y ["y"] : !graph.tensor<f32, [4, 16]>`
    """

    name = "graph.return"

    values = var_operand_def()
    output_names = prop_def(ArrayAttr[StringAttr])
    declared_types = prop_def(ArrayAttr[Attribute])
    traits = traits_def(IsTerminator())

    def __init__(
        self, values: Sequence[SSAValue], output_names: Sequence[str], declared_types: Sequence[Attribute]
    ) -> None:
        super().__init__(
            operands=[list(values)],
            properties={
                "output_names": _names(output_names),
                "declared_types": ArrayAttr(list(declared_types)),
            },
        )

    def print(self, printer: Printer) -> None:
        if self.values:
            printer.print_string(" ")
            printer.print_list(self.values, printer.print_operand)
        printer.print_string(" ")
        _print_names(printer, self.output_names)
        if self.values:
            printer.print_string(" : ")
            printer.print_list(self.declared_types.data, printer.print_attribute)

    @classmethod
    def parse(cls, parser: Parser) -> ReturnOp:
        values: list[SSAValue] = []
        if (first := parser.parse_optional_unresolved_operand()) is not None:
            pending = [first]
            while parser.parse_optional_punctuation(","):
                pending.append(parser.parse_unresolved_operand())
            values = [resolve_defined(parser, u) for u in pending]
        names = [s.data for s in _parse_names(parser).data]
        types: list[Attribute] = []
        if parser.parse_optional_punctuation(":"):
            types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        return cls(values, names, types)

    def verify_(self) -> None:
        n = len(self.values)
        for name in self.output_names.data:
            _check_printable(name.data, "graph.return")
        if len(self.output_names.data) != n or len(self.declared_types.data) != n:
            raise VerifyException(
                f"graph.return: {n} values, {len(self.output_names.data)} names and "
                f"{len(self.declared_types.data)} declared types must agree"
            )
