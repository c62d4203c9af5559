"""The `graph` dialect's types: what an ONNX TypeProto says of a value.

`!graph.tensor<ELEM, [dims]>` (a dim is an integer, a quoted dim_param, or `?`), `!graph.tensor<ELEM>`
(unranked), `!graph.sparse<ELEM, [dims]>`, `!graph.seq<T>`, `!graph.opt<T>`, `!graph.map<KEY, T>`,
`!graph.unknown` (no type information) and `!graph.none` (an absent optional input).  Each type's
docstring gives its syntax.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, IntAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from loam.core.dtypes import ElementType, by_name
from loam.dialects.graph.syntax import elem_of, parse_optional_text

_DYNAMIC = -1  # a dim with neither dim_value nor dim_param: printed `?`


def _parse_dims(parser: AttrParser) -> ArrayAttr[Attribute]:
    def one() -> Attribute:
        if parser.parse_optional_punctuation("?") is not None:
            return IntAttr(_DYNAMIC)
        text = parse_optional_text(parser)
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
        elem_of(self.elem_name.data, self.name)
        if not self.ranked.data and self.dims.data:
            raise VerifyException(f"{self.name}: an unranked type has no dims")
        _verify_dims(self.dims, self.name)


@irdl_attr_definition(init=False)  # _ShapedType.__init__ builds the parameters
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


@irdl_attr_definition(init=False)  # _ShapedType.__init__ builds the parameters
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
        elem_of(self.key_name.data, self.name)


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
