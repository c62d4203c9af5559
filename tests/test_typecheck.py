"""The library type-checks: mypy (pinned in pyproject.toml) over `loam` as it installs, with no error.

`scripts/typecheck.py` runs it (pyproject.toml's `[tool.mypy]`: every `# type: ignore` must name its
error code, and an ignore mypy no longer needs is an error).  Each ignore also says why, in a comment
after it on the same line, which the second test holds the library to.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("loam", "dialects", "passes", "frontends", "backends")
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")


def test_mypy_finds_no_error_in_the_library() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "typecheck.py")], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert run.stdout.strip().startswith("Success: no issues found"), run.stdout


def unexplained_ignores(source: str, path: str) -> list[str]:
    """Each `# type: ignore` in `source` without an error code or without a `# why` comment after it."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        match = IGNORE.search(line)
        if match is None:
            continue
        why = match["rest"].strip().removeprefix("#").strip()
        if not match["codes"] or not why:
            found.append(f"{path}:{number}: {line.strip()}")
    return found


def test_every_type_ignore_names_its_code_and_why() -> None:
    offenders = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            offenders += unexplained_ignores(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not offenders, "type: ignore without a code or a reason:\n" + "\n".join(offenders)


def test_an_ignore_without_its_code_or_reason_is_named() -> None:
    source = (
        "a = f()  # type: ignore\n"
        "b = f()  # type: ignore[arg-type]\n"
        "c = f()  # type: ignore[arg-type]  # xDSL's ArrayAttr is invariant\n"
        "d = 1  # a comment\n"
    )
    assert unexplained_ignores(source, "m.py") == [
        "m.py:1: a = f()  # type: ignore",
        "m.py:2: b = f()  # type: ignore[arg-type]",
    ]
