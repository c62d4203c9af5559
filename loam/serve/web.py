"""What every role's HTTP routes share: a request body's fields, OpenAI's error objects, and the plumbing
between the event loop and a model's worker.

`read_fields` reads a JSON body (at most `MAX_BODY` bytes) into `Fields`, which checks each field as it is
read: a wrong one is a 400 naming it.  `error_body` and `error_response` are OpenAI's error shape;
`guarded` wraps an endpoint so that any failure is one JSON error, never a traceback.  A request's
events reach the event loop through `event_sink` (the worker thread hands each to the loop), and
`watch_disconnect` cancels a request whose client went away; `finite_results` runs a request's finite items
and waits for them all.
"""

from __future__ import annotations

import asyncio
import json
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response

from loam.core.errors import LoamError
from loam.serve import flags
from loam.serve.finite import EmbeddingInput, FiniteRequest, FiniteWorker
from loam.serve.scheduler import Event, Request, ServeError, Worker

Endpoint = Callable[[HttpRequest], Awaitable[Response]]

MAX_BODY = 16 << 20
_UNSUPPORTED: dict[str, tuple[object, ...]] = {
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "logit_bias": (None, {}),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "n": (None, 1),
    "tools": (None, []),
    "response_format": (None, {"type": "text"}),
    "dimensions": (None,),
}
"""OpenAI fields Loam does not implement: accepted only at their neutral value."""


def error_body(message: str, status: int = 400, param: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: the body of an error response, and the payload of a stream's error event."""
    kind = kind or ("invalid_request_error" if status < 500 else "internal_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def error_response(message: str, status: int = 400, param: str | None = None, kind: str | None = None) -> JSONResponse:
    """An error response with OpenAI's error object as its body."""
    return JSONResponse(error_body(message, status, param, kind), status_code=status)


def error_of(err: Exception) -> JSONResponse:
    """The error response for `err`: a refusal's status and field, or a 500 naming a bug."""
    if isinstance(err, ServeError):
        return error_response(str(err), err.status, err.param, err.kind)
    if isinstance(err, LoamError):
        return error_response(str(err), 400)
    return error_response(f"internal error: {type(err).__name__}: {err}", 500)


class Fields:
    """A request body's fields, checked one by one; a wrong one is a 400 naming it."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def get(self, name: str, kinds: tuple[type, ...], default: Any = None, what: str = "") -> Any:
        value = self.body.get(name)
        if value is None:
            return default
        if isinstance(value, bool) and bool not in kinds:
            raise ServeError(f"'{name}' must be {what or _kinds(kinds)}, got {json.dumps(value)}", param=name)
        if not isinstance(value, kinds):
            raise ServeError(f"'{name}' must be {what or _kinds(kinds)}, got {json.dumps(value)[:80]}", param=name)
        return value

    def number(self, name: str, default: float, low: float, high: float, *, open_low: bool = False) -> float:
        value = float(self.get(name, (int, float), default, "a number"))
        if not (low < value if open_low else low <= value) or value > high or not np.isfinite(value):
            interval = f"{'(' if open_low else '['}{low}, {high}]"
            raise ServeError(f"'{name}' must be in {interval}, got {value}", param=name)
        return value

    def integer(self, name: str, default: int | None, low: int) -> int | None:
        value = self.get(name, (int,), default, "an integer")
        if value is not None and value < low:
            raise ServeError(f"'{name}' must be at least {low}, got {value}", param=name)
        return value

    def unsupported(self, allowed: tuple[str, ...] = ()) -> None:
        """Refuse a field Loam does not implement (except those the endpoint reads itself: `allowed`)."""
        for name, neutral in _UNSUPPORTED.items():
            if name in self.body and name not in allowed and self.body[name] not in neutral:
                raise ServeError(f"'{name}' is not supported by this server", param=name)


def _kinds(kinds: tuple[type, ...]) -> str:
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        list: "an array",
        dict: "an object",
    }
    return " or ".join(names.get(k, k.__name__) for k in kinds)


async def read_fields(request: HttpRequest) -> Fields:
    """The fields of `request`'s JSON body (a 400 or 413 where it is not a JSON object of at most MAX_BODY bytes)."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise ServeError(f"the request body is over {MAX_BODY} bytes", status=413)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ServeError(f"the request body is not UTF-8 (byte {err.start})") from None
    try:
        body = json.loads(text)
    except ValueError as err:
        raise ServeError(f"the request body is not valid JSON ({err})") from None
    if not isinstance(body, dict):
        raise ServeError("the request body must be a JSON object")
    return Fields(body)


def tokenizer_flags(fields: Fields, default: int) -> int:
    """The request's tokenizer flags (`loam.serve.flags`): `tokenizer_flags`, or `default` changed by the
    `add_special_tokens` and `skip_special_tokens` booleans."""
    value = fields.integer("tokenizer_flags", None, 0)
    if value is not None:
        if value & ~flags.ALL:
            raise ServeError(
                f"'tokenizer_flags' {value} has unknown bits (ADD_SPECIAL_TOKENS = 4, NO_SPECIAL_TOKEN_MATCHING = 8, "
                "SKIP_SPECIAL_TOKENS = 1)",
                param="tokenizer_flags",
            )
        return value
    out = default
    for name, bit in (
        ("add_special_tokens", flags.ADD_SPECIAL_TOKENS),
        ("skip_special_tokens", flags.SKIP_SPECIAL_TOKENS),
    ):
        chosen = fields.get(name, (bool,))
        if chosen is not None:
            out = out | bit if chosen else out & ~bit
    return out


def guarded(endpoint: Endpoint) -> Endpoint:
    """The endpoint with every failure turned into a JSON error response (never a traceback)."""

    async def answer(request: HttpRequest) -> Response:
        try:
            return await endpoint(request)
        except Exception as err:  # a refusal (4xx) or a bug (500): either way one JSON line, and the server goes on
            if not isinstance(err, LoamError):
                traceback.print_exc()
            return error_of(err)

    return answer


async def watch_disconnect(http: HttpRequest, worker: Worker, requests: Sequence[Request]) -> None:
    """Cancel `requests` when the client goes away (the body was read, so the next message is the disconnect)."""
    try:
        while True:
            message = await http.receive()
            if message["type"] == "http.disconnect":
                for r in requests:
                    worker.cancel(r)
                return
    except (asyncio.CancelledError, RuntimeError):
        return


def event_sink(
    loop: asyncio.AbstractEventLoop, events: asyncio.Queue[tuple[int, Event]], index: int
) -> Callable[[Event], None]:
    """A sink for the request at `index`: the worker's thread hands each event to `events` on `loop`."""

    def sink(event: Event) -> None:
        loop.call_soon_threadsafe(events.put_nowait, (index, event))

    return sink


async def finite_results(
    http: HttpRequest, worker: FiniteWorker, items: Sequence[EmbeddingInput]
) -> tuple[list[Event], list[FiniteRequest]]:
    """Run `items` on `worker` as finite requests (framed on this thread: a refusal is the caller's 4xx) and wait
    for each one's result: their `done` events and the requests, in item order.  The first to fail cancels the
    others and is raised, naming its item's field; a client that goes away cancels them all."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
    prepared = [worker.prepare(item, event_sink(loop, events, index)) for index, item in enumerate(items)]
    # A request that cannot fit the memory budget even alone is refused before any of it runs.
    worker.fits(worker.request_bytes(sum(r.units for r in prepared)), items[0].param.partition("[")[0] if items else "")
    for finite_request in prepared:
        worker.submit(finite_request)
    watcher = asyncio.create_task(watch_disconnect(http, worker, prepared))
    results: dict[int, Event] = {}
    try:
        while len(results) < len(prepared):
            index, event = await events.get()
            if event.kind == "error":
                for r in prepared:
                    worker.cancel(r)
                status = event.status if event.status != 499 else 400
                kind = "invalid_request_error" if status < 500 else "internal_error"  # as error_body says
                raise ServeError(event.text, status=status, param=items[index].param, kind=kind)
            results[index] = event
    finally:
        watcher.cancel()
    return [results[index] for index in range(len(prepared))], prepared
