"""ONNX If: one `if` over a one-element bool, a block of `forward` per branch.

Both branches compile and the run takes one.  The passes walk the branch regions themselves (each
branch is checked in a copy of the scope around it, so what one branch owes is checked at the top of
its own block); this rule holds what the If itself means: how the two branches' outputs make the
node's outputs.

- Element type and rank must agree, or the build stops naming the output.
- An extent both branches give alike is the output's; one they give differently becomes a symbol of
  its own (`"present.0.key[2]"`: the output's name and the axis), which only the run knows.  A kernel after the If that
  needs that length stops the build, since no input binds it.
- An axis both branches name alike keeps the name; one they name apart takes the name the output's
  layout rule gives it (the printer relabels each branch's value to the output's type).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from loam.ops.base import Facts, NodeInfo, OpRule, result_length
from loam.poly import Poly

if TYPE_CHECKING:
    from loam.dialects.tensor_axes import Axis


class IfRule(OpRule):
    """ONNX If (opset 1-21): two branch subgraphs reading the enclosing scope; no inputs of their own."""

    op_types = ("If",)
    kernels: tuple[str, ...] = ("kernel.if",)
    attributes = frozenset({"then_branch", "else_branch"})
    elem_types = ("f32", "f16", "bf16", "f64", "i64", "i32", "bool")
    limitations = "branches may not declare inputs or initializers of their own"

    def check_condition(self, node: NodeInfo, cond: Facts | None) -> None:
        if cond is None:
            raise node.fail("the condition input is absent")
        if cond.elem.name != "bool":
            raise node.fail(f"the condition has element type {cond.elem.name}; ONNX needs bool")
        count = Poly.const(1)
        for d in cond.shape:
            count = count * d
        if count != Poly.const(1):
            raise node.fail(f"the condition has extents [{', '.join(map(str, cond.shape))}]; If needs one element")

    def merge(
        self,
        node: NodeInfo,
        names: Sequence[str],
        then: Sequence[Facts],
        other: Sequence[Facts],
        cond: Facts | None = None,
    ) -> list[Facts]:
        """The node's outputs from what the then and else branches return.

        Where the build knows the condition, an output the branch it picks folds to a value has
        that value (the If then folds away; both branches were still checked).
        """
        if len(then) != len(other) or len(then) != len(names):
            raise node.fail(
                f"the branches return {len(then)} and {len(other)} values; the node names {len(names)} outputs"
            )
        out: list[Facts] = []
        for name, a, b in zip(names, then, other, strict=True):
            if a.elem != b.elem:
                raise node.fail(f"output '{name}' is {a.elem.name} in the then branch and {b.elem.name} in the else")
            if a.rank != b.rank:
                raise node.fail(f"output '{name}' has rank {a.rank} in the then branch and {b.rank} in the else")
            shape = tuple(
                x if x == y else result_length(name, axis)
                for axis, (x, y) in enumerate(zip(a.shape, b.shape, strict=True))
            )
            out.append(Facts(a.elem, shape))
        if cond is not None and cond.value is not None:
            import numpy as np

            taken = then if bool(np.asarray(cond.value).reshape(-1)[0]) else other
            out = [Facts(f.elem, t.shape, t.value) for f, t in zip(out, taken, strict=True)]
        return out


RULES: tuple[OpRule, ...] = (IfRule(),)


def merge_axes(
    node: NodeInfo, name: str, then: tuple[Axis, ...], other: tuple[Axis, ...], facts: Facts
) -> list[Axis | None]:
    """Axes of output `name`: a name both branches give, else None (the layout names it)."""
    from loam.dialects.tensor_axes import Axis as AxisType

    out: list[Axis | None] = []
    for a, b, extent in zip(then, other, facts.shape, strict=True):
        out.append(AxisType(a.name, extent, a.parts) if a.name == b.name and a.parts == b.parts else None)
    return out
