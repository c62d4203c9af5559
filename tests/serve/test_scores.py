"""Scores of known tokens on /v1/completions against a real server on 127.0.0.1 (the tiny GPT-2 package):
`echo`, `logprobs`, `prompt_logprobs` and multiple-choice `choices` equal the same module read one token at a
time (`loam.text.generate.Decoder`: no cohort, no padding, no block pool), alone and among other requests,
streamed and whole; a wrong field is a 400 naming it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from loam.serve.cli import Listener
from loam.serve.scoring import MAX_LOGPROBS, log_softmax
from loam.serve.server import Server
from loam.serve.text import TextWorker
from loam.text.generate import Decoder
from tests.serve.serving import PACKAGES, serving

pytestmark = pytest.mark.xdist_group("serve-scores")
TEXT = "tiny-gpt2"
PROMPT = [5, 9, 13, 22, 7, 31]
CHOICES = ["Beautiful is better", "ugly", "Simple is better than complex"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory, PACKAGES / "tiny_gpt2") as server:
        yield server


@pytest.fixture(scope="module")
def url(server: Server) -> Iterator[str]:
    with Listener(server) as listener:
        yield listener.url


@pytest.fixture(scope="module")
def http(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def worker(server: Server) -> TextWorker:
    worker = server.models[TEXT].worker
    assert isinstance(worker, TextWorker)
    return worker


@pytest.fixture(scope="module")
def reference(worker: TextWorker) -> Decoder:
    stage = worker.stage.stage
    return Decoder(stage.module, stage.weights, "decoder_positions")


def alone(reference: Decoder, ids: list[int]) -> list[np.ndarray]:
    """The log-probabilities after each of `ids`, read one token at a time."""
    reference.reset()
    return [log_softmax(reference.step([token])) for token in ids]


def complete(http: httpx.Client, **body: Any) -> dict[str, Any]:
    reply = http.post("/v1/completions", json={"model": TEXT, "temperature": 0, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


def together(http: httpx.Client, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The replies to `bodies`, sent at once (so the worker reads them in shared cohorts)."""
    replies: list[dict[str, Any]] = [{} for _ in bodies]

    def send(i: int) -> None:
        replies[i] = complete(http, **bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return replies


def test_echoed_prompt_scores_are_the_decoders_log_probabilities(http: httpx.Client, reference: Decoder) -> None:
    want = alone(reference, PROMPT)
    data = complete(http, prompt=PROMPT, max_tokens=0, echo=True, logprobs=2, prompt_logprobs=3)
    choice = data["choices"][0]
    logprobs = choice["logprobs"]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    expected = [float(want[k][PROMPT[k + 1]]) for k in range(len(PROMPT) - 1)]
    np.testing.assert_allclose(logprobs["token_logprobs"][1:], expected, atol=1e-5)
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert logprobs["text_offset"] == list(np.cumsum([0, *map(len, logprobs["tokens"][:-1])]))
    assert data["usage"]["completion_tokens"] == 0 and choice["finish_reason"] == "length"
    prompt_logprobs = choice["prompt_logprobs"]
    assert prompt_logprobs[0] is None and len(prompt_logprobs) == len(PROMPT)
    for k, entry in enumerate(prompt_logprobs[1:]):
        mine = entry[str(PROMPT[k + 1])]
        assert mine["logprob"] == pytest.approx(expected[k], abs=1e-5)
        assert mine["rank"] == 1 + int(np.count_nonzero(want[k] > want[k][PROMPT[k + 1]]))
        best = [int(t) for t in np.argsort(-want[k], kind="stable")[:3]]
        assert {int(t) for t, v in entry.items() if v["rank"] <= 3} == set(best)


def test_prompts_appended_to_a_session_score_as_a_full_replay_after_append_fork_and_rewind(
    http: httpx.Client, reference: Decoder
) -> None:
    """Known tokens on retained rows: each prompt appended to a session is scored from the session's history
    (its first token too), as the whole conversation read one token at a time scores it, after a plain
    append, after a reply the session sampled, on a fork and after a rewind."""

    def session() -> str:
        return str(http.post("/v1/sessions", json={"model": TEXT}).json()["id"])

    def append(sid: str, ids: list[int], max_tokens: int = 0) -> tuple[list[float | None], list[int]]:
        body = {"prompt": ids, "session": sid, "max_tokens": max_tokens, "prompt_logprobs": 1, "echo": True,
                "logprobs": 1, "ignore_eos": True, "return_token_ids": True}  # fmt: skip
        choice = complete(http, **body)["choices"][0]
        scores = [None if entry is None else entry[str(ids[k])]["logprob"]
                  for k, entry in enumerate(choice["prompt_logprobs"])]  # fmt: skip
        assert choice["logprobs"]["token_logprobs"][: len(ids)] == pytest.approx(scores, abs=1e-6)  # echo's too
        return scores, list(choice["token_ids"])

    def replay(history: list[int], ids: list[int]) -> list[float]:
        want = alone(reference, [*history, *ids])
        return [float(want[len(history) + k - 1][t]) for k, t in enumerate(ids)]

    first, more, other = PROMPT[:3], PROMPT[3:], [17, 4, 29]
    sid = session()
    scores, _ = append(sid, first)  # no history: the first token has nothing to be scored from
    assert scores[0] is None and scores[1:] == pytest.approx(replay(first[:1], first[1:]), abs=1e-5)
    scores, reply = append(sid, more, max_tokens=2)  # every token scored, the first from the session's history
    np.testing.assert_allclose(scores, replay(first, more), atol=1e-5)
    history = [*first, *more, *reply]
    twin = http.post(f"/v1/sessions/{sid}/fork").json()["id"]
    np.testing.assert_allclose(append(twin, other)[0], replay(history, other), atol=1e-5)  # after a sampled token
    assert http.post(f"/v1/sessions/{sid}/rewind", json={"tokens": 4}).status_code == 200
    np.testing.assert_allclose(append(sid, other)[0], replay(history[:4], other), atol=1e-5)  # after a rewind
    # The session read again its last token to score the next prompt's first: it holds what it held.
    assert http.get(f"/v1/sessions/{sid}").json()["token_ids"] == [*history[:4], *other]


def test_generated_token_scores_are_the_greedy_steps_and_a_stream_sends_the_same(
    http: httpx.Client, url: str, reference: Decoder
) -> None:
    data = complete(http, prompt=PROMPT[:3], max_tokens=4, logprobs=3, ignore_eos=True, return_token_ids=True)
    choice = data["choices"][0]
    ids = choice["token_ids"]
    want = alone(reference, [*PROMPT[:3], *ids])[2:]
    logprobs = choice["logprobs"]
    np.testing.assert_allclose(logprobs["token_logprobs"], [w[t] for w, t in zip(want, ids, strict=False)], atol=1e-5)
    assert all(len(top) >= 3 for top in logprobs["top_logprobs"])
    assert logprobs["text_offset"][0] == 0
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
    stream = client.completions.create(
        model=TEXT, prompt=PROMPT[:3], max_tokens=4, logprobs=3, temperature=0, stream=True,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    streamed: dict[str, list[Any]] = {key: [] for key in logprobs}
    for chunk in stream:
        piece = chunk.choices[0].logprobs
        for key in streamed:
            streamed[key] += (getattr(piece, key) or []) if piece is not None else []
    assert streamed["tokens"] == logprobs["tokens"] and streamed["text_offset"] == logprobs["text_offset"]
    np.testing.assert_allclose(streamed["token_logprobs"], logprobs["token_logprobs"], atol=1e-6)


def test_a_stream_echoes_the_prompt_with_its_scores_first(http: httpx.Client) -> None:
    body = {"model": TEXT, "prompt": "Beautiful is better than", "max_tokens": 3, "temperature": 0, "echo": True,
            "logprobs": 1, "prompt_logprobs": 2, "ignore_eos": True}  # fmt: skip
    whole = complete(http, **{k: v for k, v in body.items() if k != "model"})["choices"][0]
    reply = http.post("/v1/completions", json={**body, "stream": True})
    chunks = [json.loads(line[6:]) for line in reply.text.split("\n\n") if line.startswith("data: {")]
    first = chunks[0]["choices"][0]
    assert first["text"] == body["prompt"] and first["prompt_logprobs"] == whole["prompt_logprobs"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["text"]
    tokens = [t for c in chunks if c["choices"][0]["logprobs"] for t in c["choices"][0]["logprobs"]["tokens"]]
    offsets = [t for c in chunks if c["choices"][0]["logprobs"] for t in c["choices"][0]["logprobs"]["text_offset"]]
    assert tokens == whole["logprobs"]["tokens"] and offsets == whole["logprobs"]["text_offset"]


def test_choices_weigh_each_continuation_by_its_log_probability_alone_and_in_a_cohort(
    http: httpx.Client, reference: Decoder, server: Server
) -> None:
    tokenizer = server.models[TEXT].package.tokenizer
    assert tokenizer is not None
    continuations = [tokenizer.encode(c, add_special_tokens=False) for c in CHOICES]
    want = []
    for continuation in continuations:
        steps = alone(reference, [*PROMPT, *continuation])[len(PROMPT) - 1 : -1]
        want.append(sum(float(s[t]) for s, t in zip(steps, continuation, strict=True)))
    body = {"prompt": PROMPT, "choices": CHOICES}
    solo = complete(http, **body)["choices"][0]
    scores = solo["choice_scores"]
    np.testing.assert_allclose([s["logprob"] for s in scores], want, atol=1e-4)
    probabilities = np.exp(np.array(want) - max(want))
    np.testing.assert_allclose([s["probability"] for s in scores], probabilities / probabilities.sum(), atol=1e-5)
    assert solo["text"] == CHOICES[int(np.argmax(want))] and [s["text"] for s in scores] == CHOICES
    others = [{"prompt": PROMPT[:2], "max_tokens": 5}, {"prompt": PROMPT[2:], "echo": True, "logprobs": 1}]
    crowded = together(http, [body, *others, body])
    for reply in (crowded[0], crowded[-1]):
        np.testing.assert_allclose([s["logprob"] for s in reply["choices"][0]["choice_scores"]], want, atol=1e-4)


def test_prompt_scores_do_not_depend_on_the_cohort(http: httpx.Client) -> None:
    body = {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 0}
    solo = complete(http, **body)["choices"][0]["logprobs"]["token_logprobs"]
    crowded = together(http, [{"prompt": [3, 4, 5, 6, 7, 8, 9, 10, 11, 12], "max_tokens": 3}, body, body])
    for reply in crowded[1:]:
        np.testing.assert_allclose(reply["choices"][0]["logprobs"]["token_logprobs"][1:], solo[1:], atol=1e-5)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"logprobs": MAX_LOGPROBS + 1}, "logprobs"),
        ({"prompt_logprobs": -1}, "prompt_logprobs"),
        ({"echo": "yes"}, "echo"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"choices": ["one"]}, "choices"),
        ({"choices": ["a", 3]}, "choices"),
        ({"choices": ["a", "b"], "stream": True}, "choices"),
        ({"choices": ["a", "b"], "n": 2}, "choices"),
        ({"choices": ["a", "b"], "logprobs": 1}, "choices"),
    ],
)
def test_a_wrong_scoring_field_is_a_400_naming_it(http: httpx.Client, body: dict[str, Any], param: str) -> None:
    reply = http.post("/v1/completions", json={"model": TEXT, "prompt": PROMPT, **body})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


def test_chat_completions_still_refuse_logprobs(http: httpx.Client) -> None:
    body = {"model": TEXT, "messages": [{"role": "user", "content": "hi"}], "logprobs": True}
    reply = http.post("/v1/chat/completions", json=body)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "logprobs"
