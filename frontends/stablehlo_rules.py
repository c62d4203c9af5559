"""The table of StableHLO lowering rules: which function lowers each op kind.

Each rule module registers its functions here with `@rule(OpKind, ...)` when it is imported;
`loam.frontends.stablehlo_ops` imports every rule module and looks a rule up by the op's type
(`lower_op`).  A rule takes the builder, the op and its operands and returns its results'.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Operation

from loam.core.dtypes import ElementType
from loam.frontends.stablehlo_builder import GraphBuilder, Operand, Shape, shape_and_element

__all__ = ["RULES", "Rule", "result_of", "rule"]

Rule = Callable[[GraphBuilder, Operation, list[Operand]], list[Operand]]
RULES: dict[type[Operation], Rule] = {}


def rule(*op_types: type[Operation]) -> Callable[[Rule], Rule]:
    """Registers the function it decorates as the rule of each of `op_types`."""

    def register(fn: Rule) -> Rule:
        for t in op_types:
            RULES[t] = fn
        return fn

    return register


def result_of(op: Operation) -> tuple[Shape, ElementType]:
    """The shape and element type of `op`'s first result (a LoweringError unless it is a ranked tensor)."""
    return shape_and_element(op.results[0].type)
