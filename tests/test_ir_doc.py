"""docs/ir.md's registry section and README's layout must be exactly what `python -m loam.tools.ir_docs` generates."""

from __future__ import annotations

from loam.driver.passes import get_all_passes
from loam.driver.registry import FRONT_ENDS, TARGETS
from loam.tools.ir_docs import DOC_PATH, README_PATH, render, render_layout, updated, updated_readme


def test_the_registry_section_is_current() -> None:
    current = DOC_PATH.read_text(encoding="utf-8")
    assert updated(current) == current, (
        f"{DOC_PATH} is out of date; regenerate it with `python -m loam.tools.ir_docs --write`"
    )


def test_every_registered_pass_front_end_and_target_is_listed() -> None:
    text = render()
    for name in [*get_all_passes(), *FRONT_ENDS, *TARGETS]:
        assert f"- `{name}`" in text, name


def test_the_readme_layout_is_current() -> None:
    current = README_PATH.read_text(encoding="utf-8")
    assert updated_readme(current) == current, (
        f"{README_PATH}'s layout is out of date; regenerate it with `python -m loam.tools.ir_docs --write`"
    )


def test_the_layout_names_every_package_and_registry_entry() -> None:
    from loam.dialects import get_all_dialects

    text = render_layout()
    for package in ("loam.ops", "loam.serve", "loam.dialects.kernel", "loam.backends.wgsl_kernels", "loam.passes"):
        assert f"{package}: " in text, package
    for name in [*get_all_passes(), *FRONT_ENDS, *TARGETS, *get_all_dialects()]:
        assert f"`{name}`" in text, name
