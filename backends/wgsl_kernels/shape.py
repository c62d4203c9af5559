"""`kernel.pad`, `kernel.tile` and `kernel.trilu` as WGSL: one invocation per result element.

Each kernel walks the result's multi-index (row-major over its extents, from params) and reads the
operand element it copies, or writes the fill.  Elements move as they are (f32, i32 or u32 on the
device), so every element type is served; nothing is rounded.

- pad: along each axis result coordinate c reads operand coordinate s = c - begin (negative begins
  and ends crop, as the numpy kernel's pad-then-crop gives); an s outside [0, n) is the fill
  (constant), the nearest end (edge), its mirror image without repeating the end (reflect, period
  2 (n - 1), an extent of 1 as edge) or s mod n (wrap).  The constant fill is the `fill` operand's
  first element when given and not empty, else `value` (its f32 bits and its truncated integer
  travel in the params; halves are rounded to the result type in the shader).
  Params: count, use_fill, value's f32 bits, value as an integer, then per axis the result
  extent, the operand extent and the begin pad (two's complement).
- tile: result coordinate c reads c mod n.  Params: count, the result extents, the operand extents.
- trilu: over the last two axes (r, c), upper keeps c - r >= k, lower keeps c - r <= k, the rest is
  zero; k is the optional second operand's first element, else `offset`.
  Params: count, rows, columns, offset (two's complement).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.backends.wgsl_kernels.common import FLAT, device_type, kernel, narrow
from loam.core.errors import UnsupportedError

PAD_MODES = ("constant", "edge", "reflect", "wrap")

POS_MOD = """
fn pos_mod(a: i32, m: i32) -> i32 {
  if (a >= 0) { return a % m; }
  return m - 1 - ((-a - 1) % m);
}
"""
"""a mod m in [0, m) for m > 0 (an i32 `%` of a negative number is not portable: GLSL leaves it open)."""


def _walk(rank: int, extents_at: int) -> str:
    """WGSL lines splitting `i` into coordinates c0..c{rank-1} over the extents at params[extents_at..]."""
    lines = "  var rem = i;\n"
    for k in range(rank - 1, -1, -1):
        lines += f"  let c{k} = rem % params[{extents_at + k}];\n  rem = rem / params[{extents_at + k}];\n"
    return lines


# -- pad -------------------------------------------------------------------------------------------


def source_pad(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The pad shader: operands x[, fill]; `pads` and `value` come through the params."""
    mode = params.get("mode")
    (elem, rank), out_elem = operands[0], results[0][0]
    if mode not in PAD_MODES:
        raise UnsupportedError(f"WGSL pad: mode {mode!r} is not supported")
    if len(operands) > 2:
        raise UnsupportedError(f"WGSL pad: {len(operands)} operands (x and an optional fill)")
    dt = device_type(elem)
    if len(operands) == 2 and device_type(operands[1][0]) != dt:
        raise UnsupportedError(f"WGSL pad: a fill of element type {operands[1][0]} for data of type {elem}")
    body = FLAT + "  if (i >= params[0]) { return; }\n" + "  var rem = i;\n  var src = 0u;\n  var step = 1u;\n"
    body += "  var inside = true;\n"
    for k in range(rank - 1, -1, -1):
        out_e, in_e, begin = 4 + 3 * k, 5 + 3 * k, 6 + 3 * k
        body += (
            f"  {{\n    let c = i32(rem % params[{out_e}]);\n    rem = rem / params[{out_e}];\n"
            f"    let n = i32(params[{in_e}]);\n    var s = c - param_i({begin});\n"
        )
        if mode == "constant":
            body += "    if (s < 0 || s >= n) { inside = false; s = 0; }\n"
        elif mode == "edge":
            body += "    s = clamp(s, 0, max(n - 1, 0));\n"
        elif mode == "wrap":
            body += "    if (n > 0) { s = pos_mod(s, n); } else { s = 0; }\n"
        else:  # reflect
            body += (
                "    if (n <= 1) { s = 0; } else {\n"
                "      let period = 2 * (n - 1);\n"
                "      s = pos_mod(s, period);\n"
                "      if (s >= n) { s = period - s; }\n"
                "    }\n"
            )
        body += "    src = src + u32(s) * step;\n    step = step * u32(n);\n  }\n"
    if mode == "constant":
        if dt == "f32":
            value = narrow(out_elem, "bitcast<f32>(params[2])")
        elif dt == "i32":
            value = "param_i(3)"
        else:
            value = "select(0u, 1u, bitcast<f32>(params[2]) != 0.0)"
        if len(operands) == 2:
            value = f"select({value}, in1[0], params[1] != 0u)"
        body += f"  if (!inside) {{ out0[i] = {value}; return; }}\n"
    body += "  out0[i] = in0[src];\n"
    return kernel([out_elem], [e for e, _ in operands], body, POS_MOD)


def _p_pad(
    shapes: tuple[tuple[int, ...], ...], pads: tuple[int, ...], mode: str, value: float = 0.0
) -> tuple[tuple[int, ...], int]:
    """The pad kernel's params (count, use_fill, value's f32 bits, value as an integer, then per axis
    the result extent, operand extent and begin pad) and its workgroups (64 elements each)."""
    x, y = tuple(shapes[0]), tuple(shapes[-1])
    rank = len(x)
    count = 1
    for e in y:
        count *= e
    use_fill = 0
    if len(shapes) == 3:
        fill = 1
        for e in shapes[1]:
            fill *= e
        use_fill = 1 if fill > 0 else 0
    bits = int(np.array(value, dtype=np.float32).view(np.uint32))
    as_int = int(value) if np.isfinite(value) else 0
    block = [count, use_fill, bits, as_int & 0xFFFFFFFF]
    for k in range(rank):
        block += [y[k], x[k], int(pads[k]) & 0xFFFFFFFF]
    return tuple(block), (count + 63) // 64


# -- tile ------------------------------------------------------------------------------------------


def source_tile(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The tile shader (`repeats` is read from the result's extents at run time)."""
    elem, rank = operands[0]
    body = FLAT + "  if (i >= params[0]) { return; }\n" + _walk(rank, 1)
    terms = []
    step = "1u"
    for k in range(rank - 1, -1, -1):
        terms.append(f"(c{k} % params[{1 + rank + k}]) * s{k}")
        body += f"  let s{k} = {step};\n"
        step = f"s{k} * params[{1 + rank + k}]"
    body += f"  out0[i] = in0[{' + '.join(terms) or '0u'}];\n"
    return kernel([results[0][0]], [elem], body)


def _p_tile(shapes: tuple[tuple[int, ...], ...], repeats: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """The tile kernel's params (count, result extents, operand extents) and workgroups."""
    x, y = tuple(shapes[0]), tuple(shapes[-1])
    count = 1
    for e in y:
        count *= e
    if any(e == 0 for e in x):
        count = 0
    return (count, *y, *x), (count + 63) // 64


# -- trilu -----------------------------------------------------------------------------------------


def source_trilu(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The trilu shader: operands x[, k]; `upper` fixed at build time, the offset in the params."""
    upper = params.get("upper")
    elem, rank = operands[0]
    if upper is None:
        raise UnsupportedError("WGSL trilu: upper known only at run time is not supported")
    if rank < 2:
        raise UnsupportedError(f"WGSL trilu: an operand of rank {rank} (2 or more is needed)")
    if len(operands) == 2 and device_type(operands[1][0]) != "i32":
        raise UnsupportedError(f"WGSL trilu: k of element type {operands[1][0]} (an integer type is needed)")
    zero = {"f32": "0.0", "i32": "0", "u32": "0u"}[device_type(elem)]
    body = FLAT + "  if (i >= params[0]) { return; }\n"
    body += "  let c = i32(i % params[2]);\n  let r = i32((i / params[2]) % params[1]);\n"
    body += f"  let k = {'in1[0]' if len(operands) == 2 else 'param_i(3)'};\n"
    keep = "c - r >= k" if upper else "c - r <= k"
    body += f"  out0[i] = select({zero}, in0[i], {keep});\n"
    return kernel([results[0][0]], [e for e, _ in operands], body)


def _p_trilu(shapes: tuple[tuple[int, ...], ...], upper: int, offset: int = 0) -> tuple[tuple[int, ...], int]:
    """The trilu kernel's params (count, rows, columns, offset) and its workgroups."""
    x = tuple(shapes[0])
    count = 1
    for e in x:
        count *= e
    return (count, max(x[-2], 1), max(x[-1], 1), int(offset) & 0xFFFFFFFF), (count + 63) // 64


PIECES: dict[str, Callable[..., object]] = {"_p_pad": _p_pad, "_p_tile": _p_tile, "_p_trilu": _p_trilu}
SOURCES: dict[str, object] = {"pad": source_pad, "tile": source_tile, "trilu": source_trilu}
