"""The `graph` dialect: an ONNX model, untouched.

The importer (`loam.frontends.onnx_proto`) writes it and the exporter (`loam.frontends.onnx_export`)
reads it back into a `ModelProto`; nothing in between is lost.  One `graph.node` op stands for every
ONNX operator; ONNX's own schemas, not this dialect, define arity and attributes.

    graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
      graph.graph "mlp" (%x: !graph.tensor<f32, [4, "N", ?]>) inputs ["x"] {
        %w = graph.initializer "fc1.weight" : !graph.tensor<f32, [8, 16]>
        %b = graph.initializer "fc1.bias" = #graph.data<f32, [16], "0x0000803f..."> : ...
        %y = graph.node "Gemm" "fc1" since 17 (%x, %w, %b) {transB = 1 : i64} -> ["y"] : !graph.unknown
        graph.return %y ["y"] : !graph.tensor<f32, [4, 16]>
      }
    }

Types: `!graph.tensor<ELEM, [dims]>` (a dim is an integer, a quoted dim_param, or `?`),
`!graph.tensor<ELEM>` (unranked), `!graph.sparse<ELEM, [dims]>`, `!graph.seq<T>`, `!graph.opt<T>`,
`!graph.map<KEY, T>`, `!graph.unknown` (no type information) and `!graph.none` (an absent optional
input).  Element types are spelled by `loam.core.dtypes`.

ONNX node attributes live in the node's `attrs` dictionary, one xDSL attribute per ONNX kind:

    INT           1 : i64                        INTS           #graph.list<ints [1, -2]>
    FLOAT         5.000000e-01 : f32             FLOATS         #graph.list<floats [0.5, 0x7fc00000]>
    STRING        "ascii text"  (#graph.bytes<"\\C3\\BC"> otherwise: xDSL 0.75 does not read back
                                 the non-ASCII StringAttrs it prints)
                                                 STRINGS        #graph.list<strings ["a", "\\FF"]>
    TENSOR        #graph.data<...>               TENSORS        #graph.list<tensors [#graph.data<...>]>
    SPARSE_TENSOR #graph.sparse_data<...>        SPARSE_TENSORS #graph.list<sparse_tensors [...]>
    TYPE_PROTO    !graph.tensor<f32>             TYPE_PROTOS    #graph.list<types [!graph.tensor<f32>]>
    GRAPH         #graph.subgraph<0>             GRAPHS         #graph.list<graphs [1, 2]>

A graph-valued attribute names the node's region(s) by index, so the attribute order survives and
every empty list keeps its kind.  A float in a `floats` list prints as its shortest decimal, or as
its 32 IEEE bits in hex when it is not finite.

The package splits the dialect by concern: `types`, `attributes` (tensor values and node
attributes), `ops` (the model, its graphs, nodes and outputs), `values` (initializers, folded
constants, the absent input) and `syntax` (the parsing and printing they share).  Every public name
is imported from here, `loam.dialects.graph`, which also defines the `Graph` dialect object.
"""

from __future__ import annotations

from xdsl.ir import Dialect

from loam.dialects.graph.attributes import (
    LIST_KINDS,
    BytesValueAttr,
    ListAttr,
    SparseDataAttr,
    SubgraphAttr,
    TensorDataAttr,
    attr_to_python,
)
from loam.dialects.graph.ops import GraphOp, ModelOp, NodeOp, ReturnOp, SubgraphInfoOp, set_name_hint
from loam.dialects.graph.types import MapType, NoneType, OptType, SeqType, SparseTensorType, TensorType, UnknownType
from loam.dialects.graph.values import ConstantOp, InitializerOp, NoneOp

Graph = Dialect(
    "graph",
    [ModelOp, GraphOp, SubgraphInfoOp, InitializerOp, NodeOp, ConstantOp, NoneOp, ReturnOp],
    [
        TensorType,
        SparseTensorType,
        SeqType,
        OptType,
        MapType,
        UnknownType,
        NoneType,
        TensorDataAttr,
        SparseDataAttr,
        BytesValueAttr,
        SubgraphAttr,
        ListAttr,
    ],
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
