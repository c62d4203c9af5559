"""ONNX If and Loop: control flow over blocks of `forward`.

If is one `if` over a one-element bool, a block of `forward` per branch.

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

Loop is one `while` over its body block (`LoopRule`): stage 0 checks the body once with what every
iteration knows (the carried values' extents, never their values), a carried value keeps its
extents (owed inside the body, so checked each iteration, where the build cannot show it), and each
scan output gains a first axis as long as the iterations run, a length only the run knows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from loam.core.poly import Poly
from loam.ops.base import Facts, NodeInfo, OpRule, result_length

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


def merge_axes(
    node: NodeInfo, name: str, then: tuple[Axis, ...], other: tuple[Axis, ...], facts: Facts
) -> list[Axis | None]:
    """Axes of output `name`: a name both branches give, else None (the layout names it)."""
    from loam.dialects.tensor_axes import Axis as AxisType

    out: list[Axis | None] = []
    for a, b, extent in zip(then, other, facts.shape, strict=True):
        out.append(AxisType(a.name, extent, a.parts) if a.name == b.name and a.parts == b.parts else None)
    return out


class LoopRule(OpRule):
    """ONNX Loop (opset 11-21): a body run while the trip count and the condition allow.

    Inputs: the max trip count M (optional, one i64), the condition (optional, one bool), then the
    initial loop-carried values.  The body takes the iteration number, the condition and the carried
    values, and returns the condition, the carried values and the scan outputs; it may read values
    of the enclosing scope.  The node's outputs are the final carried values, then each scan output
    stacked along a new first axis, whose length (the iterations run) only the run knows.
    """

    op_types = ("Loop",)
    kernels: tuple[str, ...] = ("kernel.loop",)
    attributes = frozenset({"body"})
    first_opset = 11
    elem_types = ("f32", "f16", "bf16", "f64", "i64", "i32", "bool")
    limitations = (
        "loop-carried values and scan outputs are tensors (sequences and optionals are refused); a carried "
        "value keeps its extents across iterations (owed per iteration where the build cannot show it); a scan "
        "output's other extents must be known outside the body"
    )

    def check_control(self, node: NodeInfo, trip: Facts | None, cond: Facts | None) -> None:
        """The trip count, where given, is one i64; the condition, where given, one bool."""
        for what, facts, elem in (("the max trip count M", trip, "i64"), ("the condition", cond, "bool")):
            if facts is None:
                continue
            if facts.elem.name != elem:
                raise node.fail(f"{what} has element type {facts.elem.name}; ONNX needs {elem}")
            if poly_count(facts.shape) != Poly.const(1):
                raise node.fail(f"{what} has extents [{', '.join(map(str, facts.shape))}]; Loop needs one element")

    def carried_in(self, node: NodeInfo, name: str, facts: Facts) -> Facts:
        """What the body knows of a carried value: its element type and extents, never its value."""
        if facts.elem.name not in self.elem_types:
            raise node.unsupported(
                f"loop-carried value '{name}' has element type {facts.elem.name}; Loam loops over "
                f"{', '.join(self.elem_types)}"
            )
        return Facts(facts.elem, facts.shape)

    def check_returned(self, node: NodeInfo, carried: int, returned: Sequence[Facts]) -> None:
        """The body returns the condition, the carried values and the scan outputs."""
        if len(returned) < 1 + carried:
            raise node.fail(f"the body returns {len(returned)} values; Loop needs the condition and {carried} carried")
        cond = returned[0]
        if cond.elem.name != "bool" or poly_count(cond.shape) != Poly.const(1):
            raise node.fail(
                f"the body's condition output is {cond.elem.name} [{', '.join(map(str, cond.shape))}]; Loop "
                "needs one bool"
            )

    def scan_output(
        self, node: NodeInfo, index: int, name: str, facts: Facts, outer_knows: Callable[[Poly], bool]
    ) -> Facts:
        """Scan output `name` (node output `index`): the body's value stacked along a new first axis as
        long as the iterations run, which only the run knows."""
        if facts.elem.name not in self.elem_types:
            raise node.unsupported(
                f"scan output '{name}' has element type {facts.elem.name}; Loam loops over {', '.join(self.elem_types)}"
            )
        for axis, extent in enumerate(facts.shape):
            if not outer_knows(extent):
                raise node.unsupported(
                    f"scan output '{name}' axis {axis + 1} has extent {extent}, which only an iteration knows; "
                    "Loam stacks scan outputs whose other extents are known before the loop"
                )
        return Facts(facts.elem, (node.result_length(index, 0), *facts.shape))


def poly_count(shape: Sequence[Poly]) -> Poly:
    """The element count of `shape`."""
    count = Poly.const(1)
    for d in shape:
        count = count * d
    return count


RULES: tuple[OpRule, ...] = (IfRule(), LoopRule())
