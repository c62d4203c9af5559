"""ONNX's optimizers (domain `ai.onnx.preview.training`): Adagrad, Momentum and Adam.

Each updates n tensors in one node.  Its inputs are the learning rate R and the update count T
(scalars), then X_1..X_n, their gradients G_1..G_n, and the optimizer's state per tensor (Adagrad:
H_1..H_n; Momentum: V_1..V_n; Adam: V_1..V_n, H_1..H_n); its outputs are the new X's, then the new
state in the same order.  X_i, G_i and its state have one shape.  Every output element depends only
on R, T and the elements at its place, so each output is one `kernel.zip` over
(R, T, X_i, G_i, state_i...), in the element type of X_i (T enters converted to it).  The formulas are
ONNX's reference implementations (`onnx.reference.ops.aionnx_preview_training`):

    Adagrad   g' = norm_coefficient X + G;  H' = H + g'^2
              X' = X - R / (1 + T decay_factor) g' / (sqrt(H') + epsilon)
    Momentum  g' = norm_coefficient X + G;  V' = alpha V + (beta if T > 0 else 1) g'
              X' = X - R V'  (standard),  X - R (g' + alpha V')  (nesterov)
    Adam      g' = norm_coefficient X + G;  V' = alpha V + (1 - alpha) g';  H' = beta H + (1 - beta) g'^2
              R' = R sqrt(1 - beta^T) / (1 - alpha^T) if T > 0 else R
              X' = (1 - norm_coefficient_post) (X - R' V' / (sqrt(H') + epsilon))

ONNX's other training operator, Gradient, differentiates the graph it sits in: `xs` names the tensors
(the node's inputs, then those `zs` names) and `y` the value whose gradient it gives, one output per
tensor in `xs`.  The importer hands it `y` as a last operand (`gradient_operands`), and its lowering walks
the kernel ops already lowered back from `y` with the grad clauses (`loam.grad.reverse`), seeded with ones:
a `y` of more than one element gives the gradient of its sum.  The ops a Gradient emits are kernel ops
like any other, so a Gradient of a Gradient's output is the second derivative.  Loam computes the case
ONNX calls the common one, where the node's inputs are the tensors `xs` and `zs` name, and y is computed in
the graph that defines them (values fed in their place, and a subgraph's y over an enclosing graph's
tensor, are refused by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import Block, Operation, SSAValue

from loam.core import owed
from loam.core.errors import ModelError, UnsupportedError
from loam.dialects.expr import Expr, evaluate
from loam.dialects.kernel import ZipOp
from loam.dialects.tensor_axes import Axis
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, float_attr, same_axis
from loam.ops.lowering import axes_type
from loam.ops.operands import require_elem

if TYPE_CHECKING:
    from onnx import NodeProto

DOMAIN = "ai.onnx.preview.training"

_FLOATS = ("f32", "f64")

# The operands of one output's Expr: R, T, X_i, G_i, then the optimizer's state tensors for X_i.
_R, _T, _X, _G = (Expr.operand(i) for i in range(4))


def _state(k: int) -> Expr:
    return Expr.operand(4 + k)


class OptimizerRule(OpRule):
    """One of ONNX's optimizers: n tensors, each with its gradient and `states` state tensors."""

    domain = DOMAIN
    kernels: tuple[str, ...] = ("kernel.zip",)
    elem_types = _FLOATS
    states = 1

    def groups(self, node: NodeInfo, count: int) -> int:
        """How many tensors the node updates, from its input count."""
        per = 2 + self.states
        n, extra = divmod(count - 2, per)
        if count < 2 + per or extra or node.outputs != n * (1 + self.states):
            raise node.fail(
                f"takes R, T and {per} inputs per tensor (X, G and {self.states} state) and gives "
                f"{1 + self.states} outputs per tensor; got {count} inputs and {node.outputs} outputs"
            )
        return n

    def updates(self, node: NodeInfo, elem: str) -> list[Expr]:
        """The new X, then each new state, as Exprs over (R, T, X, G, state...) converted to `elem`."""
        raise NotImplementedError

    def _members(self, n: int, i: int) -> list[int]:
        """The input indices of tensor i's operands: R, T, X_i, G_i, its states."""
        return [0, 1, *(2 + k * n + i for k in range(2 + self.states))]

    def _exprs(self, node: NodeInfo, elem: str) -> list[Expr]:
        converted = [_R.cast(elem), _T.cast(elem), _X, _G, *(_state(k) for k in range(self.states))]
        return [e.substitute(converted) for e in self.updates(node, elem)]

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        n = self.groups(node, len(inputs))
        if any(f is None for f in inputs):
            raise node.fail("an input is absent")
        facts = [f for f in inputs if f is not None]
        r, t = facts[0], facts[1]
        require_elem(node, r, _FLOATS, "R (the learning rate)")
        require_elem(node, t, ("i64",), "T (the update count)")
        for f, what in ((r, "R"), (t, "T")):
            if f.rank != 0:
                raise node.fail(f"{what} must be a scalar, got rank {f.rank}")
        out: list[list[Facts]] = [[] for _ in range(1 + self.states)]
        for i in range(n):
            members = [facts[k] for k in self._members(n, i)]
            x = members[2]
            require_elem(node, x, self.elem_types, f"X_{i + 1}")
            for k, f in enumerate(members[3:], start=1):
                what = f"input {self._members(n, i)[k + 2]}"
                if f.elem != x.elem:
                    raise node.fail(
                        f"{what} is {f.elem.name}; X_{i + 1}, whose gradient or state it is, is {x.elem.name}"
                    )
                if f.rank != x.rank or any(
                    a.is_const and b.is_const and a != b for a, b in zip(f.shape, x.shape, strict=False)
                ):
                    raise node.fail(
                        f"{what} has extents [{', '.join(map(str, f.shape))}]; X_{i + 1} has "
                        f"[{', '.join(map(str, x.shape))}] and they must be one"
                    )
                for a, b in zip(f.shape, x.shape, strict=True):
                    if a != b:
                        owed.require_equal(a, b, node, f"{what}'s extents against X_{i + 1}'s")
            values = [f.value for f in members]
            for k, expr in enumerate(self._exprs(node, x.elem.name)):
                value = None
                if all(v is not None for v in values):
                    folded = evaluate(expr, [np.asarray(v) for v in values])
                    value = np.broadcast_to(folded, tuple(d.const_value for d in x.shape)).astype(x.elem.numpy)
                out[k].append(Facts(x.elem, x.shape, value))
        return [f for group in out for f in group]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        n = self.groups(node, len(inputs))
        result: list[list[tuple[Axis | None, ...]]] = [[] for _ in range(1 + self.states)]
        for i in range(n):
            x, *others = (inputs[k] for k in self._members(n, i)[2:])
            assert x is not None
            for other in others:
                assert other is not None
                for d, (a, b) in enumerate(zip(other, x, strict=True)):
                    same_axis(node, a, b, f"where tensor {i + 1}'s gradient or state meets X axis {d}")
            for k in range(1 + self.states):
                result[k].append(x)
        return [a for group in result for a in group]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        n = self.groups(node, len(operands))
        values = [v for v in operands if v is not None]
        results: list[list[SSAValue]] = [[] for _ in range(1 + self.states)]
        for i in range(n):
            members = [values[k] for k in self._members(n, i)]
            elem = axes_type(members[2]).elem.name
            for k, expr in enumerate(self._exprs(node, elem)):
                op = ZipOp(members, expr, ctx.result_types[k * n + i], node.name)
                ctx.emit(op)
                results[k].append(op.result)
        return [v for group in results for v in group]


def _regularized(node: NodeInfo, elem: str) -> Expr:
    return Expr.const(float_attr(node, "norm_coefficient", 0.0), elem) * _X + _G


class AdagradRule(OptimizerRule):
    op_types = ("Adagrad",)
    attributes = frozenset({"decay_factor", "epsilon", "norm_coefficient"})

    def updates(self, node: NodeInfo, elem: str) -> list[Expr]:
        g = _regularized(node, elem)
        h = _state(0) + g * g
        rate = _R / (Expr.const(1.0, elem) + _T * Expr.const(float_attr(node, "decay_factor", 0.0), elem))
        eps = Expr.const(float_attr(node, "epsilon", 0.0), elem)
        return [_X - rate * g / (h.unary("sqrt") + eps), h]


class MomentumRule(OptimizerRule):
    op_types = ("Momentum",)
    attributes = frozenset({"alpha", "beta", "mode", "norm_coefficient"})

    def updates(self, node: NodeInfo, elem: str) -> list[Expr]:
        for key in ("alpha", "beta", "mode", "norm_coefficient"):
            if node.attr(key) is None:
                raise node.fail(f"has no '{key}' attribute (Momentum requires it)")
        mode = node.attr("mode")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        if mode not in ("standard", "nesterov"):
            raise node.fail(f"mode {mode!r} is not standard or nesterov")
        alpha = Expr.const(float_attr(node, "alpha", 0.0), elem)
        first = _T.binary("greater", Expr.const(0.0, elem))
        beta = Expr.select(first, Expr.const(float_attr(node, "beta", 0.0), elem), Expr.const(1.0, elem))
        g = _regularized(node, elem)
        v = alpha * _state(0) + beta * g
        step = v if mode == "standard" else g + alpha * v
        return [_X - _R * step, v]


class AdamRule(OptimizerRule):
    op_types = ("Adam",)
    attributes = frozenset({"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"})
    states = 2

    def updates(self, node: NodeInfo, elem: str) -> list[Expr]:
        def const(value: float) -> Expr:
            return Expr.const(value, elem)

        # ONNX's float attributes are 32-bit, their schema defaults too: 0.9 is 0.9f in a float64 update.
        alpha, beta = (
            float_attr(node, "alpha", float(np.float32(0.9))),
            float_attr(node, "beta", float(np.float32(0.999))),
        )
        g = _regularized(node, elem)
        v = const(alpha) * _state(0) + const(1 - alpha) * g
        h = const(beta) * _state(1) + const(1 - beta) * (g * g)
        # The bias correction at T > 0; T is raised to at least 1 so the branch not taken divides by no zero.
        t = _T.binary("max", const(1.0))
        corrected = (
            _R
            * (const(1.0) - const(beta).binary("pow", t)).unary("sqrt")
            / (const(1.0) - const(alpha).binary("pow", t))
        )
        rate = Expr.select(_T.binary("greater", const(0.0)), corrected, _R)
        x = _X - rate * (v / (h.unary("sqrt") + const(float_attr(node, "epsilon", 0.0))))
        return [const(1 - float_attr(node, "norm_coefficient_post", 0.0)) * x, v, h]


def _names(node: NodeInfo | NodeProto, key: str) -> list[str]:
    """String-list attribute `key` (`xs`, `zs`) of a Gradient node."""
    if isinstance(node, NodeInfo):
        value = node.attr(key, [])
    else:
        found = [a for a in node.attribute if a.name == key]
        value = list(found[0].strings) if found else []
    return [v.decode() if isinstance(v, bytes) else str(v) for v in value]


def _block_of(value: SSAValue) -> Block | None:
    owner = value.owner
    return owner if isinstance(owner, Block) else owner.parent_block()


def gradient_operands(node: NodeProto) -> list[str]:
    """The values a Gradient node reads: its inputs (the tensors `xs` and `zs` name), then `y`."""
    where = f"Gradient node '{node.name}'"
    xs, zs = _names(node, "xs"), _names(node, "zs")
    ys = [a.s.decode() for a in node.attribute if a.name == "y"]
    if not xs or not ys:
        raise ModelError(f"{where}: needs attributes 'xs' (the tensors to differentiate by) and 'y'")
    if list(node.input) != [*xs, *zs]:
        raise UnsupportedError(
            f"{where}: its inputs [{', '.join(node.input)}] are not the tensors xs and zs name "
            f"[{', '.join([*xs, *zs])}]; Loam computes a gradient at the values the graph gives them only"
        )
    return [*node.input, ys[0]]


class GradientRule(OpRule):
    """ONNX's Gradient: d(sum y)/dx for each x named in `xs`, by reverse mode over the kernel ops to `y`."""

    op_types = ("Gradient",)
    domain = DOMAIN
    attributes = frozenset({"xs", "zs", "y"})
    elem_types = _FLOATS
    kernels: tuple[str, ...] = ("kernel.zip",)
    limitations = (
        "also the kernels of the grad clauses of the ops from xs to y (an op without one is refused); the node's "
        "inputs must be the tensors xs and zs name, defined in the graph that computes y"
    )

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        xs, zs = _names(node, "xs"), _names(node, "zs")
        if len(inputs) != len(xs) + len(zs) + 1 or any(f is None for f in inputs):
            raise node.fail(f"takes the {len(xs) + len(zs)} tensors xs and zs name, got {len(inputs) - 1}")
        if node.outputs > len(xs):
            raise node.fail(f"gives one gradient per tensor in xs ({len(xs)}), not {node.outputs}")
        facts = [f for f in inputs if f is not None]
        y = facts[-1]
        require_elem(node, y, self.elem_types, f"y ('{node.attr('y')}')")
        for name, f in zip(xs, facts, strict=False):
            require_elem(node, f, self.elem_types, f"xs tensor '{name}'")
        known = [name for name, f in zip([*xs, "y"], [*facts[: len(xs)], y], strict=True) if f.value is not None]
        if known:
            raise node.unsupported(
                f"{', '.join(repr(n) for n in known)} {'is' if len(known) == 1 else 'are'} computed at build time; "
                "Loam differentiates what the run computes"
            )
        return [Facts(f.elem, f.shape) for f in facts[: node.outputs]]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        return [a for a in inputs[: len(outputs)] if a is not None]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        xs = [v for v in operands[: len(ctx.result_types)] if v is not None]
        y = operands[-1]
        assert y is not None
        owner = y.owner
        block = _block_of(y)
        # A path from x to y runs through y's block alone when x is defined there; from an enclosing graph's
        # value it would run through ops the walk does not see.
        names = _names(node, "xs")
        outer = [n for n, x in zip(names, xs, strict=False) if _block_of(x) is not block]
        if outer:
            raise node.unsupported(
                f"{', '.join(repr(n) for n in outer)} and y are defined in different graphs (a subgraph's y over an "
                "enclosing graph's tensor): not supported"
            )
        ops: list[Operation] = []
        if not isinstance(owner, Block):
            assert block is not None  # y's op is one of the graph being lowered, so it sits in a block
            for op in block.ops:
                ops.append(op)
                if op is owner:
                    break
        if ctx.differentiate is None:
            raise node.unsupported("this lowering differentiates nothing (lower-to-kernel gives the differentiator)")
        reverse = ctx.differentiate(xs, ops, ctx.emit)
        t = axes_type(y)
        reverse.send(y, reverse.emit(ZipOp([y], Expr.const(1.0, t.elem.name), t, f"{node.name}.seed")))
        reverse.run()
        for name, x in zip(names, xs, strict=False):
            if x not in reverse.adjoint:
                raise node.unsupported(f"no gradient reaches '{name}' from y: {reverse.unreached(x, 'y')}")
        return [reverse.adjoint[x] for x in xs]


RULES: tuple[OpRule, ...] = (AdagradRule(), MomentumRule(), AdamRule(), GradientRule())
