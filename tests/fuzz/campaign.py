"""One fuzz campaign over one reader, in this process: mutation seeds `start, start + 1, ...`, each input
bounded in time by SIGALRM (a hang counts as a crash)."""

from __future__ import annotations

import signal
import tempfile
from collections import Counter
from pathlib import Path

from tests.fuzz.mutate import mutate
from tests.fuzz.readers import READERS, Outcome, outcome

KNOWN: dict[tuple[str, int], str] = {}
"""Crashes found and not fixed yet, by (reader, mutation seed): the short campaign skips them, and
tests/fuzz/test_fuzz.py holds each as a strict xfail, so a fix shows as an XPASS to move to FIXED."""

FIXED: dict[tuple[str, int], str] = {
    ("stablehlo-generic", 98): "an unterminated string literal hung xDSL's lexer",
    ("stablehlo-generic", 20000092): "an unterminated string literal hung xDSL's lexer",
    ("ir", 20000290): "an unterminated string literal hung xDSL's lexer",
    ("ir", 20000097): "an integer type of width 10^30: OverflowError in xDSL's value range",
}
"""Crashes the long campaign found and Loam now refuses: tests/fuzz/test_fuzz.py keeps them refused."""


class Hang(Exception):
    pass


def _alarm(_signum: int, _frame: object) -> None:
    raise Hang("the input took longer than its time bound")


def one(reader_name: str, seed: int, timeout_s: int = 20) -> Outcome:
    """The outcome of mutation `seed` of `reader_name`'s seed input (a hang past `timeout_s` is a crash)."""
    reader = READERS[reader_name]
    data = mutate(reader.seed(), seed, text=reader.text)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout_s)
    try:
        with tempfile.TemporaryDirectory() as folder:
            try:
                return outcome(reader, data, Path(folder))
            except Hang as err:
                return Outcome("crash", f"Hang: {err}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def campaign(
    reader_name: str, count: int, start: int = 0, *, skip_known: bool = True
) -> tuple[Counter, dict[int, str]]:
    """Counts of each outcome over `count` mutations, and each crash's traceback by seed."""
    counts: Counter = Counter()
    crashes: dict[int, str] = {}
    for seed in range(start, start + count):
        if skip_known and (reader_name, seed) in KNOWN:
            counts["known"] += 1
            continue
        result = one(reader_name, seed)
        counts[result.kind] += 1
        if result.kind == "crash":
            crashes[seed] = result.detail
    return counts, crashes
