"""Give the runtime pieces the compiler calls public names, in every file named (replayable).

Why this script exists: `loam/runtime/` is a package of its own, and a test (tests/test_imports.py)
refuses any import of an underscore-private name from another package.  Every piece the compiler
calls across a package boundary (the library kernels stage 0 folds with, the half helpers, the
derived-extent function, the GGUF header parser, the checkpoint name map, the dtype rule, the
resize taps WGSL shares, the block helpers the packed kernels read, and the safetensors table the
printer prints) therefore gets a public name, in the runtime and so in every generated module.  The
renames are purely textual, so a branch written before them replays them by running this script on
its files:

    python scripts/rename_runtime_pieces.py backends/numpy_module.py backends/wgsl_module.py

With no arguments it rewrites every file `git ls-files` lists, except the benchmark records in
`bench/` (measured under the old names) and this script.  A name is replaced only where it stands
alone (not inside a longer identifier: `_widened_only` stays), so running it twice changes nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

KERNELS = (
    "arg_reduce", "concat", "conv", "conv_transpose", "cumsum", "einsum", "gather", "gather_elements",
    "gather_packed", "group_norm", "lrn", "matmul_packed", "normalize", "pad", "pool", "range", "reduce",
    "resize", "scatter_elements", "scatter_nd", "slice", "softmax", "split", "tile", "topk", "trilu",
)  # fmt: skip
"""Every library kernel: `_k_NAME` becomes `kernel_NAME`."""

RENAMES: dict[str, str] = {
    **{f"_k_{name}": f"kernel_{name}" for name in KERNELS},
    "_k_NAME": "kernel_NAME",  # how docstrings name any kernel
    "_widened": "widened",
    "_narrowed": "narrowed",
    "_resize_coordinates": "resize_coordinates",
    "_nearest_taps": "nearest_taps",
    "_cubic_taps": "cubic_taps",
    "_block_integers": "block_integers",
    "_dequant_blocks": "dequant_blocks",
    "_gguf_read": "parse_gguf_header",
    "_graph_name": "graph_name_of",
    "_supplies": "encoding_supplies",
    "_derived": "derived_extent",
    "_SAFETENSORS_DTYPES": "SAFETENSORS_DTYPES",
}
"""Old name -> new name, each replaced where it is a whole identifier."""

# A name stands alone after a non-identifier character, or after a `\n` / `\t` escape in a string
# literal (`"...\n_SAFETENSORS_DTYPES = {"`: the printer's own text).
_ALONE = r"(?:(?<![\w])|(?<=\\[nt]))"
_WHOLE = re.compile(_ALONE + "(" + "|".join(sorted(map(re.escape, RENAMES), key=len, reverse=True)) + r")(?![\w])")
# The printer spells a kernel's piece `f"_k_{op.kernel_name}"`; docstrings say `_k_*`.
_SPELLED = re.compile(_ALONE + r"_k_(?=[{*])")


def rename(text: str) -> str:
    """`text` with every old name replaced by its new one."""
    text = _WHOLE.sub(lambda m: RENAMES[m.group(1)], text)
    return _SPELLED.sub("kernel_", text)


def main(paths: list[str]) -> None:
    if not paths:
        listed = subprocess.run(["git", "ls-files"], check=True, capture_output=True, text=True).stdout.split()
        paths = [p for p in listed if not p.startswith("bench/") and p != "scripts/rename_runtime_pieces.py"]
    for name in paths:
        path = Path(name)
        try:
            text = path.read_bytes().decode("utf-8")  # bytes: line endings stay as they are
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # binary files, submodules, files deleted in the work tree
        new = rename(text)
        if new != text:
            path.write_bytes(new.encode("utf-8"))
            print(f"renamed in {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
