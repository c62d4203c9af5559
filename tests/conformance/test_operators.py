"""The operators suite: one small model per operator x edge case, written by
make_operator_cases.py into operators/, compared with onnxruntime (harness.py)."""

from __future__ import annotations

import pytest

from tests.conformance.harness import Case, check_case, pytest_params


@pytest.mark.parametrize("case", pytest_params("operators", pytest.mark.xfail))
def test_operator_case(case: Case) -> None:
    check_case(case)
