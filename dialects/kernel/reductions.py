"""Library kernels that reduce along axes: ONNX's Reduce* (`REDUCE_KINDS`), ArgMax/ArgMin, TopK,
CumSum, CumProd and the softmax family, listed in `REDUCE_OPS`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition
from xdsl.utils.exceptions import VerifyException

from loam.dialects.kernel.library import LibraryOp, check_axes, kernel_rank

REDUCE_KINDS = frozenset({"sum", "mean", "max", "min", "prod", "l1", "l2", "log_sum", "log_sum_exp", "sum_square"})
"""The reductions `kernel.reduce` computes (ONNX's Reduce* operators, in snake case)."""


@irdl_op_definition
class ReduceOp(LibraryOp):
    """ONNX Reduce*: `kind` over the (non-negative, resolved) `axes`, keeping them as extent 1 with `keepdims`.

    An axis of extent 0 reduces to the identity of the reduction (0 for sums, 1 for a product,
    the lowest value for a maximum, NaN for a mean).

    Example:
        %s = kernel.reduce(%x) {node = "r", kind = "sum", axes = array<i64: 1>, keepdims = 1 : i64}
             : (!tensor_axes.tensor<f32, [N: 2, C: 3]>) -> !tensor_axes.tensor<f32, [N: 2, Unit: 1]>
    """

    name = "kernel.reduce"
    PARAMS: ClassVar[dict[str, type]] = {"kind": str, "axes": tuple, "keepdims": int}

    def verify_kernel(self) -> None:
        if self.param("kind") not in REDUCE_KINDS:
            raise VerifyException(f"kernel.reduce '{self.node.data}': unknown kind {self.param('kind')!r}")
        check_axes(self, self.param("axes"), kernel_rank(self, self.inputs[0]))


@irdl_op_definition
class ArgReduceOp(LibraryOp):
    """ONNX ArgMax/ArgMin: the i64 index of the first (or, with `select_last_index`, last) extreme along `axis`."""

    name = "kernel.arg_reduce"
    PARAMS: ClassVar[dict[str, type]] = {"kind": str, "axis": int, "keepdims": int, "select_last_index": int}

    def verify_kernel(self) -> None:
        if self.param("kind") not in ("max", "min"):
            raise VerifyException(f"kernel.arg_reduce '{self.node.data}': kind must be 'max' or 'min'")
        check_axes(self, (self.param("axis"),), kernel_rank(self, self.inputs[0]))


@irdl_op_definition
class TopKOp(LibraryOp):
    """ONNX TopK: the `k` largest (or smallest) values along `axis` and their i64 indices, ties by lower index.

    Without the parameter `k`, a second operand holds k as the run gives it, and the results'
    extent along `axis` is a length only the run knows.
    """

    name = "kernel.topk"
    PARAMS: ClassVar[dict[str, type]] = {"k": int, "axis": int, "largest": int, "sorted": int}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"k"})

    def verify_kernel(self) -> None:
        if len(self.outputs) != 2:
            raise VerifyException(f"kernel.topk '{self.node.data}': has two results, values and indices")
        if len(self.inputs) != (1 if "k" in self.attributes else 2):
            raise VerifyException(f"kernel.topk '{self.node.data}': takes k as a parameter or as a second operand")
        check_axes(self, (self.param("axis"),), kernel_rank(self, self.inputs[0]))


@irdl_op_definition
class CumSumOp(LibraryOp):
    """ONNX CumSum along `axis`, `exclusive` (each sum leaves its own element out) and/or `reverse`."""

    name = "kernel.cumsum"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "exclusive": int, "reverse": int}

    def verify_kernel(self) -> None:
        check_axes(self, (self.param("axis"),), kernel_rank(self, self.inputs[0]))


@irdl_op_definition
class CumProdOp(LibraryOp):
    """ONNX CumProd along `axis`, `exclusive` (each product leaves its own element out) and/or `reverse`."""

    name = "kernel.cumprod"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "exclusive": int, "reverse": int}

    def verify_kernel(self) -> None:
        check_axes(self, (self.param("axis"),), kernel_rank(self, self.inputs[0]))


@irdl_op_definition
class SoftmaxOp(LibraryOp):
    """ONNX Softmax/LogSoftmax/Hardmax (`kind`), normalising over the `axes` jointly.

    From opset 13 `axes` is one axis; before, it is every axis from ONNX's `axis` on (the input
    flattened to 2-D at `axis`).  Hardmax marks the first maximum of the joint block.
    """

    name = "kernel.softmax"
    PARAMS: ClassVar[dict[str, type]] = {"kind": str, "axes": tuple}

    def verify_kernel(self) -> None:
        if self.param("kind") not in ("softmax", "log_softmax", "hardmax"):
            raise VerifyException(f"kernel.softmax '{self.node.data}': unknown kind {self.param('kind')!r}")
        check_axes(self, self.param("axes"), kernel_rank(self, self.inputs[0]))


REDUCE_OPS: tuple[type[LibraryOp], ...] = (ReduceOp, ArgReduceOp, TopKOp, CumSumOp, CumProdOp, SoftmaxOp)
