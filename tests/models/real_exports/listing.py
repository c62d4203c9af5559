"""The real exports' cases run without pytest: their outcomes as the conformance summary's "real exports"
table, and expected_failures.toml written from them.

    python -m tests.models.real_exports                       # the table (numpy and WGSL builds)
    python -m tests.models.real_exports --write-expectations  # also rewrite expected_failures.toml

A case's outcome is judged as pytest judges it: `pass`; `xfail` (listed, and stopped; "listed reason
stale" where what stops it now is not what the listing says); `fail` (stopped, not listed) or `xpass`
(listed, yet it passes), the two that fail the run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from tests.models.real_exports.exports import EXPECTATIONS, Outcome, all_exports, expectations, host_counts, outcome


def run_all(wgsl: bool = True, pattern: str = "") -> list[Outcome]:
    """Every case of every installed export (whose id contains `pattern`), each export built once."""
    return [
        outcome(export, run, wgsl) for export in all_exports() for run in export.runs if pattern in export.case_id(run)
    ]


def judged(result: Outcome) -> str:
    listed = expectations().get(result.export.case_id(result.run))
    if result.passed:
        return "xpass" if listed is not None else "pass"
    return "xfail" if listed is not None else "fail"


def stale(result: Outcome) -> bool:
    """Whether the case is listed, and stopped, but by something else than the listing says (a feature
    landed and moved the case on to its next refusal: rewrite the listing)."""
    listed = expectations().get(result.export.case_id(result.run))
    return listed is not None and not result.passed and listed != result.stopped_by


def built_cell(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "no")


def host_cell(nodes: Sequence[str]) -> str:
    """The host nodes of a WGSL build, counted by operator: `20 nodes on the host (NonZero ×12, Range ×2)`."""
    counts = sorted(host_counts(nodes).items(), key=lambda kv: (-kv[1], kv[0]))
    each = ", ".join(f"{op} ×{n}" for op, n in counts)
    return f"{len(nodes)} nodes on the host ({each})"


def quoted(text: str) -> str:
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def table(results: Sequence[Outcome]) -> list[str]:
    """The "real exports" table: one row per case (where numpy's module builds and WGSL's is refused, the
    refusal too)."""
    lines = [
        "| model file | family | case | builds (numpy / wgsl) | extents tried | outcome "
        "| max abs error vs onnxruntime, or what stops it |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.passed:
            detail = "refused as it must (ShapeError)" if r.run.wrong is not None else f"{r.max_error:.2e}"
        else:
            detail = quoted(r.stopped_by)
        if r.numpy_builds and r.wgsl_refusal:
            detail += f"; WGSL: {quoted(r.wgsl_refusal)}"
        if r.wgsl_host:
            detail += f"; WGSL (--host-fallback): {host_cell(r.wgsl_host)}"
        built = f"{built_cell(r.numpy_builds)} / {built_cell(r.wgsl_builds)}"
        lines.append(
            f"| {r.export.name}.onnx | {r.export.family} | {r.run.label} | {built} | {r.run.extents} "
            f"| {judged(r)}{' (listed reason stale)' if stale(r) else ''} | {detail} |"
        )
    return lines


def write_expectations(results: Sequence[Outcome]) -> None:
    """expected_failures.toml: each case that does not pass, with the first line of what stops it."""
    out = [
        "# Real-export cases that do not (yet) match onnxruntime, with the first line of what stops each:",
        "# strict pytest xfails.  Written by `python -m tests.models.real_exports --write-expectations`.",
        "",
        "[xfail]",
    ]
    out += [
        f"{json.dumps(r.export.case_id(r.run))} = {json.dumps(r.stopped_by, ensure_ascii=False)}"
        for r in results
        if not r.passed
    ]
    EXPECTATIONS.write_text("\n".join(out) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.models.real_exports", description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="pattern", default="", help="only cases whose id contains this text")
    parser.add_argument("--no-wgsl", action="store_true", help="do not try the WGSL build")
    parser.add_argument("--write-expectations", action="store_true", help="rewrite expected_failures.toml")
    args = parser.parse_args(argv)
    if args.write_expectations and args.pattern:
        parser.error("--write-expectations needs every case (no -k)")
    start = time.monotonic()
    results = run_all(not args.no_wgsl, args.pattern)
    print("\n".join(table(results)))
    print(f"\n{len(results)} cases in {time.monotonic() - start:.0f} s", file=sys.stderr)
    if args.write_expectations:
        write_expectations(results)
        print(f"wrote {EXPECTATIONS}", file=sys.stderr)
    return 1 if any(judged(r) in ("fail", "xpass") for r in results) else 0
