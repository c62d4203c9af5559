"""The `shape_poly` dialect: extents as integer polynomials over named symbols.

Stage 0 gives every value whose shape it knows a `!shape_poly.tensor` type: an element type and
one `loam.core.poly.Poly` per axis.  A number is a constant polynomial, a dim_param a symbol, and the
shape arithmetic an exporter writes (merges, sums, differences) stays exact.

Syntax::

    #shape_poly.extent<2*N + 1>                  // ExtentAttr: one polynomial
    !shape_poly.tensor<f32, [4, N, 2*N + 1]>     // PolyTensorType; rank 0 is `[]`
    !shape_poly.tensor<i64, ["seq-len" - 1]>     // a symbol that is not an identifier is quoted
    shape_poly.owe N <= 1024 for "Slice node 'attn/mask_slice'"   // OweOp: a condition forward checks
    %s = shape_poly.values [N, 768] : !shape_poly.tensor<i64, [2]>  // ValuesOp: a shape as polynomials

The polynomial text is `loam.core.poly`'s (`str(Poly)` prints it); inside the IR it is read with
xDSL's own lexer, so it needs no quotes around it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NoReturn, Protocol, runtime_checkable

from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.ir import Attribute, Data, Dialect, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import IRDLOperation, irdl_attr_definition, irdl_op_definition, operand_def, prop_def, result_def
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.mlir_lexer import MLIRTokenKind

from loam.core.dtypes import BY_NAME, ElementType, by_name
from loam.core.poly import Poly, is_plain_symbol, parse_poly


def parse_optional_text_literal(parser: AttrParser) -> str | None:
    """A quoted string at the parser's position, if one is there.

    xDSL's printer escapes non-ASCII characters byte by byte, and its lexer then calls the literal
    bytes rather than a string; both read back here as the UTF-8 text they spell.
    """
    if (text := parser.parse_optional_str_literal()) is not None:
        return text
    if (raw := parser.parse_optional_bytes_literal()) is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        parser.raise_error("string literal is not valid UTF-8")


class XdslPolyTokens:
    """`loam.core.poly.PolyTokens` over an xDSL parser: the polynomial grammar on xDSL's lexer."""

    def __init__(self, parser: AttrParser) -> None:
        self.parser = parser

    def integer(self) -> int | None:
        return self.parser.parse_optional_integer(allow_boolean=False, allow_negative=False)

    def symbol(self) -> str | None:
        if (literal := parse_optional_text_literal(self.parser)) is not None:
            return literal
        if (ident := self.parser.parse_optional_identifier()) is not None:
            # xDSL identifiers may hold `.` and `$`; Loam prints those names quoted, so a bare one
            # here would read text that `str(Poly)` never writes.
            if not is_plain_symbol(ident):
                self.error(f"symbol '{ident}' must be quoted: \"{ident}\"")
            return ident
        return None

    def punct(self, spelling: str) -> bool:
        assert MLIRTokenKind.is_spelling_of_punctuation(spelling)  # the polynomial grammar's are MLIR's
        return self.parser.parse_optional_punctuation(spelling) is not None

    def error(self, message: str) -> NoReturn:
        self.parser.raise_error(message)


def parse_poly_attr_text(parser: AttrParser) -> Poly:
    """Read one polynomial at the parser's position (used by every Loam type holding extents)."""
    return parse_poly(XdslPolyTokens(parser))


def parse_element_type(parser: AttrParser) -> str:
    """Read an element type name (`f32`, `i64`, ...), refusing one `loam.core.dtypes` does not define."""
    name = parser.parse_optional_identifier()
    if name is None:
        parser.raise_error("expected an element type such as f32")
    if name not in BY_NAME:
        parser.raise_error(f"unknown element type '{name}'")
    return name


@irdl_attr_definition
class ExtentAttr(Data[Poly]):
    """One extent: a `loam.core.poly.Poly` as an attribute.

    Syntax: `#shape_poly.extent<POLY>`, e.g. `#shape_poly.extent<2*N + 1>`.
    """

    name = "shape_poly.extent"

    def __init__(self, value: Poly | int) -> None:
        super().__init__(Poly.lift(value))

    @property
    def poly(self) -> Poly:
        return self.data

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> Poly:
        with parser.in_angle_brackets():
            return parse_poly_attr_text(parser)

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string(f"<{self.data}>")


def _check_dims(dims: Sequence[Poly], what: str) -> None:
    for i, dim in enumerate(dims):
        if dim.is_const and dim.const_value < 0:
            raise VerifyException(f"{what}: axis {i} has negative extent {dim}")


@irdl_attr_definition
class PolyTensorType(ParametrizedAttribute, TypeAttribute):
    """A tensor whose extents are polynomials.

    Syntax: `!shape_poly.tensor<ELEM, [POLY, ...]>`, e.g. `!shape_poly.tensor<f32, [4, N, 2*N + 1]>`;
    a scalar is `!shape_poly.tensor<f32, []>`.  API: `.elem` (`loam.core.dtypes.ElementType`),
    `.shape` (tuple of `Poly`).
    """

    name = "shape_poly.tensor"

    elem_name: StringAttr
    dims: ArrayAttr[ExtentAttr]

    def __init__(self, elem: ElementType | str, shape: Sequence[Poly | int]) -> None:
        elem_name = elem if isinstance(elem, str) else elem.name
        super().__init__(StringAttr(elem_name), ArrayAttr([ExtentAttr(d) for d in shape]))

    @property
    def elem(self) -> ElementType:
        return by_name(self.elem_name.data)

    @property
    def shape(self) -> tuple[Poly, ...]:
        return tuple(d.data for d in self.dims.data)

    @property
    def rank(self) -> int:
        return len(self.dims.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            elem = parse_element_type(parser)
            parser.parse_punctuation(",")
            dims = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_poly_attr_text(parser))
        return (StringAttr(elem), ArrayAttr([ExtentAttr(d) for d in dims]))

    def print_parameters(self, printer: Printer) -> None:
        dims = ", ".join(str(d) for d in self.shape)
        printer.print_string(f"<{self.elem_name.data}, [{dims}]>")

    def verify(self) -> None:
        if self.elem_name.data not in BY_NAME:
            raise VerifyException(f"unknown element type '{self.elem_name.data}'")
        _check_dims(self.shape, "!shape_poly.tensor")


@functools.lru_cache(maxsize=4096)
def poly_tensor_type(elem: str, shape: tuple[Poly, ...]) -> PolyTensorType:
    """`PolyTensorType(elem, shape)`, one object per distinct type: a type is immutable, and making one
    (xDSL verifies every extent attribute) costs far more than this lookup; stage 0 makes the same
    types thousands of times over a large graph."""
    return PolyTensorType(elem, shape)


@irdl_op_definition
class OweOp(IRDLOperation):
    """A condition on the inputs that `forward` checks before any kernel runs.

    Stage 0 writes one where it cannot decide an inequality (or an equality of two lengths) over
    the symbols the run binds; `reason` names the node that relies on it.  Syntax and example::

        shape_poly.owe N + S <= 1024 for "Slice node 'attn/mask_slice'"
        shape_poly.owe attention_length == past + S for "Add node 'mask_add'"
    """

    name = "shape_poly.owe"

    lhs = prop_def(ExtentAttr)
    rhs = prop_def(ExtentAttr)
    relation = prop_def(StringAttr)  # "le" or "eq"
    reason = prop_def(StringAttr)

    def __init__(self, lhs: Poly | int, rhs: Poly | int, reason: str, *, equal: bool = False) -> None:
        super().__init__(
            properties={
                "lhs": ExtentAttr(lhs),
                "rhs": ExtentAttr(rhs),
                "relation": StringAttr("eq" if equal else "le"),
                "reason": StringAttr(reason),
            }
        )

    @property
    def equal(self) -> bool:
        return self.relation.data == "eq"

    @property
    def condition(self) -> str:
        """The condition as text: `N + S <= 1024`."""
        return f"{self.lhs.data} {'==' if self.equal else '<='} {self.rhs.data}"

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.condition} for ")
        printer.print_string_literal(self.reason.data)

    @classmethod
    def parse(cls, parser: Parser) -> OweOp:
        lhs = parse_poly_attr_text(parser)
        if parser.parse_optional_punctuation("<") is not None:
            equal = False
        else:
            parser.parse_punctuation("=", " in an owed condition (<= or ==)")
            equal = True
        parser.parse_punctuation("=", " in an owed condition (<= or ==)")
        rhs = parse_poly_attr_text(parser)
        parser.parse_keyword("for")
        reason = parse_optional_text_literal(parser)
        if reason is None:
            parser.raise_error("expected the quoted name of the node relying on the condition")
        return cls(lhs, rhs, reason, equal=equal)

    def verify_(self) -> None:
        if self.relation.data not in ("le", "eq"):
            raise VerifyException(f"shape_poly.owe: relation must be 'le' or 'eq', got '{self.relation.data}'")
        if not self.reason.data.strip():
            raise VerifyException(f"shape_poly.owe '{self.condition}' must name what relies on it")


VALUES_TYPES = ("shape_poly.tensor", "tensor_axes.tensor")
"""The result types of `shape_poly.values`: its own before `name-axes`, a named-axes tensor after."""


@runtime_checkable
class ValuesType(Protocol):
    """What `shape_poly.values` reads of its result type: both VALUES_TYPES have it (the named-axes
    one lives in `loam.dialects.tensor_axes`, above this module)."""

    @property
    def elem(self) -> ElementType: ...

    @property
    def shape(self) -> tuple[Poly, ...]: ...


@irdl_op_definition
class ValuesOp(IRDLOperation):
    """An integer tensor stage 0 knows element by element as polynomials (a Shape of a symbolic tensor).

    Nothing computes it while it only feeds other shape arithmetic; a kernel that reads it gets the
    numbers from the symbols the run bound.  Syntax and example (row-major elements)::

        %s = shape_poly.values "shape_of_x" [N, 768] : !shape_poly.tensor<i64, [2]>

    The optional string is the ONNX tensor's name, by which a layout rule reaches it.  Once `name-axes`
    has named its axes the result is a `!tensor_axes.tensor` (checked by name here: tensor_axes builds
    on this dialect), so the IR dumped after any pass parses and verifies again.
    """

    name = "shape_poly.values"

    elements = prop_def(ArrayAttr[ExtentAttr])
    tensor_name = prop_def(StringAttr)
    result = result_def()

    def __init__(self, elements: Sequence[Poly | int], result_type: Attribute, tensor_name: str = "") -> None:
        super().__init__(
            properties={
                "elements": ArrayAttr([ExtentAttr(e) for e in elements]),
                "tensor_name": StringAttr(tensor_name),
            },
            result_types=[result_type],
        )

    @property
    def polys(self) -> tuple[Poly, ...]:
        return tuple(e.data for e in self.elements.data)

    def print(self, printer: Printer) -> None:
        if self.tensor_name.data:
            printer.print_string(" ")
            printer.print_string_literal(self.tensor_name.data)
        printer.print_string(f" [{', '.join(str(p) for p in self.polys)}] : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> ValuesOp:
        name = parse_optional_text_literal(parser) or ""
        polys = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_poly_attr_text(parser))
        parser.parse_punctuation(":")
        t = parser.parse_type()
        if t.name not in VALUES_TYPES:
            parser.raise_error(
                "shape_poly.values needs a !shape_poly.tensor (or, axes named, !tensor_axes.tensor) type"
            )
        return cls(polys, t, name)

    def verify_(self) -> None:
        t = self.result.type
        if t.name not in VALUES_TYPES:
            raise VerifyException(f"shape_poly.values: result type {t} is not one of {', '.join(VALUES_TYPES)}")
        assert isinstance(t, ValuesType)
        count = 1
        for d in t.shape:
            if not d.is_const:
                raise VerifyException("shape_poly.values: the tensor's own extents must be numbers")
            count *= d.const_value
        if count != len(self.elements.data):
            raise VerifyException(f"shape_poly.values: {len(self.elements.data)} elements for a tensor of {count}")
        if not t.elem.name.startswith(("i", "ui")) and t.elem.name != "bool":
            raise VerifyException(f"shape_poly.values holds integers, not {t.elem.name}")


@irdl_op_definition
class AliasOp(IRDLOperation):
    """A value of an enclosing graph read inside an If branch under extents the branch owes equal.

    Where a branch owes `a == b` of two input symbols (checked by a `shape_poly.owe` at its top,
    before any kernel of the branch), stage 0 reads `b` as `a` in every extent of the branch, so an
    axis the operators make one has one length.  An outer value whose type says `b` is read through
    an alias whose type says `a`: same element type, rank and data; only the extents' spelling
    changes, and the run reaches it only once the owed check has passed.

    Syntax: `%m = shape_poly.alias %mask "attention_mask" : T -> R`
    """

    name = "shape_poly.alias"

    input = operand_def()
    tensor_name = prop_def(StringAttr)
    result = result_def()

    assembly_format = "$input $tensor_name attr-dict `:` type($input) `->` type($result)"

    def __init__(self, value: SSAValue, tensor_name: str, result_type: Attribute) -> None:
        super().__init__(
            operands=[value], properties={"tensor_name": StringAttr(tensor_name)}, result_types=[result_type]
        )

    def verify_(self) -> None:
        a, r = self.input.type, self.result.type
        if getattr(a, "elem", None) != getattr(r, "elem", None) or len(getattr(a, "shape", ())) != len(
            getattr(r, "shape", ())
        ):
            raise VerifyException(f"shape_poly.alias '{self.tensor_name.data}' must keep element type and rank")


ShapePoly = Dialect("shape_poly", [OweOp, ValuesOp, AliasOp], [ExtentAttr, PolyTensorType])
