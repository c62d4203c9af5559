"""Normalisations over the trailing axes, from `axis` on: LayerNormalization, RMSNormalization,
onnxruntime's SimplifiedLayerNormalization (which it defines in the default domain), and
LpNormalization (along one axis).

LayerNormalization is a library kernel (`kernel.normalize`, computed by
`loam/runtime/kernels/normalization.py`).  The others are composed from existing kernels:
RMSNormalization and SimplifiedLayerNormalization by two zips around a `kernel.reduce` mean
(`emit_mean_square`, which com.microsoft's residual layer norms share), LpNormalization by a norm
and a quotient.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from loam.core import dtypes, owed
from loam.core.poly import Poly
from loam.dialects.tensor_axes import Axis
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, int_attr, require_arity, same_axis
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.lowering import axes_type
from loam.ops.operands import emit_library, norm_axis, require_elem, require_elem_like, required_inputs
from loam.ops.reduce import kept_unit_axes, unit_axis
from loam.runtime.kernels.normalization import kernel_normalize
from loam.runtime.kernels.reduce import kernel_reduce

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.expr import Expr


class NormalizeParams(TypedDict):
    """`kernel.normalize`'s parameters (LayerNormalization's here, InstanceNormalization's in
    `loam.ops.channel_norms`)."""

    axes: tuple[int, ...]
    epsilon: float
    channel_axis: int
    stash: str
    stats: int


def _stretched_to_normalised(node: NodeInfo, x: Facts, axis: int, affine: Sequence[tuple[Facts | None, str]]) -> None:
    """Refuse a scale or bias that cannot broadcast numpy-style to X's axes from `axis` on; owe the
    equality of each extent it carries with the one it meets where either is symbolic."""
    trailing = x.shape[axis:]
    for f, name in affine:
        if f is not None and (f.rank > len(trailing) or any(
            d.is_const and t.is_const and d != Poly.const(1) and d != t
            for d, t in zip(f.shape[::-1], trailing[::-1], strict=False)
        )):  # fmt: skip
            raise node.fail(
                f"{name} of extents [{', '.join(map(str, f.shape))}] does not stretch to the normalised axes"
            )
        if f is not None:
            for d, t in zip(f.shape[::-1], trailing[::-1], strict=False):
                if d != Poly.const(1) and d != t:
                    owed.require_equal(t, d, node, f"{name} stretched to the normalised axes")


def _meets_trailing_axes(
    node: NodeInfo, x: tuple[Axis, ...], affine: Iterable[tuple[str, tuple[Axis, ...] | None]]
) -> None:
    """A scale or bias broadcast onto X's trailing axes: each axis it carries is the axis it meets."""
    for what, operand in affine:
        for i, a in enumerate(reversed(operand or ())):
            if a.extent != Poly.const(1):
                same_axis(node, a, x[len(x) - 1 - i], f"where {what} axis {len(operand or ()) - 1 - i} meets X")


# ---------------------------------------------------------------------------------------------
# LayerNormalization: kernel.normalize
# ---------------------------------------------------------------------------------------------


class LayerNormRule(OpRule):
    """ONNX LayerNormalization (opset 17): normalised over the axes from `axis` (default -1) on.

    Scale and the optional B broadcast numpy-style to those trailing axes.  The optional Mean and
    InvStdDev outputs (the reduced axes kept as extent 1, element type `stash_type`) are computed
    when the graph reads them.
    """

    op_types = ("LayerNormalization",)
    kernels: tuple[str, ...] = ("kernel.normalize",)
    attributes = frozenset({"axis", "epsilon", "stash_type"})
    first_opset = 17
    elem_types = FLOATS
    limitations = "stash_type must be f32 (1) or f64 (11)"

    def stash(self, node: NodeInfo, elem: str) -> tuple[str, str]:
        """(numpy dtype of the moments, Loam element type of Mean and InvStdDev)."""
        code = int(node.attr("stash_type", 1))
        if code == 1:
            return ("float64" if elem == "f64" else "float32"), "f32"
        if code == 11:
            return "float64", "f64"
        raise node.unsupported(f"stash_type {code} is not supported (f32 = 1 or f64 = 11)")

    def params(self, node: NodeInfo, rank: int, elem: str, outputs: int) -> NormalizeParams:
        axis = norm_axis(node, int(node.attr("axis", -1)), rank)
        return {
            "axes": tuple(range(axis, rank)),
            "epsilon": float(node.attr("epsilon", 1e-5)),
            "channel_axis": -1,
            "stash": self.stash(node, elem)[0],
            "stats": int(outputs > 1),
        }

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 3)
        x, scale = required_inputs(node, inputs, ("X", "Scale"))
        bias = inputs[2] if len(inputs) == 3 else None
        require_elem(node, x, self.elem_types, "X")
        require_elem_like(node, x, [scale] + ([bias] if bias else []), ["Scale"] + (["B"] if bias else []))
        if x.rank == 0:
            raise node.fail("X must have rank 1 or more")
        axis = norm_axis(node, int(node.attr("axis", -1)), x.rank)
        _stretched_to_normalised(node, x, axis, ((scale, "Scale"), (bias, "B")))
        stats_elem = dtypes.by_name(self.stash(node, x.elem.name)[1])
        stats_shape = tuple(d if i < axis else Poly.const(1) for i, d in enumerate(x.shape))
        y = Facts(x.elem, x.shape)
        facts = [y, Facts(stats_elem, stats_shape), Facts(stats_elem, stats_shape)]
        b = None if bias is None else bias.value
        if x.value is not None and scale.value is not None and (bias is None or b is not None):
            computed = kernel_normalize(x.value, scale.value, b, **self.params(node, x.rank, x.elem.name, 3))
            assert isinstance(computed, tuple)  # stats 1: the kernel gives (Y, Mean, InvStdDev)
            y_value, mean, inv = computed
            facts = [
                Facts(x.elem, x.shape, y_value),
                Facts(stats_elem, stats_shape, np.asarray(mean, stats_elem.numpy)),
                Facts(stats_elem, stats_shape, np.asarray(inv, stats_elem.numpy)),
            ]
        # The graph names one to three outputs; stage 0 compares the count with the node's.
        return facts[: self._outputs(node)]

    @staticmethod
    def _outputs(node: NodeInfo) -> int:
        return node.outputs

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        _meets_trailing_axes(node, x, zip(("Scale", "B"), inputs[1:3], strict=False))
        axis = norm_axis(node, int(node.attr("axis", -1)), len(x))
        taken = [a.name for a in x[:axis]]
        stats: list[Axis] = list(x[:axis])
        for a in x[axis:]:
            if a.extent == Poly.const(1):
                stats.append(a)
            else:
                stats.append(unit_axis(taken))
            taken.append(stats[-1].name)
        results: list[tuple[Axis | None, ...]] = [x, tuple(stats), tuple(stats)]
        return results[: len(outputs)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import NormalizeOp

        x = operands[0]
        assert x is not None
        t = axes_type(x)
        present = [v for v in operands if v is not None]
        n = len(ctx.result_types)
        params = self.params(node, t.rank, t.elem.name, n)
        types = ctx.result_types if n == 3 else [ctx.result_types[0]]
        if 1 < n < 3:
            # Mean alone: the kernel computes both statistics; InvStdDev's type is Mean's.
            types = [*ctx.result_types, ctx.result_types[1]]
        results = emit_library(ctx, NormalizeOp(present, types, node.name, **params))
        return results[:n]


# ---------------------------------------------------------------------------------------------
# RMSNormalization and SimplifiedLayerNormalization: a mean of squares
# ---------------------------------------------------------------------------------------------


class RmsNormRule(OpRule):
    """ONNX RMSNormalization (opset 23): X / sqrt(mean(X^2 over the axes from `axis` on) + epsilon),
    cast back to X's type, times scale (numpy-style broadcast onto those axes).

    Composed from existing kernels as ONNX's function body composes it: the squares in the stash
    type by a `kernel.zip`, their mean by a `kernel.reduce`, and one `kernel.zip` for the rest, so
    both backends compute it and `fuse` may join the squares to what precedes them.  The stash type
    is f32 (f64 for an f64 X, as for LayerNormalization) or f64 (`stash_type` 11).
    """

    op_types = ("RMSNormalization",)
    kernels: tuple[str, ...] = ("kernel.zip", "kernel.reduce")
    attributes = frozenset({"axis", "epsilon", "stash_type"})
    first_opset = 23
    elem_types = FLOATS
    limitations = "stash_type must be f32 (1) or f64 (11); scale has X's element type"
    # Whether a half X's normalised value is rounded to X's type before the product with scale, as
    # ONNX's function body casts (NormalizedT); onnxruntime's own kernels round once, at the end.
    rounds_normalised = True

    def stash(self, node: NodeInfo, elem: str) -> str:
        """The element type the squares and their mean are computed in."""
        code = int(node.attr("stash_type", 1))
        if code not in (1, 11):
            raise node.unsupported(f"stash_type {code} is not supported (f32 = 1 or f64 = 11)")
        return "f64" if code == 11 or elem == "f64" else "f32"

    def expressions(self, node: NodeInfo, elem: str) -> tuple[Expr, Expr]:
        """(the square of operand 0, X; and Y from X, the mean of the squares and scale), in the
        stash type with X's rounding where ONNX casts back."""
        from loam.dialects.expr import Expr
        from loam.ops.lowering import typed_expr

        stash = self.stash(node, elem)
        compute = "f32" if elem in ("f16", "bf16") else elem  # what typed_expr widens a half to
        x, mean, scale = Expr.operand(0), Expr.operand(1), Expr.operand(2)
        xu = x if compute == stash else x.cast(stash)
        squares = typed_expr(xu * xu, [elem], stash)
        normalised = xu / (mean + Expr.const(float(node.attr("epsilon", 1e-5)), stash)).unary("sqrt")
        if stash != compute:
            normalised = normalised.cast(compute)
        if elem != compute and self.rounds_normalised:  # NormalizedT: rounded to X's half type before the product
            normalised = normalised.cast(elem).cast(compute)
        return squares, typed_expr(normalised * scale, [elem, stash, elem], elem)

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        from loam.dialects.expr import evaluate

        require_arity(node, inputs, 2)
        x, scale = required_inputs(node, inputs, ("X", "scale"))
        require_elem(node, x, self.elem_types, "X")
        require_elem_like(node, x, [scale], ["scale"])
        if x.rank == 0:
            raise node.fail("X must have rank 1 or more")
        axis = norm_axis(node, int(node.attr("axis", -1)), x.rank)
        _stretched_to_normalised(node, x, axis, ((scale, "scale"),))
        value = None
        if x.value is not None and scale.value is not None:
            squares, result = self.expressions(node, x.elem.name)
            # The module's own mean (kernel.reduce), over squares already in the stash type.
            mean = kernel_reduce(evaluate(squares, [x.value]), kind="mean", axes=tuple(range(axis, x.rank)), keepdims=1)
            folded = evaluate(result, [x.value, mean, scale.value])
            value = np.broadcast_to(folded, x.value.shape).astype(x.elem.numpy)
        return [Facts(x.elem, x.shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        _meets_trailing_axes(node, x, (("scale", inputs[1]),))
        return [x]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ZipOp
        from loam.ops.lowering import axes_type

        x, scale = operands[0], operands[1]
        assert x is not None and scale is not None
        t = axes_type(x)
        axis = norm_axis(node, int(node.attr("axis", -1)), t.rank)
        squares_expr, result_expr = self.expressions(node, t.elem.name)
        mean = emit_mean_square(ctx, node, x, squares_expr, axis, self.stash(node, t.elem.name))
        y = ZipOp([x, mean, scale], result_expr, ctx.result_types[0], node.name)
        ctx.emit(y)
        return [y.result]


class SimplifiedLayerNormRule(RmsNormRule):
    """onnxruntime's SimplifiedLayerNormalization: an RMS norm that onnxruntime defines in the default
    domain "" (it is not an ONNX operator) and onnxruntime-genai's model builder writes there.

    Y = X / sqrt(mean(X^2 over the axes from `axis` on) + epsilon) * scale, as onnxruntime's CPU
    kernel computes it: in f32 for f32 and halves (f64 for f64), a half X rounded once, at the end
    (ONNX's RMSNormalization rounds the normalised value before the product too).  The optional
    inv_std_var is 1 / sqrt(mean + epsilon), f32, the normalised axes kept as extent 1.  Lowered as
    RMSNormalization is, plus one `kernel.zip` for inv_std_var.
    """

    op_types = ("SimplifiedLayerNormalization",)
    first_opset = 1
    defined_by = "onnxruntime"
    elem_types = ("f32", "f64", "f16")
    rounds_normalised = False
    limitations = (
        "stash_type must be 1 (onnxruntime computes in f32 whatever it says); scale has X's element type and "
        "one value per normalised element; onnxruntime's bf16 is not compiled"
    )

    def stash(self, node: NodeInfo, elem: str) -> str:
        code = int_attr(node, "stash_type", 1)
        if code != 1:
            raise node.unsupported(
                f"attribute 'stash_type' {code} is not supported: onnxruntime's kernel computes in f32 whatever it "
                "says, so Loam reads only 1"
            )
        return "f64" if elem == "f64" else "f32"

    def inv_expr(self, node: NodeInfo, stash: str) -> Expr:
        """inv_std_var (f32) from the mean of the squares (operand 0, in the stash type)."""
        from loam.dialects.expr import Expr

        mean = Expr.operand(0)
        inv = Expr.const(1.0, stash) / (mean + Expr.const(float(node.attr("epsilon", 1e-5)), stash)).unary("sqrt")
        return inv if stash == "f32" else inv.cast("f32")

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        from loam.dialects.expr import evaluate

        if node.outputs > 2:
            raise node.fail(f"names {node.outputs} outputs; {node.op_type} has 2 (Y, inv_std_var)")
        (y,) = super().infer(node, inputs)
        x, scale = inputs[0], inputs[1]
        assert x is not None and scale is not None
        axis = norm_axis(node, int(node.attr("axis", -1)), x.rank)
        _whole_scale(node, x, scale, axis)
        stats_shape = tuple(d if i < axis else Poly.const(1) for i, d in enumerate(x.shape))
        inv = None
        if x.value is not None:
            squares, _ = self.expressions(node, x.elem.name)
            mean = kernel_reduce(evaluate(squares, [x.value]), kind="mean", axes=tuple(range(axis, x.rank)), keepdims=1)
            inv = np.asarray(evaluate(self.inv_expr(node, self.stash(node, x.elem.name)), [mean]), np.float32)
        return [y, Facts(dtypes.by_name("f32"), stats_shape, inv)][: node.outputs]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        _meets_trailing_axes(node, x, (("scale", inputs[1]),))
        axis = norm_axis(node, int(node.attr("axis", -1)), len(x))
        results: list[tuple[Axis | None, ...]] = [x, stat_axes(x, axis)]
        return results[: len(outputs)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ZipOp
        from loam.ops.lowering import axes_type

        x, scale = operands[0], operands[1]
        assert x is not None and scale is not None
        t = axes_type(x)
        axis = norm_axis(node, int(node.attr("axis", -1)), t.rank)
        stash = self.stash(node, t.elem.name)
        squares_expr, result_expr = self.expressions(node, t.elem.name)
        mean = emit_mean_square(ctx, node, x, squares_expr, axis, stash)
        y = ZipOp([x, mean, scale], result_expr, ctx.result_types[0], node.name)
        ctx.emit(y)
        if len(ctx.result_types) == 1:
            return [y.result]
        inv = ZipOp([mean], self.inv_expr(node, stash), ctx.result_types[1], node.name)
        ctx.emit(inv)
        return [y.result, inv.result]


def _whole_scale(node: NodeInfo, x: Facts, scale: Facts, axis: int) -> None:
    """onnxruntime's layer norms index scale by the normalised element: its size must be theirs."""
    size = Poly.const(1)
    for d in scale.shape:
        size = size * d
    norm = Poly.const(1)
    for d in x.shape[axis:]:
        norm = norm * d
    if size.is_const and norm.is_const and size != norm:
        raise node.fail(
            f"scale of extents [{', '.join(map(str, scale.shape))}] holds {size} values; onnxruntime wants one per "
            f"normalised element ({norm})"
        )


def stat_axes(x: Sequence[Axis], axis: int) -> tuple[Axis, ...]:
    """The axes of a layer norm's statistics: x's, those from `axis` on kept as extent 1."""
    return kept_unit_axes(x, [Poly.const(1) if i >= axis else a.extent for i, a in enumerate(x)])


def emit_mean_square(ctx: LowerContext, node: NodeInfo, x: SSAValue, squares: Expr, axis: int, stash: str) -> SSAValue:
    """The mean of `squares` (an Expr of x giving x^2 in `stash`) over x's axes from `axis` on, the
    reduced axes kept as extent 1: a `kernel.zip` then a `kernel.reduce`, in `stash`."""
    from loam.dialects.kernel import ReduceOp, ZipOp
    from loam.dialects.tensor_axes import AxesTensorType
    from loam.ops.lowering import axes_type

    t = axes_type(x)
    zipped = ZipOp([x], squares, AxesTensorType(stash, t.axes), node.name)
    ctx.emit(zipped)
    reduced = AxesTensorType(
        stash, kept_unit_axes(t.axes, [Poly.const(1) if i >= axis else d for i, d in enumerate(t.shape)])
    )
    mean = ReduceOp([zipped.result], [reduced], node.name, kind="mean", axes=tuple(range(axis, t.rank)), keepdims=1)
    ctx.emit(mean)
    return mean.results[0]


# ---------------------------------------------------------------------------------------------
# LpNormalization: a norm and a quotient
# ---------------------------------------------------------------------------------------------


class LpNormRule(OpRule):
    """ONNX LpNormalization: x / (sum of |x|^p along `axis`)^(1/p), p 1 or 2, and 0 where that norm
    is 0 (as onnxruntime and ONNX's reference give).

    Composed from existing kernels: the norm by a `kernel.reduce` (l1 or l2, the axis kept) and one
    `kernel.zip` for the quotient, so both backends compute it.
    """

    op_types = ("LpNormalization",)
    kernels: tuple[str, ...] = ("kernel.reduce", "kernel.zip")
    attributes = frozenset({"axis", "p"})
    elem_types = FLOATS

    def params(self, node: NodeInfo, rank: int) -> tuple[int, str]:
        """(the axis, the reduction: l1 or l2)."""
        axis = norm_axis(node, int(node.attr("axis", -1)), rank)
        return axis, {1: "l1", 2: "l2"}[int_attr(node, "p", 2, (1, 2))]

    @staticmethod
    def quotient(elem: str) -> Expr:
        """x (operand 0) over its norm (operand 1), 0 where the norm is 0."""
        from loam.dialects.expr import Expr
        from loam.ops.lowering import typed_expr

        x, norm = Expr.operand(0), Expr.operand(1)
        zero = Expr.const(0.0, "f32" if elem in ("f16", "bf16") else elem)
        return typed_expr(Expr.select(norm.binary("equal", zero), zero, x / norm), [elem, elem], elem)

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        from loam.dialects.expr import evaluate

        require_arity(node, inputs, 1)
        (x,) = required_inputs(node, inputs, ("input",))
        require_elem(node, x, self.elem_types, "the input")
        if x.rank == 0:
            raise node.fail("the input must have rank 1 or more")
        axis, kind = self.params(node, x.rank)
        value = None
        if x.value is not None:
            norm = kernel_reduce(x.value, kind=kind, axes=(axis,), keepdims=1)
            value = np.asarray(evaluate(self.quotient(x.elem.name), [x.value, norm])).astype(x.elem.numpy)
        return [Facts(x.elem, x.shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        return [x]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ReduceOp, ZipOp
        from loam.dialects.tensor_axes import AxesTensorType
        from loam.ops.lowering import axes_type

        x = operands[0]
        assert x is not None
        t = axes_type(x)
        axis, kind = self.params(node, t.rank)
        kept = kept_unit_axes(t.axes, [Poly.const(1) if i == axis else d for i, d in enumerate(t.shape)])
        norm = ReduceOp([x], [AxesTensorType(t.elem, kept)], node.name, kind=kind, axes=(axis,), keepdims=1)
        ctx.emit(norm)
        y = ZipOp([x, norm.results[0]], self.quotient(t.elem.name), ctx.result_types[0], node.name)
        ctx.emit(y)
        return [y.result]


RULES: tuple[OpRule, ...] = (LayerNormRule(), RmsNormRule(), SimplifiedLayerNormRule(), LpNormRule())
