"""Library kernels over the spatial axes, their geometry settled by the build: convolution,
transposed convolution, pooling and resize (ONNX Conv, ConvTranspose, the pools, Resize), listed in
`CONV_OPS`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition
from xdsl.utils.exceptions import VerifyException

from loam.dialects.kernel.library import LibraryOp


@irdl_op_definition
class ConvOp(LibraryOp):
    """ONNX Conv with its geometry resolved: `(x, w[, b])`, explicit begin/end `pads`, `group`."""

    name = "kernel.conv"
    PARAMS: ClassVar[dict[str, type]] = {"strides": tuple, "pads": tuple, "dilations": tuple, "group": int}


@irdl_op_definition
class ConvTransposeOp(LibraryOp):
    """ONNX ConvTranspose: `(x, w[, b])`; `pads` crop the full scatter, `output_padding` extends its end."""

    name = "kernel.conv_transpose"
    PARAMS: ClassVar[dict[str, type]] = {
        "strides": tuple,
        "pads": tuple,
        "dilations": tuple,
        "group": int,
        "output_padding": tuple,
    }


@irdl_op_definition
class PoolOp(LibraryOp):
    """Max/average/Lp pooling over the axes after N and C; with two results max also gives indices."""

    name = "kernel.pool"
    PARAMS: ClassVar[dict[str, type]] = {
        "mode": str,
        "kernel_shape": tuple,
        "strides": tuple,
        "pads": tuple,
        "dilations": tuple,
        "out_shape": tuple,
        "count_include_pad": int,
        "p": float,
        "storage_order": int,
        "indices": int,
        "nan_rule": str,
    }
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"count_include_pad", "p", "storage_order", "indices", "nan_rule"})

    def verify_kernel(self) -> None:
        if self.param("mode") not in ("max", "avg", "lp"):
            raise VerifyException(f"{self.name} '{self.node.data}': mode must be max, avg or lp")
        if self.params.get("nan_rule", "ignore") not in ("ignore", "first"):
            raise VerifyException(f"{self.name} '{self.node.data}': nan_rule must be ignore or first")


@irdl_op_definition
class ResizeOp(LibraryOp):
    """ONNX Resize with the output extents (`sizes`) and the mapping's `scales` settled by the build."""

    name = "kernel.resize"
    PARAMS: ClassVar[dict[str, type]] = {
        "mode": str,
        "coordinate_mode": str,
        "nearest_mode": str,
        "scales": tuple,
        "sizes": tuple,
        "roi": tuple,
        "cubic_coeff_a": float,
        "exclude_outside": int,
        "extrapolation_value": float,
    }
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"roi", "cubic_coeff_a", "exclude_outside", "extrapolation_value"})


CONV_OPS: tuple[type[LibraryOp], ...] = (ConvOp, ConvTransposeOp, PoolOp, ResizeOp)
