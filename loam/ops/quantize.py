"""Operator rules of linear quantization: QuantizeLinear and DequantizeLinear.

A quantized tensor is x / scale rounded and shifted by a zero point; the scale and zero point are
per tensor (one element), per axis (a vector along `axis`) or per block (`block_size` entries of
`axis` share one).  Both lower to library kernels (`kernel.quantize_linear`,
`kernel.dequantize_linear`) whose numpy pieces also fold known values; the quantized side may be a
narrow type (float8, float4, 4- or 2-bit integers).  DynamicQuantizeLinear has a body in these
terms, which the importer expands (`loam.frontends.onnx_functions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from loam.core import dtypes, owed
from loam.core.poly import Poly
from loam.ops.base import Facts, KeepsAxes, LowerContext, NodeInfo, OpRule, elem_attr, int_attr, require_arity
from loam.ops.lowering import axes_type
from loam.ops.operands import emit_library, given, norm_axis, optional
from loam.runtime.kernels.narrow import kernel_dequantize_linear, kernel_quantize_linear

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

# The quantized types (QuantizeLinear's result, DequantizeLinear's input) and the float types a scale
# or a dequantized result has, as ONNX's latest opsets allow them.
QUANTIZED = ("i8", "ui8", "i16", "ui16", "f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "i4", "ui4", "f4E2M1",
             "i2", "ui2")  # fmt: skip
SCALES = ("f32", "f16", "bf16")


def _dtype_name(elem: str) -> str:
    dtype = dtypes.by_name(elem).numpy
    assert dtype is not None
    return dtype.name


def _elem_attr(node: NodeInfo, key: str) -> str | None:
    """An element-type attribute (`output_dtype`, `precision`) as Loam's name; None where absent or 0."""
    elem = elem_attr(node, key)
    return None if elem is None or elem.name == "undefined" else elem.name


def _axis_block(node: NodeInfo, x_rank: int, scale_shape: Sequence[Poly]) -> tuple[int, int]:
    """Where the scale and zero point sit along x: (axis, block_size), (0, 0) per tensor."""
    block = int_attr(node, "block_size", 0) if node.since >= 21 else 0
    one = len(scale_shape) == 1 and scale_shape[0].is_const and scale_shape[0].const_value == 1
    if not scale_shape or (one and block == 0) or x_rank == 0:
        return 0, 0
    axis = int(node.attr("axis", 1)) if node.since >= 13 else 1
    return norm_axis(node, axis, x_rank), block


def _single(f: Facts) -> bool:
    """Whether `f` holds one value: a scalar or a one-element vector."""
    return f.rank == 0 or (f.rank == 1 and f.static_shape() == (1,))


def _layout(node: NodeInfo, x: Facts, scale: Facts, zero: Facts | None) -> tuple[int, int]:
    """`_axis_block`, after checking the scale's and zero point's extents against x's (stage 0)."""
    if int_attr(node, "block_size", 0) < 0:
        raise node.fail(f"block_size must be positive, got {int_attr(node, 'block_size', 0)}")
    if zero is not None and not (_single(zero) and _single(scale)):  # [1] and [] both mean one value
        if zero.rank != scale.rank:
            raise node.fail(f"the zero point has rank {zero.rank} and the scale {scale.rank}; ONNX needs one shape")
        for k, (a, b) in enumerate(zip(zero.shape, scale.shape, strict=True)):
            owed.require_equal(a, b, node, f"axis {k} of the zero point and the scale")
    axis, block = _axis_block(node, x.rank, scale.shape)
    if x.rank == 0 and not _single(scale):
        raise node.fail("a scalar x takes a scalar scale")
    if x.rank == 0 or (_single(scale) and block == 0):
        return 0, 0
    if block == 0:
        if scale.rank != 1:
            raise node.fail(
                f"the scale has rank {scale.rank}: ONNX takes a scalar (per tensor), a vector (per axis) or, "
                "with block_size, x's rank (per block)"
            )
        owed.require_equal(scale.shape[0], x.shape[axis], node, f"the scale's extent and x's axis {axis}")
        return axis, 0
    if scale.rank != x.rank:
        raise node.fail(f"blocked quantization needs a scale of x's rank {x.rank}, got rank {scale.rank}")
    for k, (s, d) in enumerate(zip(scale.shape, x.shape, strict=True)):
        if k != axis:
            owed.require_equal(s, d, node, f"axis {k} of the scale and x")
        elif not (s.is_const and d.is_const):
            raise node.unsupported(f"blocked quantization needs axis {axis}'s extents at build time")
        elif -(-d.const_value // block) != s.const_value:
            raise node.fail(
                f"x's axis {axis} has {d.const_value} entries; blocks of {block} make "
                f"{-(-d.const_value // block)} scales, not {s.const_value}"
            )
    return axis, block


class QuantizeParams(TypedDict):
    """`kernel.quantize_linear`'s parameters."""

    axis: int
    block_size: int
    to: str
    saturate: int
    precision: str


class QuantizeLinearRule(KeepsAxes):
    """ONNX QuantizeLinear (10; per axis 13; float8 and `saturate` 19; blocks, `output_dtype`, 4-bit 21;
    `precision` 23; 2-bit 25): y = saturate(round(x / scale) + zero point), rounding to nearest even.

    The result's type is the zero point's, else `output_dtype`, else ui8.  Into float8 the quotient is
    cast as Cast does with `saturate`; into float4 the zero point is added and the sum cast.
    """

    op_types = ("QuantizeLinear",)
    kernels: tuple[str, ...] = ("kernel.quantize_linear",)
    attributes = frozenset({"axis", "saturate", "block_size", "output_dtype", "precision"})
    first_opset = 10
    elem_types = ("f32", "f16", "bf16", "i32")

    def result_elem(self, node: NodeInfo, zero: Facts | None) -> str:
        declared = _elem_attr(node, "output_dtype")
        if zero is not None:
            if declared is not None and declared != zero.elem.name:
                raise node.fail(
                    f"output_dtype is {declared} but the zero point is {zero.elem.name}; ONNX needs one type"
                )
            declared = zero.elem.name
        result = declared or "ui8"
        if result not in QUANTIZED:
            raise node.unsupported(f"quantizes to element type {result}; Loam quantizes to {', '.join(QUANTIZED)}")
        return result

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 3)
        x, scale, zero = given(node, inputs, 0, "x"), given(node, inputs, 1, "y_scale"), optional(inputs, 2)
        if x.elem.name not in self.elem_types:
            raise node.unsupported(
                f"quantizes x of element type {x.elem.name}; ONNX takes {', '.join(self.elem_types)}"
            )
        if scale.elem.name not in (*SCALES, "i32", "f8E8M0FNU"):
            raise node.unsupported(f"the scale has element type {scale.elem.name}")
        int_attr(node, "saturate", 1, (0, 1))
        result = self.result_elem(node, zero)
        axis, block = _layout(node, x, scale, zero)
        value = None
        if x.value is not None and scale.value is not None and (zero is None or zero.value is not None):
            operands = [np.asarray(f.value) for f in (x, scale, zero) if f is not None]
            value = kernel_quantize_linear(*operands, **self.params(node, result, axis, block))
        return [Facts(dtypes.by_name(result), x.shape, value)]

    def params(self, node: NodeInfo, result: str, axis: int, block: int) -> QuantizeParams:
        precision = _elem_attr(node, "precision")
        return {
            "axis": axis,
            "block_size": block,
            "to": _dtype_name(result),
            "saturate": int_attr(node, "saturate", 1, (0, 1)),
            "precision": _dtype_name(precision) if precision is not None else "",
        }

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import QuantizeLinearOp

        x, scale = operands[0], operands[1]
        assert x is not None and scale is not None
        result = ctx.result_types[0]
        params = self.params(node, result.elem.name, *_axis_block(node, _rank(x), _extents(scale)))
        present = [v for v in operands if v is not None]
        return emit_library(ctx, QuantizeLinearOp(present, [result], node.name, **params))


class DequantizeLinearRule(KeepsAxes):
    """ONNX DequantizeLinear (10; per axis 13; float8 19; blocks and 4-bit 21; `output_dtype` 23;
    2-bit 25): y = (x - zero point) * scale, in f32, stored as `output_dtype` or else the scale's type.

    An i32 x has no zero point; a float8 or float4 one must be zero, and is not read.
    """

    op_types = ("DequantizeLinear",)
    kernels: tuple[str, ...] = ("kernel.dequantize_linear",)
    attributes = frozenset({"axis", "block_size", "output_dtype"})
    first_opset = 10
    elem_types = (*QUANTIZED, "i32")

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 3)
        x, scale, zero = given(node, inputs, 0, "x"), given(node, inputs, 1, "x_scale"), optional(inputs, 2)
        if x.elem.name not in self.elem_types:
            raise node.unsupported(f"dequantizes x of element type {x.elem.name}")
        if scale.elem.name not in (*SCALES, "f8E8M0FNU"):
            raise node.unsupported(f"the scale has element type {scale.elem.name}")
        if zero is not None and zero.elem.name != x.elem.name:
            raise node.fail(f"the zero point is {zero.elem.name} and x {x.elem.name}; ONNX needs one type")
        result = _elem_attr(node, "output_dtype") or scale.elem.name
        if result not in SCALES:
            raise node.fail(f"dequantizes to {result}; ONNX gives f32, f16 or bf16")
        axis, block = _layout(node, x, scale, zero)
        value = None
        if x.value is not None and scale.value is not None and (zero is None or zero.value is not None):
            operands = [np.asarray(f.value) for f in (x, scale, zero) if f is not None]
            value = kernel_dequantize_linear(*operands, axis=axis, block_size=block, to=_dtype_name(result))
        return [Facts(dtypes.by_name(result), x.shape, value)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import DequantizeLinearOp

        x, scale = operands[0], operands[1]
        assert x is not None and scale is not None
        axis, block = _axis_block(node, _rank(x), _extents(scale))
        result = ctx.result_types[0]
        to = _dtype_name(result.elem.name)
        present = [v for v in operands if v is not None]
        return emit_library(ctx, DequantizeLinearOp(present, [result], node.name, axis=axis, block_size=block, to=to))


def _extents(value: SSAValue) -> tuple[Poly, ...]:
    return tuple(a.extent for a in axes_type(value).axes)


def _rank(value: SSAValue) -> int:
    return len(axes_type(value).axes)


RULES: tuple[OpRule, ...] = (QuantizeLinearRule(), DequantizeLinearRule())
