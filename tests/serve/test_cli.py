"""`loam serve` as an operator runs it: a real process, a real port, an answer, a clean stop, one-line errors."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.serve.serving import PACKAGES

pytestmark = pytest.mark.xdist_group("serve-cli")
LOAM = [sys.executable, "-m", "loam.tools.loam_main"]


def test_loam_serve_answers_over_http_and_stops_on_sigint(tmp_path: Path) -> None:
    env = {**os.environ, "LOAM_CACHE_DIR": str(tmp_path / "cache")}
    process = subprocess.Popen(
        [*LOAM, "serve", str(PACKAGES / "tiny_gpt2"), "--port", "0"],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        url = None
        deadline = time.monotonic() + 120
        lines = []
        while url is None and time.monotonic() < deadline:
            line = process.stderr.readline()  # type: ignore[union-attr]
            if not line:
                break
            lines.append(line)
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            url = found.group(1) if found else None
        assert url is not None, "".join(lines)
        assert any("serving tiny-gpt2" in line for line in lines)
        # Once the line is printed the port takes connections, even before the server runs another instruction:
        # frozen at once, it still completes a client's connection (the kernel's backlog holds it).
        process.send_signal(signal.SIGSTOP)
        try:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=5):
                pass
        finally:
            process.send_signal(signal.SIGCONT)
        reply = httpx.post(
            f"{url}/v1/completions", json={"model": "tiny-gpt2", "prompt": "Now is better", "max_tokens": 3}
        )
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0


def test_loam_serve_refuses_a_bad_package_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "model.json").write_text('{"role": "text", "stages": {}}', encoding="utf-8")
    done = subprocess.run([*LOAM, "serve", str(tmp_path), "--port", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("loam: error: ") and "'stages'" in done.stderr
    assert "Traceback" not in done.stderr


def test_loam_serve_help_explains_every_flag() -> None:
    done = subprocess.run([*LOAM, "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for flag in ("--host", "--port", "--package-root", "--debug", "PACKAGE_DIR", "--memory-limit", "--idle-deactivate",
                 "--state-dir"):  # fmt: skip
        assert flag in done.stdout


def test_loam_serve_refuses_a_memory_limit_it_cannot_read_in_one_line() -> None:
    done = subprocess.run([*LOAM, "serve", "--memory-limit", "2T"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--memory-limit" in done.stderr and "'2T' is not a byte count" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_serving_bench_runs_end_to_end_on_a_small_package() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.serve", "--quick", "--package", str(PACKAGES / "tiny_gpt2")],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| Loam, given package")]
    assert [int(r[1]) for r in rows] == [1, 2]  # clients
    assert [int(r[2]) for r in rows] == [1, 2]  # requests: one a client in --quick
    assert all(float(r[3]) > 0 and float(r[4]) > 0 and float(r[5]) > 0 for r in rows)  # tokens/s, requests/s, TTFT
