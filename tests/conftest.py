"""Shared pytest configuration.

Hypothesis runs without a per-example deadline: the suite shares two cores with xdist workers,
where a slow example says nothing about the code under test, and a deadline would make it flaky.

The repository root goes on sys.path so tests can import the conformance harness as
`tests.conformance.harness` (pytest runs with `--import-mode=importlib`, which adds no test folder),
the same name `python -m tests.conformance.summary` uses from the root.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import settings

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

settings.register_profile("loam", deadline=None, print_blob=True)
settings.load_profile("loam")
