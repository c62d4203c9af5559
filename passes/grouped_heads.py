"""grouped-heads: a product over key/value heads that the graph repeats for grouped-query attention reads
them once per group instead of materializing the repeats.

Why: a grouped-query attention export (Llama, Qwen, SmolLM2 from optimum or torch) repeats each of its G
key/value heads R times before the two attention products: `Unsqueeze` to [B, G, 1, L, D], `Expand` to
[B, G, R, L, D], `Reshape` to [B, G*R, L, D] (transformers' `repeat_kv`).  Run as written, that is a copy of
the whole past, R times over, for keys and for values, in every layer and every decode step: SmolLM2
(G = 3, R = 3) copies 9 heads' worth of past to multiply with 9 query heads.  Query head h = g*R + r reads
key head g, so the product needs no repeat: the queries regrouped to [B, G, R*S, D] times the keys
[B, G, D, L] give [B, G, R*S, L], which is the scores [B, G*R, S, L] in the same row-major order.  The same
holds for the values: probabilities [B, G, R*S, L] times [B, G, L, D].

Input: kernel IR after `fuse`.  A `kernel.matmul` is rewritten when its right operand is
`regroup(zip(regroup(X)))`, optionally then `permute [0, 1, 3, 2]`, where X is [B, G, L, D], the first
regroup inserts a unit axis at 2, the zip is the identity broadcast to [B, G, R, L, D] (ONNX Expand), the
second regroup merges axes 1 and 2, and the left operand is [B, G*R, S, K].
Output: `regroup(lhs)` to [B, G, R*S, K], the product with X (or `permute X [0, 1, 3, 2]`), and a regroup
back to the original result; an epilogue the product had becomes a zip after that regroup.  The repeat
chain is erased where nothing else reads it.  The numbers are the same products of the same values, so
they agree to float32 rounding (BLAS may sum in another order for another matrix shape).  The build notes
count the products.  The numpy backend runs this pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from loam.core.poly import Poly
from loam.dialects.expr import Operand
from loam.dialects.kernel import MatmulOp, PermuteOp, ProgramOp, RegroupOp, ZipOp
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.passes.notes import add_notes


@dataclass(frozen=True)
class GroupedHeadsPass(ModulePass):
    """Multiply grouped-query attention's repeated key/value heads once per group, without the repeat."""

    name = "grouped-heads"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        count = 0
        for program in [p for p in op.walk() if isinstance(p, ProgramOp)]:
            for matmul in [o for o in program.walk() if isinstance(o, MatmulOp)]:
                count += _rewrite(matmul)
        if count:
            add_notes(op, [f"grouped heads: {count} attention product(s) read their key/value heads once per group "
                           "instead of a repeated copy (grouped-query attention's Expand)"])  # fmt: skip


def repeated(value: SSAValue) -> tuple[SSAValue, int, list[Operation]] | None:
    """(X, R, the chain's ops) when `value` is X [B, G, L, D] with each head repeated R times as axis 1."""
    merge = value.owner
    if not isinstance(merge, RegroupOp):
        return None
    expand = merge.input.owner
    if not isinstance(expand, ZipOp) or len(expand.inputs) != 1:
        return None
    steps = expand.expr.data.steps
    if len(steps) != 1 or not isinstance(steps[0], Operand) or steps[0].index != 0:
        return None
    unsqueeze = expand.inputs[0].owner
    if not isinstance(unsqueeze, RegroupOp):
        return None
    x = unsqueeze.input
    types = [t for v in (x, unsqueeze.result, expand.result, merge.result) if isinstance(t := v.type, AxesTensorType)]
    if len(types) != 4:
        return None
    xt, ut, et, mt = (t.shape for t in types)
    if len(xt) != 4 or list(ut) != [xt[0], xt[1], Poly.lift(1), xt[2], xt[3]]:
        return None
    if len(et) != 5 or not et[2].is_const or [et[0], et[1], et[3], et[4]] != list(xt):
        return None
    repeats = et[2].const_value
    if list(mt) != [xt[0], xt[1] * repeats, xt[2], xt[3]]:
        return None
    return x, repeats, [merge, expand, unsqueeze]


def _rewrite(matmul: MatmulOp) -> int:
    rhs = matmul.rhs
    permute = rhs.owner if isinstance(rhs.owner, PermuteOp) and rhs.owner.permutation == (0, 1, 3, 2) else None
    transposed = permute is not None
    found = repeated(permute.input if permute is not None else rhs)
    if found is None:
        return 0
    x, repeats, chain = found
    lhs_t, x_t, out_t = (v.type for v in (matmul.lhs, x, matmul.result))
    assert isinstance(lhs_t, AxesTensorType) and isinstance(x_t, AxesTensorType) and isinstance(out_t, AxesTensorType)
    if lhs_t.rank != 4 or out_t.rank != 4 or lhs_t.shape[1] != x_t.shape[1] * repeats:
        return 0
    batch, heads = x_t.axes[0], x_t.axes[1]
    expanded = chain[1].results[0].type
    assert isinstance(expanded, AxesTensorType)  # `repeated` read every type of the chain
    group = expanded.axes[2]
    rows, k = lhs_t.axes[2], lhs_t.axes[3]
    node = matmul.node.data
    merged = Axis.merged((group.name, rows.name), rows.extent * repeats)
    ops: list[Operation] = [RegroupOp(matmul.lhs, AxesTensorType(lhs_t.elem, [batch, heads, merged, k]), node)]
    right: SSAValue = x
    if transposed:
        x_axes = x_t.axes
        ops.append(PermuteOp(x, (0, 1, 3, 2), AxesTensorType(x_t.elem, [*x_axes[:2], x_axes[3], x_axes[2]]), node))
        right = ops[-1].results[0]
    last = out_t.axes[3]
    ops.append(MatmulOp(ops[0].results[0], right, AxesTensorType(out_t.elem, [batch, heads, merged, last]), node))
    ops.append(RegroupOp(ops[-1].results[0], out_t, node))
    if matmul.epilogue is not None:
        ops.append(ZipOp([ops[-1].results[0], *matmul.extras], matmul.epilogue, out_t, node))
    ops[-1].attributes.update(matmul.attributes)  # the nodes `fuse` folded into the product (`fused`)
    Rewriter.insert_op(ops, InsertPoint.before(matmul))
    matmul.result.replace_all_uses_with(ops[-1].results[0])
    Rewriter.erase_op(matmul)
    for dead in ([rhs.owner] if transposed else []) + chain:
        if isinstance(dead, Operation) and not any(True for r in dead.results for _ in r.uses):
            Rewriter.erase_op(dead)
    return 1
