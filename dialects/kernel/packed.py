"""Library kernels over weights kept packed: a checkpoint's ggml block form (Q4_0, Q4_1, Q8_0) and
onnxruntime's n-bit blocks (`com.microsoft` MatMulNBits, GatherBlockQuantized); products and
gathers that widen the blocks as they go, listed in `PACKED_OPS`.

The `pack-quantized` pass gives the ggml kernels the products and gathers that read such a weight;
the `com.microsoft` rules (`loam/ops/microsoft/quantized.py`) lower to the n-bit ones.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from loam.dialects.kernel.library import LibraryOp, library_types, require


@irdl_op_definition
class MatmulPackedOp(LibraryOp):
    """x @ W^T (`transposed = 1`: an ONNX MatMul of x by Transpose(W), a linear layer's W [N, K]) or
    x @ W (`transposed = 0`: W [K, N]) over a weight that `Weights` may keep in ggml's block form
    (Q4_0, Q4_1, Q8_0, blocks along W's rows); `pack-quantized` gives products this kernel.  `int8 = 1`
    (the `int8_activations` option; absent means 0): x @ W^T over blocks rounds x to int8 per block, as
    llama.cpp does, and multiplies integers.

    Example: `%y = kernel.matmul_packed(%x, %w) {node = "q", transposed = 1 : i64} : (X [.., K], W [N, K]) -> Y [.., N]`
    """

    name = "kernel.matmul_packed"
    PARAMS: ClassVar[dict[str, type]] = {"transposed": int, "int8": int}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"int8"})

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 2 and len(outs) == 1, "takes x and a weight and gives one result")
        require(self, self.param("transposed") in (0, 1), "transposed is 0 or 1")
        require(self, self.params.get("int8", 0) in (0, 1), "int8 is 0 or 1")
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


@irdl_op_definition
class MatmulNbitsOp(LibraryOp):
    """onnxruntime's MatMulNBits: A [.., K] @ W^T (+ bias) for W [N, K] kept as `bits`-bit integers in
    blocks of `block_size` along K (B: uint8 [N, blocks, block_size * bits / 8], low bits first),
    dequantized as (q - zero point) * scale.  Operands: a, b, scales, then those `present` says are
    given, in order (1: zero points, 2: g_idx, 4: bias).  `int8 = 1` (absent means 0): A is rounded to
    int8 per block and multiplied as integers, as onnxruntime does at accuracy_level 4; never with g_idx.

    Example: `%y = kernel.matmul_nbits(%a, %b, %s) {node = "q", k = 64 : i64, n = 32 : i64, bits = 4 : i64,
    block_size = 32 : i64, present = 0 : i64} : (A [.., 64], B [32, 2, 16], S [32, 2]) -> Y [.., 32]`
    """

    name = "kernel.matmul_nbits"
    PARAMS: ClassVar[dict[str, type]] = {
        "k": int, "n": int, "bits": int, "block_size": int, "present": int, "int8": int,
    }  # fmt: skip
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"int8"})

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        present = self.param("present")
        require(self, 0 <= present <= 7, "present is a set of bits 1, 2, 4")
        int8 = self.params.get("int8", 0)
        require(self, int8 in (0, 1), "int8 is 0 or 1")
        require(self, not (int8 and present & 2), "int8 products read no g_idx")
        require(self, len(ins) == 3 + bin(present).count("1") and len(outs) == 1, "present must count the operands")
        require(self, self.param("bits") in (2, 4, 8), "bits is 2, 4 or 8")
        a, b, y = ins[0], ins[1], outs[0]
        if a is not None and b is not None and y is not None:
            require(self, len(b) == 3, "B has rank 3")
            require(self, len(a) >= 1 and a[-1] == self.param("k"), "A's last extent is not K")
            require(
                self, list(y) == [*a[:-1], self.param("n")], "the result's extents are not A's with K replaced by N"
            )


@irdl_op_definition
class GatherBlockQuantizedOp(LibraryOp):
    """onnxruntime's GatherBlockQuantized along axis 0 of data quantized in blocks of `block_size`
    along its last axis: the rows picked, then dequantized as (q - zero point) * scale (an embedding
    lookup).  Uint8 data packs `bits`-bit integers along the last axis, low bits first.  Operands:
    data, indices, scales, then the zero points where `zeros` is 1.

    Example: `%y = kernel.gather_block_quantized(%d, %i, %s) {node = "e", bits = 4 : i64, block_size = 32 : i64,
    zeros = 0 : i64} : (D [100, 32], I [3], S [100, 2]) -> Y [3, 64]`
    """

    name = "kernel.gather_block_quantized"
    PARAMS: ClassVar[dict[str, type]] = {"bits": int, "block_size": int, "zeros": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, self.param("zeros") in (0, 1), "zeros is 0 or 1")
        require(self, len(ins) == 3 + self.param("zeros") and len(outs) == 1, "zeros must count the operands")
        d, i, y = ins[0], ins[1], outs[0]
        if d is not None and i is not None and y is not None:
            require(self, len(y) == len(i) + len(d) - 1, "the result's rank is not the indices' + data's - 1")


PACKED_OPS: tuple[type[LibraryOp], ...] = (MatmulPackedOp, GatherPackedOp, MatmulNbitsOp, GatherBlockQuantizedOp)
