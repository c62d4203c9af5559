"""ONNX external data is a checkpoint: a module built from `model.onnx` whose initializers live in
data files beside it reads them with `Weights.load_file(DATA_FILE)` (or the model's folder, or
`Weights.load` over the bytes) at the offsets the graph records.

The models are written here the three ways people get them: onnx's own `save_as_external_data` into
one file (as torch's exporter and onnxruntime-genai's builder write `model.onnx.data`), the same into
optimum's `model.onnx_data`, and one file per tensor (`all_tensors_to_one_file=False`).  onnxruntime
runs each model from its path, reading the same files: it is the oracle.  The builder's tiny int4
Llama (tests/models/genai/llama_int4, a real `model.onnx.data`) is built from its path as well.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.core.errors import LoamError
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.testing import assert_same, import_module_file
from loam.tools import loam_main

GENAI = Path(__file__).resolve().parents[1] / "models" / "genai" / "llama_int4"


def small_model() -> onnx.ModelProto:
    """y = Gather(table, ids) @ w + b, with f32, f16 and i64 initializers (every one external below)."""
    rng = np.random.default_rng(7)
    values = {
        "table": rng.standard_normal((10, 6)).astype(np.float32),
        "w": rng.standard_normal((6, 5)).astype(np.float16),
        "b": rng.standard_normal(5).astype(np.float32),
        "shift": np.array([3], np.int64),
    }
    nodes = [
        helper.make_node("Add", ["ids", "shift"], ["ids3"], name="shift_ids"),
        helper.make_node("Gather", ["table", "ids3"], ["rows"], name="gather"),
        helper.make_node("Cast", ["w"], ["w32"], name="widen", to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["rows", "w32"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["y"], name="bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5])],
        [onnx.numpy_helper.from_array(v, k) for k, v in values.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save(folder: Path, location: str | None, name: str = "model.onnx") -> Path:
    """The small model saved into `folder` with every initializer external: all in `location`, or one
    file per tensor (None)."""
    (folder / (location or name)).parent.mkdir(parents=True, exist_ok=True)
    path = folder / name
    onnx.save_model(
        small_model(),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=location is not None,
        location=location,
        size_threshold=0,
    )
    return path


def built(path: Path, options: Options | None = None) -> ModuleType:
    """Loam's module for the model at `path` (its layout drafted), as `loam build` writes it."""
    return build(path, options=draft_layout(path, options=options).options(options)).module


def oracle(path: Path, ids: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return list(session.run(None, {"ids": ids}))


IDS = np.array([0, 4, 6, 2], np.int64)


@pytest.mark.parametrize("location", ["model.onnx.data", "model.onnx_data", "weights/all.bin"])
def test_one_data_file_loads_from_its_path_its_folder_and_its_bytes(tmp_path: Path, location: str) -> None:
    path = save(tmp_path, location)
    module = built(path)
    data = tmp_path / location
    want = oracle(path, IDS)
    for weights in (
        module.Weights.load_file(str(data)),
        module.Weights.load_file(tmp_path),
        module.Weights.load(data.read_bytes()),
        module.Weights.load({location: data.read_bytes()}),
    ):
        assert_same([module.forward(weights, IDS)], want)


def test_the_weights_are_read_only_views_of_the_mapped_file(tmp_path: Path) -> None:
    module = built(save(tmp_path, "model.onnx.data"))
    weights = module.Weights.load_file(tmp_path / "model.onnx.data")
    mapped = np.asarray(weights._source)
    for name in ("table", "w", "b"):
        stored = weights.stored(name)
        assert np.shares_memory(stored, mapped), name
        assert not stored.flags.writeable
    assert weights.w.dtype == np.float16  # a half stays half (forward widens it once, in Weights)


def test_one_file_per_tensor_loads_from_the_folder_or_a_mapping(tmp_path: Path) -> None:
    path = save(tmp_path, None)
    module = built(path)
    files = sorted({row[1] for row in module.Weights._EXTERNAL})
    assert files == ["b", "shift", "table", "w"] or files == ["b", "table", "w"]
    want = oracle(path, IDS)
    assert_same([module.forward(module.Weights.load_file(tmp_path), IDS)], want)
    mapping = {f: (tmp_path / f).read_bytes() for f in files}
    assert_same([module.forward(module.Weights.load(mapping), IDS)], want)
    several = r"reads ONNX external data from \d files .*load_file\(the model's folder\)"
    with pytest.raises(module.LoadError, match=several):
        module.Weights.load((tmp_path / "table").read_bytes())
    with pytest.raises(module.LoadError, match=r"tensor '\w+' is ONNX external data in '\w+', which is not among"):
        module.Weights.load({f: mapping[f] for f in files[1:]})


def test_a_data_file_cut_short_or_missing_is_a_load_error_naming_the_tensor(tmp_path: Path) -> None:
    module = built(save(tmp_path, "model.onnx.data"))
    data = (tmp_path / "model.onnx.data").read_bytes()
    last = max(module.Weights._EXTERNAL, key=lambda row: row[2] + row[3])
    cut = rf"external data file 'model.onnx.data': tensor '{last[0]}' needs bytes"
    with pytest.raises(module.LoadError, match=cut):
        module.Weights.load(data[: last[2] + last[3] - 1])
    (tmp_path / "short.data").write_bytes(data[:10])
    with pytest.raises(module.LoadError, match=r"needs bytes .* the file ends after 10"):
        module.Weights.load_file(tmp_path / "short.data")
    (tmp_path / "model.onnx.data").unlink()
    with pytest.raises(module.LoadError, match=r"model.onnx.data'?: cannot map the file"):
        module.Weights.load_file(tmp_path)


def test_a_length_the_shape_does_not_need_is_refused_at_build_naming_the_tensor(tmp_path: Path) -> None:
    path = save(tmp_path, "model.onnx.data")
    proto = onnx.load(str(path), load_external_data=False)
    table = next(t for t in proto.graph.initializer if t.name == "table")
    next(e for e in table.external_data if e.key == "length").value = "236"
    onnx.save_model(proto, str(path))
    with pytest.raises(LoamError, match=r"initializer 'table': external data at offset \d+, length 236 .* 240 bytes"):
        built(path)


@pytest.mark.parametrize("location", ["../outside.data", "/tmp/outside.data"])
def test_a_location_outside_the_models_folder_is_refused_naming_it(tmp_path: Path, location: str) -> None:
    path = save(tmp_path / "model", "model.onnx.data")
    proto = onnx.load(str(path), load_external_data=False)
    next(e for e in proto.graph.initializer[0].external_data if e.key == "location").value = location
    onnx.save_model(proto, str(path))
    with pytest.raises(LoamError, match=rf"external data location '{location}' is outside the model's folder"):
        built(path)


def test_loam_build_says_how_to_load_the_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(tmp_path / "model", "model.onnx.data")
    toml = tmp_path / "layout.toml"
    toml.write_text(draft_layout(path).toml(), encoding="utf-8")
    out = tmp_path / "m.py"
    with pytest.raises(SystemExit) as done:
        loam_main.main(["build", str(path), "--options", str(toml), "-o", str(out)])
    assert done.value.code == 0
    data = tmp_path / "model" / "model.onnx.data"
    err = capsys.readouterr().err
    assert f"ONNX external data in model.onnx.data, which the module reads at load: Weights.load_file('{data}')" in err
    module = import_module_file(out)
    assert_same([module.forward(module.Weights.load_file(data), IDS)], oracle(path, IDS))


def test_inline_weights_read_the_external_data_into_the_module(tmp_path: Path) -> None:
    path = save(tmp_path, "model.onnx.data")
    module = built(path, Options(inline_weights=True))
    assert module.Weights._EXTERNAL == ()
    assert_same([module.forward(module.Weights.embedded(), IDS)], oracle(path, IDS))


def test_the_builders_int4_llama_loads_its_model_onnx_data(tmp_path: Path) -> None:
    """The builder's own `model.onnx.data` (MatMulNBits blocks, scales, the embedding table), built from
    the model's path, gives onnxruntime's logits for a prompt with an empty past."""
    import onnxruntime as ort

    folder = tmp_path / "genai"
    shutil.copytree(GENAI, folder)
    path = folder / "model.onnx"
    module = built(path, Options(dims={"kv_cache_dim": 16}))
    rows = module.Weights._EXTERNAL
    assert {row[1] for row in rows} == {"model.onnx.data"}
    assert any(row[4] == "U8" for row in rows)  # the packed int4 blocks are among them
    weights = module.Weights.load_file(folder / "model.onnx.data")
    ids = np.array([[5, 17, 42, 7, 99]], np.int64)
    empty = np.zeros((1, 2, 0, 16), np.float32)
    past = {f"past_key_values.{i}.{kv}": empty for i in range(2) for kv in ("key", "value")}
    feeds = {"input_ids": ids, "attention_mask": np.ones((1, 5), np.int64), **past}
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    got = module.forward(weights, *[feeds[name] for name, *_ in module.INPUTS])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


def test_the_browser_target_uploads_the_external_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`loam build --target browser` reads the data file for the weight shards it writes."""
    from safetensors.numpy import load_file

    path = save(tmp_path / "model", "model.onnx.data")
    toml = tmp_path / "layout.toml"
    toml.write_text(draft_layout(path).toml(), encoding="utf-8")
    with pytest.raises(SystemExit) as done:
        loam_main.main(["build", str(path), "--options", str(toml), "--target", "browser", "-o", str(tmp_path / "web")])
    assert done.value.code == 0, capsys.readouterr().err
    shard = load_file(str(tmp_path / "web" / "weights" / "shard-00000.safetensors"))
    full = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    for name in ("table", "w", "b"):
        np.testing.assert_array_equal(shard[name], full[name].astype(np.float32))  # the device's f32


def test_a_model_with_external_data_and_a_checkpoint_loads_both(tmp_path: Path) -> None:
    """`b` points into a safetensors checkpoint (as `loam split` writes), the rest into model.onnx.data:
    a mapping (or a list of paths) gives both, each file read its own way."""
    from safetensors.numpy import save_file

    path = save(tmp_path, "model.onnx.data")
    proto = onnx.load(str(path), load_external_data=False)
    b = next(t for t in proto.graph.initializer if t.name == "b")
    value = onnx.numpy_helper.to_array(b, base_dir=str(tmp_path))
    save_file({"b": value}, str(tmp_path / "b.safetensors"))
    del b.external_data[:]
    b.external_data.add(key="location", value="b.safetensors")
    onnx.save_model(proto, str(path))
    module = built(path, Options(checkpoints=(tmp_path / "b.safetensors",)))
    assert "b" not in {row[0] for row in module.Weights._EXTERNAL}
    want = oracle_with(path, {"b": value})
    data, checkpoint = tmp_path / "model.onnx.data", tmp_path / "b.safetensors"
    both = module.Weights.load({"model.onnx.data": data.read_bytes(), "b.safetensors": checkpoint.read_bytes()})
    assert_same([module.forward(both, IDS)], want)
    assert_same([module.forward(module.Weights.load_file([data, checkpoint]), IDS)], want)
    with pytest.raises(module.LoadError, match=r"tensor 'b' is missing from the checkpoint"):
        module.Weights.load_file(data)


def oracle_with(path: Path, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime on the model at `path` with `values` put in for the initializers of those names."""
    import onnxruntime as ort

    proto = onnx.load(str(path), load_external_data=False)
    for t in proto.graph.initializer:
        if t.name in values:
            t.CopyFrom(onnx.numpy_helper.from_array(values[t.name], t.name))
    onnx.load_external_data_for_model(proto, str(path.parent))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(session.run(None, {"ids": IDS}))
