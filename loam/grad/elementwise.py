"""Grad clauses of the elementwise steps: the vector-Jacobian product of an `Expr`.

Every ONNX elementwise operator (and every chain the fuse pass makes of them) is one `kernel.zip`
computing an `Expr`, so its gradient is written once here, step by step, as more `Expr`s: `vjp(expr,
k)` is the expression of d(expr)/d(operand k) times the upstream gradient, which it reads as one
more operand (after the kernel's own).  Reverse mode over the steps: each step's adjoint is the sum of
what its readers send it, each step sends its arguments the clause below.  The result is again an
`Expr`, so both backends compute a gradient with the kernels they already have.

Clauses (g is the step's adjoint; x, a, b its arguments; y its value):

- neg -g; abs g*sign(x); relu g where x > 0; identity g; exp g*y; log g/x; sqrt g/(2y);
  reciprocal -g*y*y; sigmoid g*y*(1-y); tanh g*(1-y*y); softplus g*sigmoid(x); softsign
  g/(1+|x|)^2; sin g*cos(x); cos -g*sin(x); tan g*(1+y*y); asin g/sqrt(1-x*x); acos -g/sqrt(1-x*x);
  atan g/(1+x*x); sinh g*cosh(x); cosh g*sinh(x); asinh g/sqrt(x*x+1); acosh g/sqrt(x*x-1); atanh
  g/(1-x*x); erf g*2/sqrt(pi)*exp(-x*x);
- add g, g; sub g, -g; mul g*b, g*a; div g/b, -g*y/b; pow g*b*a^(b-1), g*y*log(a); max g to a where
  a >= b else to b (min: a <= b), as torch gives a tie to one side; mod and fmod g to a (the divisor's
  share is zero almost everywhere);
- select: g to a where the condition holds, else to b; none to the condition;
- cast between float types: g cast back to the argument's type.

Steps that are piecewise constant (floor, ceil, round, sign) send zero.  Steps over integers or bools
(comparisons, logic, bit operations, isnan, casts from or to an integer) pass no gradient: `vjp`
returns None when no path from operand k to the result carries one, and the caller (the grad pass)
refuses a gradient that every path blocks, naming the node.
"""

from __future__ import annotations

import math

from loam.dialects.expr import Binary, Const, Convert, Expr, Operand, Select, Unary, step_types

FLOATS = frozenset({"f64", "f32", "f16", "bf16"})
"""Element types a gradient flows through."""

_ZERO_UNARY = frozenset({"floor", "ceil", "round", "sign"})
_NO_GRAD_UNARY = frozenset({"not", "isnan", "isinf", "bitnot"})
_NO_GRAD_BINARY = frozenset(
    {"equal", "less", "less_equal", "greater", "greater_equal", "and", "or", "xor", "shl", "shr", "bitand",
     "bitor", "bitxor"}
)  # fmt: skip


def _unary_clause(op: str, x: Expr, y: Expr, g: Expr, elem: str) -> Expr | None:
    """d/dx of unary `op` at x (value y) times g; None where the step passes no gradient."""
    one = Expr.const(1.0, elem)
    if op in _NO_GRAD_UNARY:
        return None
    if op in _ZERO_UNARY:
        return g * Expr.const(0.0, elem)
    clauses = {
        "identity": lambda: g,
        "neg": lambda: -g,
        "abs": lambda: g * x.unary("sign"),
        "relu": lambda: Expr.select(x.binary("greater", Expr.const(0.0, elem)), g, Expr.const(0.0, elem)),
        "exp": lambda: g * y,
        "log": lambda: g / x,
        "sqrt": lambda: g / (y * Expr.const(2.0, elem)),
        "reciprocal": lambda: -(g * y * y),
        "sigmoid": lambda: g * y * (one - y),
        "tanh": lambda: g * (one - y * y),
        "softplus": lambda: g * x.unary("sigmoid"),
        "softsign": lambda: g / ((one + x.unary("abs")) * (one + x.unary("abs"))),
        "sin": lambda: g * x.unary("cos"),
        "cos": lambda: -(g * x.unary("sin")),
        "tan": lambda: g * (one + y * y),
        "asin": lambda: g / (one - x * x).unary("sqrt"),
        "acos": lambda: -(g / (one - x * x).unary("sqrt")),
        "atan": lambda: g / (one + x * x),
        "sinh": lambda: g * x.unary("cosh"),
        "cosh": lambda: g * x.unary("sinh"),
        "asinh": lambda: g / (x * x + one).unary("sqrt"),
        "acosh": lambda: g / (x * x - one).unary("sqrt"),
        "atanh": lambda: g / (one - x * x),
        "erf": lambda: g * Expr.const(2.0 / math.sqrt(math.pi), elem) * (-(x * x)).unary("exp"),
    }
    if op not in clauses:
        raise ValueError(f"no grad clause for the elementwise step '{op}'")
    return clauses[op]()


def _binary_clause(op: str, a: Expr, b: Expr, y: Expr, g: Expr, elem: str) -> tuple[Expr | None, Expr | None]:
    """(d/da, d/db) of binary `op` times g; None for a side that passes no gradient."""
    if op in _NO_GRAD_BINARY:
        return None, None
    zero = Expr.const(0.0, elem)
    if op == "add":
        return g, g
    if op == "sub":
        return g, -g
    if op == "mul":
        return g * b, g * a
    if op == "div":
        return g / b, -(g * y / b)
    if op == "pow":
        return g * b * a.binary("pow", b - Expr.const(1.0, elem)), g * y * a.unary("log")
    if op in ("max", "min"):
        first = a.binary("greater_equal" if op == "max" else "less_equal", b)
        return Expr.select(first, g, zero), Expr.select(first, zero, g)
    if op in ("mod", "fmod"):
        return g, None
    raise ValueError(f"no grad clause for the elementwise step '{op}'")


def vjp(expr: Expr, operand: int, elems: list[str]) -> Expr | None:
    """d(`expr`)/d(operand `operand`) times the upstream gradient, which the result reads as operand
    `len(elems)`, after the kernel's own; `elems` are the kernel's operands' element types.  None where
    no path from the operand to the result passes a gradient (through an integer, a comparison, a bool)."""
    types = [elem for _, elem in step_types(expr, [() for _ in elems], elems)]
    if types[-1] not in FLOATS:
        return None
    values = [_prefix(expr, i) for i in range(len(expr.steps))]
    adjoint: list[Expr | None] = [None] * len(expr.steps)
    adjoint[-1] = Expr.operand(len(elems))
    found: Expr | None = None

    def send(to: int, grad: Expr | None) -> None:
        if grad is None or types[to] not in FLOATS:
            return
        current = adjoint[to]
        adjoint[to] = grad if current is None else current + grad

    for i in range(len(expr.steps) - 1, -1, -1):
        g = adjoint[i]
        if g is None:
            continue
        step = expr.steps[i]
        elem = types[i]
        if isinstance(step, Operand):
            if step.index == operand:
                found = g if found is None else found + g
        elif isinstance(step, Const):
            continue
        elif isinstance(step, Unary):
            send(step.arg, _unary_clause(step.op, values[step.arg], values[i], g, elem))
        elif isinstance(step, Binary):
            da, db = _binary_clause(step.op, values[step.lhs], values[step.rhs], values[i], g, elem)
            send(step.lhs, da)
            send(step.rhs, db)
        elif isinstance(step, Select):
            zero = Expr.const(0.0, elem)
            cond = values[step.cond]
            send(step.a, Expr.select(cond, g, zero))
            send(step.b, Expr.select(cond, zero, g))
        else:
            assert isinstance(step, Convert)
            source = types[step.arg]
            if source in FLOATS and step.elem in FLOATS:
                send(step.arg, g.cast(source) if source != step.elem else g)
    return found


def _prefix(expr: Expr, step: int) -> Expr:
    """The expression computing step `step` of `expr` (over the same operands; the builders that
    read it keep only the steps it needs)."""
    return Expr(expr.steps[: step + 1])
