"""`kernel.normalize` (LayerNormalization, InstanceNormalization) as WGSL: one workgroup per row.

A row is the block over `axes` at one position of the other axes (see `reduce.py`).  Three
passes over it in f32: the mean (a tree sum divided by the count), the variance of the centred
values, then y = (x - mean) * (1 / sqrt(var + epsilon)), rounded to the input's half type (as ONNX's
function body casts back before the affine part), times scale, plus bias, rounded again.  The
moments are f32 whatever `stash` says (a float64 stash is computed in f32 here).

Scale and bias are read through strides over x's axes (0 where they broadcast): numpy-style
broadcasting over the trailing axes with `channel_axis` -1, else 1-D along `channel_axis`.
With `stats` the kernel also writes the mean and 1 / sqrt(var + epsilon) (reduced axes kept).

Params: the row block (`reduce.py`), epsilon's f32 bits, x's extents, x's strides, then scale's
and bias's strides over x's axes (for each present).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.backends.wgsl_kernels.common import FLAT, device_type, kernel, narrow
from loam.backends.wgsl_kernels.reduce import (
    ROW_HELPERS,
    ROW_START,
    accumulate,
    check_axes,
    row_block,
    row_functions,
    tree,
)
from loam.core.errors import UnsupportedError


def source_normalize(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The normalize shader: `operands` x[, scale[, bias]], `results` y[, mean, inv_std]."""
    elem, rank = operands[0]
    out_elem = results[0][0]
    if device_type(elem) != "f32":
        raise UnsupportedError(f"WGSL normalize: element type {elem} is not a float")
    axes = check_axes("normalize", params.get("axes"), rank)
    stats = params.get("stats")
    if stats is None:
        raise UnsupportedError("WGSL normalize: stats known only at run time is not supported")
    want = 3 if stats else 1
    if len(results) != want:
        raise UnsupportedError(f"WGSL normalize: stats={stats} wants {want} results, not {len(results)}")
    for e, _ in results[1:]:
        if e not in ("f32", "f16", "bf16"):
            raise UnsupportedError(f"WGSL normalize: stats of element type {e} (WGSL computes the moments in f32)")
    if len(operands) > 3:
        raise UnsupportedError(f"WGSL normalize: {len(operands)} operands (x, scale, bias at most)")
    channel_axis = params.get("channel_axis")
    if channel_axis is None or not -1 <= int(channel_axis) < rank:  # type: ignore[call-overload]  # an int parameter
        raise UnsupportedError(f"WGSL normalize: channel_axis {channel_axis} is not supported")
    eps = 2 + 2 * rank
    xe, xs = eps + 1, eps + 1 + rank
    helpers = ROW_HELPERS + row_functions(rank, axes) + "var<workgroup> sh: array<f32, 64>;\n"
    for p in range(1, len(operands)):
        ps = xs + rank * p
        terms = [f"((o / params[{xs + k}]) % params[{xe + k}]) * params[{ps + k}]" for k in range(rank)]
        helpers += f"fn at{p}(o: u32) -> u32 {{\n  return {' + '.join(terms) or '0u'};\n}}\n"
    body = ROW_START
    body += "  var a = 0.0;\n" + accumulate("a", "add_f", "x") + tree("a", "add_f")
    body += "  let mean = a / f32(params[1]);\n"
    body += "  var v = 0.0;\n" + accumulate("v", "add_f", "(x - mean) * (x - mean)") + tree("v", "add_f")
    body += f"  let inv = 1.0 / sqrt(v / f32(params[1]) + bitcast<f32>(params[{eps}]));\n"
    body += (
        "  for (var j = lid; j < n; j = j + 64u) {\n"
        "    let o = base + row_at(j);\n"
        f"    var y = {narrow(elem, '(in0[o] - mean) * inv')};\n"
    )
    if len(operands) > 1:
        body += "    y = y * in1[at1(o)];\n"
    if len(operands) > 2:
        body += "    y = y + in2[at2(o)];\n"
    body += f"    out0[o] = {narrow(out_elem, 'y')};\n  }}\n"
    if stats:
        body += (
            "  if (live && lid == 0u) {\n"
            f"    out1[row] = {narrow(results[1][0], 'mean')};\n"
            f"    out2[row] = {narrow(results[2][0], 'inv')};\n"
            "  }\n"
        )
    return kernel([e for e, _ in results], [e for e, _ in operands], body, helpers)


def _p_normalize(
    shapes: tuple[tuple[int, ...], ...],
    axes: tuple[int, ...],
    epsilon: float,
    channel_axis: int,
    stash: str,
    stats: int,
) -> tuple[tuple[int, ...], int]:
    """The normalize kernel's params (the row block: rows, row length, kept extents and strides,
    reduced extents and strides; epsilon's f32 bits; x's extents and strides; scale's and bias's
    strides over x's axes) and its workgroups (one per row)."""
    shape = tuple(shapes[0])
    rank = len(shape)
    noperands = len(shapes) - (3 if stats else 1)
    strides = [1] * rank
    for k in range(rank - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    block = row_block(shape, axes)
    rows = block[0]
    block.append(int(np.array(epsilon, dtype=np.float32).view(np.uint32)))
    block += list(shape) + strides
    for p in range(1, noperands):
        pshape = tuple(shapes[p])
        if channel_axis >= 0:  # 1-D along the channel axis
            aligned = [1] * rank
            aligned[channel_axis] = pshape[0] if pshape else 1
        else:  # numpy broadcasting over the trailing axes
            aligned = [1] * (rank - len(pshape)) + list(pshape)
        pstrides = [0] * rank
        step = 1
        for k in range(rank - 1, -1, -1):
            pstrides[k] = step if aligned[k] != 1 else 0
            step *= aligned[k]
        block += pstrides
    return tuple(block), rows


# -- group_norm ------------------------------------------------------------------------------------


def source_group_norm(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """GroupNormalization over x [N, C, ...], one workgroup per (sample, group) row (a contiguous
    block of C / G channels): mean, variance of the centred values, then
    y = (x - mean) / sqrt(var + epsilon) * scale[c] + bias[c] (per group with `per_group`), rounded
    once to a half result.  f32 compute (a float64 stash is computed in f32 here).

    Params: rows, row length, C, the spatial size, channels per group, per_group, epsilon's f32 bits.
    """
    (elem, rank), out_elem = operands[0], results[0][0]
    if device_type(elem) != "f32":
        raise UnsupportedError(f"WGSL group_norm: element type {elem} is not a float")
    if len(operands) != 3:
        raise UnsupportedError(f"WGSL group_norm: {len(operands)} operands (x, scale and bias are needed)")
    if rank < 2:
        raise UnsupportedError(f"WGSL group_norm: an operand of rank {rank} (2 or more is needed)")
    stash = params.get("stash")
    if stash not in ("float32", "float64"):
        raise UnsupportedError(f"WGSL group_norm: stash {stash!r} is not supported (float32 or float64)")
    helpers = ROW_HELPERS + "fn row_base(row: u32) -> u32 { return row * params[1]; }\n"
    helpers += "fn row_at(j: u32) -> u32 { return j; }\nvar<workgroup> sh: array<f32, 64>;\n"
    body = ROW_START
    body += "  var a = 0.0;\n" + accumulate("a", "add_f", "x") + tree("a", "add_f")
    body += "  let mean = a / f32(params[1]);\n"
    body += "  var v = 0.0;\n" + accumulate("v", "add_f", "(x - mean) * (x - mean)") + tree("v", "add_f")
    body += "  let root = sqrt(v / f32(params[1]) + bitcast<f32>(params[6]));\n"
    body += (
        "  for (var j = lid; j < n; j = j + 64u) {\n"
        "    let o = base + j;\n"
        "    let c = (o / params[3]) % params[2];\n"
        "    let p = select(c, c / params[4], params[5] != 0u);\n"
        f"    out0[o] = {narrow(out_elem, '(in0[o] - mean) / root * in1[p] + in2[p]')};\n"
        "  }\n"
    )
    return kernel([out_elem], [e for e, _ in operands], body, helpers)


def _p_group_norm(
    shapes: tuple[tuple[int, ...], ...], num_groups: int, epsilon: float, per_group: int, stash: str
) -> tuple[tuple[int, ...], int]:
    """The group_norm kernel's params (rows = N * groups, row length, C, spatial size, channels per
    group, per_group, epsilon's f32 bits) and its workgroups (one per row)."""
    shape = tuple(shapes[0])
    n, c = shape[0], shape[1]
    spatial = 1
    for e in shape[2:]:
        spatial *= e
    groups = max(int(num_groups), 1)
    length = (c // groups) * spatial
    rows = n * groups if length > 0 else 0
    eps = int(np.array(epsilon, dtype=np.float32).view(np.uint32))
    return (rows, length, max(c, 1), max(spatial, 1), max(c // groups, 1), 1 if per_group else 0, eps), rows


# -- lrn -------------------------------------------------------------------------------------------


def source_lrn(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """LRN across channels (axis 1), one invocation per element: the squares of the `size`
    channels from c - floor((size - 1) / 2) summed in order (those outside count 0), then
    x / (bias + alpha / size * sum) ** beta in f32, rounded to a half result.

    Params: count, C, the spatial size, size, the channels before, alpha / size (f32 bits), beta's
    and bias's f32 bits.
    """
    (elem, rank), out_elem = operands[0], results[0][0]
    if device_type(elem) != "f32":
        raise UnsupportedError(f"WGSL lrn: element type {elem} is not a float")
    if rank < 2:
        raise UnsupportedError(f"WGSL lrn: an operand of rank {rank} (2 or more is needed)")
    body = FLAT + (
        "  if (i >= params[0]) { return; }\n"
        "  let channels = i32(params[1]);\n"
        "  let inner = params[2];\n"
        "  let c = i32((i / inner) % params[1]);\n"
        "  let first = i - u32(c) * inner;\n"
        "  var total = 0.0;\n"
        "  for (var t = 0; t < i32(params[3]); t = t + 1) {\n"
        "    let ch = c - i32(params[4]) + t;\n"
        "    if (ch >= 0 && ch < channels) {\n"
        "      let v = in0[first + u32(ch) * inner];\n"
        "      total = total + v * v;\n"
        "    }\n"
        "  }\n"
        "  let d = bitcast<f32>(params[7]) + bitcast<f32>(params[5]) * total;\n"
        f"  out0[i] = {narrow(out_elem, 'in0[i] / pow(d, bitcast<f32>(params[6]))')};\n"
    )
    return kernel([out_elem], [elem], body)


def _p_lrn(
    shapes: tuple[tuple[int, ...], ...], size: int, alpha: float, beta: float, bias: float
) -> tuple[tuple[int, ...], int]:
    """The lrn kernel's params (count, C, spatial size, size, channels before, alpha / size, beta,
    bias as f32 bits) and its workgroups (64 elements each)."""
    shape = tuple(shapes[0])
    count = 1
    for e in shape:
        count *= e
    inner = 1
    for e in shape[2:]:
        inner *= e
    scaled = np.float32(alpha) / np.float32(size)
    bits = [int(np.array(v, dtype=np.float32).view(np.uint32)) for v in (scaled, beta, bias)]
    return (count, max(shape[1], 1), max(inner, 1), int(size), (int(size) - 1) // 2, *bits), (count + 63) // 64


def _einsum_axes(equation: str, ranks: tuple[int, ...]) -> tuple[list[str], list[str], list[list[str]]]:
    """An einsum equation over operands of `ranks`, its ellipsis spelled out as letters of its own:
    the output letters, the contracted letters (in first-seen order) and each operand's letters."""
    inputs, output = equation.replace(" ", "").split("->")
    terms = inputs.split(",")
    spans = [rank - len(term.replace("...", "")) for term, rank in zip(terms, ranks, strict=True) if "..." in term]
    extra = max(spans, default=0)
    dots = [chr(0x3B1 + k) for k in range(extra)]  # Greek letters: never an equation's own
    spelled = []
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            head, tail = term.split("...")
            own = rank - len(head) - len(tail)
            spelled.append([*head, *dots[extra - own :], *tail])
        else:
            spelled.append(list(term))
    if "..." in output:
        head, tail = output.split("...")
        out = [*head, *dots, *tail]
    else:
        out = list(output)
    contracted = []
    for letters in spelled:
        for letter in letters:
            if letter not in out and letter not in contracted:
                contracted.append(letter)
    return out, contracted, spelled


def source_einsum(operands: list[tuple[str, int]], results: list[tuple[str, int]], equation: str) -> str:
    """Einsum: one invocation per result element summing the operands' product over the contracted
    letters; a letter repeated in one operand (a diagonal) adds that operand's strides.  Params: the
    result size, the contraction size, the result's and the contraction's extents, then per operand
    its stride for every letter (result letters first)."""
    if equation is None:
        raise UnsupportedError("WGSL einsum: the equation must be known at build time")
    out_elem = results[0][0]
    dev = device_type(out_elem)
    if any(device_type(e) != dev for e, _ in operands):
        raise UnsupportedError("WGSL einsum: every operand must have the result's device type")
    out, contracted, _ = _einsum_axes(equation, tuple(r for _, r in operands))
    n_out, n_con, k = len(out), len(contracted), len(operands)
    lines = ["if (i >= params[0]) { return; }"]
    base = 2 + n_out + n_con  # each operand's strides start here, (n_out + n_con) apiece
    lines.append("var rem: u32 = i;")
    for j in range(k):
        lines.append(f"var base{j}: u32 = 0u;")
    for a in range(n_out - 1, -1, -1):
        lines.append(f"let o{a} = rem % params[{2 + a}]; rem = rem / params[{2 + a}];")
        for j in range(k):
            lines.append(f"base{j} = base{j} + o{a} * params[{base + j * (n_out + n_con) + a}];")
    zero = {"f32": "0.0", "i32": "0", "u32": "0u"}[dev]
    lines.append(f"var acc: {dev} = {zero};")
    lines.append("for (var c: u32 = 0u; c < params[1]; c = c + 1u) {")
    lines.append("  var crem: u32 = c;")
    for j in range(k):
        lines.append(f"  var at{j}: u32 = base{j};")
    for a in range(n_con - 1, -1, -1):
        lines.append(f"  let c{a} = crem % params[{2 + n_out + a}]; crem = crem / params[{2 + n_out + a}];")
        for j in range(k):
            lines.append(f"  at{j} = at{j} + c{a} * params[{base + j * (n_out + n_con) + n_out + a}];")
    reads = [f"in{j}[at{j}]" for j in range(k)]
    product = " * ".join(reads) if dev != "u32" else " & ".join(reads)
    lines.append(f"  acc = acc + {product};" if dev != "u32" else f"  acc = acc | ({product});")
    lines.append("}")
    lines.append(f"out0[i] = {narrow(out_elem, 'acc')};")
    body = FLAT + "".join(f"  {line}\n" for line in lines)
    return kernel([out_elem], [e for e, _ in operands], body)


def _p_einsum(shapes: tuple[tuple[int, ...], ...], equation: str) -> tuple[tuple[int, ...], int]:
    """The einsum kernel's params (sizes, extents, per-operand strides per letter) and workgroups."""
    operands = shapes[:-1]
    out, contracted, spelled = _einsum_axes(equation, tuple(len(s) for s in operands))
    extent: dict[str, int] = {}
    for letters, shape in zip(spelled, operands, strict=True):
        for letter, e in zip(letters, shape, strict=True):
            if e != 1:
                extent[letter] = e
            else:
                extent.setdefault(letter, 1)  # broadcast: another operand may give the letter its extent
    total = 1
    for letter in out:
        total *= extent.get(letter, 1)
    ctotal = 1
    for letter in contracted:
        ctotal *= extent[letter]
    params = [total, ctotal if total else 0, *(extent.get(x, 1) for x in out), *(extent[x] for x in contracted)]
    for letters, shape in zip(spelled, operands, strict=True):
        strides = [1] * len(shape)
        for a in range(len(shape) - 2, -1, -1):
            strides[a] = strides[a + 1] * shape[a + 1]
        per: dict[str, int] = {}
        for letter, e, s in zip(letters, shape, strides, strict=True):
            per[letter] = per.get(letter, 0) + (s if e != 1 else 0)  # a broadcast axis of extent 1 stays put
        params += [per.get(x, 0) for x in (*out, *contracted)]
    return tuple(params), (total + 63) // 64


PIECES: dict[str, Callable[..., object]] = {
    "_p_normalize": _p_normalize, "_p_group_norm": _p_group_norm, "_p_lrn": _p_lrn, "_einsum_axes": _einsum_axes,
    "_p_einsum": _p_einsum,
}  # fmt: skip
SOURCES: dict[str, object] = {
    "normalize": source_normalize, "group_norm": source_group_norm, "lrn": source_lrn, "einsum": source_einsum,
}  # fmt: skip
