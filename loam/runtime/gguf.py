"""A GGUF reader written once: the build checks a GGUF checkpoint with it, the generated module loads one.

GGUF (llama.cpp's checkpoint format, versions 2 and 3) is little-endian::

    magic "GGUF" | u32 version | u64 tensor count | u64 metadata count
    metadata:     string key | u32 value type | value                (strings: u64 length + UTF-8)
    tensor infos: string name | u32 n_dims | u64 dims[n_dims] | u32 ggml type | u64 offset
    padding to `general.alignment` (default 32), then the data section; each offset is relative to it

GGUF lists a tensor's fastest-varying dimension first, so the numpy shape is the dims reversed.

Like the rest of `loam.runtime`, each piece here is a self-contained top-level function whose source
is copied into a generated module, so it imports nothing and reads only numpy, the builtins and the
other pieces.  It works on any bytes-like object (bytes, memoryview, mmap) and
touches only the header: the build maps the file and reads no tensor data, and a file whose data
section is cut off still parses (the loader checks each tensor's bytes against `len(data)` itself).
Malformed input raises `ValueError` naming what is wrong; callers wrap it into `CheckpointError` or
`LoadError`.  `parse_gguf_header` and `graph_name_of` have public names because the build calls
them too (`loam.frontends.gguf`, `loam.frontends.checkpoint`).

- `_ggml_types`: ggml type number -> (name, elements per block, bytes per block).
- `parse_gguf_header`: the header -> (metadata, tensors), every offset and length checked.
- `graph_name_of`: a checkpoint tensor's name under `[checkpoint_names]` rules (glob -> template).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _ggml_types() -> dict[int, tuple[str, int, int]]:
    """ggml type number -> (name, elements per block, bytes per block), as ggml.h numbers them."""
    return {
        0: ("F32", 1, 4),
        1: ("F16", 1, 2),
        2: ("Q4_0", 32, 18),
        3: ("Q4_1", 32, 20),
        6: ("Q5_0", 32, 22),
        7: ("Q5_1", 32, 24),
        8: ("Q8_0", 32, 34),
        9: ("Q8_1", 32, 36),
        10: ("Q2_K", 256, 84),
        11: ("Q3_K", 256, 110),
        12: ("Q4_K", 256, 144),
        13: ("Q5_K", 256, 176),
        14: ("Q6_K", 256, 210),
        15: ("Q8_K", 256, 292),
        16: ("IQ2_XXS", 256, 66),
        17: ("IQ2_XS", 256, 74),
        18: ("IQ3_XXS", 256, 98),
        19: ("IQ1_S", 256, 50),
        20: ("IQ4_NL", 32, 18),
        21: ("IQ3_S", 256, 110),
        22: ("IQ2_S", 256, 82),
        23: ("IQ4_XS", 256, 136),
        24: ("I8", 1, 1),
        25: ("I16", 1, 2),
        26: ("I32", 1, 4),
        27: ("I64", 1, 8),
        28: ("F64", 1, 8),
        29: ("IQ1_M", 256, 56),
        30: ("BF16", 1, 2),
        34: ("TQ1_0", 256, 54),
        35: ("TQ2_0", 256, 66),
    }


def parse_gguf_header(data: object) -> tuple[dict[str, object], dict[str, tuple[str, tuple[int, ...], int, int]]]:
    """Parse a GGUF header: (metadata key -> value, tensor name -> (ggml type name, numpy shape,
    absolute byte offset of its data, its length in bytes)).  Reads nothing past the tensor infos.

    Refuses, with a ValueError naming the fault: a wrong magic, a version other than 2 or 3 (and a
    big-endian file), a header cut short, a string that is not UTF-8, an unknown value or ggml type,
    a repeated key or tensor name, a bad `general.alignment`, more than 4 dims, a quantized row not
    a whole number of blocks, and offsets that are unaligned or do not follow each other as ggml
    lays tensors out (in order, each padded to the alignment).
    """
    # Fixed-size value types: type number -> (numpy dtype, size); 7 (bool) is one byte.
    scalars = {
        0: ("<u1", 1),
        1: ("<i1", 1),
        2: ("<u2", 2),
        3: ("<i2", 2),
        4: ("<u4", 4),
        5: ("<i4", 4),
        6: ("<f4", 4),
        7: ("<u1", 1),
        10: ("<u8", 8),
        11: ("<i8", 8),
        12: ("<f8", 8),
    }
    ggml = _ggml_types()
    with memoryview(data).cast("B") as view:  # type: ignore[arg-type]  # bytes-like, or a TypeError
        size = len(view)
        pos = 0

        def take(n: int, what: str) -> memoryview:
            nonlocal pos
            if n > size - pos:
                raise ValueError(f"the header is cut short: {what} at byte {pos} needs {n} bytes, {size - pos} remain")
            pos += n
            return view[pos - n : pos]

        def uint(n: int, what: str) -> int:
            return int.from_bytes(take(n, what), "little")

        def string(what: str) -> str:
            n = uint(8, f"the length of {what}")
            raw = take(n, what)
            try:
                return bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{what} at byte {pos - n} is not UTF-8") from None

        def value(kind: int, what: str, depth: int) -> object:
            if kind in scalars:
                dtype, width = scalars[kind]
                item = np.frombuffer(take(width, what), dtype=dtype)[0].item()
                return bool(item) if kind == 7 else item
            if kind == 8:
                return string(what)
            if kind == 9 and depth == 0:
                inner = uint(4, f"the element type of {what}")
                count = uint(8, f"the length of {what}")
                if inner in scalars:
                    dtype, width = scalars[inner]
                    if count > (size - pos) // width:
                        raise ValueError(
                            f"the header is cut short: {what} at byte {pos} holds {count} values of "
                            f"{width} bytes, {size - pos} bytes remain"
                        )
                    items = np.frombuffer(take(count * width, what), dtype=dtype).tolist()
                    return [bool(i) for i in items] if inner == 7 else items
                if inner == 8 or (inner == 9 and count == 0):
                    return [value(inner, f"{what}[{i}]", depth + 1) for i in range(count)]
                raise ValueError(f"{what} is an array of value type {inner}, which GGUF does not define")
            raise ValueError(f"{what} has value type {kind}, which GGUF does not define")

        magic = bytes(take(4, "the magic")) if size >= 4 else b""
        if magic != b"GGUF":
            raise ValueError(f"not a GGUF file: it starts with {bytes(view[:4])!r}, not b'GGUF'")
        version = uint(4, "the version")
        if version not in (2, 3):
            if version & 0xFFFF == 0 and int.from_bytes(view[4:8], "big") in (2, 3):
                raise ValueError("a big-endian GGUF file; only little-endian GGUF is read")
            raise ValueError(f"GGUF version {version}; only versions 2 and 3 are read")
        n_tensors = uint(8, "the tensor count")
        n_kv = uint(8, "the metadata count")

        metadata: dict[str, object] = {}
        for i in range(n_kv):
            key = string(f"metadata key {i}")
            kind = uint(4, f"the value type of metadata '{key}'")
            if key in metadata:
                raise ValueError(f"metadata key '{key}' appears twice")
            metadata[key] = value(kind, f"metadata '{key}'", 0)

        alignment = metadata.get("general.alignment", 32)
        if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"general.alignment is {alignment!r}, not a power of two")

        infos: list[tuple[str, str, tuple[int, ...], int, int]] = []
        seen: set[str] = set()
        for i in range(n_tensors):
            name = string(f"the name of tensor {i}")
            n_dims = uint(4, f"the rank of tensor '{name}'")
            if n_dims > 4:
                raise ValueError(f"tensor '{name}' has {n_dims} dims; GGUF holds at most 4")
            dims = [uint(8, f"dim {d} of tensor '{name}'") for d in range(n_dims)]
            type_id = uint(4, f"the type of tensor '{name}'")
            offset = uint(8, f"the offset of tensor '{name}'")
            if name in seen:
                raise ValueError(f"tensor '{name}' appears twice")
            seen.add(name)
            if type_id not in ggml:
                raise ValueError(f"tensor '{name}' has ggml type {type_id}, which this reader does not know")
            type_name, block, block_bytes = ggml[type_id]
            if dims and dims[0] % block:
                raise ValueError(
                    f"tensor '{name}' is {type_name}, whose blocks hold {block} values, but its rows hold {dims[0]}"
                )
            count = 1
            for d in dims:
                count *= d
            infos.append((name, type_name, tuple(reversed(dims)), offset, count // block * block_bytes))

        start = (pos + alignment - 1) // alignment * alignment
        expected = 0
        tensors: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, type_name, shape, offset, nbytes in infos:
            if offset != expected:
                raise ValueError(
                    f"tensor '{name}' has data offset {offset}; laid out in order, each tensor padded to "
                    f"{alignment} bytes, it starts at {expected}"
                )
            expected = (offset + nbytes + alignment - 1) // alignment * alignment
            tensors[name] = (type_name, shape, start + offset, nbytes)
    return metadata, tensors


def graph_name_of(name: str, rules: tuple[tuple[str, str], ...]) -> str:
    """The graph name of checkpoint tensor `name` under `[checkpoint_names]` rules, or `name` itself.

    A rule is (pattern, template): in the pattern `*` matches a run of characters other than `.`
    (one path segment, or part of one) and every other character matches itself; the first rule
    whose pattern matches the whole name wins, and its template's `*`s take what the pattern's
    matched, in order.
    """

    def match(parts: list[str], k: int, at: int, captured: list[str]) -> bool:
        """Whether name[at:] matches parts[k:] (each after a `*`); `captured` gathers the `*`s."""
        if k == len(parts):
            return at == len(name)
        literal, end = parts[k], at
        while True:
            if name.startswith(literal, end) and (k < len(parts) - 1 or end + len(literal) == len(name)):
                captured.append(name[at:end])
                if match(parts, k + 1, end + len(literal), captured):
                    return True
                captured.pop()
            if end >= len(name) or name[end] == ".":
                return False
            end += 1

    for pattern, template in rules:
        parts = pattern.split("*")
        captured: list[str] = []
        if name.startswith(parts[0]) and match(parts, 1, len(parts[0]), captured):
            pieces = template.split("*")
            return pieces[0] + "".join(got + piece for got, piece in zip(captured, pieces[1:], strict=False))
    return name


PIECES: dict[str, Callable[..., object]] = {
    "_ggml_types": _ggml_types,
    "parse_gguf_header": parse_gguf_header,
    "graph_name_of": graph_name_of,
}
