"""Type-check the loam library with mypy (the version pyproject.toml's dev extra pins), as installed.

Usage: python scripts/typecheck.py [MYPY ARGS...]     exit status: mypy's (0: no error)

pyproject.toml maps the top-level folders into the package (`dialects/` is `loam.dialects`), which mypy
cannot follow from the source tree, so this builds the package as it installs, a tree of links under
`.mypy_tree/loam` (ignored by git), and checks `-p loam` there; mypy's messages name the tree's
paths, which this rewrites back to the repository's (`.mypy_tree/loam/dialects/expr.py` ->
`dialects/expr.py`).  The settings are pyproject.toml's `[tool.mypy]`.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / ".mypy_tree"


def build_tree() -> dict[str, str]:
    """The link tree under TREE; returns each linked folder's tree path -> its repository path."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    roots: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    package = TREE / "loam"
    package.mkdir(parents=True, exist_ok=True)
    linked: dict[str, str] = {}
    wanted: dict[Path, Path] = {}
    for entry in (ROOT / roots["loam"]).iterdir():
        if entry.name != "__pycache__":
            wanted[package / entry.name] = entry
    for name, folder in roots.items():
        if name != "loam":
            wanted[package / name.removeprefix("loam.").replace(".", "/")] = ROOT / folder
            linked[f".mypy_tree/loam/{name.removeprefix('loam.').replace('.', '/')}/"] = f"{folder}/"
    for link in package.iterdir():
        if link not in wanted or not link.is_symlink() or link.resolve() != wanted[link].resolve():
            link.unlink()
    for link, target in wanted.items():
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=target.is_dir())
    linked[".mypy_tree/loam/"] = f"{roots['loam']}/"
    return linked


def main(argv: list[str]) -> int:
    linked = build_tree()
    config = str(ROOT / "pyproject.toml")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", config, "-p", "loam", *argv],
        cwd=ROOT,
        env={**__import__("os").environ, "MYPYPATH": str(TREE)},
        capture_output=True,
        text=True,
    )
    for stream, out in ((run.stdout, sys.stdout), (run.stderr, sys.stderr)):
        for line in stream.splitlines():
            for tree, repo in sorted(linked.items(), key=lambda kv: -len(kv[0])):
                if line.startswith(tree):
                    line = repo + line[len(tree) :]
                    break
            print(line, file=out)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
