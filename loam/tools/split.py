"""`loam split`: an ONNX model with its weights -> a textual graph plus a safetensors checkpoint.

    split_model("gpt2.onnx", "out/")   # out/gpt2.onnxtext + out/gpt2.safetensors

Why: the build reads a graph and a checkpoint header, and a `.onnx` interleaves its weights with its
graph, so neither a diff nor the build cache can tell a new graph from new weights.  The split graph
is `onnx.printer` text whose float initializers carry no values: each is an external-data entry
pointing at its byte range in the safetensors file, which holds it under the graph's own name (the
layout of examples/digits).  So do the packed integer weights of the quantized operators
(`_PACKED_OPERANDS`: MatMulNBits' int4 blocks and zero points, GatherBlockQuantized's table,
DequantizeLinear's quantized tensor): they are the bulk of an int4 model, and as text they would
take twice their bytes in hex.  Other integer and bool initializers (shapes, indices) are graph,
not weights: they stay in the text with their values, as does every Constant node.

External data of the input is read only where its location resolves inside the model's folder
(`loam.frontends.onnx_proto.external_data_path`), and every refusal names the tensor.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto, numpy_helper

from loam.core import dtypes
from loam.core.errors import ModelError

__all__ = ["SplitResult", "split_model"]

# The float element types that move into the checkpoint, with their safetensors dtype names.
_MOVED: dict[int, str] = {
    TensorProto.FLOAT: "F32",
    TensorProto.FLOAT16: "F16",
    TensorProto.BFLOAT16: "BF16",
    TensorProto.DOUBLE: "F64",
}
# The integer element types a packed weight may have, with their safetensors dtype names.
_PACKED_TYPES: dict[int, str] = {
    TensorProto.UINT8: "U8",
    TensorProto.INT8: "I8",
    TensorProto.UINT16: "U16",
    TensorProto.INT16: "I16",
    TensorProto.INT32: "I32",
}
# (domain, operator) -> the inputs (by position) that hold a quantized weight's packed integers.
_PACKED_OPERANDS: dict[tuple[str, str], tuple[int, ...]] = {
    ("com.microsoft", "MatMulNBits"): (1, 3),  # B's blocks, zero_points
    ("com.microsoft", "GatherBlockQuantized"): (0, 3),  # data, zero_points
    ("com.microsoft", "DequantizeLinear"): (0,),
    ("", "DequantizeLinear"): (0,),
}
# The typed data fields a TensorProto may carry its values in (cleared when the values move out).
_DATA_FIELDS = (
    "raw_data",
    "float_data",
    "int32_data",
    "int64_data",
    "double_data",
    "uint64_data",
    "string_data",
    "external_data",
)


@dataclass(frozen=True)
class SplitResult:
    """What `split_model` wrote: the graph, the checkpoint, and which initializers went where."""

    graph: Path
    checkpoint: Path
    moved: tuple[str, ...]  # initializers now in the checkpoint
    kept: tuple[str, ...]  # initializers that keep their values in the graph


def split_model(model: str | Path, out_dir: str | Path) -> SplitResult:
    """Write OUT_DIR/<stem>.onnxtext and OUT_DIR/<stem>.safetensors from the model at `model`."""
    model = Path(model)
    out_dir = Path(out_dir)
    proto = _read(model)
    graph_path = out_dir / f"{model.stem}.onnxtext"
    checkpoint_path = out_dir / f"{model.stem}.safetensors"
    folder = model.parent

    inputs = {model.resolve()}
    # The external data files this model reads are inputs too: the split must not overwrite them.
    for tensor, where in _initializers(proto.graph, f"graph '{proto.graph.name}'"):
        if tensor.data_location == TensorProto.EXTERNAL:
            path = _external_file(folder, tensor, where, model)
            inputs.add(path)
    for output in (graph_path, checkpoint_path):
        if output.resolve() in inputs:
            raise ModelError(
                f"loam split {model} -o {out_dir}: '{output}' would overwrite an input of the split; "
                "choose another output folder"
            )

    # Gather the payloads first, so nothing is written unless every tensor can be read.
    payloads: dict[str, tuple[str, tuple[int, ...], bytes, str]] = {}  # name -> (dtype, shape, bytes, where)
    moved: list[TensorProto] = []
    kept: list[str] = []
    packed = _packed_names(proto.graph)
    for tensor, where in _initializers(proto.graph, f"graph '{proto.graph.name}'"):
        data = _tensor_bytes(folder, tensor, where, model)
        dtype = _MOVED.get(tensor.data_type) or (_PACKED_TYPES.get(tensor.data_type) if tensor.name in packed else None)
        if dtype is None:
            if tensor.data_location == TensorProto.EXTERNAL:
                _set_inline(tensor, data)  # a shape or an index table is graph: it stays in the text
            kept.append(tensor.name)
            continue
        name = tensor.name
        if not name:
            raise ModelError(f"{model}: {where}: an initializer without a name cannot be stored in a checkpoint")
        if name == "__metadata__":
            raise ModelError(f"{model}: {where}: '__metadata__' is reserved by safetensors; rename the initializer")
        entry = (dtype, tuple(tensor.dims), data, where)
        previous = payloads.get(name)
        if previous is not None and previous[:3] != entry[:3]:
            raise ModelError(
                f"{model}: initializer '{name}' is defined with different values in {previous[3]} and {where}; "
                "a checkpoint holds one tensor per name"
            )
        payloads[name] = entry
        moved.append(tensor)

    out_dir.mkdir(parents=True, exist_ok=True)
    offsets = _write_safetensors(checkpoint_path, {n: (d, s, b) for n, (d, s, b, _) in payloads.items()})
    for tensor in moved:
        offset, length = offsets[tensor.name]
        for field in _DATA_FIELDS:
            tensor.ClearField(field)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", checkpoint_path.name), ("offset", str(offset)), ("length", str(length))):
            tensor.external_data.add(key=key, value=value)
    _unname_attribute_tensors(proto.graph)
    text = onnx.printer.to_text(proto)
    header = (
        f"# Split by `loam split` from {model.name}: float initializers and packed weights are external data in "
        f"{checkpoint_path.name}; build with --checkpoint {checkpoint_path.name}.\n"
    )
    graph_path.write_text(header + text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
    return SplitResult(graph_path, checkpoint_path, tuple(payloads), tuple(kept))


def _read(model: Path) -> ModelProto:
    if not model.is_file():
        raise ModelError(f"{model}: no such model file")
    if model.suffix == ".onnxtext":
        from loam.frontends.onnx_text import read_onnx_text

        return read_onnx_text(model)
    if model.suffix != ".onnx":
        raise ModelError(f"{model}: loam split reads a .onnx or .onnxtext model")
    try:
        return onnx.load(str(model), load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError) as err:
        raise ModelError(f"{model}: not a readable ONNX protobuf ({err})") from None


def _initializers(graph: GraphProto, where: str) -> Iterator[tuple[TensorProto, str]]:
    """Every initializer of `graph` and of the subgraphs its nodes hold, with where it is."""
    for tensor in graph.initializer:
        yield tensor, f"{where}: initializer '{tensor.name}'"
    for node in graph.node:
        for attr in node.attribute:
            subgraphs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
            for sub in subgraphs:
                yield from _initializers(sub, f"{where}: node '{node.name}' attribute '{attr.name}'")


def _unname_attribute_tensors(graph: GraphProto) -> None:
    """Drop the names of the tensors node attributes hold (a Constant's value): onnx.printer writes such a
    name (`tensor = int64[1] "c" {1}`, as onnxruntime-genai's builder names its constants), which neither
    onnx.parser nor Loam's reader takes back, and the name means nothing there."""
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.TENSOR:
                attr.t.ClearField("name")
            for t in attr.tensors:
                t.ClearField("name")
            for sub in [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs):
                _unname_attribute_tensors(sub)


def _packed_names(graph: GraphProto) -> set[str]:
    """The names that `graph` (and its subgraphs) read as a quantized operator's packed integers."""
    names: set[str] = set()
    for node in graph.node:
        domain = "" if node.domain == "ai.onnx" else node.domain
        for i in _PACKED_OPERANDS.get((domain, node.op_type), ()):
            if i < len(node.input) and node.input[i]:
                names.add(node.input[i])
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs):
                names |= _packed_names(sub)
    return names


def _external_file(folder: Path, tensor: TensorProto, where: str, model: Path) -> Path:
    from loam.frontends.onnx_proto import external_data_path

    location = next((e.value for e in tensor.external_data if e.key == "location"), "")
    path, refusal = external_data_path(folder, location)
    if refusal is not None or path is None:
        raise ModelError(f"{model}: {where}: {refusal or 'external data without a location'}")
    return path


def _tensor_bytes(folder: Path, tensor: TensorProto, where: str, model: Path) -> bytes:
    """The tensor's values as little-endian bytes in its own element type."""
    try:
        elem = dtypes.by_onnx(tensor.data_type)
    except KeyError:
        raise ModelError(f"{model}: {where}: element type code {tensor.data_type} is not one ONNX defines") from None
    count = int(np.prod(tensor.dims, dtype=np.int64)) if tensor.dims else 1
    if tensor.data_location != TensorProto.EXTERNAL:
        if elem.numpy is None or elem.name == "string":
            raise ModelError(f"{model}: {where}: {elem.name} initializers cannot be split")
        try:
            array = numpy_helper.to_array(tensor)
        except Exception as err:  # onnx raises bare exceptions for inconsistent fields
            raise ModelError(f"{model}: {where}: malformed tensor data ({err})") from None
        return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    path = _external_file(folder, tensor, where, model)
    entries = {e.key: e.value for e in tensor.external_data}
    expected = count * elem.bits // 8
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries.get("length", str(expected)))
    except ValueError:
        raise ModelError(f"{model}: {where}: external data offset/length must be integers") from None
    if length != expected:
        raise ModelError(
            f"{model}: {where}: external data length {length} is not the {expected} bytes "
            f"of {elem.name}{list(tensor.dims)}"
        )
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
    except OSError as err:
        raise ModelError(f"{model}: {where}: cannot read external data '{path}' ({err.strerror or err})") from None
    if len(data) != length:
        raise ModelError(
            f"{model}: {where}: external data '{path}' holds {len(data)} of the {length} bytes at offset {offset}"
        )
    return data


def _set_inline(tensor: TensorProto, data: bytes) -> None:
    for field in _DATA_FIELDS:
        tensor.ClearField(field)
    tensor.data_location = TensorProto.DEFAULT
    tensor.raw_data = data


def _write_safetensors(
    path: Path, tensors: dict[str, tuple[str, tuple[int, ...], bytes]]
) -> dict[str, tuple[int, int]]:
    """Write a safetensors file; return each tensor's (file offset, length) for the graph's entries.

    Wider element types come first, so every payload starts aligned to its element size and the
    generated loader can view it in place; the header is padded with spaces to a multiple of 8, as
    the safetensors library writes it.
    """
    widths = {"F64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "U16": 2, "I16": 2, "U8": 1, "I8": 1}
    order = sorted(tensors, key=lambda n: -widths[tensors[n][0]])  # stable: graph order within a width
    header: dict[str, object] = {}
    ranges: dict[str, tuple[int, int]] = {}
    begin = 0
    for name in order:
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, begin + len(data)]}
        ranges[name] = (begin, len(data))
        begin += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    start = 8 + len(raw)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for name in order:
            f.write(tensors[name][2])
    return {name: (start + begin, length) for name, (begin, length) in ranges.items()}


def main_split(model: Path, out_dir: Path, prog: str = "loam") -> None:
    """`loam split`'s body: split and say what was written (on stderr)."""
    result = split_model(model, out_dir)
    sys.stderr.write(
        f"{prog}: wrote {result.graph} and {result.checkpoint} "
        f"({len(result.moved)} tensors in the checkpoint, {len(result.kept)} kept in the graph)\n"
    )
