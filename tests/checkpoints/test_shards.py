"""Sharded checkpoints: several checkpoint files, or a Hugging Face `model.safetensors.index.json`.

The MLP and the tiny GPT-2 are built from a two-shard split of their checkpoints (written here with
safetensors, plus the index Hugging Face writes beside them) and run against onnxruntime's outputs
(examples/mlp/expected.npy, tests/models/tiny_gpt2/expected.npz), loading the shards as a mapping of
shard name -> bytes.  Each index refusal is a hand-made bad index or shard set, through `loam.build`
and through `loam build`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import loam
from loam.core.errors import CheckpointError
from loam.driver.options import Options
from loam.tools import loam_main

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp"
GPT2 = ROOT / "tests" / "models" / "tiny_gpt2"
INDEX = "model.safetensors.index.json"


def split(weights: dict[str, np.ndarray], folder: Path, parts: int = 2) -> Path:
    """`weights` split into `parts` shards in `folder`, with the index naming each tensor's shard."""
    folder.mkdir(parents=True, exist_ok=True)
    names = list(weights)
    weight_map: dict[str, str] = {}
    for i in range(parts):
        shard = f"model-{i + 1:05d}-of-{parts:05d}.safetensors"
        chunk = names[i::parts]
        save_file({n: weights[n] for n in chunk}, str(folder / shard))
        weight_map |= dict.fromkeys(chunk, shard)
    total = sum(v.nbytes for v in weights.values())
    (folder / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return folder / INDEX


def shard_bytes(index: Path) -> dict[str, bytes]:
    """The shards an index names, as `Weights.load` takes them: shard file name -> bytes."""
    shards = set(json.loads(index.read_text())["weight_map"].values())
    return {shard: (index.parent / shard).read_bytes() for shard in sorted(shards)}


def mlp_options() -> Options:
    return Options(layout=Options.from_toml(MLP / "loam.toml").layout)


def build_mlp(*checkpoints: Path) -> loam.BuildResult:
    return loam.build(MLP / "mlp.onnxtext", checkpoints=list(checkpoints), options=mlp_options())


def test_the_mlp_builds_and_runs_from_an_index_and_two_shards(tmp_path: Path) -> None:
    index = split(load_file(MLP / "mlp.safetensors"), tmp_path)
    result = build_mlp(index)
    assert result.notes == []
    weights = result.module.Weights.load(shard_bytes(index))
    got = result.module.forward(weights, np.load(MLP / "input.npy"))
    np.testing.assert_allclose(got, np.load(MLP / "expected.npy"), atol=1e-5)


def test_the_mlp_builds_from_two_checkpoint_files(tmp_path: Path) -> None:
    index = split(load_file(MLP / "mlp.safetensors"), tmp_path)
    shards = sorted(tmp_path.glob("*.safetensors"))
    assert build_mlp(*shards).notes == []
    # the options' `checkpoint` may name the index too
    toml = tmp_path / "loam.toml"
    toml.write_text((MLP / "loam.toml").read_text().replace("mlp.safetensors", INDEX))
    assert Options.from_toml(toml).checkpoints == (index,)
    assert loam.build(MLP / "mlp.onnxtext", options=Options.from_toml(toml)).notes == []


def gpt2(folder: Path) -> tuple[object, Path]:
    index = split(load_file(GPT2 / "tiny_gpt2.safetensors"), folder)
    layout = Options.from_toml(GPT2 / "decoder.loam.toml").layout
    result = loam.build(GPT2 / "decoder.onnxtext", checkpoints=[index], options=Options(layout=layout))
    assert result.notes == []
    return result.module, index


@pytest.mark.xdist_group("tiny_gpt2")
def test_the_tiny_gpt2_builds_and_runs_from_an_index_and_two_shards(tmp_path: Path) -> None:
    module, index = gpt2(tmp_path)
    weights = module.Weights.load(shard_bytes(index))  # type: ignore[attr-defined]
    with np.load(GPT2 / "expected.npz") as expected:
        ids, want = expected["prompt_ids"][:, :7], expected["decoder.logits.len7"]
    out = module.forward(weights, ids, np.ones_like(ids))  # type: ignore[attr-defined]
    np.testing.assert_allclose(out.logits, want, rtol=0, atol=1e-4)


@pytest.mark.xdist_group("tiny_gpt2")
def test_the_tiny_gpt2_builds_from_a_truncated_checkpoint_and_fails_to_load(tmp_path: Path) -> None:
    checkpoint = GPT2 / "tiny_gpt2.safetensors"
    data = checkpoint.read_bytes()
    header_end = 8 + int.from_bytes(data[:8], "little")
    header = json.loads(data[8:header_end])
    entries = sorted((v["data_offsets"], k) for k, v in header.items() if k != "__metadata__")
    (begin, end), victim = entries[len(entries) // 2]
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[: header_end + (begin + end) // 2])  # halfway through one tensor
    layout = Options.from_toml(GPT2 / "decoder.loam.toml").layout
    result = loam.build(GPT2 / "decoder.onnxtext", checkpoints=[cut], options=Options(layout=layout))
    assert result.notes == []
    with pytest.raises(result.module.LoadError) as info:
        result.module.Weights.load(cut.read_bytes())
    assert f"'{victim}'" in str(info.value)


# -- refusals -----------------------------------------------------------------------------------------


def bad_sets(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """case -> (the checkpoint to give, the message it must produce)."""
    weights = load_file(MLP / "mlp.safetensors")
    out: dict[str, tuple[Path, str]] = {}

    def fresh(case: str) -> tuple[Path, dict[str, object]]:
        index = split(weights, tmp_path / case.replace(" ", "_"))
        return index, json.loads(index.read_text())

    index, _ = fresh("missing shard")
    (index.parent / "model-00002-of-00002.safetensors").unlink()
    out["missing shard"] = (
        index,
        f"checkpoint {index}: tensor 'fc1.weight' (and 2 more tensors) is in shard "
        "'model-00002-of-00002.safetensors', which does not exist",
    )

    index, table = fresh("in two shards")
    first = index.parent / "model-00001-of-00002.safetensors"
    save_file(load_file(first) | {"fc1.weight": weights["fc1.weight"]}, str(first))
    second = index.parent / "model-00002-of-00002.safetensors"
    out["in two shards"] = (index, f"checkpoint {index}: tensor 'fc1.weight' is in two shards: {first} and {second}")

    index, table = fresh("mapped elsewhere")
    table["weight_map"]["fc1.bias"] = "model-00002-of-00002.safetensors"  # type: ignore[index]
    index.write_text(json.dumps(table))
    out["mapped elsewhere"] = (
        index,
        f"checkpoint {index}: tensor 'fc1.bias' is in shard {index.parent / first.name}, "
        "but the index places it in shard 'model-00002-of-00002.safetensors'",
    )

    index, table = fresh("not in its shard")
    table["weight_map"]["fc9.bias"] = "model-00001-of-00002.safetensors"  # type: ignore[index]
    index.write_text(json.dumps(table))
    shard = index.parent / "model-00001-of-00002.safetensors"
    out["not in its shard"] = (
        index,
        f"checkpoint {index}: the index places tensor 'fc9.bias' in shard {shard}, which does not hold it",
    )

    index, table = fresh("not in the index")
    del table["weight_map"]["fc3.bias"]  # type: ignore[attr-defined]
    index.write_text(json.dumps(table))
    shard = index.parent / "model-00001-of-00002.safetensors"
    out["not in the index"] = (
        index,
        f"checkpoint {index}: tensor 'fc3.bias' is in shard {shard}, but the index does not list it",
    )

    save_file(weights, str(tmp_path / "outside.safetensors"))
    every_tensor_in = [
        ("parent folder", "../outside.safetensors", "'../outside.safetensors', which leaves the index's folder"),
        ("symlink", "link.safetensors", "'link.safetensors', which leaves the index's folder"),
        ("name too long", "x" * 300 + ".safetensors", repr("x" * 300 + ".safetensors") + ", which cannot be looked up"),
        ("null byte", "a\0.safetensors", "'a\\x00.safetensors', which cannot be looked up"),
    ]
    for case, place, problem in every_tensor_in:
        index, table = fresh(case)
        (index.parent / "link.safetensors").symlink_to(tmp_path / "outside.safetensors")
        table["weight_map"] = dict.fromkeys(weights, place)
        index.write_text(json.dumps(table))
        out[case] = (index, f"checkpoint {index}: tensor 'fc1.bias' (and 5 more tensors) is in shard {problem}")

    index, table = fresh("absolute path")
    table["weight_map"]["fc1.bias"] = str(tmp_path / "outside.safetensors")  # type: ignore[index]
    index.write_text(json.dumps(table))
    out["absolute path"] = (index, f"checkpoint {index}: tensor 'fc1.bias' is in shard '{tmp_path}")

    index, _ = fresh("invalid JSON")
    index.write_text('{"weight_map": {"fc1.bias": ')
    out["invalid JSON"] = (index, f"checkpoint {index}: the index is not valid JSON")

    index, _ = fresh("no weight map")
    index.write_text('{"metadata": {}}')
    out["no weight map"] = (index, f"checkpoint {index}: the index has no 'weight_map' object")
    return out


CASES = [
    "missing shard",
    "in two shards",
    "mapped elsewhere",
    "not in its shard",
    "not in the index",
    "parent folder",
    "symlink",
    "absolute path",
    "name too long",
    "null byte",
    "invalid JSON",
    "no weight map",
]


@pytest.mark.parametrize("case", CASES)
def test_a_bad_sharded_checkpoint_is_refused_by_the_api(case: str, tmp_path: Path) -> None:
    index, message = bad_sets(tmp_path)[case]
    with pytest.raises(CheckpointError) as info:
        build_mlp(index)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("case", CASES)
def test_a_bad_sharded_checkpoint_is_one_line_on_the_cli(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index, message = bad_sets(tmp_path)[case]
    toml = tmp_path / "loam.toml"
    toml.write_text((MLP / "loam.toml").read_text().replace('checkpoint = "mlp.safetensors"', ""))
    with pytest.raises(SystemExit) as info:
        argv = ["build", str(MLP / "mlp.onnxtext"), "--options", str(toml), "--checkpoint", str(index)]
        loam_main.main([*argv, "-o", str(tmp_path / "o.py")])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("loam: error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"loam: error: {message}"), err


def test_a_tensor_in_two_checkpoint_files_names_both(tmp_path: Path) -> None:
    weights = load_file(MLP / "mlp.safetensors")
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file(weights, str(a))
    save_file({"fc2.bias": weights["fc2.bias"]}, str(b))
    with pytest.raises(CheckpointError, match=re.escape(f"tensor 'fc2.bias' is in two checkpoints: {a} and {b}")):
        build_mlp(a, b)


def test_a_tensor_no_file_holds_names_every_file(tmp_path: Path) -> None:
    weights = load_file(MLP / "mlp.safetensors")
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file({"fc1.bias": weights["fc1.bias"]}, str(a))
    save_file({"fc2.bias": weights["fc2.bias"]}, str(b))
    with pytest.raises(CheckpointError, match=re.escape(f"checkpoints {a}, {b}: none has tensor 'fc1.weight'")):
        build_mlp(a, b)
