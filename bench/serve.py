"""`python -m bench.serve`: `loam serve` under 1 to 32 concurrent streaming clients, against llama.cpp's servers.

What and why: serving is where batching pays, and users judge a server as vLLM's `bench serve` and
llama.cpp's own bench do: time to first token, time per output token, the gaps between tokens (their
tail, p99, is what a reader of a stream feels), and aggregate output tokens/s and requests/s as the
clients grow.  One client program measures every server the same way, over plain HTTP on 127.0.0.1:

- Loam: a real `loam serve` (uvicorn, a child process) serving SmolLM2-135M-Instruct from its GGUF
  file (the package `_package` writes), its weights widened to float32 at load, and, with `--packed`,
  a second run with the Q4_1/Q8_0 blocks kept packed;
- the peer `llama-server`: llama.cpp's own server on the same GGUF file (`--llama-server PATH`, default
  what scripts/build_llama_server.py builds, else $LOAM_LLAMA_SERVER; built at dev time, outside CI),
  started once per client count with as many parallel slots (`-np`), each slot the context a request
  of the run needs, and continuous batching on (this version's default, passed explicitly): it decodes
  every busy slot in one batch and admits a new request into a free slot between steps, as Loam does;
- the peer `llama-cpp-python`: llama.cpp's server as `llama-cpp-python[server]` runs it
  (`python -m llama_cpp.server`), one request at a time, in an interpreter that has it
  (`--peer-python`, default $LOAM_LLAMACPP_PYTHON, else /work/venvs/llamacpp/bin/python; built at dev
  time, outside CI, see bench/RESULTS-serve.md for the build flags).

`--peers` picks the servers (default all three); a peer that is not installed here is skipped and the
results say so.  Every server gets the same cores (`--threads`, default all of them: Loam's BLAS
threads, llama.cpp's threads for decoding and for prompts).  Each run starts `clients` threads at once; each sends
`--requests` streamed completions one after the other, of a prompt drawn from a fixed text (prompt
lengths cycle through `PROMPT_WORDS`) and `--tokens` new tokens, greedy, with the end of text
suppressed (Loam: `ignore_eos`; both llama.cpp servers: a logit bias on its EOS id) so every answer has its full
length.  Reported per run: output tokens/s and requests/s over the run's wall time, TTFT, TPOT
(a request's time after its first token over its other tokens) and inter-token latency (every gap
between two streamed tokens of one request) at p50 and p99.

Writes bench/RESULTS-serve.md (`--output FILE` elsewhere; `--quick` writes nothing).  `--package DIR`
serves another text package (then no peer: the peers run SmolLM2's GGUF).
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.publish import publish

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS-serve.md"
PEER_PYTHON = "/work/venvs/llamacpp/bin/python"
LLAMA_SERVER = Path.home() / ".cache" / "loam" / "llama-server" / "build" / "bin" / "llama-server"
PEERS = ("loam", "llama-server", "llama-cpp-python")
LLAMA_SERVER_LABEL = "llama-server"
TEXT = (
    "The river bends twice before it reaches the old mill, where the water slows and the light turns green "
    "under the willows. Children used to swim there in summer, daring each other to touch the wheel, while "
    "their parents argued about the price of flour and the weather that never seemed to come on time. "
)
PROMPT_WORDS = (24, 96)  # about 32 and 128 tokens of TEXT, alternately
EOS_ID = 2  # SmolLM2's <|im_end|>, which llama.cpp's greedy completion of TEXT may pick
PREFILL_UNITS = 32  # Loam's prompt tokens a cohort reads while streams decode, in the long-prompt runs
STREAMS, STREAM_TOKENS, LONG_WORDS = 4, 96, 1500  # the long-prompt runs


def _prompt(index: int, lengths: Sequence[int] = PROMPT_WORDS) -> str:
    """Request `index`'s prompt: `lengths[index % len(lengths)]` words of TEXT from a shifting start."""
    words = (TEXT * 4).split()
    start = (index * 7) % 20
    return " ".join(words[start : start + lengths[index % len(lengths)]])


def _package(folder: Path, packed: bool, prefill_units: int = 0) -> Path:
    from bench.smollm2 import _gguf

    table = {
        "name": "smollm2",
        "role": "text",
        "sources": {"gguf": str(_gguf())},
        "stages": {"decoder": {"graph": str(ROOT / "tests" / "models" / "smollm2" / "decoder_positions.onnxtext"),
                               "source": "gguf", "options": {"architecture": "llama"}, "packed": packed}},
        "tokenizer": {"source": "gguf"},
        "capacities": {"batch_units": 512, "resident_requests": 32, "context_tokens": 2560, "block_tokens": 16,
                       "kv_blocks": 640, **({"prefill_units": prefill_units} if prefill_units else {})},
    }  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
    return folder


def _thread_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[name] = str(threads)
    return env


def _wait_for(process: subprocess.Popen[str], marker: str, what: str) -> str:
    """The first stderr line of `process` holding `marker` (the server's listening line)."""
    assert process.stderr is not None
    for line in process.stderr:
        if marker in line:
            # Keep reading what it prints, so a chatty server never blocks on a full pipe.
            threading.Thread(target=lambda: all(True for _ in process.stderr or ()), daemon=True).start()
            return line
    raise SystemExit(f"bench.serve: {what} did not start (exit {process.wait()})")


def loam_server(package: Path, cache: Path, threads: int) -> tuple[subprocess.Popen[str], str]:
    env = {**_thread_env(threads), "LOAM_CACHE_DIR": str(cache)}
    process = subprocess.Popen(
        [sys.executable, "-m", "loam.tools.loam_main", "serve", str(package), "--port", "0"],
        stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    line = _wait_for(process, "listening on ", "loam serve")
    return process, line.split("listening on ", 1)[1].split()[0]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _peer_server(python: str, gguf: Path, threads: int) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    process = subprocess.Popen(
        [python, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "smollm2", "--host", "127.0.0.1",
         "--port", str(port), "--n_threads", str(threads), "--n_threads_batch", str(threads), "--n_ctx", "4096",
         "--verbose", "False", "--interrupt_requests", "False"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_thread_env(threads),
    )  # fmt: skip
    _wait_for(process, "Uvicorn running on", "llama.cpp's server")
    return process, f"http://127.0.0.1:{port}"


def slot_context(words: int, tokens: int) -> int:
    """The context one llama-server slot needs for a prompt of `words` words of TEXT and `tokens` new tokens:
    at most 2 tokens a word (TEXT reads as about 4/3) and a margin, in whole 256-token pages."""
    need = 2 * words + tokens + 64
    return -(-need // 256) * 256


def llama_server_command(binary: str, gguf: Path, threads: int, slots: int, context: int, port: int) -> list[str]:
    """llama-server on 127.0.0.1:`port` with `slots` parallel slots of `context` tokens each (`-c` is their
    sum: this version splits it evenly between the slots) and continuous batching."""
    return [binary, "--model", str(gguf), "--alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
            "--threads", str(threads), "--threads-batch", str(threads), "--parallel", str(slots),
            "--ctx-size", str(slots * context), "--cont-batching", "--no-webui"]  # fmt: skip


def _llama_server(
    binary: str, gguf: Path, threads: int, slots: int, context: int, log: Path
) -> tuple[subprocess.Popen[str], str]:
    """A started llama-server (its output in `log`) and its URL, once its /health answers 200."""
    import httpx

    port = _free_port()
    command = llama_server_command(binary, gguf, threads, slots, context, port)
    with log.open("w", encoding="utf-8") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True, env=_thread_env(threads))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass  # not listening yet
        time.sleep(0.2)
    stop(process)
    tail = log.read_text(encoding="utf-8", errors="replace")[-1500:]
    raise SystemExit(f"bench.serve: llama-server did not start (exit {process.returncode}):\n{tail}")


def llama_server_binary(choice: str | None) -> str | None:
    """llama-server: `choice`, else LLAMA_SERVER (scripts/build_llama_server.py's output), else $LOAM_LLAMA_SERVER."""
    for path in [choice] if choice else [str(LLAMA_SERVER), os.environ.get("LOAM_LLAMA_SERVER")]:
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return path
    return None


def peers(choice: str, no_peer: bool = False) -> list[str]:
    """The servers `--peers` names, in PEERS' order (`--no-peer`: Loam alone); an unknown name is an error."""
    names = [name.strip() for name in choice.split(",") if name.strip()]
    unknown = [name for name in names if name not in PEERS]
    if unknown:
        raise ValueError(f"--peers: unknown server {unknown[0]!r} (choose from {', '.join(PEERS)})")
    return [name for name in PEERS if name in names and (name == "loam" or not no_peer)]


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(60)


def peer_python(choice: str | None) -> str | None:
    """An interpreter that imports llama_cpp.server: `choice`, $LOAM_LLAMACPP_PYTHON or PEER_PYTHON; None if none."""
    for python in [choice] if choice else [os.environ.get("LOAM_LLAMACPP_PYTHON"), PEER_PYTHON]:
        if python and Path(python).is_file():
            done = subprocess.run([python, "-c", "import llama_cpp.server"], capture_output=True, timeout=120)
            if done.returncode == 0:
                return python
    return None


@dataclass
class Stream:
    """One streamed request as the client saw it."""

    start: float
    first: float | None = None
    arrivals: list[float] = field(default_factory=list[float])  # each content chunk's arrival
    tokens: int = 0
    error: str | None = None


def _stream(url: str, body: dict[str, Any], on_token: Callable[[int], None] | None = None) -> Stream:
    """One streamed completion as the client sees it; `on_token(n)` is called as the n-th token arrives."""
    import httpx

    seen = Stream(time.perf_counter())
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=1800) as reply:
        if reply.status_code != 200:
            seen.error = f"HTTP {reply.status_code}: {reply.read().decode()[:300]}"
            return seen
        chunks = 0
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                seen.error = str(chunk["error"])[:300]
                return seen
            usage = chunk.get("usage")
            if usage:
                seen.tokens = int(usage["completion_tokens"])
            for choice in chunk.get("choices") or []:
                if choice.get("text"):
                    now = time.perf_counter()
                    seen.first = seen.first if seen.first is not None else now
                    seen.arrivals.append(now)
                    chunks += 1
                    if on_token is not None:
                        on_token(chunks)
        seen.tokens = seen.tokens or chunks  # llama.cpp streams one token a chunk and no usage
    return seen


def _gaps(streams: list[Stream]) -> list[float]:
    """Every gap between two tokens of one stream: the inter-token latencies."""
    return [b - a for s in streams for a, b in zip(s.arrivals, s.arrivals[1:], strict=False)]


def _percentile(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(values, q)) if values else float("nan")


def run(
    url: str, body: dict[str, Any], clients: int, requests: int, lengths: Sequence[int] = PROMPT_WORDS
) -> dict[str, float]:
    """`clients` threads at once, each sending `requests` streamed completions in turn; the run's figures."""
    streams: list[Stream] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client(i: int) -> None:
        barrier.wait()
        for r in range(requests):
            try:
                seen = _stream(url, {**body, "prompt": _prompt(i * requests + r, lengths)})
            except Exception as err:  # a connection that failed is a failed request, not a thread that vanished
                seen = Stream(time.perf_counter(), error=f"{type(err).__name__}: {err}")
            with lock:
                streams.append(seen)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    duration = time.perf_counter() - start
    failed = [s.error for s in streams if s.error or s.first is None]
    if failed:
        raise SystemExit(f"bench.serve: {len(failed)} of {len(streams)} requests failed: {failed[0]}")
    short = [s.tokens for s in streams if s.tokens != body["max_tokens"]]
    ttft = [s.first - s.start for s in streams if s.first is not None]
    tpot = [(s.arrivals[-1] - s.arrivals[0]) / (s.tokens - 1) for s in streams if s.tokens > 1]
    gaps = _gaps(streams)
    return {
        "clients": clients,
        "requests": len(streams),
        "short": len(short),
        "output_tps": sum(s.tokens for s in streams) / duration,
        "rps": len(streams) / duration,
        "ttft_p50": _percentile(ttft, 50),
        "ttft_p99": _percentile(ttft, 99),
        "tpot_p50": _percentile(tpot, 50),
        "itl_p50": _percentile(gaps, 50),
        "itl_p99": _percentile(gaps, 99),
        "duration": duration,
    }


def interference(url: str, body: dict[str, Any], streams: int, long_words: int) -> dict[str, float]:
    """`streams` streamed requests of `body["max_tokens"]` tokens; once each has streamed a few tokens (or
    a minute has passed: a server that runs one request at a time starts the others only as each ends), a
    request with a prompt of `long_words` words (and one new token) arrives (none when `long_words` is 0).
    The streams' inter-token latency p50/p99 over the run, and the long prompt's time to its answer."""
    streaming = threading.Semaphore(0)  # released once by each stream at its 4th token
    results: list[Stream] = []
    lock = threading.Lock()

    def started(count: int) -> None:
        if count == 4:
            streaming.release()

    def client(i: int) -> None:
        try:
            seen = _stream(url, {**body, "prompt": _prompt(i, PROMPT_WORDS[:1])}, started)
        except Exception as err:  # counted as a failed stream, as in `run`
            seen = Stream(time.perf_counter(), error=f"{type(err).__name__}: {err}")
        with lock:
            results.append(seen)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    for _ in range(streams):
        streaming.acquire(timeout=max(0.0, deadline - time.monotonic()))
    long_s = float("nan")
    if long_words:
        import httpx

        words = (TEXT * (long_words // len(TEXT.split()) + 1)).split()[:long_words]
        start = time.perf_counter()
        request = {k: v for k, v in body.items() if k != "stream_options"}
        reply = httpx.post(f"{url}/v1/completions", json={**request, "stream": False, "max_tokens": 1,
                                                          "prompt": " ".join(words)}, timeout=1800)  # fmt: skip
        if reply.status_code != 200:
            raise SystemExit(f"bench.serve: the long prompt failed: HTTP {reply.status_code}: {reply.text[:300]}")
        long_s = time.perf_counter() - start
    for t in threads:
        t.join()
    failed = [s.error for s in results if s.error]
    if failed or len(results) != streams:
        raise SystemExit(f"bench.serve: {len(failed)} of {streams} streams failed: {(failed or ['vanished'])[0]}")
    gaps = _gaps(results)
    return {"itl_p50": _percentile(gaps, 50), "itl_p99": _percentile(gaps, 99), "long_s": long_s}


def _measure(
    label: str, url: str, body: dict[str, Any], clients: list[int], requests: int, lengths: Sequence[int]
) -> list[tuple[str, Any]]:
    run(url, {**body, "max_tokens": 2}, 1, 1, lengths)  # warm: the first call of a binding allocates its buffers
    rows = []
    for count in clients:
        print(f"bench.serve: {label}, {count} clients", file=sys.stderr, flush=True)
        rows.append((label, run(url, body, count, requests, lengths)))
    return rows


def _table(rows: list[tuple[str, dict[str, float]]]) -> list[str]:
    lines = [
        "| server | clients | requests | output tokens/s | requests/s | TTFT p50 s | TTFT p99 s | TPOT p50 s "
        "| ITL p50 s | ITL p99 s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in rows:
        lines.append(
            f"| {label} | {r['clients']:.0f} | {r['requests']:.0f} | {r['output_tps']:.1f} | {r['rps']:.2f} | "
            f"{r['ttft_p50']:.3f} | {r['ttft_p99']:.3f} | {r['tpot_p50']:.4f} | {r['itl_p50']:.4f} | "
            f"{r['itl_p99']:.4f} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", default="1,4,16,32", help="concurrent clients per run (default 1,4,16,32)")
    parser.add_argument("--requests", type=int, default=2, help="requests each client sends in turn (default 2)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per request (default 64)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="cores each server uses (all)")
    parser.add_argument("--packed", action="store_true", help="also serve the GGUF's 4-bit blocks packed")
    parser.add_argument(
        "--prefill-units", type=int, default=PREFILL_UNITS,
        help=f"Loam's capacities.prefill_units in the long-prompt runs, beside a run without it (default "
        f"{PREFILL_UNITS}); the client sweep runs without it, reading up to batch_units of prompt a cohort",
    )  # fmt: skip
    parser.add_argument("--package", type=Path, help="serve this text package instead of SmolLM2 (no peer)")
    parser.add_argument(
        "--long-words", type=int, default=LONG_WORDS,
        help=f"words of the long prompt that arrives mid-stream (default {LONG_WORDS}; 0: no long-prompt runs)",
    )  # fmt: skip
    parser.add_argument(
        "--peers", default=",".join(PEERS),
        help=f"servers to measure, of {', '.join(PEERS)} (default all; one not installed here is skipped)",
    )  # fmt: skip
    parser.add_argument(
        "--llama-server",
        help=f"llama.cpp's llama-server binary (default {LLAMA_SERVER}, scripts/build_llama_server.py's output, "
        "else $LOAM_LLAMA_SERVER)",
    )  # fmt: skip
    parser.add_argument("--peer-python", help="the interpreter that runs llama_cpp.server (llama-cpp-python)")
    parser.add_argument("--no-peer", action="store_true", help="measure Loam alone (as --peers loam)")
    parser.add_argument("--quick", action="store_true", help="1 and 2 clients, 4 tokens, nothing written")
    parser.add_argument("--output", type=Path, help=f"where to write the table (default {RESULTS})")
    args = parser.parse_args(argv)
    try:
        servers = peers(args.peers, args.no_peer or args.package is not None)
    except ValueError as err:
        parser.error(str(err))
    clients = [1, 2] if args.quick else [int(c) for c in args.clients.split(",")]
    tokens, requests = (4, 1) if args.quick else (args.tokens, args.requests)
    lengths = PROMPT_WORDS[:1] if args.quick else PROMPT_WORDS
    body: dict[str, Any] = {"model": "smollm2", "max_tokens": tokens, "temperature": 0, "stream": True}
    rows: list[tuple[str, dict[str, float]]] = []
    long_rows: list[tuple[str, dict[str, float], dict[str, float]]] = []  # streams alone, then beside a long prompt
    long_words = 0 if args.quick or args.package else args.long_words

    def beside_a_long_prompt(label: str, url: str, body: dict[str, Any]) -> None:
        if long_words:
            print(f"bench.serve: {label}, {STREAMS} streams and a long prompt", file=sys.stderr, flush=True)
            streams_body = {**body, "max_tokens": STREAM_TOKENS}
            alone = interference(url, streams_body, STREAMS, 0)
            long_rows.append((label, alone, interference(url, streams_body, STREAMS, long_words)))

    with tempfile.TemporaryDirectory(prefix="loam-bench-serve-") as scratch:
        cache = Path(scratch) / "cache"
        units = f"prefill_units {args.prefill_units}"
        variants = [] if "loam" not in servers else [("Loam, given package", args.package, True)] if args.package else [
            ("Loam, widened", _package(Path(scratch) / "widened", False), True),
            *([("Loam, packed", _package(Path(scratch) / "packed", True), True)] if args.packed else []),
            *([(f"Loam, widened, {units}", _package(Path(scratch) / "chunked", False, args.prefill_units), False)]
              if long_words else []),
        ]  # fmt: skip
        for label, folder, sweep in variants:
            name = json.loads((folder / "model.json").read_text(encoding="utf-8")).get("name", folder.name)
            loam_body = {**body, "model": name, "ignore_eos": True, "stream_options": {"include_usage": True}}
            process, url = loam_server(folder, cache, args.threads)
            try:
                rows += _measure(label, url, loam_body, clients if sweep else [], requests, lengths)
                beside_a_long_prompt(label, url, loam_body)
            finally:
                stop(process)
        peer_body = {**body, "logit_bias": {str(EOS_ID): -1e9}}  # EOS suppressed as a logit bias in both peers
        binary = llama_server_binary(args.llama_server) if "llama-server" in servers else None
        if binary is not None:
            from bench.smollm2 import _gguf

            log = Path(scratch) / "llama-server.log"
            context = slot_context(max(lengths), tokens)
            for count in clients:  # one server a row, as many slots as clients
                process, url = _llama_server(binary, _gguf(), args.threads, count, context, log)
                try:
                    rows += _measure(LLAMA_SERVER_LABEL, url, peer_body, [count], requests, lengths)
                finally:
                    stop(process)
            if long_words:  # a slot for each stream and one for the long prompt
                context = slot_context(long_words, STREAM_TOKENS)
                process, url = _llama_server(binary, _gguf(), args.threads, STREAMS + 1, context, log)
                try:
                    beside_a_long_prompt(LLAMA_SERVER_LABEL, url, peer_body)
                finally:
                    stop(process)
    python = peer_python(args.peer_python) if "llama-cpp-python" in servers else None
    if python is not None:
        from bench.smollm2 import _gguf

        version = subprocess.run(
            [python, "-c", "import llama_cpp; print(llama_cpp.__version__)"], capture_output=True, text=True
        ).stdout.strip()
        process, url = _peer_server(python, _gguf(), args.threads)
        try:
            label = f"llama-cpp-python server {version}"
            rows += _measure(label, url, peer_body, clients, requests, lengths)
            beside_a_long_prompt(label, url, peer_body)
        finally:
            stop(process)
    lines = [
        "# `loam serve` under concurrent streaming clients, against llama.cpp's servers",
        "",
        f"Written by `python -m bench.serve {' '.join(argv if argv is not None else sys.argv[1:])}` on "
        f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; each server on {args.threads} thread(s).  Each client sends "
        f"{requests} streamed completions in turn, prompts of {' and '.join(map(str, lengths))} words "
        f"(about 4/3 as many tokens) alternately, {tokens} new tokens each (greedy, end of text suppressed); "
        "all clients start at once.",
        "",
        *_table(rows),
        "",
    ]
    if long_rows:
        lines += [
            f"A long prompt arriving mid-stream: {STREAMS} streams of {STREAM_TOKENS} tokens; once each has "
            f"streamed 4, a request with a prompt of {long_words} words (about {long_words * 4 // 3} tokens) and "
            "one new token arrives.  The streams' inter-token latency (ITL) without and with it, and the long "
            "request's time:",
            "",
            "| server | ITL p50 s alone | ITL p99 s alone | ITL p50 s beside it | ITL p99 s beside it | p99 ratio "
            "| long request s |",
            "|---|---|---|---|---|---|---|",
            *(
                f"| {label} | {a['itl_p50']:.4f} | {a['itl_p99']:.4f} | {b['itl_p50']:.4f} | {b['itl_p99']:.4f} | "
                f"{b['itl_p99'] / a['itl_p99']:.2f} | {b['long_s']:.2f} |"
                for label, a, b in long_rows
            ),
            "",
        ]
    short = sum(r["short"] for _, r in rows)
    if short:
        lines.append(f"- {short} requests ended before {tokens} tokens (their tokens are counted as they came).")
    if binary is not None:
        lines.append(
            f"- llama-server: started for each row with `--parallel` its clients, `--ctx-size` "
            f"{slot_context(max(lengths), tokens)} tokens a slot times them, `--threads` and `--threads-batch` "
            f"{args.threads}, `--cont-batching`."
        )
    for name, missing in (("llama-server", binary is None), ("llama-cpp-python", python is None)):
        if missing and not args.package:
            lines.append(f"- {name}: not measured (not in `--peers`, or not installed here).")
    for prefix in (LLAMA_SERVER_LABEL, "llama-cpp-python"):
        by_clients = {r["clients"]: r for label, r in rows if label.startswith(prefix)}
        for label, r in rows:
            peer = by_clients.get(r["clients"])
            if label.startswith("Loam") and peer:
                lines.append(
                    f"- {label} / {prefix} at {r['clients']:.0f} clients: output tokens/s "
                    f"{r['output_tps'] / peer['output_tps']:.2f}x, ITL p99 {r['itl_p99'] / peer['itl_p99']:.2f}x"
                )
    text = "\n".join(lines) + "\n"
    publish(text, args, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
