"""A short, seeded mutation campaign over every input Loam reads (tests/fuzz/readers.py): each mutant
builds (and its module runs or raises its own ShapeError / LoadError) or is refused with a LoamError.
`python scripts/fuzz.py --per-reader 10000 --seed 1` is the long run."""

from __future__ import annotations

import pytest

from tests.fuzz.campaign import FIXED, KNOWN, campaign, one
from tests.fuzz.mutate import mutate
from tests.fuzz.readers import READERS

PER_READER = 30


def test_the_mutator_is_deterministic_and_changes_its_input() -> None:
    data = READERS["onnxtext"].seed()
    assert mutate(data, 5, text=True) == mutate(data, 5, text=True)
    assert sum(mutate(data, s, text=True) != data for s in range(50)) >= 45


@pytest.mark.parametrize("reader", sorted(READERS))
def test_the_seed_input_builds(reader: str) -> None:
    import tempfile
    from pathlib import Path

    from tests.fuzz.readers import outcome

    with tempfile.TemporaryDirectory() as folder:
        result = outcome(READERS[reader], READERS[reader].seed(), Path(folder))
    assert result.kind == "ok", result.detail


@pytest.mark.parametrize("reader", sorted(READERS))
def test_no_mutant_crashes(reader: str) -> None:
    counts, crashes = campaign(reader, PER_READER)
    assert not crashes, "\n".join(
        f"{reader} mutation seed {seed} crashed (rerun: python scripts/fuzz.py --reader {reader} --replay {seed}):\n"
        + "\n".join(detail.strip().splitlines()[-6:])
        for seed, detail in crashes.items()
    )
    assert counts["refused"] > 0 or reader == "tokenizer-json"


@pytest.mark.parametrize(
    ("case", "kind"),
    [
        pytest.param(k, "refused", id=f"{k[0]}-{k[1]}", marks=pytest.mark.xfail(strict=True, reason=v))
        for k, v in KNOWN.items()
    ]
    + [pytest.param(k, kind, id=f"{k[0]}-{k[1]}-fixed") for k, (kind, _) in FIXED.items()],
)
def test_found_crashes_are_fixed(case: tuple[str, int], kind: str) -> None:
    reader, seed = case
    result = one(reader, seed, timeout_s=10)
    assert result.kind == kind, result.detail
