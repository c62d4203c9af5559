"""How the numpy module spells an `Expr` step and an element type (`np.float32`, `ml_dtypes.bfloat16`).

Both the module's printer (`numpy_module`: zips, casts, constants, buffers) and the tile-program
printer (`numpy_tile`) spell steps and dtypes alike; each step calls the numpy ufunc or the runtime
piece `loam.runtime.kernels.elementwise` names for its operator, the functions stage 0 folds with.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loam.dialects.expr import Binary, Const, Convert, Select, Unary, format_float
from loam.errors import UnsupportedError
from loam.runtime.kernels.elementwise import BINARY_SOURCE, UNARY_SOURCE


def _dtype_source(dtype: np.dtype) -> str:
    """How the module spells `dtype`: `np.float32`, `np.bool_`, `ml_dtypes.bfloat16`."""
    if dtype.type.__module__ != "numpy":
        return f"ml_dtypes.{dtype.name}"
    return f"np.{'bool_' if dtype.name == 'bool' else dtype.name}"


def step_source(step: object, refs: Sequence[str], target: str = "", in_place: bool = False,
                prepared: bool = False) -> str:  # fmt: skip
    """The numpy expression computing one (non-operand) `Expr` step from the earlier steps `refs`.

    `target` (`, out=NAME`) makes a ufunc write into a buffer (`in_place`: ReLU as `np.maximum`); a
    `prepared` cast reads an operand Weights already holds in float32."""
    if isinstance(step, Const):
        text = format_float(step.value)
        literal = {"inf": "np.inf", "-inf": "-np.inf", "nan": "np.nan"}.get(text, text)
        return f"{_dtype_source(_expr_dtype(step.elem))}({literal})"
    if isinstance(step, Unary):
        fn = UNARY_SOURCE[step.op]
        if fn == "_relu" and in_place:
            return f"np.maximum({refs[step.arg]}, 0{target})"
        return f"{fn}({refs[step.arg]}{target})" if fn else refs[step.arg]
    if isinstance(step, Binary):
        return f"{BINARY_SOURCE[step.op]}({refs[step.lhs]}, {refs[step.rhs]}{target})"
    if isinstance(step, Select):
        return f"np.where({refs[step.cond]}, {refs[step.a]}, {refs[step.b]})"
    assert isinstance(step, Convert)
    if prepared:
        return refs[step.arg]  # already the float32 this cast makes, prepared once by Weights
    return f"np.asarray({refs[step.arg]}).astype({_dtype_source(_expr_dtype(step.elem))})"


def _expr_dtype(elem: str) -> np.dtype:
    """The dtype of an Expr constant or cast: plain numpy, or ml_dtypes.bfloat16."""
    from loam.dtypes import by_name

    dtype = by_name(elem).numpy
    if dtype is None or dtype.kind == "O" or (dtype.type.__module__ != "numpy" and elem != "bf16"):
        raise UnsupportedError(f"expression step of element type {elem} has no numpy dtype")
    return dtype
