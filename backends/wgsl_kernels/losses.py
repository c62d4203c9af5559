"""`kernel.nll_loss` as WGSL: ONNX's NegativeLogLikelihoodLoss (and SoftmaxCrossEntropyLoss after its
log-softmax, which `kernel.softmax` computes).

x [N, C, d...] is read as (N, C, D), D the extents after the class axis multiplied; the targets
[N, d...] as (N, D), target j at (j / D, j % D).  Target j's loss is -x[n, target, d] times
weight[target] (1 without the optional weight operand), and 0 with no weight taken where the
target is `ignore_index` (when `ignores`).  A target outside [0, C) that is not ignored is clamped
into it, as the gathers clamp an index (it reads a wrong element, never outside the buffer; the
numpy kernel raises DataError).  Compute is f32; a half loss is rounded once at the end.

Reduction none: one invocation per target.  Sum and mean: one workgroup; each invocation adds
the targets j = lid, lid + 64, ... (loss and weight taken), then a tree over workgroup memory adds
the 64 partials, and mean divides the losses' sum by the weights' (NaN where every target is
ignored, as numpy's 0 / 0).  On llvmpipe, which caps a loop's iterations in a dispatch at 65535,
that bounds a reduced loss to about 4.19 million targets (the module refuses a forward past it).

Params: targets (N * D), C, D, ignore_index (its two's-complement bits), ignores.
"""

from __future__ import annotations

from collections.abc import Callable

from loam.backends.wgsl_kernels.common import FLAT, device_type, kernel, narrow
from loam.core.errors import UnsupportedError


def _loss_at(weighted: bool) -> str:
    """The WGSL function giving target j's (loss, weight taken)."""
    weight = "in2[u32(pick)]" if weighted else "1.0"
    return (
        "fn loss_at(j: u32) -> vec2<f32> {\n"
        "  let classes = params[1];\n"
        "  let inner = params[2];\n"
        "  let t = in1[j];\n"
        "  if (params[4] != 0u && t == param_i(3u)) { return vec2<f32>(0.0, 0.0); }\n"
        "  let pick = clamp(t, 0, max(i32(classes) - 1, 0));\n"
        "  let x = in0[((j / inner) * classes + u32(pick)) * inner + j % inner];\n"
        f"  let w = {weight};\n"
        "  return vec2<f32>(-x * w, w);\n"
        "}\n"
    )


def source_nll_loss(operands: list[tuple[str, int]], results: list[tuple[str, int]], **params: object) -> str:
    """The nll_loss shader: operands x (a float type), targets (an integer type), optional weight."""
    reduction = params.get("reduction")
    (elem, _), (target_elem, _) = operands[0], operands[1]
    out_elem = results[0][0]
    if reduction not in ("none", "sum", "mean"):
        raise UnsupportedError(f"WGSL nll_loss: reduction {reduction!r} is not supported")
    if device_type(target_elem) != "i32":
        raise UnsupportedError(f"WGSL nll_loss: targets of element type {target_elem} (an integer type is needed)")
    if device_type(elem) != "f32":
        raise UnsupportedError(f"WGSL nll_loss: x of element type {elem} (a float type is needed)")
    helpers = _loss_at(len(operands) == 3)
    elems = [elem, target_elem, *(e for e, _ in operands[2:])]
    if reduction == "none":
        body = FLAT + "  if (i >= params[0]) { return; }\n" + f"  out0[i] = {narrow(out_elem, 'loss_at(i).x')};\n"
        return kernel([out_elem], elems, body, helpers)
    total = "acc.x / acc.y" if reduction == "mean" else "acc.x"
    body = (
        "  var acc = vec2<f32>(0.0, 0.0);\n"
        "  for (var j = lid; j < params[0]; j = j + 64u) {\n"
        "    acc = acc + loss_at(j);\n"
        "  }\n"
        "  sh[lid] = acc;\n"
        "  workgroupBarrier();\n"
        "  for (var s = 32u; s > 0u; s = s >> 1u) {\n"
        "    if (lid < s) { sh[lid] = sh[lid] + sh[lid + s]; }\n"
        "    workgroupBarrier();\n"
        "  }\n"
        "  if (lid == 0u) {\n"
        "    acc = sh[0];\n"
        f"    out0[0] = {narrow(out_elem, total)};\n"
        "  }\n"
    )
    return kernel([out_elem], elems, body, helpers + "var<workgroup> sh: array<vec2<f32>, 64>;\n")


def _p_nll_loss(
    shapes: tuple[tuple[int, ...], ...], reduction: str, ignore_index: int, ignores: int
) -> tuple[tuple[int, ...], int]:
    """The nll_loss kernel's params (targets, classes, D, ignore_index, ignores) and its workgroups (64
    targets each, or the one that reduces them).  An ignore_index outside i32 equals no target the
    device holds (they are i32 there), so it ignores none."""
    x = tuple(shapes[0])
    inner = 1
    for e in x[2:]:
        inner *= e
    targets = x[0] * inner
    ignores = int(bool(ignores) and -(2**31) <= ignore_index < 2**31)
    block = (targets, x[1], max(inner, 1), ignore_index if ignores else 0, ignores)
    return block, ((targets + 63) // 64 if reduction == "none" else 1)


PIECES: dict[str, Callable[..., object]] = {"_p_nll_loss": _p_nll_loss}
SOURCES: dict[str, object] = {"nll_loss": source_nll_loss}
