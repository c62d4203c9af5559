"""A finished transcript in the `response_format`s of OpenAI's `/v1/audio/transcriptions`, and its
streamed form (`stream=true`) as server-sent events.

A recognition role hands over a `Transcript`: its final segments (times in seconds of the uploaded
audio, text as the model decoded it: Whisper's begins with a space), the language and the audio's
duration.  This module only renders it; it never revises a segment, so a streamed delta is always
final text.

    json          {"text"}
    text          the text, plain
    verbose_json  {"task": "transcribe", "language", "duration", "text", "segments": [...]}
    srt           numbered cues from 1, `HH:MM:SS,mmm --> HH:MM:SS,mmm`
    vtt           `WEBVTT`, then cues `HH:MM:SS.mmm --> HH:MM:SS.mmm`

A transcript's text is its segments' texts joined, with the ends stripped, as OpenAI's is; a cue's text
is its segment's with whitespace runs (line breaks included, which would end a cue) made one space, and
a WebVTT cue's `&`, `<` and `>` escaped (WebVTT reads cue text as markup).
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loam.serve.scheduler import ServeError

TRANSCRIPT_TYPES: dict[str, str] = {
    "json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "text/plain; charset=utf-8",
    "verbose_json": "application/json",
    "vtt": "text/vtt; charset=utf-8",
}
"""The content type of each response format (OpenAI's own server sends srt as plain text)."""

_FRAMES_PER_SECOND = 100  # Whisper's mel frames (10 ms hops): the unit of a segment's `seek`


@dataclass(frozen=True)
class Segment:
    """One final stretch of transcript.  The optional fields are what a model such as Whisper knows and
    `verbose_json` reports; `Transcript` says what is put where a model leaves one out."""

    id: int
    start: float
    end: float
    text: str
    tokens: tuple[int, ...] = ()
    seek: int | None = None
    temperature: float | None = None
    avg_logprob: float | None = None
    compression_ratio: float | None = None
    no_speech_prob: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.end) and 0 <= self.start <= self.end):
            raise ValueError(f"segment {self.id} spans {self.start} to {self.end} s, not an interval of the audio")


@dataclass(frozen=True)
class Transcript:
    """A finished transcription: its segments in order, the language (OpenAI's server names it in
    English, lower case: "english"), the audio's duration in seconds and the request's temperature.

    `verbose_json`'s segments carry what OpenAI's reference server (Whisper's own decoder) reports.  Where
    a segment leaves a field out, Loam puts:

    - `tokens`: [] (token ids cannot be recovered from text without the model's tokenizer);
    - `seek`: the segment's start in Whisper's 10 ms frames (Whisper reports the start of the 30 s
      window it decoded the segment from, which only the model knows);
    - `temperature`: the request's temperature;
    - `compression_ratio`: computed from the text as Whisper computes it (its UTF-8 length over its
      zlib-compressed length): this one is exact;
    - `avg_logprob` and `no_speech_prob`: 0.0, the values that do not trip OpenAI's documented checks
      (avg_logprob below -1: the decoding failed; no_speech_prob high with avg_logprob below -1:
      silence), since a model that reports neither gives no evidence of either.
    """

    segments: Sequence[Segment]
    language: str
    duration: float
    temperature: float = 0.0

    @property
    def text(self) -> str:
        return "".join(segment.text for segment in self.segments).strip()


def transcript_format(fmt: str) -> str:
    """`fmt` where it is a response format this module renders, else a 400 naming `response_format`: a
    route checks it before the model runs."""
    if fmt not in TRANSCRIPT_TYPES:
        raise ServeError(
            f"response_format {fmt!r} is not a transcript format ({', '.join(TRANSCRIPT_TYPES)})",
            param="response_format",
        )
    return fmt


def render_transcript(transcript: Transcript, fmt: str) -> str:
    """The response body of `transcript` in response format `fmt` (its content type: `TRANSCRIPT_TYPES`)."""
    fmt = transcript_format(fmt)
    if fmt == "json":
        return json.dumps({"text": transcript.text})
    if fmt == "text":
        return transcript.text
    if fmt == "verbose_json":
        return json.dumps(verbose_json(transcript))
    cues = [(segment, _cue_text(segment.text, escape=fmt == "vtt")) for segment in transcript.segments]
    if fmt == "srt":
        return "".join(
            f"{number}\n{timestamp(s.start, ',')} --> {timestamp(s.end, ',')}\n{text}\n\n"
            for number, (s, text) in enumerate(cues, start=1)
        )
    return "WEBVTT\n\n" + "".join(
        f"{timestamp(s.start, '.')} --> {timestamp(s.end, '.')}\n{text}\n\n" for s, text in cues
    )


def verbose_json(transcript: Transcript) -> dict[str, Any]:
    """`verbose_json`'s object, with the segment fields a model leaves out put as `Transcript` says."""
    return {
        "task": "transcribe",
        "language": transcript.language,
        "duration": transcript.duration,
        "text": transcript.text,
        "segments": [_verbose_segment(segment, transcript.temperature) for segment in transcript.segments],
    }


def _verbose_segment(segment: Segment, temperature: float) -> dict[str, Any]:
    return {
        "id": segment.id,
        "seek": segment.seek if segment.seek is not None else round(segment.start * _FRAMES_PER_SECOND),
        "start": segment.start,
        "end": segment.end,
        "text": segment.text,
        "tokens": list(segment.tokens),
        "temperature": segment.temperature if segment.temperature is not None else temperature,
        "avg_logprob": segment.avg_logprob if segment.avg_logprob is not None else 0.0,
        "compression_ratio": (
            segment.compression_ratio if segment.compression_ratio is not None else compression_ratio(segment.text)
        ),
        "no_speech_prob": segment.no_speech_prob if segment.no_speech_prob is not None else 0.0,
    }


def compression_ratio(text: str) -> float:
    """Whisper's repetition check: the text's UTF-8 length over its zlib-compressed length (above 2.4,
    the decoder is likely looping)."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data))


def timestamp(seconds: float, separator: str) -> str:
    """`HH:MM:SS` then `separator` and milliseconds (`,` for SRT, `.` for WebVTT), rounded to the
    millisecond; hours take more digits past 99."""
    millis = round(seconds * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _cue_text(text: str, *, escape: bool) -> str:
    text = " ".join(text.split())
    if escape:
        text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text


def sse(event: dict[str, Any]) -> bytes:
    """One server-sent event carrying `event` as JSON."""
    return f"data: {json.dumps(event)}\n\n".encode()


class TranscriptStream:
    """The streamed form of a transcription (`stream=true`), as OpenAI streams one: a
    `transcript.text.delta` event ({"type", "delta"}) per final segment, then one `transcript.text.done`
    ({"type", "text"}).  The deltas join to exactly the done event's text, which is `Transcript.text`: the
    whitespace before the first text and after the last is never sent (whitespace between segments goes
    out with the next delta), and a segment that adds no text sends no event."""

    def __init__(self) -> None:
        self._sent: list[str] = []
        self._pending = ""  # whitespace at the end of the text so far, sent before the next text

    def segment(self, segment: Segment) -> bytes:
        """The event for one more final segment (empty bytes where it adds no text)."""
        text = segment.text if self._sent else segment.text.lstrip()
        body = text.rstrip()
        if not body:
            self._pending += text
            return b""
        delta, self._pending = self._pending + body, text[len(body) :]
        self._sent.append(delta)
        return sse({"type": "transcript.text.delta", "delta": delta})

    def done(self) -> bytes:
        """The last event: the whole text."""
        return sse({"type": "transcript.text.done", "text": "".join(self._sent)})
