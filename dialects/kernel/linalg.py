"""Library kernels of linear algebra beyond `kernel.matmul`: the determinant and the integer
products of quantized models (ONNX Det, MatMulInteger, QLinearMatMul), listed in `LINALG_OPS`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from loam.dialects.kernel.library import LibraryOp, library_types, require


@irdl_op_definition
class DetOp(LibraryOp):
    """ONNX Det: the determinant of each square matrix in the last two axes.

    Example: `%d = kernel.det(%x) {node = "d"} : (!tensor_axes.tensor<f32, [B: 3, M: 2, N: 2]>)
    -> !tensor_axes.tensor<f32, [B: 3]>`
    """

    name = "kernel.det"

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 1 and len(outs) == 1, "takes one operand and gives one result")
        x = ins[0]
        require(self, x is None or (len(x) >= 2 and x[-1] == x[-2]), "the operand's last two extents must be equal")


@irdl_op_definition
class MatmulIntegerOp(LibraryOp):
    """ONNX MatMulInteger: (a - a_zero) @ (b - b_zero) in i32, numpy.matmul's broadcasting; the zero
    points (absent: 0) are one value or, for a, one per row, for b, one per column.  `zeros` says
    which are given (0: none, 1: a's, 2: b's, 3: both), as they follow a and b in that order.

    Example: `%y = kernel.matmul_integer(%a, %b, %za) {node = "m", zeros = 1 : i64} : (A, B, ZA) -> Y`
    """

    name = "kernel.matmul_integer"
    PARAMS: ClassVar[dict[str, type]] = {"zeros": int}

    def verify_kernel(self) -> None:
        ins, _ = library_types(self)
        zeros = self.param("zeros")
        require(self, 0 <= zeros <= 3 and len(ins) == 2 + bin(zeros).count("1"), "zeros must count the zero points")


@irdl_op_definition
class QLinearMatmulOp(LibraryOp):
    """ONNX QLinearMatMul: the i32 product of (a - a_zero) and (b - b_zero), scaled by
    a_scale * b_scale / y_scale, rounded to nearest even, plus y_zero, saturated to the result's type.
    Operands: a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero.

    Example: `%y = kernel.qlinear_matmul(%a, %sa, %za, %b, %sb, %zb, %sy, %zy) {node = "q"} : (...) -> Y`
    """

    name = "kernel.qlinear_matmul"

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 8 and len(outs) == 1, "takes eight operands and gives one result")


LINALG_OPS: tuple[type[LibraryOp], ...] = (DetOp, MatmulIntegerOp, QLinearMatmulOp)
