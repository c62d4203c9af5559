"""Soak and memory against a real server: many clients for a while lose nothing and leave nothing held, and a
conversation holds the KV blocks its tokens fill, not a context's worth.

The soak is bench/soak.py's, shortened: `loam serve` in a child process, eight client threads for fifteen seconds
of mixed requests (completions and chats, streamed or not, streams dropped mid-way, refusals, sessions).  The full
run (`python -m bench.soak`) writes bench/RESULTS-soak.md.
"""

from __future__ import annotations

import ctypes
import math
import mmap
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from bench.soak import ok, render, soak
from loam.serve.cli import Listener
from loam.serve.server import Server
from loam.serve.text import TextWorker
from tests.serve.serving import PACKAGES, package_copy, serving

pytestmark = pytest.mark.xdist_group("serve-soak")
RSS_GROWTH_MIB = 16  # what the server's resident memory may grow after the warm-up of a 15 s soak


def test_eight_clients_for_fifteen_seconds_lose_nothing_and_leave_nothing_held() -> None:
    report = soak(PACKAGES / "tiny_gpt2", clients=8, seconds=15, warmup=5, interval=0.5, timeout=30)
    print(render(report, "tests/serve/test_soak.py", "the test machine"))
    assert report["lost"] == 0, report["lost_examples"]
    assert report["server_alive"], report["server_log"]
    assert report["sent"] >= 100 and report["completed"] >= report["sent"] // 2, report
    assert all(sent > 0 for sent, *_ in report["kinds"].values()), report["kinds"]  # every kind ran
    assert report["cancelled"] > 0  # streams dropped mid-way
    # Error responses only where the clients asked for them (a prompt past the context, a bad field, an unknown
    # model), or a session refused while every resident row was a session.
    assert set(report["statuses"]) <= {400, 404, 429}, report["statuses"]
    # Once the clients are done, nothing waits and no KV block is held; full blocks stay cached for reuse.
    assert report["queue_depth"] == 0 and report["kv_used"] == 0 and report["kv_cached"] > 0
    assert report["rss_last_mib"] - report["rss_first_mib"] < RSS_GROWTH_MIB, report
    assert ok(report)


@pytest.fixture(scope="module")
def long_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """tiny_gpt2 registered again with context_tokens 1024, block_tokens 16 and 256 resident rows, and its HTTP
    URL."""
    folder = package_copy(
        tmp_path_factory, "tiny_gpt2", name="tiny-gpt2-long",
        capacities={"context_tokens": 1024, "block_tokens": 16, "resident_requests": 256},
    )  # fmt: skip
    with serving(tmp_path_factory, PACKAGES / "tiny_gpt2") as server:
        server.register(folder)
        with Listener(server) as listener:
            yield server, listener.url


def _resident_bytes(array: np.ndarray) -> int:
    """The bytes of `array`'s buffer that are in memory now, by mincore(2) over the whole pages it spans.

    Counted for the pool's own pages, not the process's resident size: that one also counts whatever registering
    did beside allocating the pool (a build when the cache is cold, imports), which is not what is checked here.
    """
    page = mmap.PAGESIZE
    start = array.ctypes.data
    first, end = -(-start // page) * page, (start + array.nbytes) // page * page
    if end <= first:
        return 0
    pages = (end - first) // page
    vector = (ctypes.c_ubyte * pages)()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    if libc.mincore(ctypes.c_void_p(first), ctypes.c_size_t(end - first), vector) != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return sum(1 for v in vector if v & 1) * page


def _blocks_used(url: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith('loam_kv_blocks_used{model="tiny-gpt2-long"}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no loam_kv_blocks_used for tiny-gpt2-long")


def test_a_conversation_holds_the_blocks_it_fills_not_a_context_s_worth(
    long_context: tuple[Server, str],
) -> None:
    server, url = long_context
    worker = server.models["tiny-gpt2-long"].worker
    assert isinstance(worker, TextWorker)
    pool = worker.pool
    assert pool.capacity == 256 * 1024 // 16 + 256  # every resident row at full context
    pool_bytes = sum(a.nbytes for a in pool._arrays.values())
    # The pool is allocated whole, but its pages become resident only as blocks are written.
    resident = sum(_resident_bytes(a) for a in pool._arrays.values())
    assert pool_bytes > 256 * 2**20 and resident < pool_bytes / 4, (pool_bytes, resident)
    with httpx.Client(base_url=url, timeout=60) as http:
        sessions = [http.post("/v1/sessions", json={"model": "tiny-gpt2-long"}).json()["id"] for _ in range(3)]
        for i, session in enumerate(sessions):
            prompt = [100 + i, *range(200, 229)]  # 30 tokens, no two conversations share a block
            body = {"model": "tiny-gpt2-long", "prompt": prompt, "max_tokens": 10, "temperature": 0,
                    "ignore_eos": True, "session": session}  # fmt: skip
            assert http.post("/v1/completions", json=body).status_code == 200
        # 40 tokens each, the last one sampled but not yet read: 39 positions, ceil(39 / 16) = 3 blocks, not 64.
        assert [http.get(f"/v1/sessions/{s}").json()["tokens"] for s in sessions] == [40, 40, 40]
        assert [len(session.seq.blocks) for session in worker.sessions.values()] == [math.ceil(39 / 16)] * 3
        assert pool.stats()["used"] == _blocks_used(url) == 9
        # A second turn adds the blocks its tokens need: 40 + 20 + 10 = 70 tokens, 69 positions, 5 blocks.
        body = {"model": "tiny-gpt2-long", "prompt": list(range(300, 320)), "max_tokens": 10, "temperature": 0,
                "ignore_eos": True, "session": sessions[0]}  # fmt: skip
        assert http.post("/v1/completions", json=body).status_code == 200
        assert pool.stats()["used"] == _blocks_used(url) == 5 + 3 + 3
        # Closed, the conversations hold nothing; their full blocks stay cached for a prompt that repeats them.
        for session in sessions:
            assert http.delete(f"/v1/sessions/{session}").status_code == 200
        assert _blocks_used(url) == 0 and pool.stats()["cached"] == 69 // 16 + 2 * (39 // 16)
        # A request without a session holds its blocks only while it runs.
        body = {"model": "tiny-gpt2-long", "prompt": list(range(400, 440)), "max_tokens": 8, "ignore_eos": True}
        assert http.post("/v1/completions", json=body).status_code == 200
        assert _blocks_used(url) == 0
