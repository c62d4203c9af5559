"""Shared pytest configuration.

Hypothesis runs without a per-example deadline: the suite shares two cores with xdist workers,
where a slow example says nothing about the code under test, and a deadline would make it flaky.

Every test gets a build cache of its own (LOAM_CACHE_DIR under its tmp_path): `loam build` caches by
default, and a test must neither write into the real home nor be served another test's build.

The repository root goes on sys.path so tests can import the conformance harness as
`tests.conformance.harness` (pytest runs with `--import-mode=importlib`, which adds no test folder),
the same name `python -m tests.conformance.summary` uses from the root.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

settings.register_profile("loam", deadline=None, print_blob=True)
settings.load_profile("loam")


@pytest.fixture(autouse=True)
def _private_build_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOAM_CACHE_DIR", str(tmp_path_factory.mktemp("loam-cache")))


@pytest.fixture(autouse=True, scope="session")
def _device_at_webgpu_defaults() -> Iterator[None]:
    """Every WGSL module requests WebGPU's default limits of the one device a process shares; after
    the session that device must still have exactly them, never the adapter's most, so a kernel over
    the defaults fails here on any adapter as it would in a browser offering only the defaults."""
    yield
    wgpu = sys.modules.get("wgpu")
    shared = getattr(wgpu, "_loam_shared_device", None)
    if shared is None:
        return
    from loam.backends.wgsl_limits import DEFAULT_LIMITS
    from loam.backends.wgsl_runtime import _wgpu_limit

    made = {k: shared[0].limits[_wgpu_limit(k)] for k in DEFAULT_LIMITS.webgpu()}
    assert made == DEFAULT_LIMITS.webgpu(), f"the process's WebGPU device was made with {made}"
