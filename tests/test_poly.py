"""Properties and examples of `loam.core.poly.Poly`: ring laws, canonical equality, text round trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loam.core.errors import LoamError, PolyError
from loam.core.poly import Poly, poly_product, poly_sum

PLAIN = ["N", "M", "seq_len", "B2", "_x"]
QUOTED = ["seq-len", "batch size", 'a"b', "back\\slash", "naïve", "1st"]
SYMBOLS = PLAIN + QUOTED

# Polynomials as an expression tree alongside the value a direct computation gives, so properties
# can compare Poly's arithmetic against plain integer arithmetic.
envs = st.fixed_dictionaries({s: st.integers(-50, 50) for s in SYMBOLS})


def _leaf() -> st.SearchStrategy[Poly]:
    return st.one_of(
        st.integers(-20, 20).map(Poly.const),
        st.sampled_from(SYMBOLS).map(Poly.symbol),
    )


polys: st.SearchStrategy[Poly] = st.recursive(
    _leaf(),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: ab[0] + ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] - ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] * ab[1]),
        inner.map(lambda a: -a),
    ),
    max_leaves=8,
)

# Expression trees evaluated directly (no Poly involved) and built as Poly, to check evaluate.
Tree = tuple
trees: st.SearchStrategy[Tree] = st.recursive(
    st.one_of(st.tuples(st.just("c"), st.integers(-20, 20)), st.tuples(st.just("s"), st.sampled_from(SYMBOLS))),
    lambda inner: st.tuples(st.sampled_from(["+", "-", "*"]), inner, inner),
    max_leaves=8,
)


def _direct(tree: Tree, env: dict[str, int]) -> int:
    kind = tree[0]
    if kind == "c":
        return tree[1]
    if kind == "s":
        return env[tree[1]]
    a, b = _direct(tree[1], env), _direct(tree[2], env)
    return a + b if kind == "+" else a - b if kind == "-" else a * b


def _build(tree: Tree) -> Poly:
    kind = tree[0]
    if kind == "c":
        return Poly.const(tree[1])
    if kind == "s":
        return Poly.symbol(tree[1])
    a, b = _build(tree[1]), _build(tree[2])
    return a + b if kind == "+" else a - b if kind == "-" else a * b


@given(polys, polys, polys)
def test_ring_laws(a: Poly, b: Poly, c: Poly) -> None:
    assert a + b == b + a
    assert a * b == b * a
    assert (a + b) + c == a + (b + c)
    assert (a * b) * c == a * (b * c)
    assert a * (b + c) == a * b + a * c
    assert a + Poly.const(0) == a and a * Poly.const(1) == a
    assert a - a == Poly.const(0) and a * 0 == Poly.const(0)
    assert a - b == a + (-b)


@given(polys, polys)
def test_equal_polys_hash_alike(a: Poly, b: Poly) -> None:
    # (a + b) - b is built along a different path than a; canonical form makes them one value.
    c = (a + b) - b
    assert c == a and hash(c) == hash(a)
    assert len({a, c}) == 1


@given(polys)
def test_text_round_trip(p: Poly) -> None:
    assert Poly.parse(str(p)) == p


@given(trees, envs)
def test_evaluate_agrees_with_direct_computation(tree: Tree, env: dict[str, int]) -> None:
    assert _build(tree).evaluate(env) == _direct(tree, env)


@given(polys, st.sampled_from(SYMBOLS), polys, envs)
def test_substitute_is_evaluation_of_the_replacement(p: Poly, name: str, q: Poly, env: dict[str, int]) -> None:
    inner = dict(env)
    inner[name] = q.evaluate(env)
    substituted = p.substitute(name, q)
    assert substituted.evaluate(env) == p.evaluate(inner)
    if name not in q.symbols:
        assert name not in substituted.symbols


@given(polys, polys, st.integers(-30, 30), envs)
def test_int_operands_mix_with_polys(a: Poly, b: Poly, k: int, env: dict[str, int]) -> None:
    assert (a + k).evaluate(env) == a.evaluate(env) + k
    assert (k - a).evaluate(env) == k - a.evaluate(env)
    assert (k * a).evaluate(env) == k * a.evaluate(env)
    assert (a * b).evaluate(env) == a.evaluate(env) * b.evaluate(env)


@settings(max_examples=50)
@given(polys)
def test_const_iff_no_symbols(p: Poly) -> None:
    assert p.is_const == (not p.symbols)
    if p.is_const:
        assert Poly.const(p.const_value) == p
    else:
        with pytest.raises(PolyError, match="not a constant"):
            _ = p.const_value


def test_print_order_constants_last_and_signs() -> None:
    n, m = Poly.symbol("N"), Poly.symbol("M")
    assert str(2 * n * m + 3 * n - 1) == "2*M*N + 3*N - 1"
    assert str(1 - n) == "-N + 1"
    assert str(n * n - 2 * m) == "N*N - 2*M"
    assert str(Poly.const(0)) == "0"
    assert str(Poly.const(-7)) == "-7"


def test_non_identifier_symbols_print_quoted() -> None:
    assert str(Poly.symbol("seq-len") + 1) == '"seq-len" + 1'
    assert str(Poly.symbol('a"b')) == '"a\\22b"'
    assert Poly.parse('"seq-len" + 1') == Poly.symbol("seq-len") + 1


def test_parse_precedence_parentheses_and_unary_minus() -> None:
    n = Poly.symbol("N")
    assert Poly.parse("1 + 2*N") == 2 * n + 1
    assert Poly.parse("(N + 1)*(N - 1)") == n * n - 1
    assert Poly.parse("-N*2 - -3") == -2 * n + 3
    assert Poly.parse("  N*  N ") == n * n


def test_symbols_and_const_value() -> None:
    p = Poly.parse('N*M + "s-1"')
    assert p.symbols == frozenset({"N", "M", "s-1"})
    assert Poly.parse("2*3 - 1").const_value == 5
    assert Poly.const(0).const_value == 0


def test_sum_and_product_helpers() -> None:
    c, h, w = (Poly.symbol(s) for s in "CHW")
    assert poly_product([c, h, w, 2]) == Poly.parse("2*C*H*W")
    assert poly_sum([]) == Poly.const(0) and poly_product([]) == Poly.const(1)


def test_evaluate_names_the_missing_symbol() -> None:
    with pytest.raises(PolyError, match='"seq-len"'):
        Poly.parse('N + "seq-len"').evaluate({"N": 1})


@pytest.mark.parametrize(
    "text",
    ["", "N +", "2N", "(N", "N)", "N.x", "N ^ 2", '"unterminated', '"bad \\q"', "* N", "N M"],
)
def test_malformed_text_is_refused(text: str) -> None:
    with pytest.raises(PolyError, match=r"polynomial|escape|symbol") as info:
        Poly.parse(text)
    assert isinstance(info.value, LoamError)


def test_bool_is_not_an_int_operand() -> None:
    with pytest.raises(TypeError):
        Poly.const(True)
    with pytest.raises(TypeError):
        _ = Poly.symbol("N") + True


def test_lone_symbol_is_a_symbol_alone() -> None:
    assert Poly.symbol("N").lone_symbol == "N"
    assert Poly.parse('"seq-len"').lone_symbol == "seq-len"
    for text in ("2*N", "N + 1", "N*N", "N*M", "3", "0", "-N"):
        assert Poly.parse(text).lone_symbol is None, text
