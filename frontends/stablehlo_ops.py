"""What each StableHLO op becomes in the `graph` dialect: ONNX nodes with the same meaning.

`loam.frontends.stablehlo` walks a function and calls `lower_op` on each op; the rules emit
ONNX nodes through a `GraphBuilder`, so every later pass sees an ordinary ONNX graph:

    add/subtract/multiply/divide/maximum/minimum/power   Add/Sub/Mul/Div/Max/Min/Pow
    and/or/not                                           And/Or/Not (booleans)
    negate/abs/exponential/log/tanh/logistic/sqrt        Neg/Abs/Exp/Log/Tanh/Sigmoid/Sqrt
    rsqrt                                                Reciprocal(Sqrt)
    exponential_minus_one, log_plus_one                  composed from Exp/Log, exact near 0 (Kahan)
    is_finite, clamp, xor                                Not(IsInf or IsNaN), Min(Max), BitwiseXor/Xor
    sine/cosine/tan/sign/floor/ceil/round_nearest_even   Sin/Cos/Tan/Sign/Floor/Ceil/Round
    chlo.erf/sinh/cosh/asin/acos/atan, chlo.square       Erf/Sinh/Cosh/Asin/Acos/Atan, Mul(x, x)
    remainder                                            Mod (fmod = 1)
    cbrt, atan2                                          composed from Sign/Abs/Pow, Atan/Where (floats)
    maximum(x, 0)                                        Relu (a zero constant on either side)
    compare EQ/NE/LT/LE/GT/GE                            Equal/Not(Equal)/Less/LessOrEqual/Greater/GreaterOrEqual
    select, convert                                      Where, Cast
    constant                                             Constant (a splat: its one element), or an
                                                         embedded initializer (a weight carrying data)
    broadcast_in_dim (and dynamic_)                      nothing, an Unsqueeze or a Transpose (see below)
    reshape (and dynamic_), transpose, concatenate       Reshape, Transpose, Concat
    slice, iota (and dynamic_)                           Slice, Range (+ Unsqueeze)
    reverse, pad                                         Slice (step -1); Pad and Slice (+ Reshape for
                                                         interior padding)
    dot_general                                          MatMul (+ Transpose), else Einsum
    reduce (body add/maximum/minimum/multiply)           ReduceSum/ReduceMax/ReduceMin/ReduceProd
    reduce (body or/and, booleans: jnp.any, jnp.all)     ReduceMax/ReduceMin
    get_dimension_size                                   Shape + Reshape + Cast
    convolution, reduce_window                           Conv, MaxPool (`loam.frontends.stablehlo_windows`)
    while, case                                          Loop, If (`loam.frontends.stablehlo_control`)
    select_and_scatter (the gradient of max pooling)     Slice/compare/Where per tap + ScatterElements (add)
    dynamic_slice, dynamic_update_slice                  Gather at clamped starts, ScatterND
    gather (the embedding form: rows of a table)         Clip + Gather
    gather (general), scatter                            Gather / ScatterND at computed flat positions
    sort (JAX's LT or GT comparator)                     TopK of every element + GatherElements
                                                         (these five: `loam.frontends.stablehlo_indexing`)
    custom_call @shape_assertion                         nothing (JAX's check of a symbolic dim)

The rules live by concern: `stablehlo_elementwise` (the elementwise ops, compare, select, convert),
`stablehlo_movement` (constant, the broadcasts, reshape, transpose, concatenate, slice, reverse,
pad, iota, get_dimension_size), `stablehlo_reductions` (dot_general, reduce), `stablehlo_windows`,
`stablehlo_indexing`, and custom_call here; `while` and `case` (`stablehlo_control`) are lowered
by the reader itself, which lowers their regions as it lowers a function's body.  Each writes
ONNX nodes through a `GraphBuilder` (`stablehlo_builder`), reads broadcasts lazily
(`stablehlo_broadcast`) and registers in the table `stablehlo_rules.RULES`.
"""

from __future__ import annotations

from xdsl.ir import Operation

from loam.dialects import stablehlo as hlo

# Each rule module registers its rules in stablehlo_rules.RULES when imported: importing them here
# puts every rule in the table before `lower_op` looks one up.
from loam.frontends import stablehlo_elementwise as _elementwise  # noqa: F401
from loam.frontends import stablehlo_indexing as _indexing  # noqa: F401
from loam.frontends import stablehlo_movement as _movement  # noqa: F401
from loam.frontends import stablehlo_reductions as _reductions  # noqa: F401
from loam.frontends import stablehlo_windows as _windows  # noqa: F401
from loam.frontends.stablehlo_builder import GraphBuilder, LoweringError, Operand
from loam.frontends.stablehlo_rules import RULES, rule

__all__ = ["lower_op"]


def lower_op(b: GraphBuilder, op: Operation, operands: list[Operand]) -> list[Operand]:
    """The operands of `op`'s results (LoweringError when Loam cannot express it)."""
    fn = RULES.get(type(op))
    if fn is None:
        raise LoweringError("Loam does not lower this op")
    return fn(b, op, operands)


@rule(hlo.CustomCallOp)
def _custom_call(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.CustomCallOp)
    if op.target == "shape_assertion":  # JAX checks a symbolic dim (b >= 1); forward checks its inputs
        return []
    raise LoweringError(f"custom_call @{op.target} is not supported (only JAX's @shape_assertion is)")
