"""A generated module's `Weights.load`: checkpoints read, checked against the graph and decoded.

Every piece here is a plain top-level function whose source a generated numpy module copies in
(`PIECES`; `loam/runtime/__init__.py`), reading only numpy, the builtins and other pieces (some only
for a feature a model may lack: `FEATURES`).  The build runs `encoding_supplies` itself
(`loam.frontends.checkpoint.supplies`), so the build and the load agree on what a checkpoint supplies.

- `_strict_json`: JSON read strictly (a safetensors header, a Hugging Face index) by `json`, which
  the generated module imports.
- `_read_safetensors`, `_read_gguf` (over `loam.runtime.gguf.parse_gguf_header`),
  `_read_checkpoint` (one file or a mapping of shard name -> bytes): every tensor's encoding, shape
  and raw bytes, refusing malformed headers, byte ranges that overlap, leave holes or pass the end
  (naming the first tensor cut off); `_read_external`: ONNX external data files, which have no
  header, read by the table of offsets the build took from the graph.
- `_mapped`, `_check_index`: `Weights.load_file`'s read-only memory map (numpy.memmap), of one file,
  a list of shards or a Hugging Face `*.index.json` and the shards it names; `_unchanged`: each
  mapped file still as long as its map once the header is checked (a LoadError, never SIGBUS).
- `encoding_supplies`, `_check_weight`: one checkpoint tensor checked against the graph (dtype
  convertible without loss, rank, extents by axis, byte length), before any tensor is decoded.
- `_decoded`, `_load_weights`: the checked tensors as arrays of the graph's dtypes: zero-copy views of
  the checkpoint where the dtype and alignment allow, else converted once (dequantized with
  `loam.runtime.dequant`'s pieces); `_prepared`: a half weight's float32 form, made once by `Weights`.
- `_beside`: the weights a module keeps in the safetensors file written beside it, memory-mapped and
  checked to be that build's.
- `SAFETENSORS_DTYPES`: safetensors dtype name -> numpy dtype name (None where plain numpy has no
  such dtype), a table the module declares as a literal.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

from loam.runtime.dequant import bf16_to_f32, block_dtype, dequantized
from loam.runtime.errors import LoadError
from loam.runtime.gguf import graph_name_of, parse_gguf_header

FORMATS: tuple[str, ...] = ("safetensors", "gguf")
"""The checkpoint formats `Weights.load` reads: every one here; a module declares its own (the formats
of the checkpoints its build checked)."""

SAFETENSORS_DTYPES: dict[str, str | None] = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": None,  # read from its bits (`bf16_to_f32`), or viewed as ml_dtypes.bfloat16 by the graph
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U64": "uint64",
    "U32": "uint32",
    "U16": "uint16",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": None,
    "F8_E5M2": None,
}
"""safetensors dtype name -> numpy dtype name, None where plain numpy has no such dtype (BF16, the
float8s): the numpy dtypes of the types `loam.core.dtypes.SAFETENSORS_NAMES` names, which the runtime does
not import (tests/backends/test_weights_load.py holds the two together).  Public: the printer prints
it (`backends/numpy_runtime.py`)."""


def _strict_json(text: str) -> object:
    """`text` read as JSON by the standard library, refusing with a ValueError what `json.loads` alone
    takes: a key repeated in an object (Python would keep the last silently), NaN and the infinities
    (not JSON), and nesting deeper than the interpreter recurses (a RecursionError)."""

    def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
        found: dict[str, object] = {}
        for key, value in pairs:
            if key in found:
                raise ValueError(f"key '{key}' appears twice")
            found[key] = value
        return found

    def not_json(literal: str) -> object:
        raise ValueError(f"{literal} is not JSON")

    try:
        return json.loads(text, object_pairs_hook=unique, parse_constant=not_json)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _bytes_of(data: object, what: str) -> memoryview:
    """`data` (bytes, bytearray, memoryview, a numpy uint8 array such as a memmap) as flat bytes."""
    if not isinstance(data, (bytes, bytearray, memoryview, np.ndarray)):
        raise LoadError(
            f"a {what} is bytes, got {type(data).__name__} (a memoryview, a numpy uint8 array or, for a "
            "sharded checkpoint, a mapping of shard name -> bytes also serve)"
        )
    try:
        return memoryview(data).cast("B")  # type: ignore[arg-type]  # numpy's stubs do not call an ndarray a Buffer
    except (TypeError, ValueError) as e:
        raise LoadError(f"{what} is not one contiguous run of bytes: {e}") from None


def _read_safetensors(data: object, where: str = "checkpoint") -> dict[str, tuple[str, tuple[int, ...], memoryview]]:
    """The tensors of a safetensors checkpoint: name -> (dtype name, shape, raw little-endian bytes).

    The layout is an 8-byte little-endian header length, that many bytes of JSON mapping each
    tensor name to its dtype, shape and `data_offsets` (begin, end) into the payload that follows.
    Anything else is refused with a LoadError: nothing past the header is trusted until checked.
    No two byte ranges may overlap; a payload cut short names the first tensor, in payload order,
    it cannot hold.  Each range's length is checked against its shape (`_check_weight`) for the
    tensors the graph reads.
    """
    view = _bytes_of(data, where)
    if len(view) < 8:
        raise LoadError(f"{where} is {len(view)} bytes long, too short for its 8-byte header length")
    header_len = int.from_bytes(view[:8], "little")
    if header_len > len(view) - 8:
        raise LoadError(
            f"{where} header length {header_len} runs past the end of the data ({len(view) - 8} bytes follow)"
        )
    try:
        header = _strict_json(bytes(view[8 : 8 + header_len]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise LoadError(f"{where} header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise LoadError(f"{where} header is not a JSON object")
    payload = view[8 + header_len :]
    ranges: list[tuple[int, int, str]] = []
    tensors: dict[str, tuple[str, tuple[int, ...], memoryview]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise LoadError(f"{where}: tensor '{name}': header entry is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in SAFETENSORS_DTYPES:
            raise LoadError(f"{where}: tensor '{name}' has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise LoadError(f"{where}: tensor '{name}': shape {shape!r} is not a list of extents")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets):
            raise LoadError(f"{where}: tensor '{name}': data_offsets {offsets!r} are not two integers")
        if not 0 <= offsets[0] <= offsets[1]:
            raise LoadError(f"{where}: tensor '{name}': data_offsets {offsets!r} are not an ordered byte range")
        ranges.append((offsets[0], offsets[1], name))
        tensors[name] = (dtype, tuple(shape), payload[offsets[0] : offsets[1]])
    position, before = 0, ""
    for begin, end, name in sorted(ranges):
        if begin < position and end > begin:  # an empty tensor overlaps nothing
            raise LoadError(f"{where}: tensor '{name}' overlaps tensor '{before}' (bytes {begin}..{position})")
        if end > len(payload):
            raise LoadError(
                f"{where}: tensor '{name}': data_offsets [{begin}, {end}] lie outside the payload of "
                f"{len(payload)} bytes (the checkpoint is cut short, or its header is wrong)"
            )
        position, before = max(position, end), name
    return tensors


def _read_gguf(data: object, where: str = "checkpoint") -> dict[str, tuple[str, tuple[int, ...], memoryview]]:
    """The tensors of a GGUF checkpoint: name -> (ggml type name, numpy shape, raw bytes).

    The header is parsed by `parse_gguf_header`; a data section cut short names the first tensor, in file
    order, whose bytes it does not hold.
    """
    view = _bytes_of(data, where)
    try:
        _, infos = parse_gguf_header(view)
    except ValueError as e:
        raise LoadError(f"{where} is not a GGUF file Loam reads: {e}") from None
    tensors: dict[str, tuple[str, tuple[int, ...], memoryview]] = {}
    for name, (encoding, shape, start, nbytes) in sorted(infos.items(), key=lambda item: item[1][2]):
        if start + nbytes > len(view):
            raise LoadError(
                f"{where}: tensor '{name}' needs bytes {start}..{start + nbytes} of the file, which ends "
                f"after {len(view)} (the checkpoint is cut short)"
            )
        tensors[name] = (encoding, shape, view[start : start + nbytes])
    return tensors


def _read_checkpoint(
    data: object, external: tuple[tuple[str, str, int, int, str, tuple[int, ...]], ...] = ()
) -> dict[str, tuple[str, tuple[int, ...], memoryview, str]]:
    """Every tensor of a checkpoint: name -> (encoding, shape, raw bytes, shard name or "").

    `data` is one file's bytes (safetensors, or GGUF by its magic), or a mapping of shard name ->
    bytes; a tensor in two shards is refused naming both.  A module built from ONNX external data
    passes its table of where each such tensor lies (`external`, `_read_external`): the files it
    names are read by that table, any other shard as a checkpoint.
    """
    shards = dict(data.items()) if hasattr(data, "items") and not isinstance(data, np.ndarray) else {"": data}
    if not shards:
        raise LoadError("a sharded checkpoint needs at least one shard")
    found: dict[str, tuple[str, tuple[int, ...], memoryview, str]] = {}
    if external:
        shards, found = _read_external(shards, external)
    for shard, blob in shards.items():
        where = f"checkpoint shard '{shard}'" if shard else "checkpoint"
        view = _bytes_of(blob, where)
        read = _read_safetensors
        if bytes(view[:4]) == b"GGUF":
            if "gguf" not in FORMATS:
                raise LoadError(
                    f"{where} is a GGUF file, and this module was built to read safetensors checkpoints only; "
                    "build it with the GGUF file as its checkpoint to read one"
                )
            read = _read_gguf
        for name, (encoding, shape, raw) in read(view, where).items():
            if name in found:
                raise LoadError(f"tensor '{name}' is in two checkpoint shards: '{found[name][3]}' and '{shard}'")
            found[name] = (encoding, shape, raw, str(shard))
    return found


def _read_external(
    shards: dict[object, object], external: tuple[tuple[str, str, int, int, str, tuple[int, ...]], ...]
) -> tuple[dict[object, object], dict[str, tuple[str, tuple[int, ...], memoryview, str]]]:
    """The tensors a module built from ONNX external data reads from its data files, and the shards
    given that are none of those files (checkpoints, read as such).

    `external` holds, per tensor, (ONNX name, the file's location relative to the model, byte
    offset, byte length, encoding, shape), as the build read them from the graph: a data file has no
    header of its own (`model.onnx.data`, `model.onnx_data`, torch's and onnx's
    `save_as_external_data`).  One buffer given alone is the data file where the table names one;
    in a mapping, a key names a file by its location or by a path ending in it.  Each tensor's
    bytes are a view of its file at its offset; a range past the file's end is refused naming the
    tensor, and its length is checked against its shape with the graph's (`_check_weight`).
    """
    files = sorted({row[1] for row in external})
    given: dict[str, tuple[object, object]] = {}  # location -> (the key it was given under, its bytes)
    rest: dict[object, object] = {}
    if list(shards) == [""]:
        if len(files) != 1:
            raise LoadError(
                f"this module reads ONNX external data from {len(files)} files ({', '.join(files)}): give a "
                "mapping of file name -> bytes, or Weights.load_file(the model's folder)"
            )
        given[files[0]] = ("", shards[""])
    else:
        for key, blob in shards.items():
            text = str(key).replace("\\", "/")
            location = next((f for f in files if text == f or text.endswith("/" + f)), None)
            if location is None:
                rest[key] = blob
            elif location in given:
                raise LoadError(f"'{given[location][0]}' and '{key}' are both the external data file '{location}'")
            else:
                given[location] = (key, blob)
    views = {location: _bytes_of(blob, f"external data file '{location}'") for location, (_, blob) in given.items()}
    tensors: dict[str, tuple[str, tuple[int, ...], memoryview, str]] = {}
    for name, location, offset, length, encoding, shape in external:
        view = views.get(location)
        if view is None:
            listed = ", ".join(f"'{k}'" for k in shards) or "none"
            raise LoadError(
                f"tensor '{name}' is ONNX external data in '{location}', which is not among the files given ({listed})"
            )
        if offset + length > len(view):
            raise LoadError(
                f"external data file '{location}': tensor '{name}' needs bytes {offset}..{offset + length}, and the "
                f"file ends after {len(view)} (it is cut short, or is not this model's data)"
            )
        tensors[name] = (encoding, shape, view[offset : offset + length], location)
    return rest, tensors


def _mapped(path: object, external: tuple[tuple[str, str, int, int, str, tuple[int, ...]], ...] = ()) -> object:
    """A checkpoint file memory-mapped read-only; several paths (a list) or a Hugging Face
    `*.index.json` map to a dict of shard name -> mapping, for `_read_checkpoint`.  For a module
    built from ONNX external data (`external`), a folder maps each data file the table names in it
    (the model's folder as written: `model.onnx.data`, or one file per tensor)."""

    def one(p: object) -> np.ndarray:
        try:
            return np.memmap(p, dtype=np.uint8, mode="r")  # type: ignore[call-overload]  # a path as the caller gave it
        except (OSError, ValueError) as e:
            raise LoadError(f"checkpoint {str(p)!r}: cannot map the file: {e}") from None

    if isinstance(path, (list, tuple)):
        return {str(p): one(p) for p in path}
    text = str(path)
    folder = False
    if external:
        try:
            open(text, "rb").close()
        except IsADirectoryError:  # the model's folder: every data file the module reads, by location
            folder = True
        except OSError:
            pass  # mapping it says why
    if folder:
        files = {row[1]: row[0] for row in external}
        for location, name in files.items():
            parts = location.replace("\\", "/").split("/")
            if location.startswith(("/", "\\")) or ":" in parts[0] or ".." in parts:
                raise LoadError(f"tensor '{name}': external data location {location!r} is outside the folder")
        return {location: one(f"{text.rstrip('/') or '/'}/{location}") for location in sorted(files)}
    if not text.endswith(".json"):
        return one(path)
    try:
        with open(text, encoding="utf-8") as f:
            index = _strict_json(f.read())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise LoadError(f"checkpoint index {text!r}: cannot read it: {e}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise LoadError(f"checkpoint index {text!r}: no 'weight_map' of tensor name -> shard file")
    base = text.rpartition("/")[0] or "."
    shards: dict[str, object] = {}
    for name, shard in weight_map.items():
        if shard.startswith("/") or ".." in shard.replace("\\", "/").split("/"):
            raise LoadError(f"checkpoint index {text!r}: tensor '{name}' names shard {shard!r}, outside its folder")
        if shard not in shards:
            shards[shard] = one(f"{base}/{shard}")
    return shards


def _unchanged(data: object) -> None:
    """Refuse a memory-mapped checkpoint whose file no longer has the length it was mapped with.

    `Weights.load_file` reads the header from the map, then the payloads: a file truncated (or
    rewritten shorter) in between would end the process with SIGBUS on the first page past its new
    end.  This runs after the header check, before any payload is read.  (Once loaded, the weights
    view the map: a checkpoint must not be cut short while a module uses it.)"""
    for m in data.values() if isinstance(data, dict) else (data,):
        if not isinstance(m, np.memmap) or m.filename is None:  # bytes given, not a file mapped
            continue
        name = m.filename
        try:
            with open(name, "rb") as f:
                size = f.seek(0, 2)
        except OSError as e:
            raise LoadError(f"checkpoint {name!r}: cannot read it again: {e.strerror or e}") from None
        if size != len(m):
            raise LoadError(
                f"checkpoint {name!r} changed while it was loaded: {len(m)} bytes when mapped, {size} now; "
                "load it once it is written"
            )


def _check_index(path: object, tensors: dict[str, tuple[str, tuple[int, ...], memoryview, str]]) -> None:
    """Each tensor a Hugging Face index places is in the shard the index names."""
    text = str(path)
    if not text.endswith(".json"):
        return
    with open(text, encoding="utf-8") as f:
        index = _strict_json(f.read())
    assert isinstance(index, dict)
    for name, shard in index["weight_map"].items():
        got = tensors.get(name)
        if got is None:
            raise LoadError(f"checkpoint index {text!r} places tensor '{name}' in shard '{shard}', which lacks it")
        if got[3] != shard:
            raise LoadError(f"checkpoint index {text!r} places tensor '{name}' in shard '{shard}'; it is in '{got[3]}'")


def _convertible(source: np.dtype, target: np.dtype) -> bool:
    """Whether checkpoint dtype `source` supplies graph dtype `target`: same kind, without loss."""
    kinds = {"f": "float", "i": "int", "u": "int", "b": "bool"}
    return kinds.get(source.kind) == kinds.get(target.kind) and bool(np.can_cast(source, target, "safe"))


def encoding_supplies(encoding: str, target: np.dtype) -> bool | None:
    """Whether a checkpoint tensor stored as `encoding` supplies graph dtype `target` without loss;
    None where this module cannot decode `encoding` at all."""
    if encoding in ("Q8_0", "Q4_0", "Q4_1"):  # dequantized in float32, as ggml does
        return target.name in ("float32", "float64")
    if encoding == "BF16":  # widened from its bits, or viewed as bfloat16 where the graph reads that
        return target.name in ("bfloat16", "float32", "float64")
    source = SAFETENSORS_DTYPES.get(encoding)
    if source is None:
        return None
    return _convertible(np.dtype(source), target)


def _check_weight(
    entry: tuple[str, tuple[int, ...], memoryview, str] | None,
    name: str,
    dtype: str | type,
    axes: tuple[tuple[str, int | None], ...],
) -> None:
    """Refuse checkpoint tensor `entry` for graph weight `name` unless its encoding converts to
    `dtype` without loss, its extents are the graph's `axes` and its bytes are as many as they need.

    `axes` holds (axis name, extent) per axis, None where the graph leaves the extent open.  A
    dtype converts only without loss and within its kind (F16 to f32, I32 to i64): an integer
    tensor given for a float weight, or a wider float for a narrower one, is refused.
    """
    if entry is None:
        raise LoadError(f"tensor '{name}' is missing from the checkpoint")
    encoding, shape, raw, shard = entry
    where = f"the checkpoint shard '{shard}'" if shard else "the checkpoint"
    target = np.dtype(dtype)
    supplies = encoding_supplies(encoding, target)
    if supplies is None:
        raise LoadError(f"tensor '{name}' is {encoding} in {where}, which this module cannot read")
    if not supplies:
        raise LoadError(
            f"tensor '{name}' is {encoding} in {where}; the graph reads {target.name}, "
            f"which {encoding} does not convert to without loss"
        )
    if len(shape) != len(axes):
        raise LoadError(f"tensor '{name}' has rank {len(axes)} in the graph, {len(shape)} in {where}")
    for i, ((axis, extent), got) in enumerate(zip(axes, shape, strict=True)):
        if extent is not None and extent != got:
            raise LoadError(f"tensor '{name}' axis {i} ({axis}) is {extent} in the graph, {got} in {where}")
    count = 1
    for extent in shape:
        count *= extent
    blocks = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20)}
    if encoding in blocks:
        per, size = blocks[encoding]
        if count % per:
            raise LoadError(f"tensor '{name}' has {count} elements, not whole {encoding} blocks of {per}")
        need = count // per * size
    else:
        source = SAFETENSORS_DTYPES.get(encoding)
        need = count * (2 if source is None else np.dtype(source).itemsize)
    if len(raw) != need:
        raise LoadError(f"tensor '{name}' holds {len(raw)} bytes; shape {list(shape)} of {encoding} needs {need}")


def _decoded(entry: tuple[str, tuple[int, ...], memoryview, str], dtype: str | type) -> tuple[np.ndarray, np.ndarray]:
    """A checked checkpoint tensor as (the array it stores, the array of graph dtype `dtype`).

    Both are zero-copy views of the checkpoint's bytes where the stored dtype is the graph's and
    the bytes are aligned for it (read-only: the checkpoint is shared); otherwise the graph's array
    is converted once, here.  A quantized tensor's stored array is its raw bytes.
    """
    encoding, shape, raw, _ = entry
    target = np.dtype(dtype)
    count = 1
    for extent in shape:
        count *= extent
    if count == 0:
        return np.zeros(shape, target), np.zeros(shape, target)
    if encoding in ("Q8_0", "Q4_0", "Q4_1"):
        stored = np.frombuffer(raw, dtype=np.uint8)
        value = dequantized(encoding, raw, count).reshape(shape)
    elif encoding == "BF16":
        stored = np.frombuffer(raw, dtype="<u2").reshape(shape)
        if target.name == "bfloat16":
            stored = stored.view(target)
            value = stored
        else:
            value = bf16_to_f32(raw).reshape(shape)
    else:
        stored = np.frombuffer(raw, dtype=np.dtype(SAFETENSORS_DTYPES[encoding]).newbyteorder("<")).reshape(shape)
        value = stored
    if value.dtype != target or not value.flags.aligned:
        value = value.astype(target)  # converted once, into native order and memory of its own
    for array in (stored, value):
        if array.base is not None and array.flags.writeable:
            array.flags.writeable = False  # a view of the caller's buffer: forward never writes it
    return stored, value


def _load_weights(
    tensors: dict[str, tuple[str, tuple[int, ...], memoryview, str]],
    specs: tuple[tuple[str, str, str | type, tuple[tuple[str, int | None], ...]], ...],
    rules: tuple[tuple[str, str], ...],
    carried: dict[str, np.ndarray],
    packed: frozenset[str] = frozenset(),
    row_orders: dict[str, int] | None = None,
) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Every weight `specs` lists, checked (all of them, before any is decoded) and decoded.

    `rules` rename checkpoint tensors to graph names (`[checkpoint_names]`; empty: the names are
    the graph's); `carried` holds the weights the graph carries itself, taken from the module
    where the checkpoint lacks them.  A weight in `packed` that the checkpoint stores in ggml
    blocks keeps them (`_packed_blocks`: the packed kernels read it).  `row_orders` maps checkpoint
    tensors whose rows llama.cpp's converter interleaved for its rotary embedding to their head
    count; their rows are put back in the graph's order (`_rotary_rows`).  Returns the graph's
    arrays in `specs` order and each tensor as the checkpoint stores it, by graph name.
    """
    origin: dict[str, str] = {}
    if rules:
        renamed: dict[str, tuple[str, tuple[int, ...], memoryview, str]] = {}
        for key, entry in tensors.items():
            name = graph_name_of(key, rules)
            if name in renamed:
                raise LoadError(f"checkpoint tensors '{origin[name]}' and '{key}' both map to graph tensor '{name}'")
            renamed[name], origin[name] = entry, key
        tensors = renamed
    for name, _, dtype, axes in specs:
        if name not in carried or name in tensors:
            _check_weight(tensors.get(name), name, dtype, axes)
    values: list[np.ndarray] = []
    stored: dict[str, np.ndarray] = {}
    for name, _, dtype, _ in specs:
        if name in tensors:
            if name in packed and tensors[name][0] in ("Q4_0", "Q4_1", "Q8_0"):
                stored[name] = value = _packed_blocks(tensors[name])
            else:
                stored[name], value = _decoded(tensors[name], dtype)
            heads = (row_orders or {}).get(origin.get(name, name))
            if heads:
                value = value[_rotary_rows(value.shape[0], heads)]
        else:
            value = carried[name]
        values.append(value)
    return values, stored


def _packed_blocks(entry: tuple[str, tuple[int, ...], memoryview, str]) -> np.ndarray:
    """A checked 2-D ggml-quantized tensor [N, K] as its blocks [N, K / 32] (a read-only view)."""
    encoding, shape, raw, _ = entry
    blocks = np.frombuffer(raw, dtype=block_dtype(encoding)).reshape(shape[0], shape[1] // 32)
    blocks.flags.writeable = False
    return blocks


def _rotary_rows(rows: int, heads: int) -> np.ndarray:
    """The row order undoing llama.cpp's rotary interleave of a q or k projection of `heads` heads.

    Its converter stores row h*D + 2*i + j (D rows a head, i < D/2, j < 2) from the model's row
    h*D + j*D/2 + i, so the model's rows are the stored ones taken in this order.
    """
    if rows % (2 * heads):
        raise LoadError(f"a rotary projection of {rows} rows does not split into {heads} heads of pairs")
    return np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(rows)


def _beside(
    module_file: str,
    digest: str,
    data: object,
    specs: tuple[tuple[str, str, str | type, tuple[tuple[str, int | None], ...]], ...],
) -> dict[str, np.ndarray]:
    """The weights a module keeps in the safetensors file beside it, by ONNX name: read-only views of
    the file memory-mapped (`data`, where given, holds the same file's bytes: a module imported from its
    source text alone has no file to sit beside).

    The file is the module's own file name with `.safetensors` for `.py`.  It must be the one written
    with the module: its metadata holds the build's digest of the weights, and a file from another
    build is refused (its numbers would be another model's); each tensor is checked against the graph
    as a checkpoint's is, and a file cut short since it was mapped is a LoadError, not SIGBUS."""
    if data is None:
        path = (module_file[:-3] if module_file.endswith(".py") else module_file) + ".safetensors"
        try:
            data = np.memmap(path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise LoadError(
                f"the weights this module keeps beside it, {path!r}, cannot be mapped ({e}): copy that file "
                "with the module (it is written next to it at build time), or rebuild"
            ) from None
    else:
        path = "the weights given with the module"
    tensors = _read_checkpoint({path: data})  # a shard named by its path: refusals name the file
    _unchanged(data)
    view = _bytes_of(data, path)
    header = _strict_json(bytes(view[8 : 8 + int.from_bytes(view[:8], "little")]).decode("utf-8"))
    assert isinstance(header, dict), "_read_checkpoint refused any other header"
    metadata = header.get("__metadata__")
    found = metadata.get("loam_weights") if isinstance(metadata, dict) else None
    if found != digest:
        raise LoadError(
            f"{path} holds weights {found!r}, not the {digest!r} this module was built with: the file comes "
            "from another build; copy the file written with this module, or rebuild"
        )
    carried: dict[str, np.ndarray] = {}
    for name, _, dtype, axes in specs:
        if name in tensors:
            _check_weight(tensors[name], name, dtype, axes)
            carried[name] = _decoded(tensors[name], dtype)[1]
    return carried


def _prepared(weight: np.ndarray) -> np.ndarray:
    """A half weight (f16, bf16) in the float32 forward computes it in, converted once by `Weights`."""
    return np.asarray(weight).astype(np.float32)


PIECES: dict[str, Callable[..., object]] = {
    "_strict_json": _strict_json,
    "_bytes_of": _bytes_of,
    "_read_safetensors": _read_safetensors,
    "_read_gguf": _read_gguf,
    "_read_checkpoint": _read_checkpoint,
    "_read_external": _read_external,
    "_mapped": _mapped,
    "_check_index": _check_index,
    "_unchanged": _unchanged,
    "_convertible": _convertible,
    "encoding_supplies": encoding_supplies,
    "_check_weight": _check_weight,
    "_decoded": _decoded,
    "_load_weights": _load_weights,
    "_packed_blocks": _packed_blocks,
    "_rotary_rows": _rotary_rows,
    "_beside": _beside,
    "_prepared": _prepared,
}

FEATURES: dict[str, dict[str, tuple[str, ...]]] = {
    "gguf": {"_read_checkpoint": ("_read_gguf",), "_decoded": ("dequantized",)},
    "renames": {"_load_weights": ("graph_name_of",)},
    "packed": {"_load_weights": ("_packed_blocks",)},
    "row_orders": {"_load_weights": ("_rotary_rows",)},
    "external": {"_read_checkpoint": ("_read_external",)},
}
"""What a piece reads only for a feature some models use (feature -> piece -> pieces): GGUF checkpoints
(their reader and ggml dequantization), `[checkpoint_names]` rules, weights kept packed, rows
un-interleaved, ONNX external data read by the graph's table of offsets.  A module without the feature
never reaches the branches that read them, so it does not carry them; `_read_checkpoint` refuses a GGUF
file by `FORMATS`, naming why."""
