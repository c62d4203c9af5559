"""What a StableHLO lowering writes with: its values (`Operand`) and the `GraphBuilder` that appends ONNX nodes.

The rules (`loam.frontends.stablehlo_elementwise`, `_movement`, `_reductions`, `_indexing`,
`_windows`, `_control`) read each StableHLO value as an `Operand` (a graph value, its StableHLO
shape and element type, what it is held as) and emit named ONNX nodes through one `GraphBuilder`
per model; `LoweringError` is how any of them refuses an op.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IntAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Operation, Region, SSAValue

from loam.core.dtypes import ElementType, by_name
from loam.dialects.graph import InitializerOp, ListAttr, NodeOp, TensorDataAttr, UnknownType, set_name_hint
from loam.dialects.graph import TensorType as GraphTensorType

__all__ = [
    "Dim",
    "GraphBuilder",
    "LoweringError",
    "Operand",
    "Shape",
    "element_type",
    "int_attr",
    "ints_attr",
    "shape_and_element",
    "shape_of",
    "spell_shape",
]

Dim = int | None  # an extent, None for StableHLO's `?`
Shape = tuple[Dim, ...]


class LoweringError(Exception):
    """An op the reader cannot express in ONNX; the reader adds the op's name and place."""


def element_type(t: Attribute) -> ElementType:
    """Loam's element type of a StableHLO element type (i1 is bool, signless integers are signed)."""
    if isinstance(t, Float32Type):
        return by_name("f32")
    if isinstance(t, Float16Type):
        return by_name("f16")
    if isinstance(t, BFloat16Type):
        return by_name("bf16")
    if isinstance(t, Float64Type):
        return by_name("f64")
    if isinstance(t, IntegerType) and t.width.data in (1, 8, 16, 32, 64):
        if t.width.data == 1:
            return by_name("bool")
        prefix = "ui" if t.signedness.data == Signedness.UNSIGNED else "i"
        return by_name(f"{prefix}{t.width.data}")
    raise LoweringError(f"element type {t} is not one Loam compiles")


def shape_of(t: Attribute) -> Shape:
    """The StableHLO shape of a tensor type (None for `?`)."""
    if not isinstance(t, TensorType):
        raise LoweringError(f"{t} is not a ranked tensor")
    return tuple(None if d == DYNAMIC_INDEX else int(d) for d in t.get_shape())


def shape_and_element(t: Attribute) -> tuple[Shape, ElementType]:
    """The StableHLO shape and Loam's element type of a ranked tensor type (a LoweringError otherwise)."""
    if not isinstance(t, TensorType):
        raise LoweringError(f"{t} is not a ranked tensor")
    return shape_of(t), element_type(t.element_type)


@dataclass(frozen=True)
class Operand:
    """A StableHLO value as the graph holds it.

    `value` has the StableHLO shape `shape`, or, when `actual` is set, the smaller shape `actual`
    that broadcasts to `shape` (right-aligned, as ONNX broadcasts; None in `actual` is the `?`
    extent at that place).  `target` is the i64 vector of `shape`'s extents when `shape` has `?`s
    and `value` must be expanded at run time; `known` is `value`'s contents when they are constant.
    """

    value: SSAValue
    shape: Shape
    elem: ElementType
    actual: Shape | None = None
    target: SSAValue | None = None
    known: np.ndarray | None = None

    @property
    def held_shape(self) -> Shape:
        """The shape `value` really has."""
        return self.shape if self.actual is None else self.actual


class GraphBuilder:
    """Appends initializers and nodes to one graph, naming each uniquely.

    The nodes of one StableHLO op are named after the op's kind and its count among the ops of
    that kind (`dot_general_2`, `dot_general_2_rhs_T`), which the custom and the generic form of a
    text agree on; each node's doc string gives the op's place in the file and the JAX source line.
    """

    def __init__(self, opset: int, reserved: Sequence[str] = ()) -> None:
        self.opset = opset
        self.ops: list[Operation] = []
        self.top = self.ops  # where initializers go, also while a region is built
        self.used: set[str] = set(reserved)
        self.counts: dict[str, int] = {}
        self.base = "node"
        self.doc: str | None = None

    def start(self, kind: str, doc: str | None = None) -> None:
        """Name the nodes that follow after the next op of `kind`; `doc` says where it is."""
        count = self.counts.get(kind, 0)
        self.counts[kind] = count + 1
        self.base, self.doc = f"{kind}_{count}", doc

    def unique(self, name: str) -> str:
        if name not in self.used:
            self.used.add(name)
            return name
        k = 1
        while f"{name}_{k}" in self.used:
            k += 1
        self.used.add(f"{name}_{k}")
        return f"{name}_{k}"

    @contextmanager
    def region(self) -> Iterator[list[Operation]]:
        """Build into a fresh op list (a subgraph's nodes), yielded; the op being lowered stays named."""
        saved = self.ops, self.base, self.doc
        self.ops = []
        try:
            yield self.ops
        finally:
            self.ops, self.base, self.doc = saved

    def node(
        self, op_type: str, inputs: Sequence[SSAValue], attrs: Mapping[str, Attribute] | None = None, what: str = ""
    ) -> SSAValue:
        """One ONNX node with one output, named after the StableHLO op being lowered (`self.base`)."""
        return self.nodes(op_type, inputs, 1, attrs, what=what)[0]

    def nodes(
        self,
        op_type: str,
        inputs: Sequence[SSAValue],
        count: int,
        attrs: Mapping[str, Attribute] | None = None,
        regions: Sequence[Region] = (),
        what: str = "",
        name: str | None = None,
    ) -> list[SSAValue]:
        """One ONNX node with `count` outputs (and subgraph `regions`), named as `node` names its one
        (or `name`, one `unique` gave)."""
        name = name or self.unique(f"{self.base}_{what}" if what else self.base)
        outputs = [name] if count == 1 else [self.unique(f"{name}_{k}") for k in range(count)]
        node = NodeOp(
            op_type, inputs, [UnknownType()] * count, outputs, node_name=name, since=self.opset, attrs=attrs or {},
            regions=regions, doc_string=self.doc,
        )  # fmt: skip
        self.ops.append(node)
        for out, out_name in zip(node.outs, outputs, strict=True):
            set_name_hint(out, out_name)
        return list(node.outs)

    def constant(self, array: np.ndarray, elem: ElementType, what: str = "") -> SSAValue:
        """A `Constant` node holding `array`."""
        data = TensorDataAttr.from_numpy(np.asarray(array, dtype=elem.numpy), elem)
        return self.node("Constant", [], {"value": data}, what)

    def ints(self, values: Sequence[int], what: str) -> SSAValue:
        """A 1-D i64 `Constant`: axes, shapes, starts and ends."""
        return self.constant(np.array(list(values), dtype=np.int64), by_name("i64"), what)

    def weight(self, array: np.ndarray, elem: ElementType) -> SSAValue:
        """An initializer carrying `array`: an embedded weight."""
        name = self.unique(self.base)
        data = TensorDataAttr.from_numpy(np.asarray(array, dtype=elem.numpy), elem)
        op = InitializerOp(name, GraphTensorType(elem, list(array.shape)), data)
        self.top.append(op)  # a subgraph reads it from the graph: ONNX bodies keep no initializers here
        set_name_hint(op.result, name)
        return op.result


def ints_attr(values: Sequence[int]) -> ListAttr:
    return ListAttr("ints", [IntAttr(v) for v in values])


def int_attr(value: int) -> IntegerAttr:
    return IntegerAttr(value, i64)


def spell_shape(shape: Shape) -> str:
    return "x".join("?" if d is None else str(d) for d in shape) or "scalar"
