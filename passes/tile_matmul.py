"""tile-matmul: f32 matrix products become the `matmul_tiles` tile program.

Why: a tiled product is the kernel the tile-program form was made for (a launch grid of [BM, BN]
blocks, masked loads of [BM, BK] and [BK, BN] tiles, a loop over the contraction carrying the
accumulator, a tile `dot`), and a tile program is written once (`loam.dialects.tile_program`) and
printed both to WGSL and to numpy, so the numpy form is the oracle for the device's.  The WGSL
pipeline runs this pass after `fuse` and `tile-rows`; `loam-opt -p tile-matmul` runs it on any
kernel IR.

Rewritten into `kernel.tile_program`: every `kernel.matmul` whose operands, result and epilogue
operands are all f32 — 2-D products, products of rank-1 operands (a row or a column), batched
products (up to two batch axes, broadcast as ONNX MatMul broadcasts them), with or without the
epilogue `fuse` gave it (its extra operands read through their broadcast strides).  An operand a
`kernel.permute` produced is read from the permutation's source through permuted strides (the
permutation is dropped when nothing else reads it), as the library kernel reads it.  Products of
other element types keep the library kernel.

The block shape follows the product's extents (a bound on a symbolic one, else 64): BM and BN are
the powers of two holding M and N, at most 64 each and 256 elements together (the larger halved
first), BK is 16.  A decode step's [1, K] x [K, N] runs as [1, 64] blocks, a large product as
[16, 16] blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from loam.core.derived import ceildiv
from loam.core.poly import poly_product
from loam.dialects import build_contract as contract
from loam.dialects.kernel import MatmulOp, PermuteOp, TileProgramOp
from loam.passes.tile_kernels import matmul_tiles
from loam.passes.tile_strides import (
    Extent,
    axes_type,
    block,
    broadcast_strides,
    plain,
    row_major,
    strided_operand,
)

BLOCK_K = 16
"""The contraction's step: each trip loads a [BM, 16] tile of A and a [16, BN] tile of B."""
MAX_BLOCK = 64
"""The most rows (columns) of the result one program computes."""
MAX_OUTPUTS = 256
"""The most result elements one program computes (4 for each of the workgroup's 64 invocations)."""


def blocks(m: Extent, n: Extent) -> tuple[int, int, int]:
    """(BM, BN, BK) for an [M, K] x [K, N] product."""
    bm, bn = block(m, MAX_BLOCK), block(n, MAX_BLOCK)
    while bm * bn > MAX_OUTPUTS:
        if bm > bn:
            bm //= 2
        else:
            bn //= 2
    return bm, bn, BLOCK_K


def _grid(m: Extent, n: Extent, batch: Sequence[Extent], bm: int, bn: int) -> tuple[Extent, ...]:
    """`matmul_tiles`'s launch grid: blocks along N, along M, and the batch count when batched."""
    grid = [plain(ceildiv(n, bn)), plain(ceildiv(m, bm))]
    if batch:
        grid.append(plain(poly_product(batch)))
    return tuple(grid)


def tiled_matmul(op: MatmulOp) -> TileProgramOp | None:
    """The tile program computing `op`, or None where the library kernel keeps it."""
    types = [axes_type(v) for v in (op.lhs, op.rhs, op.result, *op.extras)]
    if any(t is None or t.elem.name != "f32" for t in types):
        return None
    a_t, b_t, r_t = types[0], types[1], types[2]
    assert a_t is not None and b_t is not None and r_t is not None
    (a, a_str), (b, b_str) = strided_operand(op.lhs), strided_operand(op.rhs)
    out = list(r_t.shape)
    batch_rank = r_t.rank - (a_t.rank > 1) - (b_t.rank > 1)
    if batch_rank > 2:
        return None
    m = a_t.shape[-2] if a_t.rank > 1 else 1
    k = a_t.shape[-1]
    n = b_t.shape[-1] if b_t.rank > 1 else 1
    a_row, a_k = (a_str[-2] if a_t.rank > 1 else 0), a_str[-1]
    b_k, b_col = (b_str[-2], b_str[-1]) if b_t.rank > 1 else (b_str[-1], 0)
    batch = out[:batch_rank]
    numbers: list[Extent] = [m, n, k, a_row, a_k, b_k, b_col, *batch]
    for t, strides in ((a_t, a_str), (b_t, b_str)):
        own = max(t.rank - 2, 0)
        numbers += broadcast_strides(t.shape[:own], strides[:own], batch_rank)
    m_axis = batch_rank if a_t.rank > 1 else None  # the result's axes: batch..., [M], [N]
    n_axis = r_t.rank - 1 if b_t.rank > 1 else None
    for extra in types[3:]:
        assert extra is not None
        along = broadcast_strides(extra.shape, row_major(extra.shape), r_t.rank)
        numbers += [along[m_axis] if m_axis is not None else 0, along[n_axis] if n_axis is not None else 0]
        numbers += along[:batch_rank]
    bm, bn, bk = blocks(m, n)
    epilogue = op.epilogue.data if op.epilogue is not None else None
    program = matmul_tiles(bm, bn, bk, batch_rank, epilogue, len(op.extras))
    tiled = TileProgramOp(
        [a, b, *op.extras], [r_t], op.node.data, program, _grid(m, n, batch, bm, bn),
        tuple(plain(x) for x in numbers),
    )  # fmt: skip
    fused = contract.FUSED.get(op)  # the nodes the product and its epilogue compute, for the report
    if fused is not None:
        contract.FUSED.set(tiled, fused)
    return tiled


def tile_matmul(module: ModuleOp) -> int:
    """Rewrite every eligible product of `module`; the number rewritten."""
    count = 0
    for op in list(module.walk()):
        if not isinstance(op, MatmulOp):
            continue
        tiled = tiled_matmul(op)
        if tiled is None:
            continue
        permutes = [v.owner for v in (op.lhs, op.rhs) if isinstance(v.owner, PermuteOp)]
        Rewriter.replace_op(op, tiled)
        for permute in dict.fromkeys(permutes):
            if not permute.result.uses:
                Rewriter.erase_op(permute)
        count += 1
    return count


@dataclass(frozen=True)
class TileMatmulPass(ModulePass):
    """Run f32 matrix products as the `matmul_tiles` tile program."""

    name = "tile-matmul"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        tile_matmul(op)
