"""The pytorch-operator/, pytorch-converted/ and simple/ model folders of the installed onnx package,
checked as the node cases are (harness.py)."""

from __future__ import annotations

import pytest

from tests.conformance.harness import FOLDER_SUITES, Case, check_case, pytest_params


@pytest.mark.parametrize(
    "case",
    [p for suite in FOLDER_SUITES for p in pytest_params(suite, pytest.mark.xfail)],
)
def test_model_folder(case: Case) -> None:
    check_case(case)
