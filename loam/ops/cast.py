"""Cast and CastLike: the same extents in another element type (`kernel.cast`, `kernel.cast_narrow`).

Opset 1's `to`, a type name rather than a number, is restated as the number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

from loam.core import derived, dtypes
from loam.core.poly import Poly
from loam.dialects.kernel.narrow import ROUND_MODES
from loam.ops.base import Facts, KeepsAxes, LowerContext, NodeInfo, OpRule, elem_of, int_attr, require_arity
from loam.ops.elementwise import ALL, truth
from loam.ops.lowering import COMPUTE_TYPES, NARROW_TYPES
from loam.ops.operands import emit_library, is_symbolic, polys_of
from loam.runtime.kernels.narrow import kernel_cast_narrow

if TYPE_CHECKING:
    from xdsl.ir import SSAValue


def _cast_target(node: NodeInfo) -> str:
    """Cast's `to` as a Loam element type (opset 1 spells it as a name, `"FLOAT"`)."""
    to = node.attr("to", None)
    if to is None:
        raise node.fail("has no 'to' attribute")
    if isinstance(to, (str, bytes)):
        name = to.decode() if isinstance(to, bytes) else to
        if name.upper() not in TensorProto.DataType.keys():
            raise node.fail(f"'to' names no ONNX element type: {name!r}")
        to = TensorProto.DataType.Value(name.upper())
    if isinstance(to, (bool, np.bool_)) or not isinstance(to, (int, np.integer)):
        raise node.fail(f"'to' must be an element type number or name, got {to!r}")
    return elem_of(node, "to", to).name


class CastRule(KeepsAxes):
    """ONNX Cast and CastLike: the same extents in another element type, as numpy's astype converts.

    Floats to integers truncate toward zero, anything to bool is `!= 0`, f32 to f16/bf16 rounds to
    nearest even.  Into a narrow type (float8, float4, 4- and 2-bit integers) the cast is
    `kernel.cast_narrow`: rounded to nearest even, float8 saturated as `saturate` says, float8e8m0
    rounded by `round_mode`; out of one it widens exactly.  Strings are refused.
    """

    op_types = ("Cast", "CastLike")
    kernels: tuple[str, ...] = ("kernel.cast", "kernel.cast_narrow")
    attributes = frozenset({"to", "saturate", "round_mode"})
    elem_types = ALL
    limitations = "no string type; a value known from symbolic extents folds to i64, i32 or bool, other casts of it run"

    def target(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> str:
        if node.op_type == "CastLike":
            like = inputs[1]
            assert like is not None
            return like.elem.name
        return _cast_target(node)

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2 if node.op_type == "CastLike" else 1)
        if any(f is None for f in inputs):
            raise node.fail("an input is absent")
        x = inputs[0]
        assert x is not None
        int_attr(node, "saturate", 1, (0, 1))  # a flag; another value is a malformed model
        self.round_mode(node)
        target = self.target(node, inputs)
        castable = (*COMPUTE_TYPES, *NARROW_TYPES)
        for which, elem in (("from", x.elem.name), ("to", target)):
            if elem not in castable:
                raise node.unsupported(f"casts {which} element type {elem}; Loam casts {', '.join(castable)}")
        value = None
        if is_symbolic(x):
            value = self.fold_symbolic(x, target)
        elif x.value is not None:
            value = self.cast_value(node, np.asarray(x.value), target)
        return [Facts(dtypes.by_name(target), x.shape, value)]

    @staticmethod
    def round_mode(node: NodeInfo) -> str:
        """`round_mode` (opset 24: how a cast into float8e8m0 rounds), checked."""
        mode = node.attr("round_mode", "up")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode not in ROUND_MODES:
            raise node.fail(f"round_mode must be one of {', '.join(ROUND_MODES)}, got {mode!r}")
        return str(mode)

    def cast_value(self, node: NodeInfo, x: np.ndarray, target: str) -> np.ndarray:
        """`x` cast as the module casts it (stage 0 folds a constant with this)."""
        dtype = dtypes.by_name(target).numpy
        assert dtype is not None
        if target in NARROW_TYPES:
            saturate = int_attr(node, "saturate", 1, (0, 1))
            return kernel_cast_narrow(x, to=dtype.name, saturate=saturate, round_mode=self.round_mode(node))
        with np.errstate(all="ignore"):
            return x.astype(dtype)

    @staticmethod
    def fold_symbolic(x: Facts, target: str) -> np.ndarray | None:
        """An integer value known as polynomials, cast: to i64 unchanged (it holds every such value),
        to i32 wrapped, to bool compared with 0; a cast to a float is computed by the run."""
        convert: Callable[[Poly], Poly] | None = {
            "i64": lambda v: v,
            "i32": derived.wrap32,
            "bool": truth,
        }.get(target)
        if convert is None:
            return None
        values = polys_of(x.value)
        return np.array([convert(v) for v in values.reshape(-1)], dtype=object).reshape(values.shape)

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import CastNarrowOp, CastOp

        x = operands[0]
        assert x is not None
        result = ctx.result_types[0]
        if x.type == result:
            return [x]
        if result.elem.name in NARROW_TYPES:
            dtype = result.elem.numpy
            assert dtype is not None
            saturate = int_attr(node, "saturate", 1, (0, 1))
            mode = self.round_mode(node)
            return emit_library(
                ctx, CastNarrowOp([x], [result], node.name, to=dtype.name, saturate=saturate, round_mode=mode)
            )
        op = CastOp(x, result, node.name)
        ctx.emit(op)
        return [op.result]


RULES: tuple[OpRule, ...] = (CastRule(),)
