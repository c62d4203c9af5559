"""Which of a program's kernels only the weights determine: computed once, when `Weights` is made.

A kernel whose every operand is a weight, a numeric constant or such a kernel's result computes the
same value on every call: a transposed or regrouped weight, a float32 copy of a half one, a Conv's
weights scaled by a folded BatchNormalization (`fold-conv-affine`).  The numpy module computes these
in `_prepare(weights)`, which `Weights.__init__` calls, so forward reads the result as an attribute
(`weights.NAME`) instead of recomputing it on every call.  A pass that moves work onto the weights
(`fold-conv-affine`) asks the same question, so what it moves is what the module computes at load.

Only kernels whose extents and parameters are all constants qualify: `_prepare` runs before any
input has bound a symbol.  A value a program output returns stays in forward (the caller owns what
forward returns), and a kernel reading a packed weight stays there too (its blocks are widened by
the kernel that reads them, `pack-quantized`); so does a random draw (`kernel.random`), the one
library kernel that is no function of its operands.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from xdsl.dialects.builtin import ArrayAttr
from xdsl.ir import Operation, SSAValue

from loam.core.poly import Poly
from loam.dialects import build_contract as contract
from loam.dialects.kernel import (
    CastOp,
    ConstantOp,
    LibraryOp,
    MatmulOp,
    PermuteOp,
    RandomOp,
    RegroupOp,
    WeightOp,
    ZipOp,
)
from loam.dialects.tensor_axes import AxesTensorType

_AT_LOAD = (ZipOp, CastOp, PermuteOp, RegroupOp, MatmulOp, LibraryOp)
"""The kernels `Weights` may compute: pure functions of their operands (every library kernel but a draw)."""


def weight_only(ops: Sequence[Operation], returned: Collection[SSAValue]) -> tuple[list[Operation], set[SSAValue]]:
    """The ops of a top-level block that only weights and numeric constants determine, in block order
    (those `Weights` computes at load), and every value they determine (theirs, the weights' and the
    constants')."""
    fixed: set[SSAValue] = set()
    chosen: list[Operation] = []
    for op in ops:
        if isinstance(op, WeightOp):
            if not contract.PACKED.is_on(op):
                fixed.add(op.result)
        elif isinstance(op, ConstantOp):
            if not isinstance(op.value, ArrayAttr):  # an ArrayAttr holds polynomials of the inputs' extents
                fixed.add(op.result)
        elif (
            isinstance(op, _AT_LOAD)
            and not isinstance(op, RandomOp)
            and op.operands
            and all(v in fixed for v in op.operands)
            and not any(r in returned for r in op.results)
            and all(_static_type(v.type) for v in (*op.operands, *op.results))
            and (not isinstance(op, LibraryOp) or all(_static(v) for v in op.params.values()))
        ):
            chosen.append(op)
            fixed.update(op.results)
    return chosen, fixed


def kept_results(chosen: Sequence[Operation]) -> set[SSAValue]:
    """The results of `chosen` that some other op reads: those `Weights` keeps as attributes (the
    rest are `_prepare`'s locals)."""
    inside = set(chosen)
    return {r for op in chosen for r in op.results if any(u.operation not in inside for u in r.uses)}


def _static_type(t: object) -> bool:
    return isinstance(t, AxesTensorType) and all(p.is_const for p in t.shape)


def _static(value: object) -> bool:
    """Whether a kernel parameter holds no extent symbol."""
    if isinstance(value, Poly):
        return value.is_const
    if isinstance(value, (tuple, list)):
        return all(_static(v) for v in value)
    return True
