"""The browser module's weights: safetensors shards of at most 16 MiB and a manifest of their digests.

A page downloads weights in pieces it can fetch, cache and check one by one (WebLLM and
transformers.js ship theirs the same way).  Tensors go into shards in upload order; a shard is
closed before a tensor that would take it past the limit, and a tensor larger than one shard is
split along its first axis into `NAME#0`, `NAME#1`, ... (model.js joins them).  `manifest.json`
lists each shard's file name, size and sha256; model.js refuses a shard that differs from it.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHARD_LIMIT = 16 * 2**20
"""The most bytes one shard file holds (header included)."""


@dataclass(frozen=True)
class Resident:
    """One tensor forward uploads: its name, device form, and the names of its axes."""

    name: str
    array: np.ndarray
    axes: tuple[str, ...]
    blocks: bool = False  # a weight's ggml blocks: uint8 rows the packed kernels widen

    @property
    def dtype(self) -> str:
        """The device form's dtype (one of `DTYPES`: what the device reads, f32, i32 or u32, or a block's bytes)."""
        return self.array.dtype.name


DTYPES = {"float32": "F32", "int32": "I32", "uint32": "U32", "uint8": "U8"}


def _pieces(resident: Resident, room: int) -> list[tuple[str, np.ndarray]]:
    """`resident` whole, or split along axis 0 into pieces of at most `room` bytes each."""
    array = resident.array
    if array.nbytes <= room or array.ndim == 0:
        return [(resident.name, array)]
    row = array.nbytes // max(array.shape[0], 1)
    rows = max(1, room // max(row, 1))
    return [(f"{resident.name}#{k}", array[at : at + rows]) for k, at in enumerate(range(0, array.shape[0], rows))]


def _safetensors(tensors: Sequence[tuple[str, np.ndarray]]) -> bytes:
    header: dict[str, object] = {"__metadata__": {"format": "loam-browser"}}
    offset = 0
    for name, array in tensors:
        header[name] = {"dtype": DTYPES[array.dtype.name], "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}  # fmt: skip
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(np.ascontiguousarray(a).tobytes() for _, a in tensors)


def shard_files(residents: Sequence[Resident], limit: int = SHARD_LIMIT) -> list[tuple[str, bytes]]:
    """The shard files (name, bytes) holding `residents`, each at most `limit` bytes."""
    room = limit - 4096  # a header's worst case for the few tensors a shard holds
    shards: list[list[tuple[str, np.ndarray]]] = [[]]
    used = 0
    for resident in residents:
        for name, piece in _pieces(resident, room):
            if shards[-1] and used + piece.nbytes > room:
                shards.append([])
                used = 0
            shards[-1].append((name, piece))
            used += piece.nbytes
    files = [(f"shard-{k:05d}.safetensors", _safetensors(tensors)) for k, tensors in enumerate(shards)]
    for name, data in files:
        assert len(data) <= limit, f"{name}: {len(data)} bytes"
    return files


def write_weights(folder: Path, residents: Sequence[Resident], limit: int = SHARD_LIMIT) -> list[Path]:
    """Write the shards and `manifest.json` into `folder` (made if missing); the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    listed = []
    for name, data in shard_files(residents, limit):
        (folder / name).write_bytes(data)
        written.append(folder / name)
        listed.append({"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"format": "loam-browser-weights", "version": 1, "shards": listed,
                "tensors": [r.name for r in residents]}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    written.append(folder / "manifest.json")
    for stale in folder.glob("shard-*.safetensors"):  # an earlier build's shards this one does not list
        if stale not in written:
            stale.unlink()
    return written
