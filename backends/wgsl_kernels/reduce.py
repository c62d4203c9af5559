"""`kernel.softmax` and `kernel.reduce` as WGSL: one workgroup per row, a shared-memory tree reduction.

A *row* is the block of input elements one result element (reduce) or one normalised block
(softmax, and `kernel.normalize` in `normalization.py`) reads: the reduced axes at one position of
the kept axes.  Rows are numbered row-major over the kept axes (so row r is also element r of a
reduce's result, keepdims or not); the elements of a row are numbered row-major over the reduced
axes taken in the order of `axes` (Hardmax's "first" maximum is the first in that order, as
numpy's moveaxis + argmax gives).

The row kernels' params start with the same block (`_row_params` in each `_p_NAME`): the row
count, the row length, then the extents and element strides of the kept axes, then those of the
reduced axes.  Each of the 64 invocations of a workgroup accumulates the elements j = lid,
lid + 64, ... of its row, then a tree over `var<workgroup>` memory combines the 64 partials.
Compute is f32 for floats (halves rounded back with `narrow`), i32 for integers, u32 for bool.

Reduce kinds: sum, mean, max, min, prod, l1, l2, sum_square, log_sum, log_sum_exp on floats;
sum, mean (truncating), max, min, prod, l1, sum_square on integers, which saturate at the i32 range
as onnxruntime's CPU kernels do (`SATURATING`; the empty max / min of an i64 is the i32 extreme);
max (any) and min (all) on bool.  max / min propagate NaN as numpy's ufuncs do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from loam.backends.wgsl_kernels.common import FLAT, device_type, kernel, narrow
from loam.core.errors import UnsupportedError

ROW_HELPERS = """
fn max_nan(a: f32, b: f32) -> f32 {
  if (is_nan(a)) { return a; }
  if (is_nan(b)) { return b; }
  return max(a, b);
}
fn min_nan(a: f32, b: f32) -> f32 {
  if (is_nan(a)) { return a; }
  if (is_nan(b)) { return b; }
  return min(a, b);
}
fn add_f(a: f32, b: f32) -> f32 { return a + b; }
fn mul_f(a: f32, b: f32) -> f32 { return a * b; }
fn add_i(a: i32, b: i32) -> i32 { return a + b; }
fn mul_i(a: i32, b: i32) -> i32 { return a * b; }
fn max_i(a: i32, b: i32) -> i32 { return max(a, b); }
fn min_i(a: i32, b: i32) -> i32 { return min(a, b); }
fn max_u(a: u32, b: u32) -> u32 { return max(a, b); }
fn min_u(a: u32, b: u32) -> u32 { return min(a, b); }
fn f_inf() -> f32 { return bits_f32(0x7f800000u); }
"""
"""Combining functions of the tree reductions (NaN-propagating max / min, as numpy's)."""


def check_axes(kernel_name: str, axes: object, rank: int) -> tuple[int, ...]:
    """`axes` as a tuple of distinct axes in [0, rank), or UnsupportedError."""
    if axes is None:
        raise UnsupportedError(f"WGSL {kernel_name}: axes known only at run time are not supported")
    assert isinstance(axes, tuple), "an axes parameter is a tuple"
    axes = tuple(int(a) for a in axes)
    if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
        raise UnsupportedError(f"WGSL {kernel_name}: axes {axes} are not distinct axes of a rank-{rank} input")
    return axes


def row_functions(rank: int, axes: Sequence[int]) -> str:
    """WGSL `row_base(row)` (element offset of a row's first element) and `row_at(j)` (offset of a
    row's element j from there), reading the row params block (params[2..])."""
    axes = tuple(axes)
    kept = [a for a in range(rank) if a not in axes]
    nk, nr = len(kept), len(axes)
    if axes == tuple(range(rank - nr, rank)):  # trailing axes: rows are contiguous runs
        return "fn row_base(row: u32) -> u32 { return row * params[1]; }\nfn row_at(j: u32) -> u32 { return j; }\n"

    def walk(name: str, var: str, count: int, start: int) -> str:
        lines = [f"fn {name}({var}: u32) -> u32 {{", f"  var r = {var};", "  var o = 0u;"]
        for k in range(count - 1, -1, -1):
            e, s = start + k, start + count + k
            lines.append(f"  o = o + (r % params[{e}]) * params[{s}];")
            lines.append(f"  r = r / params[{e}];")
        lines.append("  return o;")
        lines.append("}")
        return "\n".join(lines) + "\n"

    return walk("row_base", "row", nk, 2) + walk("row_at", "j", nr, 2 + 2 * nk)


ROW_START = (
    "  let row = wid.y * nwg.x + wid.x;\n"
    "  let live = row < params[0];\n"
    "  let n = select(0u, params[1], live);\n"
    "  let base = row_base(row);\n"
)
"""The first lines of a row kernel: `row`, `live` (a real row), `n` (its length, 0 when not)."""


def tree(var: str, combine: str, sh: str = "sh") -> str:
    """Combine every invocation's `var` by `combine` over `sh`; afterwards each holds the total."""
    return (
        f"  {sh}[lid] = {var};\n"
        "  workgroupBarrier();\n"
        "  for (var s = 32u; s > 0u; s = s >> 1u) {\n"
        f"    if (lid < s) {{ {sh}[lid] = {combine}({sh}[lid], {sh}[lid + s]); }}\n"
        "    workgroupBarrier();\n"
        "  }\n"
        f"  {var} = {sh}[0];\n"
        "  workgroupBarrier();\n"
    )


def accumulate(var: str, combine: str, value: str) -> str:
    """This invocation's share of the row: `var = combine(var, value)` for j = lid, lid + 64, ...
    (`value` reads `x`, the element at offset base + row_at(j))."""
    return (
        "  for (var j = lid; j < n; j = j + 64u) {\n"
        "    let x = in0[base + row_at(j)];\n"
        f"    {var} = {combine}({var}, {value});\n"
        "  }\n"
    )


# -- softmax ---------------------------------------------------------------------------------------


PAIR_TREE = (
    "  sh[lid] = bv;\n"
    "  si[lid] = bi;\n"
    "  workgroupBarrier();\n"
    "  for (var s = 32u; s > 0u; s = s >> 1u) {\n"
    "    if (lid < s && better(sh[lid + s], si[lid + s], sh[lid], si[lid])) {\n"
    "      sh[lid] = sh[lid + s];\n"
    "      si[lid] = si[lid + s];\n"
    "    }\n"
    "    workgroupBarrier();\n"
    "  }\n"
)
"""The workgroup tree over (value, index) pairs (`sh`, `si`) that hardmax and arg_reduce share: after
it, `si[0]` is the index `better` ranks first."""


def source_softmax(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """Softmax / LogSoftmax / Hardmax over `axes` jointly: max, sum of exp, write (f32 compute)."""
    kind = params.get("kind")
    (elem, rank), (out_elem, _) = operands[0], results[0]
    if device_type(elem) != "f32":
        raise UnsupportedError(f"WGSL softmax: element type {elem} is not a float")
    if kind not in ("softmax", "log_softmax", "hardmax"):
        raise UnsupportedError(f"WGSL softmax: kind {kind!r} is not supported")
    axes = check_axes("softmax", params.get("axes"), rank)
    helpers = ROW_HELPERS + row_functions(rank, axes) + "var<workgroup> sh: array<f32, 64>;\n"
    body = ROW_START
    if kind == "hardmax":
        helpers += HARDMAX_HELPERS
        body += (
            "  var bv = -f_inf();\n"
            "  var bi = 0xffffffffu;\n"
            "  for (var j = lid; j < n; j = j + 64u) {\n"
            "    let x = in0[base + row_at(j)];\n"
            "    if (better(x, j, bv, bi)) { bv = x; bi = j; }\n"
            "  }\n" + PAIR_TREE + "  let best = si[0];\n"
            "  for (var j = lid; j < n; j = j + 64u) {\n"
            "    out0[base + row_at(j)] = select(0.0, 1.0, j == best);\n"
            "  }\n"
        )
        return kernel([out_elem], [elem], body, helpers)
    body += "  var m = -f_inf();\n" + accumulate("m", "max_nan", "x") + tree("m", "max_nan")
    body += "  var t = 0.0;\n" + accumulate("t", "add_f", "exp(x - m)") + tree("t", "add_f")
    value = "exp(x - m) / t" if kind == "softmax" else "(x - m) - log(t)"
    body += (
        "  for (var j = lid; j < n; j = j + 64u) {\n"
        "    let o = base + row_at(j);\n"
        "    let x = in0[o];\n"
        f"    out0[o] = {narrow(out_elem, value)};\n"
        "  }\n"
    )
    return kernel([out_elem], [elem], body, helpers)


HARDMAX_HELPERS = """
var<workgroup> si: array<u32, 64>;
fn better(va: f32, ia: u32, vb: f32, ib: u32) -> bool {
  let na = is_nan(va);
  let nb = is_nan(vb);
  if (na && nb) { return ia < ib; }
  if (na) { return true; }
  if (nb) { return false; }
  if (va != vb) { return va > vb; }
  return ia < ib;
}
"""
"""Hardmax's order: NaN above every number (numpy's argmax), ties to the lower index."""


def _p_softmax(shapes: tuple[tuple[int, ...], ...], kind: str, axes: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """The softmax kernel's params (rows, row length, kept extents and strides, reduced extents and
    strides, the reduced axes in `axes` order) and its workgroups (one per row)."""
    block = row_block(tuple(shapes[0]), axes)
    if block[1] == 0:  # an empty row: nothing to normalise
        block[0] = 0
    return tuple(block), block[0]


# -- reduce ----------------------------------------------------------------------------------------

FLOAT_KINDS = ("sum", "mean", "max", "min", "prod", "l1", "l2", "sum_square", "log_sum", "log_sum_exp")
INT_KINDS = ("sum", "mean", "max", "min", "prod", "l1", "sum_square")
INT_LIMITS = {
    "i8": (-128, 127),
    "ui8": (0, 255),
    "i16": (-32768, 32767),
    "ui16": (0, 65535),
}


SATURATING = """
const I32_TOP: u32 = 0x7fffffffu;
fn wide(x: i32) -> vec2<u32> { return vec2<u32>(bitcast<u32>(x), select(0u, 0xffffffffu, x < 0)); }
fn add_w(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn saturate_w(s: vec2<u32>) -> i32 {
  let hi = bitcast<i32>(s.y);
  if (hi > 0 || (hi == 0 && s.x > I32_TOP)) { return 2147483647; }
  if (hi < -1 || (hi == -1 && s.x <= I32_TOP)) { return -2147483647 - 1; }
  return bitcast<i32>(s.x);
}
fn mean_w(s: vec2<u32>, count: u32) -> i32 {
  let n = max(count, 1u);
  let negative = bitcast<i32>(s.y) < 0;
  var m = s;
  if (negative) { m = add_w(vec2<u32>(~s.x, ~s.y), vec2<u32>(1u, 0u)); }
  var r = m.y % n;
  var q = 0u;
  for (var b = 31; b >= 0; b = b - 1) {
    let top = r >> 31u;
    r = (r << 1u) | ((m.x >> u32(b)) & 1u);
    if (top == 1u || r >= n) {
      r = r - n;
      q = q | (1u << u32(b));
    }
  }
  return bitcast<i32>(select(q, 0u - q, negative));
}
fn magnitude(x: i32) -> u32 { return select(bitcast<u32>(x), 0u - bitcast<u32>(x), x < 0); }
fn add_s(a: u32, b: u32) -> u32 { return select(a + b, I32_TOP, b > I32_TOP - a); }
fn abs_s(x: i32) -> u32 { return min(magnitude(x), I32_TOP); }
fn square_s(x: i32) -> u32 {
  let m = magnitude(x);
  return select(m * m, I32_TOP, m > 46340u);
}
fn mul_s(a: vec2<i32>, b: vec2<i32>) -> vec2<i32> {
  if ((a.y == 0 && a.x == 0) || (b.y == 0 && b.x == 0)) { return vec2<i32>(0, 0); }
  let negative = (a.x < 0) != (b.x < 0);
  let past = vec2<i32>(select(1, -1, negative), 1);
  if (a.y != 0 || b.y != 0) { return past; }
  let limit = select(I32_TOP, I32_TOP + 1u, negative);
  if (magnitude(a.x) > limit / magnitude(b.x)) { return past; }
  return vec2<i32>(a.x * b.x, 0);
}
fn saturate_p(p: vec2<i32>) -> i32 {
  if (p.y == 0) { return p.x; }
  return select(2147483647, -2147483647 - 1, p.x < 0);
}
"""
"""Integer reductions as onnxruntime's CPU kernels compute them (in f64, saturated back at the type's
range): a sum or mean accumulates exactly in 64 bits (`vec2<u32>`: low word, high word) and saturates
(a mean truncates toward zero, by long division); l1 and sum_square add non-negative terms, so adding
them saturating at the i32 maximum is the same; a product is a value in range or, once past it, its
sign (`vec2<i32>`: value or sign, past), a zero still making it 0 (in f64 a product past 1.8e308 is
infinite, and times a later 0 NaN, whose conversion C++ leaves undefined: x86 gives the lowest value)."""

INT_ACCUMULATORS: dict[str, tuple[str, str, str, str, str]] = {
    "sum": ("vec2<u32>", "vec2<u32>(0u, 0u)", "add_w", "wide(x)", "saturate_w(a)"),
    "mean": ("vec2<u32>", "vec2<u32>(0u, 0u)", "add_w", "wide(x)", "mean_w(a, n)"),
    "l1": ("u32", "0u", "add_s", "abs_s(x)", "bitcast<i32>(a)"),
    "sum_square": ("u32", "0u", "add_s", "square_s(x)", "bitcast<i32>(a)"),
    "prod": ("vec2<i32>", "vec2<i32>(1, 0)", "mul_s", "vec2<i32>(x, 0)", "saturate_p(a)"),
}
"""Each integer kind's accumulator type, start, combining function, term of element `x` and result of
the total `a` (SATURATING's functions)."""


def source_reduce(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """ONNX Reduce<kind> over `axes`, one workgroup per result element (a tree reduction)."""
    kind = params.get("kind")
    (elem, rank), (out_elem, _) = operands[0], results[0]
    axes = check_axes("reduce", params.get("axes"), rank)
    dt = device_type(elem)
    helpers = ROW_HELPERS + row_functions(rank, axes) + f"var<workgroup> sh: array<{dt}, 64>;\n"
    body = ROW_START
    if dt == "u32":
        if kind not in ("max", "min"):
            raise UnsupportedError(f"WGSL reduce: kind {kind!r} of bool is not supported (only max and min)")
        fn = f"{kind}_u"
        body += f"  var a = {'0u' if kind == 'max' else '1u'};\n" + accumulate("a", fn, "x") + tree("a", fn)
        body += "  if (live && lid == 0u) { out0[row] = a; }\n"
        return kernel([out_elem], [elem], body, helpers)
    if dt == "i32":
        if kind not in INT_KINDS:
            raise UnsupportedError(f"WGSL reduce: kind {kind!r} of integers is not supported (it is computed in f64)")
        if kind in ("max", "min"):
            low, high = INT_LIMITS.get(elem, (-(2**31), 2**31 - 1))
            init = f"i32({low})" if low > -(2**31) else "i32(-2147483647 - 1)"
            if kind == "min":
                init = f"i32({high})"
            body += f"  var a: i32 = {init};\n" + accumulate("a", f"{kind}_i", "x") + tree("a", f"{kind}_i")
            body += "  if (live && lid == 0u) { out0[row] = a; }\n"
            return kernel([out_elem], [elem], body, helpers)
        accumulator, init, fn, value, result = INT_ACCUMULATORS[kind]
        helpers += SATURATING + f"var<workgroup> sa: array<{accumulator}, 64>;\n"
        body += f"  var a = {init};\n" + accumulate("a", fn, value) + tree("a", fn, "sa")
        body += f"  if (live && lid == 0u) {{ out0[row] = {result}; }}\n"
        return kernel([out_elem], [elem], body, helpers)
    if kind not in FLOAT_KINDS:
        raise UnsupportedError(f"WGSL reduce: kind {kind!r} is not supported")
    if kind == "log_sum_exp":
        body += "  var m = -f_inf();\n" + accumulate("m", "max_nan", "x") + tree("m", "max_nan")
        body += "  let top = select(0.0, m, !(is_nan(m) || is_inf(m)));\n"
        body += "  var a = 0.0;\n" + accumulate("a", "add_f", "exp(x - top)") + tree("a", "add_f")
        result = "log(a) + top"
    else:
        init, fn, value = {
            "sum": ("0.0", "add_f", "x"),
            "mean": ("0.0", "add_f", "x"),
            "max": ("-f_inf()", "max_nan", "x"),
            "min": ("f_inf()", "min_nan", "x"),
            "prod": ("1.0", "mul_f", "x"),
            "l1": ("0.0", "add_f", "abs(x)"),
            "l2": ("0.0", "add_f", "x * x"),
            "sum_square": ("0.0", "add_f", "x * x"),
            "log_sum": ("0.0", "add_f", "x"),
        }[kind]
        body += f"  var a = {init};\n" + accumulate("a", fn, value) + tree("a", fn)
        result = {"mean": "a / f32(params[1])", "l2": "sqrt(a)", "log_sum": "log(a)"}.get(kind, "a")
    body += f"  if (live && lid == 0u) {{ out0[row] = {narrow(out_elem, result)}; }}\n"
    return kernel([out_elem], [elem], body, helpers)


def _p_reduce(
    shapes: tuple[tuple[int, ...], ...], kind: str, axes: tuple[int, ...], keepdims: int
) -> tuple[tuple[int, ...], int]:
    """The reduce kernel's params (rows = result elements, row length, kept extents and strides,
    reduced extents and strides) and its workgroups (one per result element)."""
    block = row_block(tuple(shapes[0]), axes)
    return tuple(block), block[0]


def row_block(shape: tuple[int, ...], axes: tuple[int, ...]) -> list[int]:
    """A row kernel's first params over a contiguous `shape` reduced along `axes`: the number of rows
    (kept elements), the row length, the kept extents and strides, the reduced extents and strides."""
    rank = len(shape)
    strides = [1] * rank
    for k in range(rank - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    kept = [a for a in range(rank) if a not in axes]
    rows = 1
    for a in kept:
        rows *= shape[a]
    length = 1
    for a in axes:
        length *= shape[a]
    block = [rows, length]
    block += [shape[a] for a in kept] + [strides[a] for a in kept]
    block += [shape[a] for a in axes] + [strides[a] for a in axes]
    return block


# -- arg_reduce ------------------------------------------------------------------------------------


def _line_helpers(dt: str, kind: str) -> str:
    """WGSL `better(va, ia, vb, ib)`: element (va, ia) beats (vb, ib) in ArgMax / ArgMin order, with
    NaN above every number (numpy's argmax and argmin both pick a NaN), ties to the lower index, or
    the higher with `params[3]` (select_last_index); index NONE loses to everything."""
    nan = "  let na = is_nan(va);\n  let nb = is_nan(vb);\n  if (na && nb) { return tie; }\n"
    nan += "  if (na) { return true; }\n  if (nb) { return false; }\n"
    return (
        f"var<workgroup> sh: array<{dt}, 64>;\n"
        "var<workgroup> si: array<u32, 64>;\n"
        "const NONE: u32 = 0xffffffffu;\n"
        f"fn better(va: {dt}, ia: u32, vb: {dt}, ib: u32) -> bool {{\n"
        "  if (ia == NONE) { return false; }\n"
        "  if (ib == NONE) { return true; }\n"
        "  let tie = select((ia < ib), (ia > ib), params[3] != 0u);\n"
        + (nan if dt == "f32" else "")
        + f"  if (va != vb) {{ return va {'>' if kind == 'max' else '<'} vb; }}\n"
        "  return tie;\n"
        "}\n"
    )


LINE_START = (
    "  let row = wid.y * nwg.x + wid.x;\n"
    "  let live = row < params[0];\n"
    "  let n = select(0u, params[1], live);\n"
    "  let inner = params[2];\n"
    "  let base = (row / inner) * n * inner + row % inner;\n"
)
"""The first lines of a kernel over lines along one axis, the operand read as (outer, n, inner):
line `row` (of outer * inner) starts at `base`, its element j is at base + j * inner."""


def source_arg_reduce(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """ArgMax / ArgMin along one axis, one workgroup per line (a tree over (value, index) pairs);
    the i64 result travels as i32.  `axis`, `keepdims` and `select_last_index` come through the params."""
    kind = params.get("kind")
    elem, out_elem = operands[0][0], results[0][0]
    if kind not in ("max", "min"):
        raise UnsupportedError(f"WGSL arg_reduce: kind {kind!r} is not supported")
    if device_type(out_elem) != "i32":
        raise UnsupportedError(f"WGSL arg_reduce: a result of element type {out_elem} (an integer type is needed)")
    dt = device_type(elem)
    body = LINE_START + (
        "  var bi = NONE;\n"
        f"  var bv = {dt}(0);\n"
        "  for (var j = lid; j < n; j = j + 64u) {\n"
        "    let x = in0[base + j * inner];\n"
        "    if (better(x, j, bv, bi)) { bv = x; bi = j; }\n"
        "  }\n" + PAIR_TREE + "  if (live && lid == 0u) { out0[row] = select(i32(si[0]), 0, si[0] == NONE); }\n"
    )
    return kernel([out_elem], [elem], body, _line_helpers(dt, kind))


def _lines(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """`shape` read as (outer, extent, inner) around `axis`: (lines = outer * inner, extent, inner)."""
    rank = len(shape)
    axis = axis % rank if rank else 0
    outer = 1
    for e in shape[:axis]:
        outer *= e
    inner = 1
    for e in shape[axis + 1 :]:
        inner *= e
    extent = shape[axis] if rank else 1
    return outer * inner, extent, max(inner, 1)


def _p_arg_reduce(
    shapes: tuple[tuple[int, ...], ...], kind: str, axis: int, keepdims: int, select_last_index: int
) -> tuple[tuple[int, ...], int]:
    """The arg_reduce kernel's params (lines, extent, inner, select_last_index) and its workgroups
    (one per line, so one per result element)."""
    lines, extent, inner = _lines(tuple(shapes[0]), axis)
    if extent == 0:
        lines = 0
    return (lines, extent, inner, 1 if select_last_index else 0), lines


# -- cumsum, cumprod -------------------------------------------------------------------------------


def _source_cumulative(operands: list[tuple[str, int]], results: list[tuple[str, int]], product: bool) -> str:
    """Running sums (products) along one axis: one invocation per line, in order (numpy's cumsum and
    cumprod are sequential too); f32 for floats (halves rounded on the way out), i32 for integers.
    `axis`, `exclusive` and `reverse` come through the params."""
    elem, out_elem = operands[0][0], results[0][0]
    dt = device_type(elem)
    what = "cumprod" if product else "cumsum"
    if dt == "u32":
        raise UnsupportedError(f"WGSL {what}: element type {elem} is not a number")
    step = "acc = acc * x;" if product else "acc = acc + x;"
    body = FLAT + (
        "  let live = i < params[0];\n"
        "  let n = select(0u, params[1], live);\n"
        "  let inner = params[2];\n"
        "  let base = (i / inner) * n * inner + i % inner;\n"
        "  let exclusive = params[3] != 0u;\n"
        "  let reverse = params[4] != 0u;\n"
        f"  var acc = {dt}({int(product)});\n"
        "  for (var t = 0u; t < n; t = t + 1u) {\n"
        "    let o = base + select(t, n - 1u - t, reverse) * inner;\n"
        "    let x = in0[o];\n"
        "    if (exclusive) {\n"
        f"      out0[o] = {narrow(out_elem, 'acc')};\n"
        f"      {step}\n"
        "    } else {\n"
        f"      {step}\n"
        f"      out0[o] = {narrow(out_elem, 'acc')};\n"
        "    }\n"
        "  }\n"
    )
    return kernel([out_elem], [elem], body)


def source_cumsum(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """CumSum along one axis (`_source_cumulative`)."""
    return _source_cumulative(operands, results, product=False)


def source_cumprod(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """CumProd along one axis (`_source_cumulative`)."""
    return _source_cumulative(operands, results, product=True)


def _p_cumsum(
    shapes: tuple[tuple[int, ...], ...], axis: int, exclusive: int, reverse: int
) -> tuple[tuple[int, ...], int]:
    """The cumsum (and cumprod) kernel's params (lines, extent, inner, exclusive, reverse) and its
    workgroups (64 lines each)."""
    lines, extent, inner = _lines(tuple(shapes[0]), axis)
    if extent == 0:
        lines = 0
    return (lines, extent, inner, 1 if exclusive else 0, 1 if reverse else 0), (lines + 63) // 64


def _p_cumprod(
    shapes: tuple[tuple[int, ...], ...], axis: int, exclusive: int, reverse: int
) -> tuple[tuple[int, ...], int]:
    """The cumprod kernel's params: the cumsum kernel's."""
    return _p_cumsum(shapes, axis, exclusive, reverse)


# -- topk ------------------------------------------------------------------------------------------


def _topk_helpers(dt: str) -> str:
    """WGSL `before(va, ia, vb, ib)`: element (va, ia) comes before (vb, ib) in TopK's order, the
    numpy kernel's stable sort: larger first (`params[4]`, largest) or smaller first, NaN above every
    number, ties to the lower index; index NONE comes after everything."""
    nan = (
        "  let na = is_nan(va);\n  let nb = is_nan(vb);\n  if (na && nb) { return ia < ib; }\n"
        "  if (na) { return largest; }\n  if (nb) { return !largest; }\n"
    )
    return (
        f"var<workgroup> sh: array<{dt}, 64>;\n"
        "var<workgroup> si: array<u32, 64>;\n"
        "const NONE: u32 = 0xffffffffu;\n"
        f"fn before(va: {dt}, ia: u32, vb: {dt}, ib: u32) -> bool {{\n"
        "  if (ia == NONE) { return false; }\n"
        "  if (ib == NONE) { return true; }\n"
        "  let largest = params[4] != 0u;\n"
        + (nan if dt == "f32" else "")
        + "  if (va != vb) { return select((va < vb), (va > vb), largest); }\n"
        "  return ia < ib;\n"
        "}\n"
    )


def source_topk(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """TopK along one axis, one workgroup per line, by repeated selection: pick t is the first element
    (in `before`'s order) after pick t - 1, found by each invocation scanning its share of the line
    and a tree over (value, index) pairs.  Any line length; k picks cost k scans of the line.
    Results: values (the input's type) and indices (i64 travelling as i32), always sorted (as the
    numpy kernel; ONNX leaves the order open for sorted=0).  `k`, `axis` and `largest` come through
    the params."""
    elem = operands[0][0]
    if len(results) != 2:
        raise UnsupportedError("WGSL topk: two results (values, indices) are needed")
    if device_type(results[1][0]) != "i32":
        raise UnsupportedError(
            f"WGSL topk: an index result of element type {results[1][0]} (an integer type is needed)"
        )
    if len(operands) != 1:
        raise UnsupportedError("WGSL topk: k as a run-time operand is not supported")
    dt = device_type(elem)
    body = LINE_START + (
        "  let k = select(0u, params[3], live);\n"
        "  let obase = (row / inner) * k * inner + row % inner;\n"
        f"  var pv = {dt}(0);\n"
        "  var pi = NONE;\n"
        "  for (var t = 0u; t < k; t = t + 1u) {\n"
        "    var bi = NONE;\n"
        f"    var bv = {dt}(0);\n"
        "    for (var j = lid; j < n; j = j + 64u) {\n"
        "      let x = in0[base + j * inner];\n"
        "      if ((pi == NONE || before(pv, pi, x, j)) && before(x, j, bv, bi)) { bv = x; bi = j; }\n"
        "    }\n"
        "    sh[lid] = bv;\n"
        "    si[lid] = bi;\n"
        "    workgroupBarrier();\n"
        "    for (var s = 32u; s > 0u; s = s >> 1u) {\n"
        "      if (lid < s && before(sh[lid + s], si[lid + s], sh[lid], si[lid])) {\n"
        "        sh[lid] = sh[lid + s];\n"
        "        si[lid] = si[lid + s];\n"
        "      }\n"
        "      workgroupBarrier();\n"
        "    }\n"
        "    pv = sh[0];\n"
        "    pi = si[0];\n"
        "    workgroupBarrier();\n"
        "    if (lid == 0u) {\n"
        "      out0[obase + t * inner] = pv;\n"
        "      out1[obase + t * inner] = select(i32(pi), 0, pi == NONE);\n"
        "    }\n"
        "  }\n"
    )
    return kernel([elem, results[1][0]], [elem], body, _topk_helpers(dt))


def _p_topk(
    shapes: tuple[tuple[int, ...], ...], k: int, axis: int, largest: int, sorted: int = 1
) -> tuple[tuple[int, ...], int]:
    """The topk kernel's params (lines, extent, inner, k, largest) and its workgroups (one per line)."""
    lines, extent, inner = _lines(tuple(shapes[0]), axis)
    if extent == 0 or k == 0:
        lines = 0
    return (lines, extent, inner, int(k), 1 if largest else 0), lines


PIECES: dict[str, Callable[..., object]] = {
    "row_block": row_block,
    "_p_softmax": _p_softmax,
    "_p_reduce": _p_reduce,
    "_lines": _lines,
    "_p_arg_reduce": _p_arg_reduce,
    "_p_cumsum": _p_cumsum,
    "_p_cumprod": _p_cumprod,
    "_p_topk": _p_topk,
}
SOURCES: dict[str, object] = {
    "softmax": source_softmax,
    "reduce": source_reduce,
    "arg_reduce": source_arg_reduce,
    "cumsum": source_cumsum,
    "cumprod": source_cumprod,
    "topk": source_topk,
}
