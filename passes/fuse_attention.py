"""fuse-attention: an export's scaled dot-product attention becomes one `kernel.attention` call.

Why: attention run as written is four to six kernels (Q K^T, the score's scale, mask and bias, the
row softmax, the product with V), each a numpy call with its own temporary of [B, H, Sq, Sk]; in a
decode step that is five Python-level calls per layer for a few thousand multiply-adds, and a
grouped-query export repeats each key/value head for its group first.  One kernel computes the chain
in one call (compiled where numba is, `loam/runtime/kernels/attention.py`), reads each key/value head
once per group of query heads, and reads the keys and values where they are (a DecodeState's past).

Input: kernel IR after `fuse` (and `decode-state-in-place`), before `grouped-heads`.  The chain is
`tile-attention`'s (`match`): a product of Q by K^T, zips each read by the next alone, a softmax over
the last axis, the product with V.  It is rewritten when, besides:
- Q, K^T, V and the scores are float32 and rank 4, Q [B, H, Sq, D], the same B for Q, K and V;
- K^T is `permute [0, 1, 3, 2]` of the keys K [B, G, Sk, D], and K and V are each a head repeated R
  times (`grouped-heads`' `repeated`, G = H / R) or plain (G = H);
- the score expression is select(keep, product / c (or * c, or the product alone), fill) + bias
  with `keep` a bool operand, `fill` a constant and `bias` a float32 operand, each part optional
  (what GPT-2's causal Where and additive mask, and Llama's additive mask, give).
Output: `kernel.attention(K's source..., keep, bias)`; the chain's ops are erased where nothing else
reads them.  The numpy kernel computes the chain's arithmetic in its order, so the fused numpy module
gives the unfused one's numbers; the compiled kernel agrees to float32 rounding.  A build note names
each fused chain's nodes.  The numpy pipeline runs this pass; the WGSL one runs `tile-attention`.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from loam.dialects import build_contract as contract
from loam.dialects.expr import Binary, Const, Expr, Operand, Select
from loam.dialects.kernel import AttentionOp, MatmulOp, PermuteOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.passes.grouped_heads import repeated
from loam.passes.notes import add_notes
from loam.passes.tile_attention import Attention, match


@dataclass(frozen=True)
class ScoreForm:
    """A score expression as select(keep, product / scale (or * scale), fill) + bias: the operand
    index (of `Attention.score`'s operands, 1 on) of `keep` and of `bias`, None where absent."""

    scale: float
    divide: bool
    keep: int | None
    fill: float
    bias: int | None


def score_form(expr: Expr) -> ScoreForm | None:
    """`expr` (operand 0 the product) as a `ScoreForm`, or None where it has another form."""
    steps = expr.steps

    def operand(at: int) -> int | None:
        step = steps[at]
        return step.index if isinstance(step, Operand) else None

    at = len(steps) - 1
    bias = keep = None
    fill, scale, divide = 0.0, 1.0, False
    step = steps[at]
    if isinstance(step, Binary) and step.op == "add":
        for term, other in ((step.rhs, step.lhs), (step.lhs, step.rhs)):
            if (operand(term) or 0) > 0:
                bias, at = operand(term), other
                break
        else:
            return None
    step = steps[at]
    if isinstance(step, Select):
        fill_step = steps[step.b]
        if (operand(step.cond) or 0) < 1 or not isinstance(fill_step, Const) or fill_step.elem != "f32":
            return None
        keep, fill, at = operand(step.cond), fill_step.value, step.a
    step = steps[at]
    if isinstance(step, Binary) and step.op in ("div", "mul"):
        constant = steps[step.rhs]
        if not isinstance(constant, Const) or constant.elem != "f32":
            return None
        scale, divide, at = constant.value, step.op == "div", step.lhs
    if operand(at) != 0:
        return None
    return ScoreForm(scale, divide, keep, fill, bias)


def _f32(value: SSAValue, rank: int | None = 4) -> AxesTensorType | None:
    t = value.type
    ok = isinstance(t, AxesTensorType) and t.elem.name == "f32" and (rank is None or t.rank == rank)
    return t if ok and isinstance(t, AxesTensorType) else None


def _heads(value: SSAValue) -> tuple[SSAValue, int]:
    """The heads `value` reads and how many times the graph repeats each (1: none)."""
    found = repeated(value)
    return (found[0], found[1]) if found is not None else (value, 1)


def fused_attention(chain: Attention) -> AttentionOp | None:
    """The `kernel.attention` computing `chain`, or None where its kernels stay."""
    scores, output = chain.scores, chain.output
    if any(_f32(v) is None for v in (scores.lhs, scores.rhs, output.rhs, scores.result, output.result)):
        return None
    transpose = scores.rhs.owner
    if not isinstance(transpose, PermuteOp) or transpose.permutation != (0, 1, 3, 2):
        return None
    (k, k_repeats), (v, v_repeats) = _heads(transpose.input), _heads(output.rhs)
    q_t, k_t, v_t = _f32(scores.lhs), _f32(k), _f32(v)
    if k_repeats != v_repeats or q_t is None or k_t is None or v_t is None:
        return None
    # One batch (no broadcast between Q, K and V), and each key head read by `repeats` query heads.
    if not q_t.shape[0] == k_t.shape[0] == v_t.shape[0] or q_t.shape[1] != k_t.shape[1] * k_repeats:
        return None
    score, extras = chain.score()
    form = score_form(score)
    if form is None:
        return None
    keep = [extras[form.keep - 1]] if form.keep is not None else []
    bias = [extras[form.bias - 1]] if form.bias is not None else []
    keep_t = keep[0].type if keep else None
    if keep and not (isinstance(keep_t, AxesTensorType) and keep_t.elem.name == "bool" and keep_t.rank <= 4):
        return None
    if bias and _f32(bias[0], None) is None:
        return None
    fused = AttentionOp(
        [scores.lhs, k, v, *keep, *bias], [output.result.type], output.node.data, scale=form.scale,
        divide=int(form.divide), masked=int(bool(keep)), fill=form.fill, biased=int(bool(bias)),
    )  # fmt: skip
    contract.FUSED.set(fused, tuple(chain.nodes()))
    return fused


def fuse_attention(module: ModuleOp) -> int:
    """Rewrite every attention chain of `module` that `fused_attention` takes, with a build note naming
    its nodes; the number rewritten."""
    notes: list[str] = []
    for op in list(module.walk()):
        if not isinstance(op, MatmulOp) or op.parent is None:
            continue
        chain = match(op)
        fused = fused_attention(chain) if chain is not None else None
        if chain is None or fused is None:
            continue
        transpose = chain.scores.rhs.owner
        assert isinstance(transpose, PermuteOp)  # `fused_attention` read the keys through it
        # The repeats of the keys and values (none: plain heads), erased where nothing else reads them.
        repeats = [found[2] for found in (repeated(transpose.input), repeated(op.rhs)) if found is not None]
        Rewriter.replace_op(op, fused)
        dead: list[Operation] = [chain.softmax, *reversed(chain.zips), chain.scores, transpose]
        dead += [o for chain_ops in repeats for o in chain_ops]
        for erased in dict.fromkeys(dead):
            if erased.parent is not None and not any(r.uses for r in erased.results):
                Rewriter.erase_op(erased)
        notes.append(
            f"nodes {', '.join(repr(n) for n in chain.nodes())}: one attention kernel (scores, softmax and the "
            "product with V in one call, each key/value head read once per group)"
        )
    if notes:
        add_notes(module, notes)
    return len(notes)


@dataclass(frozen=True)
class FuseAttentionPass(ModulePass):
    """Compute scaled dot-product attention as one `kernel.attention` call."""

    name = "fuse-attention"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fuse_attention(op)
