"""bench.serve's peers: which servers `--peers` selects, and the command line llama-server is started with.

The suite never builds llama.cpp: these check the arguments bench.serve would run it with, and that a bad
`--peers` is a one-line usage error before anything starts.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bench.serve import PEERS, llama_server_binary, llama_server_command, peers, slot_context

ROOT = Path(__file__).resolve().parents[2]


def test_peers_keeps_the_named_servers_in_a_fixed_order() -> None:
    assert peers(",".join(PEERS)) == ["loam", "llama-server", "llama-cpp-python"]
    assert peers("llama-server, loam") == ["loam", "llama-server"]
    assert peers(",".join(PEERS), no_peer=True) == ["loam"]


def test_peers_refuses_an_unknown_server_by_name() -> None:
    with pytest.raises(ValueError, match=r"'llama\.cpp'"):
        peers("loam,llama.cpp")


def test_the_bench_reports_an_unknown_peer_as_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.serve", "--quick", "--peers", "loam,vllm"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--peers: unknown server 'vllm'" in done.stderr and "Traceback" not in done.stderr


def test_llama_server_runs_one_slot_a_client_with_continuous_batching() -> None:
    command = llama_server_command("/opt/llama-server", Path("m.gguf"), 2, 16, 512, 8081)
    assert command[0] == "/opt/llama-server"
    flags = dict(zip(command[1::2], command[2::2], strict=False))
    assert flags["--model"] == "m.gguf" and flags["--host"] == "127.0.0.1" and flags["--port"] == "8081"
    assert flags["--threads"] == flags["--threads-batch"] == "2"
    assert flags["--parallel"] == "16" and flags["--ctx-size"] == str(16 * 512)  # the slots share -c evenly
    assert "--cont-batching" in command


def test_a_slot_holds_the_longest_prompt_and_its_answer() -> None:
    context = slot_context(96, 64)
    assert context >= 2 * 96 + 64 and context % 256 == 0
    assert slot_context(1500, 96) >= 3000 + 96


def test_llama_server_binary_takes_an_executable_it_is_given(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n", encoding="utf-8")
    assert llama_server_binary(str(binary)) is None  # not executable
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    assert llama_server_binary(str(binary)) == str(binary)
    assert llama_server_binary(str(tmp_path / "absent")) is None
