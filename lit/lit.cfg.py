# lit configuration for Loam: `lit -v lit/` (tests/test_lit.py runs it from pytest).
# Each folder holds the tests of one dialect, pass, frontend or tool; a test file starts with its
# RUN lines, which call the console scripts `loam-opt`, `loam-translate` and `loam` and pipe their
# output into `filecheck`.  lit injects `config` and `lit_config` into this file's globals.
# ruff: noqa: F821
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
