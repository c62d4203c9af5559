"""The ONNX text reader's transformer: protobuf messages built while the LALR parser reduces.

`ProtoBuilder` has one method per rule of the grammar `loam/grammar/onnx.lark`; lark calls it with
the rule's children already built, so no parse tree is kept.  Values and tensor data are read by
`loam.frontends.onnx_text_data`; attribute values are checked against their annotation as
onnx.parser checks them (an integer may stand for a float; a list takes the type of its first
element, and tensors, graphs and types inside a list are dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import lark
import onnx
from lark import Token

from loam.frontends.onnx_text_data import (
    ELEM_TYPES,
    TensorData,
    TokenError,
    fill_tensor,
    identifier,
    parse_float32,
    parse_int,
    unquote,
)

AP = onnx.AttributeProto

# Attribute type keywords → AttributeProto.AttributeType; a list type's element type, and back.
ATTR_TYPES: dict[str, AP.AttributeType] = {
    "float": AP.FLOAT, "int": AP.INT, "string": AP.STRING, "tensor": AP.TENSOR,
    "graph": AP.GRAPH, "sparse_tensor": AP.SPARSE_TENSOR, "type_proto": AP.TYPE_PROTO,
    "floats": AP.FLOATS, "ints": AP.INTS, "strings": AP.STRINGS, "tensors": AP.TENSORS,
    "graphs": AP.GRAPHS, "sparse_tensors": AP.SPARSE_TENSORS, "type_protos": AP.TYPE_PROTOS,
}  # fmt: skip
_SINGLETON: dict[AP.AttributeType, AP.AttributeType] = {
    AP.FLOATS: AP.FLOAT, AP.INTS: AP.INT, AP.STRINGS: AP.STRING, AP.TENSORS: AP.TENSOR,
    AP.GRAPHS: AP.GRAPH, AP.SPARSE_TENSORS: AP.SPARSE_TENSOR, AP.TYPE_PROTOS: AP.TYPE_PROTO,
}  # fmt: skip
_LIST_OF: dict[int, AP.AttributeType] = {AP.INT: AP.INTS, AP.FLOAT: AP.FLOATS, AP.STRING: AP.STRINGS}


def _tok(children: Sequence[Any], kind: str) -> Token | None:
    return next((c for c in children if isinstance(c, Token) and c.type == kind), None)


class _Value:
    """One attribute value before it is put in an AttributeProto: kind is an AttributeType."""

    __slots__ = ("kind", "token", "value")

    def __init__(self, kind: int, value: Any, token: Token | None) -> None:
        self.kind = kind
        self.value = value
        self.token = token


class _Inputs:
    """Graph inputs: (value info, data, the `=` token or None) for each."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items


class _ValueInfos:
    """A graph's `<...>` list: value infos and initializers, as (value info, data, `=` token)."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items


class _Names:
    """An identifier list of a node (outputs or inputs)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names


class _NodeName:
    def __init__(self, name: str) -> None:
        self.name = name


class _Op:
    """A node's operator: domain, op_type and the optional overload."""

    def __init__(self, domain: str, op_type: str, overload: str | None) -> None:
        self.domain = domain
        self.op_type = op_type
        self.overload = overload


class _Attrs:
    """A node's `<...>` attribute list; `token` locates a misplaced second list."""

    def __init__(self, items: list[onnx.AttributeProto]) -> None:
        self.items = items
        self.token: Token | None = None


_REF = -1  # the kind of `@name`: an attribute reference has no value type


class ProtoBuilder(lark.Transformer[Token, onnx.ModelProto]):
    """Builds protobuf messages bottom-up while the LALR parser reduces (no parse tree is kept)."""

    # ---- model ------------------------------------------------------------------------------
    def start(self, children: list[Any]) -> onnx.ModelProto:
        return children[0]

    def model(self, children: list[Any]) -> onnx.ModelProto:
        model = onnx.ModelProto()
        for child in children:
            if isinstance(child, onnx.GraphProto):
                model.graph.CopyFrom(child)
            elif isinstance(child, onnx.FunctionProto):
                model.functions.append(child)
            else:  # the header: a list of setters
                for setter in child:
                    setter(model)
        return model

    def header(self, children: list[Any]) -> list[Callable[[onnx.ModelProto], None]]:
        return children

    def header_item(self, children: list[Any]) -> Callable[[Any], None]:
        key = children[0].value
        value = children[1]
        if key in ("ir_version", "model_version"):
            number = parse_int(value)

            def set_int(model: Any) -> None:
                setattr(model, key, number)

            return set_int
        if key == "opset_import":
            return lambda model: model.opset_import.extend(value)
        if key == "metadata_props":
            props = [c for c in children[1:] if c is not None]

            def set_props(model: Any) -> None:
                for prop_key, prop_value in props:
                    entry = model.metadata_props.add()
                    entry.key = prop_key
                    entry.value = prop_value

            return set_props
        text = unquote(value)
        return lambda model: setattr(model, key, text)

    def opset_list(self, children: list[Any]) -> list[onnx.OperatorSetIdProto]:
        return [c for c in children if c is not None]

    def opset(self, children: list[Token]) -> onnx.OperatorSetIdProto:
        opset = onnx.OperatorSetIdProto()
        opset.domain = unquote(children[0])
        opset.version = parse_int(children[1])
        return opset

    def prop(self, children: list[Token]) -> tuple[str, str]:
        return unquote(children[0]), unquote(children[1])

    # ---- graphs -----------------------------------------------------------------------------
    def graph(self, children: list[Any]) -> onnx.GraphProto:
        graph: onnx.GraphProto = children[1]
        graph.name = identifier(children[0])
        return graph

    def graph_body(self, children: list[Any]) -> onnx.GraphProto:
        graph = onnx.GraphProto()
        for child in children:
            if isinstance(child, _Inputs):
                for vi, data, eq in child.items:
                    graph.input.append(vi)
                    if eq is not None:
                        tensor = graph.initializer.add()
                        tensor.name = vi.name
                        fill_tensor(tensor, vi.type, data, eq)
            elif isinstance(child, onnx.ValueInfoProto):
                graph.output.append(child)
            elif isinstance(child, _ValueInfos):
                # `<...>` entries with `= data` are initializers only, the rest value_info.
                for vi, data, eq in child.items:
                    if eq is None:
                        graph.value_info.append(vi)
                        continue
                    tensor = graph.initializer.add()
                    tensor.name = vi.name
                    fill_tensor(tensor, vi.type, data, eq)
            elif isinstance(child, list):
                graph.node.extend(child)
        return graph

    def graph_inputs(self, children: list[Any]) -> _Inputs:
        return _Inputs([c for c in children if c is not None])

    def graph_value_infos(self, children: list[Any]) -> _ValueInfos:
        return _ValueInfos([c for c in children if c is not None])

    def graph_input(self, children: list[Any]) -> tuple[onnx.ValueInfoProto, TensorData | None, Token | None]:
        eq = _tok(children, "EQUAL")
        data = children[2] if len(children) > 2 else None
        return children[0], data, eq

    def value_info(self, children: list[Any]) -> onnx.ValueInfoProto:
        vi = onnx.ValueInfoProto()
        if len(children) == 2:
            vi.type.CopyFrom(children[0])
        vi.name = identifier(children[-1])
        return vi

    # ---- types ------------------------------------------------------------------------------
    def elem_type(self, children: list[Token]) -> int:
        return ELEM_TYPES[children[0].value]

    def shape(self, children: list[Any]) -> onnx.TensorShapeProto | None:
        dims = [c for c in children if c is not None]
        if not dims:
            return None  # `[]`: unknown rank, no shape at all
        shape = onnx.TensorShapeProto()
        for tok in dims:
            dim = shape.dim.add()
            if tok.type == "IDENT":
                dim.dim_param = tok.value
            elif tok.type == "STRING":
                dim.dim_param = unquote(tok)
            elif tok.type == "INTEGER":
                dim.dim_value = parse_int(tok)
        return shape

    def dim(self, children: list[Token]) -> Token:
        return children[0]

    @staticmethod
    def _tensorish(target: Any, children: list[Any]) -> None:
        target.elem_type = children[0]
        if len(children) == 1:
            target.shape.SetInParent()  # no brackets: a scalar, rank 0
        elif children[1] is not None:
            target.shape.CopyFrom(children[1])

    def tensor_type(self, children: list[Any]) -> onnx.TypeProto:
        tp = onnx.TypeProto()
        self._tensorish(tp.tensor_type, children)
        return tp

    def sparse_type(self, children: list[Any]) -> onnx.TypeProto:
        tp = onnx.TypeProto()
        self._tensorish(tp.sparse_tensor_type, children[1:])
        return tp

    def seq_type(self, children: list[Any]) -> onnx.TypeProto:
        tp = onnx.TypeProto()
        tp.sequence_type.elem_type.CopyFrom(children[1])
        return tp

    def optional_type(self, children: list[Any]) -> onnx.TypeProto:
        tp = onnx.TypeProto()
        tp.optional_type.elem_type.CopyFrom(children[1])
        return tp

    def map_type(self, children: list[Any]) -> onnx.TypeProto:
        tp = onnx.TypeProto()
        tp.map_type.key_type = children[1]
        tp.map_type.value_type.CopyFrom(children[2])
        return tp

    # ---- tensor data ------------------------------------------------------------------------
    def numeric_data(self, children: list[Token]) -> TensorData:
        return ("numeric", children[0])

    def literal_data(self, children: list[Any]) -> TensorData:
        return ("literal", [c for c in children if c is not None])

    def external_data(self, children: list[Any]) -> TensorData:
        return ("external", children)

    # ---- nodes ------------------------------------------------------------------------------
    def nodes(self, children: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
        return children

    def node(self, children: list[Any]) -> onnx.NodeProto:
        node = onnx.NodeProto()
        id_lists = [c for c in children if isinstance(c, _Names)]
        node.output.extend(id_lists[0].names)
        node.input.extend(id_lists[1].names)
        attr_lists = [c for c in children if isinstance(c, _Attrs)]
        if len(attr_lists) == 2:
            raise TokenError(attr_lists[1].token, "attributes may come before or after the inputs, not both")
        for child in children:
            if isinstance(child, _NodeName):
                node.name = child.name
            elif isinstance(child, _Op):
                node.domain = child.domain
                node.op_type = child.op_type
                if child.overload is not None:
                    node.overload = child.overload
        for attrs in attr_lists:
            node.attribute.extend(attrs.items)
        return node

    def node_name(self, children: list[Any]) -> _NodeName:
        return _NodeName(identifier(children[0] if children else None))

    def node_outputs(self, children: list[Token]) -> _Names:
        """onnx's identifier-list rule: an entry is a name, or empty when a comma comes next."""
        names: list[str] = []
        i, n = 0, len(children)
        while i < n:
            tok = children[i]
            if tok.type == "COMMA":
                names.append("")
            else:
                names.append(identifier(tok))
                i += 1
                if i < n and children[i].type != "COMMA":
                    raise TokenError(children[i], f"expected ',' between names, got '{children[i].value}'")
            i += 1  # past the comma; a trailing comma adds nothing
        return _Names(names)

    node_inputs = node_outputs

    def op_name(self, children: list[Any]) -> _Op:
        overload = None
        if children and not isinstance(children[-1], Token):
            overload = children[-1][0]
            children = children[:-1]
        # Replay onnx's loop: the identifier before each dot joins the domain.
        current = ""
        domain = ""
        for tok in children:
            if tok.type == "DOT":
                if domain:
                    domain += "."
                domain += current
                current = ""
            else:
                current = tok.value
        return _Op(domain, current, overload)

    def overload(self, children: list[Token]) -> tuple[str]:
        return (str(children[0].value),)

    # ---- attributes -------------------------------------------------------------------------
    def attributes(self, children: list[onnx.AttributeProto]) -> _Attrs:
        return _Attrs(children)

    def attr_type(self, children: list[Token]) -> AP.AttributeType:
        return ATTR_TYPES[children[0].value]

    def attribute(self, children: list[Any]) -> onnx.AttributeProto:
        name: Token = children[0]
        annotated = children[1] if len(children) == 3 else AP.UNDEFINED
        return _make_attribute(name.value, annotated, children[-1], name)

    def attr_value(self, children: list[Any]) -> Any:
        return children[0]

    def value_list(self, children: list[Any]) -> list[_Value]:
        return [c for c in children if c is not None]

    def int_value(self, children: list[Token]) -> _Value:
        # Converted once the attribute's type is known: a float attribute rereads the digits.
        return _Value(AP.INT, None, children[0])

    def float_value(self, children: list[Token]) -> _Value:
        return _Value(AP.FLOAT, parse_float32(children[0]), children[0])

    def string_value(self, children: list[Token]) -> _Value:
        return _Value(AP.STRING, unquote(children[0]).encode("utf-8"), children[0])

    def ref_value(self, children: list[Token]) -> _Value:
        return _Value(_REF, identifier(children[0]), children[0])

    def graph_value(self, children: list[Any]) -> _Value:
        graph: onnx.GraphProto = children[1]
        graph.name = children[0].value
        return _Value(AP.GRAPH, graph, children[0])

    def type_value(self, children: list[Any]) -> _Value:
        return _Value(AP.TYPE_PROTO, children[0], None)

    def tensor_value(self, children: list[Any]) -> _Value:
        type_proto, (name, data, where) = children
        tensor = onnx.TensorProto()
        tensor.name = name
        fill_tensor(tensor, type_proto, data, where)
        return _Value(AP.TENSOR, tensor, where)

    def tensor_name(self, children: list[Any]) -> tuple[str, TensorData | None, Token | None]:
        name = _tok(children, "IDENT")
        data = children[-1] if children and isinstance(children[-1], tuple) else None
        where = name or _tok(children, "EQUAL")
        if data is not None and data[0] == "numeric":
            where = where or data[1]
        return (name.value if name is not None else ""), data, where

    # ---- functions --------------------------------------------------------------------------
    def function(self, children: list[Any]) -> onnx.FunctionProto:
        fn = onnx.FunctionProto()
        index = 0
        if isinstance(children[0], list):
            for setter in children[0]:
                setter(fn)
            index = 1
        fn.name = identifier(children[index])
        index += 1
        if isinstance(children[index], tuple):
            for item in children[index][0]:
                if isinstance(item, str):
                    fn.attribute.append(item)
                else:
                    fn.attribute_proto.append(item)
            index += 1
        inputs, _arrow, outputs, *rest = children[index:]
        for names, target in ((inputs, fn.input), (outputs, fn.output)):
            for vi in names:
                target.append(vi.name)
                if vi.HasField("type"):
                    fn.value_info.append(vi)
        if len(rest) == 2:
            fn.value_info.extend(rest[0])
        fn.node.extend(rest[-1])
        return fn

    def function_header(self, children: list[Any]) -> list[Callable[[Any], None]]:
        return children

    def function_item(self, children: list[Any]) -> Callable[[Any], None]:
        key = children[0].value
        value = children[1]
        if key == "opset_import":
            return lambda fn: fn.opset_import.extend(value)
        text = unquote(value)
        return lambda fn: setattr(fn, key, text)

    def function_attrs(self, children: list[Any]) -> tuple[list[Any]]:
        return (children,)

    def function_attr(self, children: list[Token]) -> str:
        return identifier(children[0])

    def function_attr_default(self, children: list[Any]) -> onnx.AttributeProto:
        annotated = children[1] if len(children) == 3 else AP.UNDEFINED
        return _make_attribute(identifier(children[0]), annotated, children[-1], children[0])

    def function_io(self, children: list[Any]) -> list[onnx.ValueInfoProto]:
        return [c for c in children if c is not None]

    function_value_infos = function_io


def _check_kind(value: _Value, expected: int) -> _Value:
    """onnx.parser's check of a value against its annotation: an integer may stand for a float."""
    if value.kind == AP.INT and expected in (AP.UNDEFINED, AP.INT):
        assert value.token is not None
        return _Value(AP.INT, parse_int(value.token), value.token)
    if expected == AP.UNDEFINED or value.kind in (expected, _REF):
        return value
    if expected == AP.FLOAT and value.kind == AP.INT:
        # onnx.parser reads the integer's digits as a float: `-0` stays negative zero and
        # integers beyond int64 are still floats.
        assert value.token is not None
        return _Value(AP.FLOAT, parse_float32(value.token), value.token)
    raise TokenError(
        value.token,
        f"attribute value of type {AP.AttributeType.Name(value.kind)} where "
        f"{AP.AttributeType.Name(expected)} was declared",
    )


def _make_attribute(name: str, annotated: AP.AttributeType, value: Any, where: Token) -> onnx.AttributeProto:
    attr = onnx.AttributeProto()
    attr.name = name
    if annotated != AP.UNDEFINED:
        attr.type = annotated
    if isinstance(value, _Value):
        value = _check_kind(value, annotated)
        if value.kind == _REF:
            attr.ref_attr_name = value.value
            return attr
        attr.type = value.kind
        if value.kind == AP.INT:
            attr.i = value.value
        elif value.kind == AP.FLOAT:
            attr.f = value.value
        elif value.kind == AP.STRING:
            attr.s = value.value
        elif value.kind == AP.TENSOR:
            attr.t.CopyFrom(value.value)
        elif value.kind == AP.GRAPH:
            attr.g.CopyFrom(value.value)
        else:
            attr.tp.CopyFrom(value.value)
        return attr
    # A list: each element is checked against the element type the list has so far.
    if not value:
        if annotated == AP.UNDEFINED:
            raise TokenError(where, f"the empty list of attribute '{name}' needs a type (e.g. '{name}: ints = []')")
        if annotated not in _SINGLETON:
            raise TokenError(where, f"attribute '{name}' is declared a single value but given a list")
        return attr
    current = annotated
    for element in value:
        element = _check_kind(element, _SINGLETON.get(current, current))
        if element.kind == _REF and current != AP.UNDEFINED:
            raise TokenError(element.token, "an attribute reference cannot be a list element")
        if element.kind in _LIST_OF:
            current = _LIST_OF[element.kind]
            attr.type = current
            if element.kind == AP.INT:
                attr.ints.append(element.value)
            elif element.kind == AP.FLOAT:
                attr.floats.append(element.value)
            else:
                attr.strings.append(element.value)
        # Tensors, graphs and types in a list are dropped, exactly as onnx.parser drops them.
    return attr
