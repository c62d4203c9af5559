"""ONNX's backend node cases (issue 3, item 4a): each compiles, runs and matches, is a strict xfail, or is
refused naming the operator (or element type) Loam does not compile.  See harness.py for the rules."""

from __future__ import annotations

import pytest

from tests.conformance.harness import Case, check_case, pytest_params


@pytest.mark.parametrize("case", pytest_params("node", pytest.mark.xfail))
def test_node_case(case: Case) -> None:
    check_case(case)
