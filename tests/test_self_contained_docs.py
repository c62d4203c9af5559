"""The code's words stand on their own: no docstring, comment or test name of the library, the tests, the
scripts or the benchmarks points at a document outside the repository (a design write-up, a guide, an
issue tracker's numbers), which a reader of the repository cannot open.  Say what the thing means instead.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("loam", "dialects", "passes", "frontends", "backends", "tests", "scripts", "bench", "examples")
OUTSIDE = re.compile(
    r"\b[Ii]ssue \d+|\bthe WEP\b|\bWEP's\b|DESIGN\.md|\bthe (?:serving )?guide\b|\bseeds/|\.\./shared/"
    r"|serving-package-guide|language-spec|design card"
)
"""How such a pointer is spelled: an issue number, the design write-ups by name, a path into ../shared."""


def outside_references(text: str, path: str) -> list[str]:
    """Each line of `text` that points at a document outside the repository, as `path:line: text`."""
    return [f"{path}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


def test_no_file_points_outside_the_repository() -> None:
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() == Path(__file__).resolve() or ".venv" in path.parts:
                continue
            found += outside_references(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "pointers to documents outside the repository:\n" + "\n".join(found)


def test_a_pointer_outside_is_named() -> None:
    text = '"""As issue 3, item 4a asks."""\n# the WEP\'s rule\nx = 1  # see ../shared/seeds/guide.txt\nseed = 4\n'
    assert outside_references(text, "m.py") == [
        'm.py:1: """As issue 3, item 4a asks."""',
        "m.py:2: # the WEP's rule",
        "m.py:3: x = 1  # see ../shared/seeds/guide.txt",
    ]
