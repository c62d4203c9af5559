"""`set_threads`: how many threads the BLAS under numpy's matrix products may use, set from the module.

A generated module's products are numpy's `matmul`, which calls the BLAS numpy was built with; a
service running several modules side by side, or a benchmark at one thread, needs to bound it from
Python after numpy is imported, and the module imports nothing but numpy.  numpy's wheels bundle
OpenBLAS (`scipy_openblas`, its symbols suffixed `64_`); the library sets its own thread count
(`*_set_num_threads`), which is what threadpoolctl calls too.  The library is the one already
loaded in this process (found in `/proc/self/maps`), opened again with ctypes (numpy's
`np.ctypeslib.ctypes`, so the module still imports numpy alone), never loaded from anywhere else.
Where numpy's BLAS is not an OpenBLAS (Accelerate on macOS, MKL) or there is no `/proc`,
`set_threads` says so: set `OMP_NUM_THREADS` (and `OPENBLAS_NUM_THREADS`, `MKL_NUM_THREADS`) before
Python starts instead.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def set_threads(count: int) -> int:
    """Let the BLAS under numpy's matrix products use `count` threads from now on, in the whole
    process; returns the count it used before.  RuntimeError where numpy's BLAS is not an OpenBLAS
    this process has loaded (set OMP_NUM_THREADS before Python starts instead)."""
    # The standard library's ctypes, through numpy, which imports it: no module imports it for this alone.
    ctypes = np.ctypeslib.ctypes  # type: ignore[attr-defined]  # numpy.ctypeslib does not re-export it
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"set_threads: the thread count must be a positive int, not {count!r}")
    paths: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = [line.split(None, 5)[5].strip() for line in maps if "openblas" in line.lower()]
    except (OSError, IndexError):
        paths = []
    for path in dict.fromkeys(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for stem, suffix in (("scipy_openblas", "64_"), ("scipy_openblas", ""), ("openblas", "64_"), ("openblas", "")):
            setter = getattr(library, f"{stem}_set_num_threads{suffix}", None)
            getter = getattr(library, f"{stem}_get_num_threads{suffix}", None)
            if setter is not None and getter is not None:
                before = int(getter())
                setter(ctypes.c_int(count))
                return before
    raise RuntimeError(
        "set_threads: numpy's BLAS is not an OpenBLAS this process has loaded (or the process has no "
        "/proc/self/maps to find it in), so its thread count cannot be set from here; set OMP_NUM_THREADS "
        "(and OPENBLAS_NUM_THREADS, MKL_NUM_THREADS) before Python starts"
    )


PIECES: dict[str, Callable[..., object]] = {"set_threads": set_threads}
