"""docs/architecture.md's generated sections must be exactly what `python -m loam.tools.architecture_doc` writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from loam.tools.architecture_doc import DOC_PATH, LAYERS_BEGIN, PLACES_BEGIN, main, render_layers, updated


def test_the_generated_sections_are_current() -> None:
    current = DOC_PATH.read_text(encoding="utf-8")
    assert updated(current) == current, (
        f"{DOC_PATH} is out of date; regenerate it with `python -m loam.tools.architecture_doc --write`"
    )


def test_the_layer_diagram_lists_every_layer_and_the_measured_counts() -> None:
    from loam.tools.layers import LAYERS

    text = render_layers()
    assert text.startswith(LAYERS_BEGIN)
    for index, layer in enumerate(LAYERS):
        assert f"{index}  {layer.name}" in text
    assert "| imports against the layer order | 0 |" in text
    assert "| cycles between packages | 0 |" in text


def test_check_fails_on_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "architecture.md"
    stale.write_text(DOC_PATH.read_text(encoding="utf-8").replace("`loam/ops/cast.py`", "`loam/ops/old.py`", 1)
                     .replace(PLACES_BEGIN + "\n", PLACES_BEGIN + "\nstale\n", 1), encoding="utf-8")  # fmt: skip
    monkeypatch.setattr("loam.tools.architecture_doc.DOC_PATH", stale)
    assert main(["--check"]) == 1
    assert main(["--write"]) == 0
    assert main(["--check"]) == 0
    assert "stale" not in stale.read_text(encoding="utf-8").split(PLACES_BEGIN)[1]
