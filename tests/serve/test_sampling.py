"""Per-request token choice and stop strings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loam.serve.sampling import Sampler, SamplingParams, StopMatcher


def test_greedy_is_the_argmax() -> None:
    logits = np.array([0.1, 3.0, 2.9, -1.0], np.float32)
    assert Sampler(SamplingParams(temperature=0.0)).pick(logits) == 1


def test_a_seed_repeats_its_draws_and_another_seed_differs() -> None:
    logits = np.random.default_rng(0).standard_normal(500).astype(np.float32)
    one, again = Sampler(SamplingParams(temperature=1.0, seed=1)), Sampler(SamplingParams(temperature=1.0, seed=1))
    assert [one.pick(logits) for _ in range(30)] == [again.pick(logits) for _ in range(30)]
    a = Sampler(SamplingParams(temperature=1.0, seed=1))
    b = Sampler(SamplingParams(temperature=1.0, seed=2))
    assert [a.pick(logits) for _ in range(30)] != [b.pick(logits) for _ in range(30)]


def test_top_p_keeps_only_the_tokens_that_reach_it() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    sampler = Sampler(SamplingParams(temperature=1.0, top_p=0.7, seed=0))
    assert {sampler.pick(logits) for _ in range(300)} == {0, 1}
    tiny = Sampler(SamplingParams(temperature=1.0, top_p=0.01, seed=0))
    assert {tiny.pick(logits) for _ in range(50)} == {0}


def test_temperature_sharpens_the_distribution() -> None:
    logits = np.array([1.0, 0.0])
    cold = Sampler(SamplingParams(temperature=0.1, seed=3))
    warm = Sampler(SamplingParams(temperature=2.0, seed=3))
    assert sum(cold.pick(logits) for _ in range(400)) < 5 < sum(warm.pick(logits) for _ in range(400))


def test_a_stop_string_split_across_pieces_is_never_shown() -> None:
    matcher = StopMatcher(["STOP"])
    shown = [matcher.feed(p) for p in ["hello S", "TO", "P and more"]]
    assert "".join(shown) == "hello " and matcher.stopped


def test_the_earliest_of_several_stops_wins() -> None:
    matcher = StopMatcher(["xyz", "b"])
    assert matcher.feed("aaxy") + matcher.feed("zb") == "aa"


@given(
    st.lists(st.text(alphabet="abc", max_size=4), max_size=12),
    st.lists(st.text(alphabet="abc", min_size=1, max_size=3), max_size=3),
)
def test_shown_text_is_the_text_up_to_the_first_stop(pieces: list[str], stops: list[str]) -> None:
    matcher = StopMatcher(stops)
    shown = "".join(matcher.feed(p) for p in pieces) + matcher.flush()
    whole = "".join(pieces)
    cut = min((whole.find(s) for s in stops if s in whole), default=len(whole))
    assert shown == whole[:cut]
    assert matcher.stopped == (cut < len(whole) or any(s in whole for s in stops))


@pytest.mark.parametrize("stops", [[], ["q"]])
def test_without_a_stop_in_sight_text_flows_with_at_most_a_stop_length_held(stops: list[str]) -> None:
    matcher = StopMatcher(stops)
    assert matcher.feed("abcdef") == "abcdef"
