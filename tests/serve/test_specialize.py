"""Request-time specialization against a real server on 127.0.0.1: the light zoo's SqueezeNet (free `height` and
`width`) as a decision package whose stage is built again for each request's image size, on first use.

Each size's answers are onnxruntime's and the registered (unspecialized) build's; two requests of one size
build it once; the cache keeps `specialization_cache` sizes, evicting the least recently used; a request
cancelled while its size builds lets go only when the build ends, which then keeps nothing; a size the graph
refuses is a 400 naming the input and keeps nothing.  A build is made to last by queueing a job ahead of it
on the shared compile thread (as another model's long build would), so that what happens meanwhile is seen
deterministically: another model, and this model at a size already built, keep answering.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from loam.serve.cli import Listener
from loam.serve.decision import ClassifierWorker
from loam.serve.residency import array_bytes, weight_arrays
from loam.serve.scheduler import Request
from loam.serve.server import Server
from loam.serve.spec import PackageError
from loam.serve.specialize import SpecializationCache, compiler
from tests.serve.serving import PACKAGES, http_client, serving
from tests.serve.test_decisions import NAME, b64, classifier_package, image

pytestmark = pytest.mark.xdist_group("serve-specialize")
SPECIALIZE = {"dims": {"height": "data_0[2]", "width": "data_0[3]"}}
BERT = "tiny-bert"


def specialized_package(folder: Path, specialize: object = SPECIALIZE) -> Path:
    stage = {"graph": "model.onnx", "options": "layout.toml", "specialize": specialize}
    return classifier_package(
        folder, stages={"classifier": stage}, capacities={"resident_requests": 4, "specialization_cache": 2}
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return specialized_package(tmp_path_factory.mktemp("squeezenet-specialized"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, folder: Path) -> Iterator[Server]:
    with serving(tmp_path_factory, folder, PACKAGES / "tiny_bert") as server:
        yield server


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with http_client(server, timeout=300) as client:
        yield client


@pytest.fixture(scope="module")
def worker(server: Server) -> ClassifierWorker:
    worker = server.model(NAME, "decision").worker
    assert isinstance(worker, ClassifierWorker)
    return worker


@pytest.fixture(scope="module")
def cache(worker: ClassifierWorker) -> SpecializationCache:
    assert worker.specializations is not None
    return worker.specializations


@pytest.fixture(scope="module")
def oracle(folder: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])


def classify(http: httpx.Client, pixels: np.ndarray) -> list[float]:
    reply = http.post("/v1/classify", json={"model": NAME, "input": b64(pixels)})
    assert reply.status_code == 200, reply.text
    return list(reply.json()["data"][0]["probs"])


def metric(http: httpx.Client, name: str, labels: str = "") -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(f'{name}{{{labels}model="{NAME}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"/metrics has no {name} for {NAME}")


def key(side: int) -> tuple[str, tuple[tuple[str, int], ...]]:
    return ("classifier", (("height", side), ("width", side)))


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@contextmanager
def held_compiler() -> Iterator[threading.Event]:
    """The shared compile thread busy until the caller sets the event (set on leaving in any case)."""
    gate = threading.Event()
    compiler().submit(gate.wait, 300)
    try:
        yield gate
    finally:
        gate.set()


def test_each_size_answers_as_onnxruntime_and_the_unspecialized_build(
    http: httpx.Client, worker: ClassifierWorker, cache: SpecializationCache, oracle: ort.InferenceSession
) -> None:
    for side in (224, 200):
        pixels = image(side, side)
        want = oracle.run(None, {"data_0": pixels[None]})[0].reshape(-1).astype(np.float64)
        got = classify(http, pixels)
        np.testing.assert_allclose(got, want / want.sum(), atol=1e-5)
        unspecialized = np.asarray(worker.stage.forward(pixels[None])[0], np.float64).reshape(-1)
        np.testing.assert_allclose(got, unspecialized / unspecialized.sum(), atol=1e-6)
        assert key(side) in cache.keys()
        entry = cache.entries[key(side)]
        assert entry.stage is not None and entry.users == 0
        assert worker.stage.inputs[0][2] == (1, 3, None, None) and entry.stage.inputs[0][2] == (1, 3, side, side)


def test_requests_of_one_size_share_one_build(http: httpx.Client, cache: SpecializationCache) -> None:
    misses, builds = (
        metric(http, "loam_specialization_misses_total"),
        metric(http, "loam_specialization_compile_seconds_count"),
    )
    pixels = [image(seed, 96) for seed in range(3)]
    replies: list[list[float]] = [[] for _ in pixels]

    def send(i: int) -> None:
        replies[i] = classify(http, pixels[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(pixels))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(replies)
    assert metric(http, "loam_specialization_misses_total") == misses + 1
    assert metric(http, "loam_specialization_compile_seconds_count") == builds + 1
    assert metric(http, "loam_specialization_hits_total") >= 2
    np.testing.assert_allclose(classify(http, pixels[0]), replies[0], atol=1e-6)  # a hit: the same build


def test_the_cache_keeps_its_bound_evicting_the_least_recently_used(
    http: httpx.Client, worker: ClassifierWorker, cache: SpecializationCache
) -> None:
    with worker.lock:  # what earlier tests built, dropped as an idle model's trim drops it
        worker.trim()
    evictions = metric(http, "loam_specialization_evictions_total")
    for side in (112, 128, 112, 144):  # 112 used again after 128: 128 is the least recently used when 144 arrives
        classify(http, image(side, side))
    assert cache.keys() == [key(112), key(144)]
    assert metric(http, "loam_specialization_evictions_total") == evictions + 1
    assert metric(http, "loam_specialization_entries") == 2
    kept = array_bytes(weight_arrays(stage.weights) for stage in cache.stages())
    assert metric(http, "loam_resident_bytes", 'kind="workspace",') >= kept > 0
    with worker.lock:
        worker.trim()
    assert cache.keys() == [] and metric(http, "loam_resident_bytes", 'kind="workspace",') == 0


def test_other_models_and_built_sizes_answer_while_a_size_builds(
    http: httpx.Client, cache: SpecializationCache
) -> None:
    classify(http, image(7, 120))  # built before the compile thread is held
    pending: dict[str, Any] = {}
    with held_compiler() as gate:
        thread = threading.Thread(target=lambda: pending.update(probs=classify(http, image(8, 136))))
        thread.start()
        wait_for(lambda: key(136) in cache.keys(), "the request to start its build")
        entry = cache.entries[key(136)]
        embedded = http.post("/v1/embeddings", json={"model": BERT, "input": [[5, 6, 7]]})
        assert embedded.status_code == 200, embedded.text
        assert len(classify(http, image(9, 120))) == 1000
        assert not entry.done.is_set() and "probs" not in pending
        gate.set()
        thread.join(120)
    assert len(pending["probs"]) == 1000 and entry.stage is not None


def test_a_request_cancelled_while_its_size_builds_joins_the_build_which_keeps_nothing(
    worker: ClassifierWorker, cache: SpecializationCache
) -> None:
    sink, drain = Request.collector()
    with held_compiler() as gate:
        request = worker.prepare(image(10, 152), (0, 1), "input", sink)
        worker.submit(request)
        wait_for(lambda: key(152) in cache.keys(), "the request to start its build")
        entry = cache.entries[key(152)]
        worker.cancel(request)
        (event,) = list(drain(60))
        assert event.kind == "error" and event.status == 499
        assert not entry.done.is_set() and entry.users == 1 and entry.leaving == 1  # held until its build ends
        gate.set()
        wait_for(entry.done.is_set, "the build to end")
    assert key(152) not in cache.keys() and entry.users == 0


def test_a_client_gone_while_its_size_builds_frees_the_entry_once_the_build_ends(
    server: Server, http: httpx.Client, cache: SpecializationCache
) -> None:
    with held_compiler() as gate, Listener(server) as listener:
        with httpx.Client(base_url=listener.url, timeout=1.0) as client, pytest.raises(httpx.ReadTimeout):
            client.post("/v1/classify", json={"model": NAME, "input": b64(image(14, 160))})
        wait_for(lambda: key(160) in cache.keys() and cache.entries[key(160)].leaving == 1, "the disconnect")
        entry = cache.entries[key(160)]
        assert not entry.done.is_set()
        gate.set()
        wait_for(entry.done.is_set, "the build to end")
    assert key(160) not in cache.keys() and entry.users == 0
    assert len(classify(http, image(15, 160))) == 1000  # the size builds again for the next request


def test_a_size_the_graph_refuses_is_a_400_naming_the_input_and_keeps_nothing(
    http: httpx.Client, cache: SpecializationCache
) -> None:
    for body, param in (({"input": b64(image(11, 16))}, "input"), ({"input": [b64(image(12, 16))] * 2}, "input[0]")):
        reply = http.post("/v1/classify", json={"model": NAME, **body})
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["param"] == param and "height 16, width 16" in error["message"]
        assert key(16) not in cache.keys()
    assert len(classify(http, image(13, 112))) == 1000


def test_a_size_that_pools_down_to_one_builds_with_the_drafted_layout(
    http: httpx.Client, worker: ClassifierWorker, cache: SpecializationCache, oracle: ort.InferenceSession
) -> None:
    # At 40 x 40 SqueezeNet's last feature maps are 1 x 1 before its global pool: the pool's output axes are
    # still new axes, as the layout drafted for the free-sized graph names them, so the size builds its own.
    fallbacks = metric(http, "loam_specialization_fallbacks_total")
    pixels = image(16, 40)
    want = oracle.run(None, {"data_0": pixels[None]})[0].reshape(-1).astype(np.float64)
    np.testing.assert_allclose(classify(http, pixels), want / want.sum(), atol=1e-5)
    entry = cache.entries[key(40)]
    assert entry.stage is not None and entry.stage is not worker.stage and not entry.error
    assert metric(http, "loam_specialization_fallbacks_total") == fallbacks


def test_a_size_whose_build_fails_for_another_reason_runs_on_the_registered_build(
    http: httpx.Client, worker: ClassifierWorker, cache: SpecializationCache, oracle: ort.InferenceSession,
    folder: Path,
) -> None:  # fmt: skip
    # The package's graph moved away after registration: a new size cannot be built, through no fault of the
    # request, and the registered build serves it; the entry keeps that answer, so the size is not built again.
    fallbacks = metric(http, "loam_specialization_fallbacks_total")
    pixels = image(18, 48)
    want = oracle.run(None, {"data_0": pixels[None]})[0].reshape(-1).astype(np.float64)
    graph = folder / "model.onnx"
    graph.rename(folder / "model.onnx.moved")
    try:
        np.testing.assert_allclose(classify(http, pixels), want / want.sum(), atol=1e-5)
    finally:
        (folder / "model.onnx.moved").rename(graph)
    entry = cache.entries[key(48)]
    assert entry.stage is worker.stage and "model.onnx" in entry.error
    assert metric(http, "loam_specialization_fallbacks_total") == fallbacks + 1
    classify(http, image(19, 48))
    assert metric(http, "loam_specialization_fallbacks_total") == fallbacks + 1  # kept: not built again
    assert worker.stage not in cache.stages()


@pytest.mark.parametrize(
    ("specialize", "words"),
    [
        ({"sizes": [224]}, r"key 'stages.classifier.specialize' must be \{\"dims\""),
        ({"dims": {"height": "data_0:2"}}, "key 'stages.classifier.specialize.dims.height' must name"),
        ({"dims": {"height": "pixels[2]"}}, "key 'stages.classifier.specialize.dims.height' names input 'pixels'"),
        ({"dims": {"height": "data_0[1]"}}, "key 'stages.classifier.specialize.dims.height' names axis 1"),
        ({"dims": {"height": "data_0[0]"}}, "key 'stages.classifier.specialize.dims.height' names axis 0"),
        ({"dims": {"side": "data_0[2]"}}, r"key 'stages.classifier.specialize.dims.side' names axis 2 .* 'height'"),
    ],
)
def test_a_malformed_specialize_is_refused_naming_the_key(
    tmp_path_factory: pytest.TempPathFactory, folder: Path, specialize: object, words: str
) -> None:
    copy = tmp_path_factory.mktemp("bad-specialize")
    for name in ("model.onnx", "layout.toml"):
        (copy / name).symlink_to(folder / name)
    specialized_package(copy, specialize)
    with serving(tmp_path_factory) as server, pytest.raises(PackageError, match=words):
        server.register(copy)


def test_only_the_decision_role_reads_specialize(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("embedding-specialize")
    table = json.loads((PACKAGES / "tiny_bert" / "model.json").read_text(encoding="utf-8"))
    base = PACKAGES / "tiny_bert"
    table["sources"] = {"hf": str((base / table["sources"]["hf"]).resolve())}
    table["stages"]["encoder"]["graph"] = str((base / table["stages"]["encoder"]["graph"]).resolve())
    table["stages"]["encoder"]["specialize"] = {"dims": {"sequence": "input_ids[1]"}}
    (folder / "model.json").write_text(json.dumps(table), encoding="utf-8")
    with serving(tmp_path_factory) as server, pytest.raises(PackageError, match="has unknown key 'specialize'"):
        server.register(folder)
