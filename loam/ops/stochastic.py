"""Operators that draw random values: RandomNormal, RandomUniform, their Like forms and Bernoulli.

Nothing of a draw is known at build time but its extents, so stage 0 never folds one, and each node
lowers to one `kernel.random`, which forward computes from the generator its `seed` argument makes
(`loam.runtime.kernels.stochastic`: one seed repeats a run).  A Like form takes its extents from its
input, which may be symbolic or a length only the run knows; RandomNormal and RandomUniform take
theirs from the `shape` attribute.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from loam.core import dtypes
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, elem_attr, require_arity
from loam.ops.movement import MOVABLE
from loam.ops.operands import emit_library, given

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

DRAWN = ("f32", "f64", "f16")
"""The element types a normal or uniform draw makes."""

_DIST = {
    "RandomNormal": "normal",
    "RandomNormalLike": "normal",
    "RandomUniform": "uniform",
    "RandomUniformLike": "uniform",
    "Bernoulli": "bernoulli",
}


class RandomRule(OpRule):
    """ONNX RandomNormal and RandomUniform (opset 1: extents from `shape`, f32 unless `dtype` says)
    and their Like forms (extents from the input, its type unless `dtype` says): normal values of
    mean `mean` and standard deviation `scale`, uniform ones in [`low`, `high`)."""

    op_types: tuple[str, ...] = ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike")
    kernels: tuple[str, ...] = ("kernel.random",)
    attributes = frozenset({"dtype", "mean", "scale", "low", "high", "seed", "shape"})
    first_opset = 1
    elem_types = DRAWN
    limitations = "values are numpy's (PCG64) draws: forward's seed repeats a run, not onnxruntime's numbers"

    def result_type(self, node: NodeInfo, x: Facts | None) -> dtypes.ElementType:
        elem = elem_attr(node, "dtype")
        if elem is None:
            elem = dtypes.by_name("f32") if x is None else x.elem
        if elem.name not in DRAWN:
            raise node.unsupported(f"makes element type {elem.name} ({', '.join(DRAWN)})")
        return elem

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        if node.op_type.endswith("Like"):
            require_arity(node, inputs, 1)
            x = given(node, inputs, 0, "input")
            return [Facts(self.result_type(node, x), x.shape)]
        require_arity(node, inputs, 0)
        shape = node.attr("shape")
        if shape is None:
            raise node.fail("has no 'shape' attribute")
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims):
            raise node.fail(f"shape {dims} holds a negative extent")
        return [Facts(self.result_type(node, None), tuple(Poly.const(d) for d in dims))]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        if inputs and inputs[0] is not None:
            return [inputs[0]]
        return [tuple(None for _ in outputs[0].shape)]  # the layout names a RandomNormal's axes

    def parameters(self, node: NodeInfo) -> dict[str, float]:
        """The distribution's two numbers: (mean, scale) or (low, high)."""
        if _DIST[node.op_type] == "normal":
            return {"a": float(node.attr("mean", 0.0)), "b": float(node.attr("scale", 1.0))}
        return {"a": float(node.attr("low", 0.0)), "b": float(node.attr("high", 1.0))}

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import RandomOp

        result = ctx.result_types[0]
        dtype = result.elem.numpy
        assert dtype is not None  # DRAWN and MOVABLE are numpy types
        params: dict[str, float | str | tuple[int, ...]] = {"dist": _DIST[node.op_type], "to": dtype.name}
        params.update(self.parameters(node))
        present = [v for v in operands if v is not None]
        if not present:
            params["shape"] = tuple(e.const_value for e in result.shape)
        seed = node.attr("seed")
        if seed is not None:
            params["seed"] = float(seed)
        return emit_library(ctx, RandomOp(present, [result], node.name, **params))


class BernoulliRule(RandomRule):
    """ONNX Bernoulli (opset 15): 1 where a uniform draw falls below the input's probability, else 0,
    of the input's type unless `dtype` says: 1 with probability p, as ONNX defines it and its reference
    evaluator computes it (onnxruntime's CPU kernel gives 0 where p is 1 and 1 where it is 0)."""

    op_types = ("Bernoulli",)
    attributes = frozenset({"dtype", "seed"})
    first_opset = 15
    elem_types = DRAWN
    limitations = (
        "values are numpy's (PCG64) draws: forward's seed repeats a run, not onnxruntime's numbers; "
        "1 with probability p as ONNX defines it, where onnxruntime's CPU kernel gives 1 with probability 1 - p"
    )

    def result_type(self, node: NodeInfo, x: Facts | None) -> dtypes.ElementType:
        elem = elem_attr(node, "dtype")
        if elem is None:
            assert x is not None  # infer requires the input
            elem = x.elem
        if elem.name not in MOVABLE or elem.numpy is None or elem.from_ml_dtypes:
            raise node.unsupported(f"makes element type {elem.name}")
        return elem

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "input")
        if x.elem.name not in DRAWN:
            raise node.unsupported(f"probabilities of element type {x.elem.name} ({', '.join(DRAWN)})")
        return [Facts(self.result_type(node, x), x.shape)]

    def parameters(self, node: NodeInfo) -> dict[str, float]:
        return {"a": 0.0, "b": 1.0}


RULES: tuple[OpRule, ...] = (RandomRule(), BernoulliRule())
