"""Safetensors checkpoints at build time: the header alone is read, checked, and checked against the graph.

Every refusal is a hand-made bad file (header bytes written here, not by safetensors), through
`loam.build` (CheckpointError naming the file and the culprit) and through `loam build` (exit status 1,
one line, no traceback).  The build is shown to read no byte past the header twice over: the file
object is watched, and a file whose payload was cut off still builds (its `Weights.load` then names
the first tensor it cannot read).
"""

from __future__ import annotations

import builtins
import io
import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import loam
from loam.core.errors import CheckpointError
from loam.driver.options import Options
from loam.tools import loam_main

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp"
CHECKPOINT = MLP / "mlp.safetensors"


def layout() -> Options:
    return Options(layout=Options.from_toml(MLP / "loam.toml").layout)


def build(checkpoint: Path) -> loam.BuildResult:
    return loam.build(MLP / "mlp.onnxtext", checkpoints=[checkpoint], options=layout())


def header_end(path: Path) -> int:
    return 8 + int.from_bytes(path.read_bytes()[:8], "little")


def safetensors(path: Path, header: object, payload: bytes = b"", *, length: int | None = None) -> Path:
    """A safetensors file from a header (a dict, written as JSON, or raw bytes) and a payload."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + payload)
    return path


def mlp_header(**changes: Any) -> dict[str, Any]:
    """The MLP checkpoint's header, with entries replaced (None: removed)."""
    raw = CHECKPOINT.read_bytes()
    header = json.loads(raw[8 : header_end(CHECKPOINT)])
    for name, entry in changes.items():
        name = name.replace("__", ".")
        if entry is None:
            del header[name]
        else:
            header[name] = entry
    return header


def mlp_payload() -> bytes:
    return CHECKPOINT.read_bytes()[header_end(CHECKPOINT) :]


def test_the_mlp_builds_and_runs_from_its_checkpoint() -> None:
    result = build(CHECKPOINT)
    assert result.notes == []
    weights = result.module.Weights.load(CHECKPOINT.read_bytes())
    x = np.load(MLP / "input.npy")
    np.testing.assert_allclose(result.module.forward(weights, x), np.load(MLP / "expected.npy"), atol=1e-5)


def test_the_build_reads_no_byte_past_the_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of the checkpoint, through any `open`, ends at or before the header's end."""
    path = tmp_path / "mlp.safetensors"
    path.write_bytes(CHECKPOINT.read_bytes())
    ends: list[int] = []
    real_open = builtins.open

    class Watched:
        def __init__(self, f: Any) -> None:
            self._f = f

        def read(self, n: int = -1) -> bytes:
            data = self._f.read(n)
            ends.append(self._f.tell())
            return data

        def readinto(self, buffer: Any) -> int:
            n = self._f.readinto(buffer)
            ends.append(self._f.tell())
            return n

        def __enter__(self) -> Watched:
            return self

        def __exit__(self, *exc: object) -> None:
            self._f.close()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._f, name)

    def watching_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        f = real_open(file, *args, **kwargs)
        if isinstance(file, str | os.PathLike) and Path(file).resolve() == path.resolve():
            return Watched(f)
        return f

    monkeypatch.setattr(builtins, "open", watching_open)
    monkeypatch.setattr(io, "open", watching_open)
    assert build(path).notes == []
    monkeypatch.undo()
    assert ends, "the build never read the checkpoint"
    assert max(ends) <= header_end(path) < path.stat().st_size


@pytest.mark.parametrize("cut", [0, 100])
def test_a_checkpoint_whose_payload_was_cut_off_builds_and_fails_to_load(cut: int, tmp_path: Path) -> None:
    path = tmp_path / "cut.safetensors"
    path.write_bytes(CHECKPOINT.read_bytes()[: header_end(CHECKPOINT) + cut])
    result = build(path)
    assert result.notes == []
    # fc1.bias is bytes [0, 64) of the payload, fc1.weight [64, 576): the first one not all there
    first = "fc1.bias" if cut < 64 else "fc1.weight"
    with pytest.raises(result.module.LoadError) as info:
        result.module.Weights.load(path.read_bytes())
    assert f"'{first}'" in str(info.value)


def test_tensors_the_graph_never_reads_are_one_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = load_file(CHECKPOINT) | {"extra.b": np.zeros(2, np.float32), "extra.a": np.ones(3, np.float32)}
    path = tmp_path / "more.safetensors"
    save_file(weights, str(path))
    notes = build(path).notes
    assert len(notes) == 1
    assert notes[0].startswith(f"checkpoint {path}: 2 tensors the graph never reads: ")
    assert sorted(notes[0].split(": ")[-1].split(", ")) == ["extra.a", "extra.b"]
    toml = tmp_path / "loam.toml"
    toml.write_text((MLP / "loam.toml").read_text().replace('checkpoint = "mlp.safetensors"', ""))
    with pytest.raises(SystemExit) as exit_info:
        argv = ["build", str(MLP / "mlp.onnxtext"), "--options", str(toml), "--checkpoint", str(path)]
        loam_main.main([*argv, "-o", str(tmp_path / "o.py")])
    assert exit_info.value.code in (0, None)
    err = capsys.readouterr().err
    assert err.count("extra.a") == 1 and err.count("note:") == 1, err


# -- refusals -----------------------------------------------------------------------------------------

F32_16 = {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}


def bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """case -> (hand-made file, what the message must say after `checkpoint FILE: `)."""
    payload = mlp_payload()
    made: dict[str, tuple[Path, str]] = {}

    def add(case: str, needle: str, header: object, body: bytes = payload, **kw: Any) -> None:
        made[case] = (safetensors(tmp_path / f"{case}.safetensors", header, body, **kw), needle)

    add("length past the end", "header length 1000000 runs past the end of the file", mlp_header(), length=10**6)
    add("header over the cap", "header length 100000001 exceeds 100000000", mlp_header(), length=100_000_001)
    made["shorter than 8 bytes"] = (tmp_path / "short.safetensors", "shorter than the 8-byte header length")
    made["shorter than 8 bytes"][0].write_bytes(b"\x01\x02")
    add("invalid JSON", "header is not valid JSON", b'{"fc1.bias": {"dtype": "F32",')
    add("not UTF-8", "header is not valid JSON", b'{"\xff": 1}')
    add("repeated tensor", "key 'fc1.bias' appears twice", b'{"fc1.bias": {}, "fc1.bias": {}}')
    add("NaN", "NaN is not JSON", b'{"__metadata__": {"a": NaN}}')
    add("not an object", "header is not a JSON object", b"[1, 2]")
    add("unknown dtype", "tensor 'fc1.bias' has unknown dtype 'F12'", mlp_header(fc1__bias={**F32_16, "dtype": "F12"}))
    add(
        "overlapping offsets",
        "tensor 'fc1.weight' overlaps the tensor before it",
        mlp_header(fc1__weight={"dtype": "F32", "shape": [16, 8], "data_offsets": [60, 572]}),
    )
    add(
        "a hole",
        "a hole of 8 bytes before 'fc2.bias'",
        mlp_header(fc1__weight={"dtype": "F32", "shape": [14, 9], "data_offsets": [64, 568]}),
    )
    add(
        "shape and length disagree",
        "tensor 'fc1.bias' of shape [15] and dtype F32 needs 60 bytes, its offsets span 64",
        mlp_header(fc1__bias={**F32_16, "shape": [15]}),
    )
    add(
        "malformed offsets",
        "tensor 'fc1.bias' has malformed data_offsets [64, 0]",
        mlp_header(fc1__bias={**F32_16, "data_offsets": [64, 0]}),
    )
    add(
        "an unknown key",
        "tensor 'fc1.bias' needs exactly dtype, shape, data_offsets",
        mlp_header(fc1__bias={**F32_16, "x": 1}),
    )
    # checked against the graph
    add(
        "an axis",
        "tensor 'fc1.weight' axis 1 (In) is 8 in the graph, 9 in the checkpoint",
        b"",
    )
    path = made["an axis"][0]
    save_file(load_file(CHECKPOINT) | {"fc1.weight": np.zeros((16, 9), np.float32)}, str(path))
    add("a rank", "tensor 'fc1.bias' has rank 2, the graph's has rank 1 (Hidden)", b"")
    save_file(load_file(CHECKPOINT) | {"fc1.bias": np.zeros((16, 1), np.float32)}, str(made["a rank"][0]))
    add("a dtype", "tensor 'fc2.bias' is f64, the graph reads it as f32, and f64 does not convert", b"")
    save_file(load_file(CHECKPOINT) | {"fc2.bias": np.zeros(12, np.float64)}, str(made["a dtype"][0]))
    add("a missing tensor", "has no tensor 'fc3.weight', which the graph reads", b"")
    save_file({k: v for k, v in load_file(CHECKPOINT).items() if k != "fc3.weight"}, str(made["a missing tensor"][0]))
    return made


CASES = [
    "length past the end",
    "header over the cap",
    "shorter than 8 bytes",
    "invalid JSON",
    "not UTF-8",
    "repeated tensor",
    "NaN",
    "not an object",
    "unknown dtype",
    "overlapping offsets",
    "a hole",
    "shape and length disagree",
    "malformed offsets",
    "an unknown key",
    "an axis",
    "a rank",
    "a dtype",
    "a missing tensor",
]


@pytest.mark.parametrize("case", CASES)
def test_a_bad_checkpoint_is_refused_by_the_api(case: str, tmp_path: Path) -> None:
    path, needle = bad_files(tmp_path)[case]
    with pytest.raises(CheckpointError) as info:
        build(path)
    assert str(info.value).startswith(f"checkpoint {path}: "), str(info.value)
    assert needle in str(info.value)


@pytest.mark.parametrize("case", CASES)
def test_a_bad_checkpoint_is_one_line_on_the_cli(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, needle = bad_files(tmp_path)[case]
    toml = tmp_path / "loam.toml"
    toml.write_text((MLP / "loam.toml").read_text().replace('checkpoint = "mlp.safetensors"', ""))
    with pytest.raises(SystemExit) as info:
        argv = ["build", str(MLP / "mlp.onnxtext"), "--options", str(toml), "--checkpoint", str(path)]
        loam_main.main([*argv, "-o", str(tmp_path / "o.py")])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("loam: error: ")]
    assert len(errors) == 1 and f"checkpoint {path}: " in errors[0] and needle in errors[0], err
