"""The ONNX textual-format reader: `.onnxtext` source → `onnx.ModelProto`.

The text is the language `onnx.parser` reads and `onnx.printer` writes.  This reader parses it with
the lark grammar `loam/grammar/onnx.lark` (LALR, contextual lexer) and fills exactly the protobuf
fields `onnx.parser` fills, so the shared importer cannot tell a text model from a binary one.  It
never calls `onnx.parser`: the tests use that only as an oracle.

Behaviour copied from onnx's parser on purpose (found by experiment), because the oracle demands it:

* tensor data goes to the field onnx.parser picks per element type: `int32_data` for every type of
  32 bits or fewer except float (float16/bfloat16/float8/... values are bit patterns: 15360 is a
  float16 1.0), `int64_data`, `uint64_data` (uint32 too; negative literals wrap modulo 2**64 like
  `strtoull`), `float_data` (float, complex64), `double_data` (double, complex128), `string_data`;
* float literals are rounded once, straight to float32 (like `strtof`); overflow is an error and
  underflow gives zero;
* in an attribute list the first element fixes the element type; tensors, graphs and types inside a
  list are parsed and dropped, as onnx.parser does;
* identifier lists allow empty entries (`Op(, x)` has two inputs, `Op(x,)` one).

Every error is an `OnnxSyntaxError` (`file:line:column: message`) or another `ModelError`.
"""

from __future__ import annotations

import importlib.resources
import math
import pathlib
import re
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import lark
import numpy as np
import onnx
from lark import Token

from loam.core.errors import ModelError, OnnxSyntaxError

__all__ = ["parse_model_text", "read_onnx_text"]

TP = onnx.TensorProto
AP = onnx.AttributeProto

# Element type keywords → TensorProto.DataType, as onnx.printer spells them.
ELEM_TYPES: dict[str, int] = {
    "float": TP.FLOAT, "uint8": TP.UINT8, "int8": TP.INT8, "uint16": TP.UINT16,
    "int16": TP.INT16, "int32": TP.INT32, "int64": TP.INT64, "string": TP.STRING,
    "bool": TP.BOOL, "float16": TP.FLOAT16, "double": TP.DOUBLE, "uint32": TP.UINT32,
    "uint64": TP.UINT64, "complex64": TP.COMPLEX64, "complex128": TP.COMPLEX128,
    "bfloat16": TP.BFLOAT16, "float8e4m3fn": TP.FLOAT8E4M3FN,
    "float8e4m3fnuz": TP.FLOAT8E4M3FNUZ, "float8e5m2": TP.FLOAT8E5M2,
    "float8e5m2fnuz": TP.FLOAT8E5M2FNUZ, "uint4": TP.UINT4, "int4": TP.INT4,
    "float4e2m1": TP.FLOAT4E2M1, "float8e8m0": 24, "uint2": 25, "int2": 26,
    "float6e2m3": 27, "float6e3m2": 28,
}  # fmt: skip

ATTR_TYPES: dict[str, int] = {
    "float": AP.FLOAT, "int": AP.INT, "string": AP.STRING, "tensor": AP.TENSOR,
    "graph": AP.GRAPH, "sparse_tensor": AP.SPARSE_TENSOR, "type_proto": AP.TYPE_PROTO,
    "floats": AP.FLOATS, "ints": AP.INTS, "strings": AP.STRINGS, "tensors": AP.TENSORS,
    "graphs": AP.GRAPHS, "sparse_tensors": AP.SPARSE_TENSORS, "type_protos": AP.TYPE_PROTOS,
}  # fmt: skip
_SINGLETON = {
    AP.FLOATS: AP.FLOAT, AP.INTS: AP.INT, AP.STRINGS: AP.STRING, AP.TENSORS: AP.TENSOR,
    AP.GRAPHS: AP.GRAPH, AP.SPARSE_TENSORS: AP.SPARSE_TENSOR, AP.TYPE_PROTOS: AP.TYPE_PROTO,
}  # fmt: skip
_LIST_OF = {AP.INT: AP.INTS, AP.FLOAT: AP.FLOATS, AP.STRING: AP.STRINGS}

# Which TensorProto field onnx.parser fills for each element type (see the module docstring).
_FLOAT_FIELD = {TP.FLOAT, TP.COMPLEX64}
_DOUBLE_FIELD = {TP.DOUBLE, TP.COMPLEX128}
_INT64_FIELD = {TP.INT64}
_UINT64_FIELD = {TP.UINT32, TP.UINT64}
_INT32_FIELD = set(ELEM_TYPES.values()) - _FLOAT_FIELD - _DOUBLE_FIELD - _INT64_FIELD - _UINT64_FIELD
_INT32_FIELD.discard(TP.STRING)

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MAX = 2**64 - 1

# Literal forms, the same as the grammar's INTEGER, DECIMAL and FLOATWORD terminals.
# Possessive quantifiers: these validate blocks of a million numbers, so no backtracking.
_INT_RE = r"-?[0-9]++"
_NUM_RE = r"-?[0-9]++(?:\.[0-9]*+)?+(?:[eE][+-]?+[0-9]++)?+|-?+(?i:infinity|inf|nan)"
_INT_BLOCK = re.compile(rf"\s*+(?:(?:{_INT_RE})\s*+(?:,\s*+(?:{_INT_RE})\s*+)*+)?+")
_NUM_BLOCK = re.compile(rf"\s*+(?:(?:{_NUM_RE})\s*+(?:,\s*+(?:{_NUM_RE})\s*+)*+)?+")
_INT_FULL = re.compile(_INT_RE)
_NUM_FULL = re.compile(_NUM_RE)
_COMMENT = re.compile(r"#[^\n]*")
_ESCAPE = re.compile(r"\\([\s\S])")

# Readable names for the grammar's terminals in "expected one of ..." messages.
_TERMINAL_NAMES = {
    "IDENT": "an identifier",
    "STRING": "a string",
    "INTEGER": "an integer",
    "DECIMAL": "a number",
    "FLOATWORD": "a number",
    "NUMBLOCK": "'{'",
    "$END": "the end of the input",
}


class _Located(Exception):
    """An error found while building protos, with the token where onnx.parser would stop."""

    def __init__(self, token: Token | None, message: str) -> None:
        super().__init__(message)
        self.token = token
        self.message = message


def _unquote(token: Token) -> str:
    """The value of a STRING token: a backslash keeps the character after it, whatever it is."""
    body = token.value[1:-1]
    return _ESCAPE.sub(r"\1", body) if "\\" in body else body


def _name(token: Token | None) -> str:
    """An identifier, or a quoted identifier (onnx accepts a string wherever a name may be quoted)."""
    if token is None:
        return ""
    return _unquote(token) if token.type == "STRING" else token.value


def _parse_int(token: Token, lo: int = _INT64_MIN, hi: int = _INT64_MAX) -> int:
    if token.type != "INTEGER":
        raise _Located(token, f"expected an integer, got '{token.value}'")
    value = int(token.value)
    if not lo <= value <= hi:
        raise _Located(token, f"integer {token.value} is out of range [{lo}, {hi}]")
    return value


def _round_f32(text: str, value: float) -> float:
    """Round the decimal `text` (already read as the double `value`) to float32 exactly once.

    Going through a double can round twice; that differs from strtof only when the double lies
    exactly halfway between two float32 values, and then the exact decimal decides.
    """
    with np.errstate(over="ignore"):
        f32 = np.float32(value)
    if math.isinf(f32) and not math.isinf(value):
        raise OverflowError(text)
    near = float(f32)
    if near == value or math.isnan(value):
        return near
    with np.errstate(over="ignore"):
        other = float(np.nextafter(f32, np.float32(math.copysign(math.inf, value - near))))
    if (near + other) / 2 != value:
        return near
    exact = Fraction(text)
    exact_double = Fraction(value)
    if exact == exact_double:
        return near
    # The decimal lies on one side of the midpoint: take the float32 on that side.
    return max(near, other) if exact > exact_double else min(near, other)


def _parse_float32(token: Token) -> float:
    if token.type not in ("INTEGER", "DECIMAL", "FLOATWORD"):
        raise _Located(token, f"expected a number, got '{token.value}'")
    try:
        return _round_f32(token.value, float(token.value))
    except OverflowError:
        raise _Located(token, f"{token.value} is out of the range of float") from None


def _parse_double(token: Token) -> float:
    if token.type not in ("INTEGER", "DECIMAL", "FLOATWORD"):
        raise _Located(token, f"expected a number, got '{token.value}'")
    value = float(token.value)
    if math.isinf(value) and token.type != "FLOATWORD":
        raise _Located(token, f"{token.value} is out of the range of double")
    return value


def _parse_uint64(token: Token) -> int:
    value = _parse_int(token, -_UINT64_MAX, _UINT64_MAX)
    # strtoull negates a minus-signed value modulo 2**64.
    return value % (2**64)


def _floats_to_f32(parts: Sequence[str], token: Token) -> list[float]:
    """Bulk float32 conversion of validated literals, rounding each exactly once."""
    doubles = np.array([float(p) for p in parts], dtype=np.float64)
    with np.errstate(over="ignore"):
        singles = doubles.astype(np.float32)
    back = singles.astype(np.float64)
    inexact = ~((back == doubles) | np.isnan(doubles))
    if not inexact.any():
        return back.tolist()
    overflow = np.isinf(singles) & ~np.isinf(doubles)
    if overflow.any():
        index = int(np.argmax(overflow))
        raise _Located(token, f"{parts[index].strip()} is out of the range of float")
    # Only a double lying exactly halfway between two float32 values can be rounded wrongly.
    with np.errstate(over="ignore"):
        toward = np.where(doubles > back, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
        other = np.nextafter(singles, toward).astype(np.float64)
    halfway = inexact & ((back + other) / 2 == doubles)
    values = back.tolist()
    for index in np.nonzero(halfway)[0].tolist():
        values[index] = _round_f32(parts[index].strip(), float(doubles[index]))
    return values


def _locate_bad_element(token: Token, body: str, pattern: re.Pattern[str], what: str) -> _Located:
    """Find the first element of a numeric block that is not a `pattern` literal (error path)."""
    offset = 1
    for part in body.split(","):
        stripped = part.strip()
        if not pattern.fullmatch(stripped):
            at = offset + (part.index(stripped) if stripped else 0)
            line = token.line + token.value.count("\n", 0, at)
            last_nl = token.value.rfind("\n", 0, at)
            column = at - last_nl if last_nl >= 0 else token.column + at
            shown = stripped or ("'}'" if part is body.split(",")[-1] else "','")
            bad = Token("NUMBLOCK", stripped, line=line, column=column)
            return _Located(bad, f"expected {what}, got {shown if not stripped else repr(stripped)}")
        offset += len(part) + 1
    return _Located(token, f"expected {what}")


def _fill_numeric_block(tensor: onnx.TensorProto, dtype: int, token: Token) -> None:
    """Convert a NUMBLOCK token (`{1, 2.5, nan}`) into the data field onnx.parser fills."""
    body = token.value[1:-1]
    if "#" in body:
        # Blank comments out, keeping offsets for error positions.
        body = _COMMENT.sub(lambda m: " " * len(m.group()), body)
    if not body.strip():
        return
    parts = body.split(",")
    if dtype in _FLOAT_FIELD or dtype in _DOUBLE_FIELD:
        if not _NUM_BLOCK.fullmatch(body):
            raise _locate_bad_element(token, body, _NUM_FULL, "a number")
        if dtype in _FLOAT_FIELD:
            tensor.float_data.extend(_floats_to_f32(parts, token))
        else:
            doubles = [float(p) for p in parts]
            for value, part in zip(doubles, parts, strict=True):
                if math.isinf(value) and part.strip()[-1].isdigit():
                    raise _Located(token, f"{part.strip()} is out of the range of double")
            tensor.double_data.extend(doubles)
        return
    if dtype == TP.STRING:
        raise _locate_bad_element(token, body, re.compile(r'"'), "a string")
    if not _INT_BLOCK.fullmatch(body):
        raise _locate_bad_element(token, body, _INT_FULL, "an integer")
    ints = [int(p) for p in parts]
    if dtype in _INT32_FIELD:
        lo, hi, field = _INT32_MIN, _INT32_MAX, tensor.int32_data
    elif dtype in _INT64_FIELD:
        lo, hi, field = _INT64_MIN, _INT64_MAX, tensor.int64_data
    else:
        lo, hi, field = -_UINT64_MAX, _UINT64_MAX, tensor.uint64_data
    if min(ints) < lo or max(ints) > hi:
        bad = next(p.strip() for p, v in zip(parts, ints, strict=True) if not lo <= v <= hi)
        raise _Located(token, f"integer {bad} is out of range for {_dtype_name(dtype)} data")
    if field is tensor.uint64_data:
        ints = [v % (2**64) for v in ints]
    field.extend(ints)


def _dtype_name(dtype: int) -> str:
    return next((k for k, v in ELEM_TYPES.items() if v == dtype), str(dtype))


def _fill_literals(tensor: onnx.TensorProto, dtype: int, tokens: list[Token]) -> None:
    """Tensor data given token by token (the brace block holds a string)."""
    if dtype == TP.STRING:
        for tok in tokens:
            if tok.type != "STRING":
                raise _Located(tok, f"expected a string, got '{tok.value}'")
            tensor.string_data.append(_unquote(tok).encode("utf-8"))
    elif dtype in _FLOAT_FIELD:
        tensor.float_data.extend(_parse_float32(tok) for tok in tokens)
    elif dtype in _DOUBLE_FIELD:
        tensor.double_data.extend(_parse_double(tok) for tok in tokens)
    elif dtype in _INT32_FIELD:
        tensor.int32_data.extend(_parse_int(tok, _INT32_MIN, _INT32_MAX) for tok in tokens)
    elif dtype in _INT64_FIELD:
        tensor.int64_data.extend(_parse_int(tok) for tok in tokens)
    else:
        tensor.uint64_data.extend(_parse_uint64(tok) for tok in tokens)


# Tensor data as the transformer hands it on: (kind, payload).
_Data = tuple[str, Any]


def _fill_tensor(tensor: onnx.TensorProto, type_proto: onnx.TypeProto, data: _Data | None,
                 where: Token | None) -> None:  # fmt: skip
    """Fill `tensor` from its declared type and data, as onnx.parser does for initializers."""
    if not type_proto.HasField("tensor_type"):
        raise _Located(where, "a tensor value needs a tensor type")
    tensor_type = type_proto.tensor_type
    dtype = tensor_type.elem_type
    tensor.data_type = dtype
    if not tensor_type.HasField("shape"):
        raise _Located(where, "a tensor value needs a shape ('[]' leaves the rank unknown)")
    for dim in tensor_type.shape.dim:
        if not dim.HasField("dim_value"):
            raise _Located(where, "a tensor value needs numeric dimensions")
        tensor.dims.append(dim.dim_value)
    if data is None:
        return
    kind, payload = data
    if kind == "numeric":
        _fill_numeric_block(tensor, dtype, payload)
    elif kind == "literal":
        _fill_literals(tensor, dtype, payload)
    else:
        tensor.data_location = TP.EXTERNAL
        for key, value in payload:
            entry = tensor.external_data.add()
            entry.key = key
            entry.value = value


def _tok(children: Sequence[Any], kind: str) -> Token | None:
    return next((c for c in children if isinstance(c, Token) and c.type == kind), None)


def _first_token(node: Any) -> Token | None:
    if isinstance(node, Token):
        return node
    return None


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


class _Builder(lark.Transformer):  # type: ignore[type-arg]
    """Builds protobuf messages bottom-up while the LALR parser reduces (no parse tree is kept)."""

    # ---- model ------------------------------------------------------------------------------
    def start(self, children: list[Any]) -> onnx.ModelProto:
        return children[0]  # type: ignore[no-any-return]

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
            number = _parse_int(value)

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
        text = _unquote(value)
        return lambda model: setattr(model, key, text)

    def opset_list(self, children: list[Any]) -> list[onnx.OperatorSetIdProto]:
        return [c for c in children if c is not None]

    def opset(self, children: list[Token]) -> onnx.OperatorSetIdProto:
        opset = onnx.OperatorSetIdProto()
        opset.domain = _unquote(children[0])
        opset.version = _parse_int(children[1])
        return opset

    def prop(self, children: list[Token]) -> tuple[str, str]:
        return _unquote(children[0]), _unquote(children[1])

    # ---- graphs -----------------------------------------------------------------------------
    def graph(self, children: list[Any]) -> onnx.GraphProto:
        graph: onnx.GraphProto = children[1]
        graph.name = _name(children[0])
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
                        _fill_tensor(tensor, vi.type, data, eq)
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
                    _fill_tensor(tensor, vi.type, data, eq)
            elif isinstance(child, list):
                graph.node.extend(child)
        return graph

    def graph_inputs(self, children: list[Any]) -> _Inputs:
        return _Inputs([c for c in children if c is not None])

    def graph_value_infos(self, children: list[Any]) -> _ValueInfos:
        return _ValueInfos([c for c in children if c is not None])

    def graph_input(self, children: list[Any]) -> tuple[onnx.ValueInfoProto, _Data | None, Token | None]:
        eq = _tok(children, "EQUAL")
        data = children[2] if len(children) > 2 else None
        return children[0], data, eq

    def value_info(self, children: list[Any]) -> onnx.ValueInfoProto:
        vi = onnx.ValueInfoProto()
        if len(children) == 2:
            vi.type.CopyFrom(children[0])
        vi.name = _name(children[-1])
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
                dim.dim_param = _unquote(tok)
            elif tok.type == "INTEGER":
                dim.dim_value = _parse_int(tok)
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
    def numeric_data(self, children: list[Token]) -> _Data:
        return ("numeric", children[0])

    def literal_data(self, children: list[Any]) -> _Data:
        return ("literal", [c for c in children if c is not None])

    def external_data(self, children: list[Any]) -> _Data:
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
            raise _Located(attr_lists[1].token, "attributes may come before or after the inputs, not both")
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
        return _NodeName(_name(children[0] if children else None))

    def node_outputs(self, children: list[Token]) -> _Names:
        """onnx's identifier-list rule: an entry is a name, or empty when a comma comes next."""
        names: list[str] = []
        i, n = 0, len(children)
        while i < n:
            tok = children[i]
            if tok.type == "COMMA":
                names.append("")
            else:
                names.append(_name(tok))
                i += 1
                if i < n and children[i].type != "COMMA":
                    raise _Located(children[i], f"expected ',' between names, got '{children[i].value}'")
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

    def attr_type(self, children: list[Token]) -> int:
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
        return _Value(AP.FLOAT, _parse_float32(children[0]), children[0])

    def string_value(self, children: list[Token]) -> _Value:
        return _Value(AP.STRING, _unquote(children[0]).encode("utf-8"), children[0])

    def ref_value(self, children: list[Token]) -> _Value:
        return _Value(_REF, _name(children[0]), children[0])

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
        _fill_tensor(tensor, type_proto, data, where)
        return _Value(AP.TENSOR, tensor, where)

    def tensor_name(self, children: list[Any]) -> tuple[str, _Data | None, Token | None]:
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
        fn.name = _name(children[index])
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
        text = _unquote(value)
        return lambda fn: setattr(fn, key, text)

    def function_attrs(self, children: list[Any]) -> tuple[list[Any]]:
        return (children,)

    def function_attr(self, children: list[Token]) -> str:
        return _name(children[0])

    def function_attr_default(self, children: list[Any]) -> onnx.AttributeProto:
        annotated = children[1] if len(children) == 3 else AP.UNDEFINED
        return _make_attribute(_name(children[0]), annotated, children[-1], children[0])

    def function_io(self, children: list[Any]) -> list[onnx.ValueInfoProto]:
        return [c for c in children if c is not None]

    function_value_infos = function_io


def _check_kind(value: _Value, expected: int) -> _Value:
    """onnx.parser's check of a value against its annotation: an integer may stand for a float."""
    if value.kind == AP.INT and expected in (AP.UNDEFINED, AP.INT):
        assert value.token is not None
        return _Value(AP.INT, _parse_int(value.token), value.token)
    if expected == AP.UNDEFINED or value.kind in (expected, _REF):
        return value
    if expected == AP.FLOAT and value.kind == AP.INT:
        # onnx.parser reads the integer's digits as a float: `-0` stays negative zero and
        # integers beyond int64 are still floats.
        assert value.token is not None
        return _Value(AP.FLOAT, _parse_float32(value.token), value.token)
    raise _Located(
        value.token,
        f"attribute value of type {AP.AttributeType.Name(value.kind)} where "
        f"{AP.AttributeType.Name(expected)} was declared",
    )


def _make_attribute(name: str, annotated: int, value: Any, where: Token) -> onnx.AttributeProto:
    attr = onnx.AttributeProto()
    attr.name = name
    if annotated != AP.UNDEFINED:
        attr.type = annotated  # type: ignore[assignment]
    if isinstance(value, _Value):
        value = _check_kind(value, annotated)
        if value.kind == _REF:
            attr.ref_attr_name = value.value
            return attr
        attr.type = value.kind  # type: ignore[assignment]
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
            raise _Located(where, f"the empty list of attribute '{name}' needs a type (e.g. '{name}: ints = []')")
        if annotated not in _SINGLETON:
            raise _Located(where, f"attribute '{name}' is declared a single value but given a list")
        return attr
    current = annotated
    for element in value:
        element = _check_kind(element, _SINGLETON.get(current, current))
        if element.kind == _REF and current != AP.UNDEFINED:
            raise _Located(element.token, "an attribute reference cannot be a list element")
        if element.kind in _LIST_OF:
            current = _LIST_OF[element.kind]
            attr.type = current  # type: ignore[assignment]
            if element.kind == AP.INT:
                attr.ints.append(element.value)
            elif element.kind == AP.FLOAT:
                attr.floats.append(element.value)
            else:
                attr.strings.append(element.value)
        # Tensors, graphs and types in a list are dropped, exactly as onnx.parser drops them.
    return attr


_PARSER: lark.Lark | None = None


def _parser() -> lark.Lark:
    """The LALR parser, built once per process (building takes a good fraction of a second)."""
    global _PARSER
    if _PARSER is None:
        grammar = importlib.resources.files("loam.grammar").joinpath("onnx.lark").read_text("utf-8")
        _PARSER = lark.Lark(
            grammar,
            parser="lalr",
            lexer="contextual",
            transformer=_Builder(),
            maybe_placeholders=True,
            propagate_positions=False,
        )
    return _PARSER


def _describe_expected(names: set[str] | frozenset[str]) -> str:
    parser = _parser()
    shown: set[str] = set()
    for name in names:
        if name in _TERMINAL_NAMES:
            shown.add(_TERMINAL_NAMES[name])
            continue
        try:
            pattern = parser.get_terminal(name).pattern
        except KeyError:
            shown.add(name)
            continue
        if isinstance(pattern, lark.lexer.PatternStr):
            shown.add(f"'{pattern.value}'")
        else:
            shown.add(name.lower())
    return ", ".join(sorted(shown))


def _got(token: Token) -> str:
    if token.type == "$END":
        return "the end of the input"
    return repr(token.value) if len(token.value) <= 40 else repr(token.value[:40] + "...")


def parse_model_text(text: str, filename: str = "<string>") -> onnx.ModelProto:
    """Parse an ONNX model in the textual format into the `ModelProto` onnx.parser would build.

    Raises `OnnxSyntaxError` (a `ModelError`) naming `filename`, the line and the column.
    """
    nul = text.find("\x00")
    if nul >= 0:
        # onnx's C++ parser reads a NUL as the end of the text; no spelling of a model contains one.
        line = text.count("\n", 0, nul) + 1
        raise OnnxSyntaxError(filename, line, nul - (text.rfind("\n", 0, nul) + 1) + 1, "a NUL character")
    try:
        return _parser().parse(text)  # type: ignore[no-any-return]
    except lark.exceptions.UnexpectedToken as err:
        tok = err.token
        line = tok.line if tok.line is not None else err.line
        column = tok.column if tok.column is not None else err.column
        if tok.type == "$END":
            line, column = _end_position(text)
        raise OnnxSyntaxError(
            filename, line, column, f"expected one of {_describe_expected(err.expected)}, got {_got(tok)}"
        ) from None
    except lark.exceptions.UnexpectedCharacters as err:
        allowed = err.allowed or set()
        got = text[err.pos_in_stream : err.pos_in_stream + 1]
        if text.startswith(".", err.pos_in_stream) and text[err.pos_in_stream + 1 : err.pos_in_stream + 2].isdigit():
            got = ".5-style number (write 0.5)"
        raise OnnxSyntaxError(
            filename, err.line, err.column, f"expected one of {_describe_expected(allowed)}, got {got!r}"
        ) from None
    except lark.exceptions.UnexpectedEOF as err:
        line, column = _end_position(text)
        raise OnnxSyntaxError(
            filename, line, column, f"expected one of {_describe_expected(set(err.expected))}, got the end of the input"
        ) from None
    except lark.exceptions.VisitError as err:
        raise _located_error(err.orig_exc, filename, text) from None
    except _Located as err:
        raise _located_error(err, filename, text) from None


def _located_error(exc: BaseException, filename: str, text: str) -> ModelError:
    if isinstance(exc, _Located):
        if exc.token is not None and exc.token.line is not None:
            return OnnxSyntaxError(filename, exc.token.line, exc.token.column or 1, exc.message)
        return OnnxSyntaxError(filename, *_end_position(text), exc.message)
    if isinstance(exc, ModelError):
        return exc
    raise exc


def _end_position(text: str) -> tuple[int, int]:
    line = text.count("\n") + 1
    return line, len(text) - (text.rfind("\n") + 1) + 1


def read_onnx_text(path: str | pathlib.Path) -> onnx.ModelProto:
    """Read a `.onnxtext` file (UTF-8); errors name the file."""
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ModelError(f"{path}: cannot read the model: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ModelError(f"{path}: the model is not UTF-8 text (byte {err.start})") from None
    return parse_model_text(text, str(path))
