"""README's test command and its set-up script, scripts/dev-setup.sh.

`.ci/run` runs exactly README's second command, so what CI proves is what a user runs.  The script's
apt-get logic runs here against stubs (a PATH of small shell scripts standing for python3, dpkg-query,
apt-get, id, sudo and the tools the packages bring), which take the place of a fresh Debian machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "dev-setup.sh"
MESA = ["mesa-vulkan-drivers", "libgl1-mesa-dri", "libegl1"]
# What installing a Debian package puts on PATH (nodejs: Debian's brings node, Nodesource's node and npm).
BRINGS = {"chromium": ["chromium"], "chromium-driver": ["chromedriver"], "nodejs": ["node"], "npm": ["npm"]}


def readme_test_command() -> str:
    block = (ROOT / "README.md").read_text(encoding="utf-8").split("```sh\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    assert len(lines) == 2, "README starts with exactly two commands"
    return lines[1]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    command = readme_test_command()
    assert command.startswith("scripts/dev-setup.sh && "), command
    assert command in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def test_the_script_parses() -> None:
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def machine(
    tmp: Path, installed: list[str], uid: int = 0, sudo: bool = False, nodesource: bool = False, gl: bool = False
) -> Path:
    """A fake Debian machine under `tmp`: bin/ (its PATH), state/ (its installed packages), log (what ran);
    `gl`: wgpu finds an adapter (OpenGL's) even without Mesa's Vulkan driver."""
    bin_, state, repo, log = tmp / "bin", tmp / "state", tmp / "repo", tmp / "log"
    for folder in (bin_, state, repo / "scripts"):
        folder.mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts")
    shutil.copy(ROOT / "package-lock.json", repo)
    for tool in ("bash", "dirname", "grep", "cmp", "cp", "env", "mkdir", "touch", "chmod"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_ / tool).symlink_to(found)

    def stub(name: str, body: str) -> None:
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n", encoding="utf-8")
        (bin_ / name).chmod(0o755)

    # Installing a package records it and puts its tools on PATH, each a stub saying it ran (npm ci's
    # makes node_modules). Nodesource's nodejs brings npm too, and conflicts with Debian's npm package.
    brings = {"chromium": "chromium", "chromium-driver": "chromedriver", "npm": "npm"}
    brings["nodejs"] = "node npm" if nodesource else "node"
    cases = "".join(f"  {package}) tool {tools} ;;\n" for package, tools in brings.items())
    stub(
        "give",
        f'touch {state}/"$1"\n'
        f"tool() {{ for t; do printf '#!/bin/bash\\necho %s \"$@\" >> {log}\\nmkdir -p node_modules\\n' $t"
        f" > {bin_}/$t; chmod +x {bin_}/$t; done; }}\n"
        f"case $1 in\n{cases}esac\nexit 0",
    )
    for package in installed:
        subprocess.run([str(bin_ / "give"), package], check=True)
    stub("id", f"echo {uid}")
    # The WebGPU adapter is there once mesa-vulkan-drivers is (or, `gl`, always); the pip step only says it ran.
    found = "true" if gl else f"[ -e {state}/mesa-vulkan-drivers ]"
    stub("python3", f'if [ "$1" = -c ]; then {found}; exit; fi; echo python3 "$@" >> {log}')
    stub("dpkg-query", f'[ -e {state}/"${{@: -1}}" ] && echo -n "install ok installed"')
    npm = "echo 'nodejs : Conflicts: npm' >&2; exit 100" if nodesource else f"{bin_}/give npm"
    stub(
        "apt-get",
        f'echo apt-get "$@" >> {log}\nfor p in "$@"; do case $p in\n'
        f"  -*|install|update) ;;\n  npm) {npm} ;;\n  *) {bin_}/give $p ;;\nesac; done",
    )
    if sudo:
        stub("sudo", f'[ "$1" = -n ] && shift; [ "$1" = true ] && exit 0; echo -n "sudo " >> {log}; exec "$@"')
    return tmp


def run(tmp: Path) -> tuple[int, str, list[str]]:
    """Run the script on the fake machine: its exit status, its messages, and what it ran."""
    done = subprocess.run(
        [str(tmp / "bin" / "bash"), str(tmp / "repo" / "scripts" / "dev-setup.sh")],
        env={**os.environ, "PATH": str(tmp / "bin")},
        capture_output=True,
        text=True,
        check=False,
    )
    log = tmp / "log"
    ran = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return done.returncode, done.stderr, ran


PIP = "python3 scripts/dev_setup_python.py"
NPM_CI = "npm ci --ignore-scripts --no-audit --no-fund"
INSTALL = "apt-get install -y -qq"


def test_a_fresh_debian_gets_every_package_then_npm_last_and_a_second_run_does_nothing(tmp_path: Path) -> None:
    status, said, ran = run(machine(tmp_path, []))
    assert status == 0, said
    assert ran == [
        PIP,
        "apt-get update -qq",
        f"{INSTALL} {' '.join(MESA)} chromium chromium-driver nodejs",
        f"{INSTALL} npm",  # Debian's nodejs has no npm
        NPM_CI,
    ]
    assert run(tmp_path) == (0, "", [PIP])


def test_an_opengl_adapter_still_gets_mesas_vulkan_driver_for_node(tmp_path: Path) -> None:
    """wgpu takes OpenGL's llvmpipe, but Node's WebGPU (Dawn) reads Vulkan only."""
    status, said, ran = run(machine(tmp_path, ["libgl1-mesa-dri", "libegl1", *BRINGS], gl=True))
    assert status == 0, said
    assert ran == [PIP, "apt-get update -qq", f"{INSTALL} mesa-vulkan-drivers", NPM_CI]


def test_nodesource_nodejs_is_never_asked_for_npm(tmp_path: Path) -> None:
    """Its nodejs package carries npm, and apt-get refuses Debian's npm beside it ("Conflicts: npm")."""
    status, said, ran = run(machine(tmp_path / "installed", [*MESA, "nodejs"], nodesource=True))
    assert status == 0, said
    assert ran == [PIP, "apt-get update -qq", f"{INSTALL} chromium chromium-driver", NPM_CI]
    status, said, ran = run(machine(tmp_path / "repository", MESA, nodesource=True))
    assert status == 0, said
    assert ran == [PIP, "apt-get update -qq", f"{INSTALL} chromium chromium-driver nodejs", NPM_CI]


def test_without_root_it_uses_sudo_or_names_the_command_and_fails(tmp_path: Path) -> None:
    status, said, ran = run(machine(tmp_path / "sudo", [*MESA, "chromium", "nodejs", "npm"], uid=1000, sudo=True))
    assert status == 0, said
    assert ran == [PIP, "sudo apt-get update -qq", f"sudo {INSTALL} chromium-driver", NPM_CI]
    status, said, ran = run(machine(tmp_path / "user", ["chromium", "chromium-driver"], uid=1000))
    assert status == 1 and ran == [PIP]
    assert said.endswith(f"apt-get update && apt-get install -y {' '.join(MESA)} nodejs npm\n"), said
    assert "missing: " in said and "Install them as root" in said
