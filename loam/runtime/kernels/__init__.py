"""The library kernels a generated numpy module inlines, one module per kernel family.

Each module defines `PIECES` (name -> function or class, copied into the module by source), exactly
as the rest of `loam.runtime` does; `backends/numpy_runtime.py` merges them.  A kernel op
`kernel.NAME` is computed by the piece `kernel_NAME`, called with the op's operands and then its
parameters as keywords.  Stage 0 folds a node the build can evaluate with the same function (so the
kernels have public names: the operator rules in `loam.ops` import them), and an operator's numeric
meaning is written once.

Pieces read only numpy (and ml_dtypes, which a module holding a narrow type imports), the builtins
and the other pieces, and compute each element type as ONNX defines it: halves (f16, bf16) are
widened to f32 for arithmetic and narrowed for the result.
"""

from __future__ import annotations

from collections.abc import Callable

from loam.runtime.kernels import (
    attention,
    common,
    compiled,
    conv,
    elementwise,
    indexing,
    int8_compiled,
    int8_products,
    losses,
    movement,
    narrow,
    norm_compiled,
    normalization,
    products,
    quantized,
    recurrent,
    reduce,
    resize,
    sampling,
    signal,
    state,
    stochastic,
    zip_compiled,
)

FAMILIES = (
    common,
    elementwise,
    zip_compiled,
    movement,
    state,
    indexing,
    reduce,
    normalization,
    norm_compiled,
    losses,
    narrow,
    signal,
    conv,
    resize,
    recurrent,
    sampling,
    stochastic,
    products,
    compiled,
    int8_compiled,
    int8_products,
    quantized,
    attention,
)

PIECES: dict[str, Callable[..., object]] = {name: piece for family in FAMILIES for name, piece in family.PIECES.items()}
