"""`python -m bench.browser --quick` runs end to end: the MLP built three ways, timed, one row of positive numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.browser import main

pytestmark = pytest.mark.xdist_group("browser")


def test_quick_browser_bench_reports_the_mlp(browser: object, tmp_path: Path) -> None:
    # `browser` only stands for the setup check (Chromium present, or the test skips/fails as the others do).
    out = tmp_path / "RESULTS-browser.md"
    assert main(["--quick", "--output", str(out)]) == 0
    rows = [line for line in out.read_text(encoding="utf-8").splitlines() if line.startswith("| MLP")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    numbers = [float(c.rstrip("x")) for c in cells[1:]]
    assert len(numbers) == 6 and all(n > 0 for n in numbers)
