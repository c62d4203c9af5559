"""SmolLM2-135M-Instruct served with a prompt lookup: greedy replies with speculation equal plain ones, alone and in
one cohort beside plain requests, on prose and on code whose prompt repeats a snippet (where most guesses are
accepted); the KV pool holds nothing once they end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from loam.serve.sampling import SamplingParams
from loam.serve.scheduler import Request
from loam.serve.server import Server
from loam.serve.text import TextRequest, TextWorker
from tests.serve.serving import MODELS, serving
from tests.smollm2_file import smollm2_gguf

pytestmark = pytest.mark.xdist_group("smollm2")  # the SmolLM2 tests share one worker's memory and time
NAME = "smollm2-lookup"
CODE = """def area(width, height):
    return width * height


def perimeter(width, height):
    return 2 * (width + height)


"""
PROMPTS = [
    "The capital of France is",
    CODE + CODE + "def area(",  # the snippet again: its continuation is in the prompt
    "Write a haiku about the sea.",
]


def lookup_package(folder: Path, gguf: Path) -> Path:
    table = {
        "name": NAME,
        "role": "text",
        "sources": {"gguf": str(gguf)},
        "stages": {"decoder": {"graph": str(MODELS / "smollm2" / "decoder_positions.onnxtext"), "source": "gguf",
                               "options": {"architecture": "llama"}, "packed": False}},
        "tokenizer": {"source": "gguf"},
        "capacities": {"batch_units": 256, "resident_requests": 8, "context_tokens": 512, "block_tokens": 16},
        "speculative": {"proposer": "prompt_lookup", "tokens": 6, "ngram": 3},
    }  # fmt: skip
    (folder / "model.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = lookup_package(tmp_path_factory.mktemp("smollm2-lookup"), smollm2_gguf())
    with serving(tmp_path_factory, folder) as server:
        yield server


def send(worker: TextWorker, prompt: list[int], speculative: bool) -> object:
    sink, drain = Request.collector()
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    worker.submit(TextRequest(sink=sink, prompt=prompt, params=params, speculative=speculative))
    return drain


def reply(drain: object) -> list[int]:
    end = list(drain(600))[-1]  # type: ignore[operator]
    assert end.kind == "done", end.text
    return list(end.value)


def test_greedy_replies_with_a_prompt_lookup_are_plain_replies(server: Server) -> None:
    worker = server.models[NAME].worker
    assert isinstance(worker, TextWorker) and worker.state.tokenizer is not None
    prompts = [worker.state.tokenizer.encode(p) for p in PROMPTS]
    plain = [reply(send(worker, p, speculative=False)) for p in prompts]
    registry = server.metrics.registry

    def accepted() -> float:
        return registry.get_sample_value("loam_speculative_accepted_tokens_total", {"model": NAME}) or 0.0

    before, cohorts = accepted(), worker.cohorts
    assert reply(send(worker, prompts[1], speculative=True)) == plain[1]
    assert accepted() - before >= 12  # the repeated snippet is read ahead
    assert worker.cohorts - cohorts < 12  # 24 tokens in fewer than half as many decoder calls
    drains = [send(worker, p, speculative=s) for p in prompts for s in (True, False)]
    assert [reply(d) for d in drains] == [t for t in plain for _ in (0, 1)]
    assert worker.pool.stats()["used"] == 0
