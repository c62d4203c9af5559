"""The `graph` dialect's attributes: ONNX tensor values and the node attributes xDSL's builtins lack.

`#graph.data` is a tensor (its bytes, its strings, or where its external data lives) and
`#graph.sparse_data` a sparse one; `#graph.bytes`, `#graph.subgraph` and `#graph.list` carry the
ONNX attribute kinds that have no builtin attribute (the table of every kind's encoding is in the
package docstring, `loam.dialects.graph`).  `attr_to_python` reads any node attribute back as a
plain Python value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, BytesAttr, Float32Type, FloatAttr, IntAttr, IntegerAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from loam.core.dtypes import ElementType, by_name
from loam.core.errors import UnsupportedError
from loam.dialects.graph.syntax import elem_of, parse_bytes, parse_float, parse_optional_text, parse_text, print_float


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
            name = parse_optional_text(parser)
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
                    key = parser.parse_optional_identifier() or parse_text(parser)
                    parser.parse_punctuation("=")
                    return key, parse_text(parser)

                external = parser.parse_comma_separated_list(parser.Delimiter.BRACES, entry)
            elif (text := parse_optional_text(parser)) is not None:
                if not text.startswith("0x"):
                    parser.raise_error('tensor bytes are written as a hex string "0x..."')
                try:
                    raw = bytes.fromhex(text[2:])
                except ValueError:
                    parser.raise_error(f"malformed hex string {text!r}")
            else:
                strings = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_bytes(parser))
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
        elem = elem_of(self.elem_name.data, "#graph.data")
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
    from loam.core.dtypes import BY_ONNX

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
            return (BytesAttr(parse_bytes(parser)),)

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
                    return FloatAttr(parse_float(parser), Float32Type())
                if kind == "strings":
                    return BytesAttr(parse_bytes(parser))
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
                printer.print_string(print_float(attr.value.data))
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
