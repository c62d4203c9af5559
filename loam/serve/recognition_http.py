"""The recognition role's HTTP route: OpenAI's `POST /v1/audio/transcriptions`.

The body is multipart, as OpenAI's: `file` (the recording), `model`, `language` (a code such as "en";
absent: Whisper detects it in the first window), `prompt` (previous text, which conditions the
transcript), `response_format` (json, text, verbose_json, srt, vtt), `temperature` (0: greedy),
`timestamp_granularities[]` (segment only: a window's interval) and `stream` (true: server-sent
`transcript.text.delta` events, one per final segment, then `transcript.text.done`).  The file (WAV, FLAC,
MP3 or Ogg) is decoded to 16 kHz mono samples (`loam.serve.audio_codec`), then fed to the model's
continuing request in packets as its input credit allows, the way a live client feeds it; the reply is
rendered from the final segments that hold text (`loam.serve.transcript_formats`), the language as its code.
A refusal is a 4xx naming the field: a file that is not audio, one past the recording limit, an unknown
format.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import numpy as np
from starlette.datastructures import UploadFile
from starlette.requests import Request as HttpRequest
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from loam.serve import activity_http
from loam.serve.audio_codec import decode_audio
from loam.serve.live_http import Live
from loam.serve.recognition import RecognitionParams, RecognitionState, TranscriptEvent
from loam.serve.scheduler import Event, ServeError
from loam.serve.stream import StreamRequest, StreamWorker
from loam.serve.transcript_formats import (
    TRANSCRIPT_TYPES,
    Segment,
    Transcript,
    TranscriptStream,
    render_transcript,
    sse,
    transcript_format,
)
from loam.serve.web import Fields, error_body, watch_disconnect
from loam.serve.whisper_features import SAMPLE_RATE

if TYPE_CHECKING:
    from loam.serve.server import Server

MAX_FILE = 256 << 20
"""The largest recording file a request may upload."""
FIELDS = (
    "file",
    "model",
    "language",
    "prompt",
    "response_format",
    "temperature",
    "stream",
    "timestamp_granularities[]",
)


def routes(server: Server, role: str) -> list[Route]:
    """The routes serving the models of `role` (the recognition role's entry in `loam.serve.roles.ROLES`)."""
    return [Route("/v1/audio/transcriptions", TranscriptionRoute(server, role).transcribe, methods=["POST"])]


class TranscriptionRoute:
    """`POST /v1/audio/transcriptions` over `server`'s models of `role`."""

    def __init__(self, server: Server, role: str) -> None:
        self.server = server
        self.role = role

    async def transcribe(self, http: HttpRequest) -> Response:
        if not http.headers.get("content-type", "").lower().startswith("multipart/form-data"):
            raise ServeError("a transcription request is multipart/form-data with a 'file' part", param="file")
        try:
            form = await http.form(max_files=1, max_fields=len(FIELDS) + 8)
        except Exception as err:  # Starlette's parser refuses a malformed body or too many parts
            raise ServeError(f"the multipart body cannot be read: {err}", param="file") from None
        try:
            fields: dict[str, list[str]] = {}
            upload: UploadFile | None = None
            for name, value in form.multi_items():
                if name not in FIELDS:
                    raise ServeError(f"unknown field {name!r} (known: {', '.join(FIELDS)})", param=name)
                if isinstance(value, UploadFile):
                    if name != "file":
                        raise ServeError(f"{name!r} must be a form field, not a file", param=name)
                    upload = value
                else:
                    fields.setdefault(name, []).append(value)
            if upload is None:
                raise ServeError("'file' is required: the recording to transcribe", param="file")
            data = await upload.read(MAX_FILE + 1)
        finally:
            await form.close()
        if len(data) > MAX_FILE:
            raise ServeError(f"'file' is over the {MAX_FILE} bytes a recording may be", status=413, param="file")

        def field(name: str, default: str | None = None) -> str | None:
            values = fields.get(name, [])
            if len(values) > 1:
                raise ServeError(f"{name!r} is given {len(values)} times", param=name)
            return values[0] if values else default

        served = self.server.model(field("model"), self.role)
        worker = served.worker
        assert isinstance(worker, StreamWorker) and isinstance(worker.state, RecognitionState)
        response_format = transcript_format(field("response_format", "json") or "json")
        for granularity in fields.get("timestamp_granularities[]", []):
            if granularity != "segment":
                raise ServeError(
                    f"'timestamp_granularities[]' may only be segment (a window's interval), got {granularity!r}",
                    param="timestamp_granularities[]",
                )
        stream = field("stream", "false")
        if stream not in ("true", "false"):
            raise ServeError(f"'stream' must be true or false, got {stream!r}", param="stream")
        if stream == "true" and response_format != "json" and "response_format" in fields:
            raise ServeError("a streamed transcription's events are JSON: leave 'response_format' json", param="stream")
        temperature_text = field("temperature", "0")
        try:
            temperature = float(temperature_text or "0")
        except ValueError:
            raise ServeError(f"'temperature' must be a number, got {temperature_text!r}", param="temperature") from None
        params = RecognitionParams(
            language=field("language"), prompt=field("prompt", "") or "", temperature=temperature
        )
        samples = decode_audio(data, SAMPLE_RATE, max_seconds=worker.state.recording_seconds)
        session = Transcription(http, worker, params, samples)
        session.open()
        if stream == "true":
            return StreamingResponse(self._events(session), media_type="text/event-stream")
        segments = [segment(event) async for event in session.finals()]
        spoken = [dataclasses.replace(s, id=i) for i, s in enumerate(s for s in segments if s.text.strip())]
        transcript = Transcript(spoken, session.language() or "", len(samples) / SAMPLE_RATE, temperature)
        return Response(render_transcript(transcript, response_format), media_type=TRANSCRIPT_TYPES[response_format])

    async def _events(self, session: Transcription) -> AsyncIterator[bytes]:
        stream = TranscriptStream()
        try:
            async for event in session.finals():
                yield stream.segment(segment(event))
            yield stream.done()
        except ServeError as err:
            yield sse(error_body(str(err), err.status, err.param))


def segment(event: TranscriptEvent) -> Segment:
    """A final transcript event as a transcript's segment: its window's interval in seconds, its text as decoded."""
    return Segment(event.segment, event.start / SAMPLE_RATE, event.end / SAMPLE_RATE, event.text)


def live_params(fields: Fields, rate: int) -> RecognitionParams:
    """A live audio stream's start message as a recognition request: `language`, `prompt`, `temperature`,
    `revision_seconds` (provisional transcripts of the open window, each that much new audio) and `activity`
    (the VAD's events too, where the model has an activity stage); the audio must be 16 kHz."""
    if rate != SAMPLE_RATE:
        raise ServeError(f"'sample_rate' must be {SAMPLE_RATE} (Whisper's), got {rate}", param="sample_rate")
    revision = fields.get("revision_seconds", (int, float), None, "a number of seconds")
    return RecognitionParams(
        language=fields.get("language", (str,), None),
        prompt=fields.get("prompt", (str,), ""),
        temperature=fields.number("temperature", 0.0, 0.0, 2.0),
        revision_seconds=None if revision is None else float(revision),
        activity=fields.get("activity", (bool,), False),
    )


def live_message(event: object) -> dict[str, Any]:
    """A recognition request's event as the live audio WebSocket sends it: a transcript, or the VAD's activity."""
    if isinstance(event, TranscriptEvent):
        return transcript_message(event)
    return activity_http.encode_event(event)


def transcript_message(event: TranscriptEvent) -> dict[str, Any]:
    """A transcript event as the live audio WebSocket sends it: every revision, the final one included."""
    return {
        "type": "transcript",
        "segment": event.segment,
        "revision": event.revision,
        "start": event.start,
        "end": event.end,
        "text": event.text,
        "final": event.final,
    }


class Transcription:
    """One transcription request on the event loop: the recording fed in packets as its input credit returns, and
    its events read back."""

    def __init__(self, http: HttpRequest, worker: StreamWorker, params: RecognitionParams, samples: np.ndarray) -> None:
        self.http = http
        self.worker = worker
        self.params = params
        self.samples = samples
        self.fed = 0
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.request: StreamRequest | None = None

    def open(self) -> None:
        """Prepare the request (a refusal is the caller's 4xx) and feed what its credit allows."""
        loop = asyncio.get_running_loop()

        def sink(event: Event) -> None:
            loop.call_soon_threadsafe(self.events.put_nowait, event)

        self.request = self.worker.open(self.params, sink, param="file")
        self.feed()

    def feed(self) -> None:
        request = self.request
        assert request is not None
        if request.eof:
            return
        count = min(self.worker.credit(request), len(self.samples) - self.fed)
        end = self.fed + count
        if count > 0 or end == len(self.samples):
            self.worker.feed(request, self.samples[self.fed : end], eof=end == len(self.samples))
            self.fed = end

    def language(self) -> str | None:
        """The request's language code (given, or detected in its first window)."""
        request = self.request
        assert request is not None and isinstance(self.worker.state, RecognitionState)
        token = getattr(request.state, "language", None)
        return self.worker.state.tokens.language_name(token) if isinstance(token, int) else None

    async def finals(self) -> AsyncIterator[TranscriptEvent]:
        """Each segment's final transcript, in order, until the request is done (an error is raised as a 4xx/5xx
        naming the file)."""
        request = self.request
        assert request is not None
        watcher = asyncio.create_task(watch_disconnect(self.http, self.worker, [request]))
        try:
            while True:
                event = await self.events.get()
                if event.kind == "credit":
                    self.feed()
                elif event.kind == "event":
                    self.worker.consumed(request, event.size)
                    if isinstance(event.value, TranscriptEvent) and event.value.final:
                        yield event.value
                elif event.kind == "done":
                    return
                elif event.kind == "error":
                    status = event.status if event.status != 499 else 400
                    raise ServeError(event.text, status=status, param=event.param or "file")
        finally:
            watcher.cancel()
            if not request.finished:
                self.worker.cancel(request)


LIVE = Live(live_params, live_message)
"""How the live audio WebSocket (`/v1/audio/stream`) reaches recognition models."""
