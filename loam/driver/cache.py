"""The build cache: a generated module stored under a key of everything the module depends on.

Why a key of headers, not of files: the build reads a checkpoint's header and nothing further down
the file (the graph is the schema, the checkpoint is data), so the module is a function
of the graph, the checkpoint headers, the options and Loam itself.  Hashing whole multi-gigabyte
checkpoints on every rebuild would prove only that bytes the output never read did not change, so a
rebuild whose only change is a checkpoint's payload is a hit.  `inline_weights` is the exception:
then the payload is written into the module, so the whole file is part of the key.

The key hashes:
- the graph file's bytes (every byte of a graph is schema) and its resolved path;
- each checkpoint's extent: a safetensors file's 8-byte length and JSON header; a Hugging Face
  `*.index.json` whole, with the extent of each shard it names; a GGUF file up to the end of its
  tensor infos (`loam.frontends.gguf.header_extent`); anything else whole;
- the canonical options: every `loam.driver.options.Options` field, mappings sorted, rules in order, paths
  resolved, so reformatting an options file does not rebuild;
- Loam itself: its version and a digest of its installed source files (an editable install changes
  without its version changing), and the versions of xDSL and onnx, which read the graph.

An entry is a JSON file `KEY.json` in the cache folder holding the module source, the build report
and the notes, with a digest of those; an entry that does not parse or whose digest disagrees is
ignored and rebuilt, never trusted.  Entries are written atomically (a temporary file in the same
folder, renamed), so a crash leaves no half entry.  The folder is `$LOAM_CACHE_DIR` or
`~/.cache/loam`; nothing is written anywhere else.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import importlib
import json
import os
import struct
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from loam.driver.options import Options

__all__ = ["CACHE_ENV", "CachedBuild", "build_key", "cache_dir", "cached", "checkpoint_extent", "load", "store"]

CACHE_ENV = "LOAM_CACHE_DIR"
_FORMAT = 2  # bump when the entry layout or the key's meaning changes
# The packages whose source is Loam (pyproject maps them onto the repository's folders).
_PACKAGES = ("loam", "loam.dialects", "loam.passes", "loam.frontends", "loam.backends", "loam.grammar")
# A safetensors header above this is refused by the build; the key reads no more of it than that.
_MAX_HEADER_BYTES = 100_000_000
_CHUNK = 1 << 20


@dataclass(frozen=True)
class CachedBuild:
    """What a build printed and wrote: enough to replay it without building."""

    source: str
    report: str
    notes: tuple[str, ...] = ()
    weights: bytes | None = None
    """The safetensors file written beside the module (`BuildResult.weights`), None when it has none."""


def cache_dir() -> Path:
    """The cache folder: `$LOAM_CACHE_DIR`, else `~/.cache/loam`."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "loam"


# -- the key -----------------------------------------------------------------------------------


def build_key(model: Path, options: Options, flags: Mapping[str, object] | None = None) -> str | None:
    """The cache key (64 hex digits) of building `model` with `options`; None when an option has no
    stable encoding (then the build is not cached).  `flags` are further command-line settings that
    change the output.  Reading errors (an unreadable file) propagate: the build would fail on them too.
    """
    try:
        canonical_options = _canonical(options)
        canonical_flags = _canonical(dict(flags or {}))
    except TypeError:
        return None
    whole = options.inline_weights  # the payload is written into the module
    record = {
        "format": _FORMAT,
        "loam": _loam_fingerprint(),
        "model": {"path": str(model.resolve()), "sha256": _file_digest(model)},
        "checkpoints": [
            {"path": str(Path(c).resolve()), "extent": checkpoint_extent(Path(c), whole=whole)}
            for c in options.checkpoints
        ],
        "options": canonical_options,
        "flags": canonical_flags,
    }
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def checkpoint_extent(path: Path, *, whole: bool = False) -> str:
    """A digest of the bytes of checkpoint `path` that the build reads (all of them when `whole`)."""
    if whole:
        return "whole:" + _file_digest(path)
    name = path.name.lower()
    if name.endswith(".safetensors"):
        return "header:" + hashlib.sha256(_safetensors_extent(path)).hexdigest()
    if name.endswith(".json"):
        return "index:" + _index_extent(path)
    if name.endswith(".gguf"):
        return _gguf_extent(path)
    return "whole:" + _file_digest(path)


def _safetensors_extent(path: Path) -> bytes:
    """The 8-byte header length and the JSON header (what `loam.frontends.checkpoint` reads)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return head
        (length,) = struct.unpack("<Q", head)
        return head + f.read(min(length, _MAX_HEADER_BYTES))


def _index_extent(path: Path) -> str:
    """A Hugging Face index: its own bytes and the header of each shard its weight_map names."""
    raw = path.read_bytes()
    digest = hashlib.sha256(raw)
    try:
        weight_map = json.loads(raw).get("weight_map", {})
        shards = list(dict.fromkeys(str(v) for v in weight_map.values()))
    except (ValueError, AttributeError):
        return digest.hexdigest()  # malformed: the build refuses it; the key needs no more
    for shard in shards:
        shard_path = path.parent / shard
        digest.update(b"\0" + shard.encode("utf-8", errors="surrogatepass") + b"\0")
        # A shard that is absent, escapes the folder or cannot be looked up (a name too long, a NUL)
        # is the build's refusal to make.
        try:
            extent = checkpoint_extent(shard_path) if shard_path.is_file() else "absent"
        except (OSError, ValueError):
            extent = "absent"
        digest.update(extent.encode("ascii"))
    return digest.hexdigest()


def _gguf_extent(path: Path) -> str:
    """A GGUF file's extent: the header and tensor infos the build reads, as `loam.frontends.gguf` measures
    them (its parser is the one the build uses); without that reader, the whole file (correct, just
    slower to hash)."""
    try:
        reader = importlib.import_module("loam.frontends.gguf")
    except ImportError:
        reader = None
    extent = getattr(reader, "header_extent", None)
    if callable(extent):
        end = int(extent(path))
        with open(path, "rb") as f:
            return "header:" + hashlib.sha256(f.read(end)).hexdigest()
    return "whole:" + _file_digest(path)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _canonical(value: object) -> object:
    """A JSON value that is equal exactly when the options mean the same build."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Path):
        return str(value.resolve())
    if isinstance(value, enum.Enum):
        return [type(value).__name__, _canonical(value.value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            "__type__": type(value).__name__,
            **{f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)},
        }
    if isinstance(value, Mapping):
        items = [(str(k), _canonical(v)) for k, v in value.items()]
        return {"__map__": sorted(items, key=lambda kv: kv[0])}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    raise TypeError(f"no canonical encoding for {type(value).__name__}")


@cache
def _loam_fingerprint() -> dict[str, str]:
    """Loam's version plus a digest of its source files, and the versions of what reads the graph."""

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "unknown"

    digest = hashlib.sha256()
    for package in _PACKAGES:
        try:
            module = importlib.import_module(package)
        except ImportError:
            continue
        for root in getattr(module, "__path__", []):
            base = Path(root)
            for file in sorted(_source_files(base)):
                digest.update(f"{package}/{file.relative_to(base).as_posix()}\0".encode())
                digest.update(file.read_bytes())
    return {"loam": of("loam"), "source": digest.hexdigest(), "xdsl": of("xdsl"), "onnx": of("onnx")}


def _source_files(base: Path) -> Iterable[Path]:
    for path in base.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".lark", ".json", ".toml"):
            yield path


# -- entries -----------------------------------------------------------------------------------


def _entry_digest(key: str, build: CachedBuild) -> str:
    weights = None if build.weights is None else hashlib.sha256(build.weights).hexdigest()
    text = json.dumps([key, build.source, build.report, list(build.notes), weights], ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def load(folder: Path, key: str) -> CachedBuild | None:
    """The build stored under `key`, or None when there is none or it is damaged in any way (its
    weights file included)."""
    try:
        entry = json.loads((folder / f"{key}.json").read_text(encoding="utf-8"))
        weights = (folder / f"{key}.safetensors").read_bytes() if entry["weights"] else None
        build = CachedBuild(entry["source"], entry["report"], tuple(entry["notes"]), weights)
        intact = (
            entry["format"] == _FORMAT
            and entry["key"] == key
            and isinstance(build.source, str)
            and isinstance(build.report, str)
            and all(isinstance(n, str) for n in build.notes)
            and entry["digest"] == _entry_digest(key, build)
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return build if intact else None


def store(folder: Path, key: str, build: CachedBuild) -> Path:
    """Write the entry for `key` (atomically) and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    entry = {
        "format": _FORMAT,
        "key": key,
        "source": build.source,
        "report": build.report,
        "notes": list(build.notes),
        "weights": build.weights is not None,
        "digest": _entry_digest(key, build),
    }
    if build.weights is not None:  # written first: an entry never names weights that are not there
        _write_atomically(folder, f"{key}.safetensors", build.weights)
    return _write_atomically(folder, f"{key}.json", json.dumps(entry).encode("utf-8"))


def _write_atomically(folder: Path, name: str, data: bytes) -> Path:
    """`data` as `folder/name`, through a temporary file renamed into place."""
    target = folder / name
    fd, temporary = tempfile.mkstemp(prefix=f".{name[:12]}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def cached(
    model: Path,
    options: Options,
    flags: Mapping[str, object],
    make: Callable[[], CachedBuild],
    progress: Callable[[str], None] = lambda _message: None,
) -> tuple[CachedBuild, bool]:
    """The build of `model` with `options` and `flags`: the cached entry when there is one, else what
    `make()` builds, stored for next time.  Returns it and whether it was a hit.  A cache that cannot be
    written costs the next caller a rebuild, never this build (`progress` says so)."""
    key = build_key(model, options, flags)
    folder = cache_dir()
    built = load(folder, key) if key is not None else None
    if built is not None:
        progress(f"cache hit ({key[:12] if key else ''})")
        return built, True
    built = make()
    if key is not None:
        try:
            store(folder, key, built)
        except OSError as err:
            progress(f"note: build cache not written ({err.strerror or err}: {err.filename or folder})")
    return built, False
