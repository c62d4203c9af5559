"""docs/operators.md must be exactly what `python -m loam.tools.operator_docs` generates from the operator rules."""

from __future__ import annotations

import pytest

from loam.ops import RULES
from loam.ops.base import OpRule
from loam.tools.operator_docs import DOC_PATH, REGENERATE, _opsets, main, render, schema_versions


def test_operators_doc_is_current() -> None:
    current = DOC_PATH.read_text(encoding="utf-8") if DOC_PATH.exists() else "(missing)"
    assert current == render(), f"{DOC_PATH} is out of date with the operator rules; regenerate it with `{REGENERATE}`"


def test_every_rule_has_a_row() -> None:
    text = render()
    for op_type in RULES:
        assert f"\n| {op_type} | " in text


def test_refused_operators_are_not_rules() -> None:
    refused = render().split("## Refused operators", 1)[1].split("## Kernel ops", 1)[0]
    for op_type in RULES:
        assert f" {op_type}," not in refused and f"\n{op_type}," not in refused


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        (1, ("1–13", "1, 11")),  # Softmax: defined at 1, 11, 13
        (11, ("11–13", "11")),
        (12, ("12–13", "11")),  # opset 12 still reads the opset-11 definition
        (13, ("13", "")),
        (20, ("20+", "")),
    ],
)
def test_opset_range_and_restated_definitions(first: int, expected: tuple[str, str]) -> None:
    assert schema_versions("Softmax") == (1, 11, 13)

    class Fake(OpRule):
        op_types = ("Softmax",)
        first_opset = first

    assert _opsets("Softmax", Fake()) == expected


def test_range_starts_where_onnx_introduced_the_operator() -> None:
    class Shared(OpRule):
        op_types = ("Cast", "CastLike")
        first_opset = 1

    first = schema_versions("CastLike")[0]
    assert _opsets("CastLike", Shared())[0].startswith(f"{first}–")


def test_check_flag_reports_how_to_regenerate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("loam.tools.operator_docs.render", lambda: "something else\n")
    assert main(["--check"]) == 1
    assert REGENERATE in capsys.readouterr().err


def test_every_rule_lowers_to_kernel_ops_the_dialect_defines() -> None:
    from loam.dialects.kernel import Kernel

    defined = {op.name for op in Kernel.operations}
    for op_type, rule in RULES.items():
        assert set(rule.kernels) <= defined, (op_type, rule.kernels)


def test_every_computing_kernel_op_has_a_row_saying_what_computes_it() -> None:
    from loam.dialects.kernel import Kernel

    section = render().split("## Kernel ops", 1)[1]
    for op in Kernel.operations:
        if op.name not in ("kernel.program", "kernel.return", "kernel.yield"):
            row = next(line for line in section.splitlines() if line.startswith(f"| `{op.name}` |"))
            cells = [c.strip() for c in row.split("|")[2:5]]
            assert all(c and c != "—" for c in cells), row
