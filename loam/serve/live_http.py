"""The live audio WebSocket, `/v1/audio/stream?model=NAME`: PCM in, a continuing role's typed events out.

It serves any model whose worker is a `loam.serve.stream.StreamWorker` taking PCM samples and whose role
says how (`Live`, the `live` of its entry in `loam.serve.roles.ROLES`): the request's parameters from the
start message, and each event as JSON.  The conversation:

    client: {"type": "start", "sample_rate": 16000, "encoding": "f32le" | "s16le", ...the role's params}
    server: {"type": "ready", "credit": SAMPLES}        the samples it may send before waiting for credit
    client: binary frames of mono PCM, of any size;  {"type": "end"} when the input ends
    server: the role's events as they are published ({"type": "activity", "start", "end", "probability"}),
            {"type": "credit", "samples": N} as the model acknowledges input, then {"type": "done"}

The server reads no further frame while the request holds all the unacknowledged input its model takes,
so a client that sends faster than the model reads is slowed by TCP itself; a frame larger than the
credit is fed as credit returns.  A frame that is not whole samples (or holds a non-finite one), a wrong
start message or sample rate, or input past the model's recording limit is an error message
`{"type": "error", "code": 4xx, "param": FIELD, "message": ...}` and the socket closes.  A client that
disconnects cancels its request; one that stops reading holds back only its own request (its events wait
within the model's `output_bytes`).

`run_stream` runs one request over a whole recording the same way, for the roles' finite HTTP endpoints.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from starlette.requests import Request as HttpRequest
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from loam.serve.audio_codec import PCM_ENCODINGS, pcm_to_float
from loam.serve.scheduler import Event, ServeError, failure
from loam.serve.stream import StreamRequest, StreamWorker
from loam.serve.web import Fields, watch_disconnect

if TYPE_CHECKING:
    from loam.serve.server import Server


@dataclass(frozen=True)
class Live:
    """How a role's models are reached over the live audio WebSocket."""

    params: Callable[[Fields, int], object]
    """The start message's fields and its sample rate -> the params `StreamWorker.open` gives the control."""
    encode: Callable[[object], dict[str, Any]]
    """One of the role's events -> its JSON message (with its `type`)."""


class Credit:
    """A request's events on the event loop, and the wake-up its feeder waits for when credit returns."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.returned = asyncio.Event()

    def sink(self, event: Event) -> None:
        """The request's sink, called on the worker's thread."""

        def arrive() -> None:
            if event.kind in ("credit", "done", "error"):
                self.returned.set()  # a feeder waiting for credit wakes (to feed, or to stop)
            self.events.put_nowait(event)

        self.loop.call_soon_threadsafe(arrive)

    async def feed(self, worker: StreamWorker, request: StreamRequest, samples: np.ndarray) -> None:
        """Feed `samples` within the request's input credit, waiting for credit as the model acknowledges input;
        stops early where the request has ended."""
        offset = 0
        while offset < len(samples) and not request.finished:
            room = worker.credit(request)
            if room == 0:
                self.returned.clear()
                if worker.credit(request) == 0 and not request.finished:  # checked again: no wake-up is lost
                    await self.returned.wait()
                continue
            piece = samples[offset : offset + room]
            worker.feed(request, piece)
            offset += len(piece)


async def run_stream(
    http: HttpRequest, worker: StreamWorker, params: object, samples: np.ndarray, param: str
) -> list[object]:
    """One request over a whole recording, for `http` (whose body has been read): its events, in order; its error
    raised as a ServeError, naming `param` where it concerns the input.  A client that goes away cancels it."""
    credit = Credit(asyncio.get_running_loop())
    request = worker.open(params, credit.sink, param=param)
    watcher = asyncio.create_task(watch_disconnect(http, worker, [request]))
    try:
        await credit.feed(worker, request, samples)
        if not request.finished:
            worker.feed(request, samples[:0], eof=True)
        out: list[object] = []
        while True:
            event = await credit.events.get()
            if event.kind == "event":
                out.append(event.value)
                worker.consumed(request, event.size)
            elif event.kind == "error":
                named = param if event.param == "input" else event.param  # the control names the samples "input"
                raise ServeError(event.text, status=event.status, param=named)
            elif event.kind == "done":
                return out
    finally:
        watcher.cancel()
        if not request.finished:
            worker.cancel(request)


def routes(server: Server, lives: Mapping[str, Live]) -> list[WebSocketRoute]:
    """The live audio WebSocket over `server`'s models whose role is one of `lives`."""
    return [WebSocketRoute("/v1/audio/stream", LiveAudio(server, lives).serve)]


class LiveAudio:
    """The WebSocket endpoint: one continuing request per connection."""

    def __init__(self, server: Server, lives: Mapping[str, Live]) -> None:
        self.server = server
        self.lives = lives

    async def serve(self, socket: WebSocket) -> None:
        await socket.accept()
        credit = Credit(asyncio.get_running_loop())
        try:
            worker, live, encoding, request = await self.start(socket, credit)
        except WebSocketDisconnect:
            return
        except Exception as err:  # a refusal names its field; a bug is one 500 message, never a traceback
            await self.refuse(socket, *_failure(err))
            return
        await socket.send_json({"type": "ready", "credit": worker.credit(request)})
        reader = asyncio.create_task(self.read(socket, credit, worker, request, encoding))
        try:
            await self.write(socket, credit, worker, request, live)
        except (WebSocketDisconnect, RuntimeError):  # the client went away while we wrote
            pass
        finally:
            reader.cancel()
            if not request.finished:
                worker.cancel(request)

    async def start(self, socket: WebSocket, credit: Credit) -> tuple[StreamWorker, Live, str, StreamRequest]:
        """The model the query names, and the request the start message opens (a ServeError names the field)."""
        served = self.server.model(socket.query_params.get("model"))
        live, worker = self.lives.get(served.role), served.worker
        if live is None or not isinstance(worker, StreamWorker):
            raise ServeError(
                f"the model {served.name!r} is a {served.role} model; the live audio stream serves "
                f"{', '.join(self.lives) or 'no role'} models",
                param="model",
            )
        message = await socket.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect()
        fields = _message(message)
        if fields.body.get("type") != "start":
            raise ServeError('the first message must be {"type": "start", "sample_rate": ...}', param="type")
        rate = fields.integer("sample_rate", None, 1)
        if rate is None:
            raise ServeError("'sample_rate' is required: the samples per second of the PCM frames", param="sample_rate")
        encoding = fields.get("encoding", (str,), "f32le")
        if encoding not in PCM_ENCODINGS:
            raise ServeError(
                f"'encoding' must be one of {', '.join(PCM_ENCODINGS)}, got {encoding!r}", param="encoding"
            )
        request = worker.open(live.params(fields, rate), credit.sink, param="input")
        return worker, live, encoding, request

    async def read(
        self, socket: WebSocket, credit: Credit, worker: StreamWorker, request: StreamRequest, encoding: str
    ) -> None:
        """Feed the client's frames; an error goes to the writer (which sends it and closes), a disconnect cancels."""
        try:
            while not request.finished:
                message = await socket.receive()
                if message["type"] == "websocket.disconnect":
                    worker.cancel(request)
                    return
                if message.get("bytes") is not None:
                    samples = pcm_to_float(message["bytes"], encoding, 1, "input")[:, 0]
                    await credit.feed(worker, request, samples)
                    continue
                fields = _message(message)
                if fields.body.get("type") != "end":
                    raise ServeError('after the start, a text message must be {"type": "end"}', param="type")
                worker.feed(request, np.zeros(0, np.float32), eof=True)
        except WebSocketDisconnect:
            worker.cancel(request)
        except Exception as err:  # the writer sends the error and closes
            worker.cancel(request)
            status, text, param = _failure(err)
            credit.events.put_nowait(Event("error", text=text, status=status, param=param))

    async def write(
        self, socket: WebSocket, credit: Credit, worker: StreamWorker, request: StreamRequest, live: Live
    ) -> None:
        """Send the request's events as they arrive, up to its end."""
        while True:
            event = await credit.events.get()
            if event.kind == "event":
                await socket.send_json(live.encode(event.value))
                worker.consumed(request, event.size)  # its reader took it: output credit returns
            elif event.kind == "credit":
                await socket.send_json({"type": "credit", "samples": event.value})
            elif event.kind == "done":
                await socket.send_json({"type": "done"})
                await socket.close()
                return
            elif event.kind == "error":
                await self.refuse(socket, event.status, event.text, event.param)
                return

    @staticmethod
    async def refuse(socket: WebSocket, status: int, message: str, param: str | None) -> None:
        try:
            await socket.send_json({"type": "error", "code": status, "param": param, "message": message})
            await socket.close(code=1008 if status < 500 else 1011)
        except (WebSocketDisconnect, RuntimeError):
            pass


def _failure(err: Exception) -> tuple[int, str, str | None]:
    """The status, message and field of an error message for `err`: a refusal's, or a 500 naming a bug."""
    if isinstance(err, ServeError):
        return err.status, str(err), err.param
    status, text = failure(err)
    return status, text, None


def _message(message: Mapping[str, Any]) -> Fields:
    """A text message's JSON object (a 400 naming `type` where it is not one)."""
    text = message.get("text")
    try:
        body = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ServeError("a text message must be a JSON object with a 'type'", param="type")
    return Fields(body)
