"""The `graph` dialect: an ONNX model, untouched.

The importer (`loam.frontends.onnx_proto`) writes it and the exporter (`loam.frontends.onnx_export`)
reads it back into a `ModelProto`; nothing in between is lost.  One `graph.node` op stands for every
ONNX operator; ONNX's own schemas, not this dialect, define arity and attributes.

    graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
      graph.graph "mlp" (%x: !graph.tensor<f32, [4, "N", ?]>) inputs ["x"] {
        %w = graph.initializer "fc1.weight" : !graph.tensor<f32, [8, 16]>
        %b = graph.initializer "fc1.bias" = #graph.data<f32, [16], "0x0000803f..."> : ...
        %y = graph.node "Gemm" "fc1" since 17 (%x, %w, %b) {transB = 1 : i64} -> ["y"] : !graph.unknown
        graph.return %y ["y"] : !graph.tensor<f32, [4, 16]>
      }
    }

Types: `!graph.tensor<ELEM, [dims]>` (a dim is an integer, a quoted dim_param, or `?`),
`!graph.tensor<ELEM>` (unranked), `!graph.sparse<ELEM, [dims]>`, `!graph.seq<T>`, `!graph.opt<T>`,
`!graph.map<KEY, T>`, `!graph.unknown` (no type information) and `!graph.none` (an absent optional
input).  Element types are spelled by `loam.dtypes`.

ONNX node attributes live in the node's `attrs` dictionary, one xDSL attribute per ONNX kind:

    INT           1 : i64                        INTS           #graph.list<ints [1, -2]>
    FLOAT         5.000000e-01 : f32             FLOATS         #graph.list<floats [0.5, 0x7fc00000]>
    STRING        "ascii text"  (#graph.bytes<"\\C3\\BC"> otherwise: xDSL 0.75 does not read back
                                 the non-ASCII StringAttrs it prints)
                                                 STRINGS        #graph.list<strings ["a", "\\FF"]>
    TENSOR        #graph.data<...>               TENSORS        #graph.list<tensors [#graph.data<...>]>
    SPARSE_TENSOR #graph.sparse_data<...>        SPARSE_TENSORS #graph.list<sparse_tensors [...]>
    TYPE_PROTO    !graph.tensor<f32>             TYPE_PROTOS    #graph.list<types [!graph.tensor<f32>]>
    GRAPH         #graph.subgraph<0>             GRAPHS         #graph.list<graphs [1, 2]>

A graph-valued attribute names the node's region(s) by index, so the attribute order survives and
every empty list keeps its kind.  A float in a `floats` list prints as its shortest decimal, or as
its 32 IEEE bits in hex when it is not finite.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    BytesAttr,
    DictionaryAttr,
    Float32Type,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    StringAttr,
    i64,
)
from xdsl.ir import (
    Attribute,
    Block,
    Dialect,
    ParametrizedAttribute,
    Region,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_region_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import IsTerminator, NoTerminator
from xdsl.utils.exceptions import VerifyException

from loam.dtypes import ElementType, by_name
from loam.errors import UnsupportedError

# --------------------------------------------------------------------------------------------------
# Small parsing/printing helpers shared by the attributes and types below.


def _parse_bytes(parser: AttrParser) -> bytes:
    """A string literal as bytes: the lexer hands out UTF-8 and non-UTF-8 literals as different tokens."""
    text = parser.parse_optional_str_literal()
    if text is not None:
        return text.encode("utf-8")
    return parser.parse_bytes_literal()


def _parse_optional_text(parser: AttrParser) -> str | None:
    """A string literal, if present.  The printer escapes non-ASCII UTF-8 as `\\C3\\BC`, which the
    lexer then hands out as a bytes literal, so both token kinds are read and decoded."""
    text = parser.parse_optional_str_literal()
    if text is not None:
        return text
    raw = parser.parse_optional_bytes_literal()
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        parser.raise_error("expected a UTF-8 string")


def _parse_text(parser: AttrParser) -> str:
    text = _parse_optional_text(parser)
    if text is None:
        parser.raise_error("string literal expected")
    return text


def _print_float(value: float) -> str:
    """A float32 as the shortest decimal that reads back exactly, or its IEEE bits when not finite."""
    if not math.isfinite(value):
        return f"0x{struct.unpack('<I', struct.pack('<f', value))[0]:08x}"
    text = str(np.float32(value))  # numpy's shortest digits that read back as the same float32
    # MLIR float literals need a dot: `1e+16` would lex as the integer 1 followed by `e`.
    if "e" in text and "." not in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _parse_float(parser: AttrParser) -> float:
    number = parser.parse_number()
    if isinstance(number, int):  # hex bits of a non-finite float
        return struct.unpack("<f", struct.pack("<I", number & 0xFFFFFFFF))[0]
    return number


def _elem_of(name: str, where: str) -> ElementType:
    try:
        return by_name(name)
    except KeyError:
        raise VerifyException(f"{where}: unknown element type '{name}'") from None


# --------------------------------------------------------------------------------------------------
# Types


_DYNAMIC = -1  # a dim with neither dim_value nor dim_param: printed `?`


def _parse_dims(parser: AttrParser) -> ArrayAttr[Attribute]:
    def one() -> Attribute:
        if parser.parse_optional_punctuation("?") is not None:
            return IntAttr(_DYNAMIC)
        text = _parse_optional_text(parser)
        if text is not None:
            return StringAttr(text)
        return IntAttr(parser.parse_integer(allow_boolean=False))

    return ArrayAttr(parser.parse_comma_separated_list(parser.Delimiter.SQUARE, one))


def _print_dims(printer: Printer, dims: ArrayAttr[Attribute]) -> None:
    def one(dim: Attribute) -> None:
        if isinstance(dim, StringAttr):
            printer.print_string_literal(dim.data)
        elif isinstance(dim, IntAttr):
            printer.print_string("?" if dim.data == _DYNAMIC else str(dim.data))

    printer.print_string("[")
    printer.print_list(dims.data, one)
    printer.print_string("]")


def _verify_dims(dims: ArrayAttr[Attribute], where: str) -> None:
    for dim in dims.data:
        if isinstance(dim, IntAttr):
            if dim.data < _DYNAMIC:
                raise VerifyException(f"{where}: dim {dim.data} is negative")
        elif not isinstance(dim, StringAttr):
            raise VerifyException(f"{where}: a dim is an integer, a dim_param string or '?'")


class _ShapedType(ParametrizedAttribute, TypeAttribute):
    """Common syntax of `!graph.tensor` and `!graph.sparse`: `<ELEM>` or `<ELEM, [dims]>`."""

    elem_name: StringAttr
    ranked: IntAttr  # 1: `dims` is the shape; 0: no shape information (unranked)
    dims: ArrayAttr[Attribute]

    def __init__(self, elem: ElementType | str, dims: Sequence[int | str | None] | None = None) -> None:
        name = elem.name if isinstance(elem, ElementType) else elem
        items: list[Attribute] = []
        for dim in dims or ():
            if dim is None:
                items.append(IntAttr(_DYNAMIC))
            elif isinstance(dim, str):
                items.append(StringAttr(dim))
            else:
                items.append(IntAttr(dim))
        super().__init__(StringAttr(name), IntAttr(int(dims is not None)), ArrayAttr(items))

    @property
    def elem(self) -> ElementType:
        return by_name(self.elem_name.data)

    @property
    def shape(self) -> tuple[int | str | None, ...] | None:
        """The dims (`None` for `?`), or None when unranked."""
        if not self.ranked.data:
            return None
        out: list[int | str | None] = []
        for dim in self.dims.data:
            if isinstance(dim, StringAttr):
                out.append(dim.data)
            else:
                assert isinstance(dim, IntAttr)
                out.append(None if dim.data == _DYNAMIC else dim.data)
        return tuple(out)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            elem = parser.parse_identifier()
            dims: ArrayAttr[Attribute] = ArrayAttr([])
            ranked = parser.parse_optional_punctuation(",") is not None
            if ranked:
                dims = _parse_dims(parser)
        return (StringAttr(elem), IntAttr(int(ranked)), dims)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.elem_name.data}")
        if self.ranked.data:
            printer.print_string(", ")
            _print_dims(printer, self.dims)
        printer.print_string(">")

    def verify(self) -> None:
        _elem_of(self.elem_name.data, self.name)
        if not self.ranked.data and self.dims.data:
            raise VerifyException(f"{self.name}: an unranked type has no dims")
        _verify_dims(self.dims, self.name)


@irdl_attr_definition
class TensorType(_ShapedType):
    """
    A dense tensor: element type and, when known, one dim per axis.

    Syntax: `!graph.tensor<ELEM, [dims]>` or `!graph.tensor<ELEM>` (rank unknown).  A dim is an
    integer, a quoted ONNX dim_param, or `?` (neither).

    Example: `!graph.tensor<f32, [4, "N", ?]>`, `!graph.tensor<i64, []>` (a scalar)
    """

    name = "graph.tensor"

    # Parameters are redeclared on each definition: xDSL takes a ParametrizedAttribute's
    # parameters (and so its equality) from the decorated class's own annotations.
    elem_name: StringAttr
    ranked: IntAttr
    dims: ArrayAttr[Attribute]


@irdl_attr_definition
class SparseTensorType(_ShapedType):
    """
    A sparse tensor (ONNX `sparse_tensor_type`).

    Syntax: `!graph.sparse<ELEM, [dims]>` or `!graph.sparse<ELEM>`.  Example: `!graph.sparse<f32, [3, 4]>`
    """

    name = "graph.sparse"

    # Parameters are redeclared on each definition: xDSL takes a ParametrizedAttribute's
    # parameters (and so its equality) from the decorated class's own annotations.
    elem_name: StringAttr
    ranked: IntAttr
    dims: ArrayAttr[Attribute]


class _WrapperType(ParametrizedAttribute, TypeAttribute):
    """Common syntax of `!graph.seq<T>` and `!graph.opt<T>`."""

    elem_type: Attribute

    def __init__(self, elem_type: Attribute) -> None:
        super().__init__(elem_type)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return (parser.parse_type(),)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_attribute(self.elem_type)


@irdl_attr_definition
class SeqType(_WrapperType):
    """
    An ONNX sequence of values of type T.

    Syntax: `!graph.seq<T>`.  Example: `!graph.seq<!graph.tensor<f32, [?]>>`
    """

    name = "graph.seq"

    # Redeclared so xDSL counts it as this definition's parameter (see TensorType).
    elem_type: Attribute


@irdl_attr_definition
class OptType(_WrapperType):
    """
    An ONNX optional value of type T.

    Syntax: `!graph.opt<T>`.  Example: `!graph.opt<!graph.seq<!graph.tensor<i64>>>`
    """

    name = "graph.opt"

    # Redeclared so xDSL counts it as this definition's parameter (see TensorType).
    elem_type: Attribute


@irdl_attr_definition
class MapType(ParametrizedAttribute, TypeAttribute):
    """
    An ONNX map from a key element type to values of type T.

    Syntax: `!graph.map<KEY, T>`.  Example: `!graph.map<string, !graph.tensor<f32>>`
    """

    name = "graph.map"

    key_name: StringAttr
    value_type: Attribute

    def __init__(self, key: ElementType | str, value_type: Attribute) -> None:
        super().__init__(StringAttr(key.name if isinstance(key, ElementType) else key), value_type)

    @property
    def key(self) -> ElementType:
        return by_name(self.key_name.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            key = parser.parse_identifier()
            parser.parse_punctuation(",")
            return (StringAttr(key), parser.parse_type())

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.key_name.data}, ")
        printer.print_attribute(self.value_type)
        printer.print_string(">")

    def verify(self) -> None:
        _elem_of(self.key_name.data, self.name)


@irdl_attr_definition
class UnknownType(ParametrizedAttribute, TypeAttribute):
    """
    A value ONNX gives no type for (an empty TypeProto, or a value with no value_info).

    Syntax and example: `!graph.unknown`
    """

    name = "graph.unknown"


@irdl_attr_definition
class NoneType(ParametrizedAttribute, TypeAttribute):
    """
    The type of `graph.none`, an absent optional input.

    Syntax and example: `!graph.none`
    """

    name = "graph.none"


# --------------------------------------------------------------------------------------------------
# Attributes


def _pack_bits(values: np.ndarray, bits: int) -> bytes:
    """Sub-byte elements packed as ONNX does: the first element in the low bits of each byte."""
    per_byte = 8 // bits
    flat = values.reshape(-1).astype(np.uint8) & ((1 << bits) - 1)
    flat = np.concatenate([flat, np.zeros((-len(flat)) % per_byte, np.uint8)])
    grouped = flat.reshape(-1, per_byte)
    packed = np.zeros(len(grouped), np.uint8)
    for i in range(per_byte):
        packed |= grouped[:, i] << np.uint8(bits * i)
    return packed.tobytes()


def _unpack_bits(raw: bytes, bits: int, count: int) -> np.ndarray:
    per_byte = 8 // bits
    packed = np.frombuffer(raw, np.uint8)
    parts = [(packed >> np.uint8(bits * i)) & np.uint8((1 << bits) - 1) for i in range(per_byte)]
    return np.stack(parts, axis=1).reshape(-1)[:count]


@irdl_attr_definition
class TensorDataAttr(ParametrizedAttribute):
    """
    A tensor value: element type, shape, optional ONNX tensor name, and its data.

    The data is one of: the canonical little-endian bytes ONNX's `raw_data` holds (sub-byte types
    packed two or four to a byte), printed as one hex string; a list of byte strings for `string`
    tensors; or `external {key = "value", ...}`, the ONNX external_data entries (location, offset,
    length, ...) when the bytes live in another file, which this attribute never reads.

    Syntax: `#graph.data<["NAME",] ELEM, [dims], DATA>`

    Examples:
        #graph.data<f32, [2], "0x0000803f00000040">
        #graph.data<"fc1.bias", i64, [], "0x0700000000000000">
        #graph.data<string, [2], ["abc", "\\FF"]>
        #graph.data<"w", f32, [16], external {location = "w.bin", offset = "0", length = "64"}>
    """

    name = "graph.data"

    elem_name: StringAttr
    dims: ArrayAttr[IntAttr]
    tensor_name: StringAttr
    raw: BytesAttr
    strings: ArrayAttr[BytesAttr]
    external: ArrayAttr[StringAttr]  # key, value, key, value, ...

    def __init__(
        self,
        elem: ElementType | str,
        shape: Sequence[int],
        *,
        raw: bytes = b"",
        strings: Sequence[bytes] = (),
        external: Sequence[tuple[str, str]] = (),
        name: str = "",
    ) -> None:
        elem_name = elem.name if isinstance(elem, ElementType) else elem
        super().__init__(
            StringAttr(elem_name),
            ArrayAttr([IntAttr(d) for d in shape]),
            StringAttr(name),
            BytesAttr(raw),
            ArrayAttr([BytesAttr(s) for s in strings]),
            ArrayAttr([StringAttr(x) for kv in external for x in kv]),
        )

    # ---- Python API

    @staticmethod
    def from_numpy(arr: Any, elem: ElementType | None = None, name: str | None = None) -> TensorDataAttr:
        """The value of numpy array `arr`; `elem` is deduced from its dtype unless given."""
        arr = np.asarray(arr)
        if elem is None:
            elem = _elem_for_dtype(arr.dtype)
        if elem.name == "string":
            items = [x if isinstance(x, bytes) else str(x).encode("utf-8") for x in arr.reshape(-1).tolist()]
            return TensorDataAttr(elem, arr.shape, strings=items, name=name or "")
        if elem.numpy is None:
            raise UnsupportedError(f"element type {elem.name} has no numpy dtype to read from")
        values = np.asarray(arr, dtype=elem.numpy)
        if elem.bits < 8:
            raw = _pack_bits(values.view(np.uint8), elem.bits)
        else:
            raw = np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<")).tobytes()
        return TensorDataAttr(elem, arr.shape, raw=raw, name=name or "")

    def to_numpy(self) -> np.ndarray:
        """The value as a numpy array (strings as an object array of `bytes`)."""
        elem = self.elem
        if self.is_external:
            raise UnsupportedError(f"tensor '{self.tensor_name.data}' holds external data, not bytes")
        if elem.name == "string":
            out = np.empty(len(self.strings.data), dtype=object)
            out[:] = [s.data for s in self.strings.data]
            return out.reshape(self.shape)
        if elem.numpy is None:
            raise UnsupportedError(f"element type {elem.name} has no numpy dtype")
        if elem.bits < 8:
            values = _unpack_bits(self.raw.data, elem.bits, self.num_elements)
            if elem.name in ("i4", "i2"):  # sign-extend before numpy casts the value
                signed = values.astype(np.int8)
                signed[signed >= (1 << (elem.bits - 1))] -= np.int8(1 << elem.bits)
                return signed.astype(elem.numpy).reshape(self.shape)
            if elem.name.startswith("f"):
                return values.view(elem.numpy).reshape(self.shape)
            return values.astype(elem.numpy).reshape(self.shape)
        dtype = elem.numpy.newbyteorder("<")
        return np.frombuffer(self.raw.data, dtype=dtype).astype(elem.numpy).reshape(self.shape)

    @property
    def elem(self) -> ElementType:
        return by_name(self.elem_name.data)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.data for d in self.dims.data)

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def is_external(self) -> bool:
        return bool(self.external.data)

    @property
    def external_entries(self) -> list[tuple[str, str]]:
        items = [s.data for s in self.external.data]
        return list(zip(items[::2], items[1::2], strict=True))

    # ---- syntax

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            name = _parse_optional_text(parser)
            if name is not None:
                parser.parse_punctuation(",")
            elem = parser.parse_identifier()
            parser.parse_punctuation(",")
            dims = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False)
            )
            parser.parse_punctuation(",")
            raw, strings, external = b"", [], []
            if parser.parse_optional_keyword("external") is not None:

                def entry() -> tuple[str, str]:
                    key = parser.parse_optional_identifier() or _parse_text(parser)
                    parser.parse_punctuation("=")
                    return key, _parse_text(parser)

                external = parser.parse_comma_separated_list(parser.Delimiter.BRACES, entry)
            elif (text := _parse_optional_text(parser)) is not None:
                if not text.startswith("0x"):
                    parser.raise_error('tensor bytes are written as a hex string "0x..."')
                try:
                    raw = bytes.fromhex(text[2:])
                except ValueError:
                    parser.raise_error(f"malformed hex string {text!r}")
            else:
                strings = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: _parse_bytes(parser))
        attr = TensorDataAttr(elem, dims, raw=raw, strings=strings, external=external, name=name or "")
        return attr.parameters

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        if self.tensor_name.data:
            printer.print_string_literal(self.tensor_name.data)
            printer.print_string(", ")
        printer.print_string(f"{self.elem_name.data}, [{', '.join(str(d) for d in self.shape)}], ")
        if self.is_external:
            printer.print_string("external {")
            for i, (key, value) in enumerate(self.external_entries):
                printer.print_string(", " if i else "")
                printer.print_identifier_or_string_literal(key)
                printer.print_string(" = ")
                printer.print_string_literal(value)
            printer.print_string("}")
        elif self.elem_name.data == "string":
            printer.print_string("[")
            printer.print_list(self.strings.data, lambda s: printer.print_bytes_literal(s.data))
            printer.print_string("]")
        else:
            printer.print_string(f'"0x{self.raw.data.hex()}"')
        printer.print_string(">")

    def verify(self) -> None:
        elem = _elem_of(self.elem_name.data, "#graph.data")
        if any(d.data < 0 for d in self.dims.data):
            raise VerifyException(f"#graph.data: negative dim in shape {list(self.shape)}")
        if len(self.external.data) % 2:
            raise VerifyException("#graph.data: external entries come in key/value pairs")
        if self.is_external:
            if self.raw.data or self.strings.data:
                raise VerifyException("#graph.data: external data holds no bytes of its own")
            return
        if elem.name == "string":
            if self.raw.data or len(self.strings.data) != self.num_elements:
                raise VerifyException(
                    f"#graph.data: a string tensor of shape {list(self.shape)} holds "
                    f"{self.num_elements} strings, got {len(self.strings.data)}"
                )
            return
        if self.strings.data:
            raise VerifyException(f"#graph.data: a {elem.name} tensor holds no strings")
        expected = (self.num_elements * elem.bits + 7) // 8
        if len(self.raw.data) != expected:
            raise VerifyException(
                f"#graph.data: {elem.name} tensor of shape {list(self.shape)} needs {expected} bytes, "
                f"got {len(self.raw.data)}"
            )


def _elem_for_dtype(dtype: np.dtype) -> ElementType:
    from loam.dtypes import BY_ONNX

    if dtype.kind in ("U", "S", "O"):
        return by_name("string")
    dtype = dtype.newbyteorder("=")  # a big-endian array has the same element type
    for elem in BY_ONNX.values():
        if elem.numpy is not None and elem.numpy == dtype and elem.name != "string":
            return elem
    raise UnsupportedError(f"numpy dtype {dtype} has no ONNX element type")


@irdl_attr_definition
class SparseDataAttr(ParametrizedAttribute):
    """
    An ONNX sparse tensor value: dense dims, the non-zero values and their indices.

    Syntax: `#graph.sparse_data<[dims], values = #graph.data<...>, indices = #graph.data<...>>`

    Example:
        #graph.sparse_data<[3, 4], values = #graph.data<"v", f32, [2], "0x...">,
                           indices = #graph.data<i64, [2], "0x...">>
    """

    name = "graph.sparse_data"

    dims: ArrayAttr[IntAttr]
    values: TensorDataAttr
    indices: TensorDataAttr

    def __init__(self, dims: Sequence[int], values: TensorDataAttr, indices: TensorDataAttr) -> None:
        super().__init__(ArrayAttr([IntAttr(d) for d in dims]), values, indices)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            dims = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False)
            )
            parser.parse_punctuation(",")
            parser.parse_keyword("values")
            parser.parse_punctuation("=")
            values = parser.parse_attribute()
            parser.parse_punctuation(",")
            parser.parse_keyword("indices")
            parser.parse_punctuation("=")
            indices = parser.parse_attribute()
        return (ArrayAttr([IntAttr(d) for d in dims]), values, indices)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<[{', '.join(str(d.data) for d in self.dims.data)}], values = ")
        printer.print_attribute(self.values)
        printer.print_string(", indices = ")
        printer.print_attribute(self.indices)
        printer.print_string(">")


@irdl_attr_definition
class BytesValueAttr(ParametrizedAttribute):
    """
    A STRING node attribute that is not ASCII (ASCII strings are plain `StringAttr`s).

    Syntax and example: `#graph.bytes<"\\FF\\00">`
    """

    name = "graph.bytes"

    value: BytesAttr

    def __init__(self, value: bytes) -> None:
        super().__init__(BytesAttr(value))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return (BytesAttr(_parse_bytes(parser)),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_bytes_literal(self.value.data)
        printer.print_string(">")


@irdl_attr_definition
class SubgraphAttr(ParametrizedAttribute):
    """
    A GRAPH node attribute: the index of the node's region that holds the subgraph.

    Syntax and example: `#graph.subgraph<0>`
    """

    name = "graph.subgraph"

    index: IntAttr

    def __init__(self, index: int) -> None:
        super().__init__(IntAttr(index))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return (IntAttr(parser.parse_integer(allow_boolean=False, allow_negative=False)),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.index.data}>")


LIST_KINDS = ("ints", "floats", "strings", "tensors", "sparse_tensors", "types", "graphs")


@irdl_attr_definition
class ListAttr(ParametrizedAttribute):
    """
    A list-valued ONNX node attribute; the kind keeps an empty list's ONNX type.

    Kinds: `ints`, `floats`, `strings`, `tensors`, `sparse_tensors`, `types`, `graphs` (region
    indices of the node).  Items are `IntAttr` (ints, graphs), f32 `FloatAttr` (floats),
    `BytesAttr` (strings), or the attributes/types themselves.

    Syntax: `#graph.list<KIND [items]>`

    Examples:
        #graph.list<ints [1, 1, -1]>
        #graph.list<floats []>
        #graph.list<strings ["LSTM", "\\FF"]>
        #graph.list<types [!graph.tensor<f32>, !graph.seq<!graph.tensor<i64>>]>
        #graph.list<graphs [0, 1]>
    """

    name = "graph.list"

    kind: StringAttr
    items: ArrayAttr[Attribute]

    def __init__(self, kind: str, items: Iterable[Attribute]) -> None:
        super().__init__(StringAttr(kind), ArrayAttr(list(items)))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            kind = parser.parse_identifier()
            if kind not in LIST_KINDS:
                parser.raise_error(f"list kind is one of {', '.join(LIST_KINDS)}, got '{kind}'")

            def item() -> Attribute:
                if kind in ("ints", "graphs"):
                    return IntAttr(parser.parse_integer(allow_boolean=False))
                if kind == "floats":
                    return FloatAttr(_parse_float(parser), Float32Type())
                if kind == "strings":
                    return BytesAttr(_parse_bytes(parser))
                if kind == "types":
                    return parser.parse_type()
                return parser.parse_attribute()

            items = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, item)
        return (StringAttr(kind), ArrayAttr(items))

    def print_parameters(self, printer: Printer) -> None:
        kind = self.kind.data
        printer.print_string(f"<{kind} [")

        def item(attr: Attribute) -> None:
            if isinstance(attr, IntAttr):
                printer.print_string(str(attr.data))
            elif isinstance(attr, FloatAttr):
                printer.print_string(_print_float(attr.value.data))
            elif isinstance(attr, BytesAttr):
                printer.print_bytes_literal(attr.data)
            else:
                printer.print_attribute(attr)

        printer.print_list(self.items.data, item)
        printer.print_string("]>")

    def verify(self) -> None:
        kind = self.kind.data
        expected: dict[str, type[Attribute] | tuple[type[Attribute], ...]] = {
            "ints": IntAttr,
            "graphs": IntAttr,
            "floats": FloatAttr,
            "strings": BytesAttr,
            "tensors": TensorDataAttr,
            "sparse_tensors": SparseDataAttr,
            "types": TypeAttribute,
        }
        if kind not in expected:
            raise VerifyException(f"#graph.list: unknown kind '{kind}'")
        for attr in self.items.data:
            if not isinstance(attr, expected[kind]):
                raise VerifyException(f"#graph.list<{kind}>: unexpected item {attr}")


def attr_to_python(attr: Attribute) -> Any:
    """A node attribute as a plain Python value (int, float, str, bytes, lists, numpy arrays)."""
    if isinstance(attr, IntegerAttr):
        return int(attr.value.data)
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, BytesValueAttr):
        try:
            return attr.value.data.decode("utf-8")
        except UnicodeDecodeError:
            return attr.value.data
    if isinstance(attr, TensorDataAttr):
        return attr.to_numpy()
    if isinstance(attr, SubgraphAttr):
        return attr.index.data
    if isinstance(attr, ListAttr):
        out: list[Any] = []
        for item in attr.items.data:
            if isinstance(item, IntAttr):
                out.append(item.data)
            elif isinstance(item, BytesAttr):
                try:
                    out.append(item.data.decode("utf-8"))
                except UnicodeDecodeError:
                    out.append(item.data)
            else:
                out.append(attr_to_python(item))
        return out
    return attr  # sparse tensors and type protos stay attributes


# --------------------------------------------------------------------------------------------------
# Operations


def _parse_defined_operand(parser: Parser) -> SSAValue:
    """An operand defined earlier (ONNX graphs are topologically ordered), resolved with its own type."""
    return _resolve_defined(parser, parser.parse_unresolved_operand())


def _resolve_defined(parser: Parser, unresolved: UnresolvedOperand) -> SSAValue:
    values = parser.ssa_values.get(unresolved.operand_name)
    if not values or unresolved.index >= len(values):
        parser.raise_error("a graph value is used before it is defined", unresolved.span)
    return parser.resolve_operand(unresolved, values[unresolved.index].type)


def _print_names(printer: Printer, names: ArrayAttr[StringAttr]) -> None:
    printer.print_string("[")
    printer.print_list(names.data, lambda s: printer.print_string_literal(s.data))
    printer.print_string("]")


def _parse_names(parser: Parser) -> ArrayAttr[StringAttr]:
    names = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: _parse_text(parser))
    return ArrayAttr([StringAttr(n) for n in names])


def _names(names: Sequence[str]) -> ArrayAttr[StringAttr]:
    return ArrayAttr([StringAttr(n) for n in names])


def set_name_hint(value: SSAValue, onnx_name: str) -> None:
    """Show the ONNX name as the SSA name where xDSL accepts it (`%fc1.weight`, not `%0`)."""
    if onnx_name and SSAValue.is_valid_name(onnx_name):
        value.name_hint = onnx_name


def _check_unique(names: Iterable[str], where: str) -> None:
    seen: set[str] = set()
    for name in names:
        if not name:
            continue
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
        name = _parse_text(parser)
        args = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_argument)
        parser.parse_keyword("inputs")
        inputs = [s.data for s in _parse_names(parser).data]
        doc = _parse_text(parser) if parser.parse_optional_keyword("doc") else None
        body = parser.parse_region(args)
        return cls(name, inputs, body, doc)

    def verify_(self) -> None:
        block = self.body.block
        where = f"graph.graph '{self.graph_name.data}'"
        if len(block.args) != len(self.input_names.data):
            raise VerifyException(
                f"{where}: {len(block.args)} block arguments but {len(self.input_names.data)} input names"
            )
        if not isinstance(block.last_op, ReturnOp):
            raise VerifyException(f"{where}: the body must end in graph.return")
        _check_unique(_graph_names(block, [s.data for s in self.input_names.data]), where)


@irdl_op_definition
class InitializerOp(IRDLOperation):
    """
    An ONNX initializer: a named constant tensor, with its data unless it has been stripped.

    `default_of` names the graph input this initializer gives a default value (an ONNX
    initializer that shares its name with an input); nodes then read the input.

    Syntax: `%v = graph.initializer "NAME" [default_of %input] [= #graph.data<...>] : T`

    Examples:
        %w = graph.initializer "fc1.weight" : !graph.tensor<f32, [8, 16]>
        %b = graph.initializer "fc1.bias" = #graph.data<f32, [1], "0x0000803f"> : !graph.tensor<f32, [1]>
    """

    name = "graph.initializer"

    onnx_name = prop_def(StringAttr)
    value = opt_prop_def(TensorDataAttr)
    default_of = opt_operand_def()
    result = result_def()

    def __init__(
        self,
        onnx_name: str,
        result_type: Attribute,
        value: TensorDataAttr | None = None,
        default_of: SSAValue | None = None,
    ) -> None:
        props: dict[str, Attribute] = {"onnx_name": StringAttr(onnx_name)}
        if value is not None:
            props["value"] = value
        super().__init__(
            operands=[[default_of] if default_of is not None else []],
            properties=props,
            result_types=[result_type],
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.onnx_name.data)
        if self.default_of is not None:
            printer.print_string(" default_of ")
            printer.print_operand(self.default_of)
        if self.value is not None:
            printer.print_string(" = ")
            printer.print_attribute(self.value)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> InitializerOp:
        name = _parse_text(parser)
        default_of = _parse_defined_operand(parser) if parser.parse_optional_keyword("default_of") else None
        value = parser.parse_attribute() if parser.parse_optional_punctuation("=") else None
        parser.parse_punctuation(":")
        result_type = parser.parse_type()
        if value is not None and not isinstance(value, TensorDataAttr):
            parser.raise_error("graph.initializer value must be a #graph.data")
        return cls(name, result_type, value, default_of)

    def verify_(self) -> None:
        if self.default_of is not None and not isinstance(self.default_of.owner, Block):
            raise VerifyException(f"graph.initializer '{self.onnx_name.data}': default_of must be a graph input")


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
        attrs: dict[str, Attribute] | None = None,
        regions: Sequence[Region] = (),
        doc_string: str | None = None,
    ) -> None:
        props: dict[str, Attribute] = {
            "op_type": StringAttr(op_type),
            "node_name": StringAttr(node_name),
            "domain": StringAttr(domain),
            "since": IntegerAttr(since, i64),
            "attrs": DictionaryAttr(attrs or {}),
            "output_names": _names(output_names),
        }
        if doc_string:
            props["doc_string"] = StringAttr(doc_string)
        super().__init__(
            operands=[list(inputs)],
            result_types=[list(output_types)],
            properties=props,
            regions=[list(regions)],
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
        op_type = _parse_text(parser)
        node_name = _parse_text(parser)
        domain = _parse_text(parser) if parser.parse_optional_keyword("domain") else ""
        parser.parse_keyword("since")
        since = parser.parse_integer(allow_boolean=False)
        inputs = parser.parse_comma_separated_list(parser.Delimiter.PAREN, lambda: _parse_defined_operand(parser))
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation("->")
        names = [s.data for s in _parse_names(parser).data]
        types: list[Attribute] = []
        if parser.parse_optional_punctuation(":"):
            types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        regions: list[Region] = []
        if parser.parse_optional_keyword("regions"):
            regions = parser.parse_comma_separated_list(parser.Delimiter.PAREN, lambda: _parse_subgraph_region(parser))
        doc = _parse_text(parser) if parser.parse_optional_keyword("doc") else None
        return cls(
            op_type, inputs, types, names, node_name=node_name, domain=domain, since=since,
            attrs=attrs, regions=regions, doc_string=doc,
        )  # fmt: skip

    def verify_(self) -> None:
        where = f"graph.node '{self.node_name}' ({self.op_type})"
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
            names = first.input_names if isinstance(first, SubgraphInfoOp) else ArrayAttr([])
            if len(names.data) != len(block.args):
                raise VerifyException(
                    f"{where}: a subgraph with {len(block.args)} inputs needs graph.subgraph_info naming them"
                )
            _check_unique(_graph_names(block, [s.data for s in names.data]), where)


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
        name = _parse_text(parser)
        parser.parse_keyword("inputs")
        names = [s.data for s in _parse_names(parser).data]
        doc = _parse_text(parser) if parser.parse_optional_keyword("doc") else None
        return cls(name, names, doc)


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """
    A folded tensor value (stage 0 writes it; the importer never does).

    Syntax: `%c = graph.constant #graph.data<...> : T`

    Example: `%c = graph.constant #graph.data<i64, [1], "0x0200000000000000"> : !graph.tensor<i64, [1]>`
    """

    name = "graph.constant"

    value = prop_def(TensorDataAttr)
    result = result_def()
    assembly_format = "qualified($value) attr-dict `:` type($result)"

    def __init__(self, value: TensorDataAttr, result_type: Attribute | None = None) -> None:
        if result_type is None:
            result_type = TensorType(value.elem, value.shape)
        super().__init__(properties={"value": value}, result_types=[result_type])


@irdl_op_definition
class NoneOp(IRDLOperation):
    """
    The value of an absent optional node input (`""` in ONNX).

    Syntax and example: `%none = graph.none`
    """

    name = "graph.none"

    result = result_def(NoneType)
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__(result_types=[NoneType()])


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
            values = [_resolve_defined(parser, u) for u in pending]
        names = [s.data for s in _parse_names(parser).data]
        types: list[Attribute] = []
        if parser.parse_optional_punctuation(":"):
            types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        return cls(values, names, types)

    def verify_(self) -> None:
        n = len(self.values)
        if len(self.output_names.data) != n or len(self.declared_types.data) != n:
            raise VerifyException(
                f"graph.return: {n} values, {len(self.output_names.data)} names and "
                f"{len(self.declared_types.data)} declared types must agree"
            )


Graph = Dialect(
    "graph",
    [ModelOp, GraphOp, SubgraphInfoOp, InitializerOp, NodeOp, ConstantOp, NoneOp, ReturnOp],
    [
        TensorType,
        SparseTensorType,
        SeqType,
        OptType,
        MapType,
        UnknownType,
        NoneType,
        TensorDataAttr,
        SparseDataAttr,
        BytesValueAttr,
        SubgraphAttr,
        ListAttr,
    ],
)
