"""Speech segments from per-chunk speech probabilities: a caller's policy over the activity role's events.

The rule is silero-vad's `get_speech_timestamps_from_probs` (silero_vad/utils_vad.py, 6.2.3) without its
maximum segment length: a segment starts at the first chunk whose probability reaches `threshold`; it
ends where the probability stays below `neg_threshold` (default `threshold - 0.15`, at least 0.01) for
`min_silence_duration_ms`, at the first such chunk; a segment of at most `min_speech_duration_ms` is
dropped; each is then widened by `speech_pad_ms` on both sides, or by half the gap where two segments are
closer than twice that.  Times are sample indices of the request's input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SegmentPolicy:
    """How chunks of speech probability are merged into segments (silero-vad's defaults)."""

    threshold: float = 0.5
    neg_threshold: float | None = None
    min_speech_duration_ms: int = 250
    min_silence_duration_ms: int = 100
    speech_pad_ms: int = 30


def speech_segments(
    starts: Sequence[int], probabilities: Sequence[float], length: int, sample_rate: int, policy: SegmentPolicy
) -> list[tuple[int, int]]:
    """The [start, end) sample intervals of speech in a recording of `length` samples whose chunk k starts at
    `starts[k]` with speech probability `probabilities[k]`."""
    min_speech = sample_rate * policy.min_speech_duration_ms / 1000
    pad = sample_rate * policy.speech_pad_ms / 1000
    min_silence = sample_rate * policy.min_silence_duration_ms / 1000
    low = policy.neg_threshold if policy.neg_threshold is not None else max(policy.threshold - 0.15, 0.01)
    segments: list[list[int]] = []
    start: int | None = None
    silence_from = 0  # where the silence in the current segment began (0: none)
    for at, probability in zip(starts, probabilities, strict=True):
        if probability >= policy.threshold and silence_from:
            silence_from = 0
        if probability >= policy.threshold and start is None:
            start = at
            continue
        if probability < low and start is not None:
            silence_from = silence_from or at
            if at - silence_from < min_silence:
                continue
            if silence_from - start > min_speech:
                segments.append([start, silence_from])
            start, silence_from = None, 0
    if start is not None and length - start > min_speech:
        segments.append([start, length])
    for i, segment in enumerate(segments):
        if i == 0:
            segment[0] = int(max(0, segment[0] - pad))
        if i != len(segments) - 1:
            gap = segments[i + 1][0] - segment[1]
            if gap < 2 * pad:
                segment[1] += int(gap // 2)
                segments[i + 1][0] = int(max(0, segments[i + 1][0] - gap // 2))
            else:
                segment[1] = int(min(length, segment[1] + pad))
                segments[i + 1][0] = int(max(0, segments[i + 1][0] - pad))
        else:
            segment[1] = int(min(length, segment[1] + pad))
    return [(a, b) for a, b in segments]
