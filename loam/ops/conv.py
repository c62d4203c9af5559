"""Convolutions: ONNX Conv and ConvTranspose over 1 to 3 spatial axes, the integer convolutions of
quantized models (ConvInteger, QLinearConv), DeformConv and Col2Im, lowered to one library kernel each.

The build settles the whole window geometry (auto_pad, output_shape and the output extents), so
`kernel.conv` and `kernel.conv_transpose` carry explicit begin/end pads and the generated module does
no shape reasoning.  Over a symbolic spatial extent the pads and output extents are polynomials in
the input's symbols, with derived symbols for the rounding divisions (`floordiv(L - 5, 2) + 1`),
which the module computes before any kernel; the channel extent must be a number.  The helpers
here (`window_geometry`, `spatial_attrs`) are shared with the pooling rules, which read the same
attributes.

Axes: N carries through from X; Conv's output channel axis is W's axis 0, and with group=1 X's
channel axis must be W's axis 1 (the contraction).  A spatial output axis keeps X's axis when its
extent is unchanged (a SAME convolution's output grid is its input's, so a residual Add meets one
axis); otherwise it is new and the layout names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from loam.core import derived, dtypes, owed
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, int_attr, require_arity, same_axis
from loam.ops.elementwise import NUMERIC
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.lowering import axes_type
from loam.ops.operands import (
    emit_library,
    fold_if_known,
    given,
    keep_unchanged,
    known_ints,
    lowered_extents,
    operand_facts,
    optional,
    present_bits,
    require_elem,
    require_same_elem,
    static_extents,
)
from loam.runtime.kernels.conv import kernel_col2im, kernel_conv_integer, kernel_qlinear_conv
from loam.runtime.kernels.sampling import kernel_deform_conv

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


class ConvParams(TypedDict):
    """The window parameters of `kernel.conv` and of the integer and deformable convolutions."""

    strides: tuple[int, ...]
    pads: tuple[Extent, ...]
    dilations: tuple[int, ...]
    group: int


class ConvTransposeParams(ConvParams):
    """`kernel.conv_transpose`'s parameters: a convolution's, and the extra outputs at each axis' end."""

    output_padding: tuple[int, ...]


class DeformConvParams(ConvParams):
    """`kernel.deform_conv`'s parameters: a convolution's, and how many groups of channels share an offset."""

    offset_group: int


class Col2ImParams(TypedDict, total=False):
    """`kernel.col2im`'s parameters; image_shape and block_shape are absent where the run gives them."""

    image_shape: tuple[int, ...]
    block_shape: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]


def spatial_attrs(node: NodeInfo, nsp: int, name: str, default: int) -> tuple[int, ...]:
    """A per-spatial-axis attribute list (strides, dilations), checked for length and sign."""
    values = tuple(int(v) for v in node.attr(name, [default] * nsp))
    if len(values) != nsp:
        raise node.fail(f"{name} has {len(values)} values for {nsp} spatial axes")
    if any(v < 1 for v in values):
        raise node.fail(f"{name} must be positive, got {list(values)}")
    return values


def auto_pad_of(node: NodeInfo) -> str:
    mode = str(node.attr("auto_pad", "NOTSET"))
    if mode not in _AUTO_PADS:
        raise node.fail(f"auto_pad {mode!r} is not one of {', '.join(_AUTO_PADS)}")
    return mode


def explicit_pads(node: NodeInfo, nsp: int) -> tuple[int, ...]:
    pads = tuple(int(v) for v in node.attr("pads", [0] * (2 * nsp)))
    if len(pads) != 2 * nsp:
        raise node.fail(f"pads has {len(pads)} values for {nsp} spatial axes (it needs begins then ends)")
    if any(p < 0 for p in pads):
        raise node.unsupported(f"negative pads {list(pads)} are not supported")
    return pads


Extent = int | Poly
"""An extent as a kernel parameter: a number where the build knows it, else a polynomial the run evaluates."""


def settled(p: Poly) -> Extent:
    """`p` as a kernel parameter: a number where it is one (so a static model's parameters stay numbers)."""
    return p.const_value if p.is_const else p


def window_geometry(
    node: NodeInfo,
    spatial: Sequence[Extent],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    *,
    ceil_mode: bool = False,
    negative_same: bool = False,
) -> tuple[tuple[Extent, ...], tuple[Extent, ...]]:
    """The explicit pads (begins then ends) and output extents of a sliding window, as ONNX defines them.

    auto_pad SAME_* pads so the output has ceil(S / stride) positions, the odd pad at the end
    (UPPER) or the beginning (LOWER); VALID pads nothing.  With ceil_mode the last window may run
    past the padded input, but must start inside the input or its begin pad: a window that would
    start in the end pad is dropped (ONNX's text, onnxruntime and ONNX's reference agree; onnx's
    shape inference up to at least 1.23 keeps it).

    A window shorter than its stride leaves SAME a negative total pad.  Conv clamps it at 0 (as
    onnxruntime does); the pools pass `negative_same` and keep it, split as onnxruntime's pooling
    splits it (halves rounded toward zero), so the windows start past the input's first element.
    The pools also pad for the undilated window, as onnxruntime's do.

    A symbolic spatial extent S gives polynomial pads and output extents: `floor((S + pads - span) /
    stride) + 1` is a derived symbol unless the stride divides it (`loam.core.derived`).  The input
    then owes the window room (`S + pads >= span`), which the run checks before any kernel.
    """
    nsp = len(spatial)
    mode = auto_pad_of(node)
    same = mode in ("SAME_UPPER", "SAME_LOWER")
    if mode != "NOTSET" and node.attr("pads") is not None:
        raise node.fail(f"gives both auto_pad {mode} and explicit pads")
    pads = [Poly.const(p) for p in ((0,) * (2 * nsp) if mode != "NOTSET" else explicit_pads(node, nsp))]
    out: list[Poly] = []
    for i in range(nsp):
        extent = Poly.lift(spatial[i])
        span = (kernel[i] - 1) * dilations[i] + 1
        if same:
            o = derived.ceildiv(extent, strides[i])
            # onnxruntime's pools pad for the undilated window, then fit the dilated one into what
            # that leaves (fewer than ceil(S / stride) outputs where dilation > 1).
            total = (o - 1) * strides[i] + (kernel[i] if negative_same else span) - extent
            if not negative_same:
                total = derived.maximum(total, 0)
            # Halves rounded toward zero (C++ division): equal to floor for the usual total >= 0.
            head = derived.truncdiv(total if mode == "SAME_UPPER" else total + 1, 2)
            pads[i], pads[i + nsp] = head, total - head
        room = extent + pads[i] + pads[i + nsp] - span
        if same and negative_same and span != kernel[i]:
            o = derived.floordiv(room, strides[i]) + 1
        if ceil_mode and not same:
            # ceil((S + pads - span) / stride) + 1 windows, less the last where it would start in
            # the end pad (the first may overrun a short padded input).
            o = derived.ceildiv(room, strides[i]) + 1
            o = o - 1 + derived.less((o - 1) * strides[i], extent + pads[i])
        elif not same:
            o = derived.floordiv(room, strides[i]) + 1
        if o.is_const and o.const_value < 1:
            raise node.fail(
                f"spatial axis {i}: the window spans {span} but the padded input holds {room + span} elements"
            )
        if not o.is_const:
            # floor(room / stride) >= 0 exactly where room >= 0; SAME needs one element.
            slack = o - 1 if ceil_mode and not same else extent - 1 if same else room
            owed.owe(slack, node, f"spatial axis {i} must hold a window of {span}")
        out.append(o)
    return tuple(settled(p) for p in pads), tuple(settled(o) for o in out)


def framed_extents(node: NodeInfo, shape: Sequence[Poly], what: str = "X") -> tuple[Extent, ...]:
    """X's extents as the window geometry reads them: the channel extent as a number (it settles the
    groups and meets W's), the spatial extents as numbers or polynomials (the geometry follows them),
    the batch axis, which the geometry never reads and the kernel takes from the data, as 0 where it
    is symbolic."""
    if len(shape) > 1 and not shape[1].is_const:
        raise node.unsupported(
            f"{what} has symbolic extents [{', '.join(map(str, shape))}]; {node.op_type} needs its channel extent "
            f"({shape[1]}) as a number at build time, so fix it with the `dims` option"
        )
    return tuple(d.const_value if d.is_const else 0 if k == 0 else d for k, d in enumerate(shape))


def channel_count(x: Sequence[Extent]) -> int:
    """X's channel extent, which `framed_extents` made sure is a number."""
    c = x[1]
    assert isinstance(c, int), "framed_extents refuses a symbolic channel extent"
    return c


def kept_spatial_axes(x_axes: tuple[Axis, ...], out: Facts) -> tuple[Axis | None, ...]:
    """X's spatial axes where the output extent is the input's, new axes (None) elsewhere."""
    return keep_unchanged(x_axes, out)[2:]


def _frame(node: NodeInfo, x: tuple[Extent, ...], w: tuple[int, ...]) -> tuple[int, tuple[int, ...], int]:
    """What Conv and ConvTranspose check alike: the ranks, kernel_shape against W, and `group`;
    returns the number of spatial axes, the kernel extents and the group count."""
    if len(x) < 3 or len(x) > 5:
        raise node.unsupported(f"X has rank {len(x)}; Loam convolves over 1 to 3 spatial axes")
    if len(w) != len(x):
        raise node.fail(f"W has rank {len(w)}, X has rank {len(x)}; they must agree")
    kernel = tuple(w[2:])
    given = node.attr("kernel_shape")
    if given is not None and tuple(int(k) for k in given) != kernel:
        raise node.fail(f"kernel_shape {list(given)} disagrees with W's spatial extents {list(kernel)}")
    return len(x) - 2, kernel, int_attr(node, "group", 1)


class ConvRule(OpRule):
    """ONNX Conv (opsets 1-22): X (N, C, *S) with W (M, C/group, *K) and an optional bias B (M)."""

    op_types = ("Conv",)
    kernels: tuple[str, ...] = ("kernel.conv",)
    attributes = frozenset({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
    elem_types = FLOATS
    limitations = "the channel extent must be a number; negative pads are refused"

    def geometry(
        self, node: NodeInfo, x: tuple[Extent, ...], w: tuple[int, ...]
    ) -> tuple[ConvParams, tuple[Extent, ...]]:
        """The kernel's parameters and the output's spatial extents."""
        nsp, kernel, group = _frame(node, x, w)
        c = channel_count(x)
        if group < 1 or c % group or w[0] % group:
            raise node.fail(f"group {group} does not divide the {c} input and {w[0]} output channels")
        if c // group != w[1]:
            raise node.fail(f"X has {c} channels in {group} group(s), W expects {w[1]} per group")
        strides = spatial_attrs(node, nsp, "strides", 1)
        dilations = spatial_attrs(node, nsp, "dilations", 1)
        pads, out = window_geometry(node, x[2:], kernel, strides, dilations)
        return {"strides": strides, "pads": pads, "dilations": dilations, "group": group}, out

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 3)
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) == 3 else None
        if x is None or w is None:
            raise node.fail("X and W must be given")
        require_same_elem(node, [f for f in (x, w, b) if f is not None])
        require_elem(node, x, FLOATS, "X")
        xs, ws = framed_extents(node, x.shape), static_extents(node, w, "W")
        geo, spatial = self.geometry(node, xs, ws)
        if b is not None and static_extents(node, b, "B") != (ws[0],):
            raise node.fail(f"B has extents {list(b.shape)}, expected [{ws[0]}]")
        out = (ws[0], *spatial)
        from loam.runtime.kernels.conv import kernel_conv

        value = fold_if_known(inputs, lambda *v: kernel_conv(*v, **geo))
        return [Facts(x.elem, (x.shape[0], *(Poly.lift(d) for d in out)), value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        if int(node.attr("group", 1)) == 1:
            same_axis(node, x[1], w[1], "input channels of X and W")
        b = inputs[2] if len(inputs) == 3 else None
        if b is not None:
            same_axis(node, b[0], w[0], "output channels of B and W")
        return [(x[0], w[0], *kept_spatial_axes(x, outputs[0]))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ConvOp

        present = [v for v in operands if v is not None]
        geo, _ = self.geometry(node, framed_extents(node, axes_type(present[0]).shape), lowered_extents(present[1]))
        return emit_library(ctx, ConvOp(present, ctx.result_types[:1], node.name, **geo))


class ConvTransposeRule(OpRule):
    """ONNX ConvTranspose (opsets 1-22): X (N, C, *S) with W (C, M/group, *K), optional B (M).

    output_shape, when given, settles the pads as ONNX's text and onnxruntime do (the odd element
    cropped at the beginning, or at the end with SAME_UPPER); SAME_* pads so the output is S * stride.
    """

    op_types = ("ConvTranspose",)
    kernels: tuple[str, ...] = ("kernel.conv_transpose",)
    attributes = frozenset(
        {"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"}
    )
    elem_types = FLOATS
    limitations = "the channel extent must be a number; negative pads are refused"

    def geometry(
        self, node: NodeInfo, x: tuple[Extent, ...], w: tuple[int, ...]
    ) -> tuple[ConvTransposeParams, tuple[Extent, ...], int]:
        """The kernel's parameters, the output's spatial extents and its channel count."""
        nsp, kernel, group = _frame(node, x, w)
        c = channel_count(x)
        if group < 1 or c % group:
            raise node.fail(f"group {group} does not divide the {c} input channels")
        if c != w[0]:
            raise node.fail(f"X has {c} channels, W's first axis has {w[0]}; they must agree")
        strides = spatial_attrs(node, nsp, "strides", 1)
        dilations = spatial_attrs(node, nsp, "dilations", 1)
        out_pad = tuple(int(v) for v in node.attr("output_padding", [0] * nsp))
        if len(out_pad) != nsp or any(p < 0 for p in out_pad):
            raise node.fail(f"output_padding {list(out_pad)} must hold {nsp} non-negative values")
        mode = auto_pad_of(node)
        spatial = [Poly.lift(e) for e in x[2:]]
        full = [(spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 + out_pad[i] for i in range(nsp)]
        given_shape = node.attr("output_shape")
        target: list[Poly] | None = None
        if given_shape is not None:
            target = [Poly.const(int(v)) for v in given_shape][-nsp:]
            if len(target) != nsp:
                raise node.fail(f"output_shape {list(given_shape)} must give {nsp} spatial extents")
        elif mode in ("SAME_UPPER", "SAME_LOWER"):
            target = [spatial[i] * strides[i] for i in range(nsp)]
        if target is not None:
            pads = [Poly()] * (2 * nsp)
            for i in range(nsp):
                total = full[i] - target[i]
                small = derived.floordiv(total, 2)
                large = total - small
                # The odd element goes to the end with SAME_UPPER, to the beginning otherwise (ONNX's
                # text and onnxruntime; a negative total extends the output at the end).
                pads[i], pads[i + nsp] = (small, large) if mode == "SAME_UPPER" else (large, small)
        elif mode == "VALID":
            pads = [Poly()] * (2 * nsp)
        else:
            pads = [Poly.const(p) for p in explicit_pads(node, nsp)]
        out = [full[i] - pads[i] - pads[i + nsp] for i in range(nsp)]
        for i, o in enumerate(out):
            if o.is_const and o.const_value < 1:
                raise node.fail(
                    f"pads {[settled(p) for p in pads]} leave no output (spatial extents {[settled(o) for o in out]})"
                )
            if not o.is_const:
                owed.owe(o - 1, node, f"spatial axis {i} of the output must hold an element")
        params: ConvTransposeParams = {
            "strides": strides,
            "pads": tuple(settled(p) for p in pads),
            "dilations": dilations,
            "group": group,
            "output_padding": out_pad,
        }
        return params, tuple(settled(o) for o in out), w[1] * group

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 3)
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) == 3 else None
        if x is None or w is None:
            raise node.fail("X and W must be given")
        require_same_elem(node, [f for f in (x, w, b) if f is not None])
        require_elem(node, x, FLOATS, "X")
        xs, ws = framed_extents(node, x.shape), static_extents(node, w, "W")
        geo, spatial, channels = self.geometry(node, xs, ws)
        if b is not None and static_extents(node, b, "B") != (channels,):
            raise node.fail(f"B has extents {list(b.shape)}, expected [{channels}]")
        out = (channels, *spatial)
        from loam.runtime.kernels.conv import kernel_conv_transpose

        value = fold_if_known(inputs, lambda *v: kernel_conv_transpose(*v, **geo))
        return [Facts(x.elem, (x.shape[0], *(Poly.lift(d) for d in out)), value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        same_axis(node, x[1], w[0], "input channels of X and W")
        channel: Axis | None = None
        if int(node.attr("group", 1)) == 1:
            channel = w[1]
            b = inputs[2] if len(inputs) == 3 else None
            if b is not None:
                same_axis(node, b[0], w[1], "output channels of B and W")
        return [(x[0], channel, *kept_spatial_axes(x, outputs[0]))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ConvTransposeOp

        present = [v for v in operands if v is not None]
        geo, _, _ = self.geometry(node, framed_extents(node, axes_type(present[0]).shape), lowered_extents(present[1]))
        return emit_library(ctx, ConvTransposeOp(present, ctx.result_types[:1], node.name, **geo))


QUANTIZED = ("i8", "ui8")


def _scalar(node: NodeInfo, f: Facts, what: str) -> None:
    """`f` holds one value (rank 0, or one element)."""
    if f.static_shape() not in ((), (1,)):
        raise node.unsupported(f"{what} has extents {list(f.shape)}; Loam takes one value (per tensor)")


def _per_channel(node: NodeInfo, f: Facts, channels: int, what: str) -> None:
    """`f` holds one value, or one per output channel (W's axis 0)."""
    if f.static_shape() not in ((), (1,), (channels,)):
        raise node.fail(
            f"{what} has extents {list(f.shape)}; it holds one value or one per output channel ({channels})"
        )


def _quantized(node: NodeInfo, f: Facts, what: str) -> None:
    if f.elem.name not in QUANTIZED:
        raise node.unsupported(f"{what} has element type {f.elem.name}; ONNX takes i8 or ui8")


class ConvIntegerRule(ConvRule):
    """ONNX ConvInteger (opset 10): Conv of (x - x_zero_point) with (w - w_zero_point) in i32, for
    i8/ui8 operands; x's zero point is one value, w's one value or one per output channel."""

    op_types = ("ConvInteger",)
    kernels: tuple[str, ...] = ("kernel.conv_integer",)
    elem_types = QUANTIZED
    first_opset = 10
    limitations = "the channel extent must be a number; negative pads are refused"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 4)
        x, w = given(node, inputs, 0, "x"), given(node, inputs, 1, "w")
        _quantized(node, x, "x")
        _quantized(node, w, "w")
        xs, ws = framed_extents(node, x.shape, "x"), static_extents(node, w, "w")
        geo, spatial = self.geometry(node, xs, ws)
        for k, what, of in ((2, "x_zero_point", x), (3, "w_zero_point", w)):
            zero = optional(inputs, k)
            if zero is None:
                continue
            if zero.elem != of.elem:
                raise node.fail(f"{what} is {zero.elem.name}, its tensor {of.elem.name}; ONNX needs one type")
            if k == 2:
                _scalar(node, zero, what)
            else:
                _per_channel(node, zero, ws[0], what)
        out = (ws[0], *spatial)
        zeros = present_bits(inputs[2:])
        value = fold_if_known(inputs, lambda *v: kernel_conv_integer(*v, zeros=zeros, **geo))
        return [Facts(dtypes.by_name("i32"), (x.shape[0], *(Poly.lift(d) for d in out)), value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        return [_conv_axes(node, inputs[0], inputs[1], None, outputs[0])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ConvIntegerOp

        present = [v for v in operands if v is not None]
        geo, _ = self.geometry(node, framed_extents(node, axes_type(present[0]).shape), lowered_extents(present[1]))
        op = ConvIntegerOp(present, ctx.result_types[:1], node.name, zeros=present_bits(operands[2:]), **geo)
        return emit_library(ctx, op)


def _conv_axes(
    node: NodeInfo, x: tuple[Axis, ...] | None, w: tuple[Axis, ...] | None, b: tuple[Axis, ...] | None, out: Facts
) -> tuple[Axis | None, ...]:
    """A convolution's output axes: N from x, the output channels from w, x's spatial axes where kept."""
    assert x is not None and w is not None
    if int(node.attr("group", 1)) == 1:
        same_axis(node, x[1], w[1], "input channels of X and W")
    if b is not None:
        same_axis(node, b[0], w[0], "output channels of B and W")
    return (x[0], w[0], *kept_spatial_axes(x, out))


class QLinearConvRule(ConvRule):
    """ONNX QLinearConv (opset 10): the i32 convolution of (x - x_zero_point) with (w - w_zero_point)
    plus the i32 bias B, times x_scale * w_scale / y_scale (f32, as onnxruntime requantizes), rounded to
    nearest even, plus y_zero_point, saturated to its type (i8 or ui8).  w's scale and zero point are
    one value or one per output channel; the others one value each."""

    op_types = ("QLinearConv",)
    kernels: tuple[str, ...] = ("kernel.qlinear_conv",)
    elem_types = QUANTIZED
    first_opset = 10
    limitations = "the channel extent must be a number; negative pads are refused"
    NAMES = ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point")

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 8, 9)
        x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero = (
            given(node, inputs, k, name) for k, name in enumerate(self.NAMES)
        )
        b = optional(inputs, 8)
        for what, f in (("x", x), ("w", w), ("y_zero_point", y_zero)):
            _quantized(node, f, what)
        for what, zero, of in (("x_zero_point", x_zero, x), ("w_zero_point", w_zero, w)):
            if zero.elem != of.elem:
                raise node.fail(f"{what} is {zero.elem.name}, its tensor {of.elem.name}; ONNX needs one type")
        for what, f in (("x_scale", x_scale), ("w_scale", w_scale), ("y_scale", y_scale)):
            if f.elem.name != "f32":
                raise node.fail(f"{what} has element type {f.elem.name}; ONNX takes f32 scales")
        xs, ws = framed_extents(node, x.shape, "x"), static_extents(node, w, "w")
        geo, spatial = self.geometry(node, xs, ws)
        for what, f in (("x_scale", x_scale), ("x_zero_point", x_zero), ("y_scale", y_scale), ("y_zero_point", y_zero)):
            _scalar(node, f, what)
        _per_channel(node, w_scale, ws[0], "w_scale")
        _per_channel(node, w_zero, ws[0], "w_zero_point")
        if b is not None:
            if b.elem.name != "i32":
                raise node.fail(f"B has element type {b.elem.name}; ONNX takes i32")
            if static_extents(node, b, "B") != (ws[0],):
                raise node.fail(f"B has extents {list(b.shape)}, expected [{ws[0]}]")
        out = (ws[0], *spatial)
        value = fold_if_known(inputs, lambda *v: kernel_qlinear_conv(*v, **geo))
        return [Facts(y_zero.elem, (x.shape[0], *(Poly.lift(d) for d in out)), value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        b = inputs[8] if len(inputs) > 8 else None
        return [_conv_axes(node, inputs[0], inputs[3], b, outputs[0])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import QLinearConvOp

        present = [v for v in operands if v is not None]
        geo, _ = self.geometry(node, framed_extents(node, axes_type(present[0]).shape), lowered_extents(present[3]))
        return emit_library(ctx, QLinearConvOp(present, ctx.result_types[:1], node.name, **geo))


class DeformConvRule(ConvRule):
    """ONNX DeformConv (opsets 19-22) over two spatial axes: Conv of X (N, C, H, W) with W (M, C/group,
    KH, KW) where each tap is read at its place moved by `offset` (N, offset_group * KH * KW * 2, OH,
    OW), bilinearly with zeros outside the map, times the optional `mask` (N, offset_group * KH * KW,
    OH, OW), plus the optional bias B (M)."""

    op_types = ("DeformConv",)
    kernels: tuple[str, ...] = ("kernel.deform_conv",)
    attributes = frozenset({"dilations", "group", "kernel_shape", "offset_group", "pads", "strides"})
    first_opset = 19
    limitations = "two spatial axes only; the channel extent must be a number; negative pads are refused"

    def settled(
        self, node: NodeInfo, x: tuple[Extent, ...], w: tuple[int, ...]
    ) -> tuple[DeformConvParams, tuple[Extent, ...]]:
        """Conv's geometry for two spatial axes, and offset_group; and the output's spatial extents."""
        if len(x) != 4:
            raise node.unsupported(f"X has rank {len(x)}; Loam computes DeformConv over two spatial axes (rank 4)")
        geo, out = self.geometry(node, x, w)
        groups = int_attr(node, "offset_group", 1)
        if groups < 1 or channel_count(x) % groups:
            raise node.fail(f"offset_group {groups} does not divide the {x[1]} input channels")
        return {**geo, "offset_group": groups}, out

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3, 5)
        x, w, offset = given(node, inputs, 0, "X"), given(node, inputs, 1, "W"), given(node, inputs, 2, "offset")
        b, mask = optional(inputs, 3), optional(inputs, 4)
        require_same_elem(node, [f for f in (x, w, offset, b, mask) if f is not None])
        require_elem(node, x, FLOATS, "X")
        xs, ws = framed_extents(node, x.shape), static_extents(node, w, "W")
        geo, out = self.settled(node, xs, ws)
        taps = ws[2] * ws[3] * geo["offset_group"]
        for what, f, per in (("offset", offset, 2 * taps), ("mask", mask, taps)):
            if f is None:
                continue
            if f.rank != 4:
                raise node.fail(f"{what} has rank {f.rank}; it must be (N, {per}, {out[0]}, {out[1]})")
            owed.require_equal(f.shape[0], x.shape[0], node, f"the batch axes of {what} and X")
            for k, e in ((1, per), (2, out[0]), (3, out[1])):
                owed.require_equal(f.shape[k], Poly.lift(e), node, f"{what}'s axis {k}")
        if b is not None and static_extents(node, b, "B") != (ws[0],):
            raise node.fail(f"B has extents {list(b.shape)}, expected [{ws[0]}]")
        extras = present_bits(inputs[3:])
        value = fold_if_known(inputs, lambda *v: kernel_deform_conv(*v, given=extras, **geo))
        return [Facts(x.elem, (x.shape[0], Poly.const(ws[0]), *(Poly.lift(d) for d in out)), value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        return [_conv_axes(node, inputs[0], inputs[1], inputs[3] if len(inputs) > 3 else None, outputs[0])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import DeformConvOp

        present = [v for v in operands if v is not None]
        geo, _ = self.settled(node, framed_extents(node, axes_type(present[0]).shape), lowered_extents(present[1]))
        op = DeformConvOp(present, ctx.result_types[:1], node.name, given=present_bits(operands[3:]), **geo)
        return emit_library(ctx, op)


class Col2ImRule(OpRule):
    """ONNX Col2Im (opset 18): the taps of L sliding blocks, (N, C * prod(block_shape), L), added
    onto an image (N, C, *image_shape).  image_shape and block_shape may come from the run (their
    length, the number of image axes, known): the extents each decides are then lengths only the run
    knows, and the kernel checks what the build could not (L the number of blocks, as a DataError)."""

    op_types = ("Col2Im",)
    kernels: tuple[str, ...] = ("kernel.col2im",)
    attributes = frozenset({"dilations", "pads", "strides"})
    first_opset = 18
    elem_types = NUMERIC
    limitations = (
        "image_shape and block_shape from symbolic extents (a Shape) are refused; the channel axis must be a "
        "number; negative pads are refused"
    )

    def shape_operand(self, node: NodeInfo, f: Facts | None, what: str) -> tuple[int, list[int] | None]:
        """The number of image axes `what` gives, and its extents (None where only the run gives them)."""
        if f is not None and f.value is None:
            if f.elem.name != "i64" or f.rank != 1 or not f.shape[0].is_const:
                raise node.fail(f"{what} must be an i64 vector of known length, not {f.elem.name}{list(f.shape)}")
            return f.shape[0].const_value, None
        values = known_ints(node, f, what, ("i64",))
        return len(values), values

    def plan(
        self, node: NodeInfo, inputs: Sequence[Facts | None], owe: bool = True
    ) -> tuple[Col2ImParams, tuple[Poly, ...]]:
        """The kernel's parameters (image_shape or block_shape only the run gives left out) and the
        output's extents; what is known is checked here, and (`owe`) L owed equal to the number of blocks."""
        x = given(node, inputs, 0, "input")
        require_elem(node, x, NUMERIC, "input")
        if x.rank != 3:
            raise node.fail(f"the input has rank {x.rank}; Col2Im takes (N, C * prod(block_shape), L)")
        if not x.shape[1].is_const:
            raise node.unsupported(f"the input's axis 1 is {x.shape[1]}; Col2Im needs it as a number at build time")
        channels = x.shape[1].const_value
        nsp, image = self.shape_operand(node, optional(inputs, 1), "image_shape")
        nsp_block, block = self.shape_operand(node, optional(inputs, 2), "block_shape")
        if nsp < 1 or nsp_block != nsp:
            raise node.fail(f"image_shape ({nsp} values) and block_shape ({nsp_block}) must give one extent per axis")
        if any(e < 1 for e in (*(image or ()), *(block or ()))):
            raise node.fail(f"image_shape {image} and block_shape {block} must be positive")
        strides = spatial_attrs(node, nsp, "strides", 1)
        dilations = spatial_attrs(node, nsp, "dilations", 1)
        pads = explicit_pads(node, nsp)
        params: Col2ImParams = {}
        if image is not None:
            params["image_shape"] = tuple(image)
        if block is not None:
            params["block_shape"] = tuple(block)
            if channels % _prod(block):
                raise node.fail(f"the input's axis 1 ({channels}) is no multiple of the block's {_prod(block)} taps")
        params["strides"], params["pads"], params["dilations"] = strides, pads, dilations
        if image is not None and block is not None:
            count = 1
            for i in range(nsp):
                room = image[i] + pads[i] + pads[i + nsp] - (block[i] - 1) * dilations[i] - 1
                if room < 0:
                    raise node.fail(f"axis {i}: the block spans more than the padded image ({image[i]} + pads)")
                count *= room // strides[i] + 1
            if owe:
                owed.require_equal(
                    x.shape[2], Poly.const(count), node, "the input's last axis and the number of blocks"
                )
        kept = node.result_length(0, 1) if block is None else Poly.const(channels // _prod(block))
        spatial = [node.result_length(0, 2 + i) if image is None else Poly.const(image[i]) for i in range(nsp)]
        return params, (x.shape[0], kept, *spatial)

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3)
        x = given(node, inputs, 0, "input")
        params, shape = self.plan(node, inputs)
        value = None
        if x.value is not None and "image_shape" in params and "block_shape" in params:
            value = kernel_col2im(np.asarray(x.value), **params)
        return [Facts(x.elem, shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        return [(x[0], *(None for _ in outputs[0].shape[1:]))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import Col2ImOp

        x = operands[0]
        assert x is not None
        params, _ = self.plan(node, operand_facts(operands), owe=False)
        run = [operands[k] for k, name in ((1, "image_shape"), (2, "block_shape")) if name not in params]
        present = [x, *(v for v in run if v is not None)]
        return emit_library(ctx, Col2ImOp(present, ctx.result_types[:1], node.name, **params))


def _prod(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


RULES: tuple[OpRule, ...] = (
    ConvRule(),
    ConvTransposeRule(),
    ConvIntegerRule(),
    QLinearConvRule(),
    DeformConvRule(),
    Col2ImRule(),
)
