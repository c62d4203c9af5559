"""`python -m bench.genai` skips cleanly without its dev-time model and runs end to end on a tiny one.

CI has neither onnxruntime-genai nor the SmolLM2 model the bench is for (scripts/make_genai_smollm2.py
writes it outside the repository), so the bench must say it is skipped and exit 0 there.  With the
tiny builder-written Llama of tests/models/genai/ it builds the module, runs its child and reports a
row; no timing is asserted, only that every number is there and positive, and that a quick run writes
no results file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import genai

TINY = Path(__file__).resolve().parent / "models" / "genai" / "llama_int4"

pytestmark = pytest.mark.xdist_group("bench")


def test_without_a_model_the_bench_says_it_is_skipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("LOAM_GENAI_MODEL", raising=False)
    assert genai.main([]) == 0
    assert "bench.genai: skipped: no model" in capsys.readouterr().out
    monkeypatch.setenv("LOAM_GENAI_MODEL", str(tmp_path))
    assert genai.main(["--quick"]) == 0
    assert f"skipped: {tmp_path} holds no onnxruntime-genai model" in capsys.readouterr().out


def test_a_quick_run_on_the_tiny_model_reports_loams_row(capsys: pytest.CaptureFixture[str]) -> None:
    before = genai.RESULTS.read_bytes() if genai.RESULTS.is_file() else None
    argv = ["--model", str(TINY), "--quick", "--no-peer", "--threads", "1", "--prompt", "4"]
    assert genai.main(argv) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| Loam"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "1"
    assert all(float(c) > 0 for c in cells[2:])
    assert "no record for this build" in out and "onnxruntime-genai: not measured" in out
    assert (genai.RESULTS.read_bytes() if genai.RESULTS.is_file() else None) == before
