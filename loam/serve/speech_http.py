"""The speech role's HTTP route: OpenAI's `POST /v1/audio/speech`.

The body is OpenAI's: `model`, `input` (the text), `voice`, `response_format`, `speed` (0.25 to 4),
`instructions` (refused unless empty: a Piper voice takes none) and `stream_format`, plus Loam's `seed`
(the voice's noise; absent, a fresh one).  The audio streams as the voice speaks it, one sentence at a
time (chunked transfer): `stream_format` "audio" sends the encoded bytes as they are made, "sse" sends
OpenAI's `speech.audio.delta` events (the bytes in base64) and a last `speech.audio.done`.  The response
says the request's seed (`x-loam-seed`, the same seed repeats the same waveform) and the voice's sample
rate (`x-loam-sample-rate`; `pcm` is headerless 16-bit samples at that rate).  The formats are
`loam.serve.audio_codec`'s (`wav`, `pcm`, `flac`, `mp3`, `opus`), encoded as the blocks come
(`StreamingEncoder`: `flac` whole at the end).

The first sentence is awaited before the response starts, so a request that fails before any audio is a
JSON error; one that fails later ends its stream early (an SSE stream with OpenAI's error object).  Each
block's output credit returns once its bytes are written, so a client that stops reading holds back only
its own request.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import Request as HttpRequest
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from loam.serve.audio_codec import AUDIO_TYPES, StreamingEncoder
from loam.serve.scheduler import Event, ServeError
from loam.serve.speech import AudioBlock, SpeechParams, SpeechRequest, SpeechState
from loam.serve.stream import StreamRequest, StreamWorker
from loam.serve.web import error_body, error_response, event_sink, read_fields, watch_disconnect

if TYPE_CHECKING:
    from loam.serve.server import Server

STREAM_FORMATS = ("audio", "sse")


def routes(server: Server, role: str) -> list[Route]:
    """The routes serving the models of `role` (the speech role's entry in `loam.serve.roles.ROLES`)."""
    return [Route("/v1/audio/speech", SpeechRoute(server, role).speech, methods=["POST"])]


class SpeechRoute:
    """`POST /v1/audio/speech` over `server`'s models of `role`."""

    def __init__(self, server: Server, role: str) -> None:
        self.server = server
        self.role = role

    def _model(self, name: object) -> tuple[StreamWorker, SpeechState]:
        served = self.server.model(name, self.role)
        worker = served.worker
        assert isinstance(worker, StreamWorker) and isinstance(worker.state, SpeechState), "speech runs on a stream"
        return worker, worker.state

    async def speech(self, http: HttpRequest) -> Response:
        arrival = time.monotonic()
        fields = await read_fields(http)
        worker, state = self._model(fields.get("model", (str,)))
        text = fields.get("input", (str,))
        if text is None:
            raise ServeError("'input' is required: the text to speak", param="input")
        voice = fields.get("voice", (str,), state.voice.name if state.voice.speakers <= 1 else "0")
        fmt = fields.get("response_format", (str,), "wav")
        encoder = StreamingEncoder(state.voice.sample_rate, fmt)  # an unknown format: a 400 naming response_format
        stream_format = fields.get("stream_format", (str,), "audio")
        if stream_format not in STREAM_FORMATS:
            raise ServeError(f"'stream_format' must be 'audio' or 'sse', got {stream_format!r}", param="stream_format")
        if fields.get("instructions", (str,), ""):
            raise ServeError("'instructions' is not supported: a Piper voice takes none", param="instructions")
        speed = float(fields.get("speed", (int, float), 1.0, "a number"))
        seed = fields.integer("seed", None, 0)
        params = SpeechParams(text, voice, speed, seed)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
        # Phonemizing is CPU work: off the event loop.  A refusal raises here, before any response.
        request = await asyncio.to_thread(worker.open, params, event_sink(loop, events, 0))
        assert isinstance(request.state, SpeechRequest)
        watcher = asyncio.create_task(watch_disconnect(http, worker, [request]))
        try:
            first = await _next(events)
        except BaseException:
            watcher.cancel()
            worker.cancel(request)
            raise
        if first.kind == "error":
            watcher.cancel()
            return error_response(first.text, first.status if first.status != 499 else 400, first.param)
        worker.metrics.time_to_first_audio.observe(time.monotonic() - arrival)
        rate = state.voice.sample_rate
        body = self._stream(worker, request, events, watcher, first, encoder, stream_format)
        headers = {"x-loam-seed": str(request.state.seed), "x-loam-sample-rate": str(rate), "Cache-Control": "no-cache"}
        media = "text/event-stream" if stream_format == "sse" else AUDIO_TYPES[fmt]
        return StreamingResponse(body, media_type=media, headers=headers)

    async def _stream(
        self, worker: StreamWorker, request: StreamRequest, events: asyncio.Queue[tuple[int, Event]],
        watcher: asyncio.Task[None], first: Event, encoder: StreamingEncoder, stream_format: str,
    ) -> AsyncIterator[bytes]:  # fmt: skip
        rate = encoder.rate
        frames = 0
        sse = stream_format == "sse"

        def frame(data: bytes) -> bytes:
            if not sse:
                return data
            payload = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
            return f"data: {json.dumps(payload)}\n\n".encode()

        try:
            event = first
            while True:
                if event.kind == "event" and isinstance(event.value, AudioBlock):
                    block = event.value
                    worker.metrics.audio_out(block.frames / rate, block.seconds)
                    frames += block.frames
                    data = encoder.push(block.samples)
                    if data:  # flac's encoder holds every block until the end
                        yield frame(data)
                    # The write returned: the client (or its socket buffer) took the bytes.
                    worker.consumed(request, event.size)
                elif event.kind == "done":
                    tail = encoder.close()
                    if tail:
                        yield frame(tail)
                    if sse:
                        done = {"type": "speech.audio.done", "usage": _usage(request, frames)}
                        yield f"data: {json.dumps(done)}\n\n".encode()
                    return
                elif event.kind == "error":
                    if sse:  # the audio so far was sent: the stream ends with the error
                        yield f"data: {json.dumps(error_body(event.text, event.status, event.param))}\n\n".encode()
                    return  # an audio stream ends short
                event = await _next(events)
        finally:
            watcher.cancel()
            if not request.finished:
                worker.cancel(request)


async def _next(events: asyncio.Queue[tuple[int, Event]]) -> Event:
    """The request's next event that says something to the client (credit events are for feeders)."""
    while True:
        _, event = await events.get()
        if event.kind != "credit":
            return event


def _usage(request: StreamRequest, frames: int) -> dict[str, int]:
    """OpenAI's usage of a speech request: phoneme ids in, samples out."""
    state = request.state
    assert isinstance(state, SpeechRequest)
    ids = sum(len(sentence) // 8 for sentence in state.sentences)
    return {"input_tokens": ids, "output_tokens": frames, "total_tokens": ids + frames}
