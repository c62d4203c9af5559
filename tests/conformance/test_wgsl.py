"""The node and operators suites through the WGSL backend: each case built with
`--backend wgsl` (fused for dispatch) and run on the machine's WebGPU adapter (llvmpipe in CI),
against the same oracle as the numpy module.  expected_failures_wgsl.toml lists what the WGSL
backend refuses (a kernel or element type it has no WGSL for: the build must stop naming it) or
computes differently, on top of expected_failures.toml; a case refused there is built again with the
host fallback (its refused kernels in numpy on the host), which must match the oracle."""

from __future__ import annotations

import pytest

from tests.conformance.harness import Case, check_case, pytest_params

pytest.importorskip("wgpu")


@pytest.mark.parametrize("case", pytest_params("operators", pytest.mark.xfail, backend="wgsl"))
def test_operator_case_on_the_device(case: Case) -> None:
    check_case(case, backend="wgsl")


@pytest.mark.parametrize("case", pytest_params("node", pytest.mark.xfail, backend="wgsl"))
def test_node_case_on_the_device(case: Case) -> None:
    check_case(case, backend="wgsl")
