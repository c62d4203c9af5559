"""The sequence role's HTTP routes: a cross-encoder's scores (`/v1/score`, `/v1/rerank`) and an encoder's rows
(`/pooling`), in the shapes vLLM serves them.

- `POST /v1/score` (and `/score`): `{model, text_1, text_2}`, each a string or an array of strings, paired
  1:1 (two strings), 1:N (a string and an array: the one text_1 against every text_2) or N:N (two arrays of
  one length, pairwise) -> `{id, object: "list", created, model, data: [{index, object: "score", score}],
  usage}`, one score per pair in pair order.
- `POST /v1/rerank` (and `/rerank`, `/v2/rerank`), the Jina/Cohere shape: `{model, query, documents, top_n?,
  return_documents?}` -> `{id, model, usage: {total_tokens}, results: [{index, relevance_score, document:
  {text}}]}`, most relevant first (ties in document order), the first `top_n` where given (0: all), each
  `document` left out where `return_documents` is false.
- `POST /pooling` (and `/v1/pooling`): `{model, input}` with `input` as `/v1/embeddings` takes it -> `{id,
  object: "list", created, model, data: [{index, object: "pooling", data: [[float] per token]}], usage}`.

A pair is one finite request (`loam.serve.sequence.PairInput`): a cohort may hold pairs of several clients,
and each pair's score is the same alone or among others.  A score model serves the first two routes, a rows
model the last; the other's request is a 400 naming `model`.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loam.serve import flags
from loam.serve.embedding_http import embedding_inputs
from loam.serve.finite import FiniteWorker
from loam.serve.scheduler import ServeError
from loam.serve.sequence import PairInput
from loam.serve.web import Fields, finite_results, read_fields, tokenizer_flags

if TYPE_CHECKING:
    from loam.serve.server import ServedModel, Server


def routes(server: Server, role: str) -> list[Route]:
    """The routes serving the models of `role` (the sequence role's entry in `loam.serve.roles.ROLES`)."""
    return SequenceRoutes(server, role).routes()


class SequenceRoutes:
    """The sequence role's endpoints over `server`'s models of `role`."""

    def __init__(self, server: Server, role: str) -> None:
        self.server = server
        self.role = role

    def routes(self) -> list[Route]:
        return [
            *(Route(path, self.score, methods=["POST"]) for path in ("/v1/score", "/score")),
            *(Route(path, self.rerank, methods=["POST"]) for path in ("/v1/rerank", "/rerank", "/v2/rerank")),
            *(Route(path, self.pooling, methods=["POST"]) for path in ("/pooling", "/v1/pooling")),
        ]

    def _model(self, fields: Fields, publish: str) -> tuple[ServedModel, FiniteWorker]:
        served = self.server.model(fields.body.get("model"), self.role)
        stage = next(iter(served.package.spec.stages.values()))
        if stage.publish != publish:
            what = "scores pairs (/v1/score, /v1/rerank)" if stage.publish == "score" else "publishes rows (/pooling)"
            raise ServeError(f"the model {served.name!r} {what}", param="model")
        worker = served.worker
        assert isinstance(worker, FiniteWorker), "the sequence role's models run on a FiniteWorker"
        return served, worker

    async def score(self, request: HttpRequest) -> Response:
        fields = await read_fields(request)
        served, worker = self._model(fields, "score")
        queries = _texts(fields.body.get("text_1"), "text_1")
        documents = _texts(fields.body.get("text_2"), "text_2")
        if len(queries) > 1 and len(queries) != len(documents):
            raise ServeError(
                f"'text_1' has {len(queries)} texts and 'text_2' {len(documents)}: pair them 1:1, 1:N or N:N",
                param="text_2",
            )
        plural = isinstance(fields.body.get("text_2"), list)
        items = [
            PairInput(text=queries[0 if len(queries) == 1 else i], pair=d, param=f"text_2[{i}]" if plural else "text_2")
            for i, d in enumerate(documents)
        ]
        results, prepared = await finite_results(request, worker, items)
        data = [{"index": i, "object": "score", "score": _value(event.value)} for i, event in enumerate(results)]
        return JSONResponse(_listed("score", served.name, data, sum(r.units for r in prepared)))

    async def rerank(self, request: HttpRequest) -> Response:
        fields = await read_fields(request)
        served, worker = self._model(fields, "score")
        query = fields.get("query", (str,))
        if query is None:
            raise ServeError("'query' must be a string", param="query")
        raw = fields.get("documents", (list,))
        if not raw:
            raise ServeError("'documents' must be a non-empty array of strings", param="documents")
        documents = _texts(raw, "documents")
        top_n = fields.integer("top_n", 0, 0) or len(documents)
        keep = fields.get("return_documents", (bool,), True)
        items = [PairInput(text=query, pair=d, param=f"documents[{i}]") for i, d in enumerate(documents)]
        results, prepared = await finite_results(request, worker, items)
        scores = [_value(event.value) for event in results]
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:top_n]
        ranked: list[dict[str, Any]] = []
        for i in order:
            ranked.append({"index": i, "relevance_score": scores[i]})
            if keep:
                ranked[-1]["document"] = {"text": documents[i]}
        return JSONResponse({"id": f"rerank-{uuid.uuid4().hex}", "model": served.name,
                             "usage": {"total_tokens": sum(r.units for r in prepared)}, "results": ranked})  # fmt: skip

    async def pooling(self, request: HttpRequest) -> Response:
        fields = await read_fields(request)
        served, worker = self._model(fields, "rows")
        items = embedding_inputs(fields.body.get("input"), tokenizer_flags(fields, flags.ADD_SPECIAL_TOKENS))
        results, prepared = await finite_results(request, worker, items)
        data = []
        for index, (event, finite) in enumerate(zip(results, prepared, strict=True)):
            rows = np.asarray(event.value, dtype=np.float32).reshape(finite.units, -1)
            data.append({"index": index, "object": "pooling", "data": rows.tolist()})
        return JSONResponse(_listed("pool", served.name, data, sum(r.units for r in prepared)))


def _listed(kind: str, model: str, data: list[dict[str, Any]], tokens: int) -> dict[str, Any]:
    """vLLM's list reply: `data` under a fresh id (`score-...`, `pool-...`) with the request's usage."""
    usage = {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}
    return {"id": f"{kind}-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": model,
            "data": data, "usage": usage}  # fmt: skip


def _texts(raw: object, name: str) -> list[str]:
    """A field that is a string or a non-empty array of strings, as a list (a 400 naming the field otherwise)."""
    if isinstance(raw, str):
        return [raw]
    if not isinstance(raw, list) or not raw:
        raise ServeError(f"'{name}' must be a string or a non-empty array of strings", param=name)
    for i, text in enumerate(raw):
        if not isinstance(text, str):
            raise ServeError(f"'{name}[{i}]' must be a string", param=f"{name}[{i}]")
    return list(raw)


def _value(result: object) -> float:
    """A score request's result: its row's one value."""
    return float(np.asarray(result, dtype=np.float32).reshape(-1)[0])
