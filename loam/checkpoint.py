"""Checkpoint headers, read and checked at build time without reading any tensor's bytes.

A safetensors file starts with an 8-byte little-endian header length and a JSON header naming each
tensor's dtype, shape and byte range in the payload that follows.  The build reads only those bytes,
checks the header is well formed, and checks every weight the graph does not carry against it.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np

from loam import dtypes
from loam.errors import CheckpointError

# safetensors itself refuses headers above 100 MB; so does Loam, before allocating them.
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class HeaderEntry:
    """One tensor of a checkpoint header."""

    name: str
    elem: dtypes.ElementType
    shape: tuple[int, ...]
    begin: int  # byte range within the payload
    end: int
    payload_start: int = 0  # file offset of the payload (8 + header length)


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


def read_headers(paths: Iterable[Path]) -> dict[str, tuple[Path, HeaderEntry]]:
    """Every tensor of several checkpoint files (shards), with the file holding it.

    A tensor in two files is refused naming both: which one the graph meant is not for Loam to guess.
    """
    found: dict[str, tuple[Path, HeaderEntry]] = {}
    for path in paths:
        for name, entry in read_safetensors_header(path).items():
            if name in found:
                raise CheckpointError(f"tensor '{name}' is in two checkpoints: {found[name][0]} and {path}")
            found[name] = (path, entry)
    return found


def read_tensor(path: Path, entry: HeaderEntry) -> np.ndarray:
    """The value of one tensor, reading only its byte range (for `inline_weights`)."""
    assert entry.elem.numpy is not None
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
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"checkpoint {where}: header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"checkpoint {where}: header is not a JSON object")
    entries: dict[str, HeaderEntry] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        entries[name] = _entry(where, name, info)
    _check_ranges(where, entries.values(), payload_size)
    return entries


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


@cache
def _readable_by_the_module() -> frozenset[str]:
    """Loam names of the checkpoint element types the generated module can read."""
    from loam.backends.numpy_runtime import safetensors_dtypes

    table = safetensors_dtypes()
    return frozenset(loam for st, loam in dtypes.SAFETENSORS_NAMES.items() if table[st] is not None)


def convertible(stored: dtypes.ElementType, wanted: dtypes.ElementType) -> bool:
    """Whether a checkpoint element type supplies a graph element type: the generated module's own
    rule (`Weights.load` applies it again), so the build accepts exactly what the load will."""
    from loam.backends.numpy_runtime import _convertible

    if stored.name not in _readable_by_the_module() or wanted.numpy is None:
        return False
    assert stored.numpy is not None
    return _convertible(stored.numpy, wanted.numpy)


def check_weights(where: str, header: Mapping[str, HeaderEntry], weights: Iterable[WeightSpec]) -> list[str]:
    """Check every weight against the header; return notes (tensors the graph never reads)."""
    read: set[str] = set()
    for w in weights:
        read.add(w.name)
        entry = header.get(w.name)
        if entry is None:
            raise CheckpointError(f"checkpoint {where}: has no tensor '{w.name}', which the graph reads")
        if not convertible(entry.elem, w.elem):
            raise CheckpointError(
                f"checkpoint {where}: tensor '{w.name}' is {entry.elem.name}, the graph reads it as {w.elem.name}, "
                f"and {entry.elem.name} does not convert to {w.elem.name} without loss"
            )
        if len(entry.shape) != len(w.axes):
            raise CheckpointError(
                f"checkpoint {where}: tensor '{w.name}' has rank {len(entry.shape)}, the graph's has rank "
                f"{len(w.axes)} ({', '.join(a for a, _ in w.axes)})"
            )
        for i, ((axis, extent), got) in enumerate(zip(w.axes, entry.shape, strict=True)):
            if extent != got:
                raise CheckpointError(
                    f"checkpoint {where}: tensor '{w.name}' axis {i} ({axis}) is {extent} in the graph, "
                    f"{got} in the checkpoint"
                )
    unread = sorted(set(header) - read)
    return [f"checkpoint {where}: {len(unread)} tensors the graph never reads: {', '.join(unread)}"] if unread else []
