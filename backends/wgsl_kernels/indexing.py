"""`kernel.gather` as WGSL: one invocation per result element.

The result (data[:axis] + indices + data[axis+1:]) is read as (outer, count, inner), the data as
(outer, extent, inner): result element (o, k, i) copies data element (o, indices[k], i).  Indices
are i32 on the device (the host narrows i64 after checking it fits); a negative index counts from
the end (adds the extent), and an index still outside [0, extent) is clamped into it, so a bad
index reads a wrong element but never outside the buffer (the host checks indices beforehand).

Params: the result's element count, inner, count (indices' elements), extent (data's `axis`).
"""

from __future__ import annotations

from loam.backends.wgsl_kernels.common import FLAT, device_type, kernel
from loam.errors import UnsupportedError


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


PIECES: dict[str, object] = {"_p_gather": _p_gather}
DEPENDS: dict[str, tuple[str, ...]] = {}
SOURCES: dict[str, object] = {"gather": source_gather}
