"""A generated module's `set_threads` bounds the BLAS under numpy's products, as threadpoolctl sees it.

Each check runs in a child process (the setting is process-wide, and the test workers keep theirs):
the module built from the MLP example sets OpenBLAS's thread count, returns the count before, and
threadpoolctl, which reads the library by its own means, reports the new count.  A count that is not
a positive int is refused before anything changes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loam.driver.options import Options
from loam.driver.pipeline import build

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp"

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import module
from threadpoolctl import threadpool_info

def blas():
    counts = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    assert counts, threadpool_info()
    return counts[0]

start = blas()
assert module.set_threads(1) == start
assert blas() == 1
assert module.set_threads(3) == 1
assert blas() == 3
for bad in (0, -2, 1.5, "2", True, None):
    try:
        module.set_threads(bad)
    except ValueError as err:
        assert "positive int" in str(err), err
    else:
        raise AssertionError(f"set_threads({bad!r}) was accepted")
assert blas() == 3
print("ok")
"""


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_set_threads_sets_what_threadpoolctl_reads(backend: str, tmp_path: Path) -> None:
    options = Options.from_toml(MLP / "loam.toml")
    result = build(MLP / "mlp.onnxtext", options=options, backend=backend)
    (tmp_path / "module.py").write_text(result.source)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
