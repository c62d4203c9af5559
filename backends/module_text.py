"""How a generated module spells the program's types and values: dtypes, shapes' element types,
kernel parameters as Python literals, and the module attributes the build attaches.

Shared by every backend's module printer; plain functions of the IR, with no printer state.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue

from loam.core.errors import UnsupportedError
from loam.dialects import build_contract as contract
from loam.dialects.tensor_axes import AxesTensorType


def row_orders(module: ModuleOp) -> tuple[tuple[str, int], ...]:
    """The tensors whose rows llama.cpp interleaved for its rotary embedding, with their head counts
    (`loam.row_orders`), for `Weights._ROW_ORDERS`."""
    return contract.ROW_ORDERS.get(module) or ()


CHECKPOINT_FORMATS = contract.READABLE_FORMATS
"""Every checkpoint format a module can read."""


def checkpoint_formats(module: ModuleOp) -> tuple[str, ...]:
    """The checkpoint formats the module's `Weights.load` reads: those of the checkpoints the build
    checked (`loam.checkpoint_formats`), or every format when it checked none."""
    return contract.CHECKPOINT_FORMATS.get(module) or CHECKPOINT_FORMATS


INLINE_LIMIT = 1 << 20
"""The bytes of carried weights a module holds in its own source by default (`loam.weights_beside`): a
source of a few MiB still imports in milliseconds; past that, parsing the literal costs more than mapping a
file."""


def weights_beside(module: ModuleOp) -> int | None:
    """The byte count past which the module's carried weights go beside it (`loam.weights_beside`), or None."""
    return contract.WEIGHTS_BESIDE.get(module)


def checkpoint_names(module: ModuleOp) -> tuple[tuple[str, str], ...]:
    """The `[checkpoint_names]` rules the build attached to `module` (none: checkpoint names are the graph's)."""
    return contract.CHECKPOINT_NAMES.get(module) or ()


def node_label(op: Operation) -> str:
    """The ONNX node an op computes (its `node` property), or the op's name where it names none: what
    a module's comments and messages call it."""
    node = op.properties.get("node")
    return node.data if isinstance(node, StringAttr) else op.name


def axes_type(value: SSAValue, what: str) -> AxesTensorType:
    t = value.type
    if not isinstance(t, AxesTensorType):
        raise UnsupportedError(f"{what} has type {t}; the numpy backend needs !tensor_axes.tensor")
    return t


def numpy_dtype(t: AxesTensorType, what: str) -> np.dtype:
    """The dtype holding `t`'s elements: a plain numpy one, or one of ml_dtypes' (bfloat16, float8, int4, ...)."""
    dtype = t.elem.numpy
    if dtype is None or dtype.kind == "O":
        raise UnsupportedError(f"{what} has element type {t.elem.name}, which plain numpy cannot hold")
    return dtype


def dtype_source(dtype: np.dtype) -> str:
    """How the module spells `dtype`: `np.float32`, `np.bool_`, `ml_dtypes.bfloat16`, `ml_dtypes.int4`."""
    if dtype.type.__module__ != "numpy":
        return f"ml_dtypes.{dtype.name}"
    return f"np.{'bool_' if dtype.name == 'bool' else dtype.name}"


def type_text(t: AxesTensorType) -> str:
    return f"{t.elem.name} [{', '.join(str(a) for a in t.axes)}]"


def py_literal(value: object) -> str:
    """A kernel parameter as Python source (`float("inf")` where repr is not source)."""
    if isinstance(value, float) and not np.isfinite(value):
        return f"float({repr(value)!r})"
    if isinstance(value, tuple):
        items = [py_literal(v) for v in value]
        return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"
    return repr(value)


def tuple_py(items: Sequence[object]) -> str:
    """A tuple of values as Python source."""
    return repr(tuple(items))


def tuple_source(items: Sequence[str]) -> str:
    """A tuple of Python expressions (each already source) as Python source."""
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
