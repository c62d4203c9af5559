"""The HTTP face of `loam serve`: OpenAI's API on Starlette, with health, Prometheus metrics and registration.

Routes every server has (OpenAI's where one exists, with its request fields, response objects and error
shape):

- `GET /v1/models`, `GET /v1/models/{model}`
- `GET /health`, `GET /metrics` (Prometheus text).
- `POST /v1/packages` `{"path": DIR}` and `DELETE /v1/packages/{name}`: register and unregister a
  package by a server-local folder under a `--package-root`; `"active": false` registers it inactive
  (`loam.serve.residency`).  The same route takes a multipart/form-data upload of the package's files
  (`loam.serve.upload`).

and each role's own (`loam.serve.roles.ROLES`' `routes`): the text role's completions, chat completions
and sessions (`loam.serve.text_http`), the embedding role's embeddings (`loam.serve.embedding_http`), the
sequence role's score, rerank and pooling (`loam.serve.sequence_http`), the activity role's audio activity
(`loam.serve.activity_http`); and the live audio WebSocket `/v1/audio/stream` (`loam.serve.live_http`) for the
roles whose requests continue over PCM input.

Every refusal is a 4xx JSON error `{"error": {"message", "type", "param", "code"}}` naming the field;
anything else is a 500 with a one-line message, never a traceback (`loam.serve.web.guarded`).  Work runs
on the models' worker threads; the event loop only parses, waits and writes.  A client that disconnects
cancels its request.
"""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from loam.serve import live_http
from loam.serve.roles import ROLES
from loam.serve.scheduler import ServeError
from loam.serve.server import ServedModel, Server
from loam.serve.upload_http import is_multipart, read_upload
from loam.serve.web import error_response, guarded, read_fields


class App:
    """The Starlette application over a `Server`: the routes every server has, and every role's."""

    def __init__(self, server: Server) -> None:
        self.server = server
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/v1/models", self.list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", self.get_model, methods=["GET"]),
            Route("/v1/packages", self.register, methods=["POST"]),
            Route("/v1/packages/{name:path}", self.unregister, methods=["DELETE"]),
            *(route for role in ROLES.values() for route in role.routes(server, role.name)),
        ]
        # The live audio WebSocket serves every role that says how (`Role.live`); a WebSocket answers its own errors.
        lives = {role.name: role.live for role in ROLES.values() if role.live is not None}
        sockets: list[WebSocketRoute] = live_http.routes(server, lives)
        self.asgi = Starlette(
            routes=[*(Route(r.path, guarded(r.endpoint), methods=r.methods) for r in routes), *sockets],
            exception_handlers={404: self._not_found, 405: self._not_allowed},
        )

    async def _not_found(self, request: HttpRequest, exc: Exception) -> Response:
        return error_response(f"no route {request.method} {request.url.path}", 404)

    async def _not_allowed(self, request: HttpRequest, exc: Exception) -> Response:
        return error_response(f"{request.method} is not allowed on {request.url.path}", 405)

    async def health(self, request: HttpRequest) -> Response:
        return JSONResponse({"status": "ok", "models": sorted(self.server.models)})

    async def metrics(self, request: HttpRequest) -> Response:
        return Response(generate_latest(self.server.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def _model_object(self, served: ServedModel) -> dict[str, Any]:
        spec = served.package.spec
        return {
            "id": served.name, "object": "model", "created": served.created, "owned_by": "loam",
            "role": served.role, "context_tokens": spec.capacities.context_tokens, "active": served.active,
        }  # fmt: skip

    async def list_models(self, request: HttpRequest) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_object(m) for m in self.server.models.values()]})

    async def get_model(self, request: HttpRequest) -> Response:
        return JSONResponse(self._model_object(self.server.model(request.path_params["model"])))

    async def register(self, request: HttpRequest) -> Response:
        if is_multipart(request):
            upload = await read_upload(request)
            served = await asyncio.to_thread(self.server.register_upload, upload)
            return JSONResponse(self._model_object(served), status_code=201)
        fields = await read_fields(request)
        path = fields.get("path", (str,))
        if not path:
            raise ServeError("'path' must name a package folder on the server", param="path")
        active = bool(fields.get("active", (bool,), True))
        served = await asyncio.to_thread(self.server.register, path, over_http=True, active=active)
        return JSONResponse(self._model_object(served), status_code=201)

    async def unregister(self, request: HttpRequest) -> Response:
        name = request.path_params["name"]
        await asyncio.to_thread(self.server.unregister, name)
        return JSONResponse({"id": name, "object": "model", "deleted": True})


def make_app(server: Server) -> Starlette:
    """The ASGI application serving `server`'s models."""
    return App(server).asgi


__all__ = ["App", "make_app"]
