"""The embedding role's HTTP route: OpenAI's `POST /v1/embeddings`, as float lists or base64 (`encoding_format`).

OpenAI's `input` is a string, an array of strings, an array of token ids, or an array of arrays of them;
each becomes one finite request (`loam.serve.finite.EmbeddingInput`), framed by the model's control, and
the reply lists their vectors in input order.  Loam's `tokenizer_flags` (and `add_special_tokens`) say how
text is encoded.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import numpy as np
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loam.serve import flags
from loam.serve.finite import EmbeddingInput, FiniteWorker
from loam.serve.scheduler import ServeError
from loam.serve.web import finite_results, read_fields, tokenizer_flags

if TYPE_CHECKING:
    from loam.serve.server import Server


def routes(server: Server, role: str) -> list[Route]:
    """The routes serving the models of `role` (the embedding role's entry in `loam.serve.roles.ROLES`)."""
    return EmbeddingRoutes(server, role).routes()


class EmbeddingRoutes:
    """The embedding role's endpoint over `server`'s models of `role`."""

    def __init__(self, server: Server, role: str) -> None:
        self.server = server
        self.role = role

    def routes(self) -> list[Route]:
        return [Route("/v1/embeddings", self.embeddings, methods=["POST"])]

    async def embeddings(self, request: HttpRequest) -> Response:
        fields = await read_fields(request)
        served = self.server.model(fields.body.get("model"), self.role)
        worker = served.worker
        assert isinstance(worker, FiniteWorker), "the embedding role's models run on a FiniteWorker"
        fields.unsupported()
        encoding = fields.get("encoding_format", (str,), "float")
        if encoding not in ("float", "base64"):
            raise ServeError(f"'encoding_format' must be float or base64, got {encoding!r}", param="encoding_format")
        flags_ = tokenizer_flags(fields, flags.ADD_SPECIAL_TOKENS)
        items = embedding_inputs(fields.body.get("input"), flags_)
        results, prepared = await finite_results(request, worker, items)
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


def embedding_inputs(raw: object, flags_: int) -> list[EmbeddingInput]:
    """OpenAI's `input`: a string, an array of strings, an array of token ids, or an array of arrays of them."""

    def ids(value: list[object], where: str) -> tuple[int, ...]:
        out: list[int] = []
        for t in value:
            if not isinstance(t, int) or isinstance(t, bool) or t < 0:
                raise ServeError(f"'{where}' must hold non-negative integer token ids", param=where)
            out.append(t)
        return tuple(out)

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
