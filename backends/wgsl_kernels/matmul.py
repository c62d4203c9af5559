"""`kernel.matmul` as WGSL: 8 x 8 output tiles, the contraction staged through workgroup memory,
batch axes broadcast, and the product's epilogue applied before the one store.

Each workgroup computes an 8 x 8 tile of one batch entry's [M, N] product: per step of 8 along
the contraction, its 64 invocations load an 8 x 8 tile of each operand into workgroup memory, then
each accumulates its element from the two tiles.  Operands are read through strides, so a
transposed operand (a `kernel.permute` the printer folded away) costs nothing; a rank-1 operand
is a row (lhs: M = 1) or a column (rhs: N = 1).  The epilogue, an `Expr` whose operand 0 is the
product, reads each extra operand at the element's index over the result's axes.

Params: M, N, K, the batch count B, A's row, contraction and column strides, B's contraction and
column strides, the result's batch extents (for the batch index), each operand's batch strides,
then the result's extents and each strided extra's strides (as in the zip kernel).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from loam.backends.wgsl_kernels.common import device_type, kernel
from loam.backends.wgsl_kernels.elementwise import HELPERS, expr_lines, index_lines
from loam.core.errors import UnsupportedError
from loam.core.poly import Poly
from loam.dialects.expr import Expr

TILE = 8


def source_matmul(
    elem: str,
    batch_rank: int,
    result: tuple[tuple[Poly, ...], str],
    epilogue: Expr | None = None,
    extras: Sequence[tuple[tuple[Poly, ...], str]] = (),
) -> str:
    """The tiled product of two `elem` operands with `batch_rank` result batch axes, finished by
    `epilogue` over `extras` (extents, element type) when given."""
    if device_type(elem) != "f32":
        raise UnsupportedError(f"the WGSL matmul computes in f32; its operands are {elem}")
    out_shape, out_elem = result
    rank = len(out_shape)
    batch = 12  # params[12..]: result batch extents, then A's and B's batch strides
    tail = batch + 3 * batch_rank  # params[tail..]: result extents, then each strided extra's strides
    strided = [j for j, (shape, _) in enumerate(extras) if tuple(shape) != tuple(out_shape)]
    bases = [(f"in{2 + j}", tail + rank + n * rank) for n, j in enumerate(strided)]
    lines = [
        "let w = wid.y * nwg.x + wid.x;",
        "let M = params[0]; let N = params[1]; let K = params[2];",
        f"let tiles_m = (M + {TILE - 1}u) / {TILE}u; let tiles_n = (N + {TILE - 1}u) / {TILE}u;",
        "let per_batch = tiles_m * tiles_n;",
        "let b = w / per_batch; let t = w % per_batch;",
        f"let row0 = (t / tiles_n) * {TILE}u; let col0 = (t % tiles_n) * {TILE}u;",
        f"let r = lid / {TILE}u; let c = lid % {TILE}u;",
        "let live = b < params[3];",
        "var a_base: u32 = 0u; var b_base: u32 = 0u;",
    ]
    if batch_rank:
        lines.append("var rem_b: u32 = b;")
        for k in range(batch_rank - 1, -1, -1):
            lines.append(f"let cb{k} = rem_b % params[{batch + k}]; rem_b = rem_b / params[{batch + k}];")
            lines.append(f"a_base = a_base + cb{k} * params[{batch + batch_rank + k}];")
            lines.append(f"b_base = b_base + cb{k} * params[{batch + 2 * batch_rank + k}];")
    lines += [
        "var acc: f32 = 0.0;",
        f"for (var k0: u32 = 0u; k0 < K; k0 = k0 + {TILE}u) {{",
        "  let ar = row0 + r; let ak = k0 + c;",
        "  var av: f32 = 0.0;",
        "  if (live && ar < M && ak < K) { av = in0[a_base + ar * params[4] + ak * params[5]]; }",
        "  ta[r][c] = av;",
        "  let bk = k0 + r; let bc = col0 + c;",
        "  var bv: f32 = 0.0;",
        "  if (live && bk < K && bc < N) { bv = in1[b_base + bk * params[7] + bc * params[8]]; }",
        "  tb[r][c] = bv;",
        "  workgroupBarrier();",
        f"  for (var k: u32 = 0u; k < {TILE}u; k = k + 1u) {{ acc = acc + ta[r][k] * tb[k][c]; }}",
        "  workgroupBarrier();",
        "}",
        "let row = row0 + r; let col = col0 + c;",
        "if (live && row < M && col < N) {",
        "  let i = (b * M + row) * N + col;",
    ]
    value = "acc"
    if epilogue is not None:
        reads = ["acc"]
        for j in range(len(extras)):
            reads.append(f"in{2 + j}[o_in{2 + j}]" if j in strided else f"in{2 + j}[i]")
        shapes = [out_shape, *(s for s, _ in extras)]
        elems = [out_elem, *(e for _, e in extras)]
        steps, value = expr_lines(epilogue, reads, shapes, elems, result)
        lines += [f"  {line}" for line in [*index_lines(rank, tail, bases), *steps]]
    lines += [f"  out0[i] = {value};", "}"]
    tiles = "".join(f"var<workgroup> {t}: array<array<f32, {TILE}>, {TILE}>;\n" for t in ("ta", "tb"))
    operand_elems = [elem, elem, *(e for _, e in extras)]
    return kernel([out_elem], operand_elems, "".join(f"  {line}\n" for line in lines), HELPERS + tiles)


def _p_matmul(
    a: tuple[int, ...], b: tuple[int, ...], a_strides: tuple[int, ...], b_strides: tuple[int, ...],
    out: tuple[int, ...], strided: tuple[tuple[int, ...], ...],
) -> tuple[tuple[int, ...], int]:  # fmt: skip
    """The matmul kernel's params and workgroups, from the operands' shapes and element strides (a
    permuted operand's strides are its source's, permuted), the result's shape, and each strided
    extra's shape."""
    m = a[-2] if len(a) > 1 else 1
    k = a[-1]
    n = b[-1] if len(b) > 1 else 1
    a_row, a_k = (a_strides[-2] if len(a) > 1 else 0), a_strides[-1]
    b_k, b_col = (b_strides[-2], b_strides[-1]) if len(b) > 1 else (b_strides[-1], 0)
    batch_out = out[: len(out) - (len(a) > 1) - (len(b) > 1)]
    rank_b = len(batch_out)

    def batch_strides(shape: tuple[int, ...], strides: tuple[int, ...]) -> list[int]:
        own = len(shape) - 2 if len(shape) > 1 else 0
        found = [0] * rank_b
        for j in range(own):
            if shape[j] != 1:
                found[rank_b - own + j] = strides[j]
        return found

    count = 1
    for e in batch_out:
        count *= e
    params = [m, n, k, count, a_row, a_k, 0, b_k, b_col, 0, 0, 0, *batch_out]
    params += batch_strides(a, a_strides) + batch_strides(b, b_strides)
    params += list(out)
    for shape in strided:
        strides = [0] * len(out)
        step = 1
        for j in range(len(shape) - 1, -1, -1):
            if shape[j] != 1:
                strides[len(out) - len(shape) + j] = step
            step *= shape[j]
        params += strides
    tiles = ((m + 7) // 8) * ((n + 7) // 8)
    return tuple(params), count * tiles if m and n else 0


PIECES: dict[str, Callable[..., object]] = {"_p_matmul": _p_matmul}
