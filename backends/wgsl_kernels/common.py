"""What every WGSL kernel shares: device types, the binding header, index helpers, half rounding."""

from __future__ import annotations

from collections.abc import Sequence

WORKGROUP = 64
"""Invocations per workgroup, for every kernel."""


NO_DEVICE_FORM = (
    "the device holds f32, f16, bf16, float8 and float4 as f32, and bool, i2 to i64, ui2 to ui16 as 32-bit integers"
)
"""Why an element type has no device form (what a refusal naming one says)."""

NARROW_FLOATS = ("f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f8E8M0FNU", "f4E2M1")
"""The narrow floats, held as the f32 of their value (exact in f32); only `kernel.cast_narrow` and
`kernel.quantize_linear` make one on the device (`narrow.py`), and other kernels only move, compare
or widen them, so none leaves their grid."""


def device_type(elem: str) -> str:
    """The WGSL scalar type holding a value of Loam element type `elem` on the device."""
    if elem in ("f32", "f16", "bf16", *NARROW_FLOATS):
        return "f32"
    if elem == "bool":
        return "u32"
    if elem in ("i64", "i32", "i16", "i8", "ui8", "ui16", "i4", "ui4", "i2", "ui2"):
        return "i32"
    raise ValueError(f"element type {elem} has no WGSL form ({NO_DEVICE_FORM})")


def header(results: Sequence[str], operands: Sequence[str]) -> str:
    """The bindings: params, then `out0..` (read_write) for `results`, then `in0..` for `operands`
    (Loam element types), and the helpers every kernel may call."""
    lines = ["@group(0) @binding(0) var<storage, read> params: array<u32>;"]
    for i, elem in enumerate(results):
        lines.append(f"@group(0) @binding({1 + i}) var<storage, read_write> out{i}: array<{device_type(elem)}>;")
    for i, elem in enumerate(operands):
        b = 1 + len(results) + i
        lines.append(f"@group(0) @binding({b}) var<storage, read> in{i}: array<{device_type(elem)}>;")
    return "\n".join(lines) + "\n" + HELPERS


ENTRY = (
    f"@compute @workgroup_size({WORKGROUP})\n"
    "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
    "        @builtin(local_invocation_index) lid: u32) {\n"
)
"""The entry point's first lines; the body follows and closes with `}`."""

FLAT = f"  let i = (wid.y * nwg.x + wid.x) * {WORKGROUP}u + lid;\n"
"""The invocation's flat index (one invocation per element in elementwise kernels)."""

HELPERS = """
fn round_f16(x: f32) -> f32 { return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x; }
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn is_inf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }
fn round_bf16(x: f32) -> f32 {
  let b = bitcast<u32>(x);
  if (is_nan(x)) { return bitcast<f32>(b | 0x00400000u); }
  return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}
fn param_i(k: u32) -> i32 { return bitcast<i32>(params[k]); }
fn bits_f32(b: u32) -> f32 { var v = b; return bitcast<f32>(v); }  // not a constant expression: see f32_bits
"""


def f32_bits(bits: int) -> str:
    """The f32 of `bits` as a WGSL expression.  Through `bits_f32` (not a constant expression) where it is
    a NaN or an infinity: Chromium's compiler, Tint, refuses one a constant expression makes."""
    exponent = (bits >> 23) & 0xFF
    return f"bits_f32({bits:#010x}u)" if exponent == 0xFF else f"bitcast<f32>({bits:#010x}u)"


def narrow(elem: str, value: str) -> str:
    """WGSL rounding `value` (an f32 expression) to the precision of a half `elem` (else unchanged)."""
    if elem == "f16":
        return f"round_f16({value})"
    if elem == "bf16":
        return f"round_bf16({value})"
    return value


def kernel(results: Sequence[str], operands: Sequence[str], body: str, helpers: str = "") -> str:
    """A whole shader: header, extra helper functions, and `main` with `body` (indented lines)."""
    return header(results, operands) + helpers + ENTRY + body + "}\n"


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return tuple(strides)
