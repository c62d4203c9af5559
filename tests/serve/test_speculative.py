"""Speculative decoding (`loam.serve.speculative`, `loam.serve.draft`): the proposers and the verifier's kernels
alone, then the tiny GPT-2 served with a prompt lookup and with a draft stage (its own graph and weights, so every
guess is right, or its graph over noisy weights, so some are rejected): greedy tokens equal a plain run's,
alone and in cohorts beside plain requests, a seeded sample keeps the decoder's distribution, rejected positions
leave the KV pool as a plain run leaves it, and a package naming a proposer wrongly is refused naming the key."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import safetensors.numpy

from loam.driver.draft import draft_layout
from loam.serve.draft import DraftModel
from loam.serve.package import PackageError
from loam.serve.sampling import SamplingParams
from loam.serve.scheduler import Request
from loam.serve.server import Server
from loam.serve.speculative import GuessBudget, accept_greedy, accept_sampled, prompt_lookup, read_speculation
from loam.serve.text import TextRequest, TextWorker
from loam.text.generate import Decoder
from loam.text.pick import token_probs
from tests.serve.serving import MODELS, PACKAGES, http_client, package_copy, serving

pytestmark = pytest.mark.xdist_group("serve-speculative")
LOOKUP, DRAFT, NOISY = "tiny-lookup", "tiny-draft", "tiny-noisy-draft"
# Code-like: a snippet the prompt repeats, so a prompt lookup finds long matches; and two with few repeats.
PROMPTS = [[5, 9, 13, 22, 7, 31], [5, 9, 13, 22, 5, 9, 13, 22, 5, 9, 13], [*range(3, 40), *range(3, 30)], [17] * 9]


def _stage(name: str) -> dict[str, str]:
    """A stage entry of the committed tiny GPT-2 package, its paths absolute."""
    table = json.loads((PACKAGES / "tiny_gpt2" / "model.json").read_text(encoding="utf-8"))
    entry = table["stages"]["decoder"]
    return {k: v if k == "source" else str((PACKAGES / "tiny_gpt2" / v).resolve()) for k, v in entry.items()}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    lookup = package_copy(
        tmp_path_factory, "tiny_gpt2", name=LOOKUP, speculative={"proposer": "prompt_lookup", "tokens": 4, "ngram": 3}
    )
    # The draft is the decoder's own graph: it always guesses what the decoder picks (greedy), the mechanics of a
    # draft (its own KV rows, caught up and rolled back) exercised with every guess accepted.
    draft = package_copy(
        tmp_path_factory, "tiny_gpt2", name=DRAFT, stages={"decoder": _stage("decoder"), "draft": _stage("decoder")},
        speculative={"proposer": "draft", "stage": "draft", "tokens": 3},
    )  # fmt: skip
    # A draft that disagrees: the same graph over the weights with noise added, so some guesses are rejected and
    # the draft's rows roll back, and its sampled guesses come from a distribution that is not the decoder's.
    rng = np.random.default_rng(3)
    weights = safetensors.numpy.load_file(MODELS / "tiny_gpt2" / "tiny_gpt2.safetensors")
    noisy = tmp_path_factory.mktemp("noisy") / "noisy.safetensors"
    safetensors.numpy.save_file(
        {k: (v + 0.3 * v.std() * rng.standard_normal(v.shape)).astype(v.dtype) for k, v in weights.items()}, noisy
    )
    sources = {"weights": str(MODELS / "tiny_gpt2" / "tiny_gpt2.safetensors"), "noisy": str(noisy)}
    noisy_draft = package_copy(
        tmp_path_factory, "tiny_gpt2", name=NOISY, sources=sources,
        stages={"decoder": _stage("decoder"), "draft": {**_stage("decoder"), "source": "noisy"}},
        speculative={"proposer": "draft", "stage": "draft", "tokens": 3},
    )  # fmt: skip
    with serving(tmp_path_factory, lookup, draft, noisy_draft) as server:
        yield server


def worker_of(server: Server, name: str) -> TextWorker:
    worker = server.models[name].worker
    assert isinstance(worker, TextWorker)
    return worker


def send(worker: TextWorker, prompt: list[int], speculative: bool, max_tokens: int = 24, **params: Any) -> Any:
    """Submit a request (greedy unless `params` say otherwise); returns the iterator over its events."""
    sink, drain = Request.collector()
    sampling = SamplingParams(max_tokens=max_tokens, **{"temperature": 0.0, "ignore_eos": True, **params})
    worker.submit(TextRequest(sink=sink, prompt=list(prompt), params=sampling, speculative=speculative))
    return drain


def counted(server: Server, name: str, what: str) -> float:
    """A model's `loam_speculative_{what}_tokens_total` in the server's metrics."""
    value = server.metrics.registry.get_sample_value(f"loam_speculative_{what}_tokens_total", {"model": name})
    return value or 0.0


def tokens(drain: Any) -> list[int]:
    end = list(drain(300))[-1]
    assert end.kind == "done", end.text
    return list(end.value)


# -- the kernels -----------------------------------------------------------------------------------------------


def test_prompt_lookup_proposes_what_followed_the_latest_longest_match() -> None:
    context = [1, 2, 3, 4, 9, 2, 3, 5, 6, 1, 2, 3]
    assert prompt_lookup(context, 3, 3) == [4, 9, 2]  # [1, 2, 3] matched at the start
    assert prompt_lookup(context, 3, 2) == [5, 6, 1]  # [2, 3]'s latest earlier occurrence
    assert prompt_lookup([7, 8, 9], 4, 3) == []  # nothing repeats
    assert prompt_lookup([4, 1, 4], 4, 3, min_ngram=2) == []  # only a 1-gram would match
    assert prompt_lookup([4, 1, 4], 4, 3) == [1, 4]


def test_greedy_acceptance_takes_the_agreeing_prefix_and_the_decoders_next_token() -> None:
    logits = np.eye(6, dtype=np.float32)[[2, 3, 0, 5]]  # the argmax after each span position: 2, 3, 0, 5
    assert accept_greedy(logits, [2, 3, 4]) == [2, 3, 0]  # the third guess is rejected: the decoder's 0 instead
    assert accept_greedy(logits, [2, 3, 0]) == [2, 3, 0, 5]  # all accepted, and the next token after them
    assert accept_greedy(logits, [1, 3, 0]) == [2]


def test_a_rows_guess_budget_grows_while_guesses_are_kept_and_pauses_when_they_are_not() -> None:
    budget = GuessBudget()
    assert budget.room(6) == 6  # the first guess may take them all
    budget.kept(6, 6, 6)
    assert budget.room(6) == 6  # all kept: it stays at the most
    budget.kept(6, 2, 6)
    assert budget.room(6) == 5  # one rejected: one fewer
    for left in (4, 3, 2, 1):
        budget.kept(budget.room(6) if left < 4 else 5, 0, 6)
        assert budget.room(6) == left
    budget.kept(1, 0, 6)  # down to 0: plain steps for a while, then 1 again
    assert [budget.room(6) for _ in range(GuessBudget.PAUSE)] == [0] * (GuessBudget.PAUSE - 1) + [1]
    budget.kept(1, 1, 6)
    assert budget.room(6) == 3  # kept: it grows by 2
    budget.kept(0, 0, 6)  # nothing was proposed (no n-gram matched): no change
    assert budget.room(6) == 3 and budget.room(2) == 2  # never past the room the worker gives


def chi_square(counts: Counter[Any], probs: dict[Any, float], total: int) -> tuple[float, int]:
    """Pearson's statistic of `counts` against `probs` (cells expecting fewer than 5 merged) and its degrees of
    freedom."""
    stat, rest_seen, rest_expected, cells = 0.0, 0, 0.0, 0
    for key, p in probs.items():
        if p * total >= 5:
            stat += (counts[key] - p * total) ** 2 / (p * total)
            cells += 1
        else:
            rest_seen, rest_expected = rest_seen + counts[key], rest_expected + p * total
    rest_seen += sum(n for key, n in counts.items() if key not in probs)
    if rest_expected >= 5:
        stat += (rest_seen - rest_expected) ** 2 / rest_expected
        cells += 1
    elif rest_seen > 10:  # outcomes the distribution all but rules out
        stat = math.inf
    return stat, max(cells - 1, 1)


def critical(df: int) -> float:
    """The chi-square statistic exceeded with probability 1e-4 (Wilson-Hilferty)."""
    z = 3.719
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize("proposer", ["point", "draft"])
def test_rejection_sampling_draws_the_targets_distribution(proposer: str) -> None:
    """Two guessed tokens per span over a 5-token vocabulary: the pairs taken are distributed as the target's
    draws, whatever the guesses (a point mass, or a draft's draws from a distribution unlike the target's)."""
    rng = np.random.default_rng(7)
    q = [np.array([0.5, 0.2, 0.15, 0.1, 0.05]), np.array([0.1, 0.1, 0.6, 0.1, 0.1]), np.array([0.2] * 5)]
    r = np.array([0.05, 0.05, 0.1, 0.3, 0.5])
    pairs: Counter[tuple[int, ...]] = Counter()
    trials = 20000
    for _ in range(trials):
        taken: list[int] = []
        while len(taken) < 2:  # a rejection ends the span: the next one guesses again from there
            at = len(taken)
            if proposer == "point":
                guess, probs = [0, 2][at:], None  # the targets' modes: mostly accepted
            else:
                guess, probs = [int(rng.choice(5, p=r)) for _ in range(2 - at)], [r] * (2 - at)
            taken += accept_sampled(lambda i, at=at: q[at + i], guess, rng, probs)
        pairs[tuple(taken[:2])] += 1
    want = {(a, b): float(q[0][a] * q[1][b]) for a in range(5) for b in range(5)}
    stat, df = chi_square(pairs, want, trials)
    assert stat < critical(df), (stat, df)
    # The same counts against the proposer's own distribution: a kernel that kept every guess would pass this.
    wrong = {(a, b): float(r[a] * r[b]) if proposer == "draft" else float(a == 0 and b == 2) for a, b in want}
    assert chi_square(pairs, wrong, trials)[0] > critical(df)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"proposer": "ngram", "tokens": 4}, "speculative.proposer"),
        ({"proposer": "prompt_lookup", "tokens": 0}, "speculative.tokens"),
        ({"proposer": "prompt_lookup", "tokens": 4, "stage": "draft"}, "speculative.stage"),
        ({"proposer": "prompt_lookup", "tokens": 4, "ngram": 2, "min_ngram": 3}, "speculative.min_ngram"),
        ({"proposer": "draft", "tokens": 2, "stage": "missing"}, "speculative.stage"),
        ({"proposer": "draft", "tokens": 2, "stage": "decoder"}, "speculative.stage"),  # the decoder itself
        ([4], "speculative"),
    ],
)
def test_a_malformed_proposer_is_refused_naming_the_key(raw: object, key: str) -> None:
    with pytest.raises(PackageError) as caught:
        read_speculation(raw, "model.json", ["decoder", "draft"] if key != "speculative.stage" else ["decoder"])
    assert f"key {key!r}" in str(caught.value)


def test_a_draft_of_another_vocabulary_is_refused_naming_the_key(tmp_path_factory: pytest.TempPathFactory) -> None:
    graph = MODELS / "dynamo" / "gpt2_decoder.onnx"  # a decoder of 256 tokens; the tiny GPT-2 has 1000
    layout = tmp_path_factory.mktemp("layout") / "gpt2_decoder.loam.toml"
    layout.write_text(draft_layout(graph).toml(), encoding="utf-8")
    other = {"graph": str(graph), "options": str(layout)}
    folder = package_copy(
        tmp_path_factory, "tiny_gpt2", stages={"decoder": _stage("decoder"), "draft": other},
        speculative={"proposer": "draft", "stage": "draft", "tokens": 2},
    )  # fmt: skip
    with serving(tmp_path_factory) as server, pytest.raises(PackageError) as caught:
        server.register(folder)
    assert "'speculative.stage'" in str(caught.value) and "256" in str(caught.value)


# -- served ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [LOOKUP, DRAFT, NOISY])
def test_greedy_tokens_are_a_plain_runs_alone_and_in_cohorts(server: Server, name: str) -> None:
    worker = worker_of(server, name)
    plain = [tokens(send(worker, p, speculative=False)) for p in PROMPTS]
    assert [tokens(send(worker, p, speculative=True)) for p in PROMPTS] == plain
    before = worker.cohorts
    # Every prompt twice at once, one of each pair speculating: verifier spans share cohorts with prompt spans and
    # plain steps of rows at other positions.
    drains = [send(worker, p, speculative=s) for p in PROMPTS for s in (True, False)]
    together = [tokens(d) for d in drains]
    assert together == [t for t in plain for _ in (0, 1)]
    assert worker.widest >= 4 and worker.cohorts > before


def test_proposals_are_accepted_and_counted(server: Server) -> None:
    """The draft (the decoder's own graph) guesses every token right: 3 accepted per verifier span, so 21 tokens
    take a prompt call and 5 spans of 4 tokens; the prompt lookup's and the noisy draft's guesses are counted."""
    worker = worker_of(server, DRAFT)
    proposed, accepted, cohorts = counted(server, DRAFT, "proposed"), counted(server, DRAFT, "accepted"), worker.cohorts
    plain = tokens(send(worker, PROMPTS[0], speculative=False, max_tokens=21))
    assert worker.cohorts - cohorts == 21
    cohorts = worker.cohorts
    assert tokens(send(worker, PROMPTS[0], speculative=True, max_tokens=21)) == plain
    assert worker.cohorts - cohorts == 6
    assert counted(server, DRAFT, "proposed") - proposed == 15 == counted(server, DRAFT, "accepted") - accepted
    lookup = worker_of(server, LOOKUP)
    before = counted(server, LOOKUP, "proposed")
    tokens(send(lookup, PROMPTS[1], speculative=True))
    assert counted(server, LOOKUP, "proposed") > before
    noisy = worker_of(server, NOISY)
    proposed, accepted = counted(server, NOISY, "proposed"), counted(server, NOISY, "accepted")
    for prompt in PROMPTS:
        tokens(send(noisy, prompt, speculative=True))
    proposed, accepted = counted(server, NOISY, "proposed") - proposed, counted(server, NOISY, "accepted") - accepted
    assert 0 < accepted < proposed  # the noisy draft is right often, not always: its rows roll back


def test_rollback_leaves_the_pool_as_a_plain_run_leaves_it(server: Server) -> None:
    worker = worker_of(server, LOOKUP)
    rows = {}
    for speculative in (False, True):
        session = worker.open_session(f"rollback-{speculative}")
        sink, drain = Request.collector()
        params = SamplingParams(max_tokens=17, temperature=0.0, ignore_eos=True)
        worker.submit(
            TextRequest(sink=sink, prompt=PROMPTS[1], params=params, session=session, speculative=speculative)
        )
        tokens(drain)
        rows[speculative] = (list(session.seq.tokens), len(session.seq.blocks), list(session.pending))
        worker.close(session)
    assert rows[True] == rows[False]
    assert worker.pool.stats()["used"] == 0  # nothing held once both are closed
    draft = worker_of(server, DRAFT)
    tokens(send(draft, PROMPTS[2], speculative=True))
    assert isinstance(draft.proposer, DraftModel)
    stats = draft.proposer.pool.stats()
    assert stats["used"] == 0 and draft.pool.stats()["used"] == 0  # the draft's rows went with the request


@pytest.mark.parametrize("name", [LOOKUP, NOISY])
def test_a_seeded_sample_keeps_the_decoders_distribution(server: Server, name: str) -> None:
    """Sampled at temperature 0.5 and top_p 0.8, the second step is a verifier span (the prompt's likely next
    tokens appear in it, so a prompt lookup guesses what followed them; the noisy draft guesses from its own
    distribution): each second token, by the first, is distributed as the decoder's draw."""
    worker = worker_of(server, name)
    prompt = [522, 820, 5, 9, 13, 22]
    proposed = counted(server, name, "proposed")
    trials = 1200
    drains = [send(worker, prompt, True, max_tokens=3, temperature=0.5, top_p=0.8, seed=s) for s in range(trials)]
    replies = [tokens(d) for d in drains]
    assert counted(server, name, "proposed") - proposed >= trials // 2  # most second steps were verifier spans
    stage = worker.stage.stage
    reference = Decoder(stage.module, stage.weights, "decoder_positions")
    firsts = Counter(reply[0] for reply in replies)
    total_stat, total_df = 0.0, 0
    for first, count in firsts.items():
        if count < 100:
            continue
        reference.reset()
        reference.step(prompt)
        q = token_probs(reference.step([first]), 0.5, 0.8)
        want = {int(t): float(q[t]) for t in np.flatnonzero(q)}
        seconds = Counter(reply[1] for reply in replies if reply[0] == first)
        stat, df = chi_square(seconds, want, count)
        total_stat, total_df = total_stat + stat, total_df + df
    assert total_df >= 4 and total_stat < critical(total_df), (total_stat, total_df)


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with http_client(server, timeout=120) as client:
        yield client


def test_stop_strings_logprobs_and_lengths_are_a_plain_runs(http: httpx.Client) -> None:
    body = {"model": LOOKUP, "prompt": PROMPTS[2], "temperature": 0, "max_tokens": 30, "logprobs": 2,
            "return_token_ids": True, "ignore_eos": True}  # fmt: skip
    plain = http.post("/v1/completions", json={**body, "speculative": False}).json()["choices"][0]
    text = plain["text"]
    for extra in ({}, {"stop": text[len(text) // 2 : len(text) // 2 + 3]}, {"max_tokens": 7}):
        want = http.post("/v1/completions", json={**body, "speculative": False, **extra}).json()["choices"][0]
        got = http.post("/v1/completions", json={**body, **extra}).json()["choices"][0]
        assert got["text"] == want["text"] and got["token_ids"] == want["token_ids"]
        assert got["finish_reason"] == want["finish_reason"]
        assert got["logprobs"]["tokens"] == want["logprobs"]["tokens"]
        np.testing.assert_allclose(got["logprobs"]["token_logprobs"], want["logprobs"]["token_logprobs"], atol=1e-5)
    metrics = http.get("/metrics").text
    assert f'loam_speculative_accepted_tokens_total{{model="{LOOKUP}"}}' in metrics
    bad = http.post("/v1/completions", json={**body, "speculative": "yes"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "speculative"
