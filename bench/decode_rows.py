"""`python -m bench.decode_rows`: where SmolLM2-135M's served decode step spends its time, by cohort rows.

What and why: sixteen concurrent streams give eight times one stream's tokens/s only if a 16-row decode
step costs at most twice a 1-row step.  This opens the package `bench.serve` writes (the GGUF's Q4_1/Q8_0
blocks kept packed, or widened with `--widened`) as `loam serve` does, gives each of M rows a past of
`--past` positions, and times decode steps of all M rows through `DecoderStage.run` (the server's own
call), at one thread (the child's BLAS, OpenMP and numba threads set to 1; `--threads` sets another count),
the row counts in turn.

Each kernel the generated module calls is timed where it is called (its global name wrapped), so the
breakdown is: the packed products (`kernel_matmul_packed`) of the layers, the LM head (the one product
whose output has the vocabulary's width), the module's other kernels (its fused attention, where the
build fuses it), and what runs outside them (attention's products and softmax where the module computes
them inline, the elementwise work, Python and the stage's gather of the past).  Reported: the
median step and each part's median share, per row count, and each step's time over the 1-row step's.

    python -m bench.decode_rows                    # packed, rows 1,4,16,32, past 64
    python -m bench.decode_rows --rows 1,16 --repeats 20 --widened
    python -m bench.decode_rows --kernels --rows 1,4,8,16,32   # the compiled products alone

`--kernels` times the row kernels and the cohort kernel apart on every packed weight of the model
(random rows), each at every row count: where they cross, and what the cohort kernel's widening costs
(its time at 4 rows less what 4 more rows add).

It prints its table and writes nothing (bench/RESULTS-serve.md quotes it by hand, with the load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ROWS = (1, 4, 16, 32)
VOCAB = 49152  # SmolLM2's vocabulary: the product of this width is the LM head


def _timed_kernels(module: object, spent: dict[str, float]) -> None:
    """Wrap every `kernel_*` global of `module` so each call adds its seconds to spent[part]."""
    names = [name for name in vars(module) if name.startswith("kernel_") and callable(getattr(module, name))]
    for name in names:
        fn = getattr(module, name)

        def timed(*args: object, _fn: Callable[..., object] = fn, _name: str = name, **kwargs: object) -> object:
            start = time.perf_counter()
            out = _fn(*args, **kwargs)
            seconds = time.perf_counter() - start
            if _name == "kernel_matmul_packed" or _name == "kernel_matmul":
                width = getattr(out, "shape", (0,))[-1]
                part = "LM head" if width == VOCAB else "products"
            else:
                part = "other kernels"
            spent[part] = spent.get(part, 0.0) + seconds
            return out

        setattr(module, name, timed)


def measure(packed: bool, rows: Sequence[int], past: int, repeats: int) -> list[dict[str, float]]:
    """Median decode-step seconds and each part's, per row count, in this process."""
    from bench.serve import _package
    from loam.serve.decoder_stage import DecoderStage
    from loam.serve.kv import KvPool
    from loam.serve.package import open_package

    with tempfile.TemporaryDirectory(prefix="loam-bench-rows-") as scratch:
        folder = _package(Path(scratch) / "pkg", packed)
        package = open_package(folder)
    stage = DecoderStage(next(iter(package.stages.values())), "bench")
    spent: dict[str, float] = {}
    _timed_kernels(stage.stage.module, spent)
    cohorts = []
    for count in rows:
        pool = KvPool(stage.layers, 16, count * ((past + repeats) // 16 + 4))
        seqs = [pool.new_sequence() for _ in range(count)]
        for r, seq in enumerate(seqs):
            pool.reserve(seq, past)
            stage.run(pool, [(seq, [(100 + 7 * r + j) % 40000 for j in range(past)])])
        cohorts.append((pool, seqs))
    steps: list[list[dict[str, float]]] = [[] for _ in rows]
    for i in range(repeats + 1):  # the row counts in turn, so a change in the machine's load meets each alike
        for (pool, seqs), timed in zip(cohorts, steps, strict=True):
            for seq in seqs:
                pool.reserve(seq, 1)
            spent.clear()
            start = time.perf_counter()
            stage.run(pool, [(seq, [500 + i]) for seq in seqs])
            total = time.perf_counter() - start
            if i:  # the first step at a row count warms its scratch
                timed.append({**spent, "outside kernels": total - sum(spent.values()), "step": total})
    results = []
    for count, timed in zip(rows, steps, strict=True):
        parts = {key for step in timed for key in step}
        results.append({"rows": count, **{key: statistics.median(s.get(key, 0.0) for s in timed) for key in parts}})
    return results


def kernels(rows: Sequence[int], repeats: int) -> list[dict[str, float]]:
    """Median seconds, per row count, of the compiled products over every packed weight of the package
    (each weight once, as a step multiplies it): the row kernels (`_rows_q4`, `_rows_q8`) and the cohort
    kernel (`_cohort_rows`) apart, on the same random rows, the row counts and kernels in turn."""
    import numpy as np

    from bench.serve import _package
    from loam.serve.package import open_package

    with tempfile.TemporaryDirectory(prefix="loam-bench-rows-") as scratch:
        package = open_package(_package(Path(scratch) / "pkg", True))
    stage = next(iter(package.stages.values()))
    compiled: Any = getattr(stage.module, "_CompiledKernels")  # noqa: B009 (a generated module's own class)
    table = compiled.get()
    found = [getattr(stage.weights, name) for name in dir(stage.weights) if not name.startswith("_")]
    packed = [w for w in found if isinstance(w, np.ndarray) and w.dtype.names is not None]
    rng = np.random.default_rng(0)
    xs = {(count, w.shape[1]): rng.standard_normal((count, w.shape[1] * 32)).astype(np.float32)
          for count in rows for w in packed}  # fmt: skip
    kinds = ("row kernels", "cohort kernel")
    spent: dict[tuple[int, str], list[float]] = {(count, kind): [] for count in rows for kind in kinds}
    for i in range(repeats + 1):
        for count in rows:
            for kind in kinds:
                total = 0.0
                for w in packed:
                    form = compiled.form(w)
                    q8 = len(form) == 2
                    x = xs[(count, w.shape[1])]
                    out = np.empty((count, w.shape[0]), np.float32)
                    start = time.perf_counter()
                    if kind == "row kernels":
                        table["_rows_q8" if q8 else "_rows_q4"](*form, x, out)
                    else:
                        table["_cohort_rows"](*form, *((form[1],) if q8 else ()), x, out, q8)
                    total += time.perf_counter() - start
                if i:
                    spent[(count, kind)].append(total)
    return [{"rows": c, **{k: statistics.median(spent[(c, k)]) for k in kinds}} for c in rows]


def kernels_table(results: list[dict[str, float]], load: str) -> str:
    lines = [f"load average {load}", "| rows | row kernels ms | cohort kernel ms |", "|---|---|---|"]
    lines += [f"| {int(r['rows'])} | {r['row kernels'] * 1e3:.1f} | {r['cohort kernel'] * 1e3:.1f} |" for r in results]
    return "\n".join(lines)


def table(results: list[dict[str, float]], load: str) -> str:
    parts = ["products", "LM head", "other kernels", "outside kernels"]
    lines = [
        f"load average {load}",
        "| rows | step ms | x 1 row | " + " | ".join(f"{p} ms" for p in parts) + " |",
        "|---" * (3 + len(parts)) + "|",
    ]
    one = results[0]["step"]
    for r in results:
        cells = [f"{r.get(p, 0.0) * 1e3:.1f}" for p in parts]
        head = f"| {int(r['rows'])} | {r['step'] * 1e3:.1f} | {r['step'] / one:.2f} | "
        lines.append(head + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decode_rows", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="cohort rows, comma-separated")
    parser.add_argument("--past", type=int, default=64, help="positions each row holds before the steps")
    parser.add_argument("--repeats", type=int, default=10, help="timed steps per row count")
    parser.add_argument("--widened", action="store_true", help="the weights widened to float32 (default packed)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS, OpenMP and numba threads (default 1)")
    parser.add_argument("--kernels", action="store_true", help="time the compiled products alone, every weight")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    if args.child:
        found = (
            kernels(rows, args.repeats) if args.kernels else measure(not args.widened, rows, args.past, args.repeats)
        )
        print(json.dumps(found))
        return 0
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[name] = str(args.threads)
    command = [sys.executable, "-m", "bench.decode_rows", "--child", *(argv if argv is not None else sys.argv[1:])]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"bench.decode_rows: the child failed:\n{done.stderr}")
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    found = json.loads(done.stdout.strip().splitlines()[-1])
    print(kernels_table(found, load) if args.kernels else table(found, load))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
