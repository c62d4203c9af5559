"""The StableHLO ops that read or write at positions a tensor holds: `dynamic_slice` and
`dynamic_update_slice` (a window at run-time starts), `gather` and `scatter` (slices at the
positions an index tensor holds), and `sort` (which permutes along a dim by a comparator).

JAX prints `dynamic_slice` and `dynamic_update_slice` in their custom form
(`stablehlo.dynamic_slice %x, %i, %j, sizes = [2, 3] : (...) -> ...`), and `gather`, `scatter`
and `sort` in the generic form only, `scatter`'s and `sort`'s body as a region.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DYNAMIC_INDEX, BoolAttr, DenseArrayBase, IntegerAttr, IntegerType, TensorType, i1
from xdsl.ir import SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    var_operand_def,
    var_result_def,
)
from xdsl.irdl.declarative_assembly_format import (
    AttributeVariable,
    CustomDirective,
    ParsingState,
    PrintingState,
    VariadicOperandVariable,
    irdl_custom_directive,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from loam.dialects.stablehlo.attributes import GatherDimensionNumbersAttr, ScatterDimensionNumbersAttr
from loam.dialects.stablehlo.base import compatible, i64_array, ints, parse_int_list, print_int_list, ranked
from loam.dialects.stablehlo.syntax import StableHLOOp

_I1_SCALAR = TensorType(i1, [])


def _scalar_indices(values: Sequence[SSAValue], what: str, rank: int) -> None:
    """One integer scalar per dim of an operand of rank `rank`."""
    if len(values) != rank:
        raise VerifyException(f"{what}: {len(values)} start indices for rank {rank}")
    for v in values:
        t = ranked(v, f"{what} start index")
        if t.get_shape() or not isinstance(t.element_type, IntegerType):
            raise VerifyException(f"{what}: a start index must be an integer scalar, got {t}")


@irdl_custom_directive
class StartsAndSizes(CustomDirective):
    """`%i, %j, sizes = [2, 3]`: the start index operands, then the slice sizes."""

    start_indices: VariadicOperandVariable
    slice_sizes: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        starts = []
        while parser.parse_optional_keyword("sizes") is None:
            starts.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(",")
        parser.parse_punctuation("=")
        self.start_indices.set(state, starts)
        self.slice_sizes.set(state, i64_array(parse_int_list(parser)))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        for value in self.start_indices.get(op):
            printer.print_operand(value)
            printer.print_string(", ")
        printer.print_string("sizes = ")
        print_int_list(printer, ints(self.slice_sizes.get(op)))


@irdl_op_definition
class DynamicSliceOp(StableHLOOp):
    """
    The window of `slice_sizes` at the run-time starts, each clamped into [0, dim - size].

    Syntax: `stablehlo.dynamic_slice %x, %i, %j, sizes = [2, 3]
    : (tensor<4x5xf32>, tensor<i32>, tensor<i32>) -> tensor<2x3xf32>`
    """

    name = "stablehlo.dynamic_slice"

    operand = operand_def()
    start_indices = var_operand_def()
    result = result_def()
    slice_sizes = prop_def(DenseArrayBase)

    custom_directives = (*StableHLOOp.custom_directives, StartsAndSizes)
    assembly_format = (
        "$operand `,` custom<StartsAndSizes>($start_indices, $slice_sizes)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    @property
    def sizes(self) -> tuple[int, ...]:
        return ints(self.slice_sizes)

    def verify_(self) -> None:
        src, out = ranked(self.operand, "stablehlo.dynamic_slice operand"), ranked(self.result, "result")
        shape, sizes = src.get_shape(), self.sizes
        _scalar_indices(self.start_indices, "stablehlo.dynamic_slice", len(shape))
        if len(sizes) != len(shape) or any(
            s < 0 or (d != DYNAMIC_INDEX and s > d) for s, d in zip(sizes, shape, strict=True)
        ):
            raise VerifyException(f"stablehlo.dynamic_slice: sizes {list(sizes)} do not fit in {src}")
        if not compatible(sizes, out.get_shape()) or src.element_type != out.element_type:
            raise VerifyException(f"stablehlo.dynamic_slice: a slice of sizes {list(sizes)} of {src} is not {out}")


@irdl_op_definition
class DynamicUpdateSliceOp(StableHLOOp):
    """
    The operand with `update` written at the run-time starts, each clamped into [0, dim - extent].

    Syntax: `stablehlo.dynamic_update_slice %x, %u, %i, %j
    : (tensor<4x5xf32>, tensor<2x3xf32>, tensor<i32>, tensor<i32>) -> tensor<4x5xf32>`
    """

    name = "stablehlo.dynamic_update_slice"

    operand = operand_def()
    update = operand_def()
    start_indices = var_operand_def()
    result = result_def()

    assembly_format = (
        "$operand `,` $update `,` custom<OperandList>($start_indices)"
        " attr-dict `:` custom<FunctionalType>(type(operands), type(results))"
    )

    def verify_(self) -> None:
        src, out = ranked(self.operand, "stablehlo.dynamic_update_slice operand"), ranked(self.result, "result")
        upd = ranked(self.update, "stablehlo.dynamic_update_slice update")
        shape = src.get_shape()
        _scalar_indices(self.start_indices, "stablehlo.dynamic_update_slice", len(shape))
        extents = upd.get_shape()
        if len(extents) != len(shape) or any(
            DYNAMIC_INDEX not in (u, d) and u > d for u, d in zip(extents, shape, strict=True)
        ):
            raise VerifyException(f"stablehlo.dynamic_update_slice: an update {upd} does not fit in {src}")
        if upd.element_type != src.element_type or not compatible(shape, out.get_shape()):
            raise VerifyException(f"stablehlo.dynamic_update_slice: updating {src} with {upd} does not give {out}")


@irdl_op_definition
class GatherOp(IRDLOperation):
    """
    Slices of `operand` at the positions `start_indices` holds (JAX prints it in the generic form).

    Syntax: `"stablehlo.gather"(%table, %ids) <{dimension_numbers = #stablehlo.gather<...>,
    slice_sizes = array<i64: 1, 8>}> : (tensor<11x8xf32>, tensor<?x6x1xi32>) -> tensor<?x6x8xf32>`
    """

    name = "stablehlo.gather"

    operand = operand_def()
    start_indices = operand_def()
    result = result_def()
    dimension_numbers = prop_def(GatherDimensionNumbersAttr)
    slice_sizes = prop_def(DenseArrayBase)
    indices_are_sorted = opt_prop_def(BoolAttr)

    @property
    def sizes(self) -> tuple[int, ...]:
        return ints(self.slice_sizes)

    def verify_(self) -> None:
        src = ranked(self.operand, "stablehlo.gather operand")
        idx = ranked(self.start_indices, "stablehlo.gather start indices")
        ranked(self.result, "stablehlo.gather result")
        if not isinstance(idx.element_type, IntegerType):
            raise VerifyException(f"stablehlo.gather start indices must be integers, got {idx}")
        if len(ints(self.slice_sizes)) != len(src.get_shape()):
            raise VerifyException(f"stablehlo.gather: one slice size per dim of {src}")


@irdl_op_definition
class ScatterOp(IRDLOperation):
    """
    The inputs with the updates combined into them at the positions `scatter_indices` holds, by the
    body (`update_computation`: the old value and the update in, the new value out).

    Syntax (JAX prints the generic form only): `"stablehlo.scatter"(%x, %idx, %u)
    <{scatter_dimension_numbers = #stablehlo.scatter<...>, indices_are_sorted = false,
    unique_indices = false}> ({ ^bb0(%a: tensor<f32>, %b: tensor<f32>): ... stablehlo.return %r
    : tensor<f32> }) : (...) -> ...` (N inputs, the indices, N updates).
    """

    name = "stablehlo.scatter"

    operands_ = var_operand_def()  # the inputs, the scatter indices, then as many updates
    outs = var_result_def()
    scatter_dimension_numbers = prop_def(ScatterDimensionNumbersAttr)
    indices_are_sorted = opt_prop_def(BoolAttr)
    unique_indices = opt_prop_def(BoolAttr)
    update_computation = region_def("single_block")

    @property
    def count(self) -> int:
        """How many inputs (and updates) it scatters."""
        return (len(self.operands) - 1) // 2

    @property
    def inputs(self) -> Sequence[SSAValue]:
        return self.operands[: self.count]

    @property
    def scatter_indices(self) -> SSAValue:
        return self.operands[self.count]

    @property
    def updates(self) -> Sequence[SSAValue]:
        return self.operands[self.count + 1 :]

    def verify_(self) -> None:
        n = self.count
        if len(self.operands) % 2 != 1 or n == 0 or len(self.outs) != n:
            raise VerifyException("stablehlo.scatter: N inputs, the indices, N updates and N results")
        idx = ranked(self.scatter_indices, "stablehlo.scatter indices")
        if not isinstance(idx.element_type, IntegerType):
            raise VerifyException(f"stablehlo.scatter indices must be integers, got {idx}")
        for x, u, out in zip(self.inputs, self.updates, self.outs, strict=True):
            t, r = ranked(x, "stablehlo.scatter input"), ranked(out, "stablehlo.scatter result")
            if ranked(u, "stablehlo.scatter update").element_type != t.element_type or t != r:
                raise VerifyException(f"stablehlo.scatter: an input {t} with update {u.type} does not give {r}")
        if len(self.update_computation.block.args) != 2 * n:
            raise VerifyException(f"stablehlo.scatter: the body takes {2 * n} scalars")


@irdl_op_definition
class SortOp(IRDLOperation):
    """
    The inputs sorted together along `dimension`, in the order the body (`comparator`: two
    elements of each input in, whether the first comes before the second out) gives.

    Syntax (JAX prints the generic form only): `"stablehlo.sort"(%x, %i) <{dimension = 1 : i64,
    is_stable = true}> ({ ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i32>, %d: tensor<i32>):
    ... stablehlo.return %lt : tensor<i1> }) : (...) -> (...)`
    """

    name = "stablehlo.sort"

    inputs = var_operand_def()
    outs = var_result_def()
    dimension = opt_prop_def(IntegerAttr)
    is_stable = opt_prop_def(BoolAttr)
    comparator = region_def("single_block")

    @property
    def dim(self) -> int:
        """The sorted dim (StableHLO's default -1 is the last), non-negative."""
        rank = len(ranked(self.inputs[0], "stablehlo.sort input").get_shape())
        d = -1 if self.dimension is None else self.dimension.value.data
        return d + rank if d < 0 else d

    def verify_(self) -> None:
        if not self.inputs or len(self.outs) != len(self.inputs):
            raise VerifyException("stablehlo.sort: one or more inputs, as many results")
        shape = ranked(self.inputs[0], "stablehlo.sort input").get_shape()
        if not 0 <= self.dim < len(shape):
            raise VerifyException(f"stablehlo.sort: dimension {self.dim} of rank {len(shape)}")
        for x, out in zip(self.inputs, self.outs, strict=True):
            t = ranked(x, "stablehlo.sort input")
            if not compatible(t.get_shape(), shape) or t != ranked(out, "stablehlo.sort result"):
                raise VerifyException(f"stablehlo.sort: inputs and results must share one shape, got {t}")
        block = self.comparator.block
        if len(block.args) != 2 * len(self.inputs):
            raise VerifyException(f"stablehlo.sort: the comparator takes {2 * len(self.inputs)} scalars")
        last = block.last_op
        if last is None or len(last.operands) != 1 or ranked(last.operands[0], "comparator result") != _I1_SCALAR:
            raise VerifyException("stablehlo.sort: the comparator must return one tensor<i1>")
