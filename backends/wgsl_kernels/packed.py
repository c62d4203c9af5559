"""`kernel.matmul_packed` and `kernel.gather_packed` as WGSL: ggml blocks widened in the shader.

A weight the checkpoint stores in Q4_0, Q4_1 or Q8_0 (`pack-quantized` marks it `packed`) is uploaded
as its blocks, byte for byte (`_Gpu.upload_blocks`), so the device holds the file's bytes rather than
four times them in float32.  The shaders read those bytes from an `array<u32>` (a block of 18 or 34
bytes starts at any even byte, so every read goes through `w_byte`) and widen each element as the
numpy runtime does (`loam/runtime/dequant.py`):

- Q8_0 (34 bytes): f16 `d`, 32 int8 `q`; element j is `d * q[j]`;
- Q4_0 (18 bytes): f16 `d`, 16 bytes of nibbles (element j < 16 the low nibble of byte j, 16 + j
  its high nibble); element j is `d * (q - 8)`;
- Q4_1 (20 bytes): f16 `d`, f16 `m`, then nibbles as Q4_0; element j is `d * q + m`.

matmul_packed (`transposed = 1`, x [M, K] @ W^T for W [N, K], blocks along K): one invocation per
result element, a block's integers dotted with x first and scaled once (`d * (q . x) + m * sum(x)`).
With `transposed = 0` (x @ W for W [K, N], blocks along N), each invocation widens the one element
of each of its column's K blocks it reads.  gather_packed: one invocation per result element,
widening the element of the gathered row it copies; indices as `kernel.gather` reads them (negative
counts from the end, the rest clamped into the rows).

Params: matmul_packed: result elements, M, N, K, blocks per W row; gather_packed: result elements,
the row length D, the indices' count, the rows V, blocks per row.
"""

from __future__ import annotations

from collections.abc import Callable

from loam.backends.wgsl_kernels.common import ENTRY, FLAT, HELPERS, device_type
from loam.core.errors import UnsupportedError

BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}
"""Bytes per block of 32 elements, by ggml encoding."""


def _header(in0: str, in1: str, blocks: str) -> str:
    """Bindings: params, out0 (f32), in0 and in1 of WGSL element types `in0`, `in1`; then the block
    readers over the binding `blocks` (the one of type u32)."""
    return (
        "@group(0) @binding(0) var<storage, read> params: array<u32>;\n"
        "@group(0) @binding(1) var<storage, read_write> out0: array<f32>;\n"
        f"@group(0) @binding(2) var<storage, read> in0: array<{in0}>;\n"
        f"@group(0) @binding(3) var<storage, read> in1: array<{in1}>;\n" + HELPERS + "\n"
        f"fn w_byte(o: u32) -> u32 {{ return ({blocks}[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu; }}\n"
        "fn w_half(o: u32) -> f32 { return unpack2x16float(w_byte(o) | (w_byte(o + 1u) << 8u)).x; }\n"
    )


def _element(encoding: str) -> str:
    """`fn w_at(base: u32, j: u32) -> f32`: element j (< 32) of the block at byte `base`."""
    if encoding == "Q8_0":
        value = "f32(bitcast<i32>(w_byte(base + 2u + j) << 24u) >> 24u) * w_half(base)"
    elif encoding == "Q4_0":
        value = "(f32((w_byte(base + 2u + (j & 15u)) >> ((j >> 4u) * 4u)) & 15u) - 8.0) * w_half(base)"
    else:
        value = "f32((w_byte(base + 4u + (j & 15u)) >> ((j >> 4u) * 4u)) & 15u) * w_half(base) + w_half(base + 2u)"
    return f"fn w_at(base: u32, j: u32) -> f32 {{ return {value}; }}\n"


def _block_dot(encoding: str) -> str:
    """`fn w_dot(base: u32, x0: u32) -> f32`: the block at byte `base` dotted with in0[x0 .. x0 + 32)."""
    if encoding == "Q8_0":
        body = (
            "  var s = 0.0;\n"
            "  for (var j = 0u; j < 32u; j = j + 1u) {\n"
            "    s = s + f32(bitcast<i32>(w_byte(base + 2u + j) << 24u) >> 24u) * in0[x0 + j];\n"
            "  }\n"
            "  return w_half(base) * s;\n"
        )
    else:
        start = "2u" if encoding == "Q4_0" else "4u"
        body = (
            "  var s = 0.0;\n  var total = 0.0;\n"
            "  for (var j = 0u; j < 16u; j = j + 1u) {\n"
            f"    let q = w_byte(base + {start} + j);\n"
            "    let lo = in0[x0 + j];\n    let hi = in0[x0 + 16u + j];\n"
            "    s = s + f32(q & 15u) * lo + f32(q >> 4u) * hi;\n"
            "    total = total + lo + hi;\n"
            "  }\n"
        )
        body += (
            "  return w_half(base) * (s - 8.0 * total);\n"
            if encoding == "Q4_0"
            else "  return w_half(base) * s + w_half(base + 2u) * total;\n"
        )
    return "fn w_dot(base: u32, x0: u32) -> f32 {\n" + body + "}\n"


def _encoding(params: dict[str, object]) -> tuple[str, int]:
    encoding = str(params.get("encoding"))
    if encoding not in BLOCK_BYTES:
        raise UnsupportedError(f"WGSL packed kernels read Q4_0, Q4_1 and Q8_0 blocks, not {encoding}")
    return encoding, BLOCK_BYTES[encoding]


def source_matmul_packed(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """x [M, K] (in0) times a packed W (in1): x @ W^T (`transposed = 1`, W [N, K]) or x @ W
    (`transposed = 0`, W [K, N])."""
    encoding, size = _encoding(params)
    if operands[0][0] != "f32" or results[0][0] != "f32":
        raise UnsupportedError(f"WGSL matmul_packed multiplies f32 by blocks, not {operands[0][0]}")
    body = FLAT + "  if (i >= params[0]) { return; }\n"
    body += "  let n_out = params[2];\n  let k = params[3];\n  let nb = params[4];\n"
    body += "  let m = i / n_out;\n  let n = i % n_out;\n  var acc = 0.0;\n"
    if params.get("transposed"):
        body += (
            "  for (var b = 0u; b < nb; b = b + 1u) {\n"
            f"    acc = acc + w_dot((n * nb + b) * {size}u, m * k + b * 32u);\n  }}\n"
        )
        helpers = _block_dot(encoding)
    else:
        body += (
            "  let block = n / 32u;\n  let j = n % 32u;\n"
            "  for (var r = 0u; r < k; r = r + 1u) {\n"
            f"    acc = acc + in0[m * k + r] * w_at((r * nb + block) * {size}u, j);\n  }}\n"
        )
        helpers = _element(encoding)
    body += "  out0[i] = acc;\n"
    return _header("f32", "u32", "in1") + helpers + ENTRY + body + "}\n"


def source_gather_packed(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """Rows of a packed W [V, D] (in0) picked by integer indices (in1), widened."""
    encoding, size = _encoding(params)
    index_elem = operands[1][0]
    if device_type(index_elem) != "i32":
        raise UnsupportedError(f"WGSL gather_packed: indices of element type {index_elem} (an integer type is needed)")
    body = FLAT + "  if (i >= params[0]) { return; }\n"
    body += "  let d = params[1];\n  let extent = i32(params[3]);\n  let nb = params[4];\n"
    body += "  var at = in1[i / d];\n  if (at < 0) { at = at + extent; }\n  at = clamp(at, 0, max(extent - 1, 0));\n"
    body += f"  let c = i % d;\n  out0[i] = w_at((u32(at) * nb + c / 32u) * {size}u, c % 32u);\n"
    return _header("u32", "i32", "in0") + _element(encoding) + ENTRY + body + "}\n"


def _p_matmul_packed(
    shapes: tuple[tuple[int, ...], ...], transposed: int, encoding: str
) -> tuple[tuple[int, ...], int]:
    """Params of matmul_packed over x, W, y extents (W as the graph has it: [N, K] or [K, N])."""
    x, w = tuple(shapes[0]), tuple(shapes[1])
    k, n = (w[1], w[0]) if transposed else (w[0], w[1])
    m = 1
    for e in x[:-1]:
        m *= e
    total = m * n
    return (total, m, n, k, (w[1] // 32)), (total + 63) // 64


def _p_gather_packed(shapes: tuple[tuple[int, ...], ...], axis: int, encoding: str) -> tuple[tuple[int, ...], int]:
    """Params of gather_packed over W [V, D], indices, result extents."""
    w, indices = tuple(shapes[0]), tuple(shapes[1])
    count = 1
    for e in indices:
        count *= e
    total = count * w[1]
    return (total, w[1], count, w[0], w[1] // 32), (total + 63) // 64


SOURCES: dict[str, object] = {"matmul_packed": source_matmul_packed, "gather_packed": source_gather_packed}
PIECES: dict[str, Callable[..., object]] = {"_p_matmul_packed": _p_matmul_packed, "_p_gather_packed": _p_gather_packed}
