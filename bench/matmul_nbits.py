"""`python -m bench.matmul_nbits`: Loam's `kernel.matmul_nbits` against onnxruntime's MatMulNBits.

What and why: a model onnxruntime's quantizer (or onnxruntime-genai's builder) wrote keeps its linear
layers as com.microsoft MatMulNBits, 4-bit blocks along K packed two to a byte; Loam's kernel
(`loam/runtime/kernels/quantized.py`) keeps B packed too.  A decode step multiplies one row (a few,
batched) by every such weight; a prefill, tens of rows.  This times the kernel itself, called as the
generated module calls it, against an onnxruntime session holding the one MatMulNBits node (CPU
provider, every graph optimisation on) at accuracy_level 0 (products in float32, what Loam computes)
and 4 (A quantized to int8 per block, integer dot products: faster, less exact), on the same inputs.

Each thread count runs in a child process of its own, started with OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS and NUMBA_NUM_THREADS set to it and onnxruntime's intra_op_num_threads the same (one
inter-op thread).  Loam is timed with its compiled kernels (numba, where installed) and with
`set_compiled(False)` (the numpy kernel a module runs where numba is absent).  Reported: median
times of each, the ratio Loam/onnxruntime (accuracy_level 0) and the largest difference from
onnxruntime's accuracy_level 0 output relative to its largest magnitude (a guard against timing a wrong product).

    python -m bench.matmul_nbits             # writes bench/RESULTS-matmul-nbits.md
    python -m bench.matmul_nbits --quick     # fewer repeats, nothing written
    python -m bench.matmul_nbits --output FILE
    python -m bench.matmul_nbits --int8 --rows 1,16 --threads 1   # prints float32 against int8 products

`--int8` times the kernel's integer products too (`int8=1`, what `int8_activations` and accuracy_level 4
build, compiled), beside its float32 ones, and gives their largest difference from onnxruntime's
accuracy_level 4 output relative to its largest magnitude; it prints its table and writes nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS-matmul-nbits.md"
SHAPES = ((576, 1536), (1536, 576))  # K x N: SmolLM2-135M's up projection and down projection
ROWS = (1, 64)
THREADS = (1, 2)
BITS, BLOCK = 4, 32
NOTES_HEADING = "## Notes"

CHILD = r"""
import json, statistics, sys, time
import numpy as np
import onnx, onnxruntime as ort
from onnx import helper, numpy_helper
from loam.runtime.kernels.compiled import set_compiled
from loam.runtime.kernels.quantized import kernel_matmul_nbits
spec = json.loads(sys.argv[1])
bits, block, threads = spec["bits"], spec["block"], spec["threads"]
rng = np.random.default_rng(0)
def timed(call):
    call()
    times, spent = [], 0.0
    while len(times) < spec["repeats"] or (spent < spec["budget"] and len(times) < 1000):
        start = time.perf_counter(); call(); took = time.perf_counter() - start
        times.append(took); spent += took
    return statistics.median(times)
def session(k, n, weights, level):
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zero_points"], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=bits, block_size=block, accuracy_level=level)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", onnx.TensorProto.FLOAT, ["m", k])],
                              [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, ["m", n])],
                              [numpy_helper.from_array(v, name) for name, v in weights.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
rows_out = []
for k, n in spec["shapes"]:
    nb = -(-k // block)
    weights = {"B": rng.integers(0, 256, (n, nb, block * bits // 8), dtype=np.uint8),
               "scales": (rng.random((n, nb)) * 0.02 + 0.005).astype(np.float32),
               "zero_points": rng.integers(0, 256, (n, -(-nb * bits // 8)), dtype=np.uint8)}
    feeds, got, shape_rows = {}, {}, []
    for m in spec["rows"]:  # Loam first: onnxruntime's idle pool threads spin, taking a core from BLAS's
        a = feeds[m] = rng.standard_normal((m, k)).astype(np.float32)
        def loam():
            return kernel_matmul_nbits(a, weights["B"], weights["scales"], weights["zero_points"],
                                       k=k, n=n, bits=bits, block_size=block, present=1)
        def loam_int8():
            return kernel_matmul_nbits(a, weights["B"], weights["scales"], weights["zero_points"],
                                       k=k, n=n, bits=bits, block_size=block, present=1, int8=1)
        row = {"k": k, "n": n, "m": m, "threads": threads}
        for name, compiled in (("compiled", True), ("numpy", False)):
            set_compiled(compiled)
            got[m, name] = loam()
            row[name] = timed(loam)
        if spec["int8"]:
            set_compiled(True)
            got[m, "int8"] = loam_int8()
            row["int8"] = timed(loam_int8)
        shape_rows.append(row)
    sessions = {level: session(k, n, weights, level) for level in (0, 4)}
    for row in shape_rows:
        a = feeds[row["m"]]
        want = sessions[0].run(None, {"A": a})[0]
        for name in ("compiled", "numpy"):
            row[name + "_err"] = float(np.abs(got[row["m"], name] - want).max() / np.abs(want).max())
        if spec["int8"]:
            want4 = sessions[4].run(None, {"A": a})[0]
            row["int8_err"] = float(np.abs(got[row["m"], "int8"] - want4).max() / np.abs(want4).max())
            row["float_err4"] = float(np.abs(got[row["m"], "compiled"] - want4).max() / np.abs(want4).max())
        for level, s in sessions.items():
            row[f"ort{level}"] = timed(lambda s=s: s.run(None, {"A": a}))
    del sessions
    rows_out += shape_rows
print(json.dumps(rows_out))
"""


def measure(threads: int, repeats: int, budget: float, rows: Sequence[int] = ROWS, int8: bool = False) -> list[dict]:
    """Every shape and row count at `threads`, in a child process whose thread settings are its own."""
    spec = {"shapes": SHAPES, "rows": list(rows), "threads": threads, "bits": BITS, "block": BLOCK}
    spec |= {"repeats": repeats, "budget": budget, "int8": int8}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[name] = str(threads)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(spec)], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"the {threads}-thread child failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _counts(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v)


def table(rows: list[dict]) -> str:
    head = (
        "| K x N | rows | threads | Loam compiled ms | Loam numpy ms | ORT acc 0 ms | ORT acc 4 ms "
        "| compiled / ORT 0 | numpy / ORT 0 | compiled / ORT 4 | rel. diff |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['k']} x {r['n']} | {r['m']} | {r['threads']} | {r['compiled'] * 1e3:.3f} | {r['numpy'] * 1e3:.3f} "
        f"| {r['ort0'] * 1e3:.3f} | {r['ort4'] * 1e3:.3f} | {r['compiled'] / r['ort0']:.2f}x "
        f"| {r['numpy'] / r['ort0']:.2f}x | {r['compiled'] / r['ort4']:.2f}x "
        f"| {max(r['compiled_err'], r['numpy_err']):.1e} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def int8_table(rows: list[dict]) -> str:
    """The float32 products against the integer ones (`--int8`), with their distances from accuracy_level 4."""
    head = (
        "| K x N | rows | threads | Loam float32 ms | Loam int8 ms | int8 / float32 | ORT acc 4 ms "
        "| float32 rel. diff from ORT 4 | int8 rel. diff from ORT 4 |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['k']} x {r['n']} | {r['m']} | {r['threads']} | {r['compiled'] * 1e3:.3f} | {r['int8'] * 1e3:.3f} "
        f"| {r['int8'] / r['compiled']:.2f}x | {r['ort4'] * 1e3:.3f} | {r['float_err4']:.1e} | {r['int8_err']:.1e} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.matmul_nbits", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats; write nothing")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--int8", action="store_true", help="time the integer products too; print, write nothing")
    parser.add_argument("--rows", type=_counts, default=ROWS, help="rows of A, comma-separated (default 1,64)")
    parser.add_argument("--threads", type=_counts, default=THREADS, help="thread counts (default 1,2)")
    args = parser.parse_args(argv)
    repeats, budget = (5, 0.05) if args.quick else (20, 0.5)
    if args.int8:
        print(int8_table([row for t in args.threads for row in measure(t, repeats, budget, args.rows, True)]))
        return 0
    rows = [row for threads in args.threads for row in measure(threads, repeats, budget, args.rows)]
    text = table(rows)
    print(text)
    if not args.quick:
        when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        old = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        notes = old[old.index(NOTES_HEADING) :] if NOTES_HEADING in old else ""  # hand-written, kept
        args.output.write_text(
            "# MatMulNBits: Loam's `kernel.matmul_nbits` against onnxruntime\n\n"
            f"Written by `python -m bench.matmul_nbits` on {when}; {BITS}-bit blocks of {BLOCK} with packed zero "
            f"points, float32 A; medians of at least {repeats} calls (and {budget} s) each, one child process per "
            "thread count.\n\n" + text + ("\n" + notes if notes else ""),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
