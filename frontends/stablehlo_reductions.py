"""The rules of StableHLO's contractions and reductions, and what reading a reduction's body takes.

    dot_general                                   MatMul (+ Transpose), else Einsum
    reduce (body add/maximum/minimum/multiply)    ReduceSum/ReduceMax/ReduceMin/ReduceProd
    reduce (body or/and, booleans: jnp.any, all)  ReduceMax/ReduceMin

`reduction_body` and `reduction_identity` serve the window ops' rules too
(`loam.frontends.stablehlo_windows`: reduce_window, select_and_scatter).  The rules register
themselves in `loam.frontends.stablehlo_rules.RULES` when this module is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import numpy as np
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Block, Operation

from loam.core.dtypes import ElementType
from loam.dialects import stablehlo as hlo
from loam.frontends.stablehlo_broadcast import elementwise_result, full
from loam.frontends.stablehlo_builder import GraphBuilder, LoweringError, Operand, int_attr, ints_attr
from loam.frontends.stablehlo_rules import result_of, rule

__all__ = ["reduction_body", "reduction_identity"]


@rule(hlo.DotGeneralOp)
def _dot_general(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.DotGeneralOp)
    shape, elem = result_of(op)
    lhs, rhs = xs
    lb, rb, lc, rc = op.dot_dimension_numbers.dims()
    a, c = full(b, lhs), full(b, rhs)
    if lhs.elem != elem:
        a = b.node("Cast", [a], {"to": int_attr(elem.onnx)}, what="lhs")
    if rhs.elem != elem:
        c = b.node("Cast", [c], {"to": int_attr(elem.onnx)}, what="rhs")
    nl, nr, nb = len(lhs.shape), len(rhs.shape), len(lb)
    batch = tuple(range(nb))
    if lb == rb == batch and len(lc) == 1:
        if nb == 0 and nr == 2 and lc[0] == nl - 1:  # [..., K] x [K, N] (or [N, K])
            if rc[0] == 1:
                c = b.node("Transpose", [c], {"perm": ints_attr([1, 0])}, what="rhs_T")
            return [Operand(b.node("MatMul", [a, c]), shape, elem)]
        if nl == nr == nb + 2 and lc[0] in (nb, nb + 1) and rc[0] in (nb, nb + 1):  # [B..., M, K] x [B..., K, N]
            swap = [*batch, nb + 1, nb]
            if lc[0] == nb:
                a = b.node("Transpose", [a], {"perm": ints_attr(swap)}, what="lhs_T")
            if rc[0] == nb + 1:
                c = b.node("Transpose", [c], {"perm": ints_attr(swap)}, what="rhs_T")
            return [Operand(b.node("MatMul", [a, c]), shape, elem)]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    left = [next(letters) for _ in range(nl)]
    right = [""] * nr
    for i, j in (*zip(lb, rb, strict=True), *zip(lc, rc, strict=True)):
        right[j] = left[i]
    right = [r or next(letters) for r in right]
    out = [left[i] for i in lb]
    out += [left[i] for i in range(nl) if i not in lb and i not in lc]
    out += [right[j] for j in range(nr) if j not in rb and j not in rc]
    equation = f"{''.join(left)},{''.join(right)}->{''.join(out)}"
    return [Operand(b.node("Einsum", [a, c], {"equation": StringAttr(equation)}), shape, elem)]


_REDUCTIONS: dict[type[Operation], tuple[str, str]] = {  # body op -> (reduction, how an init value joins)
    hlo.AddOp: ("ReduceSum", "Add"),
    hlo.MaximumOp: ("ReduceMax", "Max"),
    hlo.MinimumOp: ("ReduceMin", "Min"),
    hlo.MultiplyOp: ("ReduceProd", "Mul"),
    hlo.OrOp: ("ReduceMax", "Or"),  # jnp.any: booleans only
    hlo.AndOp: ("ReduceMin", "And"),  # jnp.all: booleans only
}


def reduction_identity(reduction: str, elem: ElementType) -> object:
    """The init value that changes nothing: 0, 1, or the lowest / highest value of `elem`."""
    if reduction in ("ReduceSum", "ReduceProd"):
        return 0 if reduction == "ReduceSum" else 1
    low = reduction == "ReduceMax"
    if elem.name == "bool":
        return not low
    if elem.is_float:
        return -np.inf if low else np.inf
    info = np.iinfo(elem.numpy)
    return info.min if low else info.max


T = TypeVar("T")


def reduction_body(block: Block, table: Mapping[type[Operation], T], reads: str) -> tuple[Operation, T]:
    """The one op of a reduction's body (its two arguments combined, the result returned: a reduce's
    or a reduce_window's) and what `table` says of its kind; else a LoweringError naming what the
    body computes and the one op Loam `reads`."""
    body = list(block.ops)
    combine = body[0] if len(body) == 2 else None
    known = table.get(type(combine)) if combine is not None else None
    if (
        combine is None
        or known is None
        or set(combine.operands) != set(block.args)
        or len(combine.operands) != 2
        or not isinstance(body[1], hlo.ReturnOp)
        or tuple(body[1].values) != tuple(combine.results)
    ):
        names = ", ".join(o.name for o in body[:-1])
        raise LoweringError(f"its body computes {names or 'nothing'}; Loam reads a body of one {reads}")
    return combine, known


@rule(hlo.ReduceOp)
def _reduce(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.ReduceOp)
    if len(op.inputs) != 1:
        raise LoweringError(f"a reduce of {len(op.inputs)} operands at once (an argmax, say) is not supported")
    combine, (reduction, joining) = reduction_body(
        op.body.block, _REDUCTIONS, "stablehlo.add, maximum, minimum, multiply, and or or of the two arguments"
    )
    shape, elem = result_of(op)
    if joining in ("And", "Or") and elem.name != "bool":
        raise LoweringError(f"a reduce with a bitwise {combine.name} body over {elem.name} is not supported")
    x, init = xs
    dims = list(op.dims)
    if not dims:  # nothing reduced: ONNX would read empty axes as "all of them"
        value, held = full(b, x), [x]
    elif reduction == "ReduceSum":
        value = b.node(reduction, [full(b, x), b.ints(dims, "axes")], {"keepdims": int_attr(0)})
        held = [Operand(value, shape, elem)]
    else:
        value = b.node(reduction, [full(b, x)], {"axes": ints_attr(dims), "keepdims": int_attr(0)})
        held = [Operand(value, shape, elem)]
    if init.known is not None and np.all(init.known == reduction_identity(reduction, elem)):
        return [elementwise_result(value, held, shape, elem)]
    combined = b.node(joining, [value, init.value], what="init")
    return [elementwise_result(combined, [*held, init], shape, elem)]
