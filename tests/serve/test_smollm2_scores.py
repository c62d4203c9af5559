"""SmolLM2-135M-Instruct's scores of known tokens over HTTP equal onnxruntime's: the prompt's log-probabilities
(`echo` with `logprobs`, `prompt_logprobs`), the multiple-choice `choices` distribution and a decision package's
/v1/classify distribution (a yes/no question framed from the request) come from the log-softmax of onnxruntime's
logits over the same ids (`tests.smollm2_file.onnxruntime_decoder`: the committed graph over the GGUF's tensors
widened by llama.cpp's `gguf` package), alone and among other requests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from loam.serve.scoring import log_softmax
from loam.serve.server import Server
from tests.serve.serving import http_client, serving
from tests.serve.test_smollm2 import NAME, smollm2_package
from tests.smollm2_file import onnxruntime_decoder, smollm2_gguf

pytestmark = pytest.mark.xdist_group("smollm2")  # the SmolLM2 tests share one worker's memory and time
PROMPT = "The capital of France is Paris, and the capital of Italy is"
CHOICES = [" Rome", " Paris", " a small town"]
DECISION = "smollm2-yes-no"
FRAMING = "Question: {input}\nAnswer with yes or no.\nAnswer:"
TOLERANCE = 5e-3  # Loam's logits are onnxruntime's within 2e-3 (tests/models/test_smollm2.py); a log-softmax adds its
# normalizer's error, at most as large


def decision_package(folder: Path, gguf: Path) -> Path:
    """SmolLM2 as a decision package: a yes/no question framed from the request's `input`."""
    smollm2_package(folder, gguf)
    table = json.loads((folder / "model.json").read_text(encoding="utf-8"))
    table.update(name=DECISION, role="decision", framing=FRAMING, answers={"yes": " yes", "no": " no"})
    (folder / "model.json").write_text(json.dumps(table), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = smollm2_package(tmp_path_factory.mktemp("smollm2-scores"), smollm2_gguf())
    decision = decision_package(tmp_path_factory.mktemp("smollm2-decision"), smollm2_gguf())
    with serving(tmp_path_factory, folder, decision) as server:
        yield server


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with http_client(server, timeout=300) as client:
        yield client


@pytest.fixture(scope="module")
def oracle() -> ort.InferenceSession:
    return onnxruntime_decoder(smollm2_gguf())


def oracle_scores(oracle: ort.InferenceSession, ids: list[int]) -> list[float]:
    """onnxruntime's log-probability of each of `ids` after the first, given those before it."""
    feed = np.array([ids], np.int64)
    logits = oracle.run(["logits"], {"input_ids": feed, "attention_mask": np.ones_like(feed)})[0][0]
    return [float(log_softmax(logits[k])[ids[k + 1]]) for k in range(len(ids) - 1)]


def encode(server: Server, text: str) -> list[int]:
    tokenizer = server.models[NAME].package.tokenizer
    assert tokenizer is not None
    return tokenizer.encode(text, add_special_tokens=False)


def complete(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    reply = http.post("/v1/completions", json={"model": NAME, "temperature": 0, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]


def together(http: httpx.Client, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first choice of each reply to `bodies`, sent at once (the worker reads them in shared cohorts)."""
    replies: list[dict[str, Any]] = [{} for _ in bodies]

    def send(i: int) -> None:
        replies[i] = complete(http, bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return replies


def test_prompt_scores_and_choices_equal_onnxruntimes_alone_and_in_a_cohort(
    http: httpx.Client, server: Server, oracle: ort.InferenceSession
) -> None:
    prompt = encode(server, PROMPT)
    scored = {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 1, "prompt_logprobs": 0}
    choices = {"prompt": PROMPT, "choices": CHOICES}
    solo_scores, solo_choices = complete(http, scored), complete(http, choices)

    want = oracle_scores(oracle, prompt)
    assert solo_scores["text"] == PROMPT
    np.testing.assert_allclose(solo_scores["logprobs"]["token_logprobs"][1:], want, atol=TOLERANCE)
    mine = [entry[str(t)]["logprob"] for entry, t in zip(solo_scores["prompt_logprobs"][1:], prompt[1:], strict=True)]
    np.testing.assert_allclose(mine, want, atol=TOLERANCE)

    sums = []
    for text in CHOICES:
        continuation = encode(server, text)
        sums.append(sum(oracle_scores(oracle, [*prompt, *continuation])[len(prompt) - 1 :]))
    scores = solo_choices["choice_scores"]
    np.testing.assert_allclose([s["logprob"] for s in scores], sums, atol=TOLERANCE * 3)
    weights = np.exp(np.array(sums) - max(sums))
    np.testing.assert_allclose([s["probability"] for s in scores], weights / weights.sum(), atol=TOLERANCE)
    assert solo_choices["text"] == " Rome" == CHOICES[int(np.argmax(sums))]

    # The same requests beside others (a generation, a longer prompt) give the same numbers.
    others = [{"prompt": "Once upon a time", "max_tokens": 4}, {"prompt": PROMPT + " Rome. The", "max_tokens": 2}]
    crowded = together(http, [scored, choices, *others])
    np.testing.assert_allclose(
        crowded[0]["logprobs"]["token_logprobs"][1:], solo_scores["logprobs"]["token_logprobs"][1:], atol=1e-4
    )
    np.testing.assert_allclose(
        [s["logprob"] for s in crowded[1]["choice_scores"]], [s["logprob"] for s in scores], atol=1e-4
    )


def test_a_yes_no_decision_is_the_softmax_of_onnxruntimes_answer_log_probabilities(
    http: httpx.Client, server: Server, oracle: ort.InferenceSession
) -> None:
    questions = ["Is Paris the capital of France?", "Is the sun cold?"]
    reply = http.post("/v1/classify", json={"model": DECISION, "input": questions})
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["labels"] == ["yes", "no"] and data["object"] == "list"
    tokenizer = server.models[DECISION].package.tokenizer
    assert tokenizer is not None
    for index, question in enumerate(questions):
        prompt = tokenizer.encode(FRAMING.format(input=question))
        sums = []
        for answer in (" yes", " no"):
            continuation = encode(server, answer)
            sums.append(sum(oracle_scores(oracle, [*prompt, *continuation])[len(prompt) - 1 :]))
        weights = np.exp(np.array(sums) - max(sums))
        item = data["data"][index]
        assert item["index"] == index and item["num_classes"] == 2 and item["object"] == "classify"
        np.testing.assert_allclose(item["probs"], weights / weights.sum(), atol=TOLERANCE)
        assert item["label"] == ["yes", "no"][int(np.argmax(sums))]
    # Zero-shot labels replace the package's answers; a request without the framing's field is refused naming it.
    zero_shot = http.post("/v1/classify", json={"model": DECISION, "input": questions[0], "labels": [" yes", " maybe"]})
    assert zero_shot.status_code == 200 and zero_shot.json()["labels"] == [" yes", " maybe"]
    missing = http.post("/v1/classify", json={"model": DECISION, "input": {"question": questions[0]}})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "input"
    assert "'input'" in missing.json()["error"]["message"]
