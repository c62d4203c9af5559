"""Rules that write a `com.microsoft` node as a body of ONNX's own operators, expanded before import.

onnxruntime's contrib operators carry no ONNX function body, so where one is a composition of ONNX
operators (an attention is MatMul, Softmax, MatMul with reshapes around them) its rule writes that
body per node (`BodyRule.write`), the way ONNX's own Attention has a body that depends on the node.
The importer's function expander (`loam.frontends.onnx_functions`) puts the body in place of the
node, so every stage after it (stage 0's symbolic extents and owed conditions, the layout, the
kernels, both backends) sees only ONNX operators Loam already compiles.  The body's nodes are named
`NODE/...` and read at the model's default-domain opset, which must be 13 or later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import NodeProto, TypeProto, helper, numpy_helper

from loam.ops.base import Facts, NodeInfo, OpRule
from loam.ops.microsoft.domain import DOMAIN

Fresh = Callable[[str], str]
"""A name no value or node of the model uses yet, from a hint (the importer's `fresh_name`)."""

KnownType = Callable[[str], TypeProto | None]
"""The type ONNX's shape inference gives a value, or None where it gives none."""

DomainBody = Callable[[NodeProto, str, Fresh, KnownType, int], list[NodeProto]]
"""Writes a node of another domain as default-domain nodes: (node, label, fresh, known type, the model's
default-domain opset) -> the nodes, which read the node's inputs and write its outputs."""


FIRST_BODY_OPSET = 13
"""The first default-domain opset a body's nodes are written for (Softmax over one axis, Unsqueeze's
axes as an input)."""


def node_info(proto: NodeProto, label: str, opset: int) -> NodeInfo:
    """The node as the rules see it, its attributes read from the proto."""
    attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}

    def get(key: str, default: Any) -> Any:
        value = attrs.get(key, default)
        return value.decode() if isinstance(value, bytes) else value

    return NodeInfo(proto.op_type, label, opset, get, len(proto.output), tuple(proto.output), proto.domain)


class Body:
    """The default-domain nodes of one node's body, with fresh names for its values and nodes."""

    def __init__(self, node: NodeInfo, proto: NodeProto, label: str, fresh: Fresh, known: KnownType) -> None:
        self.node = node
        self.proto = proto
        self.label = label
        self.fresh = fresh
        self.known = known
        self.nodes: list[NodeProto] = []

    def input(self, k: int) -> str | None:
        """The name of input `k`, None where the node leaves it out."""
        return self.proto.input[k] if k < len(self.proto.input) and self.proto.input[k] else None

    def output(self, k: int) -> str | None:
        """The name of output `k`, None where the node leaves it out."""
        return self.proto.output[k] if k < len(self.proto.output) and self.proto.output[k] else None

    def shape(self, k: int) -> tuple[int | str | None, ...] | None:
        """Input `k`'s extents as ONNX's shape inference gives them (an int, a dim_param, or None where
        unknown), or None where it gives no rank."""
        name = self.input(k)
        found: TypeProto | None = self.known(name) if name else None
        if found is None or not found.HasField("tensor_type") or not found.tensor_type.HasField("shape"):
            return None
        dims = found.tensor_type.shape.dim
        return tuple(d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in dims)

    def elem(self, k: int) -> int | None:
        """Input `k`'s ONNX element type, None where shape inference does not give it."""
        name = self.input(k)
        found = self.known(name) if name else None
        if found is None or not found.HasField("tensor_type") or not found.tensor_type.elem_type:
            return None
        return int(found.tensor_type.elem_type)

    def op(self, op_type: str, inputs: Sequence[str], hint: str = "", out: str | None = None, **attrs: Any) -> str:
        """One node of one output; its value is named `out` where given (a node output), else fresh."""
        name = out or self.fresh(f"{self.label}/{hint or op_type}")
        node_name = self.fresh(f"{self.label}/{hint or op_type}")
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=node_name, **attrs))
        return name

    def const(self, value: np.ndarray | float | int | Sequence[int], hint: str, dtype: Any = None) -> str:
        """A Constant node holding `value` (a float as f32, a list of ints as i64 unless `dtype`)."""
        if isinstance(value, np.ndarray):
            array = value if dtype is None else value.astype(dtype)
        elif isinstance(value, float):
            array = np.asarray(value, dtype=dtype or np.float32)
        else:
            array = np.asarray(value, dtype=dtype or np.int64)
        name = self.fresh(f"{self.label}/{hint}")
        tensor = numpy_helper.from_array(array, name)
        self.nodes.append(helper.make_node("Constant", [], [name], name=self.fresh(f"{name}/Constant"), value=tensor))
        return name

    def ints(self, values: Sequence[int], hint: str = "shape") -> str:
        return self.const(list(values), hint)

    def reshape(self, x: str, shape: Sequence[int], hint: str = "Reshape", out: str | None = None) -> str:
        return self.op("Reshape", [x, self.ints(shape, f"{hint}_shape")], hint, out)

    def transpose(self, x: str, perm: Sequence[int], hint: str = "Transpose", out: str | None = None) -> str:
        return self.op("Transpose", [x], hint, out, perm=list(perm))

    def unsqueeze(self, x: str, axes: Sequence[int], hint: str = "Unsqueeze") -> str:
        return self.op("Unsqueeze", [x, self.ints(axes, f"{hint}_axes")], hint)

    def slice(self, x: str, start: int, end: int, axis: int, hint: str = "Slice") -> str:
        """x[start:end] along `axis` (an end past the extent clips, as ONNX's Slice does)."""
        bounds = [self.ints([start], "starts"), self.ints([end], "ends"), self.ints([axis], "axes")]
        return self.op("Slice", [x, *bounds], hint)

    def extent(self, x: str, axis: int, hint: str) -> str:
        """Extent `axis` of `x` as a rank-0 int64 value (a build-time polynomial where symbolic)."""
        shape = self.op("Shape", [x], f"{hint}_shape")
        return self.op("Gather", [shape, self.const(axis, f"{hint}_axis")], hint, axis=0)


class BodyRule(OpRule):
    """A `com.microsoft` operator written as a body of ONNX operators before import (`write`)."""

    domain = DOMAIN

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        raise node.unsupported("the importer writes this operator as ONNX operators; it never reaches stage 0")

    def expand(self, proto: NodeProto, label: str, fresh: Fresh, known: KnownType, opset: int) -> list[NodeProto]:
        """The body of node `proto` (the importer's `DomainBody`)."""
        node = node_info(proto, label, opset)
        self.check_attributes(node, [a.name for a in proto.attribute])
        if opset < FIRST_BODY_OPSET:
            raise node.unsupported(
                f"Loam writes it as ONNX operators of opset {FIRST_BODY_OPSET} or later; the model imports "
                f"opset {opset} of the default domain"
            )
        body = Body(node, proto, label, fresh, known)
        self.write(node, body)
        return body.nodes

    def write(self, node: NodeInfo, body: Body) -> None:
        raise NotImplementedError
