"""Silero VAD: every `.onnx` file the `silero-vad` 6.2.3 wheel carries, fed as the package's own code feeds it.

The streaming files (`OnnxWrapper` in silero_vad/utils_vad.py) take a chunk of 512 samples at 16 kHz
or 256 at 8 kHz, after the last 64 (32) samples of the previous chunk (zeros before the first), the
LSTM's `state` [2, batch, 128] the last call returned (`stateN`; zeros first), and `sr`.  A file whose
name says `16k` serves 16 kHz only, as the wrapper says; the others both rates.  The sequence file
(silero_vad/sequence_vad.py) takes a block of frames at once, each frame its 64 context samples and
512 samples [frames, 576], with the LSTM's `h` and `c` carried from `hn` and `cn`.

Each file runs three chunks with its state carried, at each rate it serves, and at batch 2 where its
batch is free; the files that fix the chunk (`silero_vad_openvino_16k.onnx` [1, 576], the sequence
file's 576) are also given an 8 kHz chunk, which must be a ShapeError naming `input`.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx

from tests.models.real_exports.exports import Export, Feeds, Run, package_files

PACKAGE = "silero-vad"
CHUNK = {16000: 512, 8000: 256}
CONTEXT = {16000: 64, 8000: 32}
CHUNKS = 3


def audio(samples: int, batch: int, seed: int) -> np.ndarray:
    """Speech-like test audio: a few seeded tones under noise, within [-1, 1] as the package reads audio."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / 16000.0
    rows = []
    for _ in range(batch):
        tones = sum(rng.uniform(0.05, 0.3) * np.sin(2 * np.pi * rng.uniform(80, 3000) * t) for _ in range(4))
        rows.append(tones + 0.05 * rng.standard_normal(samples))
    return np.asarray(rows, dtype=np.float32)


def chunks(rate: int, batch: int, count: int = CHUNKS) -> list[np.ndarray]:
    """`count` chunks of `rate`'s length, each after the previous chunk's last context samples."""
    size, context = CHUNK[rate], CONTEXT[rate]
    signal = audio(size * count, batch, seed=rate + batch)
    previous = np.zeros((batch, context), np.float32)
    out = []
    for k in range(count):
        chunk = signal[:, k * size : (k + 1) * size]
        out.append(np.ascontiguousarray(np.concatenate([previous, chunk], axis=1)))
        previous = chunk[:, -context:]
    return out


def streaming_runs(inputs: set[str], fixed: bool, rates: tuple[int, ...]) -> tuple[Run, ...]:
    """The runs of a streaming file: `inputs` its graph's inputs, `fixed` whether it fixes batch and chunk."""

    def steps(rate: int, batch: int) -> list[Feeds]:
        with_rate = {"sr": np.array(rate, np.int64)} if "sr" in inputs else {}
        return [{"input": x, **with_rate} for x in chunks(rate, batch)]

    def state(batch: int) -> Feeds:
        return {"state": np.zeros((2, batch, 128), np.float32)}

    runs = []
    for rate in rates:
        for batch in (1,) if fixed else (1, 2):
            runs.append(
                Run(
                    f"{rate // 1000}k-b{batch}-{CHUNKS}chunks",
                    f"input {batch}x{CONTEXT[rate] + CHUNK[rate]}, {CHUNKS} chunks",
                    functools.partial(steps, rate, batch),
                    functools.partial(state, batch),
                    {"stateN": "state"},
                )
            )
    if fixed:
        runs.append(
            Run(
                "8k-chunk-refused",
                f"input 1x{CONTEXT[8000] + CHUNK[8000]} (the graph fixes 576)",
                lambda: [{"input": chunks(8000, 1, 1)[0]}],
                functools.partial(state, 1),
                wrong="input",
            )
        )
    return tuple(runs)


def sequence_runs() -> tuple[Run, ...]:
    """The sequence file: three blocks of 4, 7 and 2 frames, `h` and `c` carried; then 8 kHz frames."""

    def blocks() -> list[Feeds]:
        frames = chunks(16000, 1, 13)
        rows = np.concatenate(frames)  # [13, 576]: frame k is its context and its 512 samples
        return [{"input": rows[a:b]} for a, b in ((0, 4), (4, 11), (11, 13))]

    def zeros() -> Feeds:
        return {"h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}

    return (
        Run("16k-blocks-4-7-2", "input 4x576, 7x576, 2x576", blocks, zeros, {"hn": "h", "cn": "c"}),
        Run(
            "8k-frames-refused",
            "input 3x288 (the graph fixes 576)",
            lambda: [{"input": np.concatenate(chunks(8000, 1, 3))}],
            zeros,
            wrong="input",
        ),
    )


def runs_of(model: onnx.ModelProto, name: str) -> tuple[Run, ...]:
    inputs = {i.name for i in model.graph.input}
    if "h" in inputs:
        return sequence_runs()
    shape = model.graph.input[0].type.tensor_type.shape
    fixed = all(d.HasField("dim_value") for d in shape.dim)
    # As OnnxWrapper: a file named for 16 kHz serves only that rate; without `sr`, 16 kHz is all it knows.
    rates = (16000,) if "16k" in name or "sr" not in inputs else (16000, 8000)
    return streaming_runs(inputs, fixed, rates)


@functools.cache
def exports() -> tuple[Export, ...]:
    """One Export per .onnx file in the installed wheel (none where it is not installed)."""
    found = []
    for path in package_files(PACKAGE, ".onnx"):
        model = onnx.load(str(path), load_external_data=False)
        found.append(
            Export(path.stem, "silero_vad", functools.partial(onnx.load, str(path)), runs_of(model, path.stem))
        )
    return tuple(found)
