"""`python -m bench.soak`: N clients for M minutes against a real `loam serve`: nothing lost, memory flat.

What and why: the question is whether the server holds up over time, not just for one burst.  A real `loam serve`
runs in a child process on 127.0.0.1 (one BLAS thread, a build cache of its own); N client threads loop until the
time is up, each request of a random kind: a completion or a chat, streamed or not, a prompt of token ids (one of
a few shared prefixes, so the prefix cache is used and evicted, then random tokens) or of words, a random reply
length within the context, greedy or seeded sampling, sometimes a stop string; some streams are dropped after a
few chunks by closing the connection, a few requests are refused on purpose (a prompt past the context, a bad
field, an unknown model), and now and then a conversation runs on a session (create, two turns, delete).

Every request ends one of four ways: completed (a 200 whose every choice has a finish_reason, or a stream with a
finish_reason per choice, then [DONE]); an error response (OpenAI's JSON error object, as a body with its status
or as a stream's error event; counted by status); cancelled by its client on purpose; or LOST: a hang past the
timeout, a stream that ends without [DONE] or an error event, a dropped connection, a body that is not the API's.
Lost must be 0.

The server's resident memory (VmRSS in /proc/PID/status) is sampled every few seconds; after a warm-up the
report gives its least-squares slope and its first and last samples.  When the clients are done, /metrics must
show no request waiting and no KV block held (loam_kv_blocks_used 0; cached blocks stay for prefix reuse).

Writes bench/RESULTS-soak.md (`--output FILE` elsewhere; `--quick`: 4 clients for 20 s, nothing written).  Exits 1
when a request was lost or the server did not settle.
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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.publish import publish

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS-soak.md"
PACKAGE = ROOT / "tests" / "serve" / "packages" / "tiny_gpt2"
WORDS = (
    "beautiful is better than ugly explicit implicit simple complex flat nested sparse dense readability counts "
    "special cases aren't enough to break the rules although practicality beats purity errors should never pass "
    "silently unless explicitly silenced"
).split()
# Token ids below 1000: every vocabulary served here has at least that many.
PREFIXES = [[int(t) for t in np.random.default_rng(100 + i).integers(3, 1000, 16)] for i in range(4)]
KINDS = {  # kind -> weight
    "completion": 20,
    "completion-stream": 20,
    "chat": 12,
    "chat-stream": 12,
    "stream-dropped": 12,  # a stream its client closes after a few chunks
    "two-prompts": 6,  # one completion request with two prompts
    "session": 6,  # create, two turns, delete
    "refused": 6,  # a request the server must refuse with a 4xx
}
MAX_REQUESTS = 1_000_000  # per client: a bound on the loop besides the clock


@dataclass
class Tally:
    """What the clients saw, shared between their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: Counter[str] = field(default_factory=Counter)
    completed: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # kind
    statuses: Counter[int] = field(default_factory=Counter)
    cancelled: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # completed requests' durations

    def end(self, kind: str, how: str, detail: object = None, took: float = 0.0) -> None:
        with self.lock:
            if how == "completed":
                self.completed[kind] += 1
                self.seconds.append(took)
            elif how == "error":
                self.errors[kind] += 1
                self.statuses[int(detail)] += 1  # type: ignore[call-overload]
            elif how == "cancelled":
                self.cancelled[kind] += 1
            else:
                self.lost.append(f"{kind}: {detail}")


class Lost(Exception):
    """A request that ended neither with its reply nor with an error response."""


@dataclass
class Child:
    """A `loam serve` child process."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path


def start_server(package: Path, scratch: Path, timeout: float = 900.0) -> Child:
    """`loam serve PACKAGE --port 0` in a child process (its stderr to a file, so it never blocks on a full pipe)."""
    env = {**os.environ, "LOAM_CACHE_DIR": str(scratch / "cache")}
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    log = scratch / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "loam.tools.loam_main", "serve", str(package), "--host", "127.0.0.1", "--port", "0"],
            stderr=sink, stdout=subprocess.DEVNULL, env=env, cwd=ROOT,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(encoding="utf-8", errors="replace")
        if "listening on " in text:
            return Child(process, text.split("listening on ", 1)[1].split()[0], log)
        if process.poll() is not None:
            break
        time.sleep(0.1)
    process.kill()
    process.wait()
    raise SystemExit(f"bench.soak: the server did not start:\n{log.read_text(encoding='utf-8', errors='replace')}")


def rss_kib(pid: int) -> int:
    """The resident memory of process `pid`, KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def scrape(url: str, model: str) -> dict[str, float]:
    """The `loam_*` samples of /metrics for `model`: name (with any labels but the model's) -> value."""
    import httpx

    out: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if not line.startswith("loam_") or f'model="{model}"' not in line:
            continue
        name, value = line.rsplit(" ", 1)
        out[name.replace(f'model="{model}",', "").replace(f',model="{model}"', "").replace(f'model="{model}"', "")
            .replace("{}", "")] = float(value)  # fmt: skip
    return out


# -- one client ---------------------------------------------------------------------------------------------------


class Client:
    """One client thread's requests: random kinds, each checked to end with its reply or an error response."""

    def __init__(self, url: str, model: str, context: int, chat: bool, seed: int, timeout: float, tally: Tally) -> None:
        import httpx

        self.url, self.model, self.context, self.chat = url, model, context, chat
        self.rng = np.random.default_rng(seed)
        self.tally = tally
        self.http = httpx.Client(base_url=url, timeout=timeout)
        kinds = [k for k in KINDS if chat or not k.startswith("chat")]
        weights = np.array([KINDS[k] for k in kinds], np.float64)
        self.kinds, self.weights = kinds, weights / weights.sum()

    def run(self, deadline: float, limit: int = MAX_REQUESTS) -> None:
        import httpx

        try:
            for _ in range(limit):
                if time.monotonic() >= deadline:
                    return
                kind = str(self.rng.choice(self.kinds, p=self.weights))
                with self.tally.lock:
                    self.tally.sent[kind] += 1
                start = time.monotonic()
                try:
                    how, detail = getattr(self, "_" + kind.replace("-", "_"))()
                except Lost as err:
                    how, detail = "lost", str(err)
                except httpx.TimeoutException as err:
                    how, detail = "lost", f"no answer within the timeout ({type(err).__name__})"
                except httpx.TransportError as err:
                    how, detail = "lost", f"the connection dropped ({type(err).__name__}: {err})"
                self.tally.end(kind, how, detail, time.monotonic() - start)
        finally:
            self.http.close()

    # -- what a request looks like ------------------------------------------------------------------------------

    def _ids(self) -> list[int]:
        tail = [int(t) for t in self.rng.integers(3, 1000, int(self.rng.integers(1, max(2, self.context // 4))))]
        return [*PREFIXES[int(self.rng.integers(len(PREFIXES)))], *tail] if self.rng.random() < 0.5 else tail

    def _words(self, most: int = 16) -> str:
        return " ".join(self.rng.choice(WORDS, int(self.rng.integers(1, most))))

    def _sampling(self, prompt_tokens: int) -> dict[str, Any]:
        room = max(1, min(48, self.context - prompt_tokens - 2))
        body: dict[str, Any] = {"max_tokens": int(self.rng.integers(1, room + 1))}
        if self.rng.random() < 0.5:
            body["temperature"] = 0
        else:
            body.update(temperature=0.8, top_p=0.95, seed=int(self.rng.integers(1 << 30)))
        if self.rng.random() < 0.1:
            body["stop"] = [str(self.rng.choice(["e", "a ", "\n"]))]
        if self.rng.random() < 0.3:
            body["ignore_eos"] = True
        return body

    def _completion_body(self) -> dict[str, Any]:
        if self.rng.random() < 0.7:
            prompt: object = self._ids()
            tokens = len(prompt)  # type: ignore[arg-type]
        else:
            prompt = self._words()
            tokens = 4 * len(prompt.split())  # a bound on the words' tokens for the tiny tokenizers
        return {"model": self.model, "prompt": prompt, **self._sampling(tokens)}

    def _chat_body(self) -> dict[str, Any]:
        messages = [{"role": "user", "content": self._words(10)}]
        if self.rng.random() < 0.3:
            messages.insert(0, {"role": "system", "content": self._words(6)})
        return {"model": self.model, "messages": messages, **self._sampling(64)}

    # -- the kinds ------------------------------------------------------------------------------------------------

    def _completion(self) -> tuple[str, object]:
        return self._whole("/v1/completions", self._completion_body(), 1)

    def _chat(self) -> tuple[str, object]:
        return self._whole("/v1/chat/completions", self._chat_body(), 1)

    def _two_prompts(self) -> tuple[str, object]:
        body = self._completion_body()
        body["prompt"] = [self._ids(), self._ids()]
        return self._whole("/v1/completions", body, 2)

    def _completion_stream(self) -> tuple[str, object]:
        return self._stream("/v1/completions", self._completion_body())

    def _chat_stream(self) -> tuple[str, object]:
        return self._stream("/v1/chat/completions", self._chat_body())

    def _stream_dropped(self) -> tuple[str, object]:
        path, body = (
            ("/v1/chat/completions", self._chat_body())
            if self.chat and self.rng.random() < 0.5
            else ("/v1/completions", self._completion_body())
        )
        body["max_tokens"] = max(body["max_tokens"], 8)
        return self._stream(path, body, drop_after=int(self.rng.integers(1, 5)))

    def _refused(self) -> tuple[str, object]:
        choice = int(self.rng.integers(3))
        body: dict[str, Any] = {"model": self.model, "prompt": [5] * (self.context + 8), "max_tokens": 4}
        if choice == 1:
            body = {"model": self.model, "prompt": [5, 6], "temperature": 9}
        elif choice == 2:
            body = {"model": "no-such-model", "prompt": [5, 6]}
        how, detail = self._whole("/v1/completions", body, 1, stream=bool(self.rng.random() < 0.5))
        if how != "error" or not 400 <= int(detail) < 500:  # type: ignore[call-overload]
            raise Lost(f"a request the server must refuse ended {how} ({detail})")
        return how, detail

    def _session(self) -> tuple[str, object]:
        created = self.http.post("/v1/sessions", json={"model": self.model})
        if created.status_code != 201:
            return self._error_of(created)
        session = created.json()["id"]
        try:
            for _ in range(2):
                body = {"model": self.model, "prompt": self._ids()[: max(1, self.context // 8)], "max_tokens": 4,
                        "session": session, "temperature": 0}  # fmt: skip
                how, detail = self._whole("/v1/completions", body, 1, stream=bool(self.rng.random() < 0.5))
                if how != "completed":
                    return how, detail
            return "completed", None
        finally:
            deleted = self.http.delete(f"/v1/sessions/{session}")
            if deleted.status_code != 200:
                raise Lost(f"deleting a session: HTTP {deleted.status_code} {deleted.text[:200]}")

    # -- reading the answers ------------------------------------------------------------------------------------

    def _whole(self, path: str, body: dict[str, Any], choices: int, *, stream: bool = False) -> tuple[str, object]:
        if stream:
            return self._stream(path, body)
        reply = self.http.post(path, json=body)
        if reply.status_code != 200:
            return self._error_of(reply)
        try:
            data = reply.json()
            reasons = [c["finish_reason"] for c in data["choices"]]
            completion = data["usage"]["completion_tokens"]
        except (ValueError, KeyError, TypeError) as err:
            raise Lost(f"a 200 that is not a completion ({err}): {reply.text[:200]}") from None
        if len(reasons) != choices or not all(r in ("stop", "length") for r in reasons):
            raise Lost(f"a completion whose choices did not all finish: {reasons}")
        if completion > choices * body.get("max_tokens", 1 << 30):
            raise Lost(f"{completion} tokens for max_tokens {body.get('max_tokens')}")
        return "completed", None

    def _stream(self, path: str, body: dict[str, Any], drop_after: int | None = None) -> tuple[str, object]:
        body = {**body, "stream": True}
        choices = len(body["prompt"]) if isinstance(body.get("prompt"), list) and body["prompt"] and \
            isinstance(body["prompt"][0], list) else 1  # fmt: skip
        finished: set[int] = set()
        chunks = 0
        with self.http.stream("POST", path, json=body) as reply:
            if reply.status_code != 200:
                reply.read()
                return self._error_of(reply)
            for line in reply.iter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[6:]
                if payload == "[DONE]":
                    if len(finished) != choices:
                        raise Lost(f"[DONE] with {len(finished)} of {choices} choices finished")
                    return "completed", None
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    raise Lost(f"a stream chunk that is not JSON: {payload[:200]}") from None
                if "error" in chunk:
                    return "error", int(chunk["error"]["code"])
                for choice in chunk.get("choices", []):
                    if choice.get("finish_reason") is not None:
                        finished.add(int(choice["index"]))
                chunks += 1
                if drop_after is not None and chunks >= drop_after and len(finished) < choices:
                    return "cancelled", None  # leaving the block closes the connection mid-stream
        raise Lost(f"the stream ended after {chunks} chunks without [DONE] or an error")

    @staticmethod
    def _error_of(reply: Any) -> tuple[str, object]:
        try:
            error = reply.json()["error"]
            if not isinstance(error["message"], str) or error["code"] != reply.status_code:
                raise KeyError("code")
        except (ValueError, KeyError, TypeError):
            raise Lost(f"HTTP {reply.status_code} without OpenAI's error object: {reply.text[:200]}") from None
        return "error", reply.status_code


# -- the run ------------------------------------------------------------------------------------------------------


def soak(
    package: Path = PACKAGE, clients: int = 8, seconds: float = 180.0, *, warmup: float | None = None,
    interval: float | None = None, timeout: float = 60.0, seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """Serve `package` in a child process, run `clients` client threads for `seconds`, and report."""
    import httpx

    warmup = min(60.0, seconds / 3) if warmup is None else warmup
    interval = max(0.5, min(5.0, seconds / 60)) if interval is None else interval
    model = json.loads((package / "model.json").read_text(encoding="utf-8")).get("name", package.resolve().name)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="loam-bench-soak-") as scratch:
        child = start_server(package, Path(scratch))
        pid = child.process.pid
        try:
            context = int(httpx.get(f"{child.url}/v1/models/{model}", timeout=30).json()["context_tokens"])
            probe = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
            chat = httpx.post(f"{child.url}/v1/chat/completions", json=probe, timeout=timeout).status_code == 200
            started_rss = rss_kib(pid)
            samples: list[tuple[float, int]] = []
            stop = threading.Event()

            def sample() -> None:
                begin = time.monotonic()
                while not stop.is_set():
                    samples.append((time.monotonic() - begin, rss_kib(pid)))
                    stop.wait(interval)

            sampler = threading.Thread(target=sample, name="rss", daemon=True)
            begin = time.monotonic()
            deadline = begin + seconds
            sampler.start()
            threads = [
                threading.Thread(
                    target=Client(child.url, model, context, chat, seed * 1000 + i, timeout, tally).run,
                    args=(deadline,), name=f"client-{i}",
                )
                for i in range(clients)
            ]  # fmt: skip
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(seconds + 4 * timeout + 60)
            hung = sum(thread.is_alive() for thread in threads)
            duration = time.monotonic() - begin
            # Every request has ended on the client side; the server collects the dropped ones at a cohort boundary.
            settle_by = time.monotonic() + 30
            while True:
                metrics = scrape(child.url, model)
                idle = not metrics.get("loam_queue_depth") and not metrics.get("loam_kv_blocks_used")
                if idle or time.monotonic() > settle_by:
                    break
                time.sleep(0.2)
            stop.set()
            sampler.join(10)
            alive = child.process.poll() is None
        finally:
            child.process.terminate()
            try:
                child.process.wait(60)
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
            log_tail = child.log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
    after = [(t, kib) for t, kib in samples if t >= warmup]
    slope = float(np.polyfit([t for t, _ in after], [kib for _, kib in after], 1)[0]) * 60 if len(after) > 2 else 0.0
    outcomes = {k.split('outcome="')[1].split('"')[0]: int(v) for k, v in metrics.items()
                if k.startswith("loam_requests_total") and 'outcome="' in k}  # fmt: skip
    return {
        "package": str(package), "model": model, "clients": clients, "seconds": seconds, "duration": duration,
        "warmup": warmup, "interval": interval, "timeout": timeout, "chat": chat, "context": context,
        "sent": sum(tally.sent.values()), "completed": sum(tally.completed.values()),
        "errors": sum(tally.errors.values()), "statuses": dict(sorted(tally.statuses.items())),
        "cancelled": sum(tally.cancelled.values()), "lost": len(tally.lost) + hung, "lost_examples": tally.lost[:10],
        "hung_clients": hung, "kinds": {k: (tally.sent[k], tally.completed[k], tally.errors[k], tally.cancelled[k],
                                             sum(1 for x in tally.lost if x.startswith(k + ":"))) for k in KINDS},
        "p50": float(np.percentile(tally.seconds, 50)) if tally.seconds else 0.0,
        "p99": float(np.percentile(tally.seconds, 99)) if tally.seconds else 0.0,
        "rss_start_mib": started_rss / 1024, "rss_samples": len(samples),
        "rss_first_mib": after[0][1] / 1024 if after else 0.0, "rss_last_mib": after[-1][1] / 1024 if after else 0.0,
        "rss_max_mib": max(kib for _, kib in samples) / 1024 if samples else 0.0,
        "rss_slope_mib_per_min": slope / 1024,
        "kv_used": metrics.get("loam_kv_blocks_used", 0.0), "kv_cached": metrics.get("loam_kv_blocks_cached", 0.0),
        "queue_depth": metrics.get("loam_queue_depth", 0.0),
        "generated_tokens": metrics.get("loam_generation_tokens_total", 0.0),
        "prompt_tokens": metrics.get("loam_prompt_tokens_total", 0.0),
        "cached_tokens": metrics.get("loam_cached_prompt_tokens_total", 0.0),
        "outcomes": outcomes, "server_alive": alive, "server_log": log_tail,
    }  # fmt: skip


def ok(report: dict[str, Any]) -> bool:
    """Nothing lost, the server alive at the end and settled: no request waiting, no KV block held."""
    return (
        report["lost"] == 0 and report["server_alive"] and report["kv_used"] == 0 and report["queue_depth"] == 0
    )  # fmt: skip


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, load average {load} at the start"


def _span(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:g} minutes"


def render(report: dict[str, Any], command: str, where: str) -> str:
    r = report
    statuses = ", ".join(f"{n} x {s}" for s, n in r["statuses"].items()) or "none"
    lines = [
        f"# `loam serve` soak: {r['clients']} clients for {_span(r['seconds'])}",
        "",
        f"Written by `{command}` on {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, on {where}. "
        f"The server (`loam serve {Path(r['package']).name}`, model `{r['model']}`, context {r['context']} tokens) "
        "is a child process at one BLAS thread; the clients are threads of the bench's process on the same cores.",
        "",
        "| sent | completed | error responses | cancelled by the client | lost |",
        "|---|---|---|---|---|",
        f"| {r['sent']} | {r['completed']} | {r['errors']} ({statuses}) | {r['cancelled']} | **{r['lost']}** |",
        "",
        "| kind | sent | completed | errors | cancelled | lost |",
        "|---|---|---|---|---|---|",
        *(f"| {k} | {s} | {c} | {e} | {x} | {lo} |" for k, (s, c, e, x, lo) in r["kinds"].items() if s),
        "",
        f"Completed requests took {r['p50']:.3f} s (median) and {r['p99']:.3f} s (99th percentile); the server read "
        f"{r['prompt_tokens']:.0f} prompt tokens ({r['cached_tokens']:.0f} more found in retained blocks) and "
        f"generated {r['generated_tokens']:.0f} tokens in {r['duration']:.0f} s.  Its own count of finished requests: "
        + ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))
        + ".",
        "",
        f"**Resident memory** (VmRSS, {r['rss_samples']} samples every {r['interval']:g} s): "
        f"{r['rss_start_mib']:.1f} MiB after registration, at most {r['rss_max_mib']:.1f} MiB; after the "
        f"{r['warmup']:.0f} s warm-up, first {r['rss_first_mib']:.1f} MiB, last {r['rss_last_mib']:.1f} MiB, "
        f"slope {r['rss_slope_mib_per_min']:+.2f} MiB/min.",
        "",
        f"**At the end**, once every client was done: {r['kv_used']:.0f} KV blocks held, {r['kv_cached']:.0f} "
        f"cached for prefix reuse, {r['queue_depth']:.0f} requests waiting; the server "
        f"{'was still serving' if r['server_alive'] else 'HAD EXITED'}.",
    ]
    if r["lost_examples"]:
        lines += ["", "Lost requests (first ten):", "", *(f"- {x}" for x in r["lost_examples"])]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads (default 8)")
    parser.add_argument("--minutes", type=float, default=3.0, help="how long the clients run (default 3)")
    parser.add_argument("--package", type=Path, default=PACKAGE, help="the text package to serve (default tiny_gpt2)")
    parser.add_argument("--warmup", type=float, help="seconds before memory is judged (default a third, at most 60)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a request may go silent (default 60)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the clients' choices")
    parser.add_argument("--quick", action="store_true", help="4 clients for 20 s, nothing written")
    parser.add_argument("--output", type=Path, help=f"where to write the report (default {RESULTS})")
    args = parser.parse_args(argv)
    clients, seconds = (4, 20.0) if args.quick else (args.clients, args.minutes * 60)
    report = soak(args.package, clients, seconds, warmup=args.warmup, timeout=args.timeout, seed=args.seed)
    shown = list(argv if argv is not None else sys.argv[1:])
    text = render(report, " ".join(["python -m bench.soak", *shown]), machine())
    publish(text, args, RESULTS)
    if not ok(report):
        print("bench.soak: FAILED: " + ("lost requests" if report["lost"] else "the server did not settle"),
              file=sys.stderr)  # fmt: skip
        print("\n".join(report["server_log"]), file=sys.stderr)
    return 0 if ok(report) else 1


if __name__ == "__main__":
    raise SystemExit(main())
