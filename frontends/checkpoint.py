"""Checkpoint headers, read and checked at build time without reading any tensor's bytes.

A safetensors file starts with an 8-byte little-endian header length and a JSON header naming each
tensor's dtype, shape and byte range in the payload that follows.  The build reads only those bytes,
checks the header is well formed, and checks every weight the graph does not carry against it: the
payload is data, so a file whose payload was cut off still builds and the module's `Weights.load`
names the first tensor it cannot read.  That is also why the build cannot refuse offsets past the
file's end: it never looks there.

A checkpoint given to the build is one of:

- a safetensors file;
- a GGUF file (`loam.frontends.gguf`: named `.gguf` or starting with its magic);
- a Hugging Face index (`*.json`, as `model.safetensors.index.json`), whose `weight_map` names each
  tensor's shard, a safetensors file in the index's own folder.

Several checkpoints are shards of one: a tensor in two of them is refused naming both.  Checkpoint
tensor names become graph names through `[checkpoint_names]` rules (`Options.checkpoint_names`,
then the architecture's own), applied by `loam/runtime/gguf.graph_name_of`, which the generated
module shares.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np

from loam.core import dtypes
from loam.core.errors import CheckpointError
from loam.frontends.headers import HeaderEntry

# safetensors itself refuses headers above 100 MB; so does Loam, before allocating them.
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class WeightSpec:
    """What the graph expects of one weight: element type and named extents."""

    name: str
    elem: dtypes.ElementType
    axes: tuple[tuple[str, int], ...]


def read_safetensors_header(path: Path) -> dict[str, HeaderEntry]:
    """Read and validate the header of the safetensors file at `path`; never read the payload."""
    try:
        with open(path, "rb") as f:
            size = path.stat().st_size
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"checkpoint {path}: shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER_BYTES:
                raise CheckpointError(f"checkpoint {path}: header length {length} exceeds {MAX_HEADER_BYTES}")
            if 8 + length > size:
                raise CheckpointError(
                    f"checkpoint {path}: header length {length} runs past the end of the file ({size} bytes)"
                )
            raw = f.read(length)
    except OSError as e:
        raise CheckpointError(f"checkpoint {path}: cannot read: {e.strerror}") from None
    entries = parse_header(raw, str(path), payload_size=None)
    return {name: replace(e, payload_start=8 + length) for name, e in entries.items()}


def read_headers(
    paths: Iterable[Path], *, names: Sequence[tuple[str, str]] = (), architecture: str | None = None
) -> dict[str, tuple[Path, HeaderEntry]]:
    """Every tensor of the checkpoints `paths` (shards of one), keyed by its graph name (the
    `names` rules applied), with the file holding it.

    A tensor in two files, or two tensors one graph name, is refused naming both: which one the
    graph meant is not for Loam to guess.  A GGUF file's `general.architecture` must be
    `architecture` when both are given.
    """
    from loam.runtime.gguf import graph_name_of

    found: dict[str, tuple[Path, HeaderEntry]] = {}
    for path in paths:
        for name, (holder, entry) in read_checkpoint(path, architecture=architecture).items():
            if name in found:
                raise CheckpointError(f"tensor '{name}' is in two checkpoints: {found[name][0]} and {holder}")
            found[name] = (holder, entry)
    if not names:
        return found
    renamed: dict[str, tuple[Path, HeaderEntry]] = {}
    rules = tuple(names)
    for name, (holder, entry) in found.items():
        graph_name = graph_name_of(name, rules)
        if graph_name in renamed:
            other_holder, other = renamed[graph_name]
            raise CheckpointError(
                f"checkpoint_names: tensors '{other.name}' ({other_holder}) and '{name}' ({holder}) "
                f"both become graph tensor '{graph_name}'"
            )
        renamed[graph_name] = (holder, entry)
    return renamed


def read_checkpoint(path: Path, *, architecture: str | None = None) -> dict[str, tuple[Path, HeaderEntry]]:
    """The tensors of one checkpoint given to the build (a safetensors or GGUF file, or an index of
    safetensors shards), each with the file holding it."""
    from loam.frontends.gguf import is_gguf, read_gguf_header

    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: no such file")
    if path.suffix.lower() == ".json":
        return read_index(path)
    if is_gguf(path):
        metadata, entries = read_gguf_header(path)
        declared = metadata.get("general.architecture")
        if architecture is not None and isinstance(declared, str) and declared != architecture:
            raise CheckpointError(
                f"checkpoint {path}: general.architecture is '{declared}', the options' architecture is "
                f"'{architecture}'"
            )
        return {name: (path, entry) for name, entry in entries.items()}
    return {name: (path, entry) for name, entry in read_safetensors_header(path).items()}


def read_index(path: Path) -> dict[str, tuple[Path, HeaderEntry]]:
    """The tensors of a Hugging Face sharded checkpoint, from its index and its shards' headers.

    The index is JSON whose `weight_map` maps each tensor name to its shard's file name, relative to
    the index's folder (a shard outside that folder is refused, symlinks followed).  Every shard must
    exist, hold exactly the tensors the index places in it, and no tensor may be in two shards.
    """
    try:
        if path.stat().st_size > MAX_HEADER_BYTES:
            raise CheckpointError(f"checkpoint {path}: an index larger than {MAX_HEADER_BYTES} bytes")
        raw = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"checkpoint {path}: cannot read: {e.strerror}") from None
    index = _strict_json(raw, f"checkpoint {path}: the index")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(s, str) and s for s in weight_map.values()):
        raise CheckpointError(f"checkpoint {path}: the index has no 'weight_map' object of tensor name -> shard file")
    folder = path.parent
    root = folder.resolve()
    placed: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        placed.setdefault(shard, []).append(name)
    headers: dict[str, dict[str, HeaderEntry]] = {}
    for shard, tensors in placed.items():
        more = f" (and {len(tensors) - 1} more tensors)" if len(tensors) > 1 else ""
        where = f"checkpoint {path}: tensor '{tensors[0]}'{more} is in shard"
        if PurePosixPath(shard).is_absolute() or PureWindowsPath(shard).is_absolute():
            raise CheckpointError(f"{where} '{shard}', an absolute path")
        try:
            inside = (folder / shard).resolve().is_relative_to(root)
            exists = (folder / shard).is_file()
        except (OSError, ValueError) as e:  # a name too long, or holding a NUL, for the file system
            reason = e.strerror if isinstance(e, OSError) else e
            raise CheckpointError(f"{where} {shard!r}, which cannot be looked up ({reason})") from None
        if not inside:
            raise CheckpointError(f"{where} '{shard}', which leaves the index's folder {folder}")
        if not exists:
            raise CheckpointError(f"{where} '{shard}', which does not exist")
        headers[shard] = read_safetensors_header(folder / shard)
    holders: dict[str, list[str]] = {}
    for shard, header in headers.items():
        for name in header:
            holders.setdefault(name, []).append(shard)
    for name, shards in holders.items():
        if len(shards) > 1:
            raise CheckpointError(
                f"checkpoint {path}: tensor '{name}' is in two shards: {folder / shards[0]} and {folder / shards[1]}"
            )
        if name not in weight_map:
            raise CheckpointError(
                f"checkpoint {path}: tensor '{name}' is in shard {folder / shards[0]}, but the index does not list it"
            )
        if weight_map[name] != shards[0]:
            raise CheckpointError(
                f"checkpoint {path}: tensor '{name}' is in shard {folder / shards[0]}, "
                f"but the index places it in shard '{weight_map[name]}'"
            )
    for name, shard in weight_map.items():
        if name not in headers[shard]:
            raise CheckpointError(
                f"checkpoint {path}: the index places tensor '{name}' in shard {folder / shard}, which does not hold it"
            )
    return {name: (folder / shard, headers[shard][name]) for name, shard in weight_map.items()}


def read_tensor(path: Path, entry: HeaderEntry) -> np.ndarray:
    """The value of one tensor, reading only its byte range (for `inline_weights`)."""
    assert entry.elem.numpy is not None
    if entry.encoding not in ("", "F32", "F16", "BF16"):
        raise CheckpointError(
            f"checkpoint {path}: tensor '{entry.name}' is {entry.encoding}; inline_weights embeds "
            "F32, F16 and BF16 GGUF tensors, not quantized ones"
        )
    size = entry.end - entry.begin
    try:
        with open(path, "rb") as f:
            f.seek(entry.payload_start + entry.begin)
            raw = f.read(size)
    except OSError as e:
        raise CheckpointError(f"checkpoint {path}: cannot read: {e.strerror}") from None
    if len(raw) != size:
        raise CheckpointError(
            f"checkpoint {path}: tensor '{entry.name}' needs {size} bytes, the file ends after {len(raw)}"
        )
    return np.frombuffer(raw, dtype=entry.elem.numpy.newbyteorder("<")).reshape(entry.shape)


def parse_header(raw: bytes, where: str, payload_size: int | None) -> dict[str, HeaderEntry]:
    """Validate a safetensors JSON header; `payload_size`, when known, bounds the offsets."""
    header = _strict_json(raw, f"checkpoint {where}: header")
    if not isinstance(header, dict):
        raise CheckpointError(f"checkpoint {where}: header is not a JSON object")
    entries: dict[str, HeaderEntry] = {}
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise CheckpointError(f"checkpoint {where}: __metadata__ is not an object of strings")
            continue
        entries[name] = _entry(where, name, info)
    _check_ranges(where, entries.values(), payload_size)
    return entries


def _strict_json(raw: bytes, what: str) -> object:
    """Parse JSON as safetensors does: UTF-8, no repeated key (Python would keep the last silently),
    no NaN or Infinity (not JSON)."""

    def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
        seen: dict[str, object] = {}
        for key, value in pairs:
            if key in seen:
                raise ValueError(f"key '{key}' appears twice")
            seen[key] = value
        return seen

    def not_json(literal: str) -> object:
        raise ValueError(f"{literal} is not JSON")

    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=unique, parse_constant=not_json)
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{what} is not valid JSON: {e}") from None


def _entry(where: str, name: str, info: object) -> HeaderEntry:
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise CheckpointError(f"checkpoint {where}: tensor '{name}' needs exactly dtype, shape, data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype not in dtypes.SAFETENSORS_NAMES:
        raise CheckpointError(f"checkpoint {where}: tensor '{name}' has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise CheckpointError(f"checkpoint {where}: tensor '{name}' has a malformed shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise CheckpointError(f"checkpoint {where}: tensor '{name}' has malformed data_offsets {offsets!r}")
    elem = dtypes.by_name(dtypes.SAFETENSORS_NAMES[dtype])
    nbytes = math.prod(shape) * elem.bits // 8
    if offsets[1] - offsets[0] != nbytes:
        raise CheckpointError(
            f"checkpoint {where}: tensor '{name}' of shape {shape} and dtype {dtype} needs {nbytes} bytes, "
            f"its offsets span {offsets[1] - offsets[0]}"
        )
    return HeaderEntry(name, elem, tuple(shape), offsets[0], offsets[1])


def _check_ranges(where: str, entries: Iterable[HeaderEntry], payload_size: int | None) -> None:
    """The byte ranges must tile the payload: no overlap, no hole, nothing past its end."""
    position = 0
    for e in sorted(entries, key=lambda e: (e.begin, e.end)):
        if e.begin < position:
            raise CheckpointError(f"checkpoint {where}: tensor '{e.name}' overlaps the tensor before it")
        if e.begin > position:
            raise CheckpointError(f"checkpoint {where}: a hole of {e.begin - position} bytes before '{e.name}'")
        position = e.end
    if payload_size is not None and position != payload_size:
        raise CheckpointError(f"checkpoint {where}: tensors cover {position} bytes of a {payload_size}-byte payload")


def supplies(encoding: str, wanted: dtypes.ElementType) -> bool:
    """Whether a checkpoint tensor stored as `encoding` (a safetensors dtype or a ggml type) supplies
    a graph weight of type `wanted`: the generated module's own rule (`Weights.load` applies it
    again), so the build accepts exactly what the load will."""
    from loam.runtime.weights import encoding_supplies

    return wanted.numpy is not None and encoding_supplies(encoding, wanted.numpy) is True


def stored_encoding(entry: HeaderEntry) -> str:
    """How the checkpoint stores `entry`: its ggml type, or its safetensors dtype name."""
    if entry.encoding:
        return entry.encoding
    return next(st for st, name in dtypes.SAFETENSORS_NAMES.items() if name == entry.elem.name)


def describe(paths: Sequence[Path]) -> str:
    """The checkpoints as messages name them: `checkpoint A` or `checkpoints A, B`."""
    return f"checkpoint {paths[0]}" if len(paths) == 1 else f"checkpoints {', '.join(map(str, paths))}"


def check_weights(
    paths: Sequence[Path], found: Mapping[str, tuple[Path, HeaderEntry]], weights: Iterable[WeightSpec]
) -> list[str]:
    """Check every weight against the tensor of its name in `found` (graph name -> file, entry);
    return one note listing the tensors the graph never reads, if any.  Messages name the file
    holding the tensor (the checkpoints `paths`, for one that is absent) and, where the names
    differ, the tensor's name in the checkpoint."""
    read: set[str] = set()
    for w in weights:
        read.add(w.name)
        if w.name not in found:
            if len(paths) == 1:
                raise CheckpointError(f"{describe(paths)}: has no tensor '{w.name}', which the graph reads")
            raise CheckpointError(f"{describe(paths)}: none has tensor '{w.name}', which the graph reads")
        path, entry = found[w.name]
        tensor = f"tensor '{w.name}'" + (f" ('{entry.name}' in the checkpoint)" if entry.name != w.name else "")
        from loam.frontends.gguf import ENCODINGS

        encoding = stored_encoding(entry)
        if entry.encoding and entry.encoding not in ENCODINGS:
            raise CheckpointError(
                f"checkpoint {path}: {tensor} is {entry.encoding}, which Loam cannot load "
                f"(it reads {', '.join(ENCODINGS)})"
            )
        if not supplies(encoding, w.elem):
            stored = entry.encoding or entry.elem.name
            raise CheckpointError(
                f"checkpoint {path}: {tensor} is {stored}, the graph reads it as {w.elem.name}, "
                f"and {stored} does not convert to {w.elem.name} without loss"
            )
        if len(entry.shape) != len(w.axes):
            raise CheckpointError(
                f"checkpoint {path}: {tensor} has rank {len(entry.shape)}, the graph's has rank "
                f"{len(w.axes)} ({', '.join(a for a, _ in w.axes)})"
            )
        for i, ((axis, extent), got) in enumerate(zip(w.axes, entry.shape, strict=True)):
            if extent != got:
                raise CheckpointError(
                    f"checkpoint {path}: {tensor} axis {i} ({axis}) is {extent} in the graph, {got} in the checkpoint"
                )
    unread = [name for name in found if name not in read]
    if not unread:
        return []
    listed = ", ".join(unread)
    return [f"{describe(paths)}: {len(unread)} tensor{'s' if len(unread) > 1 else ''} the graph never reads: {listed}"]
