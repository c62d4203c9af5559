"""The StableHLO attributes Loam reads, in the spelling MLIR prints: the enums of `compare` and
`dot_general` (`#stablehlo<comparison_direction GT>`), and the dimension numbers of `dot_general`
(`#stablehlo.dot<...>`), `gather` (`#stablehlo.gather<...>`) and `scatter` (`#stablehlo.scatter<...>`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import ArrayAttr, IntAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer

from loam.dialects.stablehlo.base import EnumAttr, parse_int_list


@irdl_attr_definition
class ComparisonDirectionAttr(EnumAttr):
    """
    The direction of `stablehlo.compare`.

    Syntax: `#stablehlo<comparison_direction GE>`; values EQ, NE, GE, GT, LE, LT.
    """

    name = "stablehlo.comparison_direction"
    VALUES: ClassVar[tuple[str, ...]] = ("EQ", "NE", "GE", "GT", "LE", "LT")
    value: StringAttr


@irdl_attr_definition
class ComparisonTypeAttr(EnumAttr):
    """
    How `stablehlo.compare` orders its operands.

    Syntax: `#stablehlo<comparison_type FLOAT>`; values NOTYPE, FLOAT, TOTALORDER, SIGNED, UNSIGNED.
    """

    name = "stablehlo.comparison_type"
    VALUES: ClassVar[tuple[str, ...]] = ("NOTYPE", "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")
    value: StringAttr


@irdl_attr_definition
class PrecisionAttr(EnumAttr):
    """
    A precision hint of `stablehlo.dot_general` (the reader computes in the operands' type either way).

    Syntax: `#stablehlo<precision DEFAULT>`; values DEFAULT, HIGH, HIGHEST.
    """

    name = "stablehlo.precision"
    VALUES: ClassVar[tuple[str, ...]] = ("DEFAULT", "HIGH", "HIGHEST")
    value: StringAttr


def _parse_keyed_lists(
    parser: AttrParser, keys: Sequence[str], scalars: Sequence[str] = ()
) -> tuple[dict[str, list[int]], dict[str, int]]:
    """`<key = [ints], key = int, ...>`: the keys given, each at most once (the lists, and the scalars)."""
    lists: dict[str, list[int]] = {}
    numbers: dict[str, int] = {}

    def entry() -> None:
        key = parser.parse_identifier()
        if key not in keys and key not in scalars:
            parser.raise_error(f"unexpected key '{key}' (expected one of {', '.join([*keys, *scalars])})")
        if key in lists or key in numbers:
            parser.raise_error(f"key '{key}' is given twice")
        parser.parse_punctuation("=")
        if key in scalars:
            numbers[key] = parser.parse_integer(allow_boolean=False)
        else:
            lists[key] = parse_int_list(parser)

    parser.parse_comma_separated_list(parser.Delimiter.ANGLE, entry)
    return lists, numbers


@irdl_attr_definition
class DotDimensionNumbersAttr(ParametrizedAttribute):
    """
    Which dims of `stablehlo.dot_general` are batch dims and which are contracted.

    Syntax: `#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0],
    lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>` (an empty list is left out).
    """

    name = "stablehlo.dot"
    KEYS: ClassVar[tuple[str, ...]] = (
        "lhs_batching_dimensions",
        "rhs_batching_dimensions",
        "lhs_contracting_dimensions",
        "rhs_contracting_dimensions",
    )

    lhs_batching: ArrayAttr[IntAttr]
    rhs_batching: ArrayAttr[IntAttr]
    lhs_contracting: ArrayAttr[IntAttr]
    rhs_contracting: ArrayAttr[IntAttr]

    def __init__(
        self,
        lhs_batching: Sequence[int],
        rhs_batching: Sequence[int],
        lhs_contracting: Sequence[int],
        rhs_contracting: Sequence[int],
    ) -> None:
        super().__init__(
            *(
                ArrayAttr([IntAttr(d) for d in dims])
                for dims in (lhs_batching, rhs_batching, lhs_contracting, rhs_contracting)
            )
        )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        lists, _ = _parse_keyed_lists(parser, cls.KEYS)
        return tuple(ArrayAttr([IntAttr(d) for d in lists.get(key, [])]) for key in cls.KEYS)

    def _lists(self) -> tuple[ArrayAttr[IntAttr], ...]:
        """The four lists, in KEYS' order."""
        return (self.lhs_batching, self.rhs_batching, self.lhs_contracting, self.rhs_contracting)

    def print_parameters(self, printer: Printer) -> None:
        parts = [
            f"{key} = [{', '.join(str(d.data) for d in dims.data)}]"
            for key, dims in zip(self.KEYS, self._lists(), strict=True)
            if dims.data
        ]
        printer.print_string("<" + ", ".join(parts) + ">")

    def dims(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(lhs batch, rhs batch, lhs contracting, rhs contracting)."""
        lb, rb, lc, rc = (tuple(d.data for d in p.data) for p in self._lists())
        return lb, rb, lc, rc


@irdl_attr_definition
class GatherDimensionNumbersAttr(ParametrizedAttribute):
    """
    How `stablehlo.gather` reads its operand.

    Syntax: `#stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0],
    index_vector_dim = 2>` (also `operand_batching_dims` and `start_indices_batching_dims`).
    """

    name = "stablehlo.gather"
    KEYS: ClassVar[tuple[str, ...]] = (
        "offset_dims",
        "collapsed_slice_dims",
        "operand_batching_dims",
        "start_indices_batching_dims",
        "start_index_map",
    )

    offset_dims: ArrayAttr[IntAttr]
    collapsed_slice_dims: ArrayAttr[IntAttr]
    operand_batching_dims: ArrayAttr[IntAttr]
    start_indices_batching_dims: ArrayAttr[IntAttr]
    start_index_map: ArrayAttr[IntAttr]
    index_vector_dim: IntAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        lists, numbers = _parse_keyed_lists(parser, cls.KEYS, scalars=("index_vector_dim",))
        return (
            *(ArrayAttr([IntAttr(d) for d in lists.get(key, [])]) for key in cls.KEYS),
            IntAttr(numbers.get("index_vector_dim", 0)),
        )

    def print_parameters(self, printer: Printer) -> None:
        parts = [
            f"{key} = [{', '.join(str(d.data) for d in dims.data)}]"
            for key, dims in zip(self.KEYS, self.parameters, strict=False)
            if isinstance(dims, ArrayAttr) and dims.data
        ]
        parts.append(f"index_vector_dim = {self.index_vector_dim.data}")
        printer.print_string("<" + ", ".join(parts) + ">")

    def field(self, key: str) -> tuple[int, ...]:
        return tuple(d.data for d in getattr(self, key).data)


@irdl_attr_definition
class ScatterDimensionNumbersAttr(ParametrizedAttribute):
    """
    How `stablehlo.scatter` writes its updates into its operand.

    Syntax: `#stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0],
    scatter_dims_to_operand_dims = [0], index_vector_dim = 1>` (also `input_batching_dims` and
    `scatter_indices_batching_dims`; an empty list and index_vector_dim = 0 may be left out).
    """

    name = "stablehlo.scatter"
    KEYS: ClassVar[tuple[str, ...]] = (
        "update_window_dims",
        "inserted_window_dims",
        "input_batching_dims",
        "scatter_indices_batching_dims",
        "scatter_dims_to_operand_dims",
    )

    update_window_dims: ArrayAttr[IntAttr]
    inserted_window_dims: ArrayAttr[IntAttr]
    input_batching_dims: ArrayAttr[IntAttr]
    scatter_indices_batching_dims: ArrayAttr[IntAttr]
    scatter_dims_to_operand_dims: ArrayAttr[IntAttr]
    index_vector_dim: IntAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        lists, numbers = _parse_keyed_lists(parser, cls.KEYS, scalars=("index_vector_dim",))
        return (
            *(ArrayAttr([IntAttr(d) for d in lists.get(key, [])]) for key in cls.KEYS),
            IntAttr(numbers.get("index_vector_dim", 0)),
        )

    def print_parameters(self, printer: Printer) -> None:
        parts = [
            f"{key} = [{', '.join(str(d.data) for d in dims.data)}]"
            for key, dims in zip(self.KEYS, self.parameters, strict=False)
            if isinstance(dims, ArrayAttr) and dims.data
        ]
        parts.append(f"index_vector_dim = {self.index_vector_dim.data}")
        printer.print_string("<" + ", ".join(parts) + ">")

    def field(self, key: str) -> tuple[int, ...]:
        return tuple(d.data for d in getattr(self, key).data)
