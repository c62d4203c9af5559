"""Faults against a real server on 127.0.0.1: what fails when a cohort's work raises, and what goes on.

Two faults: the decoder raising for a row (tests/serve/packages/faulty: its control's decoder raises for any row at
position 40 or later), where the cohort runs again member by member so only the request at fault fails; and the
worker raising in the middle of collecting a cohort, after the decoder call (as a sampler given NaN logits would),
where the cohort's members fail and the requests outside it run in the next cohort.  Either way the failures are
JSON errors (a 500 body, or an SSE error event once a stream has started), the blocks of the failed requests go
back to the pool and the worker thread keeps serving.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from loam.serve.cli import Listener
from loam.serve.server import Server
from loam.serve.text import TextRequest, TextWorker
from tests.serve.serving import PACKAGES, finish, generate, package_copy, serving, submit

pytestmark = pytest.mark.xdist_group("serve-faults")
FAULTY = "tiny-gpt2-faulty"
FAULT_AT = 40  # tests/serve/packages/faulty/control.py


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory, PACKAGES / "faulty") as server:
        yield server


@pytest.fixture(scope="module")
def url(server: Server) -> Iterator[str]:
    with Listener(server) as listener:
        yield listener.url


@pytest.fixture
def worker(server: Server) -> TextWorker:
    worker = server.models[FAULTY].worker
    assert isinstance(worker, TextWorker)
    return worker


def sse(text: str) -> list[str]:
    """The `data:` payloads of a Server-Sent Events body, in order."""
    return [line.removeprefix("data: ") for line in text.split("\n\n") if line.startswith("data: ")]


def metric(url: str, name: str, model: str = FAULTY, **labels: str) -> float:
    """The sample `name` of /metrics for `model` with `labels` (0 when absent)."""
    wanted = [f'model="{model}"', *(f'{key}="{value}"' for key, value in labels.items())]
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(f"{name}{{") and all(w in line for w in wanted):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def stream_ids(url: str, model: str, prompt: list[int], max_tokens: int) -> list[int]:
    """The greedy token ids of a streamed completion (which must end well)."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "return_token_ids": True}  # fmt: skip
    payloads = sse(httpx.post(f"{url}/v1/completions", json=body, timeout=60).text)
    assert payloads[-1] == "[DONE]", payloads[-2:]
    return json.loads(payloads[-2])["choices"][0]["token_ids"]


def settled(worker: TextWorker, timeout: float = 10.0) -> bool:
    """Wait until the worker holds no request and no block."""
    deadline = time.monotonic() + timeout
    while worker.waiting or worker.pool.stats()["used"]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def concurrently(calls: list[Callable[[], Any]], started: Callable[[], None] = lambda: None) -> list[Any]:
    """Run each call on a thread of its own, all at once (then `started()`); their results (or exceptions) in
    order."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as err:  # the caller asserts on it
            results[i] = err

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    started()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a request hung"
    return results


def test_a_decoder_that_raises_for_one_row_fails_only_that_request(
    url: str, worker: TextWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(0)
    doomed = [int(t) for t in rng.integers(3, 1000, 30)]  # 30 + 30 tokens: crosses position 40 at its 11th token
    innocent = [[int(t) for t in rng.integers(3, 1000, 3)] for _ in range(2)]  # 3 + 30 tokens: stays below 40
    expected = [generate(worker, p, 30) for p in innocent]
    calls: list[int] = []
    stage = worker.stage.stage
    faulty, faulty_in_place = stage.forward, stage.forward_in_place

    def counted(*inputs: object) -> tuple[object, ...]:
        try:
            return faulty(*inputs)
        except RuntimeError:
            calls.append(len(np.asarray(inputs[0])))  # the rows of the call that raised
            raise

    def counted_in_place(state: object, *inputs: object) -> tuple[object, ...]:
        try:
            return faulty_in_place(state, *inputs)
        except RuntimeError:
            calls.append(len(np.asarray(inputs[0])))
            raise

    monkeypatch.setattr(stage, "forward", counted)
    monkeypatch.setattr(stage, "forward_in_place", counted_in_place)
    errors_before = metric(url, "loam_requests_total", outcome="error")
    body = {"model": FAULTY, "max_tokens": 30, "temperature": 0, "ignore_eos": True, "return_token_ids": True}

    def plain(prompt: list[int]) -> httpx.Response:
        return httpx.post(f"{url}/v1/completions", json={**body, "prompt": prompt}, timeout=60)

    def streamed(prompt: list[int]) -> httpx.Response:
        return httpx.post(f"{url}/v1/completions", json={**body, "prompt": prompt, "stream": True}, timeout=60)

    def arrived() -> None:  # the worker steps under its lock: all four requests arrive before any of them runs
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                with worker._wake:  # the worker moves its inbox to `waiting` under this lock
                    if len(worker._inbox) + len(worker.waiting) >= 4:
                        break
                time.sleep(0.01)
        finally:
            worker.lock.release()

    worker.lock.acquire()
    got = concurrently([lambda: plain(doomed), lambda: streamed(doomed), lambda: plain(innocent[0]),
                        lambda: streamed(innocent[1])], arrived)  # fmt: skip
    whole, stream, ok, ok_stream = got
    # Not streaming: a 500 with OpenAI's error object.
    assert whole.status_code == 500, whole.text
    error = whole.json()["error"]
    assert "injected fault" in error["message"] and error["code"] == 500 and error["type"] == "internal_error"
    # Streaming: the reply had begun (a 200 and tokens below position 40), then an SSE error event, then [DONE].
    assert stream.status_code == 200
    payloads = sse(stream.text)
    assert payloads[-1] == "[DONE]"
    failed = json.loads(payloads[-2])["error"]
    assert "injected fault" in failed["message"] and failed["code"] == 500 and failed["type"] == "internal_error"
    assert all("error" not in json.loads(p) for p in payloads[:-2]) and len(payloads) > 3
    # The requests that shared its cohorts got their isolated tokens.
    assert ok.status_code == 200 and ok.json()["choices"][0]["token_ids"] == expected[0]
    chunks = [json.loads(p) for p in sse(ok_stream.text)[:-1]]
    assert chunks[-1]["choices"][0]["token_ids"] == expected[1] and chunks[-1]["choices"][0]["finish_reason"]
    assert max(calls) == 4, calls  # the call that raised carried the innocent rows too
    assert settled(worker) and worker._thread.is_alive()
    assert metric(url, "loam_kv_blocks_used") == 0
    assert generate(worker, innocent[0], 30) == expected[0]  # the next cohort runs
    assert metric(url, "loam_requests_total", outcome="error") == errors_before + 2


def test_the_openai_client_sees_the_fault_as_an_api_error(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
    prompt = list(range(100, 130))
    args: dict[str, Any] = {"model": FAULTY, "prompt": prompt, "max_tokens": 30, "temperature": 0,
                            "extra_body": {"ignore_eos": True}}  # fmt: skip
    with pytest.raises(openai.InternalServerError, match="injected fault"):
        client.completions.create(**args)
    pieces = []
    with pytest.raises(openai.APIError, match="injected fault"):
        for chunk in client.completions.create(**args, stream=True):
            pieces.append(chunk.choices[0].text)
    assert pieces  # the tokens before position 40 arrived first
    reply = client.completions.create(**{**args, "prompt": prompt[:5], "max_tokens": 5})
    assert reply.choices[0].finish_reason == "length"


def test_a_worker_that_raises_mid_cohort_fails_that_cohort_and_the_next_one_runs(
    url: str, worker: TextWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(1)
    prompts = [[int(t) for t in rng.integers(3, 1000, 3)] for _ in range(6)]
    doom = prompts[0]
    expected = [generate(worker, p, 20) for p in prompts]
    advance = worker._advance

    def faulty(request: TextRequest, logits: np.ndarray) -> None:
        if request.prompt == doom and len(request.generated) == 4:
            raise RuntimeError("injected fault while collecting a cohort")
        advance(request, logits)

    monkeypatch.setattr(worker, "_advance", faulty)
    # resident_requests is 4: the doomed request and the next three share its cohorts; the last two wait for rows.
    # All six are submitted before the worker's next step (it steps under its lock), so the doomed one's fifth step
    # carries the three others whatever the threads' timing.
    with worker.lock:
        pending = [submit(worker, p, 20) for p in prompts]
    ends = [finish(drain, timeout=60) for _, drain in pending]
    for end in ends[:4]:
        assert end.kind == "error" and end.status == 500 and "injected fault" in end.text, end
    assert [list(end.value) for end in ends[4:]] == expected[4:]  # type: ignore[arg-type]
    assert settled(worker) and worker._thread.is_alive()
    assert [generate(worker, p, 20) for p in prompts[1:4]] == expected[1:4]  # and the failed ones' rows serve again
    # Over HTTP: a JSON 500, or an SSE error event after the tokens already sent.
    body = {"model": FAULTY, "prompt": doom, "max_tokens": 20, "temperature": 0, "ignore_eos": True}
    whole = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert whole.status_code == 500 and whole.json()["error"]["code"] == 500
    payloads = sse(httpx.post(f"{url}/v1/completions", json={**body, "stream": True}, timeout=60).text)
    assert payloads[-1] == "[DONE]" and json.loads(payloads[-2])["error"]["code"] == 500
    assert settled(worker)
    assert metric(url, "loam_kv_blocks_used") == 0


def test_a_client_that_stops_reading_holds_no_one_else_back(tmp_path_factory: pytest.TempPathFactory) -> None:
    # output_bytes 64: a request whose reader is 64 bytes of text behind waits for it.  On loopback the kernel's send
    # buffer grows to megabytes, far more than the tiny model's replies; a real network fills sooner, so the test
    # pins the server's send buffer (the listening socket's, which accepted sockets inherit) at a few kilobytes.
    folder = package_copy(tmp_path_factory, "tiny_gpt2", capacities={"output_bytes": 64, "resident_requests": 12})
    with serving(tmp_path_factory, folder) as server, Listener(server) as listener:
        worker = server.models["tiny-gpt2"].worker
        assert isinstance(worker, TextWorker)
        listener.http.servers[0].sockets[0].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        others = [[int(t) for t in np.random.default_rng(i).integers(3, 1000, 5)] for i in range(6)]
        expected = [generate(worker, p, 40) for p in others]
        host, port = listener.url.removeprefix("http://").split(":")
        stalled_prompts = [[7, 7, 7 + i] for i in range(6)]  # six replies of 120 tokens in one stream: ~150 kB of SSE
        body = json.dumps({"model": "tiny-gpt2", "prompt": stalled_prompts, "max_tokens": 120, "temperature": 0,
                           "ignore_eos": True, "stream": True})  # fmt: skip
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        try:
            reader.connect((host, int(port)))
            reader.sendall(
                f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
            )  # and never a recv()
            deadline = time.monotonic() + 20
            while True:
                with worker.lock:
                    stalled = [r for r in worker.waiting if worker.stalled(r)]
                if len(stalled) == len(stalled_prompts) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert len(stalled) == len(stalled_prompts), [(r.unread, len(r.generated)) for r in worker.waiting]
            steps = [len(r.generated) for r in stalled]  # type: ignore[attr-defined]
            assert max(steps) < 120
            cancelled = metric(listener.url, "loam_requests_total", "tiny-gpt2", outcome="cancelled")
            # While it stalls, six other clients stream and complete, each with its isolated reply.
            start = time.monotonic()
            replies = concurrently([lambda p=p: stream_ids(listener.url, "tiny-gpt2", p, 40) for p in others])
            assert replies == expected and time.monotonic() - start < 15
            assert [len(r.generated) for r in stalled] == steps  # type: ignore[attr-defined]  # it did not move
            assert not any(r.finished for r in stalled)
        finally:
            reader.close()  # the connection closes: its requests are cancelled and collected
        assert settled(worker)
        assert all(r.retired for r in stalled)  # type: ignore[attr-defined]
        assert metric(listener.url, "loam_kv_blocks_used", "tiny-gpt2") == 0
        assert metric(listener.url, "loam_requests_total", "tiny-gpt2", outcome="cancelled") == cancelled + 6
