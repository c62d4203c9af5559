"""A small GGUF writer for test fixtures, written from the format's description, not from Loam's reader.

`gguf_bytes` lays out a version 2 or 3 little-endian GGUF file exactly as llama.cpp does: header,
metadata, tensor infos, padding to the alignment, then each tensor's bytes padded to the alignment.
Values are typed by `Typed` or inferred (bool, int -> UINT32 / INT64 when negative, float -> FLOAT32,
str, list of one kind -> ARRAY).  `quantize` encodes f32 values as Q8_0, Q4_0 or Q4_1 blocks the
way ggml's reference quantizers do, so load-time tests can compare dequantized values.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TYPE_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8, "Q6_K": 14, "I32": 26, "BF16": 30}
BLOCKS = {"F32": (1, 4), "F16": (1, 2), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q8_0": (32, 34), "Q6_K": (256, 210)}
BLOCKS |= {"I32": (1, 4), "BF16": (1, 2)}

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR_FORMATS = {
    UINT8: "<B",
    INT8: "<b",
    UINT16: "<H",
    INT16: "<h",
    UINT32: "<I",
    INT32: "<i",
    FLOAT32: "<f",
    BOOL: "<?",
    UINT64: "<Q",
    INT64: "<q",
    FLOAT64: "<d",
}


@dataclass(frozen=True)
class Typed:
    """A metadata value with its GGUF value type spelled out (`of`: an array's element type)."""

    kind: int
    value: object
    of: int | None = None


@dataclass(frozen=True)
class Tensor:
    """One tensor: its ggml type name, numpy-order shape and raw bytes (computed when None)."""

    type_name: str
    shape: tuple[int, ...]
    data: bytes | None = None

    def raw(self) -> bytes:
        if self.data is not None:
            return self.data
        block, block_bytes = BLOCKS[self.type_name]
        count = int(np.prod(self.shape, dtype=np.int64))
        return bytes(range(256)) * (count // block * block_bytes // 256) + bytes(count // block * block_bytes % 256)


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _infer(value: object) -> Typed:
    if isinstance(value, Typed):
        return value
    if isinstance(value, bool):
        return Typed(BOOL, value)
    if isinstance(value, int):
        return Typed(UINT32 if value >= 0 else INT64, value)
    if isinstance(value, float):
        return Typed(FLOAT32, value)
    if isinstance(value, str):
        return Typed(STRING, value)
    if isinstance(value, list):
        return Typed(ARRAY, value, _infer(value[0]).kind if value else UINT8)
    raise TypeError(f"no GGUF type for {value!r}")


def _value(kind: int, value: object, of: int | None = None) -> bytes:
    if kind in _SCALAR_FORMATS:
        return struct.pack(_SCALAR_FORMATS[kind], value)
    if kind == STRING:
        assert isinstance(value, str)
        return _string(value)
    assert kind == ARRAY and isinstance(value, list) and of is not None
    return struct.pack("<IQ", of, len(value)) + b"".join(_value(of, v) for v in value)


def _pad(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def gguf_bytes(
    tensors: Mapping[str, Tensor], metadata: Mapping[str, object] | None = None, *, version: int = 3
) -> bytes:
    """The bytes of a GGUF file holding `tensors` (in order) and `metadata`."""
    metadata = dict(metadata or {})
    alignment = metadata.get("general.alignment", 32)
    alignment = alignment.value if isinstance(alignment, Typed) else alignment
    assert isinstance(alignment, int)
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata)))
    for key, raw_value in metadata.items():
        typed = _infer(raw_value)
        out += _string(key) + struct.pack("<I", typed.kind) + _value(typed.kind, typed.value, typed.of)
    offset = 0
    payloads: list[bytes] = []
    for name, tensor in tensors.items():
        data = tensor.raw()
        dims = tuple(reversed(tensor.shape))  # GGUF lists the fastest-varying dimension first
        out += _string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, TYPE_IDS[tensor.type_name], offset)
        payloads.append(data + bytes(_pad(len(data), alignment) - len(data)))
        offset += len(payloads[-1])
    out += bytes(_pad(len(out), alignment) - len(out))
    return bytes(out) + b"".join(payloads)


def write_gguf(path: Path, tensors: Mapping[str, Tensor], metadata: Mapping[str, object] | None = None) -> Path:
    path.write_bytes(gguf_bytes(tensors, metadata))
    return path


def quantize(values: np.ndarray, type_name: str) -> bytes:
    """f32 `values` (last axis a multiple of 32) as ggml blocks of `type_name`, ggml's reference way."""
    blocks = np.asarray(values, dtype=np.float32).reshape(-1, 32)
    out = bytearray()
    for x in blocks:
        if type_name == "Q8_0":
            d = float(np.abs(x).max()) / 127
            q = np.round(x / d) if d else np.zeros(32)
            out += np.float16(d).tobytes() + q.astype(np.int8).tobytes()
        elif type_name == "Q4_0":
            peak = float(x[np.argmax(np.abs(x))])
            d = peak / -8
            inv = 1 / d if d else 0.0
            q = np.minimum(15, (x * inv + 8.5).astype(np.int8)).astype(np.uint8)
            out += np.float16(d).tobytes() + (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()
        elif type_name == "Q4_1":
            lo, hi = float(x.min()), float(x.max())
            d = (hi - lo) / 15
            inv = 1 / d if d else 0.0
            q = np.minimum(15, ((x - lo) * inv + 0.5).astype(np.int8)).astype(np.uint8)
            out += np.float16(d).tobytes() + np.float16(lo).tobytes() + (q[:16] | (q[16:] << 4)).tobytes()
        else:
            raise ValueError(type_name)
    return bytes(out)
