"""The semantics suite: every construct of exporters' shape arithmetic over symbolic extents,
at several values of each symbol, against onnxruntime; and inputs violating an owed condition, which must
raise the module's ShapeError naming the node.  What each run demands is in harness.py."""

from __future__ import annotations

import pytest

from tests.semantics.harness import MODELS, Run, check_run, expectations, manifest, runs


def _params() -> list[object]:
    listed = expectations()
    params = []
    for run in runs():
        # One xdist group per model: its runs share one worker, so the model is built once.
        marks = [pytest.mark.xdist_group(f"semantics-{run.model}")]
        if run.id in listed:
            marks.append(pytest.mark.xfail(strict=True, reason=listed[run.id]))
        params.append(pytest.param(run, id=run.id, marks=marks))
    return params


@pytest.mark.parametrize("run", _params())
def test_semantics(run: Run) -> None:
    check_run(run)


def test_models_match_cases() -> None:
    on_disk = {p.stem for p in MODELS.glob("*.onnxtext")}
    assert on_disk == set(manifest()), "regenerate: python scripts/make_semantics_models.py"


def test_expectations_name_existing_runs() -> None:
    known = {r.id for r in runs()}
    stale = sorted(set(expectations()) - known)
    assert not stale, f"expected_failures.toml lists runs that do not exist: {stale[:10]}"
    assert all(reason.strip() for reason in expectations().values()), "an entry without a reason"


def test_every_symbol_runs_at_two_values() -> None:
    for name, case in manifest().items():
        symbols = {k for at in case["runs"] for k in at}
        for sym in symbols:
            values = {at[sym] for at in case["runs"]}
            assert len(values) >= 2, f"{name}: {sym} runs at {sorted(values)} only"
