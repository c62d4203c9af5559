"""What StableHLO's indexing ops become: `dynamic_slice`, `dynamic_update_slice`, `gather`,
`scatter` and `sort`, as ONNX nodes whose extents the build knows.

    dynamic_slice          per sliced dim, a Gather of clip(start, 0, dim - size) + arange(size)
                           (a Slice where the start is a constant)
    dynamic_update_slice   ScatterND at a constant grid of the update's positions + the clamped starts
    gather, embedding form Clip + Gather (whole rows of a table)
    gather, general        Gather from the operand flattened, at each result element's flat position
    scatter                ScatterND into the operand flattened with one trash element after it,
                           reduction none/add/mul/max/min; a window out of bounds aims at the trash
    sort                   TopK of all n elements (largest for a descending comparator), then
                           GatherElements of every operand at its indices

Why these forms.  StableHLO's starts are run-time values but its extents are static, and an ONNX
Slice at a run-time start would make the extents something only the run knows; a Gather at
computed positions keeps the slice sizes.  The spec clamps the starts of `dynamic_slice`,
`dynamic_update_slice` and `gather` into the operand (ONNX would refuse them): the clamping is
spelled out.  A `scatter` window that does not fit is skipped, as the spec and XLA do (JAX's
`x.at[i].set(...)` drops an index past the end this way); ONNX has no "skip", so the operand is
flattened, one trash element appended, every position of a skipped window aimed at it, and the
trash sliced off again.  `gather` and `scatter` compute one flat position per element: a sum of
each start index times its dim's stride (the indices read once, in their own shape) and a
constant grid of the window's offsets and batch positions (small: only the extents it varies
along), broadcast together.

Sort.  JAX's comparators (`jnp.sort`, `jnp.argsort`, `lax.sort`, `lax.sort_key_val`) compare
operand 0's two elements with LT, after mapping -0.0 to 0.0 and every NaN to one NaN for floats,
under TOTALORDER: a stable ascending sort with -0.0 equal to 0.0 and NaNs last.  Loam's TopK kernels
(numpy and WGSL) order the same way: ties go to the lower index and NaN lies above every number, so
TopK with k = n is that sort (largest = 1, with GT, is the descending one, NaNs first; JAX's own
descending sort reverses the operands around an ascending one: `stablehlo.reverse`, a Slice with
step -1, in `loam.frontends.stablehlo_movement`).  Integer and
boolean keys (booleans as i8) sort alike.  A comparator that compares other operands too, or in
another way, is refused by name.

Refused, naming what: shapes with `?` extents where the positions are computed (the embedding
gather excepted), a scatter of several operands at once, a scatter body other than replace (the
second argument returned), add, multiply, maximum, minimum, a float TOTALORDER comparator that
does not canonicalize -0.0 and NaN first, and an integer one comparing SIGNED or UNSIGNED against
the type (booleans count as unsigned).

The rules register themselves in `loam.frontends.stablehlo_rules.RULES` when this module is imported
(`loam.frontends.stablehlo_ops` imports it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, StringAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue

from loam.core.dtypes import by_name
from loam.dialects import stablehlo as hlo
from loam.dialects.graph import NodeOp, UnknownType, set_name_hint
from loam.frontends.stablehlo_broadcast import as_i64, full
from loam.frontends.stablehlo_builder import (
    GraphBuilder,
    LoweringError,
    Operand,
    Shape,
    int_attr,
    ints_attr,
    spell_shape,
)
from loam.frontends.stablehlo_reductions import reduction_body
from loam.frontends.stablehlo_rules import result_of, rule

I64 = by_name("i64")


def _static(shape: Shape, what: str) -> tuple[int, ...]:
    """`shape` without `?`s, or a LoweringError naming `what` has one."""
    if any(d is None for d in shape):
        raise LoweringError(f"{what} has the shape {spell_shape(shape)}; Loam needs its extents known here")
    return tuple(d for d in shape if d is not None)


def _strides(shape: Sequence[int]) -> list[int]:
    """Row-major strides: how far apart two neighbours along each dim lie when flattened."""
    strides, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d], step = step, step * shape[d]
    return strides


def _scalar(b: GraphBuilder, value: int, what: str) -> SSAValue:
    return b.constant(np.array(value, dtype=np.int64), I64, what)


def _clamp(b: GraphBuilder, index: SSAValue, high: int, what: str) -> SSAValue:
    """`index` (i64) clamped into [0, high], as StableHLO clamps a start."""
    return b.node("Clip", [index, _scalar(b, 0, f"{what}_low"), _scalar(b, high, f"{what}_high")], what=what)


def _along(values: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A 1-D array placed along `axis` of a rank-`rank` array (1s elsewhere)."""
    return values.reshape([len(values) if k == axis else 1 for k in range(rank)])


def _index_vectors(b: GraphBuilder, ids: Operand, vector_dim: int) -> SSAValue:
    """The start indices as i64 with the index vectors along the last dim (one added when
    `vector_dim` is the rank: each index is a vector of one)."""
    value = as_i64(b, ids)
    rank = len(ids.shape)
    if vector_dim == rank:
        return b.node("Unsqueeze", [value, b.ints([rank], "vector_axis")], what="vectors")
    if vector_dim != rank - 1:
        perm = [k for k in range(rank) if k != vector_dim] + [vector_dim]
        return b.node("Transpose", [value], {"perm": ints_attr(perm)}, what="vectors")
    return value


def _column(b: GraphBuilder, vectors: SSAValue, k: int) -> SSAValue:
    """Entry k of every index vector (the last dim dropped)."""
    return b.node("Gather", [vectors, _scalar(b, k, f"entry{k}")], {"axis": int_attr(-1)}, what=f"start{k}")


def _flat_positions(
    b: GraphBuilder,
    starts: SSAValue | None,
    grid: np.ndarray,
    window_dims: Sequence[int],
    shape: tuple[int, ...],
) -> SSAValue:
    """The flat position of each element of `shape`: `starts` (the start part, over the index
    batch dims) with the window dims inserted, plus the constant `grid`, broadcast to `shape`."""
    offsets = b.constant(grid, I64, "grid")
    if starts is None:
        return b.node("Expand", [offsets, b.ints(shape, "shape")], what="positions")
    if window_dims:
        starts = b.node("Unsqueeze", [starts, b.ints(window_dims, "window_axes")], what="placed")
    total = b.node("Add", [starts, offsets], what="positions")
    if grid.shape != shape and not _covers(grid.shape, shape, window_dims):
        total = b.node("Expand", [total, b.ints(shape, "shape")], what="positions_full")
    return total


def _covers(grid: tuple[int, ...], shape: tuple[int, ...], window_dims: Sequence[int]) -> bool:
    """Whether the starts (full along the non-window dims) and the grid broadcast to `shape`."""
    return all(k not in window_dims or grid[k] == shape[k] for k in range(len(shape)))


# --------------------------------------------------------------------------------------------------
# dynamic_slice, dynamic_update_slice


@rule(hlo.DynamicSliceOp)
def _dynamic_slice(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.DynamicSliceOp)
    shape, elem = result_of(op)
    x, starts = xs[0], xs[1:]
    value = full(b, x)
    for d, (size, extent, start) in enumerate(zip(op.sizes, x.shape, starts, strict=True)):
        if size == extent:  # the whole dim: the start clamps to 0
            continue
        if extent is None:
            raise LoweringError(f"dim {d} of the operand has an extent only the run knows; Loam clamps into it")
        high = extent - size
        if start.known is not None:  # a constant start: a static Slice
            begin = int(np.clip(int(np.asarray(start.known)), 0, high))
            bounds = [b.ints([begin], f"start{d}"), b.ints([begin + size], f"end{d}"), b.ints([d], f"axis{d}")]
            value = b.node("Slice", [value, *bounds], what=f"dim{d}")
            continue
        first = _clamp(b, as_i64(b, start), high, f"start{d}")
        positions = b.node("Add", [first, b.constant(np.arange(size), I64, f"range{d}")], what=f"positions{d}")
        value = b.node("Gather", [value, positions], {"axis": int_attr(d)}, what=f"dim{d}")
    if value is x.value and x.actual is None:
        return [x]
    return [Operand(value, shape, elem)]


@rule(hlo.DynamicUpdateSliceOp)
def _dynamic_update_slice(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = result_of(op)
    x, update, starts = xs[0], xs[1], xs[2:]
    dims = _static(x.shape, "the operand")
    extents = _static(update.shape, "the update")
    rank = len(dims)
    if rank == 0:
        return [update]
    firsts = []
    for d, (start, extent, size) in enumerate(zip(starts, dims, extents, strict=True)):
        first = _clamp(b, as_i64(b, start), extent - size, f"start{d}")
        firsts.append(b.node("Unsqueeze", [first, b.ints([0], f"axis{d}")], what=f"start{d}_vector"))
    corner = b.node("Concat", firsts, {"axis": int_attr(0)}, what="corner") if rank > 1 else firsts[0]
    grid = np.stack(list(np.indices(extents, dtype=np.int64)), axis=-1)
    positions = b.node("Add", [b.constant(grid, I64, "grid"), corner], what="positions")
    value = b.node("ScatterND", [full(b, x), positions, full(b, update)])
    return [Operand(value, shape, elem)]


# --------------------------------------------------------------------------------------------------
# gather


def _is_embedding(op: hlo.GatherOp, table: Operand, ids: Operand) -> bool:
    """Whole rows of a table with a static row count, one id per row (the fast path)."""
    numbers = op.dimension_numbers
    rank, q = len(table.shape), len(ids.shape)
    vector_dim = numbers.index_vector_dim.data
    batch = q if vector_dim == q else q - 1
    return (
        numbers.field("start_index_map") == (0,)
        and numbers.field("collapsed_slice_dims") == (0,)
        and not numbers.field("operand_batching_dims")
        and not numbers.field("start_indices_batching_dims")
        and vector_dim in (q, q - 1)
        and (vector_dim == q or ids.shape[-1] == 1)
        and op.sizes == (1, *table.shape[1:])
        and numbers.field("offset_dims") == tuple(range(batch, batch + rank - 1))
        and table.shape[0] is not None
    )


@rule(hlo.GatherOp)
def _gather(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.GatherOp)
    shape, elem = result_of(op)
    table, ids = xs
    if _is_embedding(op, table, ids):
        rows = table.shape[0]
        assert rows is not None
        index = full(b, ids)
        if op.dimension_numbers.index_vector_dim.data == len(ids.shape) - 1:
            index = b.node("Squeeze", [index, b.ints([len(ids.shape) - 1], "axes")], what="ids")
        # StableHLO clamps each start index into the table; ONNX's Gather would refuse it instead.
        low = b.constant(np.array(0), ids.elem, "low")
        high = b.constant(np.array(rows - 1), ids.elem, "high")
        index = b.node("Clip", [index, low, high], what="clamp")
        return [Operand(b.node("Gather", [full(b, table), index], {"axis": int_attr(0)}), shape, elem)]
    return [Operand(_general_gather(b, op, table, ids, shape), shape, elem)]


def _general_gather(b: GraphBuilder, op: hlo.GatherOp, table: Operand, ids: Operand, shape: Shape) -> SSAValue:
    """Gather from the flattened operand at each result element's flat position: the clamped start
    times the stride, plus the offset in the slice and the batch position (a constant grid)."""
    numbers = op.dimension_numbers
    dims = _static(table.shape, "the operand")
    out = _static(shape, "the result")
    _static(ids.shape, "the start indices")
    sizes = op.sizes
    offset_dims = numbers.field("offset_dims")
    collapsed = numbers.field("collapsed_slice_dims")
    operand_batching = numbers.field("operand_batching_dims")
    indices_batching = numbers.field("start_indices_batching_dims")
    start_map = numbers.field("start_index_map")
    vector_dim = numbers.index_vector_dim.data
    strides, rank = _strides(dims), len(out)
    batch_dims = [k for k in range(rank) if k not in offset_dims]
    index_dims = [k for k in range(len(ids.shape)) if k != vector_dim]
    slice_dims = [d for d in range(len(dims)) if d not in collapsed and d not in operand_batching]
    if len(slice_dims) != len(offset_dims) or len(batch_dims) != len(index_dims):
        raise LoweringError("its offset_dims do not match the operand's uncollapsed dims")
    grid = np.zeros([1] * rank, dtype=np.int64)
    for d, k in zip(slice_dims, offset_dims, strict=True):
        grid = grid + _along(np.arange(sizes[d], dtype=np.int64) * strides[d], k, rank)
    for d, k in zip(operand_batching, indices_batching, strict=True):
        axis = batch_dims[index_dims.index(k)]
        grid = grid + _along(np.arange(out[axis], dtype=np.int64) * strides[d], axis, rank)
    starts = None
    if start_map:
        vectors = _index_vectors(b, ids, vector_dim)
        for k, d in enumerate(start_map):
            term = _clamp(b, _column(b, vectors, k), dims[d] - sizes[d], f"clamped{k}")
            if strides[d] != 1:
                term = b.node("Mul", [term, _scalar(b, strides[d], f"stride{k}")], what=f"scaled{k}")
            starts = term if starts is None else b.node("Add", [starts, term], what=f"sum{k}")
    positions = _flat_positions(b, starts, grid, offset_dims, out)
    flat = b.node("Reshape", [full(b, table), b.ints([int(np.prod(dims))], "flat_shape")], what="flat")
    return b.node("Gather", [flat, positions], {"axis": int_attr(0)})


# --------------------------------------------------------------------------------------------------
# scatter


_SCATTER_BODIES: dict[type[Operation], str] = {
    hlo.AddOp: "add",
    hlo.MultiplyOp: "mul",
    hlo.MaximumOp: "max",
    hlo.MinimumOp: "min",
}


def _scatter_reduction(block: Block) -> str | None:
    """ScatterND's reduction for the body: "none" when it returns the update (its second argument),
    None when it returns the old value (nothing changes); else a LoweringError naming the body."""
    ops = list(block.ops)
    if len(ops) == 1 and isinstance(ops[0], hlo.ReturnOp) and len(ops[0].values) == 1:
        if ops[0].values[0] is block.args[1]:
            return "none"
        if ops[0].values[0] is block.args[0]:
            return None
    _, reduction = reduction_body(
        block, _SCATTER_BODIES, "stablehlo.add, multiply, maximum or minimum of the two arguments, or a replace"
    )
    return reduction


@rule(hlo.ScatterOp)
def _scatter(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.ScatterOp)
    if op.count != 1:
        raise LoweringError(f"a scatter of {op.count} operands at once is not supported")
    reduction = _scatter_reduction(op.update_computation.block)
    shape, elem = result_of(op)
    x, ids, update = xs
    if reduction is None:
        return [x]
    numbers = op.scatter_dimension_numbers
    dims = _static(x.shape, "the operand")
    extents = _static(update.shape, "the updates")
    _static(ids.shape, "the scatter indices")
    window_dims = numbers.field("update_window_dims")
    inserted = numbers.field("inserted_window_dims")
    input_batching = numbers.field("input_batching_dims")
    indices_batching = numbers.field("scatter_indices_batching_dims")
    start_map = numbers.field("scatter_dims_to_operand_dims")
    vector_dim = numbers.index_vector_dim.data
    strides, rank, count = _strides(dims), len(extents), int(np.prod(dims))
    scatter_dims = [k for k in range(rank) if k not in window_dims]
    index_dims = [k for k in range(len(ids.shape)) if k != vector_dim]
    operand_window = [d for d in range(len(dims)) if d not in inserted and d not in input_batching]
    if len(operand_window) != len(window_dims) or len(scatter_dims) != len(index_dims):
        raise LoweringError("its update_window_dims do not match the operand's uninserted dims")
    window = [1] * len(dims)  # the window's extent along each operand dim
    grid = np.zeros([1] * rank, dtype=np.int64)
    for d, k in zip(operand_window, window_dims, strict=True):
        window[d] = extents[k]
        grid = grid + _along(np.arange(extents[k], dtype=np.int64) * strides[d], k, rank)
    for d, k in zip(input_batching, indices_batching, strict=True):
        axis = scatter_dims[index_dims.index(k)]
        grid = grid + _along(np.arange(extents[axis], dtype=np.int64) * strides[d], axis, rank)
    starts = fits = None
    if start_map:
        vectors = _index_vectors(b, ids, vector_dim)
        for k, d in enumerate(start_map):
            start = _column(b, vectors, k)
            # the window fits when 0 <= start <= dim - window; a window that does not is skipped
            low = b.node("GreaterOrEqual", [start, _scalar(b, 0, f"low{k}")], what=f"above{k}")
            high = b.node("LessOrEqual", [start, _scalar(b, dims[d] - window[d], f"high{k}")], what=f"below{k}")
            inside = b.node("And", [low, high], what=f"inside{k}")
            fits = inside if fits is None else b.node("And", [fits, inside], what=f"fits{k}")
            term = start
            if strides[d] != 1:
                term = b.node("Mul", [start, _scalar(b, strides[d], f"stride{k}")], what=f"scaled{k}")
            starts = term if starts is None else b.node("Add", [starts, term], what=f"sum{k}")
    positions = _flat_positions(b, starts, grid, window_dims, extents)
    if fits is not None:
        if window_dims:
            fits = b.node("Unsqueeze", [fits, b.ints(window_dims, "fits_axes")], what="fits_placed")
        positions = b.node("Where", [fits, positions, _scalar(b, count, "trash")], what="aimed")
    positions = b.node("Unsqueeze", [positions, b.ints([rank], "tuple_axis")], what="tuples")
    flat = b.node("Reshape", [full(b, x), b.ints([count], "flat_shape")], what="flat")
    trash = b.constant(np.zeros(1), elem, "trash_element")
    padded = b.node("Concat", [flat, trash], {"axis": int_attr(0)}, what="padded")
    attrs: dict[str, Attribute] = {} if reduction == "none" else {"reduction": StringAttr(reduction)}
    scattered = b.node("ScatterND", [padded, positions, full(b, update)], attrs, what="scattered")
    kept = b.node("Slice", [scattered, b.ints([0], "keep_start"), b.ints([count], "keep_end")], what="kept")
    return [Operand(b.node("Reshape", [kept, b.ints(dims, "shape")]), shape, elem)]


# --------------------------------------------------------------------------------------------------
# sort


def _sort_direction(op: hlo.SortOp) -> bool:
    """Whether the comparator sorts descending (GT); a LoweringError unless it is a strict LT or GT of
    operand 0's two elements, plain or canonicalized as JAX writes it (-0.0 to 0.0, NaN to one NaN)."""
    block = op.comparator.block
    first, second = block.args[0], block.args[1]
    # What each value of the comparator is: (kind, an argument's index or a constant's value).
    seen: dict[SSAValue, tuple[str, float]] = {first: ("arg", 0), second: ("arg", 1)}
    ops = list(block.ops)
    names = ", ".join(o.name for o in ops[:-1]) or "nothing"
    refusal = LoweringError(
        f"its comparator computes {names}; Loam reads one that compares operand 0's two elements with LT or "
        "GT (as jnp.sort, jnp.argsort and lax.sort write it)"
    )
    result: tuple[str, int, int, str] | None = None
    for o in ops[:-1]:
        if isinstance(o, hlo.ConstantOp):
            values = o.value.get_values()
            if len(values) != 1:
                raise refusal
            seen[o.results[0]] = ("const", float(values[0]))
        elif isinstance(o, hlo.CompareOp):
            lhs, rhs = (seen.get(v) for v in o.operands)
            direction = o.comparison_direction.text
            kind = o.compare_type.text if o.compare_type is not None else "NOTYPE"
            if lhs is None or rhs is None:
                raise refusal
            if direction == "EQ" and lhs[0] == "arg" and rhs == ("const", 0.0):
                seen[o.results[0]] = ("is_zero", lhs[1])
            elif direction == "NE" and lhs[0] == "arg" and lhs == rhs:
                seen[o.results[0]] = ("is_nan", lhs[1])
            elif direction in ("LT", "GT") and lhs[0] in ("arg", "zeroed", "canon") and rhs[0] == lhs[0]:
                if {lhs[1], rhs[1]} != {0, 1} or result is not None:  # one comparison of the pair
                    raise refusal
                result = (direction, int(lhs[1]), int(rhs[1]), f"{lhs[0]}:{kind}")
                seen[o.results[0]] = ("result", 0)
            else:
                raise refusal
        elif isinstance(o, hlo.SelectOp):
            cond, yes, no = (seen.get(v) for v in o.operands)
            if cond is None or yes is None or no is None:
                raise refusal
            if cond[0] == "is_zero" and yes == ("const", 0.0) and no == ("arg", cond[1]):
                seen[o.results[0]] = ("zeroed", cond[1])
            elif cond[0] == "is_nan" and yes[0] == "const" and np.isnan(yes[1]) and no == ("zeroed", cond[1]):
                seen[o.results[0]] = ("canon", cond[1])
            else:
                raise refusal
        else:
            raise refusal
    last = ops[-1]
    if result is None or not isinstance(last, hlo.ReturnOp) or seen.get(last.values[0]) != ("result", 0):
        raise refusal
    direction, left, _, how = result
    form, kind = how.split(":")
    element = result_of(op)[1]
    if element.is_float and kind == "TOTALORDER" and form != "canon":
        raise LoweringError(
            "its comparator orders floats by TOTALORDER without mapping -0.0 to 0.0 and NaNs to one NaN first "
            "(-0.0 before 0.0, negative NaNs first); Loam reads JAX's comparator, which does"
        )
    unsigned = element.name.startswith("ui") or element.name == "bool"  # JAX compares i1 as UNSIGNED
    if not element.is_float and kind in ("SIGNED", "UNSIGNED") and (kind == "UNSIGNED") != unsigned:
        raise LoweringError(f"its comparator compares {element.name} as {kind}; TopK orders them as their type does")
    return (direction == "GT") == (left == 0)


@rule(hlo.SortOp)
def _sort(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.SortOp)
    descending = _sort_direction(op)
    axis = op.dim
    keys = full(b, xs[0])
    extent = xs[0].shape[axis]
    if extent is None:
        raise LoweringError(f"the sorted dim {axis} has an extent only the run knows")
    if xs[0].elem.name == "bool":
        keys = b.node("Cast", [keys], {"to": int_attr(by_name("i8").onnx)}, what="keys")
    attrs = {"axis": int_attr(axis), "largest": int_attr(int(descending)), "sorted": int_attr(1)}
    values, indices = _two_outputs(b, "TopK", [keys, b.ints([extent], "k")], attrs, ("sorted", "order"))
    results = []
    for i, x in enumerate(xs):
        shape, elem = x.shape, x.elem
        if i == 0 and x.elem.name != "bool":
            results.append(Operand(values, shape, elem))
            continue
        value = b.node("GatherElements", [full(b, x), indices], {"axis": int_attr(axis)}, what=f"operand{i}")
        results.append(Operand(value, shape, elem))
    return results


def _two_outputs(
    b: GraphBuilder, op_type: str, inputs: Sequence[SSAValue], attrs: dict[str, IntegerAttr], whats: tuple[str, str]
) -> tuple[SSAValue, SSAValue]:
    """One ONNX node with two outputs, named as `GraphBuilder.node` names one."""
    node_name = b.unique(b.base)
    names = [b.unique(f"{b.base}_{what}") for what in whats]
    node = NodeOp(
        op_type, inputs, [UnknownType(), UnknownType()], names, node_name=node_name, since=b.opset, attrs=attrs,
        doc_string=b.doc,
    )  # fmt: skip
    b.ops.append(node)
    for value, name in zip(node.outs, names, strict=True):
        set_name_hint(value, name)
    return node.outs[0], node.outs[1]
