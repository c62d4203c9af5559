"""A generated module shared by threads, and a checkpoint that changes while it loads.

`forward` called from many threads at once (different batch extents per thread) gives each caller its
own correct result: the numpy module's buffer pool hands a set of buffers to one call at a time
(`_keep`), and the WGSL module's forward holds its device's lock.  `Weights.load_file` on a file cut
short after its header was checked raises LoadError instead of dying of SIGBUS.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.runtime.prologue import _keep

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp"
THREADS, CALLS = 8, 20


def _hammer(module: ModuleType, weights: object) -> None:
    """Every thread runs its own batch extents; each result must be what one thread alone gets."""
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((1 + t % 5, 8)).astype(np.float32) for t in range(THREADS)]
    expected = [np.array(module.forward(weights, x), copy=True) for x in inputs]
    errors: list[str] = []
    start = threading.Barrier(THREADS)

    def work(t: int) -> None:
        start.wait()
        for call in range(CALLS):
            got = module.forward(weights, inputs[t])
            if not np.array_equal(got, expected[t]):
                errors.append(f"thread {t} call {call}: wrong result")
                return

    threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "forward hung under threads"
    assert not errors, errors


def _symbolic_mlp(folder: Path) -> Path:
    """The example MLP with a symbolic batch `N` (the example fixes it at 4)."""
    text = (MLP / "mlp.onnxtext").read_text()
    text = text.replace("float[4,8] x", "float[N,8] x").replace("float[4,3] y", "float[N,3] y")
    (folder / "mlp.onnxtext").write_text(text)
    shutil.copy(MLP / "mlp.safetensors", folder / "mlp.safetensors")
    return folder / "mlp.onnxtext"


def test_numpy_forward_from_many_threads(tmp_path: Path) -> None:
    result = build(_symbolic_mlp(tmp_path), options=Options.from_toml(MLP / "loam.toml"))
    assert "_POOL.pop(_key, None)" in result.source  # the pool is what is under test
    module = result.module
    _hammer(module, module.Weights.load_file(str(tmp_path / "mlp.safetensors")))
    assert len(module._POOL) <= 4


def test_keep_trims_the_pool_when_threads_race() -> None:
    pool: dict[tuple[int, ...], tuple[int, ...]] = {}
    barrier = threading.Barrier(8)

    def work(t: int) -> None:
        barrier.wait()
        for k in range(20000):
            _keep(pool, (t, k), ())

    failures: list[BaseException] = []

    def guarded(t: int) -> None:
        try:
            work(t)
        except BaseException as e:  # a KeyError from two threads deleting one entry
            failures.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between any two bytecodes: the race shows
    try:
        threads = [threading.Thread(target=guarded, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert not failures, failures
    assert len(pool) <= 4 + 8  # each thread may have added one while another trimmed


def test_wgsl_forward_from_many_threads(tmp_path: Path) -> None:
    pytest.importorskip("wgpu")
    result = build(_symbolic_mlp(tmp_path), options=Options.from_toml(MLP / "loam.toml"), backend="wgsl")
    assert "with g.lock:" in result.source
    module = result.module
    _hammer(module, module.Weights.load_file(str(tmp_path / "mlp.safetensors")))


_CUT_SHORT = """
import shutil, sys
from loam.driver.options import Options
from loam.driver.pipeline import build

mlp, path = sys.argv[1], sys.argv[2]
module = build(mlp + "/mlp.onnxtext", options=Options.from_toml(mlp + "/loam.toml")).module
shutil.copy(mlp + "/mlp.safetensors", path)
read = module._read_checkpoint

def read_then_cut(data, *external):
    tensors = read(data, *external)  # the header checked; now the file loses its payloads
    with open(path, "r+b") as f:
        f.truncate(len(data) // 2)
    return tensors

module._read_checkpoint = read_then_cut
try:
    module.Weights.load_file(path)
except Exception as e:  # the module's own LoadError class
    print(type(e).__name__ + ":", e)
"""


def test_a_checkpoint_cut_short_while_it_loads(tmp_path: Path) -> None:
    # In a child process: without the check the load dies of SIGBUS, which must not take pytest along.
    run = subprocess.run(
        [sys.executable, "-c", _CUT_SHORT, str(MLP), str(tmp_path / "w.safetensors")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert "LoadError:" in run.stdout and "changed while it was loaded" in run.stdout, run.stdout
