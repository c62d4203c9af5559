"""tile-attention: scaled dot-product attention becomes the `attention_rows` tile program.

Why: attention as four kernels (Q K^T, the score's scale and mask, the row softmax, the product
with V) writes and reads the [Sq, Sk] scores through device memory three times and dispatches four
times; one tile program per query row walks the keys in blocks, keeps the row's running maximum and
sum (the online softmax) and never stores a score.  The WGSL pipeline runs this pass after `fuse`
and before `tile-rows` and `tile-matmul`; `loam-opt -p tile-attention` runs it on any kernel IR.
The numpy pipeline does not: there the four kernels are already three batched BLAS-backed calls
into preallocated buffers and one row softmax, which the tile program's numpy form would not beat.

Rewritten into one `kernel.tile_program`: the chain

    s = kernel.matmul(Q, K^T) [then an epilogue]    (Q [..., Sq, D], K^T [..., D, Sk])
    t = kernel.zip(..., s, ...)                       (none or several, each reading the last)
    p = kernel.softmax(t) over the last axis
    o = kernel.matmul(p, V)                           (V [..., Sk, Dv], no epilogue)

where each link has exactly one reader, Q, K^T, V and every score are f32, the product has at most
two batch axes, D and Dv are at most `MAX_HEAD` (the program holds a row of Q and of the result in
one tile), and the score's other operands broadcast to the scores.  The product's epilogue and the
zips become one score expression; a permuted Q, K^T or V is read from the permutation's source
through permuted strides, as `tile-matmul` reads one.  The op keeps the fused nodes (`fused`) for
the build report.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from loam.core.poly import poly_product
from loam.dialects import build_contract as contract
from loam.dialects.expr import Expr
from loam.dialects.kernel import MatmulOp, PermuteOp, SoftmaxOp, TileProgramOp, ZipOp
from loam.passes.notes import add_notes
from loam.passes.tile_kernels import attention_rows
from loam.passes.tile_strides import (
    Extent,
    axes_type,
    block,
    broadcast_strides,
    longest,
    plain,
    row_major,
    strided_operand,
)

MAX_HEAD = 64
"""The longest row of Q (and of the result) one program holds."""
KEY_TILE = 1024
"""The most elements of a [D, BN] block of K^T (or [BN, Dv] of V) one trip loads: BN = 1024 / D."""


def _only_reader(value: SSAValue) -> Operation | None:
    uses = list(value.uses)
    return uses[0].operation if len(uses) == 1 else None


@dataclass
class Attention:
    """A matched chain: the scores' product, the zips after it, the softmax, the product with V."""

    scores: MatmulOp
    zips: list[ZipOp]
    softmax: SoftmaxOp
    output: MatmulOp

    def score(self) -> tuple[Expr, list[SSAValue]]:
        """The score as one expression (operand 0 the product Q K^T) and its other operands."""
        values: list[SSAValue] = []

        def operand(value: SSAValue) -> Expr:
            if value not in values:
                values.append(value)
            return Expr.operand(1 + values.index(value))

        product = Expr.operand(0)
        if self.scores.epilogue is not None:
            product = self.scores.epilogue.data.substitute([product, *map(operand, self.scores.extras)])
        last: SSAValue = self.scores.result
        for zip_op in self.zips:
            product = zip_op.expr.data.substitute([product if v is last else operand(v) for v in zip_op.inputs])
            last = zip_op.result
        return product, values

    def nodes(self) -> list[str]:
        """The ONNX nodes the chain computes, in order."""
        found: list[str] = []
        for op in (self.scores, *self.zips, self.softmax, self.output):
            fused = contract.FUSED.get(op)
            names = list(fused) if fused is not None else [op.node_name]
            found += [n for n in names if n not in found]
        return found


def _scores(value: SSAValue, reader: Operation) -> tuple[MatmulOp, list[ZipOp]] | None:
    """The product and the zips (last first) that compute `value`, each read by the next alone."""
    owner = value.owner
    if _only_reader(value) is not reader:
        return None
    if isinstance(owner, MatmulOp):
        return owner, []
    if not isinstance(owner, ZipOp):
        return None
    for candidate in dict.fromkeys(owner.inputs):  # the one operand the scores flow through
        if list(owner.inputs).count(candidate) == 1 and isinstance(candidate.owner, (ZipOp, MatmulOp)):
            found = _scores(candidate, owner)
            if found is not None:
                return found[0], [owner, *found[1]]
    return None


def match(output: MatmulOp) -> Attention | None:
    """The attention chain ending at `output` (P @ V), or None."""
    if output.epilogue is not None or output.extras:
        return None
    softmax = output.lhs.owner
    if not isinstance(softmax, SoftmaxOp) or _only_reader(softmax.results[0]) is not output:
        return None
    t = axes_type(softmax.operands[0])
    if t is None or softmax.param("kind") != "softmax" or tuple(softmax.param("axes")) != (t.rank - 1,):
        return None
    found = _scores(softmax.operands[0], softmax)
    if found is None:
        return None
    scores, zips = found
    return Attention(scores, list(reversed(zips)), softmax, output)


def tiled_attention(chain: Attention) -> TileProgramOp | None:
    """The tile program computing `chain`, or None where its kernels stay."""
    scores, output = chain.scores, chain.output
    q_t, k_t, v_t, s_t, p_t, o_t = (
        axes_type(v)
        for v in (scores.lhs, scores.rhs, output.rhs, scores.result, chain.softmax.operands[0], output.result)
    )
    if any(t is None or t.elem.name != "f32" for t in (q_t, k_t, v_t, s_t, p_t, o_t)):
        return None
    assert q_t is not None and k_t is not None and v_t is not None and p_t is not None and o_t is not None
    rank = o_t.rank
    batch_rank = rank - 2
    if not (q_t.rank == k_t.rank == v_t.rank == p_t.rank == rank) or not 0 <= batch_rank <= 2:
        return None
    d, dv = q_t.shape[-1], v_t.shape[-1]
    if max(longest(d), longest(dv)) > MAX_HEAD:
        return None
    score, extras = chain.score()
    extra_types = [t for t in map(axes_type, extras) if t is not None and t.rank <= rank]
    if len(extra_types) != len(extras):
        return None
    dq_tile, dv_tile = max(block(d, MAX_HEAD), 1), max(block(dv, MAX_HEAD), 1)
    key_block = KEY_TILE // max(dq_tile, dv_tile)
    sq, sk = p_t.shape[-2], p_t.shape[-1]
    (q, q_str), (k, k_str), (v, v_str) = (strided_operand(x) for x in (scores.lhs, scores.rhs, output.rhs))
    batch = list(o_t.shape[:batch_rank])
    numbers: list[Extent] = [sq, sk, d, q_str[-2], q_str[-1], k_str[-2], k_str[-1], v_str[-2], v_str[-1], *batch]
    for t, strides in ((q_t, q_str), (k_t, k_str), (v_t, v_str)):
        numbers += broadcast_strides(t.shape[:batch_rank], strides[:batch_rank], batch_rank)
    for t in extra_types:
        along = broadcast_strides(t.shape, row_major(t.shape), rank)
        numbers += [along[-2], along[-1], *along[:batch_rank]]
    numbers.append(dv)
    program = attention_rows(dq_tile, dv_tile, key_block, batch_rank, score, [t.elem.name for t in extra_types])
    grid: tuple[Extent, ...] = (plain(sq),) + ((plain(poly_product(batch)),) if batch_rank else ())
    tiled = TileProgramOp(
        [q, k, v, *extras], [o_t], output.node.data, program, grid if batch_rank else grid[0],
        tuple(plain(x) for x in numbers),
    )  # fmt: skip
    contract.FUSED.set(tiled, tuple(chain.nodes()))
    return tiled


def tile_attention(module: ModuleOp) -> int:
    """Rewrite every attention chain of `module`, with a build note naming its nodes; the number rewritten."""
    notes: list[str] = []
    for op in list(module.walk()):
        if not isinstance(op, MatmulOp) or op.parent is None:
            continue
        chain = match(op)
        tiled = tiled_attention(chain) if chain is not None else None
        if chain is None or tiled is None:
            continue
        permutes = [x.owner for x in (chain.scores.lhs, chain.scores.rhs, op.rhs) if isinstance(x.owner, PermuteOp)]
        Rewriter.replace_op(op, tiled)
        for dead in (chain.softmax, *reversed(chain.zips), chain.scores, *dict.fromkeys(permutes)):
            if not any(r.uses for r in dead.results):
                Rewriter.erase_op(dead)
        notes.append(
            f"nodes {', '.join(repr(n) for n in chain.nodes())}: one attention kernel, a tile program per "
            "query row over blocks of keys (the scores are never stored)"
        )
    if notes:
        add_notes(module, notes)
    return len(notes)


@dataclass(frozen=True)
class TileAttentionPass(ModulePass):
    """Run scaled dot-product attention as the `attention_rows` tile program."""

    name = "tile-attention"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        tile_attention(op)
