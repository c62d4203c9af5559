"""The `graph` dialect: an ONNX model, untouched.

A package, so the dialect can be split by concern; `loam.dialects.graph` keeps every public name
it had as a single module.  The definitions and their syntax are documented in `ops`.
"""

from loam.dialects.graph.ops import (
    LIST_KINDS,
    BytesValueAttr,
    ConstantOp,
    Graph,
    GraphOp,
    InitializerOp,
    ListAttr,
    MapType,
    ModelOp,
    NodeOp,
    NoneOp,
    NoneType,
    OptType,
    ReturnOp,
    SeqType,
    SparseDataAttr,
    SparseTensorType,
    SubgraphAttr,
    SubgraphInfoOp,
    TensorDataAttr,
    TensorType,
    UnknownType,
    attr_to_python,
    set_name_hint,
)

__all__ = [
    "LIST_KINDS",
    "BytesValueAttr",
    "ConstantOp",
    "Graph",
    "GraphOp",
    "InitializerOp",
    "ListAttr",
    "MapType",
    "ModelOp",
    "NodeOp",
    "NoneOp",
    "NoneType",
    "OptType",
    "ReturnOp",
    "SeqType",
    "SparseDataAttr",
    "SparseTensorType",
    "SubgraphAttr",
    "SubgraphInfoOp",
    "TensorDataAttr",
    "TensorType",
    "UnknownType",
    "attr_to_python",
    "set_name_hint",
]
