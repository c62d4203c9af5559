"""Multipart registration: a package uploaded to `POST /v1/packages` as multipart/form-data.

An upload carries a package's programs and metadata: `model.json` and the graphs, stage option files and
tokenizer it names (each a file part, named by its filename; a `tokenizer.json` may bring the
`tokenizer_config.json` Loam reads beside it), and optionally a form field `active` (`false`: register it
inactive).  Its parameter files never travel: each `sources` path is named relative to the server's
first `--package-root`, where the operator put it, and so is a `control` (Python the server runs, which a
client never sends).  The upload lives in a namespace of its own: a fresh folder under the server's
state directory.

Everything is checked before anything is written there: the request's size (`MAX_UPLOAD`) and each
file's (`MAX_FILE`), at most `MAX_FILES` files, every name a plain file name (no path separator, no
`..`), `model.json` a JSON object with a `name`, every file it names uploaded and every uploaded file
named, every source and control inside the package root.  The package is then written to a private
temporary folder and read there with the same checks as a folder (`loam.serve.package.read_package`),
and only then moved under the state directory; a refused upload leaves the state directory as it was,
and so does a registration that fails after it (its folder is removed).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from loam.serve.package import PackageError, read_package
from loam.serve.scheduler import ServeError

MAX_UPLOAD = 256 << 20
"""Bytes one multipart request may carry in all."""
MAX_FILE = 64 << 20
"""Bytes one uploaded file may hold."""
MAX_FILES = 32
"""Files one upload may carry."""

PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
"""An uploaded file's name: no path separator, no leading dot (so never `.` or `..`)."""
_BESIDE_TOKENIZER = "tokenizer_config.json"


@dataclass(frozen=True)
class Upload:
    """A multipart upload, read and bounded: each file's bytes by name, and whether to register it active."""

    files: dict[str, bytes]
    active: bool


def _paths(table: dict[str, object]) -> tuple[list[tuple[str, object]], list[tuple[str, object]]]:
    """The (key, value) pairs of `model.json` naming an uploaded file, and those naming a server-local one."""
    uploaded: list[tuple[str, object]] = []
    local: list[tuple[str, object]] = []
    sources = table.get("sources", {})
    if isinstance(sources, dict):
        for name, value in sources.items():
            for shard in value if isinstance(value, list) else [value]:
                local.append((f"sources.{name}", shard))
    if table.get("control") is not None:
        local.append(("control", table["control"]))
    stages = table.get("stages")
    if isinstance(stages, dict):
        for name, stage in stages.items():
            if isinstance(stage, dict):
                uploaded.append((f"stages.{name}.graph", stage.get("graph")))
                if isinstance(stage.get("options"), str):
                    uploaded.append((f"stages.{name}.options", stage["options"]))
    if isinstance(table.get("tokenizer"), str):
        uploaded.append(("tokenizer", table["tokenizer"]))
    return uploaded, local


def checked_manifest(upload: Upload, root: Path) -> dict[str, object]:
    """`model.json` of `upload`, its references checked and its server-local paths made absolute under `root`."""
    if "model.json" not in upload.files:
        raise ServeError("the upload carries no model.json", param="files.model.json")
    try:
        table = json.loads(upload.files["model.json"].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise PackageError(f"model.json (uploaded): not valid JSON ({err})") from None
    if not isinstance(table, dict):
        raise PackageError(f"model.json (uploaded): must hold a JSON object, not {type(table).__name__}")
    if not isinstance(table.get("name"), str):
        raise PackageError("model.json (uploaded): key 'name' is required in an upload (a string)")

    def fail(key: str, problem: str) -> PackageError:
        return PackageError(f"model.json (uploaded): key {key!r} {problem}")

    uploaded, local = _paths(table)
    named = {"model.json"}
    for key, value in uploaded:
        if not isinstance(value, str) or value not in upload.files:
            raise fail(key, f"names {value!r}, which the upload does not carry (it carries {sorted(upload.files)})")
        named.add(value)
    if isinstance(table.get("tokenizer"), str):
        named.add(_BESIDE_TOKENIZER)
    extra = sorted(set(upload.files) - named)
    if extra:
        raise ServeError(f"the upload carries {extra[0]!r}, which model.json does not name", param=f"files.{extra[0]}")
    resolved: dict[str, str] = {}
    for key, value in local:
        if not isinstance(value, str) or not value:
            raise fail(key, f"must be a path string, got {value!r}")
        parts = value.replace("\\", "/").split("/")
        path = (root / value).resolve()
        if Path(value).is_absolute() or ".." in parts or not path.is_relative_to(root):
            raise fail(key, f"names {value!r}: an upload names server-local files relative to --package-root")
        if not path.is_file():
            raise fail(key, f"names {value!r}: no such file under --package-root")
        resolved[value] = str(path)
    sources = table.get("sources", {})
    if isinstance(sources, dict):
        table["sources"] = {
            name: [resolved[s] for s in value] if isinstance(value, list) else resolved.get(value, value)
            for name, value in sources.items()
        }
    if isinstance(table.get("control"), str):
        table["control"] = resolved[table["control"]]
    return table


def stage_upload(upload: Upload, root: Path, state_dir: Path) -> Path:
    """Check `upload` and write it to a fresh folder under `state_dir`; nothing is written there if it is refused."""
    table = checked_manifest(upload, root)
    with tempfile.TemporaryDirectory(prefix="loam-upload-") as private:
        folder = Path(private) / "package"
        folder.mkdir()
        for name, data in upload.files.items():
            (folder / name).write_bytes(data)
        (folder / "model.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
        read_package(folder)  # the same checks as a folder's, where only this request can see it
        name = re.sub(r"[^A-Za-z0-9._-]", "_", str(table["name"]))
        target = state_dir / f"{name}-{uuid.uuid4().hex[:12]}"
        state_dir.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copytree(folder, target)
        except OSError as err:
            shutil.rmtree(target, ignore_errors=True)
            raise ServeError(f"the upload cannot be written under the state directory: {err}", status=500) from None
    return target
