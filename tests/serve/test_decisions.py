"""The decision role with a classifier stage, against a real server on 127.0.0.1: the light zoo's SqueezeNet
(seeded weights, a free image size; `tests.models.real_exports.light_zoo`) answers /v1/classify with
onnxruntime's softmax on the same image, renormalized over the labels asked about, alone and in a cohort; its
labels are ImageNet's 1000 class names (imagenet_labels.txt, written by scripts/write_imagenet_labels.py from
torchvision's list).  A malformed decision
package is a PackageError naming the key; a malformed request a 400 naming the field."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from loam.driver.draft import draft_layout
from loam.serve.server import Server
from loam.serve.spec import PackageError
from tests.models.real_exports.light_zoo import redeclared
from tests.serve.serving import PACKAGES, http_client, serving

pytestmark = pytest.mark.xdist_group("serve-decisions")
NAME = "squeezenet"
LABELS = (Path(__file__).parent / "imagenet_labels.txt").read_text(encoding="utf-8").splitlines()


def classifier_package(folder: Path, **changes: object) -> Path:
    """A decision package over the re-declared SqueezeNet (its softmax output, its labels in a file)."""
    if not (folder / "model.onnx").exists():
        model = redeclared("squeezenet")
        onnx.save(model, folder / "model.onnx")
        (folder / "layout.toml").write_text(draft_layout(model).toml(), encoding="utf-8")  # as `loam layout` writes it
    (folder / "labels.txt").write_text("\n".join(LABELS) + "\n", encoding="utf-8")
    table = {"name": NAME, "role": "decision",
             "stages": {"classifier": {"graph": "model.onnx", "options": "layout.toml"}},
             "answers": "labels.txt", "scores": "probabilities",
             "capacities": {"resident_requests": 4}, **changes}  # fmt: skip
    (folder / "model.json").write_text(json.dumps(table), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return classifier_package(tmp_path_factory.mktemp("squeezenet"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, folder: Path) -> Iterator[Server]:
    with serving(tmp_path_factory, folder) as server:
        yield server


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with http_client(server, timeout=300) as client:
        yield client


@pytest.fixture(scope="module")
def oracle(folder: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])


def image(seed: int, side: int = 224) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((3, side, side)).astype(np.float32)


def b64(pixels: np.ndarray) -> dict[str, Any]:
    return {"b64": base64.b64encode(pixels.astype("<f4").tobytes()).decode(), "shape": list(pixels.shape)}


def classify(http: httpx.Client, **body: Any) -> dict[str, Any]:
    reply = http.post("/v1/classify", json={"model": NAME, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_classifiers_distribution_is_onnxruntimes_softmax(http: httpx.Client, oracle: ort.InferenceSession) -> None:
    pixels = image(0)
    want = oracle.run(None, {"data_0": pixels[None]})[0].reshape(-1).astype(np.float64)
    data = classify(http, input=b64(pixels))
    assert data["object"] == "list" and data["labels"] == LABELS
    (item,) = data["data"]
    assert item["object"] == "classify" and item["index"] == 0 and item["num_classes"] == 1000
    np.testing.assert_allclose(item["probs"], want / want.sum(), atol=1e-5)
    assert item["label"] == LABELS[int(np.argmax(want))]
    # The labels asked about: the head's probabilities renormalized over them.
    picked = [LABELS[int(i)] for i in np.argsort(-want)[:3]][::-1]
    subset = classify(http, input=pixels.tolist(), labels=picked)["data"][0]
    chosen = want[[LABELS.index(label) for label in picked]]
    np.testing.assert_allclose(subset["probs"], chosen / chosen.sum(), atol=1e-5)
    assert subset["label"] == picked[-1] and subset["num_classes"] == 3


def test_inputs_of_a_request_and_of_concurrent_requests_get_the_same_numbers_as_alone(http: httpx.Client) -> None:
    pixels = [image(1), image(2), image(3, side=200)]
    alone = [classify(http, input=b64(p))["data"][0]["probs"] for p in pixels]
    together = classify(http, input=[b64(p) for p in pixels])["data"]
    assert [item["index"] for item in together] == [0, 1, 2]
    replies: list[dict[str, Any]] = [{} for _ in pixels]

    def send(i: int) -> None:
        replies[i] = classify(http, input=b64(pixels[i]))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(pixels))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, want in enumerate(alone):
        np.testing.assert_allclose(together[i]["probs"], want, atol=1e-6)
        np.testing.assert_allclose(replies[i]["data"][0]["probs"], want, atol=1e-6)
    metrics = http.get("/metrics").text
    assert f'loam_decisions_total{{model="{NAME}"}}' in metrics


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "input"),
        ({"input": "a picture"}, "input"),
        ({"input": {"b64": "!!", "shape": [3, 8, 8]}}, "input.b64"),
        ({"input": {"b64": "AAAA", "shape": [3, 8, 8]}}, "input.b64"),
        ({"input": {"b64": "AAAA", "shape": "3x8x8"}}, "input.shape"),
        ({"input": np.zeros((4, 32, 32)).tolist()}, "input"),
        ({"input": np.zeros((3, 32, 32)).tolist(), "labels": [LABELS[1], "cat"]}, "labels"),
        ({"input": np.zeros((3, 32, 32)).tolist(), "labels": [LABELS[1]]}, "labels"),
    ],
)
def test_a_wrong_field_is_a_400_naming_it(http: httpx.Client, body: dict[str, Any], param: str) -> None:
    reply = http.post("/v1/classify", json={"model": NAME, **body})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


def test_a_classifier_too_small_for_its_pooling_fails_alone(http: httpx.Client) -> None:
    reply = http.post("/v1/classify", json={"model": NAME, "input": b64(image(4, side=16))})
    assert reply.status_code == 400 and "data_0" in reply.json()["error"]["message"]
    assert classify(http, input=b64(image(5)))["data"][0]["num_classes"] == 1000


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"scores": "odds"}, "key 'scores' must be one of logits, probabilities"),
        ({"framing": "Q: {input}"}, "key 'framing' is for a language-model stage"),
        ({"answers": ["only"]}, "key 'answers' must give at least 2 answers"),
        ({"answers": {"cat": -1, "dog": 2}}, "key 'answers.cat' must be a class index"),
        ({"answers": "missing.txt"}, "key 'answers' names 'missing.txt'"),
    ],
)
def test_a_malformed_decision_package_is_refused_naming_the_key(
    tmp_path_factory: pytest.TempPathFactory, folder: Path, changes: dict[str, object], words: str
) -> None:
    copy = tmp_path_factory.mktemp("bad-decision")
    for name in ("model.onnx", "layout.toml"):
        (copy / name).symlink_to(folder / name)
    classifier_package(copy, **changes)
    with serving(tmp_path_factory) as server, pytest.raises(PackageError, match=words.replace("(", r"\(")):
        server.register(copy)


def test_a_language_model_framing_must_name_plain_fields(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("bad-framing")
    table = json.loads((PACKAGES / "tiny_gpt2" / "model.json").read_text(encoding="utf-8"))
    table["sources"] = {"weights": str((PACKAGES / "tiny_gpt2" / table["sources"]["weights"]).resolve())}
    for key in ("graph", "options"):
        table["stages"]["decoder"][key] = str((PACKAGES / "tiny_gpt2" / table["stages"]["decoder"][key]).resolve())
    table["tokenizer"] = str((PACKAGES / "tiny_gpt2" / "tokenizer.json").resolve())
    table.update(role="decision", framing="Q: {input.text}", answers={"yes": " yes", "no": " no"})
    (folder / "model.json").write_text(json.dumps(table), encoding="utf-8")
    with serving(tmp_path_factory) as server, pytest.raises(PackageError, match="key 'framing' has the field"):
        server.register(folder)
