"""A transcript in each of `/v1/audio/transcriptions`' response formats, read back independently: the
JSON forms by the `openai` package's own types, SRT and WebVTT by a small reader here, the streamed form
as server-sent events."""

from __future__ import annotations

import html
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.audio import (
    Transcription,
    TranscriptionTextDeltaEvent,
    TranscriptionTextDoneEvent,
    TranscriptionVerbose,
)
from pydantic import ValidationError

from loam.serve.scheduler import ServeError
from loam.serve.transcript_formats import (
    TRANSCRIPT_TYPES,
    Segment,
    Transcript,
    TranscriptStream,
    render_transcript,
    timestamp,
)

SEGMENTS = [
    Segment(0, 0.0, 3.32, " The beach was a popular spot on a hot summer day."),
    Segment(
        1, 3.32, 7.1, " People were swimming\n\nin the ocean.", tokens=(50364, 440, 7534), seek=0, avg_logprob=-0.29
    ),
    Segment(2, 7.1, 9.9996, " Tags <i>like</i> this & arrows --> stay text."),
    Segment(3, 3725.25, 3727.5, " An hour later."),
]
TRANSCRIPT = Transcript(SEGMENTS, language="english", duration=3728.0, temperature=0.2)
TEXT = (
    "The beach was a popular spot on a hot summer day. People were swimming\n\nin the ocean."
    " Tags <i>like</i> this & arrows --> stay text. An hour later."
)


def test_json_and_text_give_the_joined_text() -> None:
    assert TRANSCRIPT.text == TEXT
    assert Transcription.model_validate(json.loads(render_transcript(TRANSCRIPT, "json"))).text == TEXT
    assert render_transcript(TRANSCRIPT, "text") == TEXT


def test_verbose_json_is_openais_type_with_each_segment() -> None:
    body = json.loads(render_transcript(TRANSCRIPT, "verbose_json"))
    assert body["task"] == "transcribe"
    verbose = TranscriptionVerbose.model_validate(body)
    assert (verbose.language, verbose.duration, verbose.text) == ("english", 3728.0, TEXT)
    assert verbose.segments is not None
    assert [(s.id, s.start, s.end, s.text) for s in verbose.segments] == [
        (s.id, s.start, s.end, s.text) for s in SEGMENTS
    ]
    given_fields, defaulted = verbose.segments[1], verbose.segments[3]
    assert (given_fields.tokens, given_fields.seek, given_fields.avg_logprob) == ([50364, 440, 7534], 0, -0.29)
    # Left out by the model: the start in 10 ms frames, the request's temperature, neutral probabilities.
    assert (defaulted.tokens, defaulted.seek, defaulted.temperature) == ([], 372525, 0.2)
    assert (defaulted.avg_logprob, defaulted.no_speech_prob) == (0.0, 0.0)


def test_openais_type_refuses_a_segment_without_its_fields() -> None:
    """The validation above can fail: a segment lacking `seek` is refused by the same type."""
    body = json.loads(render_transcript(TRANSCRIPT, "verbose_json"))
    del body["segments"][0]["seek"]
    with pytest.raises(ValidationError):
        TranscriptionVerbose.model_validate(body)


def test_the_compression_ratio_flags_a_looping_decoder() -> None:
    looping = Transcript([Segment(0, 0.0, 30.0, " thank you" * 40)], "english", 30.0)
    plain = Transcript([SEGMENTS[0]], "english", 3.32)
    assert json.loads(render_transcript(looping, "verbose_json"))["segments"][0]["compression_ratio"] > 2.4
    assert json.loads(render_transcript(plain, "verbose_json"))["segments"][0]["compression_ratio"] < 2.4


TIME = r"(\d{2,}):(\d{2}):(\d{2})[,.](\d{3})"


def seconds(match: tuple[str, ...]) -> float:
    hours, minutes, secs, millis = (int(part) for part in match)
    return hours * 3600 + minutes * 60 + secs + millis / 1000


def read_cues(body: str, separator: str, numbered: bool) -> list[tuple[int | None, float, float, str]]:
    """Cues as a subtitle reader sees them: blocks between blank lines, an optional number line, a timing
    line, then text lines."""
    cues: list[tuple[int | None, float, float, str]] = []
    for block in body.strip("\n").split("\n\n"):
        lines = block.split("\n")
        number = int(lines.pop(0)) if numbered else None
        timing = re.fullmatch(TIME.replace("[,.]", separator) + " --> " + TIME.replace("[,.]", separator), lines[0])
        assert timing is not None, lines[0]
        groups = timing.groups()
        cues.append((number, seconds(groups[:4]), seconds(groups[4:]), "\n".join(lines[1:])))
    return cues


def test_srt_numbers_its_cues_from_one_with_comma_milliseconds() -> None:
    body = render_transcript(TRANSCRIPT, "srt")
    cues = read_cues(body, ",", numbered=True)
    assert [cue[0] for cue in cues] == [1, 2, 3, 4]
    assert [(start, end) for _, start, end, _ in cues] == [(0.0, 3.32), (3.32, 7.1), (7.1, 10.0), (3725.25, 3727.5)]
    assert [text for *_, text in cues] == [" ".join(s.text.split()) for s in SEGMENTS]


def test_vtt_has_its_header_and_escapes_markup() -> None:
    body = render_transcript(TRANSCRIPT, "vtt")
    assert body.startswith("WEBVTT\n\n")
    cues = read_cues(body.removeprefix("WEBVTT\n\n"), r"\.", numbered=False)
    assert [(start, end) for _, start, end, _ in cues] == [(0.0, 3.32), (3.32, 7.1), (7.1, 10.0), (3725.25, 3727.5)]
    assert "-->" not in cues[2][3] and "<i>" not in cues[2][3]
    assert [html.unescape(text) for *_, text in cues] == [" ".join(s.text.split()) for s in SEGMENTS]


@given(st.floats(0, 400_000, allow_nan=False))
def test_a_timestamp_reads_back_to_the_millisecond(value: float) -> None:
    for separator in ",.":
        match = re.fullmatch(TIME, timestamp(value, separator))
        assert match is not None
        assert seconds(match.groups()) == pytest.approx(round(value * 1000) / 1000, abs=1e-9)


def test_an_unknown_format_is_refused_listing_the_known_ones() -> None:
    with pytest.raises(ServeError) as caught:
        render_transcript(TRANSCRIPT, "docx")
    assert caught.value.status == 400 and caught.value.param == "response_format"
    assert all(fmt in str(caught.value) for fmt in TRANSCRIPT_TYPES)


def test_a_segment_must_be_an_interval_of_the_audio() -> None:
    for start, end in [(-1.0, 2.0), (3.0, 2.0), (0.0, float("nan"))]:
        with pytest.raises(ValueError, match="not an interval"):
            Segment(0, start, end, " x")


def events(stream: bytes) -> list[dict[str, object]]:
    """Server-sent events: each `data:` line's JSON, blocks separated by a blank line."""
    blocks = stream.decode().split("\n\n")
    assert blocks[-1] == ""
    return [json.loads(block.removeprefix("data: ")) for block in blocks[:-1]]


@given(st.lists(st.text(alphabet=st.sampled_from(" \nab.é"), max_size=8), max_size=8))
def test_the_streamed_deltas_join_to_the_done_text(texts: list[str]) -> None:
    segments = [Segment(index, float(index), float(index) + 1, text) for index, text in enumerate(texts)]
    stream = TranscriptStream()
    sent = b"".join(stream.segment(segment) for segment in segments) + stream.done()
    *deltas, done = events(sent)
    parsed = [TranscriptionTextDeltaEvent.model_validate(delta) for delta in deltas]
    final = TranscriptionTextDoneEvent.model_validate(done)
    assert all(event.type == "transcript.text.delta" and event.delta for event in parsed)
    assert final.type == "transcript.text.done"
    assert "".join(event.delta for event in parsed) == final.text == Transcript(segments, "english", 9.0).text


def test_a_stream_sends_one_delta_per_segment_with_text() -> None:
    stream = TranscriptStream()
    sent = [stream.segment(segment) for segment in SEGMENTS[:3]] + [stream.segment(Segment(3, 10.0, 11.0, "  "))]
    assert [bool(frame) for frame in sent] == [True, True, True, False]
    assert events(sent[0]) == [{"type": "transcript.text.delta", "delta": SEGMENTS[0].text.lstrip()}]
