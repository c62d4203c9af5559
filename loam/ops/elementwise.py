"""Elementwise operators: ONNX's broadcasting arithmetic and activations, lowered to `kernel.zip`.

Each operator is one step of an `Expr` (`add`, `relu`, ...); the step's numeric meaning lives in
the backends' Expr evaluators, and its shape meaning here: operands broadcast numpy-style, and the
result keeps their common element type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.ops.base import (
    Facts,
    LowerContext,
    NodeInfo,
    OpRule,
    broadcast_axes,
    broadcast_shapes,
    require_arity,
)

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

# ONNX op type -> Expr step name, for the binary arithmetic operators.
BINARY_STEPS: dict[str, str] = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
# ONNX op type -> Expr step name, for the unary operators without attributes.
UNARY_STEPS: dict[str, str] = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}

# The same steps over numpy arrays, for folding values the build knows.
_FOLD = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "sigmoid": lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype),
    "tanh": np.tanh,
}


def _fold_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        # ONNX integer Div truncates toward zero; numpy's // floors.
        q = np.abs(a) // np.abs(b)
        return (np.sign(a) * np.sign(b) * q).astype(a.dtype)
    return np.divide(a, b).astype(a.dtype)


class ElementwiseRule(OpRule):
    """Add/Sub/Mul/Div and the attribute-free unary activations."""

    op_types = tuple(BINARY_STEPS) + tuple(UNARY_STEPS)

    def step(self, node: NodeInfo) -> str:
        return BINARY_STEPS.get(node.op_type) or UNARY_STEPS[node.op_type]

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        arity = 2 if node.op_type in BINARY_STEPS else 1
        require_arity(node, inputs, arity)
        facts = [f for f in inputs if f is not None]
        if len(facts) != arity:
            raise node.fail("an input is absent")
        elem = facts[0].elem
        for f in facts[1:]:
            if f.elem != elem:
                raise node.fail(f"operands have element types {elem.name} and {f.elem.name}; ONNX needs one")
        shape = broadcast_shapes(node, [f.shape for f in facts])
        value = None
        if all(f.value is not None for f in facts):
            step = self.step(node)
            arrays = [np.asarray(f.value) for f in facts]
            value = _fold_div(*arrays) if step == "div" else np.asarray(_FOLD[step](*arrays), dtype=arrays[0].dtype)
        return [Facts(elem, shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        return [broadcast_axes(node, [a for a in inputs if a is not None])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.ops.lowering import zip_of

        present = [v for v in operands if v is not None]
        step = self.step(node)
        return [zip_of(ctx, node, present, step)]


RULES: tuple[OpRule, ...] = (ElementwiseRule(),)
