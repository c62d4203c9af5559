"""GGUF checkpoints at build time: the reader (`loam/runtime/gguf.parse_gguf_header`), the name map and the checks.

The reader is held to bytes laid out by hand here, field by field from the GGUF description (and, when
the `gguf` package happens to be installed, to its reader); the fixture writer
(tests/checkpoints/gguf_writer.py) is held to the same hand-laid bytes.  Builds run the MLP and the
tiny GPT-2 against GGUF files holding their weights as F32, F16 and Q8_0, renamed through
`[checkpoint_names]`.  Every refusal is a hand-made bad file, through `loam.build` and through `loam build`.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import loam
from loam.core.errors import CheckpointError, OptionsError
from loam.driver import architectures
from loam.driver.architectures import Architecture
from loam.driver.options import Options
from loam.runtime.gguf import _ggml_types, graph_name_of, parse_gguf_header
from loam.tools import loam_main
from tests.checkpoints.gguf_writer import ARRAY, FLOAT64, INT8, UINT64, Tensor, Typed, gguf_bytes, quantize, write_gguf

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp"
GPT2 = ROOT / "tests" / "models" / "tiny_gpt2"


def s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def hand_made() -> tuple[bytes, int]:
    """A v3 GGUF laid out field by field: 2 tensors, 4 metadata values; returns (bytes, data start)."""
    out = b"GGUF" + struct.pack("<I", 3) + struct.pack("<Q", 2) + struct.pack("<Q", 4)
    out += s("general.architecture") + struct.pack("<I", 8) + s("llama")
    out += s("llama.context_length") + struct.pack("<I", 4) + struct.pack("<I", 2048)
    out += s("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<IQ", 8, 2) + s("a") + s("<s>")
    out += s("tokenizer.ggml.scores") + struct.pack("<I", 9) + struct.pack("<IQ", 6, 2) + struct.pack("<2f", 0.5, -1)
    # "w": numpy shape (3, 2): GGUF lists dims fastest first, [2, 3]; F32 (0) at offset 0, 24 bytes.
    out += s("w") + struct.pack("<I", 2) + struct.pack("<2Q", 2, 3) + struct.pack("<I", 0) + struct.pack("<Q", 0)
    # "q": numpy shape (2, 32), Q8_0 (8): 2 blocks of 34 bytes, at offset 32 (24 padded to 32).
    out += s("q") + struct.pack("<I", 2) + struct.pack("<2Q", 32, 2) + struct.pack("<I", 8) + struct.pack("<Q", 32)
    start = (len(out) + 31) // 32 * 32
    # writers pad every tensor, the last too, to the alignment
    return out + bytes(start - len(out)) + bytes(range(24)) + bytes(8) + bytes(68 + 28), start


def test_reader_reads_hand_made_bytes() -> None:
    data, start = hand_made()
    metadata, tensors = parse_gguf_header(data)
    assert metadata == {
        "general.architecture": "llama",
        "llama.context_length": 2048,
        "tokenizer.ggml.tokens": ["a", "<s>"],
        "tokenizer.ggml.scores": [0.5, -1.0],
    }
    assert tensors == {"w": ("F32", (3, 2), start, 24), "q": ("Q8_0", (2, 32), start + 32, 68)}
    # a memoryview and a bytearray read the same
    assert parse_gguf_header(memoryview(data)) == parse_gguf_header(bytearray(data)) == (metadata, tensors)


def test_writer_lays_out_the_same_bytes_as_the_hand() -> None:
    data, _ = hand_made()
    written = gguf_bytes(
        {"w": Tensor("F32", (3, 2), bytes(range(24))), "q": Tensor("Q8_0", (2, 32), bytes(68))},
        {
            "general.architecture": "llama",
            "llama.context_length": 2048,
            "tokenizer.ggml.tokens": ["a", "<s>"],
            "tokenizer.ggml.scores": [0.5, -1.0],
        },
    )
    assert written == data


def test_reader_agrees_with_the_gguf_package(tmp_path: Path) -> None:
    """Our writer's file, read by our reader, by hand and by llama.cpp's `gguf` package alike."""
    import gguf

    path = write_gguf(
        tmp_path / "x.gguf",
        {"a": Tensor("F16", (4, 64)), "b": Tensor("Q4_1", (3, 32)), "c": Tensor("F32", (5,))},
        {"general.alignment": 64, "x.ints": Typed(ARRAY, [-1, 2], INT8), "x.big": Typed(UINT64, 2**40)},
    )
    metadata, tensors = parse_gguf_header(path.read_bytes())
    header = 4 + 4 + 8 + 8
    header += (8 + 17 + 4 + 4) + (8 + 6 + 4 + 4 + 8 + 2) + (8 + 5 + 4 + 8)
    header += (8 + 1 + 4 + 16 + 4 + 8) * 2 + (8 + 1 + 4 + 8 + 4 + 8)
    start = (header + 63) // 64 * 64
    assert tensors == {
        "a": ("F16", (4, 64), start, 512),
        "b": ("Q4_1", (3, 32), start + 512, 60),
        "c": ("F32", (5,), start + 576, 20),
    }
    reader = gguf.GGUFReader(path)
    theirs = {
        t.name: (t.tensor_type.name, tuple(reversed(t.shape.tolist())), t.data_offset, t.n_bytes)
        for t in reader.tensors
    }
    assert tensors == theirs
    assert metadata == {"general.alignment": 64, "x.ints": [-1, 2], "x.big": 2**40}


def test_reader_reads_what_the_gguf_package_writes(tmp_path: Path) -> None:
    """A file written by llama.cpp's own `gguf.GGUFWriter` (F32, F16 and a Q8_0 tensor it quantized)."""
    import gguf
    from gguf import quants

    path = tmp_path / "theirs.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_uint32("llama.block_count", 2)
    writer.add_tensor("a", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.add_tensor("h", np.ones((2, 8), np.float16))
    q8 = quants.quantize(np.linspace(-1, 1, 128, dtype=np.float32).reshape(2, 64), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("q", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    metadata, tensors = parse_gguf_header(path.read_bytes())
    assert metadata["general.architecture"] == "llama" and metadata["llama.block_count"] == 2
    reader = gguf.GGUFReader(path)
    assert tensors == {
        t.name: (t.tensor_type.name, tuple(reversed(t.shape.tolist())), t.data_offset, t.n_bytes)
        for t in reader.tensors
    }
    assert tensors["q"][:2] == ("Q8_0", (2, 64))


def test_reader_reads_every_value_type() -> None:
    values = {
        f"t{kind}": Typed(kind, value)
        for kind, value in [
            (0, 255),
            (1, -128),
            (2, 65535),
            (3, -2),
            (4, 7),
            (5, -7),
            (7, True),
            (10, 2**63),
            (11, -(2**62)),
        ]
    }
    values |= {"f32": Typed(6, 1.5), "f64": Typed(FLOAT64, 0.1), "str": "héllo", "empty": Typed(ARRAY, [], 8)}
    values["nested"] = Typed(ARRAY, [], ARRAY)  # an array of arrays is defined; llama.cpp writes none
    metadata, tensors = parse_gguf_header(gguf_bytes({}, values))
    assert tensors == {}
    assert metadata["t0"] == 255 and metadata["t1"] == -128 and metadata["t3"] == -2 and metadata["t7"] is True
    assert metadata["t10"] == 2**63 and metadata["t11"] == -(2**62) and metadata["f32"] == 1.5
    assert (
        metadata["f64"] == 0.1 and metadata["str"] == "héllo" and metadata["empty"] == [] and metadata["nested"] == []
    )


def test_version_2_reads_like_3() -> None:
    v2 = gguf_bytes({"w": Tensor("F32", (2,))}, version=2)
    assert parse_gguf_header(v2)[1] == {"w": ("F32", (2,), 64, 8)}


def test_block_sizes_match_ggml() -> None:
    table = _ggml_types()
    assert table[0] == ("F32", 1, 4) and table[1] == ("F16", 1, 2) and table[30] == ("BF16", 1, 2)
    assert table[2] == ("Q4_0", 32, 18) and table[3] == ("Q4_1", 32, 20) and table[8] == ("Q8_0", 32, 34)


def test_reader_touches_no_tensor_data() -> None:
    """The data section cut off entirely (and a header padding cut short) still parses."""
    data = gguf_bytes({"w": Tensor("F32", (1000, 64))})
    header_end = len(data) - 1000 * 64 * 4
    assert parse_gguf_header(data[:header_end])[1]["w"][2] == header_end
    assert parse_gguf_header(data[: header_end - 5])[1]["w"][2] == header_end


# -- bad files: the reader ---------------------------------------------------------------------------


def _bad(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new) :]


GOOD = gguf_bytes({"w": Tensor("F32", (3, 2)), "q": Tensor("Q8_0", (2, 32))}, {"general.architecture": "llama"})
INFO_START = 24 + (8 + 20 + 4 + 8 + 5)

BAD_FILES = {
    "bad magic": (_bad(GOOD, 0, b"GGML"), "not a GGUF file: it starts with b'GGML'"),
    "version 1": (_bad(GOOD, 4, struct.pack("<I", 1)), "GGUF version 1; only versions 2 and 3"),
    "version 4": (_bad(GOOD, 4, struct.pack("<I", 4)), "GGUF version 4"),
    "big-endian": (_bad(GOOD, 4, struct.pack(">I", 3)), "big-endian GGUF"),
    "truncated infos": (GOOD[: INFO_START + 25], "the header is cut short: dim 1 of tensor 'w'"),
    "truncated metadata": (GOOD[:40], "the header is cut short: metadata key 0"),
    "unknown value type": (_bad(GOOD, 24 + 28, struct.pack("<I", 13)), "value type 13, which GGUF does not define"),
    "unknown ggml type": (_bad(GOOD, INFO_START + 8 + 1 + 4 + 16, struct.pack("<I", 99)), "ggml type 99"),
    "misplaced offset": (_bad(GOOD, INFO_START + 41 + 8 + 1 + 4 + 16 + 4, struct.pack("<Q", 24)), "data offset 24"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_reader_refuses(case: str) -> None:
    data, needle = BAD_FILES[case]
    with pytest.raises(ValueError, match=None) as info:
        parse_gguf_header(data)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("tensors", "metadata", "needle"),
    [
        (
            {"w": Tensor("Q8_0", (2, 16), bytes(34))},
            {},
            "tensor 'w' is Q8_0, whose blocks hold 32 values, but its rows hold 16",
        ),
        ({"w": Tensor("F32", (1, 1, 1, 1, 2))}, {}, "tensor 'w' has 5 dims; GGUF holds at most 4"),
        ({"w": Tensor("F32", (2,))}, {"general.alignment": 48}, "general.alignment is 48, not a power of two"),
    ],
)
def test_reader_refuses_bad_tensors(tensors: dict[str, Tensor], metadata: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_gguf_header(gguf_bytes(tensors, metadata))
    assert needle in str(info.value)


def test_reader_refuses_repeats() -> None:
    twice = GOOD.replace(b"\x01\x00\x00\x00\x00\x00\x00\x00q", b"\x01\x00\x00\x00\x00\x00\x00\x00w")
    with pytest.raises(ValueError, match="tensor 'w' appears twice"):
        parse_gguf_header(twice)
    key = gguf_bytes({}, {"a.b": 1, "a.c": 2}).replace(b"a.c", b"a.b")
    with pytest.raises(ValueError, match=r"metadata key 'a\.b' appears twice"):
        parse_gguf_header(key)


# -- the name map ------------------------------------------------------------------------------------


def test_graph_name_globs_one_segment_per_star() -> None:
    rules = (
        ("blk.*.attn_q.weight", "model.layers.*.self_attn.q_proj.weight"),
        ("blk.*.ffn_*.weight", "layers.*.mlp.*.weight"),
        ("token_embd.weight", "embed.weight"),
        ("*.weight", "fallback.*"),
    )
    assert graph_name_of("blk.12.attn_q.weight", rules) == "model.layers.12.self_attn.q_proj.weight"
    assert graph_name_of("blk.3.ffn_up.weight", rules) == "layers.3.mlp.up.weight"
    assert graph_name_of("token_embd.weight", rules) == "embed.weight"
    assert graph_name_of("output.weight", rules) == "fallback.output"
    # `*` spans no `.`: `blk.1.2.attn_q.weight` is not matched by the first rule, nor by `*.weight`
    assert graph_name_of("blk.1.2.attn_q.weight", rules) == "blk.1.2.attn_q.weight"
    assert graph_name_of("unmatched", rules) == "unmatched"


def test_checkpoint_names_in_toml_keep_their_order(tmp_path: Path) -> None:
    toml = tmp_path / "o.toml"
    toml.write_text('[checkpoint_names]\n"blk.*.w" = "b.*.w"\n"a" = "b"\n', encoding="utf-8")
    assert Options.from_toml(toml).checkpoint_names == (("blk.*.w", "b.*.w"), ("a", "b"))
    assert Options(checkpoint_names={"x.*": "y.*"}).checkpoint_names == (("x.*", "y.*"),)


@pytest.mark.parametrize(
    ("names", "needle"),
    [
        ({"blk.*.w": "b.w"}, "the graph name has 0 '*', the glob 1"),
        ({"blk.**": "b.*"}, "'**' is not a glob here"),
        ({"": "b"}, "both must be non-empty strings"),
        ({"a": 3}, "both must be non-empty strings"),
    ],
)
def test_bad_checkpoint_names_are_refused(tmp_path: Path, names: dict[str, object], needle: str) -> None:
    with pytest.raises(OptionsError, match=None) as info:
        Options.from_mapping({"checkpoint_names": names}, source=tmp_path / "o.toml")
    assert needle in str(info.value) and "[checkpoint_names]" in str(info.value)


# -- builds ------------------------------------------------------------------------------------------

MLP_NAMES = {"fc*.weight": "fc*.weight"}


def mlp_gguf(path: Path, kinds: dict[str, str] | None = None, metadata: dict[str, object] | None = None) -> Path:
    """The MLP's checkpoint as GGUF, F32 unless `kinds` says otherwise, tensors named `mlp.*`."""
    weights = load_file(MLP / "mlp.safetensors")
    tensors = {}
    for name, value in weights.items():
        kind = (kinds or {}).get(name, "F32")
        raw = value.astype(np.float16 if kind == "F16" else np.float32).tobytes() if kind in ("F32", "F16") else None
        tensors[f"mlp.{name}"] = Tensor(kind, value.shape, raw)
    return write_gguf(path, tensors, metadata)


def mlp_options(**extra: object) -> Options:
    base = Options.from_toml(MLP / "loam.toml")
    return Options(layout=base.layout, checkpoint_names={"mlp.*.*": "*.*"}, **extra)  # type: ignore[arg-type]


def test_mlp_builds_from_gguf_through_the_name_map(tmp_path: Path) -> None:
    path = mlp_gguf(tmp_path / "mlp.gguf", {"fc2.weight": "F16"}, {"general.architecture": "mlp", "extra": 1})
    result = loam.build(MLP / "mlp.onnxtext", checkpoints=[path], options=mlp_options())
    assert result.notes == []
    # the module renames by the same rules when it loads the file (fc2.weight held as F16)
    weights = result.module.Weights.load(path.read_bytes())
    got = result.module.forward(weights, np.load(MLP / "input.npy"))
    np.testing.assert_allclose(got, np.load(MLP / "expected.npy"), atol=1e-3)


def test_unread_gguf_tensors_are_one_note(tmp_path: Path) -> None:
    weights = load_file(MLP / "mlp.safetensors")
    tensors = {f"mlp.{n}": Tensor("F32", v.shape, v.tobytes()) for n, v in weights.items()}
    tensors |= {"rope.freqs": Tensor("F32", (8,)), "blk.0.q": Tensor("Q6_K", (1, 256))}  # Q6_K: never read, so fine
    path = write_gguf(tmp_path / "m.gguf", tensors)
    result = loam.build(MLP / "mlp.onnxtext", checkpoints=[path], options=mlp_options())
    assert result.notes == [f"checkpoint {path}: 2 tensors the graph never reads: rope.freqs, blk.0.q"]


def test_tiny_gpt2_builds_from_a_quantized_gguf(tmp_path: Path) -> None:
    """F32 vectors, Q8_0 matrices (rows of 64..256: whole blocks), F16 where a row is 1000 long."""
    weights = load_file(GPT2 / "tiny_gpt2.safetensors")
    tensors = {}
    for name, value in weights.items():
        gguf_name = name.replace("transformer.h.", "blk.").replace("transformer.", "")
        if value.ndim == 2 and value.shape[1] % 32 == 0:
            tensors[gguf_name] = Tensor("Q8_0", value.shape, quantize(value, "Q8_0"))
        elif value.ndim == 2:
            tensors[gguf_name] = Tensor("F16", value.shape, value.astype(np.float16).tobytes())
        else:
            tensors[gguf_name] = Tensor("F32", value.shape, value.tobytes())
    path = write_gguf(tmp_path / "gpt2.gguf", tensors, {"general.architecture": "gpt2"})
    base = Options.from_toml(GPT2 / "decoder.loam.toml")
    names = {
        "blk.*.*.*.*": "transformer.h.*.*.*.*",
        "blk.*.*.*": "transformer.h.*.*.*",
        "w*.weight": "transformer.w*.weight",
    }
    names["ln_f.*"] = "transformer.ln_f.*"
    result = loam.build(
        GPT2 / "decoder.onnxtext", checkpoints=[path], options=Options(layout=base.layout, checkpoint_names=names)
    )
    assert result.notes == []


def test_architecture_table_names_and_general_architecture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(architectures.ARCHITECTURES, "mlp", Architecture("mlp", (("mlp.*.*", "*.*"),)))
    path = mlp_gguf(tmp_path / "mlp.gguf", metadata={"general.architecture": "mlp"})
    base = Options.from_toml(MLP / "loam.toml")
    # the table's names alone map the checkpoint
    assert (
        loam.build(
            MLP / "mlp.onnxtext", checkpoints=[path], options=Options(layout=base.layout, architecture="mlp")
        ).notes
        == []
    )
    other = mlp_gguf(tmp_path / "llama.gguf", metadata={"general.architecture": "llama"})
    with pytest.raises(CheckpointError) as info:
        loam.build(MLP / "mlp.onnxtext", checkpoints=[other], options=Options(layout=base.layout, architecture="mlp"))
    assert str(info.value) == f"checkpoint {other}: general.architecture is 'llama', the options' architecture is 'mlp'"
    with pytest.raises(OptionsError, match=r"architecture 'falcon': no such table \(known: (\w+, )*mlp\b"):
        loam.build(MLP / "mlp.onnxtext", checkpoints=[path], options=Options(layout=base.layout, architecture="falcon"))


def test_a_gguf_whose_data_was_cut_off_still_builds(tmp_path: Path) -> None:
    path = mlp_gguf(tmp_path / "mlp.gguf")
    data = path.read_bytes()
    _, tensors = parse_gguf_header(data)
    path.write_bytes(data[: min(start for _, _, start, _ in tensors.values())])
    assert loam.build(MLP / "mlp.onnxtext", checkpoints=[path], options=mlp_options()).notes == []


def test_gguf_without_the_suffix_is_recognized_by_its_magic(tmp_path: Path) -> None:
    path = mlp_gguf(tmp_path / "weights.bin")
    assert loam.build(MLP / "mlp.onnxtext", checkpoints=[path], options=mlp_options()).notes == []


# -- refusals through loam.build and loam build ------------------------------------------------------


def _refusals(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = mlp_gguf(tmp_path / "good.gguf").read_bytes()
    cases: dict[str, tuple[bytes, str]] = {
        "bad magic": (_bad(good, 0, b"GGJT"), "not a GGUF file: it starts with b'GGJT'"),
        "bad version": (_bad(good, 4, struct.pack("<I", 7)), "GGUF version 7; only versions 2 and 3 are read"),
        "truncated infos": (good[:60], "the header is cut short: "),
        "empty": (b"", "not a GGUF file: it is empty"),
    }
    out = {}
    for case, (data, needle) in cases.items():
        path = tmp_path / f"{case.replace(' ', '_')}.gguf"
        path.write_bytes(data)
        out[case] = (path, f"checkpoint {path}: {needle}")
    shape = write_gguf(
        tmp_path / "shape.gguf",
        {
            f"mlp.{n}": Tensor("F32", v.shape if n != "fc1.weight" else (16, 9))
            for n, v in load_file(MLP / "mlp.safetensors").items()
        },
    )
    out["shape"] = (
        shape,
        f"checkpoint {shape}: tensor 'fc1.weight' ('mlp.fc1.weight' in the checkpoint) axis 1 (In) is 8 in the graph, "
        "9 in the checkpoint",
    )
    k = {f"mlp.{n}": Tensor("F32", v.shape) for n, v in load_file(MLP / "mlp.safetensors").items()}
    k["mlp.fc3.bias"] = Tensor("I32", (3,))
    kind = write_gguf(tmp_path / "kind.gguf", k)
    out["unloadable type"] = (
        kind,
        f"checkpoint {kind}: tensor 'fc3.bias' ('mlp.fc3.bias' in the checkpoint) is I32, which Loam cannot load",
    )
    return out


REFUSALS = ["bad magic", "bad version", "truncated infos", "empty", "shape", "unloadable type"]


@pytest.mark.parametrize("case", REFUSALS)
def test_bad_gguf_is_refused_by_the_api(case: str, tmp_path: Path) -> None:
    path, message = _refusals(tmp_path)[case]
    with pytest.raises(CheckpointError) as info:
        loam.build(MLP / "mlp.onnxtext", checkpoints=[path], options=mlp_options())
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("case", REFUSALS)
def test_bad_gguf_is_one_line_on_the_cli(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, message = _refusals(tmp_path)[case]
    toml = tmp_path / "loam.toml"
    toml.write_text(
        (MLP / "loam.toml")
        .read_text()
        .replace('checkpoint = "mlp.safetensors"', '[checkpoint_names]\n"mlp.*.*" = "*.*"')
    )
    with pytest.raises(SystemExit) as info:
        loam_main.main(
            [
                "build",
                str(MLP / "mlp.onnxtext"),
                "--options",
                str(toml),
                "--checkpoint",
                str(path),
                "-o",
                str(tmp_path / "o.py"),
            ]
        )
    assert info.value.code == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line or "Traceback" in line]
    assert len(lines) == 1 and lines[0].startswith("loam: error: ") and message in lines[0], lines


def test_header_extent_ends_where_the_data_starts(tmp_path: Path) -> None:
    from loam.frontends.gguf import header_extent

    path = write_gguf(tmp_path / "a.gguf", {"a": Tensor("F32", (100,)), "b": Tensor("Q8_0", (1, 32))})
    _, tensors = parse_gguf_header(path.read_bytes())
    assert header_extent(path) == tensors["a"][2] == 32 * ((24 + 2 * (8 + 1 + 4 + 8 + 4 + 8) + 8 + 31) // 32)
    empty = write_gguf(tmp_path / "b.gguf", {}, {"k": 1})
    assert header_extent(empty) == empty.stat().st_size
    bad = tmp_path / "c.gguf"
    bad.write_bytes(b"GGUF" + bytes(60))
    assert header_extent(bad) == 64
