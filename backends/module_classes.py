"""The classes and constants a generated module declares besides `forward`, as source text.

Shared by every backend's module printer (`loam.backends.module_printer`): one marker class per
axis, `class Weights` (checked loading of a checkpoint, the carried weights), `class Outputs` (a
named tuple written out by hand, as `collections.namedtuple` would make it), and the byte literals
of folded constants and carried weights.  A backend keeping more per `Weights` (the WGSL module's
device buffers) names the extra attributes; nothing else here depends on the backend.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

import numpy as np
from xdsl.ir import Attribute

from loam.backends.module_text import axes_type, dtype_source, numpy_dtype, tuple_py
from loam.core.dtypes import SAFETENSORS_NAMES
from loam.core.errors import LoamError
from loam.dialects.build_contract import PACKED
from loam.dialects.kernel import WeightOp

EMBED_ALIGN = 64
"""Byte alignment of each tensor within the embedded weights' one bytes literal."""


def to_numpy(attr: Attribute, what: str) -> np.ndarray:
    to_numpy = getattr(attr, "to_numpy", None)
    if to_numpy is None:
        raise LoamError(f"{what} carries {attr}, not a #graph.data value")
    return np.asarray(to_numpy())


def _little_bytes(arr: np.ndarray) -> tuple[bytes, str]:
    """`arr`'s elements as little-endian bytes, and its dtype as the module spells it."""
    if arr.dtype.type.__module__ != "numpy":  # one of ml_dtypes' types: its bits, little-endian
        bits = f"<u{arr.dtype.itemsize}"
        return np.ascontiguousarray(arr).view(bits[1:]).astype(bits).tobytes(), f"ml_dtypes.{arr.dtype.name}"
    little = arr.dtype.newbyteorder("<") if arr.dtype.byteorder not in ("|", "=") else arr.dtype
    return np.ascontiguousarray(arr, dtype=little).tobytes(), repr(little.str)


def embedded_bytes(carried: Sequence[tuple[WeightOp, str]]) -> tuple[bytes, list[str]]:
    """The carried weights' bytes as one literal, and their `_EMBEDDED` rows (offsets aligned)."""
    blob = bytearray()
    rows: list[str] = []
    for op, _ in carried:
        assert op.data is not None
        arr = to_numpy(op.data, f"weight {op.weight_name.data!r}")
        data, dtype = _little_bytes(arr)
        blob += bytes(-len(blob) % EMBED_ALIGN)
        rows.append(f"({op.weight_name.data!r}, {len(blob)}, {dtype}, {arr.size}, {tuple(arr.shape)!r})")
        blob += data
    return bytes(blob), rows


_SAFETENSORS_DTYPE = {elem: name for name, elem in SAFETENSORS_NAMES.items()}
"""Element type name -> the safetensors dtype that stores it."""


def safetensors_dtype(op: WeightOp) -> str | None:
    """The safetensors dtype that stores weight `op`'s element type, None when safetensors has none."""
    return _SAFETENSORS_DTYPE.get(axes_type(op.result, f"weight '{op.weight_name.data}'").elem.name)


def beside_file(weights: Sequence[tuple[str, str, np.ndarray]]) -> tuple[bytes, str]:
    """Weights (ONNX name, safetensors dtype, value) as a safetensors file, and the digest of their bytes
    its metadata records.

    Tensors are laid out widest element first, so each starts at a multiple of its element size (the
    header is padded to 8 bytes, as the safetensors library pads it): every weight is a zero-copy view
    of the memory map.  The digest (of every name, dtype, shape and byte) lets the module refuse a
    file written by another build."""
    items = sorted(weights, key=lambda item: -item[2].itemsize)
    header: dict[str, object] = {}
    chunks: list[bytes] = []
    digest = hashlib.sha256()
    offset = 0
    for name, dtype, arr in items:
        data = _little_bytes(arr)[0]
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        digest.update(json.dumps([name, dtype, list(arr.shape), len(data)]).encode())
        digest.update(data)
        chunks.append(data)
    stamp = digest.hexdigest()[:32]
    header["__metadata__"] = {"loam_weights": stamp}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return b"".join([len(text).to_bytes(8, "little"), text, *chunks]), stamp


def split_beside(
    carried: Sequence[tuple[WeightOp, str]], limit: int
) -> tuple[list[tuple[WeightOp, str]], bytes | None, str | None]:
    """Where the carried weights' bytes pass `limit`, those safetensors can store go in a file beside
    the module: the weights left for the source's literal, that file's bytes and its digest (None,
    None: no file)."""
    stored = {}
    for op, attr in carried:
        dtype = safetensors_dtype(op)
        if dtype is not None and op.data is not None:
            stored[attr] = (op.weight_name.data, dtype, to_numpy(op.data, f"weight {op.weight_name.data!r}"))
    if sum(arr.nbytes for _, _, arr in stored.values()) <= limit:
        return list(carried), None, None
    data, digest = beside_file(list(stored.values()))
    return [(op, attr) for op, attr in carried if attr not in stored], data, digest


def array_literal(arr: np.ndarray) -> str:
    """`arr` as `np.frombuffer(b"...", dtype=...).reshape(...)` (little-endian bytes), read-only; an
    array of one repeated number (ConstantOfShape's, a light test model's weights) as that number
    filled in, so the source holds it once."""
    if arr.size > 1 and arr.dtype.kind in "biuf" and arr.dtype.type.__module__ == "numpy":
        flat = np.ascontiguousarray(arr).reshape(-1)
        if (flat.view(f"u{flat.itemsize}") == flat[:1].view(f"u{flat.itemsize}")).all():  # bitwise: -0.0, NaN
            value = flat[0].item()
            number = f"float({str(value)!r})" if isinstance(value, float) and not np.isfinite(value) else repr(value)
            little = _little_bytes(flat[:1])[1]
            full = f"np.full({tuple(arr.shape)!r}, {number}, dtype={little})"
            return f"np.lib.stride_tricks.as_strided({full}, writeable=False)"
    data, dtype = _little_bytes(arr)
    if dtype.startswith("ml_dtypes."):  # its bits, viewed back
        bits = f"<u{arr.dtype.itemsize}"
        return f"np.frombuffer({data!r}, dtype={bits!r}).view({dtype}).reshape({tuple(arr.shape)!r})"
    return f"np.frombuffer({data!r}, dtype={dtype}).reshape({tuple(arr.shape)!r})"


def marker_source(name: str, extent: int | None) -> str:
    lines = [f"class {name}:", f'    """Axis {name}."""']
    if extent is not None:
        lines += ["", f"    EXTENT = {extent}"]
    return "\n".join(lines) + "\n"


def outputs_source(fields: Sequence[str], onnx_names: Sequence[str]) -> str:
    """`Outputs`: forward's results as a named tuple."""
    doc = f"forward's outputs, in graph order: {', '.join(repr(n) for n in onnx_names)}."
    return tuple_class_source("Outputs", fields, doc, [f"ONNX output {n!r}" for n in onnx_names])


def tuple_class_source(name: str, fields: Sequence[str], doc: str, field_docs: Sequence[str]) -> str:
    """A named tuple written out: what `collections.namedtuple` makes (`_fields`, `_make`, `_replace`,
    `_asdict`, pickling, its repr), by hand because a field may be any minted name, `_x` and `count`
    included, where namedtuple refuses a leading underscore; the methods' names are reserved
    (`names.MODULE_NAMES`), so no field hides one."""
    params = ", ".join(f"{f}: np.ndarray" for f in fields)
    lines = [
        f"class {name}(tuple):",
        f'    """{doc}"""',
        "",
        "    __slots__ = ()",
        f"    _fields = {tuple(fields)!r}",
        "    _field_defaults: dict = {}",
        f"    __match_args__ = {tuple(fields)!r}",
        "",
        f'    def __new__(cls, {params}) -> "{name}":',
        f"        return tuple.__new__(cls, ({', '.join(fields)},))",
        "",
        "    @classmethod",
        f'    def _make(cls, iterable: object) -> "{name}":',
        "        result = tuple.__new__(cls, iterable)",
        f"        if len(result) != {len(fields)}:",
        f'            raise TypeError(f"Expected {len(fields)} arguments, got {{len(result)}}")',
        "        return result",
        "",
        f'    def _replace(self, **kwds: np.ndarray) -> "{name}":',
        "        result = self._make(map(kwds.pop, self._fields, self))",
        "        if kwds:",
        '            raise ValueError(f"Got unexpected field names: {list(kwds)!r}")',
        "        return result",
        "",
        "    def _asdict(self) -> dict:",
        "        return dict(zip(self._fields, self))",
        "",
        "    def __getnewargs__(self) -> tuple:  # pickle and copy make it again through __new__",
        "        return tuple(self)",
        "",
        "    def __repr__(self) -> str:",
        f'        return "{name}(" + ", ".join(f"{{k}}={{v!r}}" for k, v in zip(self._fields, self)) + ")"',
        "",
    ]
    for i, (f, d) in enumerate(zip(fields, field_docs, strict=True)):
        lines.append(f"    {f} = property(lambda self: self[{i}], doc={d!r})")
    return "\n".join(lines) + "\n"


def weights_source(
    weights: Sequence[tuple[WeightOp, str]],
    prepared_names: Mapping[str, str],
    embedded_rows: Sequence[str],
    all_carried: bool,
    checkpoint_names: tuple[tuple[str, str], ...],
    row_orders: tuple[tuple[str, int], ...],
    slots_more: Mapping[str, str],
    beside: bool = False,
    prepare: bool = False,
    external: Sequence[tuple[str, str, int, int, str, tuple[int, ...]]] = (),
) -> str:
    """`class Weights`: `load`, `load_file`, `stored`, and `embedded()` where the IR carries every weight.

    `embedded_rows` describe the weights the module carries (`_EMBEDDED`); a checkpoint need not
    hold those.  Each half weight that forward would widen gets a float32 twin made in `__init__`
    (`prepared_names`: weight attribute -> its twin's).  `slots_more` are further attributes a
    backend keeps per Weights (name -> what it holds), `checkpoint_names` and `row_orders` the
    module attributes `loam.checkpoint_names` and `loam.row_orders`.  With `beside`, the carried
    weights not in `embedded_rows` are in the safetensors file written beside the module (`_beside`).
    With `prepare`, `__init__` ends by calling `_prepare(self)` (`prepare_source`), which sets the
    attributes in `slots_more` that only the weights determine.  `external` says where the weights in
    raw ONNX external data files lie (`loam.external_data`); `load` and `load_file` read those files
    by it (`_EXTERNAL`).
    """
    prepared = [(attr, prepared_names[attr]) for _, attr in weights if attr in prepared_names]
    slots = (*(attr for _, attr in weights), *(p for _, p in prepared), "_stored", "_source", *slots_more)
    lines = [
        "class Weights:",
        '    """The initializers forward reads, checked against the graph when loaded.',
        "",
        "    Each attribute holds a weight in the graph's dtype: a view of the checkpoint's bytes where the",
        "    stored dtype is the graph's, else converted once.  A half weight stays half; where forward",
        "    computes with it in float32, that float32 form is made here once, never per call.",
        '    """',
        "",
        f"    __slots__ = {slots!r}",
        "",
        "    # ONNX name, attribute, dtype, (axis, extent) per axis; None where the graph leaves it open",
        "    _SPECS = (",
    ]
    for op, attr in weights:
        t = axes_type(op.result, f"weight '{op.weight_name.data}'")
        dtype = numpy_dtype(t, f"weight '{op.weight_name.data}'")
        axes = [(a.name, a.extent.const_value if a.extent.is_const else None) for a in t.axes]
        # A plain numpy dtype by name; bfloat16 as ml_dtypes' type, which numpy knows by no name.
        spelled = dtype_source(dtype) if dtype.type.__module__ != "numpy" else repr(dtype.name)
        lines.append(f"        ({op.weight_name.data!r}, {attr!r}, {spelled}, {tuple_py(axes)}),")
    lines.append("    )")
    lines.append("")
    lines.append(
        "    # (pattern, template) rules renaming checkpoint tensors to graph names; none: names are the graph's"
    )
    lines.append(f"    _CHECKPOINT_NAMES = {checkpoint_names!r}")
    lines.append("")
    packed = sorted(op.weight_name.data for op, _ in weights if PACKED.is_on(op))
    lines.append("    # Weights kept in the ggml blocks the checkpoint stores them in (packed kernels read them)")
    lines.append(f"    _PACKED = frozenset({packed!r})" if packed else "    _PACKED: frozenset = frozenset()")
    lines.append("")
    lines.append("    # Checkpoint tensors whose rows llama.cpp interleaved for its rotary embedding: head counts")
    lines.append(f"    _ROW_ORDERS = {dict(row_orders)!r}")
    lines.append("")
    if external:
        lines.append("    # Weights in ONNX external data files: ONNX name, file (relative to the model), offset,")
        lines.append("    # length, dtype, shape")
        lines += ["    _EXTERNAL = (", *[f"        {row!r}," for row in external], "    )"]
    else:
        lines.append("    _EXTERNAL = ()  # no weight is ONNX external data in a file of its own")
    lines.append("")
    lines.append("    # The weights the graph carries: ONNX name, offset in _WEIGHT_BYTES, dtype, count, shape")
    lines += ["    _EMBEDDED = (", *[f"        {row}," for row in embedded_rows], "    )"]
    lines.append("")
    sig = "".join(f", {attr}: np.ndarray" for _, attr in weights)
    lines.append(f"    def __init__(self{sig}) -> None:")
    lines += [f"        self.{attr} = {attr}" for _, attr in weights]
    lines += [f"        self.{p} = _prepared({attr})  # the float32 forward computes in" for attr, p in prepared]
    lines += [
        "        self._stored: dict[str, np.ndarray] = {}  # each weight as the checkpoint stores it",
        "        self._source: object = None  # the checkpoint's buffer (a memory map), kept while viewed",
        *(f"        self.{slot}: object = None  # {why}" for slot, why in slots_more.items()),
        *(["        _prepare(self)  # what forward reads that only the weights determine"] if prepare else []),
        "",
        "    @classmethod",
        '    def load(cls, data: object, packed: bool = True) -> "Weights":',
        '        """Read a checkpoint: the bytes (or memoryview) of one safetensors or GGUF file, or a mapping',
        "        of shard name -> bytes"
        + ("; for the weights in ONNX external data (`_EXTERNAL`), the data file's" if external else "."),
        *(["        bytes (a mapping of file name -> bytes where there are several)."] if external else []),
        "        Every tensor is checked against the graph before any is used; LoadError names the tensor",
        "        and the axis that disagree.  `packed=False` widens the weights kept in ggml blocks",
        "        (`_PACKED`) to float32 now: about 4x their memory, faster products.",
        '        """',
        "        return cls._from(data, _read_checkpoint(data, cls._EXTERNAL), packed)",
        "",
        "    @classmethod",
        '    def load_file(cls, path: object, packed: bool = True) -> "Weights":',
        '        """Memory-map a checkpoint file read-only and load it: a path, a list of shard paths, or a',
        "        Hugging Face `*.index.json` naming its shards"
        + ("; or the ONNX external data file (`_EXTERNAL`), or the" if external else "."),
        *(["        model's folder holding every such file."] if external else []),
        '        The weights view the map, kept open with them."""',
        "        data = _mapped(path, cls._EXTERNAL)",
        "        tensors = _read_checkpoint(data, cls._EXTERNAL)",
        "        _check_index(path, tensors)",
        "        _unchanged(data)  # the file cut short since it was mapped: a LoadError, not SIGBUS",
        "        return cls._from(data, tensors, packed)",
        "",
        "    @classmethod",
        '    def _from(cls, data: object, tensors: dict, packed: bool = True) -> "Weights":',
        "        values, stored = _load_weights(",
        "            tensors,",
        "            cls._SPECS,",
        "            cls._CHECKPOINT_NAMES,",
        "            cls._carried(),",
        "            cls._PACKED if packed else frozenset(),",
        "            cls._ROW_ORDERS,",
        "        )",
        "        weights = cls(*values)",
        "        weights._stored, weights._source = stored, data",
        "        return weights",
        "",
        "    def stored(self, name: str) -> np.ndarray:",
        '        """Weight `name` (its ONNX name) as the checkpoint stores it: a half stays half."""',
        "        return self._stored[name]",
        "",
        "    @classmethod",
        "    def _carried(cls) -> dict[str, np.ndarray]:",
        '        """The weights the module carries, as read-only views of `_WEIGHT_BYTES`'
        + (' and of the file beside it."""' if beside else '."""'),
        "        carried = {",
        "            name: np.frombuffer(_WEIGHT_BYTES, dtype=dtype, count=count, offset=offset).reshape(shape)",
        "            for name, offset, dtype, count, shape in cls._EMBEDDED",
        "        }",
        *(["        carried.update(_beside(__file__, _BESIDE_DIGEST, _BESIDE_DATA, cls._SPECS))"] if beside else []),
        "        return carried",
    ]
    if all_carried:
        lines += [
            "",
            "    @classmethod",
            '    def embedded(cls) -> "Weights":',
            '        """The weights the graph carries, embedded in this module."""',
            "        carried = cls._carried()",
            "        return cls(*(carried[name] for name, *_ in cls._SPECS))",
        ]
    return "\n".join(lines) + "\n"


def prepare_source(lines: Sequence[str], attributes: Sequence[str]) -> str:
    """`_prepare(weights)`: the kernels only the weights determine (`loam.passes.weight_only`), each
    computed once into an attribute of `weights` (or a local, when only another of them reads it);
    then those `attributes` are made read-only, as the weights are."""
    head = [
        '@np.errstate(all="ignore")',
        'def _prepare(weights: "Weights") -> None:',
        '    """Compute once, when Weights is made, what forward reads that only the weights determine."""',
    ]
    tail = [
        f"for name in {tuple(attributes)!r}:  # read-only, as the weights are: forward never writes them",
        "    value = getattr(weights, name)",
        "    if isinstance(value, np.ndarray):",
        "        value.flags.writeable = False",
    ]
    return "\n".join([*head, *(f"    {line}" for line in [*lines, *tail])]) + "\n"
