"""The HTTP face of `loam serve`: OpenAI's API on Starlette, with health, Prometheus metrics and registration.

Routes (OpenAI's where one exists, with its request fields, response objects and error shape):

- `GET /v1/models`, `GET /v1/models/{model}`
- `POST /v1/completions`, `POST /v1/chat/completions`: Server-Sent Events with `"stream": true`, one
  `data: {json}` chunk per piece of text, ending with `data: [DONE]`; `stream_options.include_usage`
  adds a last chunk with the usage.
- `POST /v1/embeddings`: float lists or base64 (`encoding_format`).
- `GET /health`, `GET /metrics` (Prometheus text).
- `POST /v1/packages` `{"path": DIR}` and `DELETE /v1/packages/{name}`: register and unregister a
  package by a server-local folder under a `--package-root`.
- `/v1/sessions...`: retained conversations (Loam's own): create, fork, rewind, delete; a completion
  with `"session": ID` appends to one.

Loam's request fields beside OpenAI's: `tokenizer_flags` (the guide's ADD_SPECIAL_TOKENS = 4,
NO_SPECIAL_TOKEN_MATCHING = 8, SKIP_SPECIAL_TOKENS = 1), `add_special_tokens`, `skip_special_tokens`,
`ignore_eos`, `return_token_ids` (each choice gets its `token_ids`, as vLLM's field does) and `session`.

Every refusal is a 4xx JSON error `{"error": {"message", "type", "param", "code"}}` naming the field;
anything else is a 500 with a one-line message, never a traceback.  Work runs on the models' worker
threads; the event loop only parses, waits and writes.  A client that disconnects cancels its request.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from loam.core.errors import LoamError
from loam.serve import flags
from loam.serve.finite import EmbeddingInput, FiniteWorker
from loam.serve.sampling import SamplingParams
from loam.serve.scheduler import Event, ServeError
from loam.serve.server import ServedModel, Server
from loam.serve.text import Session, TextRequest, TextWorker

MAX_BODY = 16 << 20
_UNSUPPORTED = {  # OpenAI fields Loam does not implement: accepted only at their neutral value
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


def error_body(message: str, status: int = 400, param: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: the body of an error response, and the payload of a stream's error event."""
    kind = kind or ("invalid_request_error" if status < 500 else "internal_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def error_response(message: str, status: int = 400, param: str | None = None, kind: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, status, param, kind), status_code=status)


def _error_of(err: Exception) -> JSONResponse:
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

    def unsupported(self) -> None:
        for name, neutral in _UNSUPPORTED.items():
            if name in self.body and self.body[name] not in neutral:
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


async def _body(request: HttpRequest) -> Fields:
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


def _tokenizer_flags(fields: Fields, default: int) -> int:
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


class App:
    """The Starlette application over a `Server`."""

    def __init__(self, server: Server) -> None:
        self.server = server
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/v1/models", self.list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", self.get_model, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/embeddings", self.embeddings, methods=["POST"]),
            Route("/v1/packages", self.register, methods=["POST"]),
            Route("/v1/packages/{name:path}", self.unregister, methods=["DELETE"]),
            Route("/v1/sessions", self.open_session, methods=["POST"]),
            Route("/v1/sessions/{id}", self.get_session, methods=["GET"]),
            Route("/v1/sessions/{id}", self.close_session, methods=["DELETE"]),
            Route("/v1/sessions/{id}/fork", self.fork_session, methods=["POST"]),
            Route("/v1/sessions/{id}/rewind", self.rewind_session, methods=["POST"]),
        ]
        self.sessions: dict[str, tuple[ServedModel, Session]] = {}
        self.asgi = Starlette(
            routes=[Route(r.path, _guarded(r.endpoint), methods=r.methods) for r in routes],
            exception_handlers={404: self._not_found, 405: self._not_allowed},
        )

    async def _not_found(self, request: HttpRequest, exc: Exception) -> Response:
        return error_response(f"no route {request.method} {request.url.path}", 404)

    async def _not_allowed(self, request: HttpRequest, exc: Exception) -> Response:
        return error_response(f"{request.method} is not allowed on {request.url.path}", 405)

    # -- service ------------------------------------------------------------------------------------------------

    async def health(self, request: HttpRequest) -> Response:
        return JSONResponse({"status": "ok", "models": sorted(self.server.models)})

    async def metrics(self, request: HttpRequest) -> Response:
        return Response(generate_latest(self.server.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def _model_object(self, served: ServedModel) -> dict[str, Any]:
        spec = served.package.spec
        return {
            "id": served.name, "object": "model", "created": served.created, "owned_by": "loam",
            "role": served.role, "context_tokens": spec.capacities.context_tokens,
        }  # fmt: skip

    async def list_models(self, request: HttpRequest) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_object(m) for m in self.server.models.values()]})

    async def get_model(self, request: HttpRequest) -> Response:
        return JSONResponse(self._model_object(self.server.model(request.path_params["model"])))

    async def register(self, request: HttpRequest) -> Response:
        fields = await _body(request)
        path = fields.get("path", (str,))
        if not path:
            raise ServeError("'path' must name a package folder on the server", param="path")
        served = await asyncio.to_thread(self.server.register, path, over_http=True)
        return JSONResponse(self._model_object(served), status_code=201)

    async def unregister(self, request: HttpRequest) -> Response:
        name = request.path_params["name"]
        for key, (served, _) in list(self.sessions.items()):
            if served.name == name:
                del self.sessions[key]
        await asyncio.to_thread(self.server.unregister, name)
        return JSONResponse({"id": name, "object": "model", "deleted": True})

    # -- sessions -----------------------------------------------------------------------------------------------

    def _session(self, request: HttpRequest) -> tuple[ServedModel, Session]:
        found = self.sessions.get(request.path_params["id"])
        if found is None:
            raise ServeError(f"no session {request.path_params['id']!r}", status=404, param="session")
        return found

    @staticmethod
    def _session_object(served: ServedModel, session: Session) -> dict[str, Any]:
        return {"id": session.id, "object": "session", "model": served.name, "tokens": len(session.tokens)}

    async def open_session(self, request: HttpRequest) -> Response:
        fields = await _body(request)
        served = self.server.model(fields.get("model", (str,)), "text")
        worker = served.worker
        assert isinstance(worker, TextWorker)
        session = worker.open_session(f"sess-{uuid.uuid4().hex}")
        self.sessions[session.id] = (served, session)
        return JSONResponse(self._session_object(served, session), status_code=201)

    async def get_session(self, request: HttpRequest) -> Response:
        served, session = self._session(request)
        return JSONResponse({**self._session_object(served, session), "token_ids": session.tokens})

    async def fork_session(self, request: HttpRequest) -> Response:
        served, session = self._session(request)
        worker = served.worker
        assert isinstance(worker, TextWorker)
        twin = await asyncio.to_thread(worker.fork, session, f"sess-{uuid.uuid4().hex}")
        self.sessions[twin.id] = (served, twin)
        return JSONResponse(self._session_object(served, twin), status_code=201)

    async def rewind_session(self, request: HttpRequest) -> Response:
        served, session = self._session(request)
        fields = await _body(request)
        length = fields.integer("tokens", None, 0)
        if length is None:
            raise ServeError("'tokens' (how many tokens to keep) is required", param="tokens")
        worker = served.worker
        assert isinstance(worker, TextWorker)
        await asyncio.to_thread(worker.rewind, session, length)
        return JSONResponse(self._session_object(served, session))

    async def close_session(self, request: HttpRequest) -> Response:
        served, session = self._session(request)
        worker = served.worker
        assert isinstance(worker, TextWorker)
        await asyncio.to_thread(worker.close, session)
        del self.sessions[session.id]
        return JSONResponse({"id": session.id, "object": "session", "deleted": True})

    # -- generation ---------------------------------------------------------------------------------------------

    def _sampling(
        self, fields: Fields, max_tokens_name: str, default_max: int, defaults: Mapping[str, float]
    ) -> SamplingParams:
        """The request's sampling fields; `defaults` (the package's search defaults) stand in for the API's."""
        fields.unsupported()
        max_tokens = fields.integer(max_tokens_name, None, 1)
        if max_tokens is None and max_tokens_name == "max_completion_tokens":
            max_tokens = fields.integer("max_tokens", None, 1)
        stop = fields.get("stop", (str, list), ())
        stop = (stop,) if isinstance(stop, str) else stop
        if not all(isinstance(s, str) and s for s in stop) or len(stop) > 16:
            raise ServeError("'stop' must be a non-empty string or an array of at most 16 of them", param="stop")
        return SamplingParams(
            max_tokens=max_tokens if max_tokens is not None else default_max,
            temperature=fields.number("temperature", defaults.get("temperature", 1.0), 0.0, 2.0),
            top_p=fields.number("top_p", defaults.get("top_p", 1.0), 0.0, 1.0, open_low=True),
            seed=fields.integer("seed", None, -(1 << 63)),
            stop=tuple(stop),
            ignore_eos=bool(fields.get("ignore_eos", (bool,), False)),
        )

    async def completions(self, request: HttpRequest) -> Response:
        fields = await _body(request)
        served = self.server.model(fields.body.get("model"), "text")
        prompt = fields.body.get("prompt")
        if prompt is None:
            raise ServeError("'prompt' is required", param="prompt")
        prompts: list[object]
        if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
            prompts = list(prompt)
        else:
            prompts = [prompt]
        flags_ = _tokenizer_flags(fields, flags.ADD_SPECIAL_TOKENS | flags.SKIP_SPECIAL_TOKENS)
        ids = [
            served.control.encode(served.state, p, flags_, "prompt" if len(prompts) == 1 else f"prompt[{i}]")  # type: ignore[attr-defined]
            for i, p in enumerate(prompts)
        ]
        params = self._sampling(fields, "max_tokens", 16, served.package.spec.sampling)
        return await self._generate(request, fields, served, ids, params, flags_, chat=False)

    async def chat_completions(self, request: HttpRequest) -> Response:
        fields = await _body(request)
        served = self.server.model(fields.body.get("model"), "text")
        messages = _messages(fields.body.get("messages"))
        flags_ = _tokenizer_flags(fields, flags.SKIP_SPECIAL_TOKENS)
        ids = served.control.encode_chat(served.state, messages, "messages")  # type: ignore[attr-defined]
        context = served.package.spec.capacities.context_tokens
        defaults = served.package.spec.sampling
        params = self._sampling(fields, "max_completion_tokens", max(1, context - len(ids) - 1), defaults)
        return await self._generate(request, fields, served, [ids], params, flags_, chat=True)

    async def _generate(
        self, http: HttpRequest, fields: Fields, served: ServedModel, prompts: list[list[int]],
        params: SamplingParams, flags_: int, *, chat: bool,
    ) -> Response:  # fmt: skip
        worker = served.worker
        assert isinstance(worker, TextWorker)
        stream = bool(fields.get("stream", (bool,), False))
        options = fields.get("stream_options", (dict,), {})
        if options and not stream:
            raise ServeError("'stream_options' is only allowed with 'stream': true", param="stream_options")
        include_usage = bool(options.get("include_usage", False)) if options else False
        return_ids = bool(fields.get("return_token_ids", (bool,), False))
        session = None
        session_id = fields.get("session", (str,))
        if session_id is not None:
            found = self.sessions.get(session_id)
            if found is None or found[0] is not served:
                raise ServeError(f"no session {session_id!r} of model {served.name!r}", status=404, param="session")
            if len(prompts) != 1:
                raise ServeError("a request on a session has one prompt", param="prompt")
            session = found[1]
        for i, ids in enumerate(prompts):
            if any(not 0 <= t < worker.stage.vocab for t in ids):
                bad = next(t for t in ids if not 0 <= t < worker.stage.vocab)
                raise ServeError(
                    f"token id {bad} is outside the model's vocabulary (0 to {worker.stage.vocab - 1})",
                    param="prompt" if len(prompts) == 1 else f"prompt[{i}]",
                )
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
        tokenizer = served.state.tokenizer  # type: ignore[attr-defined]
        skip = bool(flags_ & flags.SKIP_SPECIAL_TOKENS)
        requests: list[TextRequest] = []
        try:
            for index, ids in enumerate(prompts):
                sink: Callable[[Event], None] = lambda e, i=index: loop.call_soon_threadsafe(events.put_nowait, (i, e))  # noqa: E731
                text_request = TextRequest(
                    sink=sink, prompt=ids, params=params, eos=served.state.eos,  # type: ignore[attr-defined]
                    decode=tokenizer.decode_stream(skip_special_tokens=skip) if tokenizer is not None else None,
                    session=session,
                )  # fmt: skip
                worker.submit(text_request)
                requests.append(text_request)
        except BaseException:
            for r in requests:
                worker.cancel(r)
            raise
        meta = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": served.name,
        }
        if stream:
            body = self._stream(http, worker, requests, events, meta, chat, include_usage, return_ids)
            return StreamingResponse(body, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return await self._complete(http, worker, requests, events, meta, chat, return_ids)

    async def _complete(
        self, http: HttpRequest, worker: TextWorker, requests: list[TextRequest],
        events: asyncio.Queue[tuple[int, Event]], meta: dict[str, Any], chat: bool, return_ids: bool,
    ) -> Response:  # fmt: skip
        texts = ["" for _ in requests]
        ends: dict[int, Event] = {}
        watcher = asyncio.create_task(_watch_disconnect(http, worker, requests))
        try:
            while len(ends) < len(requests):
                index, event = await events.get()
                if event.kind == "token":
                    texts[index] += event.text
                    worker.consumed(requests[index], len(event.text.encode("utf-8")))
                elif event.kind == "error":
                    for r in requests:
                        worker.cancel(r)
                    return error_response(event.text, event.status if event.status != 499 else 400)
                else:
                    ends[index] = event
        finally:
            watcher.cancel()
        choices = []
        for index, text in enumerate(texts):
            end = ends[index]
            choice: dict[str, Any] = {"index": index, "finish_reason": end.finish_reason, "logprobs": None}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            if return_ids:
                choice["token_ids"] = end.value
                choice["prompt_token_ids"] = requests[index].prompt
            choices.append(choice)
        usage = _total_usage([ends[i].usage for i in range(len(requests))])
        kind = "chat.completion" if chat else "text_completion"
        return JSONResponse({**meta, "object": kind, "choices": choices, "usage": usage})

    async def _stream(
        self, http: HttpRequest, worker: TextWorker, requests: list[TextRequest],
        events: asyncio.Queue[tuple[int, Event]], meta: dict[str, Any], chat: bool, include_usage: bool,
        return_ids: bool,
    ) -> AsyncIterator[bytes]:  # fmt: skip
        kind = "chat.completion.chunk" if chat else "text_completion"
        usages: dict[int, Any] = {}
        watcher = asyncio.create_task(_watch_disconnect(http, worker, requests))

        def chunk(index: int, text: str | None, finish: str | None, extra: dict[str, Any] | None = None) -> bytes:
            if chat:
                delta: dict[str, Any] = {} if text is None else {"content": text}
                choice: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}
            else:
                choice = {"index": index, "text": text or "", "finish_reason": finish, "logprobs": None}
            choice.update(extra or {})
            payload = {**meta, "object": kind, "choices": [choice]}
            if include_usage:
                payload["usage"] = None
            return f"data: {json.dumps(payload)}\n\n".encode()

        try:
            if chat:
                for index in range(len(requests)):
                    first = json.loads(chunk(index, "", None)[6:])
                    first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
                    yield f"data: {json.dumps(first)}\n\n".encode()
            while len(usages) < len(requests):
                index, event = await events.get()
                if event.kind == "token":
                    if event.text:
                        yield chunk(index, event.text, None)
                    # The write above returned: the client (or its socket buffer) took the bytes.
                    worker.consumed(requests[index], len(event.text.encode("utf-8")))
                elif event.kind == "error":
                    for r in requests:
                        worker.cancel(r)
                    yield f"data: {json.dumps(error_body(event.text, event.status))}\n\n".encode()
                    break
                else:
                    extra = {"token_ids": event.value} if return_ids else None
                    yield chunk(index, None if chat else "", event.finish_reason, extra)
                    usages[index] = event.usage
            else:
                if include_usage:
                    final = {**meta, "object": kind, "choices": [], "usage": _total_usage(list(usages.values()))}
                    yield f"data: {json.dumps(final)}\n\n".encode()
            yield b"data: [DONE]\n\n"
        finally:
            watcher.cancel()
            for r in requests:
                if not r.finished:
                    worker.cancel(r)

    # -- embeddings ---------------------------------------------------------------------------------------------

    async def embeddings(self, request: HttpRequest) -> Response:
        fields = await _body(request)
        served = self.server.model(fields.body.get("model"), "embedding")
        worker = served.worker
        assert isinstance(worker, FiniteWorker)
        fields.unsupported()
        encoding = fields.get("encoding_format", (str,), "float")
        if encoding not in ("float", "base64"):
            raise ServeError(f"'encoding_format' must be float or base64, got {encoding!r}", param="encoding_format")
        flags_ = _tokenizer_flags(fields, flags.ADD_SPECIAL_TOKENS)
        items = _embedding_inputs(fields.body.get("input"), flags_)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
        prepared = []
        for index, item in enumerate(items):
            sink: Callable[[Event], None] = lambda e, i=index: loop.call_soon_threadsafe(events.put_nowait, (i, e))  # noqa: E731
            prepared.append(worker.prepare(item, sink))
        for finite_request in prepared:
            worker.submit(finite_request)
        watcher = asyncio.create_task(_watch_disconnect(request, worker, prepared))
        results: dict[int, Event] = {}
        try:
            while len(results) < len(prepared):
                index, event = await events.get()
                if event.kind == "error":
                    for r in prepared:
                        worker.cancel(r)
                    return error_response(event.text, event.status if event.status != 499 else 400, items[index].param)
                results[index] = event
        finally:
            watcher.cancel()
        data = []
        for index in range(len(prepared)):
            vector = np.asarray(results[index].value, dtype=np.float32)
            embedding: Any = (
                base64.b64encode(vector.astype("<f4").tobytes()).decode() if encoding == "base64" else vector.tolist()
            )
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(r.units for r in prepared)
        return JSONResponse({"object": "list", "data": data, "model": served.name,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})  # fmt: skip


def _guarded(endpoint: Callable[[HttpRequest], Any]) -> Callable[[HttpRequest], Any]:
    """The endpoint with every failure turned into a JSON error response (never a traceback)."""

    async def guarded(request: HttpRequest) -> Response:
        try:
            return await endpoint(request)
        except Exception as err:  # a refusal (4xx) or a bug (500): either way one JSON line, and the server goes on
            if not isinstance(err, LoamError):
                import traceback

                traceback.print_exc()
            return _error_of(err)

    return guarded


async def _watch_disconnect(http: HttpRequest, worker: Any, requests: list[Any]) -> None:
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


def _total_usage(usages: list[Any]) -> dict[str, Any]:
    prompt = sum(u["prompt_tokens"] for u in usages)
    completion = sum(u["completion_tokens"] for u in usages)
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip


def _messages(raw: object) -> list[dict[str, object]]:
    """OpenAI chat messages as the chat template reads them: each content flattened to a string."""
    if not isinstance(raw, list) or not raw:
        raise ServeError("'messages' must be a non-empty array of {role, content}", param="messages")
    out = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ServeError(f"'{where}' must be an object with 'role' and 'content'", param=where)
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise ServeError(
                f"'{where}.role' must be system, developer, user, assistant or tool, got {role!r}",
                param=f"{where}.role",
            )
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ServeError(
                        f"'{where}.content[{j}]' must be a text part {{type: text, text}}",
                        param=f"{where}.content[{j}]",
                    )
                parts.append(part["text"])
            content = "".join(parts)
        if not isinstance(content, str):
            raise ServeError(f"'{where}.content' must be a string or an array of text parts", param=f"{where}.content")
        out.append({"role": "system" if role == "developer" else role, "content": content})
    return out


def _embedding_inputs(raw: object, flags_: int) -> list[EmbeddingInput]:
    """OpenAI's `input`: a string, an array of strings, an array of token ids, or an array of arrays of them."""

    def ids(value: list[object], where: str) -> tuple[int, ...]:
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
            raise ServeError(f"'{where}' must hold non-negative integer token ids", param=where)
        return tuple(value)  # type: ignore[arg-type]

    if isinstance(raw, str):
        return [EmbeddingInput(text=raw, flags=flags_, param="input")]
    if not isinstance(raw, list) or not raw:
        raise ServeError("'input' must be a string, an array of strings, or token ids", param="input")
    if all(isinstance(t, int) and not isinstance(t, bool) for t in raw):
        return [EmbeddingInput(ids=ids(raw, "input"), flags=flags_, param="input")]
    out = []
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if isinstance(item, str):
            out.append(EmbeddingInput(text=item, flags=flags_, param=where))
        elif isinstance(item, list):
            out.append(EmbeddingInput(ids=ids(item, where), flags=flags_, param=where))
        else:
            raise ServeError(f"'{where}' must be a string or an array of token ids", param=where)
    return out


def make_app(server: Server) -> Starlette:
    """The ASGI application serving `server`'s models."""
    return App(server).asgi


__all__ = ["App", "make_app"]
