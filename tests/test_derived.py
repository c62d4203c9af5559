"""Properties of derived symbols and the decision procedure, against plain integer arithmetic.

For random expressions over the shape operations stage 0 meets (ring operations, min/max, the three
roundings of a quotient, remainders, from-end indices, int32 wraps), and random symbol values within
an input's range: the constructed extent evaluates to what Python computes directly; its value lies
within the bounds the build computes; `decide` never says "holds" where the assignment falsifies the
condition, nor "fails" where it satisfies it; and text round-trips to the same symbol.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loam.core import derived
from loam.core.bounds import Interval, Verdict
from loam.core.errors import ShapeError
from loam.core.owed import ExtentScope, scope
from loam.core.poly import Poly, derived_call

SYMBOLS = ["N", "S", "past"]
# Mostly small values, where clamps and roundings take effect, with some large ones.
values = st.one_of(st.integers(0, 40), st.integers(0, 2**31 - 1))
envs = st.fixed_dictionaries({s: values for s in SYMBOLS})

Tree = tuple


def _floor(a: int, b: int) -> int:
    return a // b


def _ceil(a: int, b: int) -> int:
    return -((-a) // b)


def _trunc(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


# Each operation: how stage 0 builds it, and what it means on ints.
BINARY = {
    "+": (lambda a, b: a + b, lambda a, b: a + b),
    "-": (lambda a, b: a - b, lambda a, b: a - b),
    "*": (lambda a, b: a * b, lambda a, b: a * b),
    "min": (derived.minimum, min),
    "max": (derived.maximum, max),
}
DIVIDING = {
    "floordiv": (derived.floordiv, _floor),
    "ceildiv": (derived.ceildiv, _ceil),
    "truncdiv": (derived.truncdiv, _trunc),
    "mod": (derived.modulo, lambda a, b: a % b),
}

trees: st.SearchStrategy[Tree] = st.recursive(
    st.one_of(st.tuples(st.just("c"), st.integers(-20, 20)), st.tuples(st.just("s"), st.sampled_from(SYMBOLS))),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(sorted(BINARY)), inner, inner),
        st.tuples(st.sampled_from(sorted(DIVIDING)), inner, st.integers(1, 9) | st.integers(-9, -1)),
        st.tuples(st.just("fromend"), inner, st.sampled_from(SYMBOLS)),
        st.tuples(st.just("wrap32"), inner),
    ),
    max_leaves=6,
)


def build(tree: Tree) -> Poly:
    kind = tree[0]
    if kind == "c":
        return Poly.const(tree[1])
    if kind == "s":
        return Poly.symbol(tree[1])
    if kind in BINARY:
        return BINARY[kind][0](build(tree[1]), build(tree[2]))
    if kind in DIVIDING:
        return DIVIDING[kind][0](build(tree[1]), tree[2])
    if kind == "fromend":
        return derived.from_end(build(tree[1]), Poly.symbol(tree[2]))
    return derived.wrap32(build(tree[1]))


def direct(tree: Tree, env: dict[str, int]) -> int:
    kind = tree[0]
    if kind == "c":
        return tree[1]
    if kind == "s":
        return env[tree[1]]
    if kind in BINARY:
        return BINARY[kind][1](direct(tree[1], env), direct(tree[2], env))
    if kind in DIVIDING:
        return DIVIDING[kind][1](direct(tree[1], env), tree[2])
    if kind == "fromend":
        i = direct(tree[1], env)
        return i + env[tree[2]] if i < 0 else i
    return (direct(tree[1], env) + 2**31) % 2**32 - 2**31


@settings(max_examples=400)
@given(trees, envs)
def test_evaluation_commutes_with_every_operation(tree: Tree, env: dict[str, int]) -> None:
    assert derived.evaluate(build(tree), env) == direct(tree, env)


@settings(max_examples=400)
@given(trees, envs)
def test_values_lie_within_the_computed_bounds(tree: Tree, env: dict[str, int]) -> None:
    p = build(tree)
    value = derived.evaluate(p, env)
    interval = derived.bounds_of(p, {})
    assert interval.lo <= value <= interval.hi, f"{p} = {value} outside {interval}"


@settings(max_examples=400)
@given(trees, envs)
def test_decide_never_contradicts_an_assignment(tree: Tree, env: dict[str, int]) -> None:
    p = build(tree)
    value = derived.evaluate(p, env)
    verdict = derived.decide(p, {})
    if verdict is Verdict.HOLDS:
        assert value >= 0, f"decide says {p} >= 0 holds, but it is {value} at {env}"
    if verdict is Verdict.FAILS:
        assert value < 0, f"decide says {p} >= 0 fails, but it is {value} at {env}"


@settings(max_examples=200)
@given(trees)
def test_text_round_trips_to_the_same_symbols(tree: Tree) -> None:
    p = build(tree)
    assert Poly.parse(str(p)) == p


@settings(max_examples=200)
@given(trees, trees)
def test_the_same_operation_on_equal_operands_is_the_same_symbol(a: Tree, b: Tree) -> None:
    assert derived.minimum(build(a), build(b)) == derived.minimum(build(b), build(a))
    assert derived.floordiv(build(a), 3) == derived.floordiv(build(a), 3)


def test_decided_where_the_bounds_prove_it() -> None:
    n = Poly.symbol("N")
    assert derived.minimum(n, 2**62) == n  # "to the end": no length reaches 2**62
    assert derived.maximum(n, 0) == n
    assert derived.floordiv(2 * n + 4, 2) == n + 2
    assert derived.ceildiv(n, 1) == n
    assert derived.truncdiv(n, 2) == derived.floordiv(n, 2)  # N >= 0
    assert derived.truncdiv(-n, 2) == -derived.floordiv(n, 2)  # -N <= 0 rounds up
    assert derived.from_end(n, 8) == n
    assert derived.from_end(-n - 1, 8) == 7 - n
    assert derived.wrap32(n) == n  # an input length fits int32
    assert derived.wrap32(n * n) != n * n
    assert str(derived.minimum(n, 1024)) == "min(1024, N)"
    assert derived_call("min(1024, N)") is not None
    assert derived_call("seq-len") is None


def test_a_derived_symbol_lies_within_what_its_operation_leaves() -> None:
    n = Poly.symbol("N")
    assert derived.bounds_of(derived.minimum(n, 8), {}).hi == 8
    assert derived.bounds_of(derived.modulo(n, 5), {}) == Interval(0, 4)
    assert derived.bounds_of(derived.ceildiv(n, 2), {}).hi == 2**30


def test_reading_as_the_unchanged_operand_is_owed() -> None:
    n, s = Poly.symbol("N"), Poly.symbol("S")
    mask = derived.minimum(s, 1024)
    with scope(ExtentScope(bound={"S"})) as sc:
        assert sc.require_equal(mask, s, "Where node 'mask'", "broadcast") == s
    assert [str(o) for o in sc.owed] == ["S <= 1024"]
    # GPT-2's slice of a causal mask: rows k-q .. k of a 128-row buffer, k = past + S, q = S.
    count = derived.maximum(0, derived.minimum(n + s, 128) - derived.minimum(n, 128))
    with scope(ExtentScope(bound={"N", "S"})) as sc:
        sc.require_equal(count, s, "Slice node 'bias'", "rows")
    assert "N + S <= 128" in [str(o) for o in sc.owed]
    # A rounded quotient takes no operand unchanged: it cannot be read as N.  Meeting a number, it
    # is owed equal to it (N is 6 or 7: a pooled map of fixed size after a window of any input).
    with scope(ExtentScope(bound={"N"})) as sc:
        sc.require_equal(derived.floordiv(n, 2), Poly.const(3), "Reshape node 'r'", "target")
    assert [str(o) for o in sc.owed] == ["3 == floordiv(N, 2)"]
    # An input's own symbol meeting a number still stops the build: `dims` is the way to fix it.
    with scope(ExtentScope(bound={"N"})) as sc, pytest.raises(ShapeError, match=r"meets 3.*--dims N=3"):
        sc.require_equal(n, Poly.const(3), "Reshape node 'r'", "target")


def test_conditions_false_for_every_input_or_unbound_stop_the_build() -> None:
    n = Poly.symbol("N")
    with scope(ExtentScope(bound={"N"})) as sc:
        with pytest.raises(ShapeError, match="needs N \\+ 1 <= 0"):
            sc.owe(-n - 1, "Slice node 's'")
        with pytest.raises(ShapeError, match="bound by no input"):
            sc.owe(Poly.symbol("X") - 3, "Slice node 's'")
        sc.owe(n + 1, "Slice node 's'")  # holds for every input: nothing owed
    assert sc.owed == []
