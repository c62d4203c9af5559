"""Library kernels over the spatial axes, their geometry settled by the build: convolution,
transposed convolution, the integer convolutions of quantized models, deformable convolution,
Col2Im, pooling, unpooling, region pooling, resize, grid sampling and affine grids (ONNX Conv,
ConvTranspose, ConvInteger, QLinearConv, DeformConv, Col2Im, the pools, MaxUnpool, RoiAlign, Resize,
GridSample, AffineGrid),
listed in `CONV_OPS`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition
from xdsl.utils.exceptions import VerifyException

from loam.core.poly import Poly
from loam.dialects.kernel.library import LibraryOp, check_axes, library_types, require


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
class ConvIntegerOp(LibraryOp):
    """ONNX ConvInteger: the i32 convolution of (x - x_zero) with (w - w_zero), Conv's geometry;
    `zeros` says which zero points follow x and w (0: none, 1: x's, 2: w's, 3: both, in that order).

    Example: `%y = kernel.conv_integer(%x, %w, %zx) {node = "c", zeros = 1 : i64, strides = ...} : (X, W, ZX) -> Y`
    """

    name = "kernel.conv_integer"
    PARAMS: ClassVar[dict[str, type]] = {
        "zeros": int,
        "strides": tuple,
        "pads": tuple,
        "dilations": tuple,
        "group": int,
    }

    def verify_kernel(self) -> None:
        ins, _ = library_types(self)
        zeros = self.param("zeros")
        require(self, 0 <= zeros <= 3 and len(ins) == 2 + bin(zeros).count("1"), "zeros must count the zero points")


@irdl_op_definition
class QLinearConvOp(LibraryOp):
    """ONNX QLinearConv: the i32 convolution of (x - x_zero) with (w - w_zero) plus the i32 bias,
    requantized by x_scale * w_scale / y_scale (f32, nearest even) onto y_zero's type.  Operands: x,
    x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero[, b].

    Example: `%y = kernel.qlinear_conv(%x, %sx, %zx, %w, %sw, %zw, %sy, %zy) {node = "q", ...} : (...) -> Y`
    """

    name = "kernel.qlinear_conv"
    PARAMS: ClassVar[dict[str, type]] = {"strides": tuple, "pads": tuple, "dilations": tuple, "group": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) in (8, 9) and len(outs) == 1, "takes eight or nine operands and gives one result")


@irdl_op_definition
class Col2ImOp(LibraryOp):
    """ONNX Col2Im: the blocks' taps (N, C * prod(block_shape), L) added onto an image (N, C,
    *image_shape), its geometry (`pads` begins then ends) settled by the build.

    Without the parameter `image_shape` (`block_shape`), an operand after x holds it as the run gives
    it (image_shape first), and the extents it decides are lengths only the run knows.

    Example: `%y = kernel.col2im(%x) {node = "c", image_shape = array<i64: 5, 5>, block_shape = ...} : (X) -> Y`
    """

    name = "kernel.col2im"
    PARAMS: ClassVar[dict[str, type]] = {
        "image_shape": tuple,
        "block_shape": tuple,
        "strides": tuple,
        "pads": tuple,
        "dilations": tuple,
    }
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"image_shape", "block_shape"})

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        run = [name for name in ("image_shape", "block_shape") if name not in self.attributes]
        require(
            self,
            len(ins) == 1 + len(run) and len(outs) == 1,
            "takes x, and image_shape and block_shape where they are not parameters, and gives one result",
        )
        nsp = len(self.param("strides"))
        require(
            self,
            all(len(self.param(name)) == nsp for name in ("image_shape", "block_shape") if name not in run)
            and len(self.param("dilations")) == nsp
            and len(self.param("pads")) == 2 * nsp,
            "image_shape, block_shape and dilations need one value per image axis as strides, pads two",
        )


@irdl_op_definition
class MaxUnpoolOp(LibraryOp):
    """ONNX MaxUnpool: `(x, indices)` written into zeros (N, C, *spatial) at the flat positions the
    indices give (onnxruntime's reading); the output's `spatial` extents are settled by the build.

    Example: `%y = kernel.max_unpool(%x, %i) {node = "u", spatial = array<i64: 4, 4>} : (X, I) -> Y`
    """

    name = "kernel.max_unpool"
    PARAMS: ClassVar[dict[str, type]] = {"spatial": tuple}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 2 and len(outs) == 1, "takes two operands and gives one result")


@irdl_op_definition
class RoiAlignOp(LibraryOp):
    """ONNX RoiAlign: `(x, rois, batch_indices)`, each region pooled into an output_height x
    output_width grid of bins by bilinear samples (`mode` avg or max; `half_pixel` 1 for the
    half_pixel coordinate mode, 0 for output_half_pixel).

    Example: `%y = kernel.roi_align(%x, %r, %b) {node = "r", mode = "avg", output_height = 5 : i64, ...}`
    """

    name = "kernel.roi_align"
    PARAMS: ClassVar[dict[str, type]] = {
        "mode": str,
        "output_height": int,
        "output_width": int,
        "sampling_ratio": int,
        "spatial_scale": float,
        "half_pixel": int,
    }

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 3 and len(outs) == 1, "takes three operands and gives one result")
        require(self, self.param("mode") in ("avg", "max"), "mode must be avg or max")


@irdl_op_definition
class DeformConvOp(LibraryOp):
    """ONNX DeformConv over two spatial axes: `(x, w, offset[, b][, mask])`, Conv's geometry with
    each tap moved by its offset and sampled bilinearly; `given` says which of the bias (1) and the
    mask (2) follow, in that order.

    Example: `%y = kernel.deform_conv(%x, %w, %o) {node = "d", given = 0 : i64, offset_group = 1 : i64, ...}`
    """

    name = "kernel.deform_conv"
    PARAMS: ClassVar[dict[str, type]] = {
        "given": int,
        "strides": tuple,
        "pads": tuple,
        "dilations": tuple,
        "group": int,
        "offset_group": int,
    }

    def verify_kernel(self) -> None:
        ins, _ = library_types(self)
        given = self.param("given")
        require(self, 0 <= given <= 3 and len(ins) == 3 + bin(given).count("1"), "given must count the bias and mask")


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
    """ONNX Resize with the output extents (`sizes`) and the mapping's `scales` settled by the build;
    `antialias` 1 stretches the linear or cubic filter by 1 / scale on the axes it shrinks."""

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
        "antialias": int,
    }
    OPTIONAL: ClassVar[frozenset[str]] = frozenset(
        {"roi", "cubic_coeff_a", "exclude_outside", "extrapolation_value", "antialias"}
    )


@irdl_op_definition
class ResizeToOp(LibraryOp):
    """ONNX Resize whose roi, scales or sizes only the run gives: `(x, given...)`, the operands
    `present` names (bit 0: roi, 1: scales, 2: sizes) over the axes `axes`; the result's extents on
    those axes are lengths only the run knows.  The other parameters are `kernel.resize`'s.

    Example: `%y = kernel.resize_to(%x, %sizes) {axes = array<i64: 3, 2>, keep_aspect_ratio_policy = "stretch",
    present = 4 : i64, mode = "linear", coordinate_mode = "half_pixel", nearest_mode = "round_prefer_floor",
    node = "r"} : (X, S) -> Y`
    """

    name = "kernel.resize_to"
    PARAMS: ClassVar[dict[str, type]] = {
        "mode": str,
        "coordinate_mode": str,
        "nearest_mode": str,
        "axes": tuple,
        "keep_aspect_ratio_policy": str,
        "present": int,
        "cubic_coeff_a": float,
        "exclude_outside": int,
        "extrapolation_value": float,
        "antialias": int,
    }
    OPTIONAL: ClassVar[frozenset[str]] = frozenset(
        {"cubic_coeff_a", "exclude_outside", "extrapolation_value", "antialias"}
    )

    def verify_kernel(self) -> None:
        present = self.param("present")
        require(self, isinstance(present, int) and 0 < present < 8, "present must name roi, scales or sizes (1-7)")
        ins, outs = library_types(self)
        require(
            self,
            len(ins) == 1 + bin(present).count("1") and len(outs) == 1,
            "takes x and the operands present names and gives one result",
        )
        require(self, self.param("mode") in ("nearest", "linear", "cubic"), "mode must be nearest, linear or cubic")
        policy = self.param("keep_aspect_ratio_policy")
        require(self, policy in ("stretch", "not_larger", "not_smaller"), "keep_aspect_ratio_policy is not Resize's")
        x, y = ins[0], outs[0]
        if x is not None:
            check_axes(self, self.param("axes"), len(x))
            require(self, y is None or len(y) == len(x), "the result's rank must be the input's")


@irdl_op_definition
class GridSampleOp(LibraryOp):
    """ONNX GridSample: `(x, grid)`, X (N, C, *S) read at the normalised positions of grid (N, *O, r),
    giving (N, C, *O); `mode` nearest, linear or cubic, `padding_mode` zeros, border or reflection.

    Example: `%y = kernel.grid_sample(%x, %g) {node = "gs", mode = "linear", padding_mode = "zeros",
    align_corners = 0 : i64} : (X, G) -> Y`
    """

    name = "kernel.grid_sample"
    PARAMS: ClassVar[dict[str, type]] = {"mode": str, "padding_mode": str, "align_corners": int}

    def verify_kernel(self) -> None:
        require(self, self.param("mode") in ("nearest", "linear", "cubic"), "mode must be nearest, linear or cubic")
        require(
            self,
            self.param("padding_mode") in ("zeros", "border", "reflection"),
            "padding_mode must be zeros, border or reflection",
        )
        require(self, self.param("align_corners") in (0, 1), "align_corners must be 0 or 1")
        ins, outs = library_types(self)
        require(self, len(ins) == 2 and len(outs) == 1, "takes x and grid and gives one result")
        x, grid, y = ins[0], ins[1], outs[0]
        if x is not None and grid is not None and y is not None:
            require(self, len(x) == len(grid) >= 3, "x and grid must share one rank, at least 3")
            require(
                self, grid[-1] == Poly.const(len(x) - 2), "grid's last axis must hold one position per spatial axis"
            )
            require(self, y == (*x[:2], *grid[1:-1]), "the result's extents are not (N, C) of x and grid's points")


@irdl_op_definition
class AffineGridOp(LibraryOp):
    """ONNX AffineGrid: `(theta)`, theta (N, r, r + 1) applied to the normalised positions of an
    output of spatial extents `sizes`, giving the grid (N, *sizes, r) GridSample reads; or
    `(theta, size)` without `sizes`, where the run gives the size input (N, C, *sizes).

    Example: `%g = kernel.affine_grid(%t) {node = "ag", sizes = array<i64: 5, 6>, align_corners = 0 : i64}
    : (T) -> G`
    """

    name = "kernel.affine_grid"
    PARAMS: ClassVar[dict[str, type]] = {"sizes": tuple, "align_corners": int}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"sizes"})

    def verify_kernel(self) -> None:
        require(self, self.param("align_corners") in (0, 1), "align_corners must be 0 or 1")
        ins, outs = library_types(self)
        if len(ins) == 2:  # the size operand the run gives: the spatial extents are the run's
            require(self, len(outs) == 1 and "sizes" not in self.params, "takes theta and size, gives one result")
            return
        sizes = self.param("sizes")
        require(self, len(sizes) in (2, 3), "sizes must hold 2 or 3 spatial extents")
        require(self, len(ins) == 1 and len(outs) == 1, "takes theta and gives one result")
        theta, grid = ins[0], outs[0]
        if theta is not None and grid is not None:
            r = Poly.const(len(sizes))
            require(self, len(theta) == 3 and theta[1:] == (r, r + 1), "theta must be (N, r, r + 1)")
            require(
                self,
                grid == (theta[0], *(Poly.const(n) for n in sizes), r),
                "the result's extents are not (N, *sizes, r)",
            )


CONV_OPS: tuple[type[LibraryOp], ...] = (
    AffineGridOp,
    GridSampleOp,
    ConvOp,
    ConvTransposeOp,
    ConvIntegerOp,
    QLinearConvOp,
    Col2ImOp,
    DeformConvOp,
    MaxUnpoolOp,
    PoolOp,
    RoiAlignOp,
    ResizeOp,
    ResizeToOp,
)
