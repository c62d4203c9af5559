"""The grad clause of `kernel.det`.

d det(X) / d X_ij is the cofactor of (i, j): (-1)^(i + j) times the determinant of X without row i and
column j.  The clause builds every minor at once (X gathered along its rows by the [n, n - 1] table of the
rows other than each i, then along its columns alike), takes their determinants with the same kernel, and
multiplies by g.  Unlike det(X) X^-T, the cofactors are exact where X is singular.  The matrices' extent must
be known at build time.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation, SSAValue

from loam.dialects.expr import Expr
from loam.dialects.kernel import DetOp, GatherOp, RegroupOp
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, Clause, constant, permuted, static_extent, type_of


def _det(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, DetOp)
    x = op.inputs[0]
    t = type_of(x)
    r = t.rank
    n = static_extent(op, t, r - 1)
    batch = list(t.axes[: r - 2])
    units = [Axis.named("Unit", 1)] * 2
    g_kept = b.emit(RegroupOp(g, AxesTensorType(t.elem, [*batch, *units]), f"{node}.grad"))
    if n == 1:  # det of a 1 x 1 matrix is its element
        b.send(x, b.zip([g_kept], Expr.operand(0), t, f"{node}.grad"))
        return
    others = np.array([[k for k in range(n) if k != i] for i in range(n)], np.int64)
    minor_rows, minor_cols = Axis.named("MinorRows", n - 1), Axis.named("MinorCols", n - 1)
    table = AxesTensorType("i64", [Axis.named("Left", n), minor_rows])
    rows_table = constant(b, others, table, node)
    cols_table = constant(b, others, AxesTensorType("i64", [Axis.named("Left", n), minor_cols]), node)
    row_axis, col_axis = t.axes[r - 2], t.axes[r - 1]
    without_row = AxesTensorType(t.elem, [*batch, row_axis, minor_rows, col_axis])
    rows_gone = b.emit(GatherOp([x, rows_table], [without_row], f"{node}.grad", axis=r - 2))
    minors_type = AxesTensorType(t.elem, [*batch, row_axis, minor_rows, col_axis, minor_cols])
    minors = b.emit(GatherOp([rows_gone, cols_table], [minors_type], f"{node}.grad", axis=r))
    square = permuted(b, minors, [*range(r - 2), r - 2, r, r - 1, r + 1], node)
    dets = b.emit(DetOp([square], [t], f"{node}.grad"))
    signs = constant(
        b, (-1.0) ** np.add.outer(np.arange(n), np.arange(n)), AxesTensorType(t.elem, [row_axis, col_axis]), node
    )
    o = Expr.operand
    b.send(x, b.zip([g_kept, dets, signs], o(0) * o(1) * o(2), t, f"{node}.grad"))


CLAUSES: dict[type[Operation], Clause] = {DetOp: _det}
