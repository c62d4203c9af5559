"""`python -m bench.epilogues`: MiniLM's forward with its long zips compiled against the numpy zips and
onnxruntime, in one process at one thread, and where the forward's time goes on each side.

What and why: `loam.runtime.kernels.zip_compiled` runs a long float32 zip (MiniLM's bias + exact GELU
after the intermediate product) as one compiled loop where numba is installed; the same generated
module turns it off with `_CompiledZips.enabled`, which gives `_by_rows` and the numpy expression
function, so both sides are one module with the same weights.  Each round times a block of warm
forwards of each side and of onnxruntime (every graph optimisation on), interleaved so that the
machine's load falls on all three alike; reported are the medians of the rounds' medians, their
ratios to onnxruntime, the share of the forward the `zip_rows` calls take on each side (each call
timed on its own in one more pass), the load average, and with `--profile` each side's forward
under cProfile: the functions that take the most time of their own.

    OPENBLAS_NUM_THREADS=1 python -m bench.epilogues [--case NAME] [--rounds N] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
from collections.abc import Sequence

from bench.cases import all_cases
from bench.norms import switched_medians
from bench.run import Built, blas_threads, build_case, loam_call

CASES = ("minilm-b8-s128",)


def measure(built: Built, rounds: int) -> dict[str, float]:
    """The medians (seconds) of the numpy-zip module, the compiled one and onnxruntime, interleaved."""
    return switched_medians(built, "_CompiledZips", "zip_rows", "zips", rounds)


def profile(built: Built, compiled: bool, forwards: int = 10, top: int = 10) -> list[str]:
    """The `top` functions by time of their own in `forwards` forwards under cProfile (ms a forward)."""
    zips = built.module._CompiledZips  # type: ignore[attr-defined]
    zips.enabled = compiled
    forward = loam_call(built)
    forward()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(forwards):
        forward()
    profiler.disable()
    zips.enabled = True
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]  # pstats keeps its table untyped
    total = sum(row[2] for row in stats.values()) / forwards
    lines = [f"  {'compiled' if compiled else 'numpy'} zips: {total * 1e3:.1f} ms a forward under cProfile"]
    for (_, _, name), (_, calls, own, inclusive, _) in sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]:
        lines.append(
            f"    {name:<40} {calls // forwards:4d} calls  own {own / forwards * 1e3:7.2f} ms  "
            f"with callees {inclusive / forwards * 1e3:7.2f} ms ({own / forwards / total:.0%})"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.epilogues", description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=CASES, help="only this case (repeatable)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds per case")
    parser.add_argument("--profile", action="store_true", help="also each side's forward under cProfile")
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
                f"{case.name}: onnxruntime {r['onnxruntime'] * 1e3:.2f} ms; numpy zips {r['numpy'] * 1e3:.2f} ms "
                f"({r['numpy'] / r['onnxruntime']:.2f}x), compiled {r['compiled'] * 1e3:.2f} ms "
                f"({r['compiled'] / r['onnxruntime']:.2f}x); compiled/numpy {r['compiled'] / r['numpy']:.3f}; "
                f"{int(r['zips calls'])} long zips: {r['numpy zips'] * 1e3:.2f} ms "
                f"({r['numpy zips'] / r['numpy']:.0%} of the numpy forward) -> {r['compiled zips'] * 1e3:.2f} ms "
                f"({r['compiled zips'] / r['compiled']:.0%}); load {load:.1f}"
            )
            if args.profile:
                for compiled in (False, True):
                    print("\n".join(profile(built, compiled)))
                print(f"  load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
