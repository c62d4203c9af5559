"""`kernel.gather` as WGSL: one invocation per result element.

The result (data[:axis] + indices + data[axis+1:]) is read as (outer, count, inner), the data as
(outer, extent, inner): result element (o, k, i) copies data element (o, indices[k], i).  Indices
are i32 on the device (the host narrows i64 after checking it fits); a negative index counts from
the end (adds the extent), and an index still outside [0, extent) is clamped into it, so a bad
index reads a wrong element but never outside the buffer (the host checks indices beforehand).

Params: the result's element count, inner, count (indices' elements), extent (data's `axis`).

The family's other kernels (gather_elements, scatter_elements, scatter_nd, gather_nd, one_hot) say their
layouts and params in their source functions.
"""

from __future__ import annotations

from collections.abc import Callable

from loam.backends.wgsl_kernels.common import FLAT, WORKGROUP, device_type, kernel, narrow
from loam.backends.wgsl_kernels.reduce import ROW_HELPERS
from loam.core.errors import UnsupportedError


def source_gather(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The gather shader: operands data (any element type), indices (an integer type)."""
    (elem, _), (index_elem, _) = operands[0], operands[1]
    if device_type(index_elem) != "i32":
        raise UnsupportedError(f"WGSL gather: indices of element type {index_elem} (an integer type is needed)")
    body = (
        FLAT
        + "  if (i >= params[0]) { return; }\n"
        + "  let inner = params[1];\n"
        + "  let count = params[2];\n"
        + "  let extent = i32(params[3]);\n"
        + "  let inside = i % inner;\n"
        + "  let k = (i / inner) % count;\n"
        + "  let outer = i / (inner * count);\n"
        + "  var at = in1[k];\n"
        + "  if (at < 0) { at = at + extent; }\n"
        + "  at = clamp(at, 0, max(extent - 1, 0));\n"
        + "  out0[i] = in0[(outer * u32(extent) + u32(at)) * inner + inside];\n"
    )
    return kernel([results[0][0]], [elem, index_elem], body)


def _p_gather(shapes: tuple[tuple[int, ...], ...], axis: int) -> tuple[tuple[int, ...], int]:
    """The gather kernel's params (result elements, inner = data's extents after `axis` multiplied,
    count = indices' elements, extent = data's `axis` extent) and its workgroups (64 elements each)."""
    data, indices = tuple(shapes[0]), tuple(shapes[1])
    inner = 1
    for e in data[axis + 1 :]:
        inner *= e
    count = 1
    for e in indices:
        count *= e
    outer = 1
    for e in data[:axis]:
        outer *= e
    total = outer * count * inner
    return (total, max(inner, 1), max(count, 1), data[axis]), (total + 63) // 64


# -- gather_elements -------------------------------------------------------------------------------


def _index_fix() -> str:
    """WGSL lines turning `at` (an index along the axis of extent `extent`) into [0, extent): negative
    counts from the end, and what is still outside is clamped (the host checks indices beforehand)."""
    return "  if (at < 0) { at = at + extent; }\n  at = clamp(at, 0, max(extent - 1, 0));\n"


def _row_of_tuple(k: int, tuple_index: str, indent: str) -> str:
    """WGSL lines folding index tuple `tuple_index`'s `k` entries (of `in1`, each fixed by `_index_fix`
    against its extent in `params[3..]`) into `row`, the flat row of the data's k indexed axes."""
    lines = ""
    for j in range(k):
        lines += (
            "{\n"
            f"  let extent = i32(params[{3 + j}]);\n"
            f"  var at = in1[{tuple_index} * {k}u + {j}u];\n" + _index_fix() + "  row = row * u32(extent) + u32(at);\n"
            "}\n"
        )
    return "".join(indent + line + "\n" for line in lines.splitlines())


def source_gather_elements(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """GatherElements, one invocation per result element: the element's own coordinates with the
    axis coordinate replaced by its index.  `axis` comes through the params.

    Params: count, axis, the data's axis extent, the result (indices') extents, the data's strides.
    """
    (elem, rank), (index_elem, _) = operands[0], operands[1]
    if device_type(index_elem) != "i32":
        raise UnsupportedError(
            f"WGSL gather_elements: indices of element type {index_elem} (an integer type is needed)"
        )
    body = FLAT + "  if (i >= params[0]) { return; }\n  let extent = i32(params[2]);\n"
    body += "  var at = in1[i];\n" + _index_fix() + "  var rem = i;\n  var src = 0u;\n"
    for k in range(rank - 1, -1, -1):
        body += (
            f"  {{\n    let c = rem % params[{3 + k}];\n    rem = rem / params[{3 + k}];\n"
            f"    src = src + select(c, u32(at), params[1] == {k}u) * params[{3 + rank + k}];\n  }}\n"
        )
    body += "  out0[i] = in0[src];\n"
    return kernel([results[0][0]], [elem, index_elem], body)


def _p_gather_elements(shapes: tuple[tuple[int, ...], ...], axis: int) -> tuple[tuple[int, ...], int]:
    """The gather_elements kernel's params (count, axis, the data's axis extent, the indices'
    extents, the data's strides) and its workgroups (64 elements each)."""
    data, indices = tuple(shapes[0]), tuple(shapes[1])
    rank = len(data)
    axis = axis % rank
    strides = [1] * rank
    for k in range(rank - 2, -1, -1):
        strides[k] = strides[k + 1] * data[k + 1]
    count = 1
    for e in indices:
        count *= e
    return (count, axis, data[axis], *indices, *strides), (count + 63) // 64


# -- scatter_elements ------------------------------------------------------------------------------

SCATTER_COMBINE = {
    "f32": {"add": "add_f", "mul": "mul_f", "max": "max_nan", "min": "min_nan"},
    "i32": {"add": "add_i", "mul": "mul_i", "max": "max_i", "min": "min_i"},
    "u32": {"add": "max_u", "mul": "min_u", "max": "max_u", "min": "min_u"},
}
"""How a reduction combines on each device type (bool's add is or, its mul is and, as numpy's)."""


def source_scatter_elements(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """ScatterElements, one invocation per line of the data along `axis`: it copies the line, then
    applies the updates aimed at it in order (numpy's order: a later duplicate wins, or reduces
    after the earlier ones); a half result is rounded once at the end, as the numpy kernel's f32
    reduction is.  `axis` comes through the params.

    Params: lines, axis, the data's axis extent, the updates' axis extent, the data's extents, the
    data's strides, the updates' extents, the updates' strides.
    """
    reduction = params.get("reduction")
    (elem, rank), (index_elem, _), (update_elem, _) = operands
    out_elem = results[0][0]
    dt = device_type(elem)
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise UnsupportedError(f"WGSL scatter_elements: reduction {reduction!r} is not supported")
    if device_type(index_elem) != "i32":
        raise UnsupportedError(
            f"WGSL scatter_elements: indices of element type {index_elem} (an integer type is needed)"
        )
    de, ds, ue, us = 4, 4 + rank, 4 + 2 * rank, 4 + 3 * rank
    body = FLAT + (
        "  if (i >= params[0]) { return; }\n"
        "  let extent = i32(params[2]);\n"
        "  let m = params[3];\n"
        "  var rem = i;\n"
        "  var dbase = 0u;\n"
        "  var ubase = 0u;\n"
        "  var dstep = 0u;\n"
        "  var ustep = 0u;\n"
        "  var covered = true;\n"
    )
    for k in range(rank - 1, -1, -1):
        body += (
            f"  if (params[1] == {k}u) {{\n"
            f"    dstep = params[{ds + k}];\n    ustep = params[{us + k}];\n"
            "  } else {\n"
            f"    let c = rem % params[{de + k}];\n    rem = rem / params[{de + k}];\n"
            f"    if (c >= params[{ue + k}]) {{ covered = false; }}\n"
            f"    dbase = dbase + c * params[{ds + k}];\n    ubase = ubase + c * params[{us + k}];\n"
            "  }\n"
        )
    body += (
        "  for (var j = 0u; j < u32(extent); j = j + 1u) {\n"
        "    let o = dbase + j * dstep;\n"
        "    out0[o] = in0[o];\n"
        "  }\n"
    )
    if reduction == "none":
        combine = "in2[u]"
    else:
        combine = f"{SCATTER_COMBINE[dt][reduction]}(out0[o], in2[u])"
    body += (
        "  if (!covered) { return; }\n"
        "  for (var t = 0u; t < m; t = t + 1u) {\n"
        "    let u = ubase + t * ustep;\n"
        "    var at = in1[u];\n"
        + _index_fix().replace("\n  ", "\n    ").replace("  if", "    if", 1)
        + "    let o = dbase + u32(at) * dstep;\n"
        f"    out0[o] = {combine};\n"
        "  }\n"
    )
    if reduction != "none" and out_elem in ("f16", "bf16"):
        body += (
            "  for (var j = 0u; j < u32(extent); j = j + 1u) {\n"
            "    let o = dbase + j * dstep;\n"
            f"    out0[o] = {narrow(out_elem, 'out0[o]')};\n"
            "  }\n"
        )
    return kernel([out_elem], [elem, index_elem, update_elem], body, ROW_HELPERS)


def _p_scatter_elements(shapes: tuple[tuple[int, ...], ...], axis: int, reduction: str) -> tuple[tuple[int, ...], int]:
    """The scatter_elements kernel's params (lines, axis, the data's and the updates' axis extents,
    the data's extents and strides, the updates' extents and strides) and its workgroups (64 lines
    each)."""
    data, updates = tuple(shapes[0]), tuple(shapes[2])
    rank = len(data)
    axis = axis % rank
    dstrides = [1] * rank
    ustrides = [1] * rank
    for k in range(rank - 2, -1, -1):
        dstrides[k] = dstrides[k + 1] * data[k + 1]
        ustrides[k] = ustrides[k + 1] * updates[k + 1]
    lines = 1
    for k in range(rank):
        if k != axis:
            lines *= data[k]
    if data[axis] == 0:
        lines = 0
    block = (lines, axis, data[axis], updates[axis], *data, *dstrides, *updates, *ustrides)
    return block, (lines + 63) // 64


# -- scatter_nd ------------------------------------------------------------------------------------

I64_SUMS = (
    "sums and products of i64 run in i32 on the device and could leave its range, where numpy's i64 keeps "
    "the value; the WGSL backend runs no i64 arithmetic it cannot bound"
)
"""Why a scatter_nd adding or multiplying i64 is refused (the words the printer uses for the others)."""


def source_scatter_nd(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """ScatterND, one workgroup per *column*: a position among the data's axes after k (the axes one
    tuple's update slice covers).  The data is read as (rows, columns), rows being the positions
    among its first k axes, and the updates as (tuples, columns).

    The workgroup copies its column, then takes the tuples 64 at a time in order: each invocation
    turns its tuple into a row (negative entries count from the end; one still outside the data is
    clamped into it, so a bad tuple writes a wrong element but never outside the buffer) and shares
    it in workgroup memory.  With reduction none the last of a batch's tuples naming a row writes
    it; otherwise the first combines every update the batch aims at that row, in order.  A barrier
    between batches keeps the tuples' order, so duplicates end as in the numpy kernel (last wins,
    or reduced in order), and a half result is rounded once at the end, as its f32 reduction is.
    k (the indices' last extent) follows from the ranks: updates rank = indices rank - 1 + data rank - k.

    Element tuples (k = the data's rank, as a Llama export's causal mask has) make one column, so one
    workgroup takes every tuple.  On llvmpipe, which caps a loop's iterations in a dispatch at 65535,
    that bounds rows and tuples to 65535 batches of 64 (about 4.19 million), as the line and row
    loops of the other kernels are bounded there.

    Params: columns, rows, tuples, then the data's first k extents.
    """
    reduction = params.get("reduction")
    (elem, rank), (index_elem, index_rank), (update_elem, update_rank) = operands
    out_elem = results[0][0]
    dt = device_type(elem)
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise UnsupportedError(f"WGSL scatter_nd: reduction {reduction!r} is not supported")
    if device_type(index_elem) != "i32":
        raise UnsupportedError(f"WGSL scatter_nd: indices of element type {index_elem} (an integer type is needed)")
    if reduction in ("add", "mul") and "i64" in (elem, update_elem, out_elem):
        raise UnsupportedError(I64_SUMS)
    k = index_rank - 1 + rank - update_rank
    if index_rank < 1 or not 0 <= k <= rank:
        raise UnsupportedError(
            f"WGSL scatter_nd: ranks {rank}, {index_rank}, {update_rank} of data, indices and updates give no k"
        )
    body = (
        "  let w = wid.y * nwg.x + wid.x;\n"
        "  let live = w < params[0];\n"
        "  let columns = params[0];\n"
        "  let rows = select(0u, params[1], live);\n"
        "  let n = select(0u, params[2], live);\n"
        "  for (var o = lid; o < rows; o = o + 64u) {\n"
        "    out0[o * columns + w] = in0[o * columns + w];\n"
        "  }\n"
        "  storageBarrier();\n"
        "  for (var c = 0u; c < n; c = c + 64u) {\n"
        "    let t = c + lid;\n"
        "    var row = 0xffffffffu;\n"
        "    if (t < n) {\n"
        "      row = 0u;\n"
    )
    if k == 0:  # every tuple is the empty one (row 0); the indices stay bound, as the dispatch binds them
        body += "      _ = arrayLength(&in1);\n"
    body += _row_of_tuple(k, "t", "      ")
    body += "    }\n    rows_of[lid] = row;\n    workgroupBarrier();\n    if (t < n) {\n"
    # The scans over a batch are unrolled: llvmpipe's cap counts a loop's iterations over every entry
    # into it (measured), so a scan looping 64 times per batch would stop it after ~1000 batches.  They
    # are straight-line code (no branch per lane): SwiftShader, Chromium's CPU adapter, takes minutes
    # to compile 63 branches in a loop with barriers, and seconds for this.
    if reduction == "none":
        body += "      var last = true;\n"
        for j in range(1, WORKGROUP):
            body += f"      last = last && (lid >= {j}u || rows_of[{j}] != row);\n"
        body += "      if (last) { out0[row * columns + w] = in2[t * columns + w]; }\n"
    else:
        combine = SCATTER_COMBINE[dt][reduction]
        body += "      var first = true;\n"
        for j in range(WORKGROUP - 1):
            body += f"      first = first && (lid <= {j}u || rows_of[{j}] != row);\n"
        body += "      if (first) {\n        var acc = out0[row * columns + w];\n"
        for j in range(WORKGROUP):  # a lane past the tuples reads in bounds (clamped) and is not selected
            body += (
                f"        acc = select(acc, {combine}(acc, in2[min(c + {j}u, n - 1u) * columns + w]), "
                f"lid <= {j}u && rows_of[{j}] == row);\n"
            )
        body += "        out0[row * columns + w] = acc;\n      }\n"
    body += "    }\n    workgroupBarrier();\n    storageBarrier();\n  }\n"
    if reduction != "none" and out_elem in ("f16", "bf16"):
        body += (
            "  for (var o = lid; o < rows; o = o + 64u) {\n"
            f"    out0[o * columns + w] = {narrow(out_elem, 'out0[o * columns + w]')};\n"
            "  }\n"
        )
    helpers = ROW_HELPERS + "var<workgroup> rows_of: array<u32, 64>;\n"
    return kernel([out_elem], [elem, index_elem, update_elem], body, helpers)


def _p_scatter_nd(shapes: tuple[tuple[int, ...], ...], reduction: str) -> tuple[tuple[int, ...], int]:
    """The scatter_nd kernel's params (columns, rows, tuples, the data's first k extents) and its
    workgroups (one per column)."""
    data, indices = tuple(shapes[0]), tuple(shapes[1])
    k = indices[-1]
    rows = 1
    for e in data[:k]:
        rows *= e
    columns = 1
    for e in data[k:]:
        columns *= e
    tuples = 1
    for e in indices[:-1]:
        tuples *= e
    if rows == 0:
        columns = 0
    return (columns, rows, tuples, *data[:k]), columns


# -- gather_nd -------------------------------------------------------------------------------------


def source_gather_nd(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """GatherND, one invocation per result element.  The result is read as (tuples, inner), a tuple
    being a position among the indices' axes but the last (the batch axes lead), inner a position
    among the data's axes after the batch axes and the k a tuple names; the data as (rows, inner),
    a row being the batch position followed by the tuple's k entries.  Each entry counts from the
    end where negative; one still outside its axis is clamped into it, as the gathers do (a bad
    tuple reads a wrong element, never outside the buffer; the numpy kernel raises DataError).
    k (the indices' last extent) follows from the ranks: result rank = indices rank - 1 + data rank
    - batch_dims - k.

    Params: the result's element count, inner, tuples per batch, then the data's k extents the
    tuples index.
    """
    (elem, rank), (index_elem, index_rank) = operands[0], operands[1]
    b = params.get("batch_dims") or 0
    assert isinstance(b, int), "batch_dims is an int parameter"
    k = index_rank - 1 + rank - b - results[0][1]
    if device_type(index_elem) != "i32":
        raise UnsupportedError(f"WGSL gather_nd: indices of element type {index_elem} (an integer type is needed)")
    if not 1 <= k <= rank - b:
        raise UnsupportedError(f"WGSL gather_nd: ranks {rank} and {index_rank} with batch_dims {b} give no k")
    body = (
        FLAT
        + "  if (i >= params[0]) { return; }\n"
        + "  let inner = params[1];\n"
        + "  let q = i / inner;\n"  # the tuple, counted over every batch
        + "  var row = q / params[2];\n"  # its batch, then its k entries
    )
    body += _row_of_tuple(k, "q", "  ")
    body += "  out0[i] = in0[row * inner + i % inner];\n"
    return kernel([results[0][0]], [elem, index_elem], body)


def _p_gather_nd(shapes: tuple[tuple[int, ...], ...], batch_dims: int) -> tuple[tuple[int, ...], int]:
    """The gather_nd kernel's params (result elements, inner = the data's extents after the batch
    axes and the k indexed multiplied, tuples per batch, the data's k indexed extents) and its
    workgroups (64 elements each)."""
    data, indices = tuple(shapes[0]), tuple(shapes[1])
    k, b = indices[-1], batch_dims
    inner = 1
    for e in data[b + k :]:
        inner *= e
    tuples = 1
    for e in indices[b:-1]:
        tuples *= e
    batches = 1
    for e in data[:b]:
        batches *= e
    total = batches * tuples * inner
    return (total, max(inner, 1), max(tuples, 1), *data[b : b + k]), (total + 63) // 64


# -- one_hot ---------------------------------------------------------------------------------------


def source_one_hot(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """OneHot, one invocation per result element.  The result is read as (outer, depth, inner), the
    indices as (outer, inner): element (o, d, c) is values[1] where index (o, c) is d, else values[0].
    A float index is truncated toward zero (NaN matches nothing); a negative one counts from depth;
    one still outside [0, depth) matches nothing, as ONNX says.  A depth the run gives (a third
    operand: the new axis is a length only the run knows) is refused: the device would have to
    hand it back before the result's buffer could be made.

    Params: the result's element count, inner, depth.
    """
    if len(operands) != 2:
        raise UnsupportedError("WGSL one_hot: a depth the run gives makes a result length only the host knows")
    (index_elem, _), (elem, _) = operands
    if device_type(index_elem) == "u32":
        raise UnsupportedError(f"WGSL one_hot: indices of element type {index_elem} (a number is needed)")
    if device_type(index_elem) == "f32":
        # Truncated, then clamped into i32 (past it no position matches anyway); NaN to a miss.
        read = (
            "  let f = trunc(in0[o * inner + c]);\n"
            "  var at = i32(clamp(f, -2147483648.0, 2147483520.0));\n"
            "  if (is_nan(f)) { at = -2147483647 - 1; }\n"
        )
    else:
        read = "  var at = in0[o * inner + c];\n"
    body = (
        FLAT
        + "  if (i >= params[0]) { return; }\n"
        + "  let inner = params[1];\n"
        + "  let depth = params[2];\n"
        + "  let c = i % inner;\n"
        + "  let d = (i / inner) % depth;\n"
        + "  let o = i / (inner * depth);\n"
        + read
        + "  if (at < 0) { at = at + i32(depth); }\n"
        + "  out0[i] = select(in1[0], in1[1], at == i32(d));\n"
    )
    return kernel([results[0][0]], [index_elem, elem], body)


def _p_one_hot(shapes: tuple[tuple[int, ...], ...], depth: int, axis: int) -> tuple[tuple[int, ...], int]:
    """The one_hot kernel's params (result elements, inner = the indices' extents from `axis` on
    multiplied, depth) and its workgroups (64 elements each)."""
    result = tuple(shapes[-1])
    axis = axis % len(result)
    inner = 1
    for e in result[axis + 1 :]:
        inner *= e
    total = 1
    for e in result:
        total *= e
    return (total, max(inner, 1), max(result[axis], 1)), (total + 63) // 64


PIECES: dict[str, Callable[..., object]] = {
    "_p_gather": _p_gather,
    "_p_gather_elements": _p_gather_elements,
    "_p_scatter_elements": _p_scatter_elements,
    "_p_scatter_nd": _p_scatter_nd,
    "_p_gather_nd": _p_gather_nd,
    "_p_one_hot": _p_one_hot,
}
SOURCES: dict[str, object] = {
    "gather": source_gather,
    "gather_elements": source_gather_elements,
    "scatter_elements": source_scatter_elements,
    "scatter_nd": source_scatter_nd,
    "gather_nd": source_gather_nd,
    "one_hot": source_one_hot,
}
