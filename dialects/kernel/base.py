"""What the `kernel` ops share: the `node` property, the one-operand op shape, and readers of
value types.

The ops accept any value type, so the dialect need not import `tensor_axes`: the readers here are
duck-typed (`!tensor_axes.tensor` has `.elem` and `.axes`), and `extents_of` answers None for a type
without axes, where a verifier then checks nothing it cannot see.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation, ParsePropInAttrDict, operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from loam.core.poly import derived_call


def extents_of(t: Attribute) -> tuple[Any, ...] | None:
    """The extents (Polys) of a tensor_axes type, or None for a type without axes."""
    axes = getattr(t, "axes", None)
    if axes is None:
        return None
    return tuple(a.extent for a in axes)


def is_one(extent: Any) -> bool:
    return bool(extent.is_const) and extent.const_value == 1


def element_count(extents: Sequence[Any]) -> Any:
    """The element count as a Poly, or the int 1 for rank 0."""
    total: Any = None
    for e in extents:
        total = e if total is None else total * e
    return 1 if total is None else total


def same_count(a: Sequence[Any], b: Sequence[Any]) -> bool:
    pa, pb = element_count(a), element_count(b)
    if isinstance(pa, int) or isinstance(pb, int):
        other = pb if isinstance(pa, int) else pa
        return isinstance(other, int) or is_one(other)
    return bool(pa == pb)


def node_prop() -> Any:
    return prop_def(StringAttr)


class KernelOp(IRDLOperation):
    """Shared helpers for ops with a `node` property."""

    @property
    def node_name(self) -> str:
        """The ONNX node this op computes."""
        node = self.properties.get("node")
        return node.data if isinstance(node, StringAttr) else ""


def reads_derived(*extents: object) -> bool:
    """Whether an extent reads a derived symbol (`min(128, past + seq)`): whether two such extents are
    equal can rest on the owed conditions stage 0 decided them under, which a verifier does not see."""
    return any(derived_call(s) is not None for e in extents for s in getattr(e, "symbols", ()))


def same_extent(a: object, b: object) -> bool:
    """Whether two extents are one, as far as a verifier can tell: equal, or reading a derived symbol."""
    return a == b or reads_derived(a, b)


def same_extents(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(same_extent(x, y) for x, y in zip(a, b, strict=True))


def check_broadcast(operands: Sequence[SSAValue], result: SSAValue, what: str) -> None:
    """Each of `operands` broadcasts (ONNX multidirectional) to `result`'s extents."""
    out = extents_of(result.type)
    if out is None:
        return
    for i, v in enumerate(operands):
        ext = extents_of(v.type)
        if ext is None:
            continue
        if len(ext) > len(out):
            raise VerifyException(f"{what} operand {i} has rank {len(ext)}, result {len(out)}")
        for j, e in enumerate(ext):
            o = out[len(out) - len(ext) + j]
            if not same_extent(e, o) and not is_one(e):
                raise VerifyException(f"{what} operand {i} axis {j} is {e}, which does not broadcast to {o}")


class OneInputOp(KernelOp):
    """The shape of `kernel.cast` and `kernel.regroup`: one operand, one result, `node`.

    Syntax: `kernel.NAME %x {node = "NODE"} : T -> R`
    """

    input = operand_def()
    node = node_prop()
    result = result_def()

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue | Operation, result_type: Attribute, node: str) -> None:
        super().__init__(operands=[input], properties={"node": StringAttr(node)}, result_types=[result_type])
