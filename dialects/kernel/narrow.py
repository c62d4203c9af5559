"""Library kernels of low-precision values, listed in `NARROW_OPS`: casts into the narrow element
types (float8, float4, 4- and 2-bit integers, which ml_dtypes holds in numpy and Loam converts to and
from but never computes in), and ONNX's linear quantization into them or 8/16-bit integers and back.

A cast *from* a narrow type widens exactly, so it stays a `kernel.cast`; a cast *into* one rounds and
saturates by ONNX's rules, which `kernel.cast_narrow` states once.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from loam.dialects.kernel.library import LibraryOp, require
from loam.dialects.tensor_axes import AxesTensorType

ROUND_MODES = ("up", "down", "nearest")
"""How a cast into float8e8m0 (a power of two) rounds: ONNX Cast's `round_mode` (opset 24)."""


def _check_to(op: LibraryOp) -> None:
    """`to` names the numpy dtype of the op's one result."""
    require(op, len(op.outputs) == 1, "gives one result")
    t = op.outputs[0].type
    if isinstance(t, AxesTensorType):
        dtype = t.elem.numpy
        name = dtype.name if dtype is not None else t.elem.name
        require(op, name == op.param("to"), f"'to' is {op.param('to')!r} but the result holds {name}")


@irdl_op_definition
class CastNarrowOp(LibraryOp):
    """ONNX Cast into a narrow type `to` (its numpy name, e.g. `float8_e4m3fn`): round to nearest
    even; with `saturate`, a float8 (but e8m0) result clips to ±its largest finite value, where
    without it an out-of-range value becomes inf or NaN as the type has them; into float8e8m0 the
    exponent is rounded by `round_mode` (up, down, nearest), saturating at 2^127.

    Example: `%y = kernel.cast_narrow(%x) {node = "c", to = "float8_e4m3fn", saturate = 1 : i64,
    round_mode = "up"} : (!tensor_axes.tensor<f32, [N: 4]>) -> !tensor_axes.tensor<f8E4M3FN, [N: 4]>`
    """

    name = "kernel.cast_narrow"
    PARAMS: ClassVar[dict[str, type]] = {"to": str, "saturate": int, "round_mode": str}

    def verify_kernel(self) -> None:
        require(self, len(self.inputs) == 1 and len(self.outputs) == 1, "takes one operand and gives one result")
        require(self, self.param("round_mode") in ROUND_MODES, f"round_mode {self.param('round_mode')!r}")
        _check_to(self)


@irdl_op_definition
class QuantizeLinearOp(LibraryOp):
    """ONNX QuantizeLinear: x / scale rounded to nearest even, plus the zero point (the optional
    third operand), saturated to the result's type `to`; a float8 result is cast as `cast_narrow`
    with `saturate`.  Scale and zero point are per tensor (one element), per `axis` (a vector), or
    per block of `block_size` (> 0) along it; the division is in `precision` (a numpy dtype name, or
    "" for numpy's type of x and the scale).

    Example: `%q = kernel.quantize_linear(%x, %s, %z) {node = "q", axis = 1 : i64, block_size = 0 : i64,
    to = "uint8", saturate = 1 : i64, precision = ""} : (X, S, Z) -> !tensor_axes.tensor<ui8, [...]>`
    """

    name = "kernel.quantize_linear"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "block_size": int, "to": str, "saturate": int, "precision": str}

    def verify_kernel(self) -> None:
        require(self, len(self.inputs) in (2, 3), "takes x, the scale and an optional zero point")
        _check_to(self)


@irdl_op_definition
class DequantizeLinearOp(LibraryOp):
    """ONNX DequantizeLinear: (x - zero point) * scale computed in f32 and stored as `to`; an integer
    x's zero point (the optional third operand) is subtracted, a float8 or float4 one is zero.
    Scale and zero point are laid out as `kernel.quantize_linear`'s.

    Example: `%y = kernel.dequantize_linear(%q, %s) {node = "d", axis = 1 : i64, block_size = 0 : i64,
    to = "float32"} : (Q, S) -> !tensor_axes.tensor<f32, [...]>`
    """

    name = "kernel.dequantize_linear"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "block_size": int, "to": str}

    def verify_kernel(self) -> None:
        require(self, len(self.inputs) in (2, 3), "takes x, the scale and an optional zero point")
        _check_to(self)


NARROW_OPS: tuple[type[LibraryOp], ...] = (CastNarrowOp, QuantizeLinearOp, DequantizeLinearOp)
