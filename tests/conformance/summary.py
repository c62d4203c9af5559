"""Run the conformance suites without pytest and print pass / xfail / refused counts per operator and suite.

    python -m tests.conformance.summary                       # every suite, 2 processes
    python -m tests.conformance.summary node operators -j 2   # some suites
    python -m tests.conformance.summary --cases               # also one line per case that is not a pass
    python -m tests.conformance.summary --write-expectations  # rewrite expected_failures.toml from this run
    python -m tests.conformance.summary --write-manifest      # rewrite node_cases.json from onnx
    python -m tests.conformance.summary --write-docs          # put the summary into docs/conformance.md
    python -m tests.conformance.summary --backend wgsl        # the same cases through the WGSL module
    python -m tests.conformance.summary real_exports          # only the real exports' table

With every suite (or `real_exports` named) it also runs the real speech and vision exports
(tests/models/real_exports) and gives their table: each model file, its family, whether it builds for
numpy and WGSL, the extents tried, and the largest difference from onnxruntime or the first line of
what stops it.

It runs the same `harness.run_case` the pytest tests judge by, so its counts are pytest's.  Exit status 1
when any case fails (a `fail` or an `xpass`), as `pytest tests/conformance` would.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.conformance import harness
from tests.conformance.harness import OUTCOMES, SUITES, Case, Result

DOCS = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"
DOCS_BEGIN = "<!-- summary: begin (written by `python -m tests.conformance.summary --write-docs`) -->"
DOCS_END = "<!-- summary: end -->"
# The folder suites hold whole models: per-case lines instead.
PER_OPERATOR_SUITES = ("node", harness.DECLARED, "operators")
REAL_EXPORTS = "real_exports"
"""Not a conformance suite: the real exports' cases (tests/models/real_exports), with a table of their own."""


def run_all(selected: Sequence[Case], jobs: int, backend: str = "numpy") -> list[Result]:
    """Every case's Result, over `jobs` processes (node cases are generated once, before forking; the
    WGSL backend's processes are spawned: a WebGPU device does not survive a fork)."""
    run = functools.partial(harness.run_case, backend=backend)
    if any(c.suite in ("node", harness.DECLARED) for c in selected):
        harness._collected_node_cases()
    if jobs <= 1:
        return [run(c) for c in selected]
    ctx = multiprocessing.get_context("spawn" if backend == "wgsl" else "fork")
    # Small chunks keep both processes busy to the end; a fresh process now and then bounds memory.
    with ctx.Pool(jobs, maxtasksperchild=400) as pool:
        return list(pool.imap(run, selected, chunksize=4))


def table(rows: Iterable[tuple[str, Counter[str]]], title: str) -> list[str]:
    """A markdown table of outcome counts, one row per key, and a total row."""
    rows = list(rows)
    lines = [f"| {title} | " + " | ".join(OUTCOMES) + " | total |", "|---" * (len(OUTCOMES) + 2) + "|"]
    total: Counter[str] = Counter()
    for key, counts in rows:
        total.update(counts)
        lines.append(f"| {key} | " + " | ".join(str(counts[o]) for o in OUTCOMES) + f" | {sum(counts.values())} |")
    lines.append("| **total** | " + " | ".join(str(total[o]) for o in OUTCOMES) + f" | {sum(total.values())} |")
    return lines


def report(results: Sequence[Result], show_cases: bool) -> list[str]:
    """The summary: totals per suite, then per-operator tables, then (optionally) the cases not passing."""
    by_suite: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        by_suite[r.case.suite][r.outcome] += 1
    lines = ["### Totals", ""]
    lines += table(((s, by_suite[s]) for s in SUITES if s in by_suite), "suite")
    for suite in PER_OPERATOR_SUITES:
        per_op: dict[str, Counter[str]] = defaultdict(Counter)
        for r in results:
            if r.case.suite == suite:
                per_op[r.case.op][r.outcome] += 1
        if per_op:
            lines += ["", f"### {suite}: per operator", ""]
            lines += table(sorted(per_op.items(), key=lambda kv: kv[0].lower()), "operator")
    listed = [r for r in results if show_cases and r.outcome != "pass"]
    listed += [r for r in results if r.outcome in ("fail", "xpass") and not show_cases]
    if listed:
        lines += ["", "### Cases", ""]
        lines += [f"- `{r.case.id}` **{r.outcome}**: {r.detail}" for r in listed]
    return lines


def toml_string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


def write_expectations(results: Sequence[Result], selected_suites: Sequence[str], backend: str = "numpy") -> None:
    """Rewrite expected_failures.toml (the WGSL backend: expected_failures_wgsl.toml, with only the entries
    the numpy module's listing lacks): every case of the run that fails gets its entry; suites not run
    keep theirs."""
    base = harness.expectations("numpy") if backend == "wgsl" else {"xfail": {}, "refused": {}}
    old = harness.expectations(backend)
    entries: dict[str, dict[str, dict[str, str]]] = {"xfail": defaultdict(dict), "refused": defaultdict(dict)}
    for table_name, listed in old.items():
        for case_id, reason in listed.items():
            suite, name = case_id.split("/", 1)
            if suite not in selected_suites and base[table_name].get(case_id) != reason:
                entries[table_name][suite][name] = reason
    for r in results:
        if r.entry is not None:
            kind, reason = r.entry
            if base[kind].get(r.case.id) != reason:
                entries[kind][r.case.suite][r.case.name] = reason
    out = [
        "# Conformance cases that do not (yet) do what harness.check_case demands, with the first line of why.",
        "# Written by `python -m tests.conformance.summary --write-expectations`; review the reasons.",
        "# [xfail.<suite>]: strict pytest xfails (the case must still fail).",
        "# [refused.<suite>]: the build must refuse the case with a LoamError (an UnsupportedError for a",
        "#   supported operator, e.g. an attribute or opset meaning Loam does not restate, or a refusal",
        "#   that names something other than the unsupported operator).",
    ]
    for table_name in ("xfail", "refused"):
        for suite in SUITES:
            listed = entries[table_name].get(suite)
            if not listed:
                continue
            out += ["", f"[{table_name}.{toml_string(suite)}]"]
            out += [f"{toml_string(name)} = {toml_string(listed[name])}" for name in sorted(listed)]
    if backend == "wgsl":
        command = "python -m tests.conformance.summary --backend wgsl --write-expectations"
        out[1] = f"# Written by `{command}`; review the reasons."
        out[2:2] = [
            "# Cases listed in expected_failures.toml for the same reason are not repeated here.",
            "# The WGSL backend's listing: what it refuses or fails beyond expected_failures.toml.",
        ]
    path = harness.WGSL_EXPECTATIONS if backend == "wgsl" else harness.EXPECTATIONS
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def manifest_text(manifest: dict[str, Any]) -> str:
    """node_cases.json with one line per case (small diffs when onnx adds cases)."""
    head = {k: v for k, v in manifest.items() if k != "cases"}
    lines = [json.dumps(head, sort_keys=True)[:-1] + ', "cases": {']
    names = sorted(manifest["cases"])
    for i, name in enumerate(names):
        comma = "," if i < len(names) - 1 else ""
        lines.append(f" {json.dumps(name)}: {json.dumps(manifest['cases'][name], sort_keys=True)}{comma}")
    return "\n".join([*lines, "}}"]) + "\n"


def write_docs(lines: Sequence[str]) -> None:
    """Replace the summary section of docs/conformance.md."""
    text = DOCS.read_text(encoding="utf-8") if DOCS.is_file() else f"# Conformance\n\n{DOCS_BEGIN}\n{DOCS_END}\n"
    head, _, rest = text.partition(DOCS_BEGIN)
    _, _, tail = rest.partition(DOCS_END)
    DOCS.write_text(head + DOCS_BEGIN + "\n\n" + "\n".join(lines) + "\n\n" + DOCS_END + tail, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.summary", description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", help=f"suites to run: {', '.join((*SUITES, REAL_EXPORTS))} (default: all)")
    parser.add_argument("-j", "--jobs", type=int, default=min(2, harness.cpu_count()), help="processes (2)")
    parser.add_argument("-k", dest="pattern", default="", help="only cases whose id contains this text")
    parser.add_argument("--cases", action="store_true", help="list every case that does not pass")
    parser.add_argument("--write-expectations", action="store_true", help="rewrite expected_failures.toml")
    parser.add_argument("--write-manifest", action="store_true", help="rewrite node_cases.json and stop")
    parser.add_argument("--write-docs", action="store_true", help="put the summary into docs/conformance.md")
    parser.add_argument(
        "--backend", choices=harness.BACKENDS, default="numpy", help="the module the cases run through (numpy)"
    )
    args = parser.parse_args(argv)
    if args.write_manifest:
        manifest = harness.node_manifest()
        harness.NODE_MANIFEST.write_text(manifest_text(manifest), encoding="utf-8")
        print(f"wrote {harness.NODE_MANIFEST} ({manifest['count']} node cases, onnx {manifest['onnx']})")
        return 0
    suites = args.suites or [*SUITES, REAL_EXPORTS]
    unknown = sorted(set(suites) - {*SUITES, REAL_EXPORTS})
    if unknown:
        parser.error(f"unknown suite(s) {', '.join(unknown)}; the suites are {', '.join((*SUITES, REAL_EXPORTS))}")
    conformance = [s for s in suites if s != REAL_EXPORTS]
    selected = [c for s in conformance for c in harness.cases(s) if args.pattern in c.id]
    if args.write_expectations and args.pattern:
        parser.error("--write-expectations needs whole suites (no -k)")
    start = time.monotonic()
    results = run_all(selected, args.jobs, args.backend)
    failed = any(r.outcome in ("fail", "xpass") for r in results)
    real: list[str] = []
    if REAL_EXPORTS in suites:
        real, real_failed = real_exports_report(args.pattern)
        failed = failed or real_failed

    def joined(conformance_lines: list[str]) -> list[str]:
        return [*conformance_lines, *([""] if conformance_lines and real else []), *real]

    print("\n".join(joined(report(results, args.cases) if conformance else [])))
    print(f"\n{len(results)} conformance cases in {time.monotonic() - start:.0f} s", file=sys.stderr)
    if args.write_expectations and conformance:
        write_expectations(results, conformance, args.backend)
        print(f"wrote {harness.WGSL_EXPECTATIONS if args.backend == 'wgsl' else harness.EXPECTATIONS}", file=sys.stderr)
    if args.write_docs:
        write_docs(joined(report(results, False) if conformance else []))
        print(f"wrote {DOCS}", file=sys.stderr)
    return 1 if failed else 0


def real_exports_report(pattern: str) -> tuple[list[str], bool]:
    """The "real exports" table (every case run now, each export built once for numpy and for WGSL), and
    whether any case fails as pytest would judge it (a `fail` or an `xpass`)."""
    from tests.models.real_exports import listing

    outcomes = listing.run_all(wgsl=True, pattern=pattern)
    failed = any(listing.judged(o) in ("fail", "xpass") for o in outcomes)
    return ["### Real exports", "", *listing.table(outcomes)], failed


if __name__ == "__main__":
    sys.exit(main())
