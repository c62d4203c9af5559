"""ONNX external data as a checkpoint: where each initializer's bytes lie in the files beside the model.

onnxruntime-genai (`model.onnx` + `model.onnx.data`), optimum (`model.onnx_data`) and torch or onnx
(`onnx.save_model(..., save_as_external_data=True, location=...)`) keep a model's initializers in raw
data files that have no header: the graph's `external_data` entries (`location`, `offset`, `length`)
say where each tensor lies.  The build never reads those bytes (as it never reads a checkpoint's
payload); it takes the entries into a table, the module attribute `loam.external_data`, from which the
module's `Weights.load_file(DATA_FILE)` reads each tensor at its offset and checks it against the graph
(`loam.runtime.weights._read_external`).  A location inside a `.safetensors` file is a checkpoint
reference instead (what `loam split` writes): the checkpoints the build is given supply those.

The importer has already refused a location outside the model's folder (an absolute path, a `..`, a
symlink out: `loam.frontends.onnx_proto.external_data_path`); here an entry whose offset or length is
not a non-negative integer, or whose length is not its tensor's bytes, is refused naming the tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from xdsl.dialects.builtin import ModuleOp

from loam.core.dtypes import SAFETENSORS_NAMES
from loam.core.errors import ModelError, UnsupportedError
from loam.dialects import build_contract as contract

Row = contract.ExternalRow
"""(ONNX name, location relative to the model, byte offset, byte length, safetensors dtype, shape)."""

_ENCODING = {elem: name for name, elem in SAFETENSORS_NAMES.items()}
"""Element type name -> the safetensors dtype name the module reads its raw bytes as."""


def is_checkpoint_reference(location: str) -> bool:
    """Whether an external `location` points into a safetensors file (a checkpoint the build is given)
    rather than at a raw data file of its own."""
    return PurePosixPath(location.replace("\\", "/")).suffix.lower() == ".safetensors"


def external_rows(ir: ModuleOp, where: str) -> list[Row]:
    """The rows of every initializer of `ir` (the graph dialect, as read) whose bytes are raw ONNX
    external data; `where` names the model in refusals."""
    from loam.dialects.graph import InitializerOp

    rows: dict[str, Row] = {}
    for op in ir.walk():
        if not isinstance(op, InitializerOp) or op.value is None or not op.value.is_external:
            continue
        entries = dict(op.value.external_entries)
        location = entries.get("location", "")
        if is_checkpoint_reference(location):
            continue
        name, elem, shape = op.onnx_name.data, op.value.elem, op.value.shape
        encoding = _ENCODING.get(elem.name)
        if encoding is None:
            raise UnsupportedError(
                f"{where}: initializer '{name}' is {elem.name} ONNX external data, which a module cannot read "
                f"from its data file (it reads {', '.join(sorted(_ENCODING))} element types)"
            )
        count = 1
        for extent in shape:
            count *= extent
        nbytes = count * elem.bits // 8
        try:
            offset = int(entries.get("offset", "0"))
            length = int(entries.get("length", str(nbytes)))
        except ValueError:
            raise ModelError(
                f"{where}: initializer '{name}': external data offset {entries.get('offset')!r} and length "
                f"{entries.get('length')!r} must be integers"
            ) from None
        if offset < 0 or length != nbytes:
            raise ModelError(
                f"{where}: initializer '{name}': external data at offset {offset}, length {length} in "
                f"'{location}' is not the {nbytes} bytes of {elem.name}{list(shape)}"
            )
        row = (name, location, offset, length, encoding, shape)
        if rows.setdefault(name, row) != row:
            raise ModelError(f"{where}: initializer '{name}' is two different tensors of external data")
    return list(rows.values())


def attach_external(ir: ModuleOp, rows: Sequence[Row]) -> None:
    """Record `rows` as the module attribute the emitter reads (`external_table`)."""
    if rows:
        contract.EXTERNAL_DATA.set(ir, tuple(rows))


def external_table(module: ModuleOp) -> tuple[Row, ...]:
    """The rows the build recorded in `module` (`loam.external_data`), for `Weights._EXTERNAL`."""
    return contract.EXTERNAL_DATA.get(module) or ()


def inline_external(ir: ModuleOp, rows: Sequence[Row], model: Path | None) -> None:
    """Read each weight of `rows` the program reads from its data file into the program (`inline_weights`),
    so the module carries it; a data file missing or cut short is a CheckpointError naming the tensor."""
    from loam.core.errors import CheckpointError
    from loam.dialects.graph import TensorDataAttr
    from loam.dialects.kernel import WeightOp

    where = {row[0]: row for row in rows}
    for op in ir.walk():
        if not isinstance(op, WeightOp) or op.data is not None or op.weight_name.data not in where:
            continue
        name, location, offset, length, encoding, shape = where[op.weight_name.data]
        if model is None:
            raise CheckpointError(f"inline_weights: tensor '{name}' is ONNX external data, and the model has no folder")
        path = model.parent / location
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                raw = f.read(length)
        except OSError as e:
            raise CheckpointError(f"{model}: tensor '{name}': cannot read its external data {path}: {e}") from None
        if len(raw) != length:
            raise CheckpointError(
                f"{model}: tensor '{name}' needs bytes {offset}..{offset + length} of {path}, which ends before them"
            )
        elem = SAFETENSORS_NAMES[encoding]
        op.properties["data"] = TensorDataAttr(elem, shape, raw=raw, name=name)


def load_note(rows: Sequence[Row], model: Path | None) -> str:
    """The build note saying where the module's weights are and how to load them."""
    files = sorted({location for _, location, *_ in rows})
    folder = model.parent if model is not None else None
    if len(files) == 1:
        target = str(folder / files[0]) if folder is not None else files[0]
        held = f"in {files[0]}"
    else:
        target = str(folder) if folder is not None else "THE_MODEL_FOLDER"
        held = f"in {len(files)} files beside the model ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''})"
    return (
        f"{len(rows)} weight{'s are' if len(rows) != 1 else ' is'} ONNX external data {held}, which the module "
        f"reads at load: Weights.load_file({target!r})"
    )
