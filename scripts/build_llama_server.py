"""Build llama.cpp's own `llama-server` from the llama.cpp source that the llama-cpp-python 0.3.36 sdist vendors.

Usage: python scripts/build_llama_server.py [--sdist FILE] [--prefix DIR] [--jobs N] [--amx]

What and why: `python -m bench.serve` compares `loam serve` with llama.cpp's own server, which batches its
parallel slots continuously (`-np N`), beside llama-cpp-python's server, which runs one request at a time.
Both peers then run the same llama.cpp: the one pinned by the sdist `pip download --no-deps --no-binary :all:
llama-cpp-python==0.3.36` fetches.  This checks the sdist's SHA-256, extracts only its `vendor/llama.cpp`
under `--prefix` (default ~/.cache/loam/llama-server), and builds only the `llama-server` target with CMake:
Release, tuned for this CPU (`GGML_NATIVE`), no network at configure or build time (no curl, no OpenSSL, no
prebuilt web UI), tests and examples off, AMX off (see NO_AMX).  It prints the binary's path,
`PREFIX/build/bin/llama-server`, where bench.serve looks for it.  A rerun rebuilds incrementally.  Nothing
under the repository is written.  Standard library only; needs cmake and a C++ compiler (it says which is
missing).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # PyPI's llama_cpp_python-0.3.36.tar.gz
PREFIX = Path.home() / ".cache" / "loam" / "llama-server"
VENDORED = f"llama_cpp_python-{VERSION}/vendor/llama.cpp"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",  # this machine's vector extensions, as the bench's peers are built
    "-DLLAMA_CURL=OFF",  # no model downloads (deprecated in this llama.cpp, which warns and ignores it)
    "-DLLAMA_OPENSSL=OFF",  # the server listens on 127.0.0.1 over plain HTTP
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # otherwise configure fetches the web UI
)
# GCC keeps an explicit -mno-* whatever -march=native says.  ggml's AMX kernels trap (SIGILL on `tilezero`) where
# a virtual machine advertises AMX that it does not run, as on the 2-core VM the bench ran on; without AMX, ggml
# multiplies with its AVX-512 kernels.  `--amx` keeps them.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def refuse(message: str) -> SystemExit:
    return SystemExit(f"build_llama_server: {message}")


def tools() -> list[str]:
    """CMake's generator arguments (Ninja where installed); refuses, naming it, if a needed tool is missing."""
    if shutil.which("cmake") is None:
        raise refuse("cmake is not on PATH (install cmake 3.14 or newer)")
    compilers = [os.environ.get("CXX", ""), "c++", "g++", "clang++"]
    if not any(c and shutil.which(c) for c in compilers):
        raise refuse("no C++ compiler on PATH ($CXX, c++, g++ or clang++; install g++ or clang)")
    if shutil.which("ninja"):
        return ["-G", "Ninja"]
    if shutil.which("make") is None:
        raise refuse("neither ninja nor make is on PATH (CMake needs one to build)")
    return []


def find_sdist(choice: Path | None) -> Path:
    """The sdist: `choice`, else SDIST in the working folder or /tmp/lcpp."""
    for candidate in [choice] if choice else [Path(SDIST), Path("/tmp/lcpp") / SDIST]:
        if candidate.is_file():
            return candidate
    raise refuse(
        f"no {SDIST}: pass --sdist FILE, or fetch it with "
        f"`pip download --no-deps --no-binary :all: llama-cpp-python=={VERSION}`"
    )


def check(sdist: Path) -> None:
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SHA256:
        raise refuse(f"{sdist} has SHA-256 {digest}, not llama-cpp-python {VERSION}'s {SHA256}")


def extract(sdist: Path, prefix: Path) -> Path:
    """`vendor/llama.cpp` of `sdist` under `prefix` (once: a marker file records a finished extraction)."""
    source = prefix / VENDORED
    marker = prefix / f".extracted-{SHA256[:16]}"
    if marker.is_file() and (source / "CMakeLists.txt").is_file():
        print(f"build_llama_server: source already extracted at {source}", flush=True)
        return source
    print(f"build_llama_server: extracting {VENDORED} from {sdist}", flush=True)
    with tarfile.open(sdist, "r:gz") as archive:
        members = [m for m in archive.getmembers() if m.name == VENDORED or m.name.startswith(VENDORED + "/")]
        archive.extractall(prefix, members=members, filter="data")
    marker.write_text(SHA256 + "\n", encoding="utf-8")
    return source


def build(source: Path, prefix: Path, jobs: int, generator: list[str], amx: bool) -> Path:
    folder = prefix / "build"
    flags = "" if amx else NO_AMX
    configure = ["cmake", "-S", str(source), "-B", str(folder), *generator, *CMAKE_OPTIONS,
                 f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]  # fmt: skip
    steps = [configure, ["cmake", "--build", str(folder), "--target", "llama-server", "-j", str(jobs)]]
    for step in steps:
        print("build_llama_server: $ " + " ".join(step), flush=True)
        if subprocess.run(step).returncode != 0:
            raise refuse(f"`{' '.join(step[:2])}` failed (its output is above)")
    binary = folder / "bin" / "llama-server"
    if not binary.is_file():
        raise refuse(f"the build finished without {binary}")
    return binary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/build_llama_server.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, help=f"the {SDIST} (default: ./{SDIST}, else /tmp/lcpp/{SDIST})")
    parser.add_argument("--prefix", type=Path, default=PREFIX, help=f"build folder (default {PREFIX})")
    parser.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (default 2)")
    parser.add_argument("--amx", action="store_true", help="keep ggml's AMX kernels where the CPU advertises AMX")
    args = parser.parse_args(argv)
    generator = tools()
    sdist = find_sdist(args.sdist)
    check(sdist)
    args.prefix.mkdir(parents=True, exist_ok=True)
    binary = build(extract(sdist, args.prefix), args.prefix, args.jobs, generator, args.amx)
    print(f"build_llama_server: built {binary}", flush=True)
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
