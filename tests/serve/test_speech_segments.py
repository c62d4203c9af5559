"""Speech segments from chunk probabilities equal silero-vad's own `get_speech_timestamps_from_probs`, read
from the installed wheel's silero_vad/utils_vad.py (its module imports torch, which the wheel is installed
without, so the one function is compiled alone: it uses plain Python)."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from loam.serve.speech_segments import SegmentPolicy, speech_segments
from tests.models.real_exports.exports import package_file


@functools.cache
def silero_segments() -> Callable[..., list[dict[str, int]]]:
    path = package_file("silero-vad", "utils_vad.py")
    if path is None:
        pytest.skip("silero-vad is not installed (scripts/dev-setup.sh installs it)")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[ast.stmt] = [node for node in tree.body if isinstance(node, ast.FunctionDef)
                             and node.name == "get_speech_timestamps_from_probs"]  # fmt: skip
    namespace: dict[str, Any] = {"List": list}
    exec(compile(ast.Module(found, []), str(path), "exec"), namespace)  # the wheel's own code, as written
    function: Callable[..., list[dict[str, int]]] = namespace["get_speech_timestamps_from_probs"]
    return function


def probabilities(count: int, seed: int) -> list[float]:
    """Runs of speech and silence with jitter: segments that start, pause briefly, and end."""
    rng = np.random.default_rng(seed)
    out: list[float] = []
    while len(out) < count:
        level = rng.choice([0.05, 0.3, 0.45, 0.7, 0.95])
        out += list(np.clip(level + 0.1 * rng.standard_normal(int(rng.integers(1, 20))), 0, 1))
    return [float(p) for p in out[:count]]


@pytest.mark.parametrize("rate", [16000, 8000])
@pytest.mark.parametrize(
    "policy",
    [SegmentPolicy(), SegmentPolicy(0.6, 0.2, 100, 300, 0), SegmentPolicy(0.3, None, 0, 30, 200)],
)
def test_segments_equal_silero_get_speech_timestamps(rate: int, policy: SegmentPolicy) -> None:
    size = 512 if rate == 16000 else 256
    for seed in range(20):
        probs = probabilities(300, seed)
        length = len(probs) * size - seed * 7
        want = silero_segments()(
            probs, sampling_rate=rate, threshold=policy.threshold, neg_threshold=policy.neg_threshold,
            min_speech_duration_ms=policy.min_speech_duration_ms,
            min_silence_duration_ms=policy.min_silence_duration_ms, speech_pad_ms=policy.speech_pad_ms,
            audio_length_samples=length,
        )  # fmt: skip
        got = speech_segments([k * size for k in range(len(probs))], probs, length, rate, policy)
        assert got == [(s["start"], s["end"]) for s in want]
        assert want, "every seed's probabilities hold speech"
