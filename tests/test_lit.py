"""Run the whole lit suite (`lit -v lit/`) from pytest, so one `pytest` runs both kinds of tests.

The lit tests call the installed console scripts (`loam-opt`, `loam-translate`, `loam`) and
`filecheck`, found next to this interpreter; `lit/lit.cfg.py` puts that folder first on PATH.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COUNT = re.compile(
    r"^\s*(Passed|Failed|Unresolved|Timed Out|Unexpectedly Passed|Expectedly Failed|"
    r"Unsupported|Skipped|Excluded)\s*:\s*(\d+)",
    re.MULTILINE,
)


def lit_command() -> list[str]:
    script = Path(sys.executable).parent / "lit"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from lit.main import main; sys.exit(main())"]


def parse_counts(output: str) -> dict[str, int]:
    """lit's summary ('  Passed: 12 (100.00%)') as {'Passed': 12, ...}."""
    return {kind: int(number) for kind, number in COUNT.findall(output)}


def test_parse_counts_reads_lit_summary() -> None:
    summary = "Total Discovered Tests: 7\n  Unsupported: 1 (14.29%)\n  Passed: 4 (57.14%)\n  Failed: 2 (28.57%)\n"
    assert parse_counts(summary) == {"Unsupported": 1, "Passed": 4, "Failed": 2}


@pytest.mark.xdist_group("lit")
def test_lit_suite_passes() -> None:
    pytest.importorskip("lit")
    done = subprocess.run(
        [*lit_command(), "-v", "lit/"], cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False
    )
    output = done.stdout + done.stderr
    counts = parse_counts(output)
    failing = re.findall(r"^(?:FAIL|UNRESOLVED|XPASS|TIMEOUT): (.+)$", output, re.MULTILINE)
    assert done.returncode == 0 and not failing, f"lit failed (status {done.returncode}): {failing}\n{output[-6000:]}"
    bad = {
        kind: n
        for kind, n in counts.items()
        if kind in ("Failed", "Unresolved", "Timed Out", "Unexpectedly Passed") and n
    }
    assert not bad, output[-6000:]
    assert counts.get("Passed", 0) >= 5, output[-3000:]
    total = re.search(r"Total Discovered Tests:\s*(\d+)", output)
    assert total is not None and int(total.group(1)) == sum(counts.values()), output[-3000:]
    # the tool tests are part of the suite (a lit.cfg.py change must not silently drop them)
    assert re.search(r"^PASS: loam :: tools/loam-opt-help\.test", output, re.MULTILINE), output[-3000:]
