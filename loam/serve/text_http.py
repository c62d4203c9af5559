"""The text role's HTTP routes: OpenAI's completions and chat completions, and Loam's retained sessions.

- `POST /v1/completions`, `POST /v1/chat/completions`: Server-Sent Events with `"stream": true`, one
  `data: {json}` chunk per piece of text, ending with `data: [DONE]`; `stream_options.include_usage`
  adds a last chunk with the usage.
- `/v1/sessions...`: retained conversations (Loam's own): create, fork, rewind, delete; a completion
  with `"session": ID` appends to one.  A session lives in its model's worker (`TextWorker.sessions`),
  so it goes when its model is unregistered.

Loam's request fields beside OpenAI's: `tokenizer_flags` (`loam.serve.flags`), `add_special_tokens`,
`skip_special_tokens`, `ignore_eos`, `return_token_ids` (each choice gets its `token_ids`, as vLLM's
field does), `session` and `speculative` (false: no proposed tokens for this request, where the package
names a proposer; `loam.serve.speculative`).  The prompt's ids come from the model's control (`GenerationControl`).

Scores of known tokens (`loam.serve.scoring`) on `/v1/completions`: `logprobs` (0 to `MAX_LOGPROBS`
alternatives per generated token, OpenAI's legacy object), `echo` (the prompt's text before the reply,
and with `logprobs` its tokens' scores; `max_tokens` may then be 0), vLLM's `prompt_logprobs`, and
`choices` (multiple choice: each continuation's log-probability after the prompt, read on forks of the
prompt's state; the choice's `text` is the most probable, `choice_scores` the distribution over them).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from loam.core.errors import LoamError
from loam.serve import flags
from loam.serve.image_text import ImageInput
from loam.serve.sampling import SamplingParams
from loam.serve.scheduler import Event, ServeError
from loam.serve.scores_json import LegacyLogprobs, prompt_logprobs
from loam.serve.scoring import MAX_LOGPROBS, distribution
from loam.serve.text import Session, TextRequest, TextWorker
from loam.serve.web import (
    Fields,
    error_body,
    error_response,
    event_sink,
    read_fields,
    tokenizer_flags,
    watch_disconnect,
)

if TYPE_CHECKING:
    from loam.serve.server import ServedModel, Server

MAX_CHOICES = 16
"""The most continuations one multiple-choice completion may weigh (each is a row of state while it is read)."""


@dataclass(frozen=True)
class Scoring:
    """What a completion asks to be scored: `logprobs` and `prompt_logprobs` (alternatives per token, None: no
    scores), `echo`, and the multiple-choice `choices` with their ids (`continuations`).  `texts` are the prompts'
    texts, which `echo` puts before each reply."""

    logprobs: int | None = None
    echo: bool = False
    prompt_logprobs: int | None = None
    choices: tuple[str, ...] = ()
    continuations: tuple[list[int], ...] = ()
    texts: tuple[str, ...] = ()

    @property
    def scores_prompt(self) -> bool:
        return self.prompt_logprobs is not None or (self.echo and self.logprobs is not None)


def routes(server: Server, role: str) -> list[Route]:
    """The routes serving the models of `role` (the text role's entry in `loam.serve.roles.ROLES`)."""
    return TextRoutes(server, role).routes()


class TextRoutes:
    """The text role's endpoints over `server`'s models of `role`."""

    def __init__(self, server: Server, role: str) -> None:
        self.server = server
        self.role = role

    def routes(self) -> list[Route]:
        return [
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/sessions", self.open_session, methods=["POST"]),
            Route("/v1/sessions/{id}", self.get_session, methods=["GET"]),
            Route("/v1/sessions/{id}", self.close_session, methods=["DELETE"]),
            Route("/v1/sessions/{id}/fork", self.fork_session, methods=["POST"]),
            Route("/v1/sessions/{id}/rewind", self.rewind_session, methods=["POST"]),
        ]

    def _model(self, name: object) -> tuple[ServedModel, TextWorker]:
        """The served text model `name` and its worker (a 404 or 400 naming `model` otherwise)."""
        served = self.server.model(name, self.role)
        worker = served.worker
        assert isinstance(worker, TextWorker), "the text role's models run on a TextWorker"
        return served, worker

    # -- sessions -----------------------------------------------------------------------------------------------

    def _session(self, request: HttpRequest) -> tuple[ServedModel, TextWorker, Session]:
        """The session the path names, found in the worker of the served text model that holds it."""
        session_id = request.path_params["id"]
        for served in list(self.server.models.values()):
            worker = served.worker
            if isinstance(worker, TextWorker) and (session := worker.sessions.get(session_id)) is not None:
                return served, worker, session
        raise ServeError(f"no session {session_id!r}", status=404, param="session")

    @staticmethod
    def _session_object(served: ServedModel, session: Session) -> dict[str, Any]:
        return {"id": session.id, "object": "session", "model": served.name, "tokens": len(session.tokens)}

    async def open_session(self, request: HttpRequest) -> Response:
        fields = await read_fields(request)
        served, worker = self._model(fields.get("model", (str,)))
        session = worker.open_session(f"sess-{uuid.uuid4().hex}")
        return JSONResponse(self._session_object(served, session), status_code=201)

    async def get_session(self, request: HttpRequest) -> Response:
        served, _, session = self._session(request)
        return JSONResponse({**self._session_object(served, session), "token_ids": session.tokens})

    async def fork_session(self, request: HttpRequest) -> Response:
        served, worker, session = self._session(request)
        twin = await asyncio.to_thread(worker.fork, session, f"sess-{uuid.uuid4().hex}")
        return JSONResponse(self._session_object(served, twin), status_code=201)

    async def rewind_session(self, request: HttpRequest) -> Response:
        served, worker, session = self._session(request)
        fields = await read_fields(request)
        length = fields.integer("tokens", None, 0)
        if length is None:
            raise ServeError("'tokens' (how many tokens to keep) is required", param="tokens")
        await asyncio.to_thread(worker.rewind, session, length)
        return JSONResponse(self._session_object(served, session))

    async def close_session(self, request: HttpRequest) -> Response:
        _, worker, session = self._session(request)
        await asyncio.to_thread(worker.close, session)
        return JSONResponse({"id": session.id, "object": "session", "deleted": True})

    # -- generation ---------------------------------------------------------------------------------------------

    def _sampling(
        self, fields: Fields, max_tokens_name: str, default_max: int, defaults: Mapping[str, float],
        scoring: Scoring | None = None,
    ) -> SamplingParams:  # fmt: skip
        """The request's sampling fields; `defaults` (the package's search defaults) stand in for the API's.  A
        completion that echoes its prompt may ask for no tokens (`max_tokens` 0: the prompt and its scores)."""
        fields.unsupported(("logprobs", "echo") if scoring is not None else ())
        max_tokens = fields.integer(max_tokens_name, None, 0 if scoring is not None and scoring.echo else 1)
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
        fields = await read_fields(request)
        served, worker = self._model(fields.body.get("model"))
        prompt = fields.body.get("prompt")
        if prompt is None:
            raise ServeError("'prompt' is required", param="prompt")
        prompts: list[object]
        if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
            prompts = list(prompt)
        else:
            prompts = [prompt]
        flags_ = tokenizer_flags(fields, flags.ADD_SPECIAL_TOKENS | flags.SKIP_SPECIAL_TOKENS)
        ids = [
            worker.control.encode(worker.state, p, flags_, "prompt" if len(prompts) == 1 else f"prompt[{i}]")
            for i, p in enumerate(prompts)
        ]
        scoring = self._scoring(fields, worker, prompts, ids)
        params = self._sampling(fields, "max_tokens", 16, served.package.spec.sampling, scoring)
        return await self._generate(request, fields, served, worker, ids, params, flags_, chat=False, scoring=scoring)

    def _scoring(self, fields: Fields, worker: TextWorker, prompts: list[object], ids: list[list[int]]) -> Scoring:
        """The completion's scoring fields, checked: each a 400 naming it where it is wrong."""
        logprobs, prompt_top = (_alternatives(fields, name) for name in ("logprobs", "prompt_logprobs"))
        echo = bool(fields.get("echo", (bool,), False))
        tokenizer = worker.state.tokenizer
        texts = tuple(_echo_text(worker, p, i) for p, i in zip(prompts, ids, strict=True)) if echo else ()
        raw = fields.get("choices", (list,))
        if raw is None:
            return Scoring(logprobs, echo, prompt_top, texts=texts)
        if not 2 <= len(raw) <= MAX_CHOICES or not all(isinstance(c, str) and c for c in raw):
            raise ServeError(f"'choices' must be an array of 2 to {MAX_CHOICES} non-empty strings", param="choices")
        given = {"stream": fields.body.get("stream") is True, "n": fields.body.get("n") not in (None, 1), "echo": echo,
                 "logprobs": logprobs is not None, "prompt_logprobs": prompt_top is not None}  # fmt: skip
        for name in (name for name, used in given.items() if used):
            raise ServeError(f"'choices' cannot be used with '{name}'", param="choices")
        if tokenizer is None:
            raise ServeError("this model has no tokenizer to read 'choices' with", param="choices")
        continuations = []
        for i, choice in enumerate(raw):
            continuation = tokenizer.encode(choice, add_special_tokens=False)
            if not continuation:
                raise ServeError(f"'choices[{i}]' has no tokens", param=f"choices[{i}]")
            continuations.append(continuation)
        return Scoring(choices=tuple(raw), continuations=tuple(continuations), texts=texts)

    async def chat_completions(self, request: HttpRequest) -> Response:
        fields = await read_fields(request)
        served, worker = self._model(fields.body.get("model"))
        component = worker.images
        messages = _messages(fields.body.get("messages"), None if component is None else component.spec.token)
        images = [] if component is None else component.read_parts(fields.body.get("messages"))
        consumer = 0  # what the images add to the language model's phase, which _generate checks with the text's
        if component is not None and images:  # the projector's phase, refused from the headers before decoding
            forecast = component.forecast_memory([image.header for image in images])
            self.server.admit_request(served, forecast.producer, "messages")
            consumer = forecast.consumer
            component.decode(images)
        flags_ = tokenizer_flags(fields, flags.SKIP_SPECIAL_TOKENS)
        ids = worker.control.encode_chat(worker.state, messages, "messages")
        if component is not None:
            ids = component.expand(ids, images)
        context = served.package.spec.capacities.context_tokens
        defaults = served.package.spec.sampling
        params = self._sampling(fields, "max_completion_tokens", max(1, context - len(ids) - 1), defaults)
        return await self._generate(
            request, fields, served, worker, [ids], params, flags_, chat=True, images=images, image_bytes=consumer
        )

    async def _generate(
        self, http: HttpRequest, fields: Fields, served: ServedModel, worker: TextWorker, prompts: list[list[int]],
        params: SamplingParams, flags_: int, *, chat: bool, scoring: Scoring | None = None,
        images: Sequence[ImageInput] = (), image_bytes: int = 0,
    ) -> Response:  # fmt: skip
        scoring = scoring or Scoring()
        stream = bool(fields.get("stream", (bool,), False))
        options = fields.get("stream_options", (dict,), {})
        if options and not stream:
            raise ServeError("'stream_options' is only allowed with 'stream': true", param="stream_options")
        include_usage = bool(options.get("include_usage", False)) if options else False
        return_ids = bool(fields.get("return_token_ids", (bool,), False))
        speculative = bool(fields.get("speculative", (bool,), True))
        session = None
        session_id = fields.get("session", (str,))
        if session_id is not None:
            session = worker.sessions.get(session_id)
            if session is None:
                raise ServeError(f"no session {session_id!r} of model {served.name!r}", status=404, param="session")
            if len(prompts) != 1:
                raise ServeError("a request on a session has one prompt", param="prompt")
        image_ids = {t for image in images for t in worker.images.token_ids(image)} if worker.images else set()
        for i, ids in enumerate(prompts):
            if any(not 0 <= t < worker.stage.vocab and t not in image_ids for t in ids):
                bad = next(t for t in ids if not 0 <= t < worker.stage.vocab and t not in image_ids)
                raise ServeError(
                    f"token id {bad} is outside the model's vocabulary (0 to {worker.stage.vocab - 1})",
                    param="prompt" if len(prompts) == 1 else f"prompt[{i}]",
                )
        held = len(session.tokens) if session is not None else 0
        context = worker.capacities.context_tokens
        need = sum(worker.request_bytes(min(held + len(ids) + params.max_tokens, context), len(ids)) for ids in prompts)
        need += image_bytes
        self.server.admit_request(served, need, "prompt")  # one that cannot fit the memory budget alone: a 413
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
        tokenizer = worker.state.tokenizer
        skip = bool(flags_ & flags.SKIP_SPECIAL_TOKENS)
        requests: list[TextRequest] = []
        try:
            for index, ids in enumerate(prompts):
                text_request = TextRequest(
                    sink=event_sink(loop, events, index), prompt=ids, params=params, eos=worker.state.eos,
                    decode=tokenizer.decode_stream(skip_special_tokens=skip) if tokenizer is not None else None,
                    session=session, logprobs=scoring.logprobs, prompt_top=scoring.prompt_logprobs or 0,
                    targets=ids[1:] if scoring.scores_prompt else None,
                    continuations=[list(c) for c in scoring.continuations], speculative=speculative,
                    images=list(images),
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
            body = self._stream(http, worker, requests, events, meta, chat, include_usage, return_ids, scoring)
            return StreamingResponse(body, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return await self._complete(http, worker, requests, events, meta, chat, return_ids, scoring)

    async def _complete(
        self, http: HttpRequest, worker: TextWorker, requests: list[TextRequest],
        events: asyncio.Queue[tuple[int, Event]], meta: dict[str, Any], chat: bool, return_ids: bool,
        scoring: Scoring,
    ) -> Response:  # fmt: skip
        texts = ["" for _ in requests]
        logprobs = [self._legacy(worker, scoring, r, i) for i, r in enumerate(requests)]
        ends: dict[int, Event] = {}
        watcher = asyncio.create_task(watch_disconnect(http, worker, requests))
        try:
            while len(ends) < len(requests):
                index, event = await events.get()
                if event.kind == "token":
                    texts[index] += event.text
                    _add_scores(logprobs[index], event)
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
                choice["text"] = scoring.texts[index] + text if scoring.echo else text
                choice.update(self._scores(worker, scoring, requests[index], logprobs[index], end))
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
        return_ids: bool, scoring: Scoring,
    ) -> AsyncIterator[bytes]:  # fmt: skip
        kind = "chat.completion.chunk" if chat else "text_completion"
        logprobs = [self._legacy(worker, scoring, r, i) for i, r in enumerate(requests)]
        started: set[int] = set()
        usages: dict[int, Any] = {}
        watcher = asyncio.create_task(watch_disconnect(http, worker, requests))

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
                if index not in started and event.kind != "error":
                    started.add(index)  # the prompt is read: its echo and scores lead the choice's chunks
                    first = self._scores(worker, scoring, requests[index], logprobs[index], None)
                    if scoring.echo or first:
                        yield chunk(index, scoring.texts[index] if scoring.echo else "", None, first)
                if event.kind == "token":
                    scored = _add_scores(logprobs[index], event)
                    if event.text or scored:
                        extra: dict[str, Any] | None = {"logprobs": logprobs[index].take()} if scored else None
                        yield chunk(index, event.text, None, extra)
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

    @staticmethod
    def _legacy(worker: TextWorker, scoring: Scoring, request: TextRequest, index: int) -> LegacyLogprobs:
        """The choice's legacy `logprobs` object, its offsets after the echoed prompt's text."""
        legacy = LegacyLogprobs(_token_text(worker))
        if scoring.echo:
            legacy.offset = len(scoring.texts[index])
        return legacy

    @staticmethod
    def _scores(
        worker: TextWorker, scoring: Scoring, request: TextRequest, legacy: LegacyLogprobs, end: Event | None
    ) -> dict[str, Any]:
        """A completion choice's score fields: `logprobs` (the echoed prompt's tokens first), `prompt_logprobs`,
        and for multiple choice the chosen text and `choice_scores`.  `end` is None for a stream's first chunk,
        which carries the prompt's scores (the reply's come with its tokens)."""
        out: dict[str, Any] = {}
        if scoring.logprobs is not None and (scoring.echo or end is not None):
            generated = legacy.take()
            after = legacy.offset
            if scoring.echo:
                legacy.offset = 0
                legacy.add_prompt(request.prompt, request.prompt_scores)
                legacy.offset = after  # the reply's tokens start after the prompt's text
            out["logprobs"] = _joined(legacy.take(), generated)
        if scoring.prompt_logprobs is not None:
            out["prompt_logprobs"] = prompt_logprobs(request.prompt, request.prompt_scores, _token_text(worker))
        if scoring.choices and end is not None and isinstance(end.value, dict):
            scores = [float(v) for v in end.value["logprobs"]]
            probabilities = distribution(scores)
            best = max(range(len(scores)), key=scores.__getitem__)
            out["text"] = scoring.choices[best]
            out["choice_scores"] = [
                {"index": k, "text": text, "logprob": scores[k], "probability": probabilities[k]}
                for k, text in enumerate(scoring.choices)
            ]
        return out


def _alternatives(fields: Fields, name: str) -> int | None:
    """A count of alternatives per token (`logprobs`, `prompt_logprobs`): None, or 0 to MAX_LOGPROBS."""
    if fields.body.get(name) is False:  # the legacy API's "no scores"
        return None
    value = fields.integer(name, None, 0)
    if value is not None and value > MAX_LOGPROBS:
        raise ServeError(f"'{name}' must be at most {MAX_LOGPROBS}, got {value}", param=name)
    return value


def _echo_text(worker: TextWorker, prompt: object, ids: list[int]) -> str:
    """The text `echo` puts before a reply: the prompt as given, or its ids decoded."""
    if isinstance(prompt, str):
        return prompt
    tokenizer = worker.state.tokenizer
    if tokenizer is None:
        return ""
    try:
        return tokenizer.decode(ids)
    except LoamError as err:
        raise ServeError(str(err), param="prompt") from None


def _token_text(worker: TextWorker) -> Callable[[int], str]:
    """A token's text: the tokenizer's decoding of it alone (`token_id:N` where the tokenizer has none)."""
    tokenizer = worker.state.tokenizer

    def text(token: int) -> str:
        if tokenizer is not None:
            try:
                return tokenizer.decode([token])
            except LoamError:  # an id the model has and its tokenizer lacks
                pass
        return f"token_id:{token}"

    return text


def _add_scores(legacy: LegacyLogprobs, event: Event) -> bool:
    """Add the scores a token event carries to the choice's `logprobs`; whether it carried any."""
    if not isinstance(event.value, list) or not event.value:
        return False
    for scored in event.value:
        legacy.add(scored.token, scored)
    return True


def _joined(first: dict[str, list[Any]], then: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Two runs of a legacy `logprobs` object, one after the other."""
    return {key: [*first[key], *then[key]] for key in first}


def _total_usage(usages: list[Any]) -> dict[str, Any]:
    """The usage of several choices: their counts added."""
    prompt = sum(u["prompt_tokens"] for u in usages)
    completion = sum(u["completion_tokens"] for u in usages)
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip


def _messages(raw: object, image: str | None = None) -> list[dict[str, object]]:
    """OpenAI chat messages as the chat template reads them: each content flattened to a string, an image part
    written as `image` (the image token of a model that takes images; None: image parts are refused)."""
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
                if image is not None and isinstance(part, dict) and part.get("type") == "image_url":
                    parts.append(image)  # read by loam.serve.image_text
                    continue
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
