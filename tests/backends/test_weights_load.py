"""`Weights.load` / `Weights.load_file` in a generated module: one file, shards, memory maps, zero copies.

The MLP example is built once against its checkpoint's header; each test hands its module bytes
written here (safetensors files made with the `safetensors` package, or headers edited by hand).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from safetensors.numpy import load_file, save, save_file

from loam.driver.options import Options
from loam.driver.pipeline import build

MLP = Path(__file__).parents[2] / "examples" / "mlp"
CHECKPOINT = MLP / "mlp.safetensors"


@pytest.fixture(scope="module")
def mlp() -> ModuleType:
    return build(MLP / "mlp.onnxtext", options=Options.from_toml(MLP / "loam.toml")).module


def expected() -> np.ndarray:
    return np.load(MLP / "expected.npy")


def run(module: ModuleType, weights: object) -> np.ndarray:
    return module.forward(weights, np.load(MLP / "input.npy"))


def header_of(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def with_header(header: dict, payload: bytes, pad: int = 0) -> bytes:
    raw = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(raw)) + raw + payload


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_load_takes_bytes_bytearray_and_memoryview(mlp: ModuleType, kind: type) -> None:
    weights = mlp.Weights.load(kind(CHECKPOINT.read_bytes()))
    np.testing.assert_allclose(run(mlp, weights), expected(), rtol=1e-5, atol=1e-6)


def test_weights_are_read_only_views_of_the_buffer(mlp: ModuleType) -> None:
    buffer = bytearray(CHECKPOINT.read_bytes())
    weights = mlp.Weights.load(buffer)
    whole = np.frombuffer(buffer, np.uint8)
    read = {spec[1] for spec in type(weights)._SPECS}
    for attr in (a for a in type(weights).__slots__ if not a.startswith("_")):
        array = getattr(weights, attr)
        if attr in read:  # a weight, not one prepared from the weights at load
            assert np.shares_memory(array, whole), attr  # no copy: F32 stored, f32 read, aligned
        assert not array.flags.writeable, attr
    before = run(mlp, weights)
    buffer[-4:] = np.float32(1e6).tobytes()  # the caller's buffer is the weights' storage
    assert not np.array_equal(run(mlp, weights), before)


def test_an_unaligned_payload_is_converted_once_instead(mlp: ModuleType) -> None:
    header, payload = header_of(CHECKPOINT.read_bytes())
    data = with_header(header, payload, pad=1)  # the payload starts at an odd address
    weights = mlp.Weights.load(data)
    assert all(getattr(weights, a).flags.aligned for a in type(weights).__slots__ if not a.startswith("_"))
    np.testing.assert_allclose(run(mlp, weights), expected(), rtol=1e-5, atol=1e-6)


def test_load_file_maps_the_file_read_only(mlp: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "copy.safetensors"
    path.write_bytes(CHECKPOINT.read_bytes())
    weights = mlp.Weights.load_file(path)
    mapped = weights._source
    assert isinstance(mapped, np.memmap) and mapped.mode == "r"
    assert np.shares_memory(weights.fc1_weight, mapped)
    np.testing.assert_allclose(run(mlp, weights), expected(), rtol=1e-5, atol=1e-6)
    with pytest.raises(mlp.LoadError, match="cannot map the file"):
        mlp.Weights.load_file(tmp_path / "absent.safetensors")


def shards(tmp_path: Path) -> dict[str, Path]:
    tensors = load_file(str(CHECKPOINT))
    names = sorted(tensors)
    paths = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, held in paths.items():
        save_file({n: tensors[n] for n in held}, str(tmp_path / file))
    index = {"metadata": {}, "weight_map": {n: f for f, held in paths.items() for n in held}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    return {f: tmp_path / f for f in paths}


def test_sharded_checkpoints_load_from_a_mapping_a_list_and_an_index(mlp: ModuleType, tmp_path: Path) -> None:
    files = shards(tmp_path)
    for weights in (
        mlp.Weights.load({name: path.read_bytes() for name, path in files.items()}),
        mlp.Weights.load_file(list(files.values())),
        mlp.Weights.load_file(tmp_path / "model.safetensors.index.json"),
    ):
        np.testing.assert_allclose(run(mlp, weights), expected(), rtol=1e-5, atol=1e-6)


def test_a_tensor_in_two_shards_or_in_none_is_refused(mlp: ModuleType, tmp_path: Path) -> None:
    files = shards(tmp_path)
    data = {name: path.read_bytes() for name, path in files.items()}
    first, second = data
    with pytest.raises(mlp.LoadError) as info:
        mlp.Weights.load({**data, "copy.safetensors": data[second]})
    assert f"is in two checkpoint shards: '{second}' and 'copy.safetensors'" in str(info.value)
    with pytest.raises(mlp.LoadError) as info:
        mlp.Weights.load({first: data[first]})
    assert "is missing from the checkpoint" in str(info.value)


def test_an_index_naming_the_wrong_shard_or_leaving_its_folder_is_refused(mlp: ModuleType, tmp_path: Path) -> None:
    shards(tmp_path)
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    name, shard = next(iter(index["weight_map"].items()))
    other = next(f for f in index["weight_map"].values() if f != shard)
    index_path.write_text(json.dumps({"weight_map": {**index["weight_map"], name: other}}))
    with pytest.raises(mlp.LoadError, match=f"places tensor '{name}' in shard '{other}'; it is in '{shard}'"):
        mlp.Weights.load_file(index_path)
    index_path.write_text(json.dumps({"weight_map": {**index["weight_map"], name: "../elsewhere.safetensors"}}))
    with pytest.raises(mlp.LoadError, match="outside its folder"):
        mlp.Weights.load_file(index_path)


def test_a_truncated_payload_names_the_first_tensor_it_cannot_read(mlp: ModuleType, tmp_path: Path) -> None:
    data = CHECKPOINT.read_bytes()
    header, payload = header_of(data)
    by_offset = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0] if kv[0] != "__metadata__" else -1)
    tensors = [(n, e) for n, e in by_offset if n != "__metadata__"]
    victim, entry = tensors[len(tensors) // 2]
    cut = data[: len(data) - len(payload) + entry["data_offsets"][0] + 4]  # 4 bytes into `victim`
    path = tmp_path / "cut.safetensors"
    path.write_bytes(cut)
    for load in (lambda: mlp.Weights.load(cut), lambda: mlp.Weights.load_file(path)):
        with pytest.raises(mlp.LoadError) as info:
            load()
        assert f"tensor '{victim}': data_offsets {entry['data_offsets']}".replace(" ", "") in str(info.value).replace(
            " ", ""
        )
        assert "cut short" in str(info.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda h: h["fc1.bias"].__setitem__("data_offsets", h["fc1.weight"]["data_offsets"]), "overlaps tensor"),
        (lambda h: h["fc1.bias"].__setitem__("dtype", "F99"), "tensor 'fc1.bias' has unknown dtype 'F99'"),
        (
            lambda h: h["fc1.bias"].__setitem__("shape", [h["fc1.bias"]["shape"][0] + 1]),
            "tensor 'fc1.bias' axis 0 (Hidden) is 16 in the graph, 17 in the checkpoint",
        ),
        (
            lambda h: h["fc1.bias"].__setitem__("dtype", "F16"),
            "tensor 'fc1.bias' holds 64 bytes; shape [16] of F16 needs 32",
        ),
        (lambda h: h.__setitem__("fc1.bias", [1, 2]), "tensor 'fc1.bias': header entry is not an object"),
    ],
)
def test_every_load_rechecks_the_header_against_the_graph(mlp: ModuleType, edit: object, message: str) -> None:
    header, payload = header_of(CHECKPOINT.read_bytes())
    edit(header)  # type: ignore[operator]
    with pytest.raises(mlp.LoadError) as info:
        mlp.Weights.load(with_header(header, payload))
    assert message in str(info.value)


def test_inline_weights_embed_one_bytes_literal_read_as_views() -> None:
    options = Options.from_toml(MLP / "loam.toml").merged(inline_weights=True)
    result = build(MLP / "mlp.onnxtext", options=options)
    source, module = result.source, result.module
    assert source.count("_WEIGHT_BYTES = b") == 1 and "_DATA_" not in source
    weights = module.Weights.embedded()
    whole = np.frombuffer(module._WEIGHT_BYTES, np.uint8)
    assert all(np.shares_memory(getattr(weights, a), whole) for a in ("fc1_weight", "fc1_bias"))
    np.testing.assert_allclose(run(module, weights), expected(), rtol=1e-5, atol=1e-6)
    tensors = load_file(str(CHECKPOINT))
    np.testing.assert_array_equal(weights.fc1_weight, tensors["fc1.weight"])


def test_a_float16_checkpoint_keeps_its_halves_as_views(mlp: ModuleType) -> None:
    tensors = {k: v.astype(np.float16) for k, v in load_file(str(CHECKPOINT)).items()}
    data = save(tensors)
    weights = mlp.Weights.load(data)
    assert weights.fc1_weight.dtype == np.float32  # the graph reads f32: converted once, here
    stored = weights.stored("fc1.weight")
    assert stored.dtype == np.float16 and np.shares_memory(stored, np.frombuffer(data, np.uint8))
    np.testing.assert_array_equal(weights.fc1_weight, tensors["fc1.weight"].astype(np.float32))


def test_the_runtime_safetensors_table_names_loam_dtypes_numpy_dtypes() -> None:
    """The runtime spells its safetensors table as a literal (it imports only numpy); it must name
    each encoding `loam.core.dtypes` knows with that type's numpy dtype, None where it is not plain numpy."""
    from loam.core import dtypes
    from loam.runtime import weights

    want: dict[str, str | None] = {}
    for encoding, name in dtypes.SAFETENSORS_NAMES.items():
        dtype = dtypes.by_name(name).numpy
        plain = dtype is not None and dtype.type.__module__ == "numpy"
        want[encoding] = dtype.name if plain and dtype is not None else None
    assert weights.SAFETENSORS_DTYPES == want
