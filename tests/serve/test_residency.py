"""Residency against a real server on 127.0.0.1: an idle model deactivated and reactivated answering the same
(its sessions resumed unchanged, its weights' pages given back, measured from /proc), and `--memory-limit`
refusing what it must and admitting what fits, reported in /metrics."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loam.serve.cli import Listener
from loam.serve.residency import Forecast, parse_bytes
from loam.serve.scheduler import ServeError
from loam.serve.server import Server
from tests.serve.serving import MODELS, PACKAGES, minilm_folder, package_copy

pytestmark = pytest.mark.xdist_group("serve-residency")
TEXT = "tiny-gpt2"
EMBEDDING = "tiny-bert"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One private build cache for the module's servers: each package is built once."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOAM_CACHE_DIR", str(tmp_path_factory.mktemp("serve-cache")))
        yield


@pytest.fixture(scope="module")
def forecasts(cache: None) -> dict[str, Forecast]:
    """Each committed package's forecast, from a server without a limit."""
    server = Server()
    try:
        served = [server.register(PACKAGES / "tiny_gpt2"), server.register(PACKAGES / "tiny_bert")]
        return {model.name: model.forecast for model in served}
    finally:
        server.close()


def resident(http: httpx.Client) -> dict[tuple[str, str], float]:
    """`loam_resident_bytes` by (model, kind), scraped from /metrics."""
    out = {}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("loam_resident_bytes{"):
            labels, value = line.rsplit(" ", 1)
            fields = dict(part.split("=", 1) for part in labels[len("loam_resident_bytes{") : -1].split(","))
            out[(json.loads(fields["model"]), json.loads(fields["kind"]))] = float(value)
    return out


def wait_inactive(http: httpx.Client, name: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while http.get(f"/v1/models/{name}").json()["active"]:
        assert time.monotonic() < deadline, f"{name} was not deactivated within {timeout} s"
        time.sleep(0.05)


def test_memory_limits_parse_with_suffixes() -> None:
    assert parse_bytes("1048576") == 1 << 20
    assert parse_bytes("512K") == 512 << 10
    assert parse_bytes("3m") == 3 << 20
    assert parse_bytes("2G") == 2 << 30
    assert parse_bytes("2GiB") == 2 << 30
    for bad in ("", "G", "1.5G", "-1", "12T"):
        with pytest.raises(ValueError, match="not a byte count"):
            parse_bytes(bad)


def test_an_idle_model_is_deactivated_and_resumes_its_sessions_unchanged(cache: None) -> None:
    server = Server(idle_deactivate=1.0)
    try:
        server.register(PACKAGES / "tiny_gpt2")
        with Listener(server) as listener, httpx.Client(base_url=listener.url, timeout=60) as http:

            def complete(prompt: list[int], session: str | None = None) -> list[int]:
                body = {"model": TEXT, "prompt": prompt, "max_tokens": 4, "temperature": 0, "return_token_ids": True}
                reply = http.post("/v1/completions", json={**body, **({"session": session} if session else {})})
                assert reply.status_code == 200, reply.text
                return reply.json()["choices"][0]["token_ids"]

            session = http.post("/v1/sessions", json={"model": TEXT}).json()["id"]
            first = complete([11, 12, 13], session)
            held = http.get(f"/v1/sessions/{session}").json()["token_ids"]
            assert held == [11, 12, 13, *first]
            wait_inactive(http, TEXT)
            memory = resident(http)
            assert memory[(TEXT, "weights")] == 0
            assert memory[(TEXT, "kv")] > 0  # the session's blocks stay
            assert memory[(TEXT, "workspace")] == 0
            assert http.get(f"/v1/sessions/{session}").json()["token_ids"] == held
            resumed = complete([21, 22], session)  # reactivates the model
            assert http.get(f"/v1/models/{TEXT}").json()["active"] is True
            assert resident(http)[(TEXT, "weights")] == server.models[TEXT].forecast.weights
            assert resumed == complete([*held, 21, 22])  # the same as a full replay
            wait_inactive(http, TEXT)
            assert complete([31, 32, 33]) == complete([31, 32, 33])
    finally:
        server.close()


def test_reactivation_checks_the_weights_again(cache: None, tmp_path_factory: pytest.TempPathFactory) -> None:
    checkpoint = tmp_path_factory.mktemp("weights") / "tiny_gpt2.safetensors"
    original = (MODELS / "tiny_gpt2" / "tiny_gpt2.safetensors").read_bytes()
    checkpoint.write_bytes(original)
    server = Server()
    try:
        server.register(package_copy(tmp_path_factory, "tiny_gpt2", sources={"weights": str(checkpoint)}))
        server.register(PACKAGES / "tiny_bert")
        with Listener(server) as listener, httpx.Client(base_url=listener.url, timeout=60) as http:
            body = {"model": TEXT, "prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0}
            before = http.post("/v1/completions", json=body).json()["choices"][0]["text"]
            assert server.deactivate(TEXT)
            checkpoint.write_bytes((MODELS / "tiny_bert" / "hf_model.safetensors").read_bytes())  # another model's
            refused = http.post("/v1/completions", json=body)
            assert refused.status_code == 503, refused.text
            assert "cannot be reactivated" in refused.json()["error"]["message"]
            assert str(checkpoint) in refused.json()["error"]["message"]
            assert http.post("/v1/embeddings", json={"model": EMBEDDING, "input": [[1, 2]]}).status_code == 200
            checkpoint.write_bytes(original)
            assert http.post("/v1/completions", json=body).json()["choices"][0]["text"] == before
    finally:
        server.close()


def rss() -> int:
    """This process's resident set in bytes (VmRSS of /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_deactivation_gives_the_weights_pages_back(cache: None, tmp_path: Path) -> None:
    source = minilm_folder()
    table = {
        "name": "minilm", "role": "embedding", "sources": {"weights": str(source / "model.safetensors")},
        "stages": {"encoder": {"graph": str(MODELS / "minilm" / "encoder.onnxtext"), "source": "weights",
                               "options": {"architecture": "bert"}, "pooling": "mean", "normalize": True}},
        "tokenizer": str(source / "tokenizer.json"), "capacities": {"batch_units": 256, "context_tokens": 256},
    }  # fmt: skip
    (tmp_path / "model.json").write_text(json.dumps(table), encoding="utf-8")
    server = Server()
    try:
        served = server.register(tmp_path)
        with Listener(server) as listener, httpx.Client(base_url=listener.url, timeout=60) as http:
            body = {"model": "minilm", "input": ["a model deactivated answers as it did", "twice"]}
            before = http.post("/v1/embeddings", json=body).json()["data"]
            loaded = rss()
            assert server.deactivate("minilm")
            released = rss()
            # Every weight but the rows of the word embeddings no input read has been paged in (a forward reads
            # them all); those pages must go.  The embeddings are 30522 x 384 float32 of the 90 MB.
            paged_in = served.forecast.weights - 30522 * 384 * 4
            assert loaded - released > 0.8 * paged_in, (loaded, released, paged_in)
            assert http.post("/v1/embeddings", json=body).json()["data"] == before
            assert http.get("/v1/models/minilm").json()["active"] is True
    finally:
        server.close()


def test_the_memory_limit_refuses_registration_past_it_naming_budget_and_forecast(
    cache: None, forecasts: dict[str, Forecast]
) -> None:
    text = forecasts[TEXT]
    server = Server(memory_limit=text.total - 1)
    try:
        with pytest.raises(ServeError, match=r"--memory-limit .*its forecast is .*weights") as refused:
            server.register(PACKAGES / "tiny_gpt2")
        assert refused.value.status == 507
        assert not server.models
        # Inactive, only its KV pool counts: the weights are loaded and checked, then released.
        served = server.register(PACKAGES / "tiny_gpt2", active=False)
        assert not served.active and all(stage.weights is None for stage in served.package.stages.values())
    finally:
        server.close()


def test_the_memory_limit_admits_what_fits_and_refuses_activation_past_it(
    cache: None, forecasts: dict[str, Forecast]
) -> None:
    text, embedding = forecasts[TEXT], forecasts[EMBEDDING]
    server = Server(memory_limit=text.total + embedding.total - 1, package_roots=[PACKAGES])
    try:
        server.register(PACKAGES / "tiny_gpt2")
        with Listener(server) as listener, httpx.Client(base_url=listener.url, timeout=60) as http:
            folder = str((PACKAGES / "tiny_bert").resolve())
            refused = http.post("/v1/packages", json={"path": folder})
            assert refused.status_code == 507, refused.text
            assert "--memory-limit" in refused.json()["error"]["message"]
            assert EMBEDDING not in http.get("/health").json()["models"]
            # Inactive, its weights do not count: it is admitted, and refused only when a request would activate it.
            admitted = http.post("/v1/packages", json={"path": folder, "active": False})
            assert admitted.status_code == 201 and admitted.json()["active"] is False
            body = {"model": EMBEDDING, "input": [[1, 2, 3]]}
            blocked = http.post("/v1/embeddings", json=body)
            assert blocked.status_code == 507 and "reactivating 'tiny-bert'" in blocked.json()["error"]["message"]
            text_reply = http.post("/v1/completions", json={"model": TEXT, "prompt": [1, 2], "max_tokens": 2})
            assert text_reply.status_code == 200  # the other model is undisturbed
            assert resident(http)[(TEXT, "workspace")] > 0  # the buffers a step keeps for the next
            assert server.deactivate(TEXT)
            assert http.post("/v1/embeddings", json=body).status_code == 200
            limit = [line for line in http.get("/metrics").text.splitlines() if line.startswith("loam_memory_limit")]
            assert [float(line.split()[1]) for line in limit] == [text.total + embedding.total - 1]
            assert resident(http)[(EMBEDDING, "weights")] == embedding.weights
    finally:
        server.close()


def test_a_request_that_cannot_fit_the_budget_alone_is_refused_before_any_work(
    cache: None, forecasts: dict[str, Forecast]
) -> None:
    embedding = forecasts[EMBEDDING]
    server = Server(memory_limit=embedding.total + 4096)
    try:
        served = server.register(PACKAGES / "tiny_bert")
        with Listener(server) as listener, httpx.Client(base_url=listener.url, timeout=60) as http:
            cohorts = served.worker.cohorts
            wide = {"model": EMBEDDING, "input": [[5] * 100] * 40}  # 4000 tokens held at once
            refused = http.post("/v1/embeddings", json=wide)
            assert refused.status_code == 413, refused.text
            error = refused.json()["error"]
            assert error["param"] == "input" and "--memory-limit" in error["message"] and "alone" in error["message"]
            assert served.worker.cohorts == cohorts  # nothing ran
            assert http.post("/v1/embeddings", json={"model": EMBEDDING, "input": [[5] * 100]}).status_code == 200
    finally:
        server.close()
