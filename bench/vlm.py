"""`python -m bench.vlm`: `loam serve`'s time to first token for a chat with an image, with and without its image
prefix retained.

What and why: an image in a chat costs a projector call (the vision tower and its projector) and the prefill of the
image's rows before the first token.  A chat whose start (the same image bytes at the same place) a retained
prefix holds skips both: its image never reaches the projector and its blocks are read from the pool.  The bench
serves the tiny LLaVA of tests/models/tiny_vlm (`tests/serve/packages/tiny_vlm`) from one in-process `Server` on
127.0.0.1 and streams greedy chats with the `openai`-style HTTP API, one at a time:

- miss: every chat holds an image no earlier chat held (seeded noise, `--size` pixels square), so each one is
  decoded, preprocessed, projected and read;
- hit: the same chat as the request before it, so its prefix up to the last full block (the image included) is
  retained.

Reported: the median time to the first streamed token over `--requests` chats each, their ratio, and the projector
calls each side made (the hit side must make none).  A tiny random model measures the serving path, not a real
vision tower's cost: with a real one the projector's share, and so the ratio, is larger.

Writes bench/RESULTS-vlm.md (`--output FILE` elsewhere; `--quick` writes nothing).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import io
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

from bench.publish import publish

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS-vlm.md"
PACKAGE = ROOT / "tests" / "serve" / "packages" / "tiny_vlm"
NAME = "tiny-vlm"


def _png(rng: np.random.Generator, size: int) -> str:
    """A data: URL of a fresh noise image."""
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8), "RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _first_token(http: httpx.Client, url: str, tokens: int) -> float:
    """Seconds from sending a streamed chat with the image at `url` to its first token's chunk."""
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is in the picture?"}]
    body = {"model": NAME, "messages": [{"role": "user", "content": content}], "max_tokens": tokens,
            "temperature": 0, "stream": True}  # fmt: skip
    start = time.perf_counter()
    first = None
    with http.stream("POST", "/v1/chat/completions", json=body) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if first is None and line.startswith("data: {"):
                choices = json.loads(line.removeprefix("data: ")).get("choices") or [{}]
                if choices[0].get("delta", {}).get("content"):
                    first = time.perf_counter() - start
    if first is None:
        raise SystemExit("bench.vlm: the chat streamed no token")
    return first


def _counter(http: httpx.Client, name: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(f'{name}{{model="{NAME}"}}'):
            return float(line.split()[-1])
    return 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.vlm", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40, help="chats per side (default 40)")
    parser.add_argument("--size", type=int, default=224, help="the images' width and height in pixels (default 224)")
    parser.add_argument("--tokens", type=int, default=4, help="new tokens per chat (default 4)")
    parser.add_argument("--quick", action="store_true", help="5 chats a side, nothing written")
    parser.add_argument("--output", type=Path, help=f"where to write the table (default {RESULTS})")
    args = parser.parse_args(argv)
    requests = 5 if args.quick else args.requests
    from loam.serve.cli import Listener
    from loam.serve.server import Server

    rng = np.random.default_rng(0)
    server = Server()
    try:
        server.register(PACKAGE)
        with Listener(server) as listener, httpx.Client(base_url=listener.url, timeout=600) as http:
            _first_token(http, _png(rng, args.size), args.tokens)  # one-time costs unmeasured
            calls = _counter(http, "loam_image_projector_calls_total")
            miss = [_first_token(http, _png(rng, args.size), args.tokens) for _ in range(requests)]
            miss_calls = _counter(http, "loam_image_projector_calls_total") - calls
            same = _png(rng, args.size)
            _first_token(http, same, args.tokens)  # retained from here on
            calls = _counter(http, "loam_image_projector_calls_total")
            hit = [_first_token(http, same, args.tokens) for _ in range(requests)]
            hit_calls = _counter(http, "loam_image_projector_calls_total") - calls
    finally:
        server.close()
    cold, warm = statistics.median(miss), statistics.median(hit)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m bench.vlm" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    lines = [
        "# `loam serve`: time to first token for a chat with an image, with and without a retained image prefix",
        "",
        f"Written by `{command}` on {now}; {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}.  The tiny LLaVA of tests/models/tiny_vlm (16 rows an image), one streamed "
        f"greedy chat at a time, {args.size} x {args.size} PNG images, {requests} chats a side.",
        "",
        "| image prefix | median time to first token | projector calls |",
        "|---|---|---|",
        f"| not retained (a new image each chat) | {cold * 1e3:.1f} ms | {miss_calls:.0f} |",
        f"| retained (the chat before it) | {warm * 1e3:.1f} ms | {hit_calls:.0f} |",
        "",
        f"Retained: {cold / warm:.2f}x faster to the first token.",
        "",
    ]
    publish("\n".join(lines), args, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
