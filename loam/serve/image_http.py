"""The image role's HTTP route: OpenAI's `POST /v1/images/generations`.

OpenAI's fields: `model`, `prompt`, `n` (n images, the i-th from seed `seed + i`), `size` ("WxH"),
`response_format` (`b64_json`; `url` is refused, as the server stores nothing), `output_format` (`png`,
`jpeg` or `webp`, encoded by Pillow; `output_compression` 0-100 for the last two), `stream` with
`partial_images` (0-3), and `user` (ignored).  Loam's own: `seed`, `steps`, `guidance_scale`,
`negative_prompt`, `scheduler` (`euler`, `ddim`), `adapters` (`[{"id", "scale"}]`, the package's LoRA
adapters for this request's images only), and the `response_format` `loam_f32`: each image as the
model made it, float32 RGB channels first in [-1, 1], base64 of its little-endian bytes (`loam_f32`,
with its `shape`), before any encoding rounds it.

The reply is OpenAI's ImagesResponse (`created`, `data[].b64_json`, `output_format`, `size`, `usage`).
With `stream`, Server-Sent Events instead: `image_generation.partial_image` as the steps complete (for
the partial images asked for) and `image_generation.completed` for each image, then `[DONE]`.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from loam.serve.image import ImageJob, ImageParams, ImagePartial, ImageResult
from loam.serve.scheduler import Event, ServeError
from loam.serve.stream import StreamRequest, StreamWorker
from loam.serve.web import Fields, error_body, event_sink, read_fields, watch_disconnect

if TYPE_CHECKING:
    from loam.serve.server import Server

FORMATS = ("png", "jpeg", "webp")
RESPONSE_FORMATS = ("b64_json", "loam_f32")
MAX_N = 10
_FIELDS = (
    "model", "prompt", "n", "size", "response_format", "output_format", "output_compression", "stream",
    "partial_images", "user", "seed", "steps", "guidance_scale", "negative_prompt", "scheduler", "adapters",
    "quality", "background", "moderation", "style",
)  # fmt: skip
_NEUTRAL: dict[str, tuple[object, ...]] = {
    "quality": ("auto", "standard"),
    "background": ("auto", "opaque"),
    "moderation": ("auto", "low"),
    "style": ("vivid", "natural"),
}
"""OpenAI fields Loam has no use for: accepted at these values only."""
_SIZE = re.compile(r"(\d{1,5})x(\d{1,5})")


def routes(server: Server, role: str) -> list[Route]:
    """The routes serving the models of `role` (the image role's entry in `loam.serve.roles.ROLES`)."""
    return ImageRoutes(server, role).routes()


def rgb_bytes(rgb: np.ndarray) -> np.ndarray:
    """F32 CHW RGB in [-1, 1] as 8-bit HWC pixels, rounded as diffusers rounds them."""
    unit = np.clip(rgb / 2 + 0.5, 0.0, 1.0)
    return np.ascontiguousarray((unit.transpose(1, 2, 0) * 255).round().astype(np.uint8))


def encode_image(rgb: np.ndarray, output_format: str, compression: int | None) -> bytes:
    """The image encoded as `output_format` by Pillow (`compression`: 0-100, jpeg and webp)."""
    from PIL import Image

    out = io.BytesIO()
    options: dict[str, Any] = {}
    if compression is not None and output_format in ("jpeg", "webp"):
        options["quality"] = 100 - compression
    Image.fromarray(rgb_bytes(rgb), "RGB").save(out, format=output_format.upper(), **options)
    return out.getvalue()


class ImageRoutes:
    """The image role's endpoint over `server`'s models of `role`."""

    def __init__(self, server: Server, role: str) -> None:
        self.server = server
        self.role = role

    def routes(self) -> list[Route]:
        return [Route("/v1/images/generations", self.generations, methods=["POST"])]

    async def generations(self, http: HttpRequest) -> Response:
        fields = await read_fields(http)
        served = self.server.model(fields.body.get("model"), self.role)
        worker = served.worker
        assert isinstance(worker, StreamWorker), "the image role's models run on a StreamWorker"
        for name in fields.body:
            if name not in _FIELDS:
                raise ServeError(f"'{name}' is not a field of an image request", param=name)
        for name, neutral in _NEUTRAL.items():
            if fields.body.get(name) not in (None, *neutral):
                raise ServeError(f"'{name}' is not supported by this server", param=name)
        reply = _Reply.read(fields)
        params = _params(fields)
        n = fields.integer("n", 1, 1) or 1
        if n > MAX_N:
            raise ServeError(f"'n' must be at most {MAX_N}, got {n}", param="n")
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
        requests: list[StreamRequest] = []
        try:
            for i in range(n):
                one = ImageParams(**{**params.__dict__, "seed": params.seed + i})
                requests.append(worker.open(one, event_sink(loop, events, i), param="prompt"))
        except BaseException:
            for r in requests:
                worker.cancel(r)
            raise
        job = requests[0].state
        assert isinstance(job, ImageJob)
        reply.size = f"{job.width}x{job.height}"
        reply.tokens = sum(r.state.prompt_tokens for r in requests if isinstance(r.state, ImageJob))
        if reply.stream:
            body = self._stream(http, worker, requests, events, reply)
            return StreamingResponse(body, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return await self._complete(http, worker, requests, events, reply)

    async def _complete(
        self, http: HttpRequest, worker: StreamWorker, requests: list[StreamRequest],
        events: asyncio.Queue[tuple[int, Event]], reply: _Reply,
    ) -> Response:  # fmt: skip
        images: dict[int, np.ndarray] = {}
        done: set[int] = set()
        watcher = asyncio.create_task(watch_disconnect(http, worker, requests))
        try:
            while len(done) < len(requests):
                index, event = await events.get()
                if event.kind == "event":
                    worker.consumed(requests[index], event.size)
                    if isinstance(event.value, ImageResult):
                        images[index] = event.value.rgb
                elif event.kind == "error":
                    for r in requests:
                        worker.cancel(r)
                    status = event.status if event.status != 499 else 400
                    return JSONResponse(error_body(event.text, status, event.param), status_code=status)
                elif event.kind == "done":
                    done.add(index)
        finally:
            watcher.cancel()
        data = [await asyncio.to_thread(reply.datum, images[i]) for i in range(len(requests))]
        return JSONResponse(reply.body(data))

    async def _stream(
        self, http: HttpRequest, worker: StreamWorker, requests: list[StreamRequest],
        events: asyncio.Queue[tuple[int, Event]], reply: _Reply,
    ) -> AsyncIterator[str]:  # fmt: skip
        done: set[int] = set()
        watcher = asyncio.create_task(watch_disconnect(http, worker, requests))
        try:
            while len(done) < len(requests):
                index, event = await events.get()
                if event.kind == "event":
                    worker.consumed(requests[index], event.size)
                    value = event.value
                    if isinstance(value, ImagePartial):
                        datum = await asyncio.to_thread(reply.datum, value.rgb)
                        yield _sse("image_generation.partial_image",
                                   {**reply.event(datum), "partial_image_index": value.index})  # fmt: skip
                    elif isinstance(value, ImageResult):
                        datum = await asyncio.to_thread(reply.datum, value.rgb)
                        yield _sse("image_generation.completed", {**reply.event(datum), "usage": reply.usage()})
                elif event.kind == "error":
                    for r in requests:
                        worker.cancel(r)
                    yield _sse("error", error_body(event.text, event.status, event.param))
                    return
                elif event.kind == "done":
                    done.add(index)
            yield "data: [DONE]\n\n"
        finally:
            watcher.cancel()
            for r in requests:
                if not r.finished:
                    worker.cancel(r)


def _sse(kind: str, payload: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload} if kind != 'error' else payload)}\n\n"


class _Reply:
    """How the images go back: their format, compression, size and the reply's shape."""

    def __init__(self, response_format: str, output_format: str, compression: int | None, stream: bool) -> None:
        self.response_format = response_format
        self.output_format = output_format
        self.compression = compression
        self.stream = stream
        self.size = ""
        self.tokens = 0
        self.created = int(time.time())

    @staticmethod
    def read(fields: Fields) -> _Reply:
        response_format = fields.get("response_format", (str,), "b64_json")
        if response_format == "url":
            raise ServeError("'response_format' url is not supported: this server stores no images; use b64_json",
                             param="response_format")  # fmt: skip
        if response_format not in RESPONSE_FORMATS:
            raise ServeError(f"'response_format' must be one of {', '.join(RESPONSE_FORMATS)}, got {response_format!r}",
                             param="response_format")  # fmt: skip
        output_format = fields.get("output_format", (str,), "png")
        if output_format not in FORMATS:
            raise ServeError(f"'output_format' must be one of {', '.join(FORMATS)}, got {output_format!r}",
                             param="output_format")  # fmt: skip
        compression = fields.integer("output_compression", None, 0)
        if compression is not None and (compression > 100 or output_format == "png"):
            raise ServeError("'output_compression' is 0-100, for jpeg and webp", param="output_compression")
        return _Reply(response_format, output_format, compression, bool(fields.get("stream", (bool,), False)))

    def datum(self, rgb: np.ndarray) -> dict[str, Any]:
        if self.response_format == "loam_f32":
            raw = np.ascontiguousarray(rgb, dtype="<f4").tobytes()
            return {"loam_f32": base64.b64encode(raw).decode(), "shape": list(rgb.shape)}
        return {"b64_json": base64.b64encode(encode_image(rgb, self.output_format, self.compression)).decode()}

    def usage(self) -> dict[str, Any]:
        return {"input_tokens": self.tokens, "output_tokens": 0, "total_tokens": self.tokens,
                "input_tokens_details": {"text_tokens": self.tokens, "image_tokens": 0}}  # fmt: skip

    def body(self, data: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {"created": self.created, "data": list(data), "output_format": self.output_format, "size": self.size,
                "usage": self.usage()}  # fmt: skip

    def event(self, datum: dict[str, Any]) -> dict[str, Any]:
        return {**datum, "created_at": self.created, "size": self.size, "quality": "auto", "background": "opaque",
                "output_format": self.output_format}  # fmt: skip


def _params(fields: Fields) -> ImageParams:
    """The request's image parameters (each wrong one a 400 naming its field)."""
    prompt = fields.get("prompt", (str,))
    if prompt is None:
        raise ServeError("'prompt' is required", param="prompt")
    size = fields.get("size", (str,), "auto")
    width = height = None
    if size != "auto":
        found = _SIZE.fullmatch(size)
        if found is None:
            raise ServeError(f"'size' must be WIDTHxHEIGHT (e.g. 32x32) or auto, got {size!r}", param="size")
        width, height = int(found[1]), int(found[2])
    seed = fields.integer("seed", None, 0)
    if seed is None:
        seed = secrets.randbelow(2**31)
    partial = fields.integer("partial_images", 0, 0) or 0
    if partial > 3:
        raise ServeError(f"'partial_images' must be 0-3, got {partial}", param="partial_images")
    if partial and not fields.get("stream", (bool,), False):
        raise ServeError("'partial_images' needs 'stream': true", param="partial_images")
    guidance = fields.get("guidance_scale", (int, float), None, "a number")
    return ImageParams(
        prompt=prompt,
        negative_prompt=fields.get("negative_prompt", (str,), ""),
        width=width,
        height=height,
        seed=seed,
        steps=fields.integer("steps", None, 1),
        guidance_scale=None if guidance is None else float(guidance),
        scheduler=fields.get("scheduler", (str,)),
        adapters=_adapters(fields.get("adapters", (list,), [])),
        partial_images=partial,
    )


def _adapters(raw: list[Any]) -> tuple[tuple[str, float], ...]:
    out = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or set(item) - {"id", "scale"}:
            raise ServeError(f'adapters[{index}] must be {{"id": NAME, "scale": NUMBER}}', param="adapters")
        scale = item.get("scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise ServeError(f"adapters[{index}].scale must be a number", param="adapters")
        out.append((item["id"], float(scale)))
    return tuple(out)
