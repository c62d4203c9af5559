"""The activity role's HTTP face: `POST /v1/audio/activity` (Loam's own endpoint; OpenAI has none) and its
events on the live audio WebSocket (`LIVE`, `loam.serve.live_http`).

`POST /v1/audio/activity` takes a whole recording, either as multipart/form-data (`file`: WAV, FLAC, MP3 or
Ogg, decoded, mixed to mono and resampled to `sample_rate`, default 16000, by `loam.serve.audio_codec`; the
other fields as form fields) or as a raw PCM body (`?model=NAME&sample_rate=16000&encoding=f32le|s16le`, the
other fields as query parameters), and answers with the model's speech probability of each chunk:

    {"model": NAME, "sample_rate": 16000, "samples": N,
     "intervals": [{"start": 0, "end": 512, "probability": 0.02}, ...],
     "segments": [{"start": 8160, "end": 24096}, ...]}      # only where `threshold` is given

`segments` merges the chunks into speech as `loam.serve.speech_segments` says, with the request's
`threshold`, `neg_threshold`, `min_speech_duration_ms`, `min_silence_duration_ms` and `speech_pad_ms`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from starlette.datastructures import UploadFile
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loam.serve.activity import CHUNK, ActivityEvent, ActivityParams, ActivityState
from loam.serve.audio_codec import decode_audio, pcm_to_float
from loam.serve.live_http import Live, run_stream
from loam.serve.scheduler import ServeError
from loam.serve.speech_segments import SegmentPolicy, speech_segments
from loam.serve.stream import StreamWorker
from loam.serve.web import MAX_BODY, Fields

if TYPE_CHECKING:
    from loam.serve.server import ServedModel, Server

RATE = 16000
"""The rate an uploaded file is decoded to where the request names none."""


def encode_event(event: object) -> dict[str, Any]:
    """An activity event as the live audio WebSocket sends it."""
    assert isinstance(event, ActivityEvent)
    return {"type": "activity", "start": event.start, "end": event.end, "probability": event.probability}


LIVE = Live(lambda _fields, rate: ActivityParams(rate), encode_event)
"""The activity role on the live audio WebSocket: the start message's sample rate is all a request gives."""


def routes(server: Server, role: str) -> list[Route]:
    """The routes serving the models of `role` (the activity role's entry in `loam.serve.roles.ROLES`)."""
    return [Route("/v1/audio/activity", ActivityRoute(server, role).activity, methods=["POST"])]


class ActivityRoute:
    """`POST /v1/audio/activity` over `server`'s models of `role`."""

    def __init__(self, server: Server, role: str) -> None:
        self.server = server
        self.role = role

    async def activity(self, request: HttpRequest) -> Response:
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            fields, data = await _upload(request)
            served, worker = self.model(fields)
            rate = _rate(fields, RATE)
            samples = decode_audio(data, rate, param="file", max_seconds=_recording_seconds(worker))
            param = "file"
        else:
            fields = FormFields(dict(request.query_params))
            served, worker = self.model(fields)
            if fields.get("sample_rate") is None:
                raise ServeError(
                    "'sample_rate' is required with a raw PCM body (or send a multipart 'file')", param="sample_rate"
                )
            rate = _rate(fields, RATE)
            samples = await _raw(request, fields)
            param = "input"
        policy = _policy(fields) if "threshold" in fields else None
        events = await run_stream(request, worker, ActivityParams(rate), samples, param)
        intervals = [e for e in events if isinstance(e, ActivityEvent)]
        body: dict[str, Any] = {
            "model": served.name,
            "sample_rate": rate,
            "samples": len(samples),
            "intervals": [{"start": e.start, "end": e.end, "probability": e.probability} for e in intervals],
        }
        if policy is not None:
            found = speech_segments(
                [e.start for e in intervals], [e.probability for e in intervals], len(samples), rate, policy
            )
            body["segments"] = [{"start": a, "end": b} for a, b in found]
        return JSONResponse(body)

    def model(self, fields: FormFields) -> tuple[ServedModel, StreamWorker]:
        served = self.server.model(fields.get("model"), self.role)
        worker = served.worker
        assert isinstance(worker, StreamWorker), "the activity role's models run on a StreamWorker"
        return served, worker


class FormFields:
    """Form or query fields (strings), read as `loam.serve.web.Fields` reads JSON: a wrong one is a 400 naming it."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = values

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def number(self, name: str, default: float, low: float, high: float) -> float:
        text = self.values.get(name)
        try:
            value = default if text is None else float(text)
        except ValueError:
            raise ServeError(f"'{name}' must be a number, got {text!r}", param=name) from None
        return Fields({name: value}).number(name, default, low, high)

    def integer(self, name: str, default: int, low: int) -> int:
        text = self.values.get(name)
        try:
            value = default if text is None else int(text)
        except ValueError:
            raise ServeError(f"'{name}' must be an integer, got {text!r}", param=name) from None
        found = Fields({name: value}).integer(name, default, low)
        assert found is not None
        return found


def _policy(fields: FormFields) -> SegmentPolicy:
    threshold = fields.number("threshold", 0.5, 0.0, 1.0)
    low = fields.number("neg_threshold", 0.0, 0.0, 1.0) if "neg_threshold" in fields else None
    return SegmentPolicy(
        threshold,
        low,
        fields.integer("min_speech_duration_ms", 250, 0),
        fields.integer("min_silence_duration_ms", 100, 0),
        fields.integer("speech_pad_ms", 30, 0),
    )


async def _upload(request: HttpRequest) -> tuple[FormFields, bytes]:
    """A multipart request's fields and its `file`'s bytes."""
    async with request.form(max_part_size=MAX_BODY) as form:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ServeError("'file' is required: the recording, as a multipart file field", param="file")
        data = await upload.read()
        values = {k: v for k, v in form.items() if isinstance(v, str)}
    return FormFields(values), data


async def _raw(request: HttpRequest, fields: FormFields) -> np.ndarray:
    """A raw PCM body's samples, in the query's `encoding` (default f32le)."""
    encoding = fields.get("encoding") or "f32le"
    raw = b""
    async for piece in request.stream():
        raw += piece
        if len(raw) > MAX_BODY:
            raise ServeError(f"the request body is over {MAX_BODY} bytes", status=413)
    return pcm_to_float(raw, encoding, 1, "input")[:, 0]


def _rate(fields: FormFields, default: int) -> int:
    """The request's `sample_rate`: one Silero VAD takes, refused naming it before any audio is decoded."""
    rate = fields.integer("sample_rate", default, 1)
    if rate not in CHUNK:
        raise ServeError(
            f"'sample_rate' must be one of {', '.join(map(str, CHUNK))} (the rates Silero VAD takes), got {rate}",
            param="sample_rate",
        )
    return rate


def _recording_seconds(worker: StreamWorker) -> float | None:
    state = worker.state
    return state.recording_seconds if isinstance(state, ActivityState) else None
