"""Shared pytest configuration.

Hypothesis runs without a per-example deadline: the suite shares two cores with xdist workers,
where a slow example says nothing about the code under test, and a deadline would make it flaky.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("loam", deadline=None, print_blob=True)
settings.load_profile("loam")
