"""SmolLM2-135M-Instruct served from its GGUF file: greedy tokens under any cohort equal isolated runs and
onnxruntime's oracle, and 16 concurrent streaming chat requests each get their isolated reply.

The isolated reference is `loam.text.generate.Decoder` running the same module one request at a time (no padding,
no block pool); the oracle is onnxruntime's greedy tokens committed in tests/models/smollm2/oracle.json.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from loam.serve.cli import Listener
from loam.serve.server import Server
from loam.serve.text import TextWorker
from loam.text.generate import Decoder
from tests.serve.serving import MODELS, finish, serving, submit
from tests.smollm2_file import smollm2_gguf

pytestmark = pytest.mark.xdist_group("smollm2")  # the SmolLM2 tests share one worker's memory and time
ORACLE = json.loads((MODELS / "smollm2" / "oracle.json").read_text(encoding="utf-8"))
NAME = "smollm2"


def smollm2_package(folder: Path, gguf: Path) -> Path:
    """A package folder serving SmolLM2 from `gguf` (its tokenizer and chat template from the same file)."""
    table = {
        "name": NAME,
        "role": "text",
        "sources": {"gguf": str(gguf)},
        "stages": {"decoder": {"graph": str(MODELS / "smollm2" / "decoder_positions.onnxtext"), "source": "gguf",
                               "options": {"architecture": "llama"}, "packed": False}},
        "tokenizer": {"source": "gguf"},
        "capacities": {"batch_units": 512, "resident_requests": 16, "context_tokens": 1024, "block_tokens": 16},
    }  # fmt: skip
    (folder / "model.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = smollm2_package(tmp_path_factory.mktemp("smollm2"), smollm2_gguf())
    with serving(tmp_path_factory, folder) as server:
        yield server


@pytest.fixture(scope="module")
def worker(server: Server) -> TextWorker:
    worker = server.models[NAME].worker
    assert isinstance(worker, TextWorker)
    return worker


@pytest.fixture(scope="module")
def reference(worker: TextWorker) -> Decoder:
    stage = worker.stage.stage
    return Decoder(stage.module, stage.weights, "decoder_positions")


def alone(reference: Decoder, prompt: list[int], count: int) -> list[int]:
    reference.reset()
    logits = reference.step(prompt)
    tokens = [int(np.argmax(logits))]
    while len(tokens) < count:
        tokens.append(int(np.argmax(reference.step([tokens[-1]]))))
    return tokens


def test_oracle_prompts_in_one_cohort_pick_onnxruntimes_tokens(worker: TextWorker) -> None:
    pending = [submit(worker, p["prompt_ids"], len(p["onnxruntime_ids"]), ignore_eos=True) for p in ORACLE["prompts"]]
    for prompt, (_, drain) in zip(ORACLE["prompts"], pending, strict=True):
        end = finish(drain)
        assert end.kind == "done", end.text
        assert list(end.value) == prompt["onnxruntime_ids"], prompt["name"]  # type: ignore[arg-type]
    assert worker.widest >= 2


def test_sixteen_concurrent_streaming_chats_each_get_their_isolated_reply(
    server: Server, worker: TextWorker, reference: Decoder
) -> None:
    tokenizer = server.models[NAME].package.tokenizer
    countries = ["France", "Germany", "Italy", "Spain", "Japan", "Canada", "Egypt", "Peru",
                 "Kenya", "Norway", "Chile", "India", "Greece", "Poland", "Cuba", "Nepal"]  # fmt: skip
    questions = [f"What is the capital of {c}?" for c in countries]
    count = 12
    expected = [alone(reference, tokenizer.encode_chat([{"role": "user", "content": q}]), count) for q in questions]  # type: ignore[attr-defined]
    results: dict[int, tuple[str, list[int]]] = {}
    with Listener(server) as listener:

        def chat(i: int) -> None:
            body = {"model": NAME, "messages": [{"role": "user", "content": questions[i]}], "max_tokens": count,
                    "temperature": 0, "stream": True, "return_token_ids": True, "ignore_eos": True}  # fmt: skip
            text, ids = "", []
            with httpx.stream("POST", f"{listener.url}/v1/chat/completions", json=body, timeout=300) as reply:
                for line in reply.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    choice = json.loads(line[6:])["choices"][0]
                    text += choice["delta"].get("content", "")
                    ids = choice.get("token_ids", ids)
            results[i] = (text, ids)

        threads = [threading.Thread(target=chat, args=(i,)) for i in range(len(questions))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
    for i, want in enumerate(expected):
        text, ids = results[i]
        assert ids == want, questions[i]
        assert text == tokenizer.decode(want, skip_special_tokens=True)  # type: ignore[attr-defined]
    assert "Paris" in results[0][0]
    assert worker.widest >= 8
