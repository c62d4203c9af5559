"""Signal processing: the window functions HannWindow, HammingWindow and BlackmanWindow.

A window's one operand is its length, an extent the build knows, so stage 0 computes the whole
window and the module carries it as a constant: no kernel runs.  A length known only at run time
is refused by name (it decides the output's extent).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loam import dtypes
from loam.limits import foldable
from loam.ops.base import Facts, NodeInfo, OpRule, int_attr, require_arity
from loam.ops.lowering import FLOAT_TYPES
from loam.ops.operands import INDEX_TYPES, given, is_symbolic, require_elem
from loam.poly import Poly

# The cosine terms of each window: w[n] = sum over (a, k) of a * cos(2 pi k n / N), N the length
# (periodic) or the length - 1 (symmetric), as ONNX's function bodies compute them.
TERMS: dict[str, tuple[tuple[float, int], ...]] = {
    "HannWindow": ((0.5, 0), (-0.5, 1)),
    "HammingWindow": ((25 / 46, 0), (-(1 - 25 / 46), 1)),
    "BlackmanWindow": ((0.42, 0), (-0.5, 1), (0.08, 2)),
}


def window(op_type: str, size: int, periodic: bool, dtype: np.dtype) -> np.ndarray:
    """The `size` values of window `op_type`, computed in float64 and stored as `dtype`."""
    n = np.arange(size, dtype=np.float64)
    span = size if periodic else size - 1
    with np.errstate(all="ignore"):  # a symmetric window of one value divides 0 by 0, as ONNX's does
        values = sum(a * np.cos(2 * np.pi * k * n / span) for a, k in TERMS[op_type])
    return np.asarray(values, dtype=np.float64).astype(dtype)


class WindowRule(OpRule):
    """ONNX HannWindow, HammingWindow, BlackmanWindow (opset 17): a window of the given length,
    periodic (default) or symmetric, of element type `output_datatype` (f32 by default)."""

    op_types = tuple(TERMS)
    kernels: tuple[str, ...] = ()
    attributes = frozenset({"output_datatype", "periodic"})
    first_opset = 17
    elem_types = FLOAT_TYPES
    limitations = "the length must be known at build time (the window is a constant of the module)"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        size = given(node, inputs, 0, "size")
        require_elem(node, size, INDEX_TYPES, "size")
        if size.value is None or is_symbolic(size):
            raise node.unsupported("the window's length must be known at build time")
        flat = np.asarray(size.value).reshape(-1)
        if flat.size != 1 or int(flat[0]) < 0:
            raise node.fail(f"size must be one non-negative integer, not {flat.tolist()}")
        code = int(node.attr("output_datatype", 1))
        elem = dtypes.BY_ONNX.get(code)
        if elem is None or elem.name not in self.elem_types or elem.numpy is None:
            raise node.unsupported(f"output_datatype {code} is not one of {', '.join(self.elem_types)}")
        length = int(flat[0])
        periodic = bool(int_attr(node, "periodic", 1, (0, 1)))
        if not foldable([length], node.where()):
            raise node.unsupported(f"a window of {length} values is too long to carry as a constant")
        return [Facts(elem, (Poly.const(length),), window(node.op_type, length, periodic, elem.numpy))]


RULES: tuple[OpRule, ...] = (WindowRule(),)
