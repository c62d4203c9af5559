"""The broadcasting arithmetic, comparison, logic and bitwise operators, Max/Min/Sum/Mean, Clip and Where.

Each is an `ExprRule` (`loam.ops.elementwise`): one Expr over its inputs, broadcast numpy-style.
Older opsets are restated: the `broadcast`/`axis` attributes of the binary operators before opset 7
(the second operand aligned at `axis`, then broadcast as today), Clip's `min`/`max` attributes
before opset 11, and the equal shapes Max/Min/Sum/Mean required before opset 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import derived
from loam.core.poly import Poly
from loam.dialects.expr import Expr
from loam.ops.base import (
    Facts,
    KeepsAxes,
    LowerContext,
    NodeInfo,
    OpRule,
    float_attr,
    int_attr,
    require_arity,
    same_axis,
)
from loam.ops.elementwise import ALL, INTS, NUMERIC, UINTS, Elems, ExprRule, Symbolic, operand, typed_const
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.lowering import axes_type, require_elem_types

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis


# -- binary operators ----------------------------------------------------------------------------


class BinaryRule(ExprRule):
    """A two-input operator: one step over the operands (`add`, `less`, ...).

    Before opset 7 (for the operators that had them) `broadcast=1` aligns B with A starting at
    `axis` (by default B's axes are A's last ones); B is regrouped with unit axes after it so that
    numpy broadcasting then means the same.  Without `broadcast`, the shapes must be equal.
    """

    low = high = 2

    def __init__(
        self,
        op_type: str,
        step: str,
        elem_types: tuple[str, ...],
        *,
        boolean: bool = False,
        legacy: bool = True,
        attributes: frozenset[str] = frozenset(),
        first_opset: int = 1,
        limitations: str = "",
    ) -> None:
        self.op_types = (op_type,)
        self.step = step
        self.elem_types = elem_types
        self.boolean = boolean
        self.legacy = legacy
        legacy_attrs = {"broadcast", "axis", "consumed_inputs"} if legacy else set()
        self.attributes = frozenset(attributes | legacy_attrs)
        self.first_opset = first_opset
        self.limitations = limitations

    def result_elem(self, node: NodeInfo, elems: Elems) -> str:
        return "bool" if self.boolean else super().result_elem(node, elems)

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        return operand(0).binary(self.step, operand(1))

    # -- the old `broadcast`/`axis` attributes ----------------------------------------------------

    def _old_alignment(self, node: NodeInfo, a: tuple[Poly, ...], b: tuple[Poly, ...]) -> int | None:
        """Where B starts in A under the pre-7 rules, or None when the opset broadcasts as numpy does."""
        if not self.legacy or node.since >= 7:
            return None
        if not int_attr(node, "broadcast", 0):
            if a != b:
                raise node.fail(
                    f"opset {node.since} without broadcast=1 needs equal shapes, got "
                    f"[{', '.join(map(str, a))}] and [{', '.join(map(str, b))}]"
                )
            return len(a) - len(b)
        axis = len(a) - len(b) if node.attr("axis") is None else int_attr(node, "axis", 0)
        axis += len(a) if axis < 0 else 0
        if not 0 <= axis <= len(a) - len(b):
            raise node.fail(f"axis {node.attr('axis')} cannot align B of rank {len(b)} with A of rank {len(a)}")
        one = Poly.const(1)
        for j, extent in enumerate(b):
            if extent != a[axis + j] and extent != one:
                raise node.fail(f"B axis {j} has extent {extent}, A axis {axis + j} has {a[axis + j]}")
        return axis

    def shape(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, ...]:
        a, b = inputs[0], inputs[1]
        assert a is not None and b is not None
        if self._old_alignment(node, a.shape, b.shape) is not None:
            return a.shape
        return super().shape(node, inputs)

    def operand_values(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[np.ndarray]:
        a, b = super().operand_values(node, inputs)
        axis = self._old_alignment(node, tuple(Poly.const(d) for d in a.shape), tuple(Poly.const(d) for d in b.shape))
        if axis is not None:
            b = b.reshape(b.shape + (1,) * (a.ndim - axis - b.ndim))
        return [a, b]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        a, b = inputs[0], inputs[1]
        assert a is not None and b is not None
        axis = self._old_alignment(node, tuple(x.extent for x in a), tuple(x.extent for x in b))
        if axis is None:
            return super().axes(node, inputs, outputs)
        for j, axis_b in enumerate(b):
            if axis_b.extent != Poly.const(1):
                same_axis(node, a[axis + j], axis_b, f"B axis {j} aligned at A axis {axis + j}")
        return [a]

    def operands(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue | None]:
        from loam.dialects.kernel import RegroupOp
        from loam.dialects.tensor_axes import AxesTensorType, Axis

        a, b = operands[0], operands[1]
        assert a is not None and b is not None
        ta, tb = axes_type(a), axes_type(b)
        axis = self._old_alignment(node, ta.shape, tb.shape)
        if axis is None or axis + tb.rank == ta.rank:
            return [a, b]
        # B's axes then unit axes up to A's rank; each unit axis takes the name of the A axis it meets.
        units = [Axis(x.name, Poly.const(1), x.parts) for x in ta.axes[axis + tb.rank :]]
        op = RegroupOp(b, AxesTensorType(tb.elem, [*tb.axes, *units]), node.name)
        ctx.emit(op)
        return [a, op.result]


class ModRule(BinaryRule):
    """ONNX Mod: `fmod=0` takes the divisor's sign (Python's `%`), `fmod=1` the dividend's (C fmod).

    Before opset 28 ONNX left fmod=0 undefined for floats; Loam gives it opset 28's meaning.
    """

    def __init__(self) -> None:
        super().__init__("Mod", "mod", NUMERIC, legacy=False, attributes=frozenset({"fmod"}), first_opset=10)

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        return operand(0).binary("fmod" if int_attr(node, "fmod", 0, (0, 1)) else "mod", operand(1))


class PowRule(BinaryRule):
    """ONNX Pow: the exponent may have another numeric type; the result has the base's."""

    same_type_inputs = (0,)

    def __init__(self) -> None:
        super().__init__("Pow", "pow", ("i32", "i64", *FLOATS), limitations="exponent of any numeric type")
        self.exponent_types = NUMERIC

    def zip_types(self) -> tuple[str, ...]:
        return self.exponent_types

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts | None]:
        require_arity(node, inputs, 2)
        base, exponent = inputs
        if base is None or exponent is None:
            raise node.fail("an input is absent")
        require_elem_types(node, [base.elem.name], self.elem_types)
        require_elem_types(node, [exponent.elem.name], self.exponent_types)
        return list(inputs)


class BitShiftRule(BinaryRule):
    """ONNX BitShift, `direction` LEFT or RIGHT (signed types, from opset 28, shift arithmetically)."""

    def __init__(self) -> None:
        super().__init__(
            "BitShift", "shl", UINTS + INTS, legacy=False, attributes=frozenset({"direction"}), first_opset=11
        )

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        direction = node.attr("direction", None)
        if direction not in ("LEFT", "RIGHT"):
            raise node.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
        return operand(0).binary("shl" if direction == "LEFT" else "shr", operand(1))

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts | None]:
        checked = super().check(node, inputs)
        self.build(node, [])
        return checked


# -- variadic operators --------------------------------------------------------------------------


class VariadicRule(ExprRule):
    """Max, Min, Sum, Mean over 1 or more inputs (equal shapes before opset 8, broadcast from 8)."""

    high = 1 << 16

    def __init__(self, op_type: str, step: str, elem_types: tuple[str, ...], mean: bool = False) -> None:
        self.op_types = (op_type,)
        self.step = step
        self.elem_types = elem_types
        self.mean = mean
        self.attributes = frozenset({"consumed_inputs"})

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts | None]:
        checked = super().check(node, inputs)
        absent = [i for i, f in enumerate(checked) if f is None]
        if absent:
            raise node.fail(f"input {absent[0]} is absent; every input of {node.op_type} is required")
        return checked

    def shape(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, ...]:
        shapes = {f.shape for f in inputs if f is not None}
        if node.since < 8 and len(shapes) > 1:
            raise node.fail(f"opset {node.since} needs inputs of one shape (broadcasting came in opset 8)")
        return super().shape(node, inputs)

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        expr = operand(0)
        for i in range(1, len(elems)):
            expr = expr.binary(self.step, operand(i))
        if self.mean and len(elems) > 1:
            expr = expr.binary("div", typed_const(len(elems), elems[0]))
        return expr


# -- Clip and Where --------------------------------------------------------------------------------


class ClipRule(KeepsAxes, ExprRule):
    """ONNX Clip: min(max(x, lo), hi); `lo`/`hi` are attributes before opset 11, optional inputs after.

    A NaN input stays NaN, and `lo > hi` gives `hi`, as onnxruntime computes it.
    """

    op_types = ("Clip",)
    high = 3
    elem_types = NUMERIC
    attributes = frozenset({"min", "max", "consumed_inputs"})

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts | None]:
        if node.since < 11:
            require_arity(node, inputs, 1)
            x = inputs[0]
            if x is not None:
                # Clip-1/6 are float-only; their f32-valued min/max have no integer meaning.
                require_elem_types(node, [x.elem.name], FLOATS)
            for key in ("min", "max"):
                float_attr(node, key, 0.0)
        else:
            for key in ("min", "max"):
                if node.attr(key, None) is not None:
                    raise node.unsupported(f"attribute '{key}' of opset {node.since} is not supported")
        checked = super().check(node, inputs)
        x = checked[0]
        assert x is not None
        for which, f in zip(("min", "max"), checked[1:], strict=False):
            if f is not None and f.static_shape() not in ((), (1,)):
                raise node.fail(f"{which} must be a scalar, got extents [{', '.join(map(str, f.shape))}]")
        return checked

    def shape(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, ...]:
        x = inputs[0]
        assert x is not None
        return x.shape

    def operand_values(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[np.ndarray]:
        values = super().operand_values(node, inputs)
        return [values[0]] + [v.reshape(()) for v in values[1:]]

    def symbolic(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> Symbolic | None:
        if node.since < 11:
            return None  # Clip-1/6 compute floats only
        lo, hi = (len(inputs) > i and inputs[i] is not None for i in (1, 2))

        def clip(x: Poly, *limits: Poly) -> Poly:
            rest = iter(limits)
            if lo:
                x = derived.maximum(x, next(rest))
            if hi:
                x = derived.minimum(x, next(rest))
            return x

        return clip

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        x = operand(0)
        if node.since < 11:
            limit = float(np.finfo(np.float32).max)
            lo, hi = float_attr(node, "min", -limit), float_attr(node, "max", limit)
            return x.binary("max", typed_const(lo, elems[0])).binary("min", typed_const(hi, elems[0]))
        index = 1
        if len(elems) > 1 and elems[1] is not None:
            x = x.binary("max", operand(index))
            index += 1
        if len(elems) > 2 and elems[2] is not None:
            x = x.binary("min", operand(index))
        return x

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import RegroupOp
        from loam.dialects.tensor_axes import AxesTensorType
        from loam.ops.lowering import folded_scalar

        # A [1]-shaped bound would raise the result's rank for a rank-0 input: make it rank 0.
        x = operands[0]
        assert x is not None
        values: list[SSAValue | None] = [x]
        for v in operands[1:]:
            if v is not None and axes_type(v).rank and not axes_type(x).rank and folded_scalar(v) is None:
                op = RegroupOp(v, AxesTensorType(axes_type(v).elem, []), node.name)
                ctx.emit(op)
                v = op.result
            values.append(v)
        return super().lower(ctx, node, values)


class WhereRule(ExprRule):
    """ONNX Where: X where the condition holds, else Y, all three broadcast."""

    op_types = ("Where",)
    low = high = 3
    elem_types = ALL
    same_type_inputs = (1, 2)
    first_opset = 9

    def check(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts | None]:
        checked = super().check(node, inputs)
        cond = checked[0]
        assert cond is not None
        if cond.elem.name != "bool":
            raise node.fail(f"the condition must be bool, got {cond.elem.name}")
        return checked

    def result_elem(self, node: NodeInfo, elems: Elems) -> str:
        elem = elems[1]
        assert elem is not None
        return elem

    def build(self, node: NodeInfo, elems: Elems) -> Expr:
        return Expr.select(operand(0), operand(1), operand(2))


_LOGIC = ("bool",)

RULES: tuple[OpRule, ...] = (
    BinaryRule("Add", "add", NUMERIC),
    BinaryRule("Sub", "sub", NUMERIC),
    BinaryRule("Mul", "mul", NUMERIC),
    BinaryRule("Div", "div", NUMERIC, limitations="integer division truncates toward zero"),
    PowRule(),
    ModRule(),
    BinaryRule("Equal", "equal", ALL, boolean=True),
    BinaryRule("Less", "less", NUMERIC, boolean=True),
    BinaryRule("Greater", "greater", NUMERIC, boolean=True),
    BinaryRule("LessOrEqual", "less_equal", NUMERIC, boolean=True, legacy=False, first_opset=12),
    BinaryRule("GreaterOrEqual", "greater_equal", NUMERIC, boolean=True, legacy=False, first_opset=12),
    BinaryRule("And", "and", _LOGIC, boolean=True),
    BinaryRule("Or", "or", _LOGIC, boolean=True),
    BinaryRule("Xor", "xor", _LOGIC, boolean=True),
    BinaryRule("BitwiseAnd", "bitand", INTS + UINTS, legacy=False, first_opset=18),
    BinaryRule("BitwiseOr", "bitor", INTS + UINTS, legacy=False, first_opset=18),
    BinaryRule("BitwiseXor", "bitxor", INTS + UINTS, legacy=False, first_opset=18),
    BitShiftRule(),
    VariadicRule("Max", "max", NUMERIC),
    VariadicRule("Min", "min", NUMERIC),
    VariadicRule("Sum", "add", FLOATS),
    VariadicRule("Mean", "add", FLOATS, mean=True),
    ClipRule(),
    WhereRule(),
)
