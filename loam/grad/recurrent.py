"""The grad clauses of the recurrent kernels (`kernel.rnn`, `kernel.gru`, `kernel.lstm`)."""

from __future__ import annotations

from xdsl.ir import Operation

from loam.grad.base import Clause

CLAUSES: dict[type[Operation], Clause] = {}
EVERY_RESULT: frozenset[type[Operation]] = frozenset()
"""The ops whose clause reads the adjoint of each result itself (a gradient may reach any of them)."""
