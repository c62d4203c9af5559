"""The `tensor_axes` dialect: tensors whose axes have names.

An axis is known by its name, not its position: two axes an operation meets are one axis only when
they carry one name.  The extent stays a value (a `loam.core.poly.Poly`), so a dynamic length is a
symbol.  A merge of adjacent axes is named by its ordered parts, as einops writes it, and its
identity is that list: `(C H W)`.

Syntax::

    !tensor_axes.tensor<f32, [Batch: N, Seq: S, Hidden: 768]>   // AxesTensorType
    !tensor_axes.tensor<f32, [Batch: N, (C H W): 784]>          // a merged axis
    !tensor_axes.tensor<i64, []>                                // rank 0
    #tensor_axes.axis<(C H W): 784>                             // AxisAttr: one axis
    #tensor_axes.layout<["*.weight" -> [In, Out], "mask" in "decoder" -> [Seq, Seq]]>

An extent is `loam.core.poly` text (`2*N + 1`, `"seq-len"`).  In a layout, each rule is a glob in
quotes, optionally `in "GRAPH"`, then `->` and the axis names; rule order is match order.

Python API: `AxesTensorType(elem, axes)` with `axes` a sequence of `Axis` or `(name, extent)`
pairs; `.elem`, `.axes` (tuple of `Axis`), `.shape`, `.axis_names`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.ir import Attribute, Data, Dialect, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from loam.core.dtypes import BY_NAME, ElementType, by_name
from loam.core.errors import AxisError, LoamError
from loam.core.layout import LayoutRule, merged_axis_name, parse_axis_name
from loam.core.poly import Poly
from loam.dialects.shape_poly import (
    ExtentAttr,
    parse_element_type,
    parse_optional_text_literal,
    parse_poly_attr_text,
)


@dataclass(frozen=True)
class Axis:
    """One named axis: `name` (canonical; `"(C H W)"` for a merge), `extent`, and the merge's `parts`."""

    name: str
    extent: Poly
    parts: tuple[str, ...] = ()

    @staticmethod
    def named(name: str, extent: Poly | int) -> Axis:
        """The axis spelled `name` (`Hidden` or `(C H W)`); AxisError when the name is malformed."""
        canonical, parts = parse_axis_name(name)
        return Axis(canonical, Poly.lift(extent), parts)

    @staticmethod
    def merged(parts: Sequence[str], extent: Poly | int) -> Axis:
        """The merge of `parts` (at least two) with the given extent."""
        return Axis.named(merged_axis_name(parts), extent)

    @property
    def is_merged(self) -> bool:
        return bool(self.parts)

    def __str__(self) -> str:
        return f"{self.name}: {self.extent}"


def _parse_axis_name(parser: AttrParser) -> tuple[str, tuple[str, ...]]:
    """`IDENT` or `( IDENT IDENT ... )` at the parser's position, as (canonical name, parts)."""
    if parser.parse_optional_punctuation("(") is not None:
        parts: list[str] = []
        while (part := parser.parse_optional_identifier()) is not None:
            parts.append(part)
        parser.parse_punctuation(")", " to close the merged axis")
        text = merged_axis_name(parts)
    else:
        ident = parser.parse_optional_identifier()
        if ident is None:
            parser.raise_error("expected an axis name (an identifier or a merge like (C H W))")
        text = ident
    try:
        return parse_axis_name(text)
    except AxisError as err:
        parser.raise_error(str(err))


@irdl_attr_definition
class AxisAttr(ParametrizedAttribute):
    """One named axis and its extent.

    Syntax: `#tensor_axes.axis<NAME: POLY>`, e.g. `#tensor_axes.axis<Hidden: 768>` or
    `#tensor_axes.axis<(C H W): 784>`.  API: `.axis` gives the `Axis`.
    """

    name = "tensor_axes.axis"

    axis_name: StringAttr
    extent: ExtentAttr
    parts: ArrayAttr[StringAttr]

    def __init__(self, axis: Axis) -> None:
        super().__init__(StringAttr(axis.name), ExtentAttr(axis.extent), ArrayAttr([StringAttr(p) for p in axis.parts]))

    @property
    def axis(self) -> Axis:
        return Axis(self.axis_name.data, self.extent.data, tuple(p.data for p in self.parts.data))

    @staticmethod
    def parse_body(parser: AttrParser) -> AxisAttr:
        """`NAME: POLY` at the parser's position."""
        name, parts = _parse_axis_name(parser)
        parser.parse_punctuation(":")
        return AxisAttr(Axis(name, parse_poly_attr_text(parser), parts))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return AxisAttr.parse_body(parser).parameters

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.axis}>")

    def verify(self) -> None:
        name = self.axis_name.data
        parts = tuple(p.data for p in self.parts.data)
        try:
            canonical, expected_parts = parse_axis_name(name)
        except AxisError as err:
            raise VerifyException(str(err)) from None
        if canonical != name or expected_parts != parts:
            raise VerifyException(f"axis '{name}' does not match its parts {list(parts)}")
        extent = self.extent.data
        if extent.is_const and extent.const_value < 0:
            raise VerifyException(f"axis '{name}' has negative extent {extent}")


@irdl_attr_definition
class AxesTensorType(ParametrizedAttribute, TypeAttribute):
    """A tensor type whose axes carry names and polynomial extents.

    Syntax: `!tensor_axes.tensor<ELEM, [NAME: POLY, ...]>`, e.g.
    `!tensor_axes.tensor<f32, [Batch: N, (C H W): 784]>`; rank 0 is `[]`.  A name may occur twice in
    one type (a square projection is `[Hidden: 768, Hidden: 768]`), always with one extent.
    """

    name = "tensor_axes.tensor"

    elem_name: StringAttr
    axis_attrs: ArrayAttr[AxisAttr]

    def __init__(self, elem: ElementType | str, axes: Sequence[Axis | tuple[str, Poly | int]]) -> None:
        elem_name = elem if isinstance(elem, str) else elem.name
        attrs = [AxisAttr(a if isinstance(a, Axis) else Axis.named(a[0], a[1])) for a in axes]
        super().__init__(StringAttr(elem_name), ArrayAttr(attrs))

    @property
    def elem(self) -> ElementType:
        return by_name(self.elem_name.data)

    @property
    def axes(self) -> tuple[Axis, ...]:
        return tuple(a.axis for a in self.axis_attrs.data)

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.axis_name.data for a in self.axis_attrs.data)

    @property
    def shape(self) -> tuple[Poly, ...]:
        return tuple(a.extent.data for a in self.axis_attrs.data)

    @property
    def rank(self) -> int:
        return len(self.axis_attrs.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            elem = parse_element_type(parser)
            parser.parse_punctuation(",")
            axes = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: AxisAttr.parse_body(parser))
        return (StringAttr(elem), ArrayAttr(axes))

    def print_parameters(self, printer: Printer) -> None:
        axes = ", ".join(str(a) for a in self.axes)
        printer.print_string(f"<{self.elem_name.data}, [{axes}]>")

    def verify(self) -> None:
        if self.elem_name.data not in BY_NAME:
            raise VerifyException(f"unknown element type '{self.elem_name.data}'")
        seen: dict[str, Poly] = {}
        for axis in self.axes:
            extent = seen.setdefault(axis.name, axis.extent)
            if extent != axis.extent:
                raise VerifyException(
                    f"axis '{axis.name}' occurs twice in {self} with extents {extent} and {axis.extent}"
                )


@functools.lru_cache(maxsize=8192)
def axes_tensor_type(elem: str, axes: tuple[Axis, ...]) -> AxesTensorType:
    """`AxesTensorType(elem, axes)`, one object per distinct type: a type is immutable, and making one
    (xDSL verifies every axis attribute) costs far more than this lookup; naming a large graph's axes
    makes the same types thousands of times."""
    return AxesTensorType(elem, axes)


@irdl_attr_definition
class LayoutAttr(Data[tuple[LayoutRule, ...]]):
    """The ordered layout rules of a build (`loam.core.layout.LayoutRule`), carried on the IR.

    Syntax: `#tensor_axes.layout<[RULE, ...]>` where `RULE ::= "GLOB" (in "GRAPH")? -> [AXIS, ...]`,
    e.g. `#tensor_axes.layout<["*.weight" -> [In, Out], "mask" in "decoder" -> [Seq, (C H W)]]>`.
    API: `.rules`.
    """

    name = "tensor_axes.layout"

    def __init__(self, rules: Sequence[LayoutRule]) -> None:
        super().__init__(tuple(rules))

    @property
    def rules(self) -> tuple[LayoutRule, ...]:
        return self.data

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> tuple[LayoutRule, ...]:
        def parse_text(what: str) -> str:
            text = parse_optional_text_literal(parser)
            if text is None:
                parser.raise_error(f"expected {what}")
            return text

        def parse_rule() -> LayoutRule:
            pattern = parse_text("a quoted glob pattern")
            graph = None
            if parser.parse_optional_keyword("in") is not None:
                graph = parse_text("a quoted graph name after 'in'")
            parser.parse_punctuation("->")
            axes = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: _parse_axis_name(parser)[0])
            try:
                return LayoutRule(pattern, tuple(axes), graph)
            except LoamError as err:
                parser.raise_error(str(err))

        with parser.in_angle_brackets():
            return tuple(parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parse_rule))

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string("<[")
        for i, rule in enumerate(self.data):
            if i:
                printer.print_string(", ")
            printer.print_string_literal(rule.pattern)
            if rule.graph is not None:
                printer.print_string(" in ")
                printer.print_string_literal(rule.graph)
            printer.print_string(" -> [" + ", ".join(rule.axes) + "]")
        printer.print_string("]>")


@irdl_op_definition
class RelabelOp(IRDLOperation):
    """A value of an enclosing graph read inside an If branch under axes of the branch's own.

    A branch that reads a value under other axes relabels it: a merged decoder's mask is as
    long as the sequence in one branch and as the past and the sequence in the other, so each branch
    names its axis after what it meets there.  Same element type, rank and data; only the names
    change (a layout rule scoped to the branch's graph gives them).

    Syntax: `%m = tensor_axes.relabel %mask "attention_mask" : T -> R`
    """

    name = "tensor_axes.relabel"

    input = operand_def(AxesTensorType)
    tensor_name = prop_def(StringAttr)
    result = result_def(AxesTensorType)

    assembly_format = "$input $tensor_name attr-dict `:` type($input) `->` type($result)"

    def __init__(self, value: SSAValue, tensor_name: str, result_type: AxesTensorType) -> None:
        super().__init__(
            operands=[value], properties={"tensor_name": StringAttr(tensor_name)}, result_types=[result_type]
        )

    def verify_(self) -> None:
        a, r = self.input.type, self.result.type
        assert isinstance(a, AxesTensorType) and isinstance(r, AxesTensorType)
        if a.elem != r.elem or len(a.axes) != len(r.axes):
            raise VerifyException(f"tensor_axes.relabel '{self.tensor_name.data}' must keep element type and rank")


TensorAxes = Dialect("tensor_axes", [RelabelOp], [AxisAttr, AxesTensorType, LayoutAttr])
