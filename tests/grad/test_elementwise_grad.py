"""The elementwise grad clauses (`loam.grad.elementwise.vjp`) equal central finite differences in float64.

Every differentiable unary and binary step, at points inside its domain and away from its kinks, and
hypothesis-drawn chains of smooth steps over three operands (what the fuse pass makes of a model's
elementwise tail), are differentiated by `vjp` and evaluated with the module's own elementwise
functions (`loam.dialects.expr.evaluate`); the gradient times a random upstream gradient must equal
(f(x + h) - f(x - h)) / 2h times it.  Steps that pass no gradient (comparisons, bit operations, casts
to integers) give None, and the piecewise-constant ones give zero.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loam.dialects.expr import Expr, evaluate
from loam.grad.elementwise import vjp

RNG = np.random.default_rng(2026)
H = 1e-6

# Each unary step and the interval its points are drawn from (inside its domain, off its kinks).
UNARY = {
    "neg": (-3, 3), "abs": (0.1, 3), "relu": (0.1, 3), "identity": (-3, 3), "exp": (-2, 2), "log": (0.2, 4),
    "sqrt": (0.2, 4), "reciprocal": (0.3, 3), "sigmoid": (-4, 4), "tanh": (-3, 3), "softplus": (-4, 4),
    "softsign": (-4, 4), "sin": (-3, 3), "cos": (-3, 3), "tan": (-1.2, 1.2), "asin": (-0.9, 0.9),
    "acos": (-0.9, 0.9), "atan": (-3, 3), "sinh": (-2, 2), "cosh": (-2, 2), "asinh": (-3, 3),
    "acosh": (1.2, 4), "atanh": (-0.9, 0.9), "erf": (-2, 2),
}  # fmt: skip

# Each binary step and the intervals of its two operands.
BINARY = {
    "add": ((-3, 3), (-3, 3)), "sub": ((-3, 3), (-3, 3)), "mul": ((-3, 3), (-3, 3)),
    "div": ((-3, 3), (0.5, 3)), "pow": ((0.5, 3), (-2, 2)), "max": ((-3, 3), (-3, 3)),
    "min": ((-3, 3), (-3, 3)),
}  # fmt: skip


def numeric(expr: Expr, points: list[np.ndarray], k: int) -> np.ndarray:
    """d(expr)/d(operand k), elementwise, by central differences in float64."""
    up = [p.copy() for p in points]
    down = [p.copy() for p in points]
    up[k] += H
    down[k] -= H
    return (evaluate(expr, up) - evaluate(expr, down)) / (2 * H)


def check(expr: Expr, points: list[np.ndarray], operands: list[int] | None = None) -> None:
    g = RNG.standard_normal(points[0].shape)
    for k in range(len(points)) if operands is None else operands:
        grad = vjp(expr, k, ["f64"] * len(points))
        assert grad is not None, (str(expr), k)
        got = evaluate(grad, [*points, g])
        np.testing.assert_allclose(got, numeric(expr, points, k) * g, rtol=1e-5, atol=1e-6, err_msg=f"{expr} by {k}")


def draw(low: float, high: float, n: int = 64) -> np.ndarray:
    return RNG.uniform(low, high, n)


@pytest.mark.parametrize("op", sorted(UNARY))
def test_every_differentiable_unary_step_has_its_derivative(op: str) -> None:
    check(Expr.operand(0).unary(op), [draw(*UNARY[op])])


@pytest.mark.parametrize("op", sorted(BINARY))
def test_every_differentiable_binary_step_has_both_partial_derivatives(op: str) -> None:
    (a_low, a_high), (b_low, b_high) = BINARY[op]
    a, b = draw(a_low, a_high), draw(b_low, b_high)
    if op in ("max", "min"):
        b = np.where(np.abs(a - b) < 0.01, b + 0.1, b)  # off the tie, where the step has a derivative
    check(Expr.operand(0).binary(op, Expr.operand(1)), [a, b])


def test_a_tie_of_max_sends_the_gradient_to_the_first_operand_only() -> None:
    x = np.array([1.0, 2.0])
    expr = Expr.operand(0).binary("max", Expr.operand(1))
    g = np.array([3.0, 5.0])
    da, db = (evaluate(vjp(expr, k, ["f64", "f64"]), [x, x, g]) for k in (0, 1))  # type: ignore[arg-type]
    assert da.tolist() == [3.0, 5.0] and db.tolist() == [0.0, 0.0]


def test_gelu_and_a_select_chain_as_the_fuse_pass_makes_them() -> None:
    x = Expr.operand(0)
    gelu = (
        x * Expr.const(0.5, "f64") * (Expr.const(1.0, "f64") + (x * Expr.const(0.7071067811865476, "f64")).unary("erf"))
    )
    check(gelu, [draw(-3, 3)])
    masked = Expr.select(Expr.operand(1).binary("greater", Expr.const(0.0, "f64")), x.unary("tanh") * x, x * 2.0)
    check(masked, [draw(-2, 2), draw(-1, 1)], operands=[0])
    assert vjp(masked, 1, ["f64", "f64"]) is None  # operand 1 only chooses: no gradient reaches it


def test_steps_that_pass_no_gradient_give_none_or_zero() -> None:
    x, y = Expr.operand(0), Expr.operand(1)
    assert vjp(x.binary("less", y), 0, ["f32", "f32"]) is None  # a bool result
    assert vjp(x.cast("i64").cast("f32") * y, 0, ["f32", "f32"]) is None  # through an integer
    assert vjp(x * y, 0, ["i64", "i64"]) is None  # integers throughout
    floor = vjp(x.unary("floor") + y, 0, ["f64", "f64"])
    assert floor is not None
    assert evaluate(floor, [np.array([1.5]), np.array([2.0]), np.array([7.0])]).tolist() == [0.0]
    only_b = vjp(Expr.select(x.binary("greater", y), y, y * 3.0), 1, ["f64", "f64"])
    assert only_b is not None
    got = evaluate(only_b, [np.array([1.0, 0.0]), np.array([0.5, 0.5]), np.array([1.0, 1.0])])
    assert got.tolist() == [1.0, 3.0]


SMOOTH_UNARY = ["tanh", "sigmoid", "sin", "atan", "softplus", "neg", "identity"]
SMOOTH_BINARY = ["add", "sub", "mul"]


@st.composite
def chains(draw_: st.DrawFn) -> Expr:
    """A random expression over operands 0..2 of smooth steps (no domain or kink to avoid)."""
    values = [Expr.operand(i) for i in range(3)]
    for _ in range(draw_(st.integers(1, 8))):
        if draw_(st.booleans()):
            values.append(draw_(st.sampled_from(values)).unary(draw_(st.sampled_from(SMOOTH_UNARY))))
        else:
            a, b = draw_(st.sampled_from(values)), draw_(st.sampled_from(values))
            values.append(a.binary(draw_(st.sampled_from(SMOOTH_BINARY)), b))
    return values[-1] if len(values) > 3 else values[0].unary("tanh")


@settings(max_examples=60)
@given(chains())
def test_drawn_chains_of_smooth_steps_match_finite_differences(expr: Expr) -> None:
    points = [draw(-1.5, 1.5, 16) for _ in range(3)]
    g = RNG.standard_normal(16)
    for k in range(3):
        grad = vjp(expr, k, ["f64"] * 3)
        want = numeric(expr, points, k) * g
        if grad is None:  # operand k is not read: its gradient is zero
            assert k not in expr.operand_indices
            continue
        np.testing.assert_allclose(evaluate(grad, [*points, g]), want, rtol=1e-5, atol=1e-6, err_msg=str(expr))
