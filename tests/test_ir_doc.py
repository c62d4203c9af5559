"""docs/ir.md's registry section must be exactly what `python -m loam.ir_docs` generates from the registries."""

from __future__ import annotations

from loam.ir_docs import DOC_PATH, render, updated
from loam.passes import get_all_passes
from loam.registry import FRONT_ENDS, TARGETS


def test_the_registry_section_is_current() -> None:
    current = DOC_PATH.read_text(encoding="utf-8")
    assert updated(current) == current, (
        f"{DOC_PATH} is out of date; regenerate it with `python -m loam.ir_docs --write`"
    )


def test_every_registered_pass_front_end_and_target_is_listed() -> None:
    text = render()
    for name in [*get_all_passes(), *FRONT_ENDS, *TARGETS]:
        assert f"- `{name}`" in text, name
