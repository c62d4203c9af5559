"""Library kernels into the narrow element types (float8, float4, 4- and 2-bit integers), which
ml_dtypes holds in numpy and Loam converts to and from but never computes in; listed in `NARROW_OPS`.

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
        t = self.outputs[0].type
        if isinstance(t, AxesTensorType):
            dtype = t.elem.numpy
            name = dtype.name if dtype is not None else t.elem.name
            require(self, name == self.param("to"), f"'to' is {self.param('to')!r} but the result holds {name}")


NARROW_OPS: tuple[type[LibraryOp], ...] = (CastNarrowOp,)
