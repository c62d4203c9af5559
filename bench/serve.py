"""`python -m bench.serve`: `loam serve` under 1, 4 and 16 concurrent streaming clients, against onnxruntime.

What and why: issue 16 asks what a cohort scheduler earns on this machine.  A real `loam serve` (uvicorn on
127.0.0.1, in a child process of its own at one BLAS thread) serves SmolLM2-135M-Instruct from its GGUF
file; N client threads each stream one completion of a fixed prompt length and a fixed number of new
tokens (`ignore_eos`, greedy), all started at once.  Per run it reports, as vLLM's `bench serve` does:
output tokens/s over the whole run, mean time to first token (TTFT), mean time per output token after
the first (TPOT), and the aggregate decode rate N / TPOT.

The peer, measured in the same run: onnxruntime (every graph optimisation, one thread) running the
widened float32 `decoder_with_past` graph one stream at a time, i.e. what a server without batching
gets from the fastest engine here: its decode tokens/s at a past of 64 (`bench.smollm2`'s child).
The ratio column is Loam's aggregate decode rate over that.

Writes bench/RESULTS-serve.md (`--output FILE` elsewhere; `--quick` writes nothing).  `--package DIR`
serves another text package (then no peer is measured: the peer runs SmolLM2's graph).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS-serve.md"
PROMPT_TOKENS = 32


def _package(folder: Path, packed: bool) -> Path:
    from bench.smollm2 import _gguf

    table = {
        "name": "smollm2",
        "role": "text",
        "sources": {"gguf": str(_gguf())},
        "stages": {"decoder": {"graph": str(ROOT / "tests" / "models" / "smollm2" / "decoder_positions.onnxtext"),
                               "source": "gguf", "options": {"architecture": "llama"}, "packed": packed}},
        "tokenizer": {"source": "gguf"},
        "capacities": {"batch_units": 512, "resident_requests": 16, "context_tokens": 1024, "block_tokens": 16},
    }  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
    return folder


def _server(package: Path, cache: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "LOAM_CACHE_DIR": str(cache)}
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    process = subprocess.Popen(
        [sys.executable, "-m", "loam.tools.loam_main", "serve", str(package), "--port", "0"],
        stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert process.stderr is not None
    for line in process.stderr:
        if "listening on " in line:
            return process, line.split("listening on ", 1)[1].split()[0]
    raise SystemExit(f"bench.serve: the server did not start (exit {process.wait()})")


def _run(url: str, model: str, clients: int, tokens: int) -> dict[str, float]:
    import httpx

    ttft: list[float] = []
    tpot: list[float] = []
    counts: list[int] = []
    failures: list[str] = []
    barrier = threading.Barrier(clients)

    def client(i: int) -> None:
        prompt = [(i * 7919 + k * 104729) % 900 + 100 for k in range(PROMPT_TOKENS)]  # ids any vocabulary has
        body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
        barrier.wait()
        start = time.perf_counter()
        first = last = None
        used = 0
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=1800) as reply:
            if reply.status_code != 200:
                failures.append(f"client {i}: HTTP {reply.status_code}: {reply.read().decode()}")
                return
            for line in reply.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    failures.append(chunk["error"]["message"])
                    return
                if chunk.get("usage"):
                    used = chunk["usage"]["completion_tokens"]
                elif chunk["choices"]:
                    now = time.perf_counter()
                    if chunk["choices"][0]["finish_reason"] is not None:
                        last = now  # the last token's chunk (its text may be held in earlier ones)
                    elif chunk["choices"][0]["text"] and first is None:
                        first = now
        if first is None or last is None or used != tokens:
            failures.append(f"client {i}: {used} tokens")
            return
        ttft.append(first - start)
        tpot.append((last - first) / max(1, tokens - 1))
        counts.append(used)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    duration = time.perf_counter() - start
    if failures:
        raise SystemExit(f"bench.serve: {len(failures)} requests failed: {failures[0]}")
    mean_tpot = statistics.mean(tpot)
    return {
        "clients": clients,
        "output_tps": sum(counts) / duration,
        "ttft": statistics.mean(ttft),
        "tpot": mean_tpot,
        "decode_tps": clients / mean_tpot,
        "duration": duration,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,4,16", help="concurrent clients per run (default 1,4,16)")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per request (default 32)")
    parser.add_argument("--packed", action="store_true", help="also serve the GGUF's 4-bit blocks packed")
    parser.add_argument("--package", type=Path, help="serve this text package instead of SmolLM2 (no peer)")
    parser.add_argument("--quick", action="store_true", help="1 and 2 clients, 4 tokens, nothing written")
    parser.add_argument("--output", type=Path, help=f"where to write the table (default {RESULTS})")
    args = parser.parse_args(argv)
    clients = [1, 2] if args.quick else [int(c) for c in args.clients.split(",")]
    tokens = 4 if args.quick else args.tokens
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="loam-bench-serve-") as scratch:
        cache = Path(scratch) / "cache"
        variants = [("given package", args.package)] if args.package else [
            ("widened at load", _package(Path(scratch) / "widened", packed=False)),
            *([("packed Q4_1/Q8_0", _package(Path(scratch) / "packed", packed=True))] if args.packed else []),
        ]  # fmt: skip
        for label, folder in variants:
            name = json.loads((folder / "model.json").read_text(encoding="utf-8")).get("name", folder.name)
            process, url = _server(folder, cache)
            try:
                _run(url, name, 1, 2)  # warm: the first call of a binding allocates its buffers
                for count in clients:
                    print(f"bench.serve: {label}, {count} clients", file=sys.stderr, flush=True)
                    rows.append((label, _run(url, name, count, tokens)))
            finally:
                process.terminate()
                process.wait(60)
    peer = None
    if not args.package and not args.quick:
        from bench.smollm2 import GRAPHS, _child, _gguf

        common = {"gguf": str(_gguf()), "prompt": 64, "past": 64, "repeats": 5, "root": str(ROOT)}
        peer = 1 / _child({**common, "side": "onnxruntime", "graphs": str(GRAPHS)})["decode_s"]
    lines = [
        "# `loam serve` under concurrent streaming clients",
        "",
        f"Written by `python -m bench.serve` on {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}: "
        f"each client streams one completion of {PROMPT_TOKENS} prompt tokens and {tokens} new tokens (greedy, "
        "ignore_eos), all clients at once; the server is one process at one BLAS thread.",
        "",
        "| weights | clients | output tokens/s | mean TTFT s | mean TPOT s | aggregate decode tokens/s "
        "| x onnxruntime |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, row in rows:
        ratio = f"{row['decode_tps'] / peer:.2f}" if peer else "-"
        lines.append(
            f"| {label} | {row['clients']:.0f} | {row['output_tps']:.1f} | {row['ttft']:.3f} | {row['tpot']:.4f} | "
            f"{row['decode_tps']:.1f} | {ratio} |"
        )
    if peer:
        lines += ["", f"Peer: onnxruntime, widened float32 `decoder_with_past`, one stream: {peer:.1f} decode tokens/s "
                      "(a step at a past of 64, one thread)."]  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    output = args.output if args.output is not None else (None if args.quick else RESULTS)
    if output is not None:
        output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
