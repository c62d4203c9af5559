"""Lets the conformance tests import their harness as `tests.conformance.harness` (pytest runs with
`--import-mode=importlib`, which puts no test folder on sys.path), the same name `python -m
tests.conformance.summary` uses from the repository root."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
