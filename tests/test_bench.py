"""`python -m bench --quick` runs end to end: every case builds, runs on both sides and gets a row.

No timing is asserted (this machine's numbers are not a property of the code): each case must have
its warm-forward row and its build/cold-start/memory row (from the checkpoint and from the model
file), with every number positive, the outputs of the two sides must agree (the bench would
otherwise time a wrong module), the MLP at batch 256 must have its BLAS-limit row, and (where
wgpu is installed) each case its WGSL-module row.
A quick run writes no RESULTS.md.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cases import BLAS_CASE, all_cases
from bench.run import rows

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.xdist_group("bench")


def number(cell: str) -> float:
    return float(cell)


def test_quick_bench_reports_every_case() -> None:
    results = ROOT / "bench" / "RESULTS.md"
    before = results.read_bytes() if results.is_file() else None
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    found = rows(done.stdout)
    for case in (c for c in all_cases() if c.quick):
        assert case.name in found, f"no row for {case.name}:\n{done.stdout}"
        table_rows = found[case.name]
        warm = [r for r in table_rows if len(r) == 5]
        startup = [r for r in table_rows if len(r) == 10]
        assert len(warm) == 1 and len(startup) == 1, table_rows
        threads, loam_ms, ort_ms, ratio, diff = warm[0]
        assert int(threads) >= 1
        assert min(number(loam_ms), number(ort_ms), number(ratio)) > 0
        assert number(diff) <= 1e-3, f"{case.name}: Loam and onnxruntime differ by {diff}"
        assert all(number(cell) > 0 for cell in startup[0]), startup[0]
        held = [r for r in table_rows if len(r) == 3]  # Weights: load ms, MiB viewed, MiB held
        assert len(held) == 1 and number(held[0][0]) > 0 and number(held[0][1]) + number(held[0][2]) > 0, table_rows
        work = [r for r in table_rows if len(r) == 2]  # statements per forward, of them in forward
        assert len(work) == 1 and 0 < int(work[0][1]) <= int(work[0][0]), table_rows
        if importlib.util.find_spec("wgpu") is not None:  # the WGSL module's row: it ran, and agrees
            device = [r for r in table_rows if len(r) == 9]
            assert len(device) == 1, table_rows
            dispatches, crossing, *_, wgsl_diff = device[0]
            assert int(dispatches) > 0 and int(crossing) > 0
            assert number(wgsl_diff) <= 1e-3, f"{case.name}: the WGSL and numpy modules differ by {wgsl_diff}"
    blas = [r for r in found[BLAS_CASE] if len(r) == 4]
    assert len(blas) == 1 and all(number(cell) > 0 for cell in blas[0])
    assert "Where the time goes" not in done.stdout
    assert (results.read_bytes() if results.is_file() else None) == before


def test_build_scaling_reports_each_size() -> None:
    results = ROOT / "bench" / "RESULTS-build.md"
    before = results.read_bytes() if results.is_file() else None
    done = subprocess.run(
        [sys.executable, "-m", "bench.build_scaling", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    table = [line.strip("|").split("|") for line in done.stdout.splitlines() if line.startswith("| ")]
    table = [cells for cells in table if cells[1].strip().isdigit()]  # the headers aside
    runs = [cells for cells in table if len(cells) == 6]  # the totals; the breakdown's rows have a cell per step
    assert [(cells[0].strip(), int(cells[1])) for cells in runs] == [
        ("chain", 100),
        ("chain", 200),
        ("transformer", 99),
        ("transformer", 198),
    ]
    assert all(number(cells[2]) > 0 and number(cells[3]) > 0 and number(cells[5]) >= 0 for cells in runs)
    steps = [cells for cells in table if len(cells) > 6]
    assert len(steps) == 4 and all(number(cell) >= 0 for cells in steps for cell in cells[2:])
    assert (results.read_bytes() if results.is_file() else None) == before
