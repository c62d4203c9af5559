"""What the StableHLO ops and attributes share: the checks their verifiers make on tensor types, the
integer lists their syntax reads and prints, and `EnumAttr`, the base of StableHLO's enums.

Verification checks what the reader relies on (operand and result types agree; a `?` extent matches
any extent), so a malformed file stops at the op that is wrong rather than somewhere in the graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import DYNAMIC_INDEX, ArrayAttr, DenseArrayBase, IntAttr, StringAttr, TensorType, i64
from xdsl.ir import Attribute, Operation, ParametrizedAttribute, SSAValue
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException


def ranked(value: SSAValue | Attribute, what: str) -> TensorType[Attribute]:
    """The ranked tensor type of `value` (a value or a type), or a VerifyException naming `what`."""
    t = value.type if isinstance(value, SSAValue) else value
    if not isinstance(t, TensorType):
        raise VerifyException(f"{what} must be a ranked tensor, got {t}")
    return t


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    """The dims of a ranked tensor value or type; `DYNAMIC_INDEX` stands for `?`."""
    return tuple(ranked(value, "value").get_shape())


def compatible(a: Sequence[int], b: Sequence[int]) -> bool:
    """Two shapes that may be the same at run time (a `?` matches any extent)."""
    return len(a) == len(b) and all(x == y or DYNAMIC_INDEX in (x, y) for x, y in zip(a, b, strict=True))


def ints(attr: Attribute | None) -> tuple[int, ...]:
    """The integers of an `array<i64: ...>`, an `[...]` of integers, or nothing."""
    if attr is None:
        return ()
    if isinstance(attr, DenseArrayBase):
        return tuple(int(v) for v in attr.get_values())
    if isinstance(attr, ArrayAttr):
        return tuple(int(a.data if isinstance(a, IntAttr) else a.value.data) for a in attr.data)
    raise VerifyException(f"expected a list of integers, got {attr}")


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


def parse_int_list(parser: AttrParser) -> list[int]:
    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False))


def print_int_list(printer: Printer, values: Sequence[int]) -> None:
    printer.print_string("[" + ", ".join(str(v) for v in values) + "]")


def print_attrs(printer: Printer, op: Operation) -> None:
    if op.attributes:
        printer.print_string(" ")
        printer.print_attr_dict(op.attributes)


class EnumAttr(ParametrizedAttribute):
    """A StableHLO enum, spelled `#stablehlo<KIND VALUE>` (as MLIR prints it) or `#stablehlo.KIND<VALUE>`."""

    VALUES: ClassVar[tuple[str, ...]]
    value: StringAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[StringAttr]:
        angled = parser.parse_optional_punctuation("<") is not None
        word = parser.parse_identifier()
        if word not in cls.VALUES:
            parser.raise_error(f"{cls.name}: expected one of {', '.join(cls.VALUES)}, got '{word}'")
        if angled:
            parser.parse_punctuation(">")
        return (StringAttr(word),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.value.data}>")

    @property
    def text(self) -> str:
        return self.value.data
