"""The harness's own data stays current: node_cases.json matches the installed onnx, and every entry of
expected_failures.toml (and expected_failures_wgsl.toml) names a case that exists."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.conformance.harness import BACKENDS, NODE_MANIFEST, SUITES, cases, expectations, node_manifest


def test_node_manifest_is_current() -> None:
    stored = json.loads(NODE_MANIFEST.read_text(encoding="utf-8"))
    assert stored["onnx"] == onnx.__version__, "regenerate: python -m tests.conformance.summary --write-manifest"
    assert stored == node_manifest(), "regenerate: python -m tests.conformance.summary --write-manifest"


@pytest.mark.parametrize("backend", BACKENDS)
def test_expectations_name_existing_cases(backend: str) -> None:
    known = {c.id for suite in SUITES for c in cases(suite)}
    for table, entries in expectations(backend).items():
        stale = sorted(set(entries) - known)
        assert not stale, f"[{table}] lists cases that do not exist: {stale[:10]}"
        assert all(reason.strip() for reason in entries.values()), f"[{table}] has an entry without a reason"


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_case_is_both_xfail_and_refused(backend: str) -> None:
    both = set(expectations(backend)["xfail"]) & set(expectations(backend)["refused"])
    assert not both, f"listed as both xfail and refused: {sorted(both)[:10]}"
