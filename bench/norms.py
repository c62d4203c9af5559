"""`python -m bench.norms`: the transformer rows with LayerNorm compiled against the numpy LayerNorm and
onnxruntime, in one process at one thread.

What and why: `loam.runtime.kernels.norm_compiled` runs a float32 LayerNorm in one compiled pass per
row where numba is installed; the same generated module turns it off with `_CompiledNorms.enabled`,
which gives the numpy kernel (`layer_norm`), so both sides are one module with the same weights.  Each
round times a block of warm forwards of each side and of onnxruntime (every graph optimisation on),
interleaved so that the machine's load falls on all three alike; reported are the medians of the
rounds' medians, their ratios to onnxruntime, the share of the forward the LayerNorm calls take on
each side (each call timed on its own in one more pass) and the load average.

    OPENBLAS_NUM_THREADS=1 python -m bench.norms [--case NAME] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Sequence

from bench.cases import all_cases
from bench.run import Built, blas_threads, build_case, largest_difference, loam_call, ort_call, ort_session

CASES = ("gpt2-decode-p64", "gpt2-prefill-s64", "minilm-b8-s128")


def block_median(call: Callable[[], object], calls: int) -> float:
    """The median of `calls` timed warm calls."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def piece_share(built: Built, piece: str, calls: int) -> tuple[float, int]:
    """Seconds a forward spends in the module's function `piece` (the median over `calls` forwards) and its
    calls a forward."""
    module = built.module
    inner = getattr(module, piece)
    spent: list[float] = []

    def timed(*args: object) -> object:
        start = time.perf_counter()
        out = inner(*args)
        spent.append(time.perf_counter() - start)
        return out

    setattr(module, piece, timed)
    forward = loam_call(built)
    try:
        totals = []
        for _ in range(calls):
            spent.clear()
            forward()
            totals.append(sum(spent))
        count = len(spent)
    finally:
        setattr(module, piece, inner)
    return statistics.median(totals), count


def switched_medians(built: Built, family: str, piece: str, label: str, rounds: int) -> dict[str, float]:
    """The medians (seconds) of the module with its compiled `family` (a class with an `enabled` switch) off
    ("numpy") and on ("compiled"), and onnxruntime, interleaved; then each side's time in `piece` a forward
    ("numpy LABEL", "compiled LABEL") and its calls ("LABEL calls")."""
    switch = getattr(built.module, family)
    forward = loam_call(built)
    ort = ort_call(built, ort_session(built, 1))
    switch.enabled = True
    assert largest_difference(forward(), ort()) < 1e-3, "a wrong module is not timed"
    calls = max(5, min(200, int(0.2 / max(block_median(forward, 5), 1e-6))))
    sides: dict[str, list[float]] = {"numpy": [], "compiled": [], "onnxruntime": []}
    for _ in range(rounds):
        for side in sides:
            switch.enabled = side == "compiled"
            sides[side].append(block_median(ort if side == "onnxruntime" else forward, calls))
    result = {side: statistics.median(times) for side, times in sides.items()}
    for side in ("numpy", "compiled"):
        switch.enabled = side == "compiled"
        result[f"{side} {label}"], result[f"{label} calls"] = piece_share(built, piece, calls)
    switch.enabled = True
    return result


def measure(built: Built, rounds: int) -> dict[str, float]:
    """The medians (seconds) of the numpy-LayerNorm module, the compiled one and onnxruntime, interleaved."""
    return switched_medians(built, "_CompiledNorms", "layer_norm_rows", "layernorm", rounds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.norms", description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=CASES, help="only this case (repeatable)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds per case")
    args = parser.parse_args(argv)
    names = args.case or CASES
    with blas_threads(1):
        for case in all_cases():
            if case.name not in names:
                continue
            built = build_case(case)
            r = measure(built, args.rounds)
            load = os.getloadavg()[0]
            print(
                f"{case.name}: onnxruntime {r['onnxruntime'] * 1e3:.3f} ms; numpy LayerNorm {r['numpy'] * 1e3:.3f} ms "
                f"({r['numpy'] / r['onnxruntime']:.2f}x), compiled {r['compiled'] * 1e3:.3f} ms "
                f"({r['compiled'] / r['onnxruntime']:.2f}x); compiled/numpy {r['compiled'] / r['numpy']:.3f}; "
                f"{int(r['layernorm calls'])} LayerNorms: {r['numpy layernorm'] * 1e3:.3f} ms "
                f"({r['numpy layernorm'] / r['numpy']:.0%} of the numpy forward) -> "
                f"{r['compiled layernorm'] * 1e3:.3f} ms "
                f"({r['compiled layernorm'] / r['compiled']:.0%}); load {load:.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
