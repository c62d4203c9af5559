"""`kernel.cast_narrow`, `kernel.quantize_linear` and `kernel.dequantize_linear` as WGSL: casts into the
narrow element types (float8, float4, 4- and 2-bit integers), and ONNX's linear quantization into
them or 8- and 16-bit integers and back (`source_quantize_linear`, `source_dequantize_linear`), one
invocation per element.

The device holds a narrow float as the f32 of its value (each is exact in f32) and a narrow integer
as an i32, as it holds halves and 8-bit integers; a cast *from* one is then the elementwise cast of
that f32 or i32 (`kernel.cast`), and only a cast *into* one needs this kernel, which puts the value
on the type's grid as the numpy kernel (`kernel_cast_narrow`, ml_dtypes) does:

- float8 e4m3fn, e4m3fnuz, e5m2, e5m2fnuz: rounded to nearest even (subnormals on their fixed
  quantum); past the largest finite value `saturate` clips to it, else the type's infinity (e5m2)
  or NaN (the others); NaN stays NaN; a fnuz type has no -0.
- float4 e2m1: rounded to nearest even, always saturating (no infinity, no NaN); ml_dtypes makes
  a NaN the zero of the other sign, and so does this kernel.
- float8 e8m0: 2^e from the f32 exponent field e, rounded up by `round_mode` (`_to_e8m0`'s rule);
  infinity and NaN become NaN.
- int4, uint4, int2, uint2: an integer keeps its low bits (two's complement, as astype wraps); a
  float is truncated toward zero, and one outside the type's range (or NaN) becomes 0, as ml_dtypes
  makes it (ONNX leaves that undefined).

cast_narrow's params: the element count.  The quantization kernels say theirs.
"""

from __future__ import annotations

from collections.abc import Callable

from loam.backends.wgsl_kernels.common import FLAT, device_type, kernel, narrow
from loam.core.errors import UnsupportedError

FLOAT8 = {
    # numpy name: (mantissa bits, smallest normal exponent, largest finite, infinity beyond it, fnuz)
    "float8_e4m3fn": (3, -6, 448.0, False, False),
    "float8_e4m3fnuz": (3, -7, 240.0, False, True),
    "float8_e5m2": (2, -14, 57344.0, True, False),
    "float8_e5m2fnuz": (2, -15, 57344.0, False, True),
    "float4_e2m1fn": (1, 0, 6.0, False, False),
}
"""The rounded float formats: what `_grid` needs of each."""

INTEGERS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}
"""The narrow integers: bits, signed."""

_NAN = "bits_f32(0x7fc00000u)"


def _grid(to: str, saturate: bool) -> str:
    """The WGSL function `cast_to(x: f32) -> f32` putting x on float format `to`'s grid."""
    mantissa, emin, largest, infinite, fnuz = FLOAT8[to]
    drop = 23 - mantissa  # the f32 mantissa bits the format lacks
    half, kept = (1 << (drop - 1)) - 1, 0xFFFFFFFF ^ ((1 << drop) - 1)
    if to == "float4_e2m1fn" or saturate:
        over = f"{largest!r}"
    else:
        over = "bits_f32(0x7f800000u)" if infinite else _NAN
    # NaN: float4 has none (ml_dtypes gives the zero of the other sign); the others keep it.
    nan = "select(bits_f32(0x80000000u), 0.0, (bitcast<u32>(x) >> 31u) == 1u)" if to == "float4_e2m1fn" else _NAN
    zero = "  if (r == 0.0) { return 0.0; }\n" if fnuz else ""  # a fnuz type has one zero, +0
    return (
        "fn cast_to(x: f32) -> f32 {\n"
        f"  if (is_nan(x)) {{ return {nan}; }}\n"
        "  let a = abs(x);\n"
        "  var r: f32;\n"
        "  if (is_inf(x)) {\n"
        f"    r = {over};\n"
        f"  }} else if (a < {2.0**emin!r}) {{\n"  # subnormal: a fixed quantum; round() ties to even
        f"    r = round(a * {2.0 ** (mantissa - emin)!r}) * {2.0 ** (emin - mantissa)!r};\n"
        "  } else {\n"  # normal: the f32 bits rounded to `mantissa` bits, ties to even (a carry moves the exponent)
        "    let b = bitcast<u32>(a);\n"
        f"    r = bitcast<f32>((b + {half}u + ((b >> {drop}u) & 1u)) & {kept:#x}u);\n"
        f"    if (r > {largest!r}) {{ r = {over}; }}\n"
        f"  }}\n{zero}"
        "  if (is_nan(r)) { return r; }\n"
        "  return bitcast<f32>(bitcast<u32>(r) | (bitcast<u32>(x) & 0x80000000u));\n"
        "}\n"
    )


def _e8m0(saturate: bool, round_mode: str) -> str:
    """The WGSL function `cast_to(x: f32) -> f32` giving float8e8m0's 2^(e - 127) for x (`_to_e8m0`)."""
    up = {
        "up": "f != 0u",
        "nearest": "f > 0x400000u || (f == 0x400000u && e > 0u)",
        "down": "false",
    }[round_mode]
    limit = " && e != 0xfeu" if saturate else ""
    return (
        "fn cast_to(x: f32) -> f32 {\n"
        "  let bits = bitcast<u32>(x);\n"
        "  let e = (bits >> 23u) & 0xffu;\n"
        "  let f = bits & 0x7fffffu;\n"
        f"  if (e == 0xffu) {{ return {_NAN}; }}\n"
        f"  let k = e + select(0u, 1u, ({up}){limit});\n"
        f"  if (k == 0xffu) {{ return {_NAN}; }}\n"
        "  return bitcast<f32>(select(k << 23u, 0x00400000u, k == 0u));\n"  # 2^-127 is an f32 subnormal
        "}\n"
    )


def _integer(to: str, source: str) -> str:
    """The WGSL function `cast_to(x) -> i32` into narrow integer `to` from device type `source`."""
    bits, signed = INTEGERS[to]
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if source == "f32":
        return (
            "fn cast_to(x: f32) -> i32 {\n"
            "  let t = trunc(x);\n"
            f"  if (is_nan(t) || t < {float(low)!r} || t > {float(high)!r}) {{ return 0; }}\n"
            "  return i32(t);\n"
            "}\n"
        )
    wrapped = f"(v << {32 - bits}u) >> {32 - bits}u" if signed else f"v & {(1 << bits) - 1}"
    return f"fn cast_to(x: {source}) -> i32 {{\n  let v = i32(x);\n  return {wrapped};\n}}\n"


def source_cast_narrow(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The cast_narrow shader: any device-held operand into the narrow type `to` (numpy's name)."""
    to = str(params.get("to"))
    saturate = bool(params.get("saturate"))
    source = device_type(operands[0][0])
    if to in INTEGERS:
        helper = _integer(to, source)
    elif to == "float8_e8m0fnu":
        helper = _e8m0(saturate, str(params.get("round_mode")))
    elif to in FLOAT8:
        helper = _grid(to, saturate)
    else:
        raise UnsupportedError(f"WGSL cast_narrow: no cast into {to}")
    value = "in0[i]" if source == "f32" or to in INTEGERS else "f32(in0[i])"
    body = FLAT + "  if (i >= params[0]) { return; }\n" + f"  out0[i] = cast_to({value});\n"
    return kernel([results[0][0]], [operands[0][0]], body, helper)


# -- dequantize_linear -----------------------------------------------------------------------------


_AT_ALONG_BLOCK = (
    "  if (i >= params[0]) { return; }\n"
    "  let inner = params[1];\n"
    "  let n = i % inner;\n"
    "  let c = (i / inner) % params[2];\n"
    "  let o = i / (inner * params[2]);\n"
    "  let at = o * params[4] + (c / params[3]) * params[5] + n * params[6];\n"
)
"""The lines of a (de)quantize kernel reading element i's scale and zero point entry `at` (the params
`_along_block` gives: count, inner, extent, block, so, sc, sn); out of range, the invocation returns."""


def source_dequantize_linear(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """DequantizeLinear, one invocation per element: (x - zero point) * scale in f32, rounded to the
    result's half where it is one, as the numpy kernel computes it.  An integer x's zero point (the
    optional third operand) is subtracted; a float8 or float4 one is zero by ONNX's rule and not read.
    x is read as (outer o, extent c, inner n) around `axis`; the scale and zero point hold one value
    (per tensor), one per position along the axis, or one per block of `block_size` positions there
    (x's rank, the blocks' count along the axis): element (o, c, n) reads entry
    o * so + (c / block) * sc + n * sn, the strides `_p_dequantize_linear` gives each layout.

    Params: the element count, inner, extent, block, so, sc, sn.
    """
    (elem, _), out_elem = operands[0], results[0][0]
    if device_type(out_elem) != "f32":
        raise UnsupportedError(f"WGSL dequantize_linear: a result of element type {out_elem} (a float is needed)")
    if device_type(elem) == "u32":
        raise UnsupportedError(f"WGSL dequantize_linear: x of element type {elem} (a number is needed)")
    subtracted = len(operands) == 3 and device_type(elem) == "i32"
    value = "(f32(in0[i]) - f32(in2[at]))" if subtracted else "f32(in0[i])"
    body = (
        FLAT
        + _AT_ALONG_BLOCK
        + ("  _ = arrayLength(&in2);\n" if len(operands) == 3 and not subtracted else "")
        + f"  out0[i] = {narrow(out_elem, f'{value} * in1[at]')};\n"
    )
    return kernel([out_elem], [e for e, _ in operands], body)


def _p_dequantize_linear(
    shapes: tuple[tuple[int, ...], ...], axis: int, block_size: int, to: str
) -> tuple[tuple[int, ...], int]:
    """The dequantize_linear kernel's params (`_along_block`) and its workgroups (64 elements each)."""
    return _along_block(shapes[0], shapes[1], axis, block_size)


def _along_block(x: tuple[int, ...], scale: tuple[int, ...], axis: int, block_size: int) -> tuple[tuple[int, ...], int]:
    """The params of a kernel reading a scale (and zero point) laid out along x as ONNX's linear
    quantization lays them (`_along`): x's elements, inner, extent, block and the scale's strides so,
    sc, sn (0, 0, 0 per tensor; 0, 1, 0 per axis; blocks * inner, inner, 1 per block), and the
    workgroups (64 elements each)."""
    count = 1
    for e in x:
        count *= e
    inner = 1
    for e in x[axis + 1 :]:
        inner *= e
    extent = x[axis] if x else 1
    scale_count = 1
    for e in scale:
        scale_count *= e
    if block_size > 0:
        strides = (scale[axis] * inner, inner, 1)
    elif scale_count == 1:
        strides = (0, 0, 0)
    else:
        strides = (0, 1, 0)
    block = block_size if block_size > 0 else 1
    return (count, max(inner, 1), max(extent, 1), block, *strides), (count + 63) // 64


# -- quantize_linear -------------------------------------------------------------------------------

QUANTIZED_INTEGERS = {**INTEGERS, "int8": (8, True), "uint8": (8, False), "int16": (16, True), "uint16": (16, False)}
"""The integers QuantizeLinear makes: bits, signed."""

PRECISIONS = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
"""The types a quotient is computed in on the device, by numpy name."""

DIVIDE = """
fn divide(x: f32, s: f32) -> f32 {
  let bx = bitcast<u32>(x);
  let bs = bitcast<u32>(s);
  let ex = i32((bx >> 23u) & 0xffu);
  let es = i32((bs >> 23u) & 0xffu);
  if (ex == 0 || es == 0 || ex == 255 || es == 255) { return x / s; }
  var a = (bx & 0x7fffffu) | 0x800000u;
  let b = (bs & 0x7fffffu) | 0x800000u;
  var e = ex - es + 127;
  if (a < b) { a = a << 1u; e = e - 1; }
  var q = 0u;
  for (var k = 0u; k < 24u; k = k + 1u) {
    q = q << 1u;
    if (a >= b) { a = a - b; q = q | 1u; }
    a = a << 1u;
  }
  if (a > b || (a == b && (q & 1u) == 1u)) { q = q + 1u; }
  if (q == 0x1000000u) { q = 0x800000u; e = e + 1; }
  if (e <= 0) { return x / s; }
  let sign = (bx ^ bs) & 0x80000000u;
  if (e >= 255) { return bitcast<f32>(sign | 0x7f800000u); }
  return bitcast<f32>(sign | (u32(e) << 23u) | (q & 0x7fffffu));
}
"""
"""x / s rounded to nearest even, as numpy divides: WGSL's f32 division may be off by 2.5 ulps, and a
quotient on the wrong side of a tie rounds to another integer.  The 24 bits of the quotient of the
two significands (the larger shifted to lead) come from long division, the remainder rounds them;
zeros, subnormals, infinities and NaN, and a subnormal quotient (0 once rounded to any integer or
float8 QuantizeLinear makes) are left to the division."""


def _quotient_type(x: str, scale: str, precision: str) -> str:
    """The Loam type numpy divides x by the scale in (`precision`, else numpy's type for the pair; an
    e8m0 scale is widened to f32 first); UnsupportedError where that is f64 (an integer x)."""
    if precision:
        if precision not in PRECISIONS:
            raise UnsupportedError(f"WGSL quantize_linear: precision {precision} (the device divides in f32)")
        return PRECISIONS[precision]
    scale = "f32" if scale == "f8E8M0FNU" else scale
    if x not in ("f32", "f16", "bf16") or scale not in ("f32", "f16", "bf16"):
        raise UnsupportedError(f"WGSL quantize_linear: numpy divides {x} by {scale} in f64")
    return x if x == scale else "f32"


def source_quantize_linear(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """QuantizeLinear, one invocation per element: q = x / scale in the quotient's type (`precision`, else
    numpy's for the pair): both rounded to it, divided and rounded to nearest even (`DIVIDE`), then
    rounded to it where it is a half (f32's 24 bits hold a correctly rounded half quotient:
    at least twice a half's 11, plus 2), then into the result type `to`: an integer is round(q)
    (ties to even) plus the zero point, clamped to the type's range; a float8 is q cast as
    `cast_narrow` with `saturate` (the zero point not read).  A float4 (q plus the zero point, which
    numpy adds in f64, where an f32 sum can land on a tie the exact one passes) is refused, as is a
    quotient numpy computes in f64.  The scale and zero point are laid out as
    `source_dequantize_linear` reads them.

    Params: as `_p_dequantize_linear`'s.
    """
    (elem, _), (scale_elem, _) = operands[0], operands[1]
    to, out_elem = str(params.get("to")), results[0][0]
    quotient = _quotient_type(elem, scale_elem, str(params.get("precision") or ""))
    if to in FLOAT8 and to != "float4_e2m1fn":
        helper, value, zero = _grid(to, bool(params.get("saturate"))), "cast_to(q)", ""
    elif to in QUANTIZED_INTEGERS:
        bits, signed = QUANTIZED_INTEGERS[to]
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        zero = " + f32(in2[at])" if len(operands) == 3 else ""
        helper, value = "", f"i32(clamp(round(q){zero}, {float(low)!r}, {float(high)!r}))"
    else:
        raise UnsupportedError(f"WGSL quantize_linear: no quantization into {to}")
    dividend, divisor = narrow(quotient, "f32(in0[i])"), narrow(quotient, "in1[at]")
    body = (
        FLAT
        + _AT_ALONG_BLOCK
        + ("  _ = arrayLength(&in2);\n" if len(operands) == 3 and not zero else "")
        + f"  let q = {narrow(quotient, f'divide({dividend}, {divisor})')};\n"
        + f"  out0[i] = {value};\n"
    )
    return kernel([out_elem], [e for e, _ in operands], body, DIVIDE + helper)


def _p_quantize_linear(
    shapes: tuple[tuple[int, ...], ...], axis: int, block_size: int, to: str, saturate: int, precision: str
) -> tuple[tuple[int, ...], int]:
    """The quantize_linear kernel's params (`_along_block`) and its workgroups (64 elements each)."""
    return _along_block(shapes[0], shapes[1], axis, block_size)


def _p_cast_narrow(
    shapes: tuple[tuple[int, ...], ...], to: str, saturate: int, round_mode: str
) -> tuple[tuple[int, ...], int]:
    """The cast_narrow kernel's params (the element count) and its workgroups (64 elements each)."""
    count = 1
    for e in shapes[0]:
        count *= e
    return (count,), (count + 63) // 64


PIECES: dict[str, Callable[..., object]] = {
    "_p_cast_narrow": _p_cast_narrow,
    "_p_dequantize_linear": _p_dequantize_linear,
    "_p_quantize_linear": _p_quantize_linear,
    "_along_block": _along_block,
}
SOURCES: dict[str, object] = {
    "cast_narrow": source_cast_narrow,
    "dequantize_linear": source_dequantize_linear,
    "quantize_linear": source_quantize_linear,
}
