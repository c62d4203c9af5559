"""com.microsoft's residual layer norms: SkipLayerNormalization and SkipSimplifiedLayerNormalization.

onnxruntime's CPU kernel (one for both) computes, over the last axis of a rank 2 or 3 input:

    s = input + skip (+ bias)                          the optional output input_skip_bias_sum
    SkipLayerNormalization:            output = (s - mean(s)) / sqrt(var(s) + epsilon) * gamma (+ beta)
    SkipSimplifiedLayerNormalization:  output = s / sqrt(mean(s^2) + epsilon) * gamma

skip is input's shape or broadcasts onto its trailing axes ([S, H] or [1, S, H] for a [B, S, H]
input: the kernel reads it at the input's offset modulo its size); gamma, beta and bias are [H].
The optional outputs mean and inv_std_var are f32 whatever the input's type, the last axis kept as
extent 1; the simplified operator's mean is 0.  A half input is computed in f32 throughout: the sum
is rounded to the half type only for input_skip_bias_sum, the output once, at the end.

Lowered to the kernels ONNX's own norms use: a `kernel.zip` for the sum (f32 for halves), then
LayerNormalization's `kernel.normalize` or RMSNormalization's mean of squares (`kernel.zip`,
`kernel.reduce`) and a `kernel.zip` for the output; another `kernel.zip` rounds a half output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from loam.core import dtypes, owed
from loam.core.poly import Poly
from loam.dialects.expr import Expr
from loam.dialects.tensor_axes import Axis
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, float_attr, require_arity, same_axis
from loam.ops.layer_norms import emit_mean_square, stat_axes
from loam.ops.lowering import compute_elem, typed_expr
from loam.ops.microsoft.domain import DOMAIN
from loam.ops.operands import emit_library, require_elem

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

# onnxruntime's default epsilon for both operators (kDefaultSkipLayerNormEpsilon), an f32.
DEFAULT_EPSILON = 1e-12


class SkipNormRule(OpRule):
    """SkipLayerNormalization (inputs input, skip, gamma[, beta[, bias]]) or, `simplified`,
    SkipSimplifiedLayerNormalization (input, skip, gamma[, bias]); outputs output[, mean[,
    inv_std_var[, input_skip_bias_sum]]], any of the last three unnamed."""

    domain = DOMAIN
    attributes = frozenset({"epsilon"})
    elem_types = ("f32", "f16")

    def __init__(self, simplified: bool) -> None:
        self.simplified = simplified
        self.op_types = ("SkipSimplifiedLayerNormalization",) if simplified else ("SkipLayerNormalization",)
        self.names = ("input", "skip", "gamma", "bias") if simplified else ("input", "skip", "gamma", "beta", "bias")
        self.kernels = ("kernel.zip", "kernel.reduce") if simplified else ("kernel.zip", "kernel.normalize")
        self.limitations = (
            "input of rank 2 or 3, normalised over its last axis; skip broadcasts onto input's trailing axes; "
            + ("gamma and bias" if simplified else "gamma, beta and bias")
            + " are [H]; every input has input's element type (onnxruntime's bf16 is not compiled)"
            + ("; the mean output is 0, as onnxruntime writes it" if simplified else "")
        )

    def epsilon(self, node: NodeInfo) -> float:
        value = float_attr(node, "epsilon", DEFAULT_EPSILON)
        if not value >= 0:
            raise node.fail(f"attribute 'epsilon' must be 0 or more, got {value}")
        return value

    def operands(
        self, operands: Sequence[SSAValue | None]
    ) -> tuple[SSAValue, SSAValue, SSAValue, SSAValue | None, SSAValue | None]:
        """(input, skip, gamma, beta, bias) from the node's inputs; beta is None for the simplified one."""
        ops = list(operands) + [None] * (len(self.names) - len(operands))
        x, skip, gamma = ops[0], ops[1], ops[2]
        assert x is not None and skip is not None and gamma is not None  # infer requires all three
        if self.simplified:
            return x, skip, gamma, None, ops[3]
        return x, skip, gamma, ops[3], ops[4]

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3, len(self.names))
        if node.outputs > 4:
            raise node.fail(f"names {node.outputs} outputs; {node.op_type} has 4")
        self.epsilon(node)
        for f, name in zip(inputs, self.names, strict=False):
            if f is None and name in ("input", "skip", "gamma"):
                raise node.fail(f"input {name} is absent")
        x, skip, *params = (f for f in inputs)
        assert x is not None and skip is not None
        require_elem(node, x, self.elem_types, "input")
        for f, name in zip(inputs[1:], self.names[1:], strict=False):
            if f is not None and f.elem != x.elem:
                raise node.unsupported(
                    f"{name} has element type {f.elem.name} and input {x.elem.name}; onnxruntime needs one"
                )
        if x.rank not in (2, 3):
            raise node.fail(f"input must have rank 2 or 3, got {x.rank}")
        self.check_skip(node, x, skip)
        hidden = x.shape[-1]
        for f, name in zip(params, self.names[2:], strict=False):
            if f is None:
                continue
            if f.rank != 1 or (f.shape[0].is_const and hidden.is_const and f.shape[0] != hidden):
                raise node.fail(f"{name} must have extents [{hidden}], got [{', '.join(map(str, f.shape))}]")
            owed.require_equal(hidden, f.shape[0], node, f"{name}'s one value per hidden element")
        stats = Facts(dtypes.by_name("f32"), (*x.shape[:-1], Poly.const(1)))
        return [Facts(x.elem, x.shape), stats, stats, Facts(x.elem, x.shape)][: node.outputs]

    @staticmethod
    def check_skip(node: NodeInfo, x: Facts, skip: Facts) -> None:
        """skip is input's trailing extents, after any leading 1s (onnxruntime reads it modulo its size)."""
        dims = list(skip.shape)
        while len(dims) > 1 and dims[0] == Poly.const(1):
            dims.pop(0)
        trailing = x.shape[x.rank - len(dims) :] if len(dims) <= x.rank else ()
        if len(dims) > x.rank or any(d.is_const and t.is_const and d != t for d, t in zip(dims, trailing, strict=True)):
            raise node.fail(
                f"skip of extents [{', '.join(map(str, skip.shape))}] does not broadcast onto input's trailing "
                f"extents [{', '.join(map(str, x.shape))}] as onnxruntime reads it"
            )
        for d, t in zip(dims, trailing, strict=True):
            owed.require_equal(t, d, node, "skip's extent where it meets input's")

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        skip = inputs[1] or ()
        for i, a in enumerate(reversed(skip)):
            if a.extent != Poly.const(1):
                same_axis(node, a, x[len(x) - 1 - i], f"where skip's axis {len(skip) - 1 - i} meets input's")
        for p, name in zip(inputs[2:], self.names[2:], strict=False):
            if p is not None:
                same_axis(node, p[0], x[-1], f"between input's last axis and {name}")
        stats = stat_axes(x, len(x) - 1)
        results: list[tuple[Axis | None, ...]] = [x, stats, stats, x]
        return results[: len(outputs)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import NormalizeOp, ZipOp
        from loam.dialects.tensor_axes import AxesTensorType
        from loam.ops.lowering import axes_type

        x, skip, gamma, beta, bias = self.operands(operands)
        t = axes_type(x)
        elem = t.elem.name
        wide = compute_elem(elem)
        types = ctx.result_types
        n = len(types)
        eps = self.epsilon(node)
        addends = [v for v in (x, skip, bias) if v is not None]
        total = Expr.operand(0) + Expr.operand(1)
        if len(addends) == 3:
            total = total + Expr.operand(2)
        s = ZipOp(addends, typed_expr(total, [elem] * len(addends), wide), AxesTensorType(wide, t.axes), node.name)
        ctx.emit(s)
        summed: SSAValue = s.result
        results: list[SSAValue] = []
        if self.simplified:
            squares = Expr.operand(0) * Expr.operand(0)
            mean = emit_mean_square(ctx, node, summed, squares, t.rank - 1, wide)
            rms = (Expr.operand(1) + Expr.const(eps, wide)).unary("sqrt")
            y_expr = typed_expr(Expr.operand(0) / rms * Expr.operand(2), [wide, wide, elem], elem)
            y = ZipOp([summed, mean, gamma], y_expr, types[0], node.name)
            ctx.emit(y)
            results.append(y.result)
            if n > 1:
                zeros = Expr.const(0.0)  # the mean output: 0 wherever the statistics are
                zero = ZipOp([mean], zeros, types[1], node.name)
                ctx.emit(zero)
                results.append(zero.result)
            if n > 2:
                inv_expr = Expr.const(1.0, wide) / (Expr.operand(0) + Expr.const(eps, wide)).unary("sqrt")
                inv = ZipOp([mean], inv_expr, types[2], node.name)
                ctx.emit(inv)
                results.append(inv.result)
        else:
            norm_types = [types[0] if wide == elem else AxesTensorType(wide, t.axes)]
            if n > 1:
                norm_types += [types[1], types[2] if n > 2 else types[1]]
            affine = [v for v in (summed, gamma, beta) if v is not None]
            normed = emit_library(
                ctx,
                NormalizeOp(
                    affine,
                    norm_types,
                    node.name,
                    axes=(t.rank - 1,),
                    epsilon=eps,
                    channel_axis=-1,
                    stash="float32",
                    stats=int(n > 1),
                ),
            )
            y_value = normed[0]
            if wide != elem:
                narrow = ZipOp([y_value], Expr.operand(0).cast(elem), types[0], node.name)
                ctx.emit(narrow)
                y_value = narrow.result
            results += [y_value, *normed[1:n]]
        if n > 3:
            if wide == elem:
                results.append(summed)
            else:
                narrow = ZipOp([summed], Expr.operand(0).cast(elem), types[3], node.name)
                ctx.emit(narrow)
                results.append(narrow.result)
        return results[:n]


RULES: tuple[OpRule, ...] = (SkipNormRule(simplified=False), SkipNormRule(simplified=True))
