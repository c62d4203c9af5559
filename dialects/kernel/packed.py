"""Library kernels over weights kept in a checkpoint's ggml block form (Q4_0, Q4_1, Q8_0): a product
and a gather that widen the blocks as they go, listed in `PACKED_OPS`.

The `pack-quantized` pass gives these kernels the products and gathers that read such a weight.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from loam.dialects.kernel.library import LibraryOp, library_types, require


@irdl_op_definition
class MatmulPackedOp(LibraryOp):
    """x @ W^T (`transposed = 1`: an ONNX MatMul of x by Transpose(W), a linear layer's W [N, K]) or
    x @ W (`transposed = 0`: W [K, N]) over a weight that `Weights` may keep in ggml's block form
    (Q4_0, Q4_1, Q8_0, blocks along W's rows); `pack-quantized` gives products this kernel.

    Example: `%y = kernel.matmul_packed(%x, %w) {node = "q", transposed = 1 : i64} : (X [.., K], W [N, K]) -> Y [.., N]`
    """

    name = "kernel.matmul_packed"
    PARAMS: ClassVar[dict[str, type]] = {"transposed": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 2 and len(outs) == 1, "takes x and a weight and gives one result")
        require(self, self.param("transposed") in (0, 1), "transposed is 0 or 1")
        x, w, y = ins[0], ins[1], outs[0]
        if x is not None and w is not None and y is not None:
            require(self, len(w) == 2, "the weight has rank 2")
            k, n = (w[1], w[0]) if self.param("transposed") else (w[0], w[1])
            require(self, len(x) >= 1 and x[-1] == k, "x's last extent is not the weight's K")
            require(self, list(y) == [*x[:-1], n], "the result's extents are not x's with K replaced by N")


@irdl_op_definition
class GatherPackedOp(LibraryOp):
    """ONNX Gather along axis 0 of a weight that `Weights` may keep in ggml's block form: the rows
    picked, then widened (an embedding lookup).

    Example: `%y = kernel.gather_packed(%w, %i) {node = "embed", axis = 0 : i64} : (W, I) -> Y`
    """

    name = "kernel.gather_packed"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 2 and len(outs) == 1, "takes a weight and indices and gives one result")
        require(self, self.param("axis") == 0, "gathers along axis 0 only")
        w, i, y = ins[0], ins[1], outs[0]
        if w is not None and i is not None and y is not None:
            require(self, list(y) == [*i, *w[1:]], "the result's extents are not indices + weight[1:]")


PACKED_OPS: tuple[type[LibraryOp], ...] = (MatmulPackedOp, GatherPackedOp)
