"""Scaled dot-product attention as one library kernel: `kernel.attention` (`fuse-attention` makes it).

softmax(score(Q K^T)) V over the last axis, where the score is the product scaled, then optionally
masked (ONNX Where with a constant) and biased (an additive mask): the four to six kernels an export
computes attention with, in one call that can read each key and value head once per group of query
heads (grouped-query attention) and never stores the scores.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from loam.core.poly import Poly
from loam.dialects.kernel.library import LibraryOp, library_types, require


@irdl_op_definition
class AttentionOp(LibraryOp):
    """softmax(score) V with score = select(keep, Q K^T / scale (or * scale), fill) + bias.

    Operands: Q [B, H, Sq, D], K [B, G, Sk, D] (the keys' rows, not transposed), V [B, G, Sk, Dv],
    then `keep` (bool, where `masked` is 1) and `bias` (where `biased` is 1), each broadcasting to the
    scores [B, H, Sq, Sk].  H is a multiple of G: query head h reads key and value head h // (H / G).
    `divide` 1 divides the product by `scale`, 0 multiplies it; `fill` is the masked scores' value.
    The softmax is ONNX Softmax over the keys' axis (a row whose every score is -inf gives NaN, as
    the chain does).  The result is [B, H, Sq, Dv], float32 like every operand but `keep`.

    Example: `%o = kernel.attention(%q, %k, %v, %bias) {node = "a", scale = 8.0 : f64, divide = 1 : i64,
    masked = 0 : i64, fill = 0.0 : f64, biased = 1 : i64} : (Q, K, V, M) -> O`
    """

    name = "kernel.attention"
    PARAMS: ClassVar[dict[str, type]] = {"scale": float, "divide": int, "masked": int, "fill": float, "biased": int}
    FUSES: ClassVar[bool] = True  # `fuse-attention` names the chain's nodes on it (`fused`)

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        extras = self.param("masked") + self.param("biased")
        require(
            self, len(ins) == 3 + extras and len(outs) == 1, f"takes Q, K, V and {extras} mask(s), gives one result"
        )
        q, k, v, o = ins[0], ins[1], ins[2], outs[0]
        if q is None or k is None or v is None or o is None:
            return
        require(self, len(q) == len(k) == len(v) == len(o) == 4, "Q, K, V and the result are rank 4")
        # Extents are compared where both are numbers: the graph may spell one extent two ways (GPT-2's query
        # rows are `sequence_length` in Q and a min/max of the lengths in the scores).
        for a, b, what in (
            (q[3], k[3], "Q and K share D"),
            (k[2], v[2], "K and V share the keys' axis"),
            (k[1], v[1], "K and V have the same heads"),
            (q[0], k[0], "Q and K have the same batch"),
            (k[0], v[0], "K and V have the same batch"),
            (o[1], q[1], "the result has Q's heads"),
            (o[3], v[3], "the result's rows are V's width"),
        ):
            require(self, not _both_numbers(a, b) or a == b, what)
        if _both_numbers(q[1], k[1]):
            require(self, q[1].const_value % k[1].const_value == 0, "Q's heads are a multiple of K's")


def _both_numbers(a: Poly, b: Poly) -> bool:
    return a.is_const and b.is_const


ATTENTION_OPS: tuple[type[LibraryOp], ...] = (AttentionOp,)
