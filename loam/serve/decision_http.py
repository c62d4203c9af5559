"""The decision role's HTTP route: `POST /v1/classify`, as vLLM shapes it.

Request: `{model, input, labels?}`.  For a language-model package, `input` is a string (it fills the
framing's one field, or its `{input}`), an object of field -> string, or a list of either; `labels`, if
given, replaces the package's answers for this request (zero-shot: each label is scored as its own
continuation text).  For a classifier package, `input` is one input or a list of them, each a nested array
(C x H x W numbers for an image, no batch axis) or `{"b64": base64 of float32 little-endian values,
"shape": [C, H, W]}` (no image decoding: Pillow is not a dependency); `labels` may only pick a subset of
the package's labels.

Response: `{id, object: "list", created, model, labels, data: [{index, label, probs, num_classes, object:
"classify"}], usage}`: each input's `probs` follow `labels` (the answers asked about, in order), `label` is
the most probable.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loam.serve.decision import Answer, ClassifierWorker, DecisionState, DecisionTextWorker
from loam.serve.sampling import SamplingParams
from loam.serve.scheduler import Event, Request, ServeError, Worker
from loam.serve.scoring import distribution
from loam.serve.text import TextRequest
from loam.serve.web import Fields, error_response, event_sink, read_fields, watch_disconnect

if TYPE_CHECKING:
    from loam.serve.server import Server

MAX_INPUTS = 64
"""The most inputs one classify request may carry."""


def routes(server: Server, role: str) -> list[Route]:
    """The routes serving the models of `role` (the decision role's entry in `loam.serve.roles.ROLES`)."""
    return [Route("/v1/classify", DecisionRoutes(server, role).classify, methods=["POST"])]


class DecisionRoutes:
    """`/v1/classify` over `server`'s models of `role`."""

    def __init__(self, server: Server, role: str) -> None:
        self.server = server
        self.role = role

    async def classify(self, http: HttpRequest) -> Response:
        fields = await read_fields(http)
        served = self.server.model(fields.body.get("model"), self.role)
        worker = served.worker
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
        requests: list[Request] = []
        if isinstance(worker, DecisionTextWorker):
            state = worker.decision
            answers, continuations = _lm_answers(worker, state, fields)
            items = _framed(worker, state, fields.body.get("input"))
            for i, (ids, _) in enumerate(items):
                request = TextRequest(
                    sink=event_sink(loop, events, i), prompt=ids, continuations=[list(c) for c in continuations],
                    params=SamplingParams(max_tokens=1, temperature=0.0),
                )  # fmt: skip
                requests.append(request)
        else:
            assert isinstance(worker, ClassifierWorker), "a decision model runs on a text or classifier worker"
            state = worker.decision
            answers = _classifier_answers(state, fields)
            indices = tuple(a.index for a in answers)
            arrays = _arrays(state, fields.body.get("input"))
            requests += [
                worker.prepare(pixels, indices, param, event_sink(loop, events, i))
                for i, (pixels, param) in enumerate(arrays)
            ]
        _submit(worker, requests, "input" if len(requests) == 1 else None)
        results: dict[int, Event] = {}
        watcher = asyncio.create_task(watch_disconnect(http, worker, requests))
        try:
            while len(results) < len(requests):
                index, event = await events.get()
                if event.kind == "error":
                    for r in requests:
                        worker.cancel(r)
                    return error_response(event.text, event.status if event.status != 499 else 400, event.param)
                if event.kind == "done":
                    results[index] = event
        finally:
            watcher.cancel()
        labels = [a.label for a in answers]
        data = []
        prompt_tokens = 0
        for index in range(len(requests)):
            end = results[index]
            if isinstance(end.value, dict):  # a language model's answers: their sequence log-probabilities
                probs = distribution([float(v) for v in end.value["logprobs"]])
                prompt_tokens += int(end.usage["prompt_tokens"]) if end.usage else 0  # type: ignore[call-overload]  # usage values are ints
            else:
                probs = [float(p) for p in end.value]  # type: ignore[attr-defined]  # a classifier's distribution
            best = max(range(len(probs)), key=probs.__getitem__)
            data.append({"index": index, "label": labels[best], "probs": probs, "num_classes": len(labels),
                         "object": "classify"})  # fmt: skip
        if isinstance(worker, DecisionTextWorker):
            worker.metrics.decisions.inc(len(requests))
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0}
        return JSONResponse({"id": f"classify-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                             "model": served.name, "labels": labels, "data": data, "usage": usage})  # fmt: skip


def _submit(worker: Worker, requests: Sequence[Request], param: str | None) -> None:
    """Submit every request, or none: a refusal of one cancels those already submitted and names its input."""
    submitted: list[Request] = []
    try:
        for i, request in enumerate(requests):
            try:
                worker.submit(request)
            except ServeError as err:
                if err.status != 400:
                    raise
                raise ServeError(str(err), param=param or f"input[{i}]") from None
            submitted.append(request)
    except BaseException:
        for request in submitted:
            worker.cancel(request)
        raise


def _inputs(raw: object) -> list[tuple[object, str]]:
    """The request's inputs with how each is named in errors: one, or a non-empty list of at most MAX_INPUTS."""
    if raw is None:
        raise ServeError("'input' is required", param="input")
    if isinstance(raw, list):
        if not raw or len(raw) > MAX_INPUTS:
            raise ServeError(f"'input' must hold 1 to {MAX_INPUTS} inputs, got {len(raw)}", param="input")
        return [(item, f"input[{i}]") for i, item in enumerate(raw)]
    return [(raw, "input")]


def _lm_answers(
    worker: DecisionTextWorker, state: DecisionState, fields: Fields
) -> tuple[tuple[Answer, ...], tuple[tuple[int, ...], ...]]:
    """The answers this request is scored over, and their continuations' ids: the package's, or `labels`."""
    raw = fields.get("labels", (list,))
    if raw is None:
        return state.answers, state.continuations
    if not 2 <= len(raw) <= MAX_INPUTS or not all(isinstance(label, str) and label for label in raw):
        raise ServeError(f"'labels' must be 2 to {MAX_INPUTS} non-empty strings", param="labels")
    if len(set(raw)) != len(raw):
        raise ServeError("'labels' repeats a label", param="labels")
    tokenizer = worker.state.tokenizer
    assert tokenizer is not None  # a language-model decision package has one (FramedDecisions.prepare)
    continuations = tuple(tuple(tokenizer.encode(label, add_special_tokens=False)) for label in raw)
    empty = next((i for i, ids in enumerate(continuations) if not ids), None)
    if empty is not None:
        raise ServeError(f"'labels[{empty}]' has no tokens", param=f"labels[{empty}]")
    return tuple(Answer(label, label) for label in raw), continuations


def _framed(worker: DecisionTextWorker, state: DecisionState, raw: object) -> list[tuple[list[int], str]]:
    """Each input's framed question, tokenized, with the input's name."""
    out = []
    tokenizer = worker.state.tokenizer
    assert tokenizer is not None
    for item, param in _inputs(raw):
        if isinstance(item, str):
            values = {state.fields[0] if len(state.fields) == 1 else "input": item}
        elif isinstance(item, dict) and all(isinstance(v, str) for v in item.values()):
            values = {str(k): v for k, v in item.items()}
        else:
            raise ServeError(f"'{param}' must be a string or an object of field -> string", param=param)
        text = worker.decision_control.frame(state, values, param)
        out.append((tokenizer.encode(text), param))
    return out


def _classifier_answers(state: DecisionState, fields: Fields) -> tuple[Answer, ...]:
    """The package's answers, or the subset of them `labels` names."""
    raw = fields.get("labels", (list,))
    if raw is None:
        return state.answers
    known = {a.label: a for a in state.answers}
    unknown = next((label for label in raw if label not in known), None) if raw else None
    if len(raw) < 2 or unknown is not None or len(set(raw)) != len(raw):
        detail = f"{unknown!r} is not one of them" if unknown is not None else "give at least 2, each once"
        raise ServeError(f"'labels' must pick among the model's labels: {detail}", param="labels")
    return tuple(known[label] for label in raw)


def _arrays(state: DecisionState, raw: object) -> list[tuple[np.ndarray, str]]:
    """A classifier request's inputs as arrays (no batch axis), each with its name."""
    assert state.image is not None
    rank = len(state.image[2]) - 1
    if isinstance(raw, list) and raw and not isinstance(raw[0], dict):
        whole = _nested(raw, "input")
        if whole.ndim == rank:
            return [(whole, "input")]
        if whole.ndim == rank + 1 and 0 < whole.shape[0] <= MAX_INPUTS:
            return [(whole[i], f"input[{i}]") for i in range(whole.shape[0])]
        raise ServeError(
            f"'input' must be {rank}-D (one input) or {rank + 1}-D (a list), got {whole.ndim}-D", param="input"
        )
    out = []
    for item, param in _inputs(raw):
        if isinstance(item, dict):
            out.append((_decoded(item, param), param))
        elif isinstance(item, list):
            out.append((_nested(item, param), param))
        else:
            raise ServeError(f"'{param}' must be a nested array or {{b64, shape}}", param=param)
    return out


def _nested(raw: list[Any], param: str) -> np.ndarray:
    try:
        array = np.asarray(raw, np.float32)
    except (ValueError, TypeError):
        raise ServeError(f"'{param}' must be a nested array of numbers of even extents", param=param) from None
    if not np.all(np.isfinite(array)):
        raise ServeError(f"'{param}' holds a value that is not finite", param=param)
    return array


def _decoded(item: dict[str, Any], param: str) -> np.ndarray:
    shape = item.get("shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
        raise ServeError(f"'{param}.shape' must be the input's extents, e.g. [3, 224, 224]", param=f"{param}.shape")
    try:
        data = base64.b64decode(item.get("b64", ""), validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise ServeError(f"'{param}.b64' must be base64 of float32 values", param=f"{param}.b64") from None
    count = int(np.prod(shape))
    if len(data) != 4 * count:
        raise ServeError(
            f"'{param}.b64' holds {len(data)} bytes; shape {shape} takes {4 * count} (float32)", param=f"{param}.b64"
        )
    return np.frombuffer(data, "<f4").reshape(shape).astype(np.float32)
