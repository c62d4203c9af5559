"""`python -m bench.images`: `loam serve`'s images per minute and denoising steps per second, against diffusers.

What and why: the image role runs a diffusion pipeline stage by stage, requests of one size sharing each UNet
call; this measures what a client gets from it on the tiny text-to-image pipeline of tests/models/vision (the
package tests/serve/packages/tiny_diffusion), at 1 and at 4 concurrent clients, each sending `--requests`
images in turn (`--size`, `--steps` Euler steps, guidance 7.5, so two UNet rows per image), over HTTP on
127.0.0.1 (`response_format` `loam_f32`, so no PNG encoding is timed).  Reported: images per minute over the
run's wall time, and denoising steps per second (images x steps / wall time).

The peer is diffusers' own `StableDiffusionPipeline` on the same models and scheduler (built as
scripts/record_image_oracle.py builds it), in torch with the same thread count, run in /work/vision-venv's
Python (`--peer-python`; where it cannot import diffusers the row says the peer is missing).  At 1 client it
makes the images one by one; at 4, it makes them 4 prompts to a call (its own way of serving 4 at once).

Writes bench/RESULTS-images.md (`--output FILE` elsewhere; `--quick` writes nothing).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.publish import publish

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS-images.md"
PACKAGE = ROOT / "tests" / "serve" / "packages" / "tiny_diffusion"
MODEL = "tiny-diffusion"
PEER = """
import json, sys, time
sys.path.insert(0, {scripts!r})
import torch
torch.set_num_threads({threads})
from record_image_oracle import pipeline
pipe = pipeline("euler")
pipe.set_progress_bar_config(disable=True)
out = {{}}
for clients in {clients!r}:
    def run(n):
        with torch.no_grad():
            pipe(prompt=[f"a fox {{i}}" for i in range(n)], height={height}, width={width},
                 num_inference_steps={steps}, guidance_scale=7.5, output_type="np")
    run(clients)  # warm
    start = time.perf_counter()
    for _ in range({requests}):
        run(clients)
    out[clients] = time.perf_counter() - start
print(json.dumps(out))
"""


def loam_run(client: httpx.Client, clients: int, args: argparse.Namespace) -> float:
    """Seconds for `clients` threads to make `args.requests` images each, in turn."""
    body = {"model": MODEL, "size": f"{args.size}x{args.size}", "steps": args.steps, "guidance_scale": 7.5,
            "scheduler": "euler", "response_format": "loam_f32"}  # fmt: skip
    failures: list[str] = []

    def one(index: int) -> None:
        for r in range(args.requests):
            reply = client.post("/v1/images/generations", json={**body, "prompt": f"a fox {index}", "seed": r})
            if reply.status_code != 200:
                failures.append(reply.text)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise SystemExit(f"a request failed: {failures[0]}")
    return time.perf_counter() - start


def peer_run(args: argparse.Namespace, counts: list[int]) -> dict[int, float] | str:
    """diffusers' seconds for each client count, or why the peer is missing."""
    code = PEER.format(
        scripts=str(ROOT / "scripts"), threads=args.threads, clients=counts, height=args.size, width=args.size,
        steps=args.steps, requests=args.requests,
    )  # fmt: skip
    try:
        done = subprocess.run(
            [args.peer_python, "-c", code], capture_output=True, text=True, timeout=1800, check=False, cwd=ROOT
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"missing ({err})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"missing ({last[:120]})"
    return {int(k): float(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.images", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8, help="images each client makes in turn (default 8)")
    parser.add_argument("--size", type=int, default=32, help="image height and width in pixels (default 32)")
    parser.add_argument("--steps", type=int, default=4, help="Euler steps per image (default 4)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for both (default: cores)")
    parser.add_argument("--peer-python", default="/work/vision-venv/bin/python", help="a Python with diffusers")
    parser.add_argument("--output", type=Path, default=None, help="write the report here")
    parser.add_argument("--quick", action="store_true", help="2 requests per client; write nothing")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests = 2
    counts = [1, 4]
    from loam.serve.cli import Listener
    from loam.serve.server import Server

    os.environ.setdefault("LOAM_CACHE_DIR", tempfile.mkdtemp(prefix="loam-bench-images-"))
    from threadpoolctl import threadpool_limits

    loam: dict[int, float] = {}
    with threadpool_limits(args.threads):
        server = Server()
        try:
            server.register(PACKAGE)
            with Listener(server) as listener, httpx.Client(base_url=listener.url, timeout=600) as client:
                loam_run(client, 1, argparse.Namespace(**{**vars(args), "requests": 1}))  # warm
                for clients in counts:
                    loam[clients] = loam_run(client, clients, args)
        finally:
            server.close()
    peer = peer_run(args, counts)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m bench.images" + ("" if argv is None else " " + " ".join(argv))
    lines = [
        "# Images: loam serve against diffusers",
        "",
        f"Written by `{command}` on {now}; {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {args.threads} threads for each.  The tiny text-to-image pipeline of "
        f"tests/models/vision at {args.size}x{args.size}, {args.steps} Euler steps, guidance 7.5; each client makes "
        f"{args.requests} images in turn.  Loam over HTTP on 127.0.0.1 (f32 images, no PNG encoding); diffusers "
        "0.31's StableDiffusionPipeline in torch, 1 prompt a call at 1 client and 4 prompts a call at 4.",
        "",
        "| clients | Loam images/min | Loam steps/s | diffusers images/min | diffusers steps/s | Loam / diffusers |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for clients in counts:
        images = clients * args.requests
        rate = images / loam[clients] * 60
        steps = images * args.steps / loam[clients]
        if isinstance(peer, str):
            lines.append(f"| {clients} | {rate:.0f} | {steps:.1f} | {peer} | | |")
            continue
        peer_rate = images / peer[clients] * 60
        peer_steps = images * args.steps / peer[clients]
        lines.append(
            f"| {clients} | {rate:.0f} | {steps:.1f} | {peer_rate:.0f} | {peer_steps:.1f} | {rate / peer_rate:.2f}x |"
        )
    publish("\n".join(lines) + "\n", args, RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
