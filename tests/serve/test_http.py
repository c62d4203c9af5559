"""The HTTP API against a real server on 127.0.0.1: OpenAI's routes through plain HTTP and the `openai` client,
Server-Sent Events, errors that name the field, disconnects, registration, health and Prometheus metrics."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest

from loam.serve.cli import Listener
from loam.serve.server import Server
from loam.serve.text import TextWorker
from tests.serve.serving import PACKAGES, generate, serving

pytestmark = pytest.mark.xdist_group("serve-http")
TEXT = "tiny-gpt2"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory, PACKAGES / "tiny_gpt2", PACKAGES / "tiny_bert") as server:
        server.package_roots = (PACKAGES.resolve(),)
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
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def events(response: httpx.Response) -> list[str]:
    """The `data:` payloads of a Server-Sent Events body, in order."""
    return [line.removeprefix("data: ") for line in response.text.split("\n\n") if line.startswith("data: ")]


def test_models_and_health_list_the_registered_packages(http: httpx.Client) -> None:
    models = http.get("/v1/models").json()
    assert models["object"] == "list"
    assert {m["id"]: m["role"] for m in models["data"]} == {"tiny-gpt2": "text", "tiny-bert": "embedding"}
    assert http.get("/v1/models/tiny-gpt2").json()["context_tokens"] == 128
    assert http.get("/health").json() == {"status": "ok", "models": ["tiny-bert", "tiny-gpt2"]}


def test_a_completion_returns_the_engines_greedy_tokens_and_usage(http: httpx.Client, server: Server) -> None:
    worker = server.models[TEXT].worker
    assert isinstance(worker, TextWorker)
    body = {"model": TEXT, "prompt": [5, 6, 7, 8], "max_tokens": 6, "temperature": 0, "return_token_ids": True}
    reply = http.post("/v1/completions", json=body)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["object"] == "text_completion" and data["id"].startswith("cmpl-")
    choice = data["choices"][0]
    assert choice["token_ids"] == generate(worker, [5, 6, 7, 8], 6)
    tokenizer = server.models[TEXT].package.tokenizer
    assert choice["text"] == tokenizer.decode(choice["token_ids"], skip_special_tokens=True)  # type: ignore[attr-defined]
    assert data["usage"]["prompt_tokens"] == 4 and data["usage"]["completion_tokens"] == 6
    assert choice["finish_reason"] == "length"


def test_streaming_sends_the_same_text_as_chunks_ending_in_done_with_usage(http: httpx.Client) -> None:
    body = {"model": TEXT, "prompt": "Beautiful is better than", "max_tokens": 10, "temperature": 0}
    whole = http.post("/v1/completions", json=body).json()
    reply = http.post("/v1/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
    payloads = events(reply)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["id"] == chunks[0]["id"] for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == whole["choices"][0]["text"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]


def test_chat_completions_render_the_template_and_stream_deltas(http: httpx.Client, server: Server) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Errors should never pass."}]
    body = {"model": TEXT, "messages": messages, "max_tokens": 8, "temperature": 0, "return_token_ids": True}
    whole = http.post("/v1/chat/completions", json=body).json()
    tokenizer = server.models[TEXT].package.tokenizer
    expected_prompt = tokenizer.encode_chat(messages)  # type: ignore[attr-defined]
    assert whole["choices"][0]["prompt_token_ids"] == expected_prompt
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["role"] == "assistant"
    chunks = [json.loads(p) for p in events(http.post("/v1/chat/completions", json={**body, "stream": True}))[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["object"] == "chat.completion.chunk"


def test_the_openai_client_works_streaming_and_not(client: openai.OpenAI) -> None:
    assert {m.id for m in client.models.list()} == {"tiny-gpt2", "tiny-bert"}
    completion = client.completions.create(model=TEXT, prompt="Simple is", max_tokens=5, temperature=0)
    streamed = client.completions.create(model=TEXT, prompt="Simple is", max_tokens=5, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == completion.choices[0].text
    chat = client.chat.completions.create(
        model=TEXT, messages=[{"role": "user", "content": "Flat is better"}], max_tokens=5, temperature=0
    )
    stream = client.chat.completions.create(
        model=TEXT, messages=[{"role": "user", "content": "Flat is better"}], max_tokens=5, temperature=0,
        stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    pieces, usage = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
        usage = chunk.usage or usage
    assert "".join(pieces) == chat.choices[0].message.content
    assert usage is not None and usage.completion_tokens == chat.usage.completion_tokens == 5  # type: ignore[union-attr]
    embedding = client.embeddings.create(model="tiny-bert", input=[[1, 2, 3], [4, 5]])
    assert [len(d.embedding) for d in embedding.data] == [64, 64]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x")


@pytest.mark.parametrize(
    ("body", "status", "param", "words"),
    [
        (b"{not json", 400, None, "not valid JSON"),
        (b"\xff\xfe{}", 400, None, "not UTF-8"),
        (b"[1, 2]", 400, None, "JSON object"),
        (json.dumps({"model": "nope", "prompt": "x"}).encode(), 404, "model", "does not exist"),
        (json.dumps({"model": TEXT}).encode(), 400, "prompt", "required"),
        (json.dumps({"model": TEXT, "prompt": "x", "max_tokens": -3}).encode(), 400, "max_tokens", "at least 1"),
        (json.dumps({"model": TEXT, "prompt": "x", "temperature": 7}).encode(), 400, "temperature", "[0.0, 2.0]"),
        (json.dumps({"model": TEXT, "prompt": "x", "n": 2}).encode(), 400, "n", "not supported"),
        (json.dumps({"model": TEXT, "prompt": [1, 5000]}).encode(), 400, "prompt", "vocabulary"),
        (json.dumps({"model": TEXT, "prompt": list(range(1, 200))}).encode(), 400, "prompt", "at most 127"),
        (
            json.dumps({"model": TEXT, "prompt": "x", "tokenizer_flags": 2}).encode(),
            400,
            "tokenizer_flags",
            "unknown bits",
        ),
        (json.dumps({"model": "tiny-bert", "prompt": "x"}).encode(), 400, "model", "embedding model"),
        (json.dumps({"model": TEXT, "prompt": "x", "stream": "yes"}).encode(), 400, "stream", "true or false"),
    ],
)
def test_bad_requests_get_a_4xx_json_error_naming_the_field(
    http: httpx.Client, body: bytes, status: int, param: str | None, words: str
) -> None:
    reply = http.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and words in error["message"], error
    assert "Traceback" not in reply.text


def test_bad_chat_and_embedding_fields_are_named(http: httpx.Client) -> None:
    reply = http.post("/v1/chat/completions", json={"model": TEXT, "messages": [{"role": "user", "content": 5}]})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "messages[0].content"
    reply = http.post("/v1/embeddings", json={"model": "tiny-bert", "input": [[1, 2], "text"]})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "input[1]"  # no tokenizer for text
    reply = http.post("/v1/embeddings", json={"model": "tiny-bert", "input": [list(range(1, 200))]})
    assert reply.status_code == 400 and "at most 128" in reply.json()["error"]["message"]


def test_a_client_that_disconnects_mid_stream_cancels_its_request(url: str, server: Server, http: httpx.Client) -> None:
    worker = server.models[TEXT].worker
    assert isinstance(worker, TextWorker)
    before = worker.cohorts
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"model": TEXT, "prompt": [9, 9, 9], "max_tokens": 120, "temperature": 0, "stream": True})
    with socket.create_connection((host, int(port))) as raw:
        raw.sendall(
            f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        assert b"200 OK" in raw.recv(4096)
    # The request stops at a cohort boundary soon after: far fewer than 120 steps ran.
    deadline = time.monotonic() + 20
    while (worker.waiting or worker.pool.stats()["used"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not worker.waiting and worker.pool.stats()["used"] == 0
    assert worker.cohorts - before < 100
    assert http.post("/v1/completions", json={"model": TEXT, "prompt": [9], "max_tokens": 2}).status_code == 200


def test_register_and_unregister_over_http(http: httpx.Client, server: Server) -> None:
    folder = str((PACKAGES / "reversed").resolve())
    reply = http.post("/v1/packages", json={"path": folder})
    assert reply.status_code == 201, reply.text
    assert reply.json()["id"] == "tiny-bert-reversed"
    assert http.post("/v1/packages", json={"path": folder}).status_code == 409  # already registered
    vectors = http.post("/v1/embeddings", json={"model": "tiny-bert-reversed", "input": [[3, 4, 5]]}).json()
    assert len(vectors["data"][0]["embedding"]) == 64
    assert http.delete("/v1/packages/tiny-bert-reversed").json()["deleted"] is True
    assert http.post("/v1/embeddings", json={"model": "tiny-bert-reversed", "input": [[3]]}).status_code == 404
    reply = http.post("/v1/packages", json={"path": folder})  # registered again, it serves again
    assert reply.status_code == 201
    again = http.post("/v1/embeddings", json={"model": "tiny-bert-reversed", "input": [[3, 4, 5]]}).json()
    assert again["data"] == vectors["data"]
    http.delete("/v1/packages/tiny-bert-reversed")
    outside = http.post("/v1/packages", json={"path": "/etc"})
    assert outside.status_code == 403 and outside.json()["error"]["param"] == "path"


def test_metrics_count_tokens_cohorts_and_first_token_times(http: httpx.Client) -> None:
    http.post("/v1/completions", json={"model": TEXT, "prompt": [1, 2, 3], "max_tokens": 3})
    text = http.get("/metrics").text
    samples = {}
    for line in text.splitlines():
        if line.startswith("loam_") and 'model="tiny-gpt2"' in line:
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    assert samples['loam_generation_tokens_total{model="tiny-gpt2"}'] >= 3
    assert samples['loam_prompt_tokens_total{model="tiny-gpt2"}'] >= 3
    assert samples['loam_time_to_first_token_seconds_count{model="tiny-gpt2"}'] >= 1
    assert samples['loam_cohort_size_count{model="tiny-gpt2"}'] >= 1
    assert 'loam_queue_depth{model="tiny-gpt2"}' in samples


def test_embeddings_in_float_and_base64_agree(http: httpx.Client) -> None:
    body = {"model": "tiny-bert", "input": [[1, 2, 3, 4], [5, 6]]}
    floats = http.post("/v1/embeddings", json=body).json()
    packed = http.post("/v1/embeddings", json={**body, "encoding_format": "base64"}).json()
    import base64

    for f, b in zip(floats["data"], packed["data"], strict=True):
        decoded = np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4")
        assert np.array_equal(decoded, np.asarray(f["embedding"], np.float32))
    assert floats["usage"] == {"prompt_tokens": 6, "total_tokens": 6}


def test_sessions_over_http_append_fork_and_rewind_like_a_full_replay(http: httpx.Client) -> None:
    def complete(prompt: list[int], session: str | None = None) -> list[int]:
        body = {"model": TEXT, "prompt": prompt, "max_tokens": 4, "temperature": 0, "return_token_ids": True}
        reply = http.post("/v1/completions", json={**body, **({"session": session} if session else {})})
        assert reply.status_code == 200, reply.text
        return reply.json()["choices"][0]["token_ids"]

    created = http.post("/v1/sessions", json={"model": TEXT})
    assert created.status_code == 201
    session = created.json()["id"]
    first = complete([11, 12, 13], session)
    assert http.get(f"/v1/sessions/{session}").json()["token_ids"] == [11, 12, 13, *first]
    twin = http.post(f"/v1/sessions/{session}/fork").json()["id"]
    assert complete([21, 22], session) == complete([11, 12, 13, *first, 21, 22])
    assert complete([31], twin) == complete([11, 12, 13, *first, 31])
    assert http.post(f"/v1/sessions/{session}/rewind", json={"tokens": 4}).json()["tokens"] == 4
    assert complete([41], session) == complete([11, 12, 13, first[0], 41])
    bad = http.post(f"/v1/sessions/{session}/rewind", json={"tokens": 999})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    for name in (session, twin):
        assert http.delete(f"/v1/sessions/{name}").json()["deleted"] is True
    assert http.get(f"/v1/sessions/{session}").status_code == 404
    missing = http.post("/v1/completions", json={"model": TEXT, "prompt": [1], "session": session})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "session"


def test_a_stop_string_ends_the_reply_before_it_streaming_and_not(http: httpx.Client) -> None:
    body = {"model": TEXT, "prompt": [40, 41, 42], "max_tokens": 24, "temperature": 0}
    text = http.post("/v1/completions", json=body).json()["choices"][0]["text"]
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert len(stop) == 2, text
    cut = text[: text.find(stop)]
    stopped = http.post("/v1/completions", json={**body, "stop": [stop]}).json()["choices"][0]
    assert stopped["text"] == cut and stopped["finish_reason"] == "stop"
    chunks = [
        json.loads(p) for p in events(http.post("/v1/completions", json={**body, "stop": stop, "stream": True}))[:-1]
    ]
    assert "".join(c["choices"][0]["text"] for c in chunks) == cut
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
