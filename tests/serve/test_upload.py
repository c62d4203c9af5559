"""Multipart registration against a real server on 127.0.0.1: a package's programs and metadata uploaded to
`POST /v1/packages`, its parameter files named under `--package-root`; every malformed upload refused naming
what is wrong, with nothing written to the state directory."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from loam.serve.cli import Listener
from loam.serve.server import Server
from loam.serve.upload import MAX_FILE
from tests.serve.serving import MODELS, PACKAGES, http_client, serving

pytestmark = pytest.mark.xdist_group("serve-upload")
GPT2 = MODELS / "tiny_gpt2"
NAME = "tiny-gpt2-uploaded"


def manifest(**changes: object) -> dict[str, object]:
    """tiny-gpt2's model.json as an upload gives it: its files by plain name, its checkpoint under the root."""
    table: dict[str, object] = {
        "name": NAME,
        "role": "text",
        "sources": {"weights": "tiny_gpt2/tiny_gpt2.safetensors"},
        "stages": {
            "decoder": {
                "graph": "decoder_positions.onnxtext",
                "source": "weights",
                "options": "decoder_positions.loam.toml",
            }
        },
        "tokenizer": "tokenizer.json",
        "capacities": {"batch_units": 64, "resident_requests": 8, "context_tokens": 128, "block_tokens": 8},
    }
    table.update(changes)
    return table


def upload(table: object, **extra: bytes) -> list[tuple[str, tuple[str, bytes]]]:
    """The multipart files of an upload: model.json (`table`), the graph, its options and the tokenizer's files."""
    files = {
        "model.json": json.dumps(table).encode() if not isinstance(table, bytes) else table,
        "decoder_positions.onnxtext": (GPT2 / "decoder_positions.onnxtext").read_bytes(),
        "decoder_positions.loam.toml": (GPT2 / "decoder_positions.loam.toml").read_bytes(),
        "tokenizer.json": (PACKAGES / "tiny_gpt2" / "tokenizer.json").read_bytes(),
        "tokenizer_config.json": (PACKAGES / "tiny_gpt2" / "tokenizer_config.json").read_bytes(),
        **extra,
    }
    return [("files", (name, data)) for name, data in files.items()]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory, PACKAGES / "tiny_gpt2") as server:
        server.package_roots = (MODELS.resolve(),)
        server.state_dir = tmp_path_factory.mktemp("state")
        yield server


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with http_client(server, timeout=120) as client:
        yield client


def listing(server: Server) -> list[str]:
    assert server.state_dir is not None
    return sorted(p.name for p in server.state_dir.iterdir()) if server.state_dir.exists() else []


def test_an_uploaded_package_serves_as_its_folder_does(http: httpx.Client, server: Server) -> None:
    before = listing(server)
    reply = http.post("/v1/packages", files=upload(manifest()))
    assert reply.status_code == 201, reply.text
    assert reply.json()["id"] == NAME and reply.json()["active"] is True
    written = sorted(set(listing(server)) - set(before))
    assert len(written) == 1 and written[0].startswith(NAME)
    assert server.state_dir is not None
    table = json.loads((server.state_dir / written[0] / "model.json").read_text(encoding="utf-8"))
    assert table["sources"]["weights"] == str((GPT2 / "tiny_gpt2.safetensors").resolve())  # server-local
    body = {"prompt": "Now is better", "max_tokens": 6, "temperature": 0}
    ours = http.post("/v1/completions", json={**body, "model": NAME}).json()["choices"][0]["text"]
    theirs = http.post("/v1/completions", json={**body, "model": "tiny-gpt2"}).json()["choices"][0]["text"]
    assert ours == theirs
    assert http.delete(f"/v1/packages/{NAME}").json()["deleted"] is True
    assert listing(server) == before  # its namespace goes with it


def test_an_upload_can_register_inactive(http: httpx.Client, server: Server) -> None:
    reply = http.post("/v1/packages", files=upload(manifest()), data={"active": "false"})
    assert reply.status_code == 201 and reply.json()["active"] is False
    try:
        done = http.post("/v1/completions", json={"model": NAME, "prompt": [1, 2], "max_tokens": 2})
        assert done.status_code == 200
        assert http.get(f"/v1/models/{NAME}").json()["active"] is True
    finally:
        http.delete(f"/v1/packages/{NAME}")


MALFORMED: list[tuple[str, object, dict[str, bytes], int, str]] = [
    ("no model.json", None, {}, 400, "no model.json"),
    ("model.json not JSON", b"{not json", {}, 400, "not valid JSON"),
    ("no name", manifest(name=None), {}, 400, "'name' is required"),
    ("a graph not uploaded", manifest(stages={"decoder": {"graph": "other.onnxtext", "source": "weights"}}), {}, 400,
     "'stages.decoder.graph' names 'other.onnxtext'"),
    ("a file not named", manifest(), {"notes.txt": b"hello"}, 400, "'notes.txt', which model.json does not name"),
    ("a path in a file name", manifest(), {"../escape.txt": b"x"}, 400, "plain file name"),
    ("a source outside the root", manifest(sources={"weights": "../serve/packages/tiny_gpt2/tokenizer.json"}), {},
     400, "relative to --package-root"),
    ("an absolute source", manifest(sources={"weights": str(GPT2 / "tiny_gpt2.safetensors")}), {}, 400,
     "relative to --package-root"),
    ("a missing source", manifest(sources={"weights": "tiny_gpt2/missing.safetensors"}), {}, 400,
     "no such file under --package-root"),
    ("an unknown key", manifest(colour="blue"), {}, 400, "unknown key 'colour'"),
    ("a bad role", manifest(role="poetry"), {}, 400, "'role' must be one of"),
    ("a tensor of the wrong extent", manifest(sources={"weights": "tiny_bert/hf_model.safetensors"}), {}, 400,
     "checkpoint"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("table", "extra", "status", "words"), [case[1:] for case in MALFORMED], ids=[case[0] for case in MALFORMED]
)
def test_a_malformed_upload_is_refused_and_writes_nothing(
    http: httpx.Client, server: Server, table: object, extra: dict[str, bytes], status: int, words: str
) -> None:
    before = listing(server)
    files = upload(table if table is not None else {}, **extra)
    if table is None:
        files = [f for f in files if f[1][0] != "model.json"]
    reply = http.post("/v1/packages", files=files)
    assert reply.status_code == status, reply.text
    assert words in reply.json()["error"]["message"]
    assert listing(server) == before
    assert NAME not in http.get("/health").json()["models"]


def test_an_oversized_file_is_refused_naming_it(http: httpx.Client, server: Server) -> None:
    before = listing(server)
    reply = http.post("/v1/packages", files=upload(manifest(), **{"big.bin": b"\0" * (MAX_FILE + 1)}))
    assert reply.status_code == 413 and reply.json()["error"]["param"] == "files.big.bin"
    assert listing(server) == before


def test_an_unknown_field_is_refused_naming_it(http: httpx.Client, server: Server) -> None:
    reply = http.post("/v1/packages", files=upload(manifest()), data={"colour": "blue"})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "colour"


def test_without_a_package_root_multipart_registration_is_refused(tmp_path_factory: pytest.TempPathFactory) -> None:
    with serving(tmp_path_factory) as server, Listener(server) as listener:
        server.state_dir = tmp_path_factory.mktemp("state")
        reply = httpx.post(f"{listener.url}/v1/packages", files=upload(manifest()), timeout=60)
        assert reply.status_code == 403 and "--package-root" in reply.json()["error"]["message"]
        assert listing(server) == []


def test_without_a_state_dir_uploads_go_to_a_temporary_one_removed_at_close(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with serving(tmp_path_factory) as server, Listener(server) as listener:
        server.package_roots = (MODELS.resolve(),)
        assert server.state_dir is None
        reply = httpx.post(f"{listener.url}/v1/packages", files=upload(manifest()), timeout=120)
        assert reply.status_code == 201, reply.text
        state = server.state_dir
        assert state is not None and len(listing(server)) == 1
    assert not state.exists()
