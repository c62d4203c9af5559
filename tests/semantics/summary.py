"""Run the semantics suite without pytest: pass / xfail / fail / xpass per model, and optionally rewrite
expected_failures.toml from the run.

    python -m tests.semantics.summary                       # counts per model, 2 processes
    python -m tests.semantics.summary --cases               # also one line per run that does not pass
    python -m tests.semantics.summary --write-expectations  # list every failing run as an xfail

It judges each run by the `harness.check_run` the pytest tests call, so its counts are pytest's.  Exit status 1
when a run fails unlisted or passes while listed, as `pytest tests/semantics` would.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence

from tests.semantics import harness
from tests.semantics.harness import Run

OUTCOMES = ("pass", "xfail", "fail", "xpass")


def run_model(model_runs: list[Run]) -> list[tuple[Run, bool, str]]:
    """Every run of one model, in one process (the build is shared)."""
    return [(run, *harness.outcome(run)) for run in model_runs]


def judge(passed: bool, listed: str | None) -> str:
    if passed:
        return "xpass" if listed is not None else "pass"
    return "xfail" if listed is not None else "fail"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.semantics.summary", description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=2, help="processes (2)")
    parser.add_argument("--cases", action="store_true", help="list every run that does not pass")
    parser.add_argument("--write-expectations", action="store_true", help="rewrite expected_failures.toml")
    args = parser.parse_args(argv)
    by_model: dict[str, list[Run]] = defaultdict(list)
    for run in harness.runs():
        by_model[run.model].append(run)
    start = time.monotonic()
    if args.jobs <= 1:
        done = [run_model(r) for r in by_model.values()]
    else:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            done = pool.map(run_model, list(by_model.values()), chunksize=1)
    listed = harness.expectations()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    lines = []
    failures = {}
    for results in done:
        for run, passed, reason in results:
            verdict = judge(passed, listed.get(run.id))
            counts[run.model][verdict] += 1
            if not passed:
                failures[run.id] = reason
            if verdict in ("fail", "xpass") or (args.cases and verdict != "pass"):
                lines.append(f"- `{run.id}` **{verdict}**: {reason or listed.get(run.id, '')}")
    print(f"| model | {' | '.join(OUTCOMES)} |")
    print("|---" * (len(OUTCOMES) + 1) + "|")
    total: Counter[str] = Counter()
    for model, c in counts.items():
        total.update(c)
        print(f"| {model} | {' | '.join(str(c[o]) for o in OUTCOMES)} |")
    print(f"| **total** | {' | '.join(str(total[o]) for o in OUTCOMES)} |")
    if lines:
        print("\n" + "\n".join(lines))
    print(f"\n{sum(total.values())} runs in {time.monotonic() - start:.0f} s", file=sys.stderr)
    if args.write_expectations:
        harness.write_expectations(failures)
        print(f"wrote {harness.EXPECTATIONS} ({len(failures)} xfails)", file=sys.stderr)
    return 1 if total["fail"] or total["xpass"] else 0


if __name__ == "__main__":
    sys.exit(main())
