"""Packages: model.json is checked key by key, every header is checked before a package is accepted, each source
is opened once, and a warm restart compiles nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import loam.driver.pipeline
from loam.core.errors import LoamError
from loam.serve.package import PackageError, open_package, read_package
from loam.serve.roles import ROLES
from loam.serve.server import Server
from tests.serve.serving import MODELS, PACKAGES, package_copy

pytestmark = pytest.mark.xdist_group("serve-package")


def write(folder: Path, table: object) -> Path:
    (folder / "model.json").write_text(json.dumps(table), encoding="utf-8")
    return folder


def bert_table(**changes: object) -> dict[str, object]:
    table: dict[str, object] = {
        "role": "embedding",
        "sources": {"hf": str(MODELS / "tiny_bert" / "hf_model.safetensors")},
        "stages": {"encoder": {"graph": str(MODELS / "tiny_bert" / "encoder_unfolded.onnxtext"), "source": "hf",
                               "options": {"architecture": "bert"}, "pooling": "mean"}},
    }  # fmt: skip
    table.update(changes)
    return table


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ([1, 2], "must hold a JSON object"),
        (bert_table(weights="x"), "unknown key 'weights'"),
        (bert_table(role="singing"), "key 'role' must be one of text, embedding"),
        (bert_table(sources={"hf": ["gone.safetensors"]}), "key 'sources.hf' names 'gone.safetensors': no such file"),
        (bert_table(sources={"hf": []}), "'sources.hf' is an empty list"),
        (bert_table(stages={}), "key 'stages' must be a non-empty object"),
        (bert_table(stages={"e": {"graph": "nope.onnx"}}), "key 'stages.e.graph' names 'nope.onnx': no such file"),
        (bert_table(stages={"e": {"graph": str(MODELS / "tiny_bert" / "encoder.onnxtext"), "source": "other"}}),
         "'stages.e.source' names 'other', which is not one of the package's sources ['hf']"),
        (bert_table(stages={"e": {"graph": str(MODELS / "tiny_bert" / "encoder.onnxtext"), "pooling": "max"}}),
         "'stages.e.pooling' must be one of mean, cls, none"),
        (bert_table(stages={"e": {"graph": str(MODELS / "tiny_bert" / "encoder.onnxtext"),
                                  "options": {"checkpoint": "x.safetensors"}}}), "may not name a checkpoint"),
        (bert_table(capacities={"batch_units": 0}), "'capacities.batch_units' must be a positive integer"),
        (bert_table(capacities={"rows": 4}), "'capacities.rows' is not a capacity"),
        (bert_table(tokenizer={"source": "hf"}), "which is not one GGUF file"),
        (bert_table(name="bad name!"), "key 'name' must be"),
        (bert_table(role="text"),
         "key 'stages.encoder' has unknown key 'pooling' (known keys: graph, source, options, packed)"),
    ],
)  # fmt: skip
def test_a_malformed_model_json_is_refused_naming_the_key(tmp_path: Path, table: object, words: str) -> None:
    with pytest.raises(PackageError) as caught:
        read_package(write(tmp_path, table))
    assert str(tmp_path / "model.json") in str(caught.value) and words in str(caught.value), str(caught.value)


def test_not_json_and_no_folder_are_refused(tmp_path: Path) -> None:
    (tmp_path / "model.json").write_bytes(b"{\xff")
    with pytest.raises(PackageError, match="not valid JSON"):
        read_package(tmp_path)
    with pytest.raises(PackageError, match="not a package folder"):
        read_package(tmp_path / "absent")


def test_a_tensor_of_the_wrong_extent_fails_registration_naming_file_tensor_and_axis(tmp_path: Path) -> None:
    tensors = load_file(str(MODELS / "tiny_bert" / "hf_model.safetensors"))
    name = "encoder.layer.1.intermediate.dense.weight"
    tensors[name] = np.zeros((tensors[name].shape[0] + 1, tensors[name].shape[1]), np.float32)
    damaged = tmp_path / "damaged.safetensors"
    save_file(tensors, str(damaged))
    server = Server()
    with pytest.raises(LoamError) as caught:
        server.register(write(tmp_path, bert_table(sources={"hf": str(damaged)})))
    message = str(caught.value)
    assert str(damaged) in message and name in message and "axis 0" in message, message
    assert server.models == {}  # nothing half-registered


def test_a_missing_shard_fails_registration_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(PackageError, match=r"sources.hf' names 'a.safetensors': no such file"):
        Server().register(write(tmp_path, bert_table(sources={"hf": ["a.safetensors"]})))


def test_a_control_without_its_roles_calls_fails_registration_naming_them(tmp_path: Path) -> None:
    (tmp_path / "control.py").write_text(
        "class Half:\n    def prepare(self, package):\n        return None\n\n\nCONTROL = Half()\n", encoding="utf-8"
    )
    server = Server()
    with pytest.raises(PackageError) as caught:
        server.register(write(tmp_path, bert_table(control="control.py")))
    message = str(caught.value)
    assert str(tmp_path / "control.py") in message and "CONTROL lacks prepare_batch, prepare_request" in message, (
        message
    )
    assert server.models == {}


def test_stages_sharing_a_source_open_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stage = {"graph": str(MODELS / "tiny_bert" / "encoder_unfolded.onnxtext"), "source": "hf",
             "options": {"architecture": "bert"}}  # fmt: skip
    opened: list[object] = []
    real = np.memmap

    def counting(*args: object, **kwargs: object) -> np.memmap:
        opened.append(args[0])
        return real(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(np, "memmap", counting)
    package = open_package(write(tmp_path, bert_table(stages={"first": stage, "second": {**stage, "pooling": "cls"}})))
    assert len(opened) == 1
    first, second = package.stages["first"].weights, package.stages["second"].weights
    assert first._source is second._source  # type: ignore[attr-defined]  # both view the one map


def test_a_warm_restart_compiles_nothing(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOAM_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    folder = package_copy(tmp_path_factory, "tiny_gpt2")
    cold = Server()
    assert cold.register(folder).package.builds == {"decoder": False}
    cold.close()

    def no_compiling(*args: object, **kwargs: object) -> None:
        raise AssertionError("a warm restart compiled a stage")

    monkeypatch.setattr(loam.driver.pipeline, "build", no_compiling)
    warm = Server()
    assert warm.register(folder).package.builds == {"decoder": True}
    warm.close()


def test_the_committed_packages_read(tmp_path: Path) -> None:
    for folder in sorted(PACKAGES.iterdir()):
        spec = read_package(folder)
        assert spec.role in ROLES and spec.description
