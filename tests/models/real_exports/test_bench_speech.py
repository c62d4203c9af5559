"""`python -m bench.speech --quick` runs end to end: every row is there, and says why where it has no number.

No timing is asserted (this machine's numbers are not a property of the code).  Each row either has both
sides' times, their ratio and an output difference within float32 tolerance, or says that its model does
not build (with the refusal) or is missing; onnxruntime's side is timed wherever the model is there.  The
Loam side is also run on the Silero VAD file that builds today, so the row's path through a built module
is exercised.  A quick run writes no results file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import speech
from tests.models.real_exports import exports, silero_vad

pytestmark = pytest.mark.xdist_group("bench")


def cells(out: str, name: str) -> list[str]:
    row = next(line for line in out.splitlines() if line.startswith(f"| {name} |"))
    return [c.strip() for c in row.strip("|").split("|")]


def test_quick_run_reports_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    before = speech.RESULTS.read_bytes() if speech.RESULTS.is_file() else None
    assert speech.main(["--quick"]) == 0
    out = capsys.readouterr().out
    for row in speech.rows():
        _name, _what, loam_ms, ort_ms, ratio, _loam_rtf, _ort_rtf, diff, note = cells(out, row.name)
        if row.model() is None:
            assert note.startswith("skipped: ") and ort_ms == "-"
            continue
        assert float(ort_ms) > 0
        if loam_ms == "-":
            assert note.startswith("does not build: ") and len(note) > len("does not build: ")
        else:
            assert float(loam_ms) > 0 and float(ratio.rstrip("x")) > 0 and float(diff) <= 1e-3
    assert "| whisper-encoder-30s |" in out and "| piper-sentence |" in out and "| silero-vad-chunk |" in out
    assert (speech.RESULTS.read_bytes() if speech.RESULTS.is_file() else None) == before


def test_a_row_whose_model_builds_times_both_sides() -> None:
    path = exports.package_file(silero_vad.PACKAGE, "silero_vad_openvino_16k.onnx")
    exports.require_installed(silero_vad.PACKAGE, path is not None)
    row = speech.Row(
        "silero-vad-openvino",
        "input 1x576",
        lambda: path,
        "",
        lambda: {k: v for k, v in speech.silero_feeds().items() if k != "sr"},
    )
    measured, first = speech.measure_loam(row, speech.QUICK)
    assert measured.loam_s is not None and measured.loam_s > 0 and first is not None, measured.note
    measured = speech.measure_ort(measured, first, speech.QUICK)
    assert measured.ort_s is not None and measured.ort_s > 0
    assert measured.max_diff is not None and measured.max_diff < 1e-4
    line = speech.table([measured])[-1]
    assert "x |" in line and "does not build" not in line


def test_a_rerun_keeps_the_notes_below_the_table(tmp_path: Path) -> None:
    from bench.speech import notes_after_the_table

    results = tmp_path / "RESULTS.md"
    assert notes_after_the_table(results) == ""
    results.write_text("# Table\n\n| a | b |\n\n(3 s)\n\n## Closing note\n\nConvs bound it.\n", encoding="utf-8")
    assert notes_after_the_table(results) == "\n## Closing note\n\nConvs bound it.\n"
    results.write_text("# Table\n\n| a | b |\n", encoding="utf-8")
    assert notes_after_the_table(results) == ""
