"""Library kernels that compute a loss (ONNX's NegativeLogLikelihoodLoss, and SoftmaxCrossEntropyLoss
after its log-softmax), listed in `LOSS_OPS`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition
from xdsl.utils.exceptions import VerifyException

from loam.dialects.kernel.library import LibraryOp

REDUCTIONS = ("none", "sum", "mean")
"""How a loss reduces its elements: ONNX's `reduction` attribute."""


@irdl_op_definition
class NllLossOp(LibraryOp):
    """ONNX NegativeLogLikelihoodLoss over x [N, C, d...] and integer targets [N, d...], with an
    optional weight [C]: loss = -x[n, target, d...] * weight[target], 0 where the target is
    `ignore_index` (when `ignores`); `reduction` none keeps [N, d...], sum adds them up, mean
    divides that sum by the weights taken (the count of targets not ignored, without weights).

    Example: `%l = kernel.nll_loss(%x, %t) {node = "nll", reduction = "mean", ignore_index = -100 : i64,
    ignores = 1 : i64} : (X, T) -> !tensor_axes.tensor<f32, []>`
    """

    name = "kernel.nll_loss"
    PARAMS: ClassVar[dict[str, type]] = {"reduction": str, "ignore_index": int, "ignores": int}

    def verify_kernel(self) -> None:
        if self.param("reduction") not in REDUCTIONS:
            raise VerifyException(f"kernel.nll_loss '{self.node.data}': reduction {self.param('reduction')!r}")


LOSS_OPS: tuple[type[LibraryOp], ...] = (NllLossOp,)
