"""Layout rules: axis-name reading, `--layout` flags, first-match order and graph scoping."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loam.core.errors import AxisError, LoamError, OptionsError
from loam.core.layout import LayoutMatcher, LayoutRule, match_layout, parse_axis_name, parse_layout_flag


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hidden", ("Hidden", ())),
        ("  Batch ", ("Batch", ())),
        ("(C H W)", ("(C H W)", ("C", "H", "W"))),
        ("( C   H  W )", ("(C H W)", ("C", "H", "W"))),
        ("(W C)", ("(W C)", ("W", "C"))),  # part order is the identity: not sorted
    ],
)
def test_parse_axis_name(text: str, expected: tuple[str, tuple[str, ...]]) -> None:
    assert parse_axis_name(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "neither an identifier"),
        ("seq-len", "neither an identifier"),
        ("2D", "neither an identifier"),
        ("(C)", "at least two parts; write C"),
        ("()", "at least two parts"),
        ("(C C)", "names a part twice"),
        ("(C (H W))", "not an identifier"),
        ("(C H", "neither an identifier"),
    ],
)
def test_parse_axis_name_refuses(text: str, message: str) -> None:
    with pytest.raises(AxisError, match=message):
        parse_axis_name(text)


def test_first_rule_in_order_wins() -> None:
    rules = [
        LayoutRule("fc1.weight", ("(C H W)", "Hidden")),
        LayoutRule("*.weight", ("In", "Out")),
        LayoutRule("*", ("Batch", "In")),
    ]
    assert match_layout(rules, "fc1.weight") is rules[0]
    assert match_layout(rules, "fc2.weight") is rules[1]
    assert match_layout(rules, "x") is rules[2]
    # Reordering changes the answer: the broad rule first shadows the rest.
    assert match_layout(list(reversed(rules)), "fc1.weight") is rules[2]


def test_glob_is_case_sensitive_and_whole_name() -> None:
    rules = [LayoutRule("*.Weight", ("In", "Out")), LayoutRule("fc?.bias", ("Out",))]
    assert match_layout(rules, "fc1.weight") is None
    assert match_layout(rules, "fc1.bias") is rules[1]
    assert match_layout(rules, "fc10.bias") is None
    assert match_layout(rules, "x.fc1.bias") is None


def test_graph_scoped_rule_reaches_only_its_graph() -> None:
    scoped = LayoutRule("mask", ("Seq", "Total"), graph="with_past")
    anywhere = LayoutRule("mask", ("Seq", "Seq"))
    rules = [scoped, anywhere]
    assert match_layout(rules, "mask", "with_past") is scoped
    assert match_layout(rules, "mask", "no_past") is anywhere
    assert match_layout(rules, "mask") is anywhere
    assert match_layout([scoped], "mask", "no_past") is None


def test_rule_canonicalizes_merged_axes() -> None:
    assert LayoutRule("x", ("( C H )", "N")) == LayoutRule("x", ("(C H)", "N"))
    with pytest.raises(AxisError):
        LayoutRule("x", ("not-an-axis",))
    with pytest.raises(OptionsError, match="non-empty pattern"):
        LayoutRule("", ("A",))
    with pytest.raises(OptionsError, match="empty graph name"):
        LayoutRule("x", ("A",), graph="")


@pytest.mark.parametrize(
    ("flag", "rule"),
    [
        ("*.weight=In,Out", LayoutRule("*.weight", ("In", "Out"))),
        ("x = Batch, (C H W)", LayoutRule("x", ("Batch", "(C H W)"))),
        ("a=b=Hidden", LayoutRule("a=b", ("Hidden",))),  # the glob may hold '='; axis names never do
    ],
)
def test_parse_layout_flag(flag: str, rule: LayoutRule) -> None:
    assert parse_layout_flag(flag) == rule


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("*.weight", "expected GLOB=AXIS"),
        ("=In,Out", "pattern before '=' is empty"),
        ("x=", "no axis names"),
        ("x=In,,Out", "neither an identifier"),
        ("x=In,seq-len", "'seq-len'"),
        ("x=(C)", "at least two parts"),
    ],
)
def test_parse_layout_flag_refuses(flag: str, message: str) -> None:
    with pytest.raises(OptionsError, match=message) as info:
        parse_layout_flag(flag)
    # The message quotes the flag, so a user with several --layout flags knows which one.
    assert f"--layout {flag!r}" in str(info.value)
    assert isinstance(info.value, LoamError)


@settings(max_examples=200, deadline=None)
@given(
    rules=st.lists(
        st.tuples(
            st.sampled_from(["a.w", "a.b", "b.w", "a.*", "*.w", "?.w", "[ab].w", "*", "c.w", "a.w*"]),
            st.sampled_from([None, "main", "then"]),
        ),
        max_size=12,
    ),
    name=st.sampled_from(["a.w", "a.b", "b.w", "c.w", "a.wx", "zz"]),
    graph=st.sampled_from([None, "main", "then"]),
)
def test_the_matcher_picks_the_rule_match_layout_picks(
    rules: list[tuple[str, str | None]], name: str, graph: str | None
) -> None:
    """`LayoutMatcher` (literal patterns by name, wildcards in turn) answers as the plain first-match loop."""
    layout = [LayoutRule(pattern, (f"A{i}",), scope) for i, (pattern, scope) in enumerate(rules)]
    assert LayoutMatcher(layout).match(name, graph) is match_layout(layout, name, graph)
