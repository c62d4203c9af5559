"""Which runtime pieces a generated numpy module declares, and their source text.

The runtime is `loam.runtime`: plain functions (errors, checkpoint readers and checks, the `forward`
prologue, the GGUF reader, dequantization, the library kernels) that read only numpy, the standard
library, the builtins and other pieces.  `backends/numpy_module.py` copies only the pieces a program
uses (`pieces_for`, `source_of`), so the generated file imports nothing but numpy and the standard
library modules those pieces read (`standard_imports`: `json`), and carries no separate runtime
package to drift out of date.  Which pieces a piece reads is found in its source text
(`piece_reads.reads`), less those it reads only for a feature the module lacks (`FEATURES`) or only
where a call sets a parameter (`PARAMETER_PIECES`: the printer names those where a call does).  This
module only chooses and prints; nothing in it is copied.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from functools import cache

from loam.backends.piece_reads import closure, reads, standard_modules
from loam.runtime import dequant, errors, gguf, kernels, prologue, threads, weights
from loam.runtime.kernels import int8_products

PIECES: dict[str, Callable[..., object]] = {
    **errors.PIECES,
    **weights.PIECES,
    **prologue.PIECES,
    **gguf.PIECES,
    **dequant.PIECES,
    **kernels.PIECES,
    **threads.PIECES,
}
"""Every piece that may be copied, in the order the module declares them."""

TABLES = ("SAFETENSORS_DTYPES", "FORMATS")
"""The tables a module declares as literals (`source_of`), before every piece."""

FEATURES: dict[str, dict[str, tuple[str, ...]]] = weights.FEATURES
"""What a piece reads only for a feature some models use (`loam.runtime.weights.FEATURES`)."""

PARAMETER_PIECES: dict[tuple[str, str], tuple[str, ...]] = int8_products.PARAMETER_PIECES
"""(kernel, parameter) -> what the kernel reads only where a call sets the parameter (`int8 = 1`)."""

# Library kernels that read these operands (by position) only through `widened`: where such an
# operand is a half weight, forward passes the float32 form `Weights` prepared once instead, which
# the kernel computes with unchanged (tests/backends/test_halves.py holds each entry to that).
WIDENED_OPERANDS: dict[str, tuple[int, ...]] = {"kernel_normalize": (1, 2), "kernel_conv": (1, 2)}


@cache
def _reads(name: str) -> frozenset[str]:
    """Every module-level name piece `name`'s source reads."""
    return reads(source_of(name))


def piece_reads(name: str) -> frozenset[str]:
    """The pieces and tables piece `name`'s source reads, with every feature."""
    return _reads(name) & {*TABLES, *PIECES}


def depends(name: str, features: Iterable[str] = FEATURES) -> frozenset[str]:
    """The pieces and tables piece `name` reads in a module with `features`."""
    features = set(features)
    unreached = {dep for feature, table in FEATURES.items() if feature not in features for dep in table.get(name, ())}
    unreached.update(dep for (kernel, _), deps in PARAMETER_PIECES.items() if kernel == name for dep in deps)
    return piece_reads(name) - unreached


def parameter_pieces(kernel: str, params: Mapping[str, object]) -> set[str]:
    """The pieces `kernel` reads for the parameters a call sets (`PARAMETER_PIECES`), which a module
    calling it so carries."""
    return {dep for (k, key), deps in PARAMETER_PIECES.items() if k == kernel and params.get(key) for dep in deps}


def pieces_for(names: Iterable[str], features: Iterable[str] = FEATURES) -> list[str]:
    """`names` and everything they read with `features`, in declaration order (the tables first)."""
    features = set(features)
    wanted = closure(names, lambda name: depends(name, features))
    return [n for n in (*TABLES, *PIECES) if n in wanted]


def standard_imports(names: Iterable[str]) -> set[str]:
    """The standard library modules the pieces `names` read (`json`), which the module imports."""
    return {module for name in names if name in PIECES for module in standard_modules(PIECES[name], _reads(name))}


def source_of(name: str, features: Iterable[str] = FEATURES) -> str:
    """The source text the module declares for piece `name` (`FORMATS`: by `features`)."""
    if name == "FORMATS":
        formats = ("safetensors", "gguf") if "gguf" in features else ("safetensors",)
        return f"# The checkpoint formats Weights.load reads\nFORMATS = {formats!r}\n"
    if name == "SAFETENSORS_DTYPES":
        rows = "".join(f"    {k!r}: {v!r},\n" for k, v in weights.SAFETENSORS_DTYPES.items())
        head = "# safetensors dtype -> numpy dtype (None: not plain numpy)\nSAFETENSORS_DTYPES = {\n"
        return head + rows + "}\n"
    return _piece_source(name)


@cache
def _piece_source(name: str) -> str:
    """The source text of piece `name` (a function or class), read once."""
    return inspect.getsource(PIECES[name])
