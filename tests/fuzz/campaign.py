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

FIXED: dict[tuple[str, int], tuple[str, str]] = {
    ("stablehlo-generic", 98): ("refused", "an unterminated string literal hung xDSL's lexer"),
    ("stablehlo-generic", 20000092): ("refused", "an unterminated string literal hung xDSL's lexer"),
    ("ir", 20000290): ("refused", "an unterminated string literal hung xDSL's lexer"),
    ("ir", 20000097): ("refused", "an integer type of width 10^30: OverflowError in xDSL's value range"),
    ("ir", 10001068): ("ok", "an opset version past a C int: TypeError from onnx.defs.get_schema"),
    ("ir", 10004421): ("refused", "a NUL in an output name reached the module's source: SyntaxError"),
    ("stablehlo", 10000607): ("refused", "a literal out of its type's range: VerifyException from the parser"),
    ("stablehlo", 10002223): ("refused", "a literal out of i64's range: ValueError from the parser"),
    ("stablehlo-generic", 10001081): ("refused", "array<i6432: ...>: NotImplementedError from the parser"),
    ("stablehlo-generic", 10001963): ("refused", "array<i0: ...>: ZeroDivisionError from the parser"),
    ("stablehlo-generic", 10002445): ("refused", "a ParseError on the first token, as the parser is made"),
    ("stablehlo-generic", 10005035): ("refused", "a use before its definition: KeyError in the reader"),
    ("stablehlo-generic", 10009244): ("refused", "a func.func without sym_name: KeyError before verification"),
    ("ir", 10005679): ("refused", "an opset below a C int: TypeError from onnx.defs.get_schema"),
    ("tokenizer-json", 20005735): ("ok", "JSON the engine reads and Python's json does not: JSONDecodeError"),
    ("tokenizer-gguf", 20003713): ("refused", "a BOS token holding ':': ValueError from TemplateProcessing"),
}
"""Crashes the long campaign found, by (reader, mutation seed): the outcome each has now, and what it was."""


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
