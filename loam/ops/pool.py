"""Pooling: MaxPool, AveragePool, LpPool and their Global forms, lowered to one `kernel.pool` each;
MaxUnpool (`kernel.max_unpool`) and RoiAlign's region pooling (`kernel.roi_align`).

The window geometry (auto_pad, ceil_mode, the output extents) is settled at build time by the
helpers Conv uses, as numbers or as polynomials over symbolic spatial extents; the kernel receives
explicit pads and the output extents.  A Global pool is the
same kernel with one window covering all spatial axes.  N and C carry through from X; a spatial
axis whose extent is unchanged keeps X's axis, any other is new (the layout names it).

MaxPool's NaN handling follows onnxruntime's: its scan (used for the Indices output, dilations and
f64) keeps each window's first tap unless a later one is strictly greater (`nan_rule="first"`);
its f32/f16 kernels otherwise skip NaNs (`"ignore"`, a window of NaNs only giving NaN).  Those
kernels are SIMD code whose NaN results depend on where the NaN sits (and on the CPU), so with
NaN inputs `ignore` is the rule they follow for the common placements, not for every one.

Older opsets read the same attributes with narrower defaults (no ceil_mode or dilations before
opset 10/18/19, no count_include_pad before 7), so every opset restates as the current one; LpPool
and GlobalLpPool before opset 2 take `p` as a float, read the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Required, TypedDict

import numpy as np

from loam.core import owed
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, float_attr, int_attr, require_arity, same_axis
from loam.ops.conv import (
    Extent,
    explicit_pads,
    framed_extents,
    kept_spatial_axes,
    spatial_attrs,
    window_geometry,
)
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.lowering import axes_type
from loam.ops.operands import emit_library, fold_if_known, given, ints_of, require_elem
from loam.runtime.errors import DataError
from loam.runtime.kernels.conv import kernel_max_unpool
from loam.runtime.kernels.sampling import kernel_roi_align

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis


class PoolParams(TypedDict, total=False):
    """`kernel.pool`'s parameters: the window geometry, then those only some modes read."""

    mode: Required[str]
    kernel_shape: Required[tuple[Extent, ...]]
    strides: Required[tuple[int, ...]]
    pads: Required[tuple[Extent, ...]]
    dilations: Required[tuple[int, ...]]
    out_shape: Required[tuple[Extent, ...]]
    count_include_pad: int
    p: float
    nan_rule: str
    storage_order: int
    indices: int


class RoiAlignParams(TypedDict):
    """`kernel.roi_align`'s parameters."""

    mode: str
    output_height: int
    output_width: int
    sampling_ratio: int
    spatial_scale: float
    half_pixel: int


_MODES = {
    "MaxPool": "max",
    "AveragePool": "avg",
    "LpPool": "lp",
    "GlobalMaxPool": "max",
    "GlobalAveragePool": "avg",
    "GlobalLpPool": "lp",
}


class PoolRule(OpRule):
    """The six pooling operators; `params` settles each node's `kernel.pool` parameters."""

    op_types = tuple(_MODES)
    kernels: tuple[str, ...] = ("kernel.pool",)
    attributes = frozenset(
        {
            "auto_pad",
            "ceil_mode",
            "count_include_pad",
            "dilations",
            "kernel_shape",
            "p",
            "pads",
            "storage_order",
            "strides",
        }
    )
    elem_types = (*FLOATS, "i8", "ui8")
    limitations = "the channel extent must be a number; i8/ui8 for MaxPool only; negative pads are refused"

    def params(self, node: NodeInfo, x: tuple[Extent, ...], n_outputs: int, elem: str) -> PoolParams:
        if len(x) < 3:
            raise node.fail(f"X has rank {len(x)}; pooling needs N, C and at least one spatial axis")
        mode = _MODES[node.op_type]
        nsp = len(x) - 2
        spatial = x[2:]
        kernel: tuple[Extent, ...]
        pads: tuple[Extent, ...]
        out: tuple[Extent, ...]
        if node.op_type.startswith("Global"):
            # One window over the whole map: its extents are the input's, numbers or not.
            kernel, strides, dilations = spatial, (1,) * nsp, (1,) * nsp
            pads, out = (0,) * (2 * nsp), (1,) * nsp
        else:
            given = node.attr("kernel_shape")
            if given is None:
                raise node.fail("kernel_shape is required")
            taps = tuple(int(k) for k in given)
            if len(taps) != nsp or any(k < 1 for k in taps):
                raise node.fail(f"kernel_shape {list(taps)} must give {nsp} positive extents")
            kernel = taps
            strides = spatial_attrs(node, nsp, "strides", 1)
            dilations = spatial_attrs(node, nsp, "dilations", 1)
            ceil_mode = bool(int_attr(node, "ceil_mode", 0, (0, 1)))
            pads, out = window_geometry(
                node, spatial, taps, strides, dilations, ceil_mode=ceil_mode, negative_same=True
            )
        params: PoolParams = {
            "mode": mode,
            "kernel_shape": kernel,
            "strides": strides,
            "pads": pads,
            "dilations": dilations,
            "out_shape": out,
        }
        if mode == "avg":
            params["count_include_pad"] = int_attr(node, "count_include_pad", 0, (0, 1))
        if mode == "lp":
            p = float(node.attr("p", 2))
            if p <= 0:
                raise node.fail(f"p must be positive, got {p}")
            params["p"] = p
        if mode == "max" and (n_outputs == 2 or any(d > 1 for d in dilations) or elem == "f64"):
            # onnxruntime's MaxPool scans each window keeping the first tap unless a later one is
            # strictly greater (so a NaN first tap wins, a later NaN never does); that loop serves the
            # Indices output, dilations and f64.  Its f32/f16 kernels otherwise skip NaNs (`ignore`).
            params["nan_rule"] = "first"
        if n_outputs == 2:
            storage_order = int_attr(node, "storage_order", 0, (0, 1))
            if storage_order not in (0, 1):
                raise node.fail(f"storage_order must be 0 or 1, got {storage_order}")
            params["storage_order"], params["indices"] = storage_order, 1
        return params

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "X")
        require_elem(node, x, self.elem_types if node.op_type == "MaxPool" else FLOATS, "X")
        if x.rank < 3:
            raise node.fail(f"X has rank {x.rank}; pooling needs N, C and at least one spatial axis")
        xs = framed_extents(node, x.shape)
        # MaxPool's optional Indices output: the graph names it, so the node's outputs decide.
        n_outputs = self.outputs_wanted(node)
        params = self.params(node, xs, n_outputs, x.elem.name)
        shape = (x.shape[0], *(Poly.lift(d) for d in (xs[1], *params["out_shape"])))
        from loam.runtime.kernels.conv import kernel_pool

        value = fold_if_known(inputs, lambda v: kernel_pool(v, **params))
        from loam.core import dtypes

        if n_outputs == 2:
            assert not isinstance(value, np.ndarray)  # with indices=1 the kernel gives (Y, Indices)
            y, index = value if value is not None else (None, None)
            return [Facts(x.elem, shape, y), Facts(dtypes.by_name("i64"), shape, index)]
        assert not isinstance(value, tuple)  # without indices the kernel gives Y alone
        return [Facts(x.elem, shape, value)]

    def outputs_wanted(self, node: NodeInfo) -> int:
        """How many outputs the node names (MaxPool's Indices is optional)."""
        count = node.outputs
        if (count == 2 and node.op_type != "MaxPool") or count > 2:
            raise node.fail(f"names {count} outputs; {node.op_type} has {2 if node.op_type == 'MaxPool' else 1}")
        return count

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        if node.op_type.startswith("Global"):
            # Every spatial axis is reduced to 1: a new axis, even where the input's extent is 1 already (an
            # image small enough to reach 1 before the pool), as it is at every other size of the input.
            return [(x[0], x[1], *(None for _ in x[2:])) for _ in outputs]
        axes = (x[0], x[1], *kept_spatial_axes(x, outputs[0]))
        return [axes for _ in outputs]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import PoolOp

        x = operands[0]
        assert x is not None
        params = self.params(
            node, framed_extents(node, axes_type(x).shape), len(ctx.result_types), ctx.result_types[0].elem.name
        )
        return emit_library(ctx, PoolOp([x], ctx.result_types, node.name, **params))


class MaxUnpoolRule(OpRule):
    """ONNX MaxUnpool (opsets 9-22): X (N, C, *S) written into zeros at the flat positions I gives
    (MaxPool's Indices), as onnxruntime reads them: row-major positions in the whole output.  The
    output's spatial extents are (S - 1) * stride - pads + kernel, or the optional output_shape, which
    must be known at build time (it is an extent) and, as onnxruntime requires, hold at least as many
    elements as those."""

    op_types = ("MaxUnpool",)
    kernels: tuple[str, ...] = ("kernel.max_unpool",)
    attributes = frozenset({"kernel_shape", "pads", "strides"})
    first_opset = 9
    elem_types = FLOATS
    limitations = (
        "output_shape must be known at build time; it places the indices in the whole output as onnxruntime "
        "does (ONNX's reference evaluator places them in the inferred extents and pads after); the spatial "
        "extents must be numbers"
    )

    def spatial(self, node: NodeInfo, x: Sequence[Poly], output_shape: list[int] | None) -> tuple[int, ...]:
        """The output's spatial extents."""
        nsp = len(x) - 2
        if nsp < 1:
            raise node.fail(f"X has rank {len(x)}; MaxUnpool needs N, C and at least one spatial axis")
        if any(not d.is_const for d in x[2:]):
            raise node.unsupported(f"X has symbolic spatial extents [{', '.join(map(str, x))}]; fix them with `dims`")
        kernel = tuple(int(k) for k in node.attr("kernel_shape", []))
        if len(kernel) != nsp or any(k < 1 for k in kernel):
            raise node.fail(f"kernel_shape {list(kernel)} must give {nsp} positive extents")
        strides = spatial_attrs(node, nsp, "strides", 1)
        pads = explicit_pads(node, nsp)
        out = tuple((x[2 + i].const_value - 1) * strides[i] - pads[i] - pads[i + nsp] + kernel[i] for i in range(nsp))
        if output_shape is not None:
            if len(output_shape) != len(x):
                raise node.fail(f"output_shape {output_shape} has {len(output_shape)} extents, X has rank {len(x)}")
            if any(e < 1 for e in output_shape[2:]):
                raise node.fail(f"output_shape {output_shape} must have positive spatial extents")
            # onnxruntime takes output_shape when it holds at least the elements the attributes infer
            # (any extents: the indices are flat positions), and refuses it otherwise.
            given_count, inferred_count = int(np.prod(output_shape[2:])), int(np.prod(out))
            if given_count < inferred_count:
                raise node.fail(
                    f"output_shape {output_shape} holds fewer elements per channel ({given_count}) than the spatial "
                    f"extents {list(out)} kernel_shape, strides and pads infer ({inferred_count})"
                )
            return tuple(output_shape[2:])
        if any(e < 1 for e in out):
            raise node.fail(f"the pads leave no output (spatial extents {list(out)})")
        return out

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 3)
        x, i = given(node, inputs, 0, "X"), given(node, inputs, 1, "I")
        require_elem(node, x, FLOATS, "X")
        if i.elem.name != "i64":
            raise node.fail(f"I has element type {i.elem.name}; ONNX takes i64")
        if i.rank != x.rank:
            raise node.fail(f"I has rank {i.rank}, X has rank {x.rank}; they must agree")
        for k, (a, b) in enumerate(zip(x.shape, i.shape, strict=True)):
            owed.require_equal(a, b, node, f"axis {k} of X and I")
        target = ints_of(node, inputs, 2, "output_shape", ("i64",))
        spatial = self.spatial(node, x.shape, target)
        if target is not None:
            owed.require_equal(x.shape[0], Poly.const(target[0]), node, "output_shape's batch and X's")
            owed.require_equal(x.shape[1], Poly.const(target[1]), node, "output_shape's channels and X's")
        value = None
        if x.value is not None and i.value is not None:
            try:
                value = kernel_max_unpool(np.asarray(x.value), np.asarray(i.value), spatial=spatial)
            except DataError as err:
                raise node.fail(str(err)) from None
        return [Facts(x.elem, (x.shape[0], x.shape[1], *(Poly.const(e) for e in spatial)), value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        return [(x[0], x[1], *kept_spatial_axes(x, outputs[0]))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import MaxUnpoolOp

        x, i = operands[0], operands[1]
        assert x is not None and i is not None
        spatial = tuple(a.extent.const_value for a in ctx.result_types[0].axes[2:])
        return emit_library(ctx, MaxUnpoolOp([x, i], ctx.result_types[:1], node.name, spatial=spatial))


class RoiAlignRule(OpRule):
    """ONNX RoiAlign (opsets 10-22): each region of interest (rois: R x (x1, y1, x2, y2), of image
    batch_indices[r]) pooled into an output_height x output_width grid of bins, each the average (or
    max) of bilinear samples, as onnxruntime computes it.  coordinate_transformation_mode half_pixel
    (opset 16's default) shifts the regions by half a pixel; output_half_pixel (opset 10's only mode)
    does not."""

    op_types = ("RoiAlign",)
    kernels: tuple[str, ...] = ("kernel.roi_align",)
    attributes = frozenset(
        {"coordinate_transformation_mode", "mode", "output_height", "output_width", "sampling_ratio", "spatial_scale"}
    )
    first_opset = 10
    elem_types = FLOATS
    limitations = "max mode takes the largest weighted corner of each sample, as onnxruntime (and ONNX's reference) do"

    def params(self, node: NodeInfo) -> RoiAlignParams:
        """The kernel's parameters, from the attributes."""
        mode = str(node.attr("mode", "avg"))
        if mode not in ("avg", "max"):
            raise node.unsupported(f"mode {mode!r} is not supported (ONNX defines avg and max)")
        default = "half_pixel" if node.since >= 16 else "output_half_pixel"
        coordinates = str(node.attr("coordinate_transformation_mode", default))
        if coordinates not in ("half_pixel", "output_half_pixel"):
            raise node.unsupported(f"coordinate_transformation_mode {coordinates!r} is not supported")
        height, width = int_attr(node, "output_height", 1), int_attr(node, "output_width", 1)
        if height < 1 or width < 1:
            raise node.fail(f"output_height {height} and output_width {width} must be positive")
        ratio = int_attr(node, "sampling_ratio", 0)
        if ratio < 0:
            raise node.fail(f"sampling_ratio must not be negative, got {ratio}")
        return {
            "mode": mode,
            "output_height": height,
            "output_width": width,
            "sampling_ratio": ratio,
            "spatial_scale": float_attr(node, "spatial_scale", 1.0),
            "half_pixel": int(coordinates == "half_pixel"),
        }

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3)
        x, rois, b = (
            given(node, inputs, 0, "X"),
            given(node, inputs, 1, "rois"),
            given(node, inputs, 2, "batch_indices"),
        )
        require_elem(node, x, FLOATS, "X")
        if rois.elem != x.elem:
            raise node.fail(f"rois is {rois.elem.name} and X {x.elem.name}; ONNX needs one type")
        if b.elem.name != "i64":
            raise node.fail(f"batch_indices has element type {b.elem.name}; ONNX takes i64")
        if x.rank != 4 or rois.rank != 2 or b.rank != 1:
            raise node.fail(f"X, rois and batch_indices have ranks {x.rank}, {rois.rank}, {b.rank}; ONNX needs 4, 2, 1")
        owed.require_equal(rois.shape[1], Poly.const(4), node, "rois' axis 1 (x1, y1, x2, y2)")
        owed.require_equal(rois.shape[0], b.shape[0], node, "the regions of rois and batch_indices")
        params = self.params(node)
        value = None
        if all(f.value is not None for f in (x, rois, b)):
            try:
                value = kernel_roi_align(np.asarray(x.value), np.asarray(rois.value), np.asarray(b.value), **params)
            except DataError as err:
                raise node.fail(str(err)) from None
        extents = (Poly.const(params["output_height"]), Poly.const(params["output_width"]))
        return [Facts(x.elem, (rois.shape[0], x.shape[1], *extents), value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x, rois, b = inputs
        assert x is not None and rois is not None and b is not None
        same_axis(node, rois[0], b[0], "at the regions of rois and batch_indices")
        return [(rois[0], x[1], None, None)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import RoiAlignOp

        present = [v for v in operands if v is not None]
        op = RoiAlignOp(present, ctx.result_types[:1], node.name, **self.params(node))
        return emit_library(ctx, op)


RULES: tuple[OpRule, ...] = (PoolRule(), MaxUnpoolRule(), RoiAlignRule())
