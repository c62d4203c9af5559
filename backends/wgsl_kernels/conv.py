"""`kernel.conv` and `kernel.pool` as WGSL: one invocation per result element, looping over its taps.

Both read the geometry (extents, strides, dilations, pads, kernel extents) from params, so only the
number of spatial axes (the rank) and the element types, and pool's mode, count_include_pad, p
and nan_rule are baked into the shader.  Compute is f32; halves are rounded back once at the end.

conv params: result elements, C, M, C/group, M/group, then per spatial axis (in this order, each
a block of one entry per axis): input extents, kernel extents, output extents, strides,
dilations, begin pads.  Taps in the zero padding are skipped; the sum runs over the input
channels of the group, then the taps row-major (the order of numpy's im2col matmul, which BLAS
may block differently: results agree to f32 rounding).

pool params: result elements, then per spatial axis: input extents, cropped extents (a negative
pad crops), begin pads (positive part), crop offset (negative begin pad's size), padded extents
(cropped + both positive pads: the taps count_include_pad counts; ceil-mode's extra taps past
them never count), kernel extents, strides, dilations, output extents.
max reads only taps inside the input; a window with none gives the element type's lowest finite
value (f32 -3.4028235e38, f16 -65504, bf16 -3.3895314e38, iN its minimum; an i64 gets the i32
minimum, which differs from numpy's -2^63).  NaN taps follow `nan_rule` exactly as the numpy kernel:
`ignore`, the first largest non-NaN tap (NaN when every tap inside is NaN); `first`, the first
tap inside replaced only by a strictly greater number (a NaN first tap wins, a later NaN never).
avg divides the sum of the taps inside by their count (at least 1), or with count_include_pad by
the taps inside the padded extents; lp is (sum |x|^p)^(1/p) over the taps inside.
MaxPool's second output (indices) is the flat index in x of the tap max kept (row-major over N, C
and the spatial axes, or column-major over the spatial axes with storage_order 1), coordinate -1 on
every spatial axis for a window with no tap inside, as the numpy kernel and onnxruntime give it;
the i64 result travels as i32.
"""

from __future__ import annotations

from collections.abc import Callable

from loam.backends.wgsl_kernels.common import FLAT, device_type, kernel, narrow
from loam.core.errors import UnsupportedError
from loam.runtime.errors import ShapeError
from loam.runtime.kernels.resize import antialias_taps, cubic_taps, nearest_taps, resize_coordinates


def _coords(nsp: int, out_at: int, head: str) -> str:
    """WGSL lines splitting the flat result index `i` into spatial coordinates o0.. (extents at
    params[out_at + k]) and what is left, `head`."""
    lines = ["  var r = i;"]
    for k in range(nsp - 1, -1, -1):
        lines.append(f"  let o{k} = r % params[{out_at + k}];")
        lines.append(f"  r = r / params[{out_at + k}];")
    lines.append(f"  let {head} = r;")
    return "\n".join(lines) + "\n"


def _f32_literal(value: float) -> str:
    """A WGSL f32 literal of `value` (finite)."""
    text = repr(float(value))
    return text if ("." in text or "e" in text) else text + ".0"


# -- conv ------------------------------------------------------------------------------------------


def _conv_start(name: str, operands: list[tuple[str, int]]) -> tuple[int, tuple[int, ...], str]:
    """What conv and conv_transpose share: the spatial rank (refusing non-floats and inputs without a
    spatial axis), where their params put the spatial, kernel and result extents, strides, dilations
    and pads, and the body's start (the invocation's result coordinates, `nm` = n * M + m)."""
    rank = operands[0][1]
    for e, _ in operands:
        if device_type(e) != "f32":
            raise UnsupportedError(f"WGSL {name}: element type {e} is not a float")
    nsp = rank - 2
    if nsp < 1:
        raise UnsupportedError(f"WGSL {name}: a rank-{rank} input has no spatial axis")
    offsets = tuple(5 + k * nsp for k in range(6))
    return nsp, offsets, FLAT + "  if (i >= params[0]) { return; }\n" + _coords(nsp, offsets[2], "nm")


def source_conv(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The conv shader: operands x (N, C, *S), w (M, C/group, *K)[, b (M)]."""
    out_elem = results[0][0]
    nsp, (s_at, k_at, _, st_at, d_at, p_at), body = _conv_start("conv", operands)
    body += (
        "  let m = nm % params[2];\n"
        "  let nb = nm / params[2];\n"
        "  let cg = params[3];\n"
        "  let g = m / params[4];\n"
        "  var acc = 0.0;\n"
        "  for (var c = 0u; c < cg; c = c + 1u) {\n"
        "    let xc = nb * params[1] + g * cg + c;\n"
        "    let wc = m * cg + c;\n"
    )
    indent = "    "
    xo, wo = "xc", "wc"
    for k in range(nsp):
        body += (
            f"{indent}for (var k{k} = 0u; k{k} < params[{k_at + k}]; k{k} = k{k} + 1u) {{\n"
            f"{indent}  let q{k} = i32(o{k} * params[{st_at + k}] + k{k} * params[{d_at + k}])"
            f" - param_i({p_at + k}u);\n"
            f"{indent}  if (q{k} < 0 || q{k} >= i32(params[{s_at + k}])) {{ continue; }}\n"
            f"{indent}  let x{k} = {xo} * params[{s_at + k}] + u32(q{k});\n"
            f"{indent}  let w{k} = {wo} * params[{k_at + k}] + k{k};\n"
        )
        xo, wo = f"x{k}", f"w{k}"
        indent += "  "
    body += f"{indent}acc = acc + in0[{xo}] * in1[{wo}];\n"
    for _ in range(nsp):
        indent = indent[:-2]
        body += f"{indent}}}\n"
    body += "  }\n"
    if len(operands) > 2:
        body += "  acc = acc + in2[m];\n"
    body += f"  out0[i] = {narrow(out_elem, 'acc')};\n"
    return kernel([out_elem], [e for e, _ in operands], body)


def _p_conv(
    shapes: tuple[tuple[int, ...], ...], strides: tuple, pads: tuple, dilations: tuple, group: int
) -> tuple[tuple[int, ...], int]:
    """The conv kernel's params (result elements, C, M, C/group, M/group; input, kernel and output
    extents, strides, dilations, begin pads per spatial axis) and its workgroups (64 results each)."""
    x, w, out = tuple(shapes[0]), tuple(shapes[1]), tuple(shapes[-1])
    nsp = len(x) - 2
    total = 1
    for e in out:
        total *= e
    block = [total, x[1], w[0], x[1] // group, max(w[0] // group, 1)]
    block += list(x[2:]) + list(w[2:]) + list(out[2:]) + list(strides) + list(dilations) + list(pads[:nsp])
    return tuple(int(v) for v in block), (total + 63) // 64


# -- pool ------------------------------------------------------------------------------------------

LOWEST = {
    "f32": "-3.4028234663852886e38",
    "f16": "-65504.0",
    "bf16": "-3.3895314e38",
    "i8": "-128",
    "ui8": "0",
    "i16": "-32768",
    "ui16": "0",
    "i32": "i32(-2147483647 - 1)",
    "i64": "i32(-2147483647 - 1)",
}
"""The lowest finite value of each element type, max pooling's value of a window with no tap inside."""


def source_pool(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The pool shader: max, avg (count_include_pad either way) or lp over the axes after N and C."""
    elem, rank = operands[0]
    out_elem = results[0][0]
    mode = params.get("mode")
    indices = bool(params.get("indices")) or len(results) > 1
    if indices and (mode != "max" or len(results) != 2 or device_type(results[1][0]) != "i32"):
        raise UnsupportedError("WGSL pool: an indices output comes with max pooling only, as an integer tensor")
    storage_order = params.get("storage_order", 0)
    if indices and storage_order not in (0, 1):
        raise UnsupportedError("WGSL pool: storage_order known only at run time is not supported")
    if mode not in ("max", "avg", "lp"):
        raise UnsupportedError(f"WGSL pool: mode {mode!r} is not supported")
    dt = device_type(elem)
    if dt == "u32" or (dt == "i32" and mode != "max"):
        raise UnsupportedError(f"WGSL pool: mode {mode} of element type {elem} is not supported")
    nan_rule = params.get("nan_rule") or "ignore"
    if nan_rule not in ("ignore", "first"):
        raise UnsupportedError(f"WGSL pool: nan_rule {nan_rule!r} is not supported")
    include = params.get("count_include_pad")
    if mode == "avg" and include is None and "count_include_pad" in params:
        raise UnsupportedError("WGSL pool: count_include_pad known only at run time is not supported")
    p = params.get("p", 2.0)
    if mode == "lp" and p is None:
        raise UnsupportedError("WGSL pool: p known only at run time is not supported")
    power = float(p) if mode == "lp" else 2.0  # type: ignore[arg-type]  # a number: None is refused above
    nsp = rank - 2
    if nsp < 1:
        raise UnsupportedError(f"WGSL pool: a rank-{rank} input has no spatial axis")
    S, SC, B, OFF, PT, K, ST, D, O = (1 + j * nsp for j in range(9))  # the param blocks
    body = FLAT + "  if (i >= params[0]) { return; }\n" + _coords(nsp, O, "nc")
    body += "  var plane = 1u;\n"
    for k in range(nsp):
        body += f"  plane = plane * params[{S + k}];\n"
    body += "  let xbase = nc * plane;\n"
    if mode == "max":
        if dt == "f32":
            body += "  var best = 0.0;\n  var first = 0.0;\n"
        else:
            body += "  var best: i32 = 0;\n  var first: i32 = 0;\n"
        body += "  var found = false;\n  var seen = false;\n"
        if indices:  # each axis' stride in the index: row-major, or column-major with storage_order 1
            order = range(nsp) if storage_order else range(nsp - 1, -1, -1)
            stride = "1"
            for k in order:
                body += f"  let is{k} = i32({stride});\n"
                stride = f"{stride} * params[{S + k}]"
            # onnxruntime's index of a window with no tap inside reads coordinate -1 on every axis
            body += f"  let none_at = i32(xbase) - ({' + '.join(f'is{k}' for k in range(nsp))});\n"
            body += "  var best_at = none_at;\n  var first_at = none_at;\n"
    else:
        body += "  var acc = 0.0;\n  var inside_n = 0u;\n  var counted_n = 0u;\n"
    indent = "  "
    offset, inside, counted = "0u", "true", "true"
    for k in range(nsp):
        body += (
            f"{indent}for (var k{k} = 0u; k{k} < params[{K + k}]; k{k} = k{k} + 1u) {{\n"
            f"{indent}  let q{k} = i32(o{k} * params[{ST + k}] + k{k} * params[{D + k}]);\n"
            f"{indent}  let c{k} = q{k} - i32(params[{B + k}]);\n"
            f"{indent}  let ins{k} = {inside} && c{k} >= 0 && c{k} < i32(params[{SC + k}]);\n"
            f"{indent}  let ct{k} = {counted} && q{k} < i32(params[{PT + k}]);\n"
            f"{indent}  let x{k} = {offset} * params[{S + k}] + u32(max(c{k}, 0)) + params[{OFF + k}];\n"
        )
        offset, inside, counted = f"x{k}", f"ins{k}", f"ct{k}"
        indent += "  "
    body += f"{indent}if ({inside}) {{\n{indent}  let v = in0[xbase + {offset}];\n"
    if mode == "max":
        # With indices, the tap's index in x (its coordinates before cropping) goes where its value goes.
        keep, keep_first = "", ""
        if indices:
            coords = " + ".join(f"(c{k} + i32(params[{OFF + k}])) * is{k}" for k in range(nsp))
            body += f"{indent}  let at = i32(xbase) + {coords};\n"
            keep, keep_first = " best_at = at;", " first_at = at;"
        if dt != "f32":
            body += f"{indent}  if (!seen || v > best) {{ best = v;{keep} }}\n{indent}  seen = true;\n"
        elif nan_rule == "ignore":
            body += (
                f"{indent}  if (!seen) {{ first = v; seen = true;{keep_first} }}\n"
                f"{indent}  if (!is_nan(v) && (!found || v > best)) {{ best = v; found = true;{keep} }}\n"
            )
        else:  # first: onnxruntime's scan
            body += (
                f"{indent}  if (!seen) {{ best = v; seen = true;{keep} }}\n"
                f"{indent}  else if (!is_nan(v) && !is_nan(best) && v > best) {{ best = v;{keep} }}\n"
            )
        body += f"{indent}}}\n"
    else:
        if mode == "avg":
            body += f"{indent}  acc = acc + v;\n"
        elif power == 1.0:
            body += f"{indent}  acc = acc + abs(v);\n"
        elif power == 2.0:
            body += f"{indent}  acc = acc + v * v;\n"
        else:
            body += f"{indent}  acc = acc + select(pow(abs(v), {_f32_literal(power)}), 0.0, v == 0.0);\n"
        body += f"{indent}  inside_n = inside_n + 1u;\n{indent}}}\n"
        body += f"{indent}if ({counted}) {{ counted_n = counted_n + 1u; }}\n"
    for _ in range(nsp):
        indent = indent[:-2]
        body += f"{indent}}}\n"
    if mode == "max":
        lowest = LOWEST[elem]
        if dt == "f32" and nan_rule == "ignore":
            result = f"select(select({lowest}, first, seen), best, found)"
            chosen = "select(first_at, best_at, found)"
        else:
            result = f"select({lowest}, best, seen)"
            chosen = "best_at"
        body += f"  out0[i] = {narrow(out_elem, result) if dt == 'f32' else result};\n"
        if indices:
            body += f"  out1[i] = {chosen};\n"
    elif mode == "avg":
        count = "counted_n" if include else "max(inside_n, 1u)"
        body += f"  out0[i] = {narrow(out_elem, f'acc / f32({count})')};\n"
    else:
        root = "acc" if power == 1.0 else "sqrt(acc)" if power == 2.0 else f"pow(acc, {_f32_literal(1.0 / power)})"
        body += f"  out0[i] = {narrow(out_elem, root)};\n"
    return kernel([r for r, _ in results], [elem], body)


def _p_pool(
    shapes: tuple[tuple[int, ...], ...],
    mode: str,
    kernel_shape: tuple,
    strides: tuple,
    pads: tuple,
    dilations: tuple,
    out_shape: tuple,
    count_include_pad: int = 0,
    p: float = 2.0,
    storage_order: int = 0,
    indices: int = 0,
    nan_rule: str = "ignore",
) -> tuple[tuple[int, ...], int]:
    """The pool kernel's params (result elements; per spatial axis input extents, cropped extents,
    begin pads, crop offsets, padded extents, kernel extents, strides, dilations, output extents)
    and its workgroups (64 results each).  MaxPool's indices travel as i32: an input with more
    elements than i32 counts is refused (never a wrapped index)."""
    x = tuple(shapes[0])
    nsp = len(x) - 2
    spatial = x[2:]
    if indices:
        elements = 1
        for e in x:
            elements *= e
        if elements >= 2**31:
            raise ShapeError(
                f"MaxPool's input holds {elements} elements; its indices travel as i32 on the device "
                "(at most 2^31 - 1 elements)"
            )
    begins = [max(0, pads[k]) for k in range(nsp)]
    ends = [max(0, pads[k + nsp]) for k in range(nsp)]
    offs = [max(0, -pads[k]) for k in range(nsp)]
    cropped = [spatial[k] - offs[k] - max(0, -pads[k + nsp]) for k in range(nsp)]
    padded = [cropped[k] + begins[k] + ends[k] for k in range(nsp)]
    total = x[0] * x[1]
    for e in out_shape:
        total *= e
    block = [total, *spatial, *cropped, *begins, *offs, *padded]
    block += list(kernel_shape) + list(strides) + list(dilations) + list(out_shape)
    return tuple(int(v) for v in block), (total + 63) // 64


# -- conv_transpose --------------------------------------------------------------------------------


def source_conv_transpose(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The conv_transpose shader: operands x (N, C, *S), w (C, M/group, *K)[, b (M)], one invocation
    per result element gathering what the scatter puts there: result coordinate o (full coordinate
    o + begin pad) receives x at s = (o + pad - k * dilation) / stride for each tap k where that
    divides exactly and s is inside.  The sum runs over the taps row-major, each tap's products over
    the group's input channels summed first (the numpy kernel's matmul, then one add per tap), the
    bias last.  The params are conv's (`_p_conv`'s layout, M = w's extent 1 times group)."""
    out_elem = results[0][0]
    nsp, (s_at, k_at, _, st_at, d_at, p_at), body = _conv_start("conv_transpose", operands)
    body += (
        "  let m = nm % params[2];\n"
        "  let nb = nm / params[2];\n"
        "  let cg = params[3];\n"
        "  let mg = params[4];\n"
        "  let g = m / mg;\n"
        "  var acc = 0.0;\n"
    )
    indent = "  "
    for k in range(nsp):
        body += (
            f"{indent}for (var k{k} = 0u; k{k} < params[{k_at + k}]; k{k} = k{k} + 1u) {{\n"
            f"{indent}  let t{k} = i32(o{k}) + param_i({p_at + k}u) - i32(k{k} * params[{d_at + k}]);\n"
            f"{indent}  if (t{k} < 0 || u32(t{k}) % params[{st_at + k}] != 0u) {{ continue; }}\n"
            f"{indent}  let s{k} = u32(t{k}) / params[{st_at + k}];\n"
            f"{indent}  if (s{k} >= params[{s_at + k}]) {{ continue; }}\n"
        )
        indent += "  "
    xo, wo = "(nb * params[1] + g * cg + c)", "((g * cg + c) * mg + m % mg)"
    for k in range(nsp):
        xo = f"({xo} * params[{s_at + k}] + s{k})"
        wo = f"({wo} * params[{k_at + k}] + k{k})"
    body += (
        f"{indent}var part = 0.0;\n"
        f"{indent}for (var c = 0u; c < cg; c = c + 1u) {{\n"
        f"{indent}  part = part + in0[{xo}] * in1[{wo}];\n"
        f"{indent}}}\n"
        f"{indent}acc = acc + part;\n"
    )
    for _ in range(nsp):
        indent = indent[:-2]
        body += f"{indent}}}\n"
    if len(operands) > 2:
        body += "  acc = acc + in2[m];\n"
    body += f"  out0[i] = {narrow(out_elem, 'acc')};\n"
    return kernel([out_elem], [e for e, _ in operands], body)


def _p_conv_transpose(
    shapes: tuple[tuple[int, ...], ...],
    strides: tuple,
    pads: tuple,
    dilations: tuple,
    group: int,
    output_padding: tuple,
) -> tuple[tuple[int, ...], int]:
    """The conv_transpose kernel's params (result elements, C, M, C/group, M/group; input, kernel
    and output extents, strides, dilations, begin pads per spatial axis) and its workgroups."""
    x, w, out = tuple(shapes[0]), tuple(shapes[1]), tuple(shapes[-1])
    nsp = len(x) - 2
    total = 1
    for e in out:
        total *= e
    block = [total, x[1], out[1], max(x[1] // group, 1), max(w[1], 1)]
    block += list(x[2:]) + list(w[2:]) + list(out[2:]) + list(strides) + list(dilations) + list(pads[:nsp])
    return tuple(int(v) & 0xFFFFFFFF for v in block), (total + 63) // 64


# -- resize ----------------------------------------------------------------------------------------


def source_resize(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The resize shader: one invocation per result element, reading its taps through the per-axis
    tables `_p_resize` computes on the host (the numpy kernel's f32 coordinate mapping, so every
    mode, coordinate mode and nearest mode maps exactly as it does).

    The numpy kernel resizes one axis at a time, axis 0 first; the shader nests the axes' tap loops
    the same way (axis 0 innermost), so each axis's weighted sum (`tap0 * w0 + tap1 * w1 ...`,
    linear's `lo * (1 - t) + hi * t`) rounds as numpy's does.  An axis the node leaves alone takes
    its one tap without arithmetic; nearest never computes (any element type), linear and cubic
    need a float.  An element mapped outside by tf_crop_and_resize takes extrapolation_value."""
    elem, rank = operands[0]
    out_elem = results[0][0]
    mode = params.get("mode")
    if mode not in ("nearest", "linear", "cubic"):
        raise UnsupportedError(f"WGSL resize: mode {mode!r} (known only at run time?) is not supported")
    if len(operands) != 1:
        raise UnsupportedError("WGSL resize: scales, sizes or roi as run-time operands are not supported")
    dt = device_type(elem)
    if mode != "nearest" and dt != "f32":
        raise UnsupportedError(f"WGSL resize: {mode} interpolation of element type {elem} is not supported")
    if rank < 1:
        raise UnsupportedError("WGSL resize: a rank-0 input is not supported")
    R = rank
    OUT, STR, TAPS, MUL, TAB, EXT = 1, 1 + R, 1 + 2 * R, 1 + 3 * R, 1 + 4 * R, 1 + 5 * R
    body = FLAT + "  if (i >= params[0]) { return; }\n  var r = i;\n"
    for d in range(R - 1, -1, -1):
        body += f"  let o{d} = r % params[{OUT + d}];\n  r = r / params[{OUT + d}];\n"
    body += "  var outside = false;\n"
    for d in range(R):
        body += (
            f"  let n{d} = params[{TAPS + d}];\n"
            f"  let row{d} = params[{TAB + d}] + o{d} * (1u + 2u * n{d});\n"
            f"  outside = outside || params[row{d}] != 0u;\n"
        )
    indent = "  "
    for d in range(R - 1, -1, -1):
        above = f"off{d + 1} + " if d < R - 1 else ""
        body += (
            f"{indent}var a{d} = {dt}(0);\n"
            f"{indent}for (var j{d} = 0u; j{d} < n{d}; j{d} = j{d} + 1u) {{\n"
            f"{indent}  let off{d} = {above}params[row{d} + 1u + j{d}] * params[{STR + d}];\n"
        )
        indent += "  "
    for d in range(R):
        inner = f"in0[off{d}]" if d == 0 else f"a{d - 1}"
        if mode == "nearest":
            body += f"{indent}a{d} = {inner};\n"
        else:
            body += (
                f"{indent}if (params[{MUL + d}] == 0u) {{ a{d} = {inner}; }} else {{\n"
                f"{indent}  let w = bitcast<f32>(params[row{d} + 1u + n{d} + j{d}]);\n"
                f"{indent}  a{d} = select(a{d} + {inner} * w, {inner} * w, j{d} == 0u);\n"
                f"{indent}}}\n"
            )
        indent = indent[:-2]
        body += f"{indent}}}\n"
    fill = {"f32": f"bitcast<f32>(params[{EXT}])", "i32": f"param_i({EXT + 1}u)", "u32": f"params[{EXT + 2}]"}[dt]
    result = f"select(a{R - 1}, {fill}, outside)"
    body += f"  out0[i] = {narrow(out_elem, result) if dt == 'f32' else result};\n"
    return kernel([out_elem], [elem], body)


def _p_resize(
    shapes: tuple[tuple[int, ...], ...],
    mode: str,
    coordinate_mode: str,
    nearest_mode: str,
    scales: tuple,
    sizes: tuple,
    roi: tuple = (),
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    antialias: int = 0,
) -> tuple[tuple[int, ...], int]:
    """The resize kernel's params and its workgroups (64 results each): result elements; per axis
    the result extents, input strides, taps per result coordinate, whether the taps are weighted
    (0 where the axis is left alone or mode is nearest), and where the axis's table starts; the
    extrapolation value (f32 bits, i32, bool); then the tables: per axis and result coordinate,
    [outside, tap indices..., tap weights (f32 bits)...], computed as the numpy kernel does."""
    import numpy as np

    x = tuple(shapes[0])
    R = len(x)
    f32 = np.float32
    strides = [1] * R
    for k in range(R - 2, -1, -1):
        strides[k] = strides[k + 1] * x[k + 1]
    taps, mul, tables = [], [], []
    for axis in range(R):
        n_in, n_out, scale = x[axis], int(sizes[axis]), f32(scales[axis])
        cropped = coordinate_mode == "tf_crop_and_resize" and (roi[axis], roi[axis + R]) != (0, 1)
        if n_in == n_out and scale == 1 and not cropped:
            taps.append(1)
            mul.append(0)
            tables.append(np.stack([np.zeros(n_out, np.int64), np.arange(n_out), np.zeros(n_out, np.int64)], 1))
            continue
        c, off = resize_coordinates(coordinate_mode, n_in, n_out, scale, (roi[axis], roi[axis + R]) if roi else (0, 1))
        off = np.zeros(n_out, dtype=bool) if off is None else off
        last = n_in - 1
        if mode == "nearest":
            index = [nearest_taps(c, nearest_mode, scale, last)]
            weights = [np.zeros(n_out, f32)]
        elif antialias and scale < 1:
            index, weights = antialias_taps(c, mode, float(scale), float(cubic_coeff_a), exclude_outside, last)
            weights = [wj.astype(f32) for wj in weights]
        elif mode == "linear":
            c = np.clip(c, 0, last)
            lo = np.floor(c).astype(np.int64)
            hi = np.minimum(lo + 1, last)
            t = (c - lo).astype(f32)
            index, weights = [lo, hi], [1 - t, t]
        else:  # cubic
            index, weights = cubic_taps(c, float(cubic_coeff_a), exclude_outside, last)
            weights = [wj.astype(f32) for wj in weights]
        bits = [np.asarray(w, dtype=f32).view(np.uint32).astype(np.int64) for w in weights]
        taps.append(len(index))
        mul.append(0 if mode == "nearest" else 1)
        tables.append(np.stack([off.astype(np.int64), *index, *bits], 1))
    total = 1
    for e in sizes:
        total *= int(e)
    fill = float(extrapolation_value)
    head = [total, *[int(e) for e in sizes], *strides, *taps, *mul]
    at = len(head) + R + 3
    starts = []
    for table in tables:
        starts.append(at)
        at += table.size
    fbits = int(np.asarray(fill, dtype=f32).view(np.uint32))
    head += [*starts, fbits, int(fill) if np.isfinite(fill) else 0, 1 if fill else 0]
    flat = [int(v) & 0xFFFFFFFF for v in head]
    for table in tables:
        flat += [int(v) & 0xFFFFFFFF for v in table.reshape(-1)]
    return tuple(flat), (total + 63) // 64


PIECES: dict[str, Callable[..., object]] = {
    "_p_conv": _p_conv,
    "_p_pool": _p_pool,
    "_p_conv_transpose": _p_conv_transpose,
    "_p_resize": _p_resize,
    "resize_coordinates": resize_coordinates,
    "nearest_taps": nearest_taps,
    "cubic_taps": cubic_taps,
    "antialias_taps": antialias_taps,
}
SOURCES: dict[str, object] = {
    "conv": source_conv,
    "pool": source_pool,
    "conv_transpose": source_conv_transpose,
    "resize": source_resize,
}
