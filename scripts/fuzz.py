"""The long mutation-fuzz campaign over every input Loam reads (tests/fuzz/readers.py).

    python scripts/fuzz.py --per-reader 10000 --seed 1 [--reader NAME ...] [-j N] [--out DIR]
    python scripts/fuzz.py --reader onnx --replay 7      # one mutant, its outcome and traceback

Mutation seeds are `seed * 10**7 + i` for i < per-reader.  Each input runs in a worker process, bounded
by --timeout seconds (the worker is killed and the input counted as a crash: a hang) and by --memory-mb
of address space.  Prints per reader: mutations, ok, refused (and how many refusals do not name the
mutated file), crashes; writes each crashing input to OUT/READER/SEED.bin with its traceback beside it.
Exit status 1 when any reader crashed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time
from collections import Counter
from multiprocessing.connection import Connection, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzz.mutate import mutate  # noqa: E402
from tests.fuzz.readers import READERS  # noqa: E402


def _worker(conn: Connection, memory_mb: int) -> None:
    import tempfile

    from tests.fuzz.readers import outcome

    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import loam.driver.pipeline  # noqa: F401  (warm: imports and seeds are not the input's time)

    for reader in READERS.values():
        reader.seed()
    conn.send("ready")
    while True:
        task = conn.recv()
        if task is None:
            return
        name, seed = task
        reader = READERS[name]
        data = mutate(reader.seed(), seed, text=reader.text)
        with tempfile.TemporaryDirectory() as folder:
            result = outcome(reader, data, Path(folder))
        conn.send((result.kind, result.named, result.detail))


class Worker:
    def __init__(self, memory_mb: int) -> None:
        self.conn, child = mp.Pipe()
        self.process = mp.Process(target=_worker, args=(child, memory_mb), daemon=True)
        self.process.start()
        self.conn.recv()  # "ready": its imports done, so the time bound is the input's alone
        self.task: tuple[str, int] | None = None
        self.started = 0.0

    def give(self, task: tuple[str, int]) -> None:
        self.task, self.started = task, time.monotonic()
        self.conn.send(task)

    def kill(self) -> None:
        self.process.kill()
        self.process.join()


def run(names: list[str], per_reader: int, seed: int, jobs: int, timeout: float, memory_mb: int, out: Path) -> int:
    tasks = [(name, seed * 10**7 + i) for name in names for i in range(per_reader)]
    counts = {name: Counter() for name in names}
    workers = [Worker(memory_mb) for _ in range(jobs)]
    pending = iter(tasks)
    busy: list[Worker] = []

    def record(task: tuple[str, int], kind: str, named: bool, detail: str) -> None:
        name, s = task
        counts[name]["mutations"] += 1
        counts[name][kind] += 1
        if kind == "refused" and not named:
            counts[name]["refused, file not named"] += 1
        if kind == "crash":
            folder = out / name
            folder.mkdir(parents=True, exist_ok=True)
            reader = READERS[name]
            (folder / f"{s}.bin").write_bytes(mutate(reader.seed(), s, text=reader.text))
            (folder / f"{s}.txt").write_text(detail, encoding="utf-8")
            print(f"crash: {name} seed {s}: {detail.strip().splitlines()[-1] if detail.strip() else ''}", flush=True)

    def feed(worker: Worker) -> None:
        task = next(pending, None)
        if task is not None:
            worker.give(task)
            busy.append(worker)

    for w in list(workers):
        feed(w)
    while busy:
        ready = wait([w.conn for w in busy], timeout=1.0)
        now = time.monotonic()
        for w in list(busy):
            result, dead = None, False
            if w.conn in ready:
                try:
                    result = w.conn.recv()
                except EOFError:  # the worker died (a signal, the memory limit, ...)
                    result, dead = ("crash", True, f"worker died (exit code {w.process.exitcode})"), True
            elif now - w.started > timeout:
                result, dead = ("crash", True, f"Hang: no outcome within {timeout} s"), True
            if result is None:
                continue
            assert w.task is not None
            busy.remove(w)
            record(w.task, *result)
            if dead:
                w.kill()  # a hang or a dead worker: start a fresh one
                workers[workers.index(w)] = w = Worker(memory_mb)
            feed(w)
    for w in workers:
        w.conn.send(None)
    columns = ("mutations", "ok", "refused", "refused, file not named", "crash")
    print("reader".ljust(20) + "".join(c.rjust(14) for c in ("mutations", "ok", "refused", "(unnamed)", "crashes")))
    for name in names:
        print(name.ljust(20) + "".join(str(counts[name][c]).rjust(14) for c in columns))
    return 1 if any(counts[n]["crash"] for n in names) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-reader", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reader", action="append", choices=sorted(READERS), help="default: every reader")
    parser.add_argument("-j", "--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per input")
    parser.add_argument("--memory-mb", type=int, default=4096, help="address-space limit per worker")
    parser.add_argument("--out", type=Path, default=Path("fuzz-crashes"))
    parser.add_argument("--replay", type=int, help="run one mutation seed in this process and print its outcome")
    args = parser.parse_args()
    names = args.reader or list(READERS)
    if args.replay is not None:
        from tests.fuzz.campaign import one

        for name in names:
            result = one(name, args.replay, int(args.timeout))
            print(f"{name} seed {args.replay}: {result.kind}\n{result.detail}")
        return 0
    return run(names, args.per_reader, args.seed, args.jobs, args.timeout, args.memory_mb, args.out)


if __name__ == "__main__":
    sys.exit(main())
