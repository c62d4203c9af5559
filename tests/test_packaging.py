"""Packaging: what `pip install .` puts in the wheel is what the checkout has.

The top-level folders `dialects/`, `passes/`, ... install as `loam.dialects`, `loam.passes`, ...
through setuptools' `package-dir` mapping with an explicit `packages` list.  The default editable
install imports from the folders directly and so hides a subpackage missing from that list; these
tests catch it, and the slow one builds a real wheel, installs it into a fresh venv and imports it.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def package_folders() -> dict[str, Path]:
    """Every package the mapping implies: a folder (or subfolder) holding .py files, by dotted name."""
    found: dict[str, Path] = {}
    for package, folder in SETUPTOOLS["package-dir"].items():
        base = ROOT / folder
        for source in base.rglob("*.py"):
            relative = source.parent.relative_to(base)
            if "__pycache__" in relative.parts or any(p.startswith(".") for p in relative.parts):
                continue
            found[".".join((package, *relative.parts))] = source.parent
    return found


def test_every_package_folder_is_listed() -> None:
    listed = set(SETUPTOOLS["packages"])
    missing = sorted(set(package_folders()) - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"


def folder_of(package: str) -> Path:
    """Where setuptools looks for `package`: the longest mapped prefix, then the remaining parts."""
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in SETUPTOOLS["package-dir"]:
            return ROOT / SETUPTOOLS["package-dir"][prefix] / Path(*parts[cut:])
    return ROOT / Path(*parts)


def test_every_listed_package_has_an_init() -> None:
    for package in SETUPTOOLS["packages"]:
        folder = folder_of(package)
        assert (folder / "__init__.py").is_file(), f"{package}: no __init__.py in {folder}"


def test_grammar_files_are_package_data() -> None:
    grammars = sorted(p.name for p in (ROOT / "grammar").glob("*.lark"))
    assert grammars, "grammar/ holds no .lark file"
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["loam.grammar"]
    for name in grammars:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name


def test_console_scripts_resolve() -> None:
    import importlib

    for script, target in PYPROJECT["project"]["scripts"].items():
        module_name, _, function = target.partition(":")
        module = importlib.import_module(module_name)
        assert callable(getattr(module, function, None)), f"{script} -> {target}"


def _copy_source(destination: Path) -> None:
    """The files a wheel is built from: pyproject, README and the mapped folders (no caches)."""
    destination.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, destination / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".*")
    for folder in sorted(set(SETUPTOOLS["package-dir"].values())):
        shutil.copytree(ROOT / folder, destination / folder, ignore=ignore)


def _local_backend_can_build_wheels() -> bool:
    try:
        from importlib.metadata import version

        major, minor = (int(x) for x in version("setuptools").split(".")[:2])
    except Exception:
        return False
    return (major, minor) >= (70, 1) or find_spec("wheel") is not None


@pytest.mark.xdist_group("wheel")
def test_regular_install_from_a_wheel_works(tmp_path: Path) -> None:
    """Slow (about a minute) but kept: it is the only test that proves the wheel, not the checkout."""
    source = tmp_path / "src"
    _copy_source(source)
    dist = tmp_path / "dist"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)]
    if _local_backend_can_build_wheels():
        command.insert(4, "--no-build-isolation")
    built = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)
    if built.returncode != 0 and "No matching distribution found for setuptools" in built.stderr:
        pytest.skip("no local setuptools that builds wheels and no package index to fetch one from")
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("loam-*.whl")
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"{package.replace('.', '/')}/{source.name}"
        for package, folder in package_folders().items()
        for source in folder.glob("*.py")
    }
    expected |= {f"loam/grammar/{p.name}" for p in (ROOT / "grammar").glob("*.lark")}
    assert not sorted(expected - in_wheel), f"left out of the wheel: {sorted(expected - in_wheel)}"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    # The dependencies come from the environment running this test: its site-packages folder is
    # added as a plain path (a .pth line), so its editable-install hook for loam is NOT activated.
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    xdsl_spec = find_spec("xdsl")
    assert xdsl_spec is not None and xdsl_spec.origin is not None
    (Path(purelib) / "loam-test-deps.pth").write_text(str(Path(xdsl_spec.origin).parents[1]) + "\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True, timeout=300
    )

    probe = (
        "import importlib.resources, pathlib, loam, loam.dialects.graph, loam.tools.loam_opt\n"
        "print(pathlib.Path(loam.__file__).resolve())\n"
        "print(pathlib.Path(loam.dialects.graph.__file__).resolve())\n"
        "print(importlib.resources.files('loam.grammar').joinpath('onnx.lark').is_file())\n"
    )
    ran = subprocess.run(
        [str(python), "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300
    )
    assert ran.returncode == 0, ran.stderr
    loam_file, graph_file, has_grammar = ran.stdout.split()
    installed = venv.resolve()
    assert Path(loam_file).is_relative_to(installed), loam_file
    assert Path(graph_file).is_relative_to(installed), graph_file
    assert has_grammar == "True"

    script = venv / ("Scripts" if os.name == "nt" else "bin") / "loam"
    version = subprocess.run(
        [str(script), "--version"], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300
    )
    assert version.returncode == 0 and version.stdout.startswith("loam 0."), version.stdout + version.stderr
