"""GGUF checkpoints at build time: the header and tensor infos, read through a memory map.

The parser is `loam.runtime.gguf.parse_gguf_header`, the same function the generated module runs
at load time, so the build and the load cannot disagree about what a file holds.  It is given an
`mmap` of the file: only the pages holding the header are touched, so a multi-gigabyte GGUF costs
the build its header, and a file whose data section was cut off still builds (the load names what
is missing).

Each tensor becomes a `HeaderEntry` whose `encoding` is its ggml type and whose `elem` is the
element type the graph reads it as: F16 stays f16, BF16 stays bf16, F32 and the quantized types
Loam dequantizes (Q8_0, Q4_0, Q4_1) read as f32.
"""

from __future__ import annotations

import mmap
from pathlib import Path

from loam.core import dtypes
from loam.core.errors import CheckpointError
from loam.frontends.headers import HeaderEntry
from loam.runtime.gguf import parse_gguf_header

MAGIC = b"GGUF"

# ggml type -> the element type it is read as (what it supplies is the module's own rule,
# `loam.runtime.weights.encoding_supplies`, which `loam.frontends.checkpoint.supplies` applies at build time).
ENCODINGS: dict[str, str] = {"F32": "f32", "F16": "f16", "BF16": "bf16", "Q8_0": "f32", "Q4_0": "f32", "Q4_1": "f32"}
"""The ggml types the generated module loads; a tensor of another type is refused if the graph reads it."""

# Types the module cannot load still get a truthful element type in the entry, for messages.
_OTHER_ELEMS = {"I8": "i8", "I16": "i16", "I32": "i32", "I64": "i64", "F64": "f64"}


def is_gguf(path: Path) -> bool:
    """Whether `path` is a GGUF file: named `.gguf`, or starting with the GGUF magic."""
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def read_gguf_header(path: Path) -> tuple[dict[str, object], dict[str, HeaderEntry]]:
    """The metadata and tensors of the GGUF file at `path`, read from its header alone."""
    problem: str | None = None
    try:
        with open(path, "rb") as f:
            if path.stat().st_size == 0:
                problem = "not a GGUF file: it is empty"  # and mmap refuses an empty file
            else:
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                    try:
                        metadata, tensors = parse_gguf_header(mapped)
                    except ValueError as e:
                        # Keep only the message: the exception's frames hold views of the map,
                        # which must be gone before the map closes.
                        problem = str(e)
    except OSError as e:
        raise CheckpointError(f"checkpoint {path}: cannot read: {e.strerror}") from None
    if problem is not None:
        raise CheckpointError(f"checkpoint {path}: {problem}")
    entries = {name: _entry(name, *info) for name, info in tensors.items()}
    return metadata, entries


def _entry(name: str, type_name: str, shape: tuple[int, ...], start: int, nbytes: int) -> HeaderEntry:
    elem = ENCODINGS[type_name] if type_name in ENCODINGS else _OTHER_ELEMS.get(type_name, "f32")
    return HeaderEntry(name, dtypes.by_name(elem), shape, start, start + nbytes, encoding=type_name)


def header_extent(path: Path) -> int:
    """How many leading bytes of the GGUF file at `path` the build reads (header, metadata, tensor
    infos and the padding after them: the data section's start), for the build cache's key.  A file
    holding no tensors is all header, and a malformed one (the build refuses it) is keyed whole."""
    try:
        _, entries = read_gguf_header(path)
    except CheckpointError:
        return path.stat().st_size
    return min((e.begin for e in entries.values()), default=path.stat().st_size)
