"""The build cache: `loam build` keyed on the graph, the checkpoint headers, the options and Loam.

Each test builds the MLP example (copied into tmp_path) through the real CLI with LOAM_CACHE_DIR in
tmp_path and HOME pointed at an empty folder, so the real cache is never touched.  Checkpoints are
rewritten with the `safetensors` library: a new payload under the same header, or a new header.
"""

from __future__ import annotations

import json
import shutil
import struct
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.external_data_helper import load_external_data_for_model
from safetensors.numpy import load_file, save_file

from loam.driver import cache
from loam.driver.options import Options
from loam.testing import assert_same, import_module_file, run_onnxruntime
from loam.tools import loam_main

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp"
X = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOAM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "cache"


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    folder = tmp_path / "mlp"
    folder.mkdir()
    for name in ("mlp.onnxtext", "mlp.safetensors", "loam.toml"):
        shutil.copy(MLP / name, folder / name)
    return folder


def build(folder: Path, capsys: pytest.CaptureFixture[str], *flags: str, out: str = "out.py") -> tuple[int, str]:
    argv = ["build", str(folder / "mlp.onnxtext"), "--options", str(folder / "loam.toml"), "-o", str(folder / out)]
    with pytest.raises(SystemExit) as info:
        loam_main.main([*argv, *flags])
    code = info.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def hits(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("loam: cache hit (")]


def header_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return data[: 8 + length]


def new_payload(folder: Path, scale: float) -> None:
    """The same tensors (names, dtypes, shapes) with other values: only the payload changes."""
    path = folder / "mlp.safetensors"
    before = header_bytes(path)
    save_file({name: value * scale for name, value in load_file(str(path)).items()}, str(path))
    assert header_bytes(path) == before


def onnxruntime_output(folder: Path) -> np.ndarray:
    model = onnx.parser.parse_model((folder / "mlp.onnxtext").read_text(encoding="utf-8"))
    load_external_data_for_model(model, str(folder))
    return run_onnxruntime(model, {"x": X})[0]


def forward(module: types.ModuleType, weights: object) -> np.ndarray:
    out = module.forward(weights, X)
    return np.asarray(out[0] if isinstance(out, tuple) else out)


def test_second_build_is_a_hit_writing_the_same_module(
    mlp: Path, private_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = build(mlp, capsys, out="first.py")
    assert code == 0 and not hits(err), err
    [entry] = private_cache.glob("*.json")
    code, err = build(mlp, capsys, out="second.py")
    assert code == 0, err
    assert hits(err) == [f"loam: cache hit ({entry.stem[:12]})"]
    assert f"loam: wrote {mlp / 'second.py'}" in err and "node" in err  # the report is replayed
    assert (mlp / "first.py").read_text() == (mlp / "second.py").read_text()
    assert not (mlp.parent / "home").exists()  # nothing written under HOME


def test_payload_only_change_is_a_hit_and_the_module_loads_the_new_weights(
    mlp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build(mlp, capsys)[0] == 0
    new_payload(mlp, 0.5)
    code, err = build(mlp, capsys, out="again.py")
    assert code == 0 and hits(err), err
    module = import_module_file(mlp / "again.py")
    weights = module.Weights.load((mlp / "mlp.safetensors").read_bytes())
    assert_same([forward(module, weights)], [onnxruntime_output(mlp)])


def test_header_change_of_a_shape_is_a_miss(mlp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build(mlp, capsys)[0] == 0
    tensors = load_file(str(mlp / "mlp.safetensors"))
    tensors["fc3.bias"] = np.zeros(5, dtype=np.float32)  # the graph says 3
    save_file(tensors, str(mlp / "mlp.safetensors"))
    code, err = build(mlp, capsys, out="again.py")
    assert code == 1 and not hits(err), err
    assert "fc3.bias" in err.splitlines()[-1] and "Traceback" not in err
    assert not (mlp / "again.py").exists()


def test_header_change_that_still_builds_is_a_miss(mlp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build(mlp, capsys)[0] == 0
    tensors = load_file(str(mlp / "mlp.safetensors"))
    save_file(tensors, str(mlp / "mlp.safetensors"), metadata={"note": "re-exported"})  # other header bytes
    code, err = build(mlp, capsys)
    assert code == 0 and not hits(err), err
    assert hits(build(mlp, capsys)[1])


def test_option_change_is_a_miss_and_reformatting_is_not(mlp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build(mlp, capsys)[0] == 0
    toml = mlp / "loam.toml"
    text = toml.read_text(encoding="utf-8")
    # The same options, written differently: comments gone, spacing changed.
    toml.write_text("\n".join(line.split("#")[0].replace(" = ", "=") for line in text.splitlines()) + "\n")
    assert Options.from_toml(toml) == Options.from_toml(MLP / "loam.toml").merged(checkpoints=[mlp / "mlp.safetensors"])
    code, err = build(mlp, capsys)
    assert code == 0 and hits(err), err
    toml.write_text(text.replace('"Hidden2"', '"Mid"'), encoding="utf-8")  # an axis renamed
    code, err = build(mlp, capsys)
    assert code == 0 and not hits(err), err
    code, err = build(mlp, capsys, "--layout", "fc3.bias=Out")  # a flag is an option too
    assert code == 0 and not hits(err), err


def test_inline_weights_makes_the_payload_part_of_the_key(mlp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build(mlp, capsys, "--inline-weights")[0] == 0
    assert hits(build(mlp, capsys, "--inline-weights")[1])
    new_payload(mlp, -2.0)
    code, err = build(mlp, capsys, "--inline-weights", out="inlined.py")
    assert code == 0 and not hits(err), err
    module = import_module_file(mlp / "inlined.py")
    assert_same([forward(module, module.Weights.embedded())], [onnxruntime_output(mlp)])


def test_no_cache_neither_reads_nor_writes(mlp: Path, private_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = build(mlp, capsys, "--no-cache")
    assert code == 0 and not hits(err)
    assert not private_cache.exists()
    assert build(mlp, capsys)[0] == 0
    code, err = build(mlp, capsys, "--no-cache")
    assert code == 0 and not hits(err) and "running stage0" in err


def test_dump_ir_always_builds(mlp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build(mlp, capsys)[0] == 0
    code, err = build(mlp, capsys, "--dump-ir", str(mlp / "ir"))
    assert code == 0 and not hits(err)
    assert list((mlp / "ir").glob("*.mlir"))


def test_corrupt_entry_is_ignored_and_rebuilt(
    mlp: Path, private_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build(mlp, capsys, out="good.py")[0] == 0
    [entry] = private_cache.glob("*.json")
    good = entry.read_text(encoding="utf-8")
    tampered = json.loads(good)
    tampered["source"] = tampered["source"].replace("def forward(", "def forward_(")
    damaged = [good[: len(good) // 2], "not json", json.dumps(tampered), json.dumps({**tampered, "digest": None})]
    for text in damaged:
        entry.write_text(text, encoding="utf-8")
        code, err = build(mlp, capsys, out="rebuilt.py")
        assert code == 0 and not hits(err), err
        assert (mlp / "rebuilt.py").read_text() == (mlp / "good.py").read_text()
        assert entry.read_text(encoding="utf-8") == good  # rewritten whole


def test_cache_folder_defaults_to_home_and_follows_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cache.cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("LOAM_CACHE_DIR")
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "loam"


def test_unwritable_cache_costs_a_note_not_the_build(
    mlp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("LOAM_CACHE_DIR", str(blocker / "cache"))  # under a file: cannot be created
    code, err = build(mlp, capsys)
    assert code == 0, err
    assert "loam: note: build cache not written" in err and (mlp / "out.py").exists()


# -- the key, directly -----------------------------------------------------------------------------


def test_key_depends_on_loam_itself(mlp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = Options.from_toml(mlp / "loam.toml")
    key = cache.build_key(mlp / "mlp.onnxtext", options)
    monkeypatch.setattr(cache, "_loam_fingerprint", lambda: {"loam": "0.0-other"})
    assert cache.build_key(mlp / "mlp.onnxtext", options) not in (key, None)


def test_graph_bytes_are_the_key(mlp: Path) -> None:
    options = Options.from_toml(mlp / "loam.toml")
    key = cache.build_key(mlp / "mlp.onnxtext", options)
    text = mlp / "mlp.onnxtext"
    text.write_text(text.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert cache.build_key(text, options) != key


def test_checkpoint_extents(tmp_path: Path) -> None:
    st = tmp_path / "w.safetensors"
    save_file({"a": np.ones(4, dtype=np.float32)}, str(st))
    header = cache.checkpoint_extent(st)
    save_file({"a": np.zeros(4, dtype=np.float32)}, str(st))
    assert cache.checkpoint_extent(st) == header  # payload only
    assert cache.checkpoint_extent(st, whole=True) != cache.checkpoint_extent(st)
    save_file({"a": np.zeros(5, dtype=np.float32)}, str(st))
    assert cache.checkpoint_extent(st) != header  # a shape

    # A Hugging Face index keys each shard's header too.
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "w.safetensors"}}), encoding="utf-8")
    before = cache.checkpoint_extent(index)
    save_file({"a": np.ones(5, dtype=np.float32)}, str(st))
    assert cache.checkpoint_extent(index) == before
    save_file({"a": np.ones(6, dtype=np.float32)}, str(st))
    assert cache.checkpoint_extent(index) != before

    # GGUF: keyed on the header and tensor infos (loam.frontends.gguf.header_extent), else whole.
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(gguf_file(np.ones(4, dtype=np.float32)))
    first = cache.checkpoint_extent(gguf)
    gguf.write_bytes(gguf_file(np.zeros(4, dtype=np.float32)))
    assert cache.checkpoint_extent(gguf) == first  # payload only
    gguf.write_bytes(gguf_file(np.zeros(5, dtype=np.float32)))
    assert cache.checkpoint_extent(gguf) != first  # a shape


def gguf_file(values: np.ndarray, alignment: int = 32) -> bytes:
    """A GGUF v3 file holding one F32 tensor 'a' (written from the format's definition)."""

    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text)) + text.encode()

    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 1)
    head += string("general.architecture") + struct.pack("<I", 8) + string("test")  # 8: a string value
    head += string("a") + struct.pack("<I", 1) + struct.pack("<Q", values.size) + struct.pack("<IQ", 0, 0)  # 0: F32
    return head + bytes(-len(head) % alignment) + values.astype("<f4").tobytes()
