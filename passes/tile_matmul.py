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
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from loam.core.derived import bounds_of, ceildiv
from loam.core.poly import Poly, poly_product
from loam.dialects import build_contract as contract
from loam.dialects.kernel import MatmulOp, PermuteOp, TileProgramOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.passes.tile_kernels import matmul_tiles

BLOCK_K = 16
"""The contraction's step: each trip loads a [BM, 16] tile of A and a [16, BN] tile of B."""
MAX_BLOCK = 64
"""The most rows (columns) of the result one program computes."""
MAX_OUTPUTS = 256
"""The most result elements one program computes (4 for each of the workgroup's 64 invocations)."""

Extent = Poly | int


def _type(value: SSAValue) -> AxesTensorType | None:
    t = value.type
    return t if isinstance(t, AxesTensorType) else None


def _row_major(shape: Sequence[Extent]) -> list[Extent]:
    strides: list[Extent] = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = Poly.lift(strides[k + 1]) * shape[k + 1]
    return strides


def _plain(e: Extent) -> Extent:
    """A constant Poly as an int (so the params print as a plain array)."""
    return e.const_value if isinstance(e, Poly) and e.is_const else e


def _is_one(e: Extent) -> bool:
    return _plain(e) == 1


def longest(extent: Extent) -> int:
    """The largest value `extent` takes (its bound where it is symbolic)."""
    return extent if isinstance(extent, int) else (extent.const_value if extent.is_const else bounds_of(extent).hi)


def _block(extent: Extent, cap: int) -> int:
    """The smallest power of two holding every value of `extent`, at most `cap`."""
    block = 1
    while block < min(longest(extent), cap):
        block *= 2
    return block


def blocks(m: Extent, n: Extent) -> tuple[int, int, int]:
    """(BM, BN, BK) for an [M, K] x [K, N] product."""
    bm, bn = _block(m, MAX_BLOCK), _block(n, MAX_BLOCK)
    while bm * bn > MAX_OUTPUTS:
        if bm > bn:
            bm //= 2
        else:
            bn //= 2
    return bm, bn, BLOCK_K


def _operand(value: SSAValue) -> tuple[SSAValue, list[Extent]]:
    """The tensor a product reads for `value` and its element strides over `value`'s axes: a
    permutation's source through permuted strides, else `value` itself, row-major."""
    owner = value.owner
    if isinstance(owner, PermuteOp):
        source = owner.operands[0]
        t = _type(source)
        if t is not None:
            strides = _row_major(t.shape)
            return source, [strides[p] for p in owner.permutation]
    t = _type(value)
    assert t is not None
    return value, _row_major(t.shape)


def _broadcast_strides(shape: Sequence[Extent], strides: Sequence[Extent], rank: int) -> list[Extent]:
    """`strides` right-aligned to `rank` axes, 0 along a missing axis or one of extent 1."""
    out: list[Extent] = [0] * rank
    for j, (e, s) in enumerate(zip(shape, strides, strict=True)):
        if not _is_one(e):
            out[rank - len(shape) + j] = s
    return out


def _grid(m: Extent, n: Extent, batch: Sequence[Extent], bm: int, bn: int) -> tuple[Extent, ...]:
    """`matmul_tiles`'s launch grid: blocks along N, along M, and the batch count when batched."""
    grid = [_plain(ceildiv(n, bn)), _plain(ceildiv(m, bm))]
    if batch:
        grid.append(_plain(poly_product(batch)))
    return tuple(grid)


def tiled_matmul(op: MatmulOp) -> TileProgramOp | None:
    """The tile program computing `op`, or None where the library kernel keeps it."""
    types = [_type(v) for v in (op.lhs, op.rhs, op.result, *op.extras)]
    if any(t is None or t.elem.name != "f32" for t in types):
        return None
    a_t, b_t, r_t = types[0], types[1], types[2]
    assert a_t is not None and b_t is not None and r_t is not None
    (a, a_str), (b, b_str) = _operand(op.lhs), _operand(op.rhs)
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
        numbers += _broadcast_strides(t.shape[:own], strides[:own], batch_rank)
    m_axis = batch_rank if a_t.rank > 1 else None  # the result's axes: batch..., [M], [N]
    n_axis = r_t.rank - 1 if b_t.rank > 1 else None
    for t in types[3:]:
        assert t is not None
        along = _broadcast_strides(t.shape, _row_major(t.shape), r_t.rank)
        numbers += [along[m_axis] if m_axis is not None else 0, along[n_axis] if n_axis is not None else 0]
        numbers += along[:batch_rank]
    bm, bn, bk = blocks(m, n)
    epilogue = op.epilogue.data if op.epilogue is not None else None
    program = matmul_tiles(bm, bn, bk, batch_rank, epilogue, len(op.extras))
    tiled = TileProgramOp(
        [a, b, *op.extras], [r_t], op.node.data, program, _grid(m, n, batch, bm, bn),
        tuple(_plain(x) for x in numbers),
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
