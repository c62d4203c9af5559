"""The grad clauses of the kernels that sample or place elements by computed positions (`kernel.resize`,
`kernel.grid_sample`, `kernel.affine_grid`, `kernel.roi_align`, `kernel.col2im`, `kernel.max_unpool`,
`kernel.deform_conv`)."""

from __future__ import annotations

from xdsl.ir import Operation

from loam.grad.base import Clause

CLAUSES: dict[type[Operation], Clause] = {}
EVERY_RESULT: frozenset[type[Operation]] = frozenset()
"""The ops whose clause reads the adjoint of each result itself (a gradient may reach any of them)."""
