"""Which runtime pieces a generated numpy module declares, and their source text.

The runtime is `loam.runtime`: plain functions (errors, checkpoint readers and checks, the `forward`
prologue, the GGUF reader, dequantization, the library kernels) that read only numpy, the builtins
and the other pieces they list in `DEPENDS`.  `backends/numpy_module.py` copies only the pieces a
program uses (`pieces_for`, `source_of`), so the generated file imports nothing but numpy and
carries no separate runtime package to drift out of date.  This module only chooses and prints;
nothing in it is copied.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable

from loam.runtime import dequant, errors, gguf, kernels, prologue, threads, weights

PIECES: dict[str, object] = {
    **errors.PIECES,
    **weights.PIECES,
    **prologue.PIECES,
    **gguf.PIECES,
    **dequant.PIECES,
    **kernels.PIECES,
    **threads.PIECES,
}
"""Every piece that may be copied, in the order the module declares them."""

DEPENDS: dict[str, tuple[str, ...]] = {
    **errors.DEPENDS,
    **weights.DEPENDS,
    **prologue.DEPENDS,
    **gguf.DEPENDS,
    **dequant.DEPENDS,
    **kernels.DEPENDS,
    **threads.DEPENDS,
}
"""The other pieces (and the tables `SAFETENSORS_DTYPES` and `FORMATS`) each piece reads, whatever the model."""

FEATURES: dict[str, dict[str, tuple[str, ...]]] = weights.FEATURES
"""What a piece reads only for a feature some models use (`loam.runtime.weights.FEATURES`)."""

# Library kernels that read these operands (by position) only through `widened`: where such an
# operand is a half weight, forward passes the float32 form `Weights` prepared once instead, which
# the kernel computes with unchanged (tests/backends/test_halves.py holds each entry to that).
WIDENED_OPERANDS: dict[str, tuple[int, ...]] = {"kernel_normalize": (1, 2), "kernel_conv": (1, 2)}


def pieces_for(names: Iterable[str], features: Iterable[str] = FEATURES) -> list[str]:
    """`names` and everything they read with `features`, in declaration order (the tables first)."""
    depends = {name: list(deps) for name, deps in DEPENDS.items()}
    for feature in features:
        for name, deps in FEATURES[feature].items():
            depends.setdefault(name, []).extend(deps)
    wanted: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name not in wanted:
            wanted.add(name)
            stack.extend(depends.get(name, ()))
    order = ["SAFETENSORS_DTYPES", "FORMATS", *PIECES]
    return [n for n in order if n in wanted]


def source_of(name: str, features: Iterable[str] = FEATURES) -> str:
    """The source text the module declares for piece `name` (`FORMATS`: by `features`)."""
    if name == "FORMATS":
        formats = ("safetensors", "gguf") if "gguf" in features else ("safetensors",)
        return f"# The checkpoint formats Weights.load reads\nFORMATS = {formats!r}\n"
    if name == "SAFETENSORS_DTYPES":
        rows = "".join(f"    {k!r}: {v!r},\n" for k, v in weights.SAFETENSORS_DTYPES.items())
        head = "# safetensors dtype -> numpy dtype (None: not plain numpy)\nSAFETENSORS_DTYPES = {\n"
        return head + rows + "}\n"
    return inspect.getsource(PIECES[name])  # type: ignore[arg-type]
