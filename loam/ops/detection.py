"""Object detection: ONNX NonMaxSuppression (opsets 10 and 11), as onnxruntime computes it.

The rule lowers to one library kernel (`kernel.non_max_suppression`, computed by
`loam/runtime/kernels/indexing.py`).  How many boxes it selects depends on the values (scores,
thresholds, overlaps), so the result's first extent is a length only the run knows
(`result_length`), bound once the node has run.  max_output_boxes_per_class, iou_threshold and
score_threshold are values read at run time, not extents: the build need not know them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import dtypes, owed
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, int_attr, require_arity
from loam.ops.operands import emit_library, given, is_symbolic, optional, present_bits
from loam.runtime.errors import DataError
from loam.runtime.kernels.indexing import kernel_non_max_suppression

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

# The optional scalar operands (after boxes and scores), their element types and their `present` bits.
SCALARS: tuple[tuple[str, str, int], ...] = (
    ("max_output_boxes_per_class", "i64", 1),
    ("iou_threshold", "f32", 2),
    ("score_threshold", "f32", 4),
)


class NonMaxSuppressionRule(OpRule):
    """ONNX NonMaxSuppression (opset 10): per batch and class, the boxes taken greedily by descending
    score that overlap no box taken before by more than iou_threshold, at most
    max_output_boxes_per_class of them, as [batch, class, box] rows (i64).  How many is a length only
    the run knows."""

    op_types = ("NonMaxSuppression",)
    kernels: tuple[str, ...] = ("kernel.non_max_suppression",)
    attributes = frozenset({"center_point_box"})
    first_opset = 10
    elem_types = ("f32",)
    limitations = (
        "the optional scalars are one value each (a scalar or a one-element vector); an iou_threshold "
        "outside [0, 1] raises the module's DataError at run time (as onnxruntime refuses it)"
    )

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 5)
        boxes, scores = given(node, inputs, 0, "boxes"), given(node, inputs, 1, "scores")
        for what, box_or_score in (("boxes", boxes), ("scores", scores)):
            if box_or_score.elem.name != "f32":
                raise node.unsupported(f"{what} has element type {box_or_score.elem.name}; ONNX takes f32")
            if box_or_score.rank != 3:
                raise node.fail(f"{what} must have rank 3, got {box_or_score.rank}")
        owed.require_equal(boxes.shape[0], scores.shape[0], node, "the batches of boxes and scores")
        owed.require_equal(boxes.shape[1], scores.shape[2], node, "the boxes of boxes and scores")
        owed.require_equal(boxes.shape[2], Poly.const(4), node, "the coordinates of a box")
        for k, (what, elem, _) in enumerate(SCALARS, start=2):
            f = optional(inputs, k)
            if f is None:
                continue
            if f.elem.name != elem:
                raise node.fail(f"{what} has element type {f.elem.name}; ONNX takes {elem}")
            if f.static_shape() not in ((), (1,)):
                raise node.unsupported(f"{what} must be one value (a scalar or a one-element vector)")
        center = int_attr(node, "center_point_box", 0, (0, 1))
        i64 = dtypes.by_name("i64")
        present = [f for f in inputs if f is not None]
        if all(f.value is not None and not is_symbolic(f) for f in present):
            values = [np.asarray(f.value) for f in present]
            try:
                value = kernel_non_max_suppression(*values, present=present_bits(inputs[2:]), center_point_box=center)
            except DataError as err:  # a constant iou_threshold outside [0, 1]: the graph is wrong
                raise node.fail(str(err)) from None
            return [Facts(i64, tuple(Poly.const(d) for d in value.shape), value)]
        return [Facts(i64, (node.result_length(0, 0), Poly.const(3)))]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        return [(None, None)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import NonMaxSuppressionOp

        present = [v for v in operands if v is not None]
        center = int_attr(node, "center_point_box", 0, (0, 1))
        op = NonMaxSuppressionOp(
            present, [ctx.result_types[0]], node.name, present=present_bits(operands[2:]), center_point_box=center
        )
        return emit_library(ctx, op)


RULES: tuple[OpRule, ...] = (NonMaxSuppressionRule(),)
