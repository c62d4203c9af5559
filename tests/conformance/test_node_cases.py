"""ONNX's backend node cases: each compiles, runs and matches, is a strict xfail, or is
refused naming the operator (or element type) Loam does not compile.  See harness.py for the rules.

Each case that reads a shape operand (a Reshape shape, Slice bounds, Pad widths, ...) from a graph input runs
twice: with that input made a Constant, as an export carries it (`node`), and fed at run time as the case
declares it (`node-declared`)."""

from __future__ import annotations

import pytest

from tests.conformance.harness import DECLARED, Case, check_case, pytest_params


@pytest.mark.parametrize("case", pytest_params("node", pytest.mark.xfail))
def test_node_case(case: Case) -> None:
    check_case(case)


@pytest.mark.parametrize("case", pytest_params(DECLARED, pytest.mark.xfail))
def test_node_case_with_declared_shape_inputs(case: Case) -> None:
    check_case(case)
