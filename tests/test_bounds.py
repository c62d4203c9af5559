"""loam.core.bounds: sound interval bounds of extents and the three-way decision `p >= 0`."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loam.core.bounds
from loam.core.bounds import INPUT_MAX, Interval, Verdict, decide, poly_bounds
from loam.core.errors import PolyError
from loam.core.poly import Poly

SYMBOLS = ("N", "S", "P")


def _leaf() -> st.SearchStrategy[Poly]:
    return st.one_of(st.integers(-40, 40).map(Poly.const), st.sampled_from(SYMBOLS).map(Poly.symbol))


polys: st.SearchStrategy[Poly] = st.recursive(
    _leaf(),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: ab[0] + ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] - ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] * ab[1]),
    ),
    max_leaves=8,
)


@st.composite
def intervals(draw: st.DrawFn) -> Interval:
    lo = draw(st.integers(-30, 30))
    return Interval(lo, lo + draw(st.integers(0, 40)))


@st.composite
def bounded_assignment(draw: st.DrawFn) -> tuple[dict[str, Interval], dict[str, int]]:
    bounds = {s: draw(intervals()) for s in SYMBOLS}
    env = {s: draw(st.integers(b.lo, b.hi)) for s, b in bounds.items()}
    return bounds, env


@given(polys, bounded_assignment())
def test_every_value_lies_within_the_bounds(p: Poly, case: tuple[dict[str, Interval], dict[str, int]]) -> None:
    bounds, env = case
    assert p.evaluate(env) in poly_bounds(p, bounds)


@given(polys, bounded_assignment())
def test_the_decision_never_contradicts_an_assignment(
    p: Poly, case: tuple[dict[str, Interval], dict[str, int]]
) -> None:
    bounds, env = case
    verdict = decide(p, bounds)
    value = p.evaluate(env)
    if verdict is Verdict.HOLDS:
        assert value >= 0
    elif verdict is Verdict.FAILS:
        assert value < 0


@given(polys, st.lists(st.integers(0, INPUT_MAX), min_size=3, max_size=3))
def test_input_symbols_default_to_non_negative_int32_lengths(p: Poly, values: list[int]) -> None:
    env = dict(zip(SYMBOLS, values, strict=True))
    assert p.evaluate(env) in poly_bounds(p, {})


@pytest.mark.parametrize(
    ("text", "bounds", "verdict"),
    [
        ("N + 1", {}, Verdict.HOLDS),
        ("N*S", {}, Verdict.HOLDS),
        ("-N - 1", {}, Verdict.FAILS),
        ("1024 - N", {}, Verdict.UNKNOWN),  # a context length: only the run knows
        ("1024 - N", {"N": Interval(0, 1000)}, Verdict.HOLDS),
        ("N - 1", {}, Verdict.UNKNOWN),  # N may be 0
        ("N - 1", {"N": Interval(1, 8)}, Verdict.HOLDS),
        ("N - S", {}, Verdict.UNKNOWN),  # never merged on a hunch
        ("2147483647 - N", {}, Verdict.HOLDS),
        ("2147483646 - N", {}, Verdict.UNKNOWN),
        ("N*N - 2*N + 1", {"N": Interval(-3, 3)}, Verdict.UNKNOWN),  # (N-1)^2 >= 0, beyond intervals
    ],
)
def test_decisions(text: str, bounds: dict[str, Interval], verdict: Verdict) -> None:
    assert decide(Poly.parse(text), bounds) is verdict


def test_even_powers_of_a_sign_changing_interval_are_non_negative() -> None:
    assert Interval(-3, 2).power(2) == Interval(0, 9)
    assert Interval(-3, 2).power(3) == Interval(-27, 8)


def test_an_empty_interval_is_refused() -> None:
    with pytest.raises(PolyError, match=r"empty interval \[3, 2\]"):
        Interval(3, 2)


def test_module_examples() -> None:
    assert doctest.testmod(loam.core.bounds, extraglobs={"Poly": Poly}).failed == 0
