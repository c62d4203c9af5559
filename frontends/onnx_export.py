"""The ONNX exporter: the `graph` dialect back to an `onnx.ModelProto` (the importer's inverse).

    model = export_model(read_model("model.onnx"))     # equal to the file's model, up to
                                                       # canonical tensor storage (raw_data)

Tensors are written as `raw_data` (strings as `string_data`, external data as its entries).  A node
result whose type is known becomes a `value_info` entry; graph inputs and outputs carry their
declared types.
"""

from __future__ import annotations

from onnx import (
    AttributeProto,
    GraphProto,
    ModelProto,
    NodeProto,
    OperatorSetIdProto,
    SparseTensorProto,
    StringStringEntryProto,
    TensorProto,
    TypeProto,
    ValueInfoProto,
)
from xdsl.dialects.builtin import BytesAttr, FloatAttr, IntAttr, IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, Region, SSAValue, TypeAttribute

from loam.core.errors import UnsupportedError
from loam.dialects.graph import (
    BytesValueAttr,
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
)

__all__ = ["export_model"]


def export_model(module: ModuleOp) -> ModelProto:
    """The `ModelProto` of the (single) `graph.model` in `module`."""
    models = [op for op in module.walk() if isinstance(op, ModelOp)]
    if len(models) != 1:
        raise UnsupportedError(f"export needs exactly one graph.model, found {len(models)}")
    return _model(models[0])


def _model(op: ModelOp) -> ModelProto:
    m = ModelProto()
    m.ir_version = int(op.ir_version.value.data)
    for domain, version in op.opset_import.data.items():
        assert isinstance(version, IntegerAttr)
        m.opset_import.append(OperatorSetIdProto(domain=domain, version=int(version.value.data)))
    for field in ("producer_name", "producer_version", "domain", "doc_string"):
        value = getattr(op, field)
        if value is not None:
            setattr(m, field, value.data)
    if op.model_version is not None:
        m.model_version = int(op.model_version.value.data)
    if op.metadata_props is not None:
        for key, value in op.metadata_props.data.items():
            assert isinstance(value, StringAttr)
            m.metadata_props.append(StringStringEntryProto(key=key, value=value.data))
    graph = op.graph
    names: dict[SSAValue, str] = {}
    m.graph.CopyFrom(_graph(graph.body.block, graph.graph_name.data, graph.input_names.data, graph.doc_string, names))
    return m


def _graph(
    block: Block,
    name: str,
    input_names: tuple[StringAttr, ...],
    doc: StringAttr | None,
    names: dict[SSAValue, str],
) -> GraphProto:
    """One graph; `names` maps every value of the enclosing scopes to its ONNX name."""
    g = GraphProto(name=name)
    if doc is not None:
        g.doc_string = doc.data
    for arg, input_name in zip(block.args, input_names, strict=True):
        names[arg] = input_name.data
        g.input.append(_value_info(input_name.data, arg.type))
    for op in block.ops:
        if isinstance(op, SubgraphInfoOp):
            continue
        if isinstance(op, InitializerOp):
            if op.value is None:
                raise UnsupportedError(f"initializer '{op.onnx_name.data}' has no data to export")
            g.initializer.append(_tensor(op.value, op.onnx_name.data))
            if op.default_of is None:
                names[op.result] = op.onnx_name.data
        elif isinstance(op, NoneOp):
            names[op.result] = ""
        elif isinstance(op, NodeOp):
            g.node.append(_node(op, names))
            for result, out_name in zip(op.results, op.output_names, strict=True):
                names[result] = out_name
                if out_name and not isinstance(result.type, UnknownType):
                    g.value_info.append(_value_info(out_name, result.type))
        elif isinstance(op, ReturnOp):
            for value, output, declared in zip(op.values, op.output_names.data, op.declared_types.data, strict=True):
                g.output.append(_value_info(output.data, declared))
                if names[value] != output.data:
                    raise UnsupportedError(
                        f"graph '{name}': output '{output.data}' returns value '{names[value]}'; "
                        "ONNX has no renaming output"
                    )
        else:
            raise UnsupportedError(f"graph '{name}': {op.name} has no ONNX form")
    return g


def _node(op: NodeOp, names: dict[SSAValue, str]) -> NodeProto:
    from loam.ops import added_operands

    n = NodeProto(op_type=op.op_type, name=op.node_name, domain=op.domain)
    args = list(op.args)
    n.input.extend(names[v] for v in args[: len(args) - added_operands(op.domain, op.op_type)])
    n.output.extend(op.output_names)
    if op.doc_string is not None:
        n.doc_string = op.doc_string.data
    for key, attr in op.attrs.data.items():
        n.attribute.append(_attribute(key, attr, op.subgraphs, names))
    return n


def _subgraph(region: Region, names: dict[SSAValue, str]) -> GraphProto:
    info = region.block.first_op
    assert isinstance(info, SubgraphInfoOp)
    return _graph(region.block, info.graph_name.data, info.input_names.data, info.doc_string, names)


def _attribute(
    key: str, attr: Attribute, regions: tuple[Region, ...] | list[Region], names: dict[SSAValue, str]
) -> AttributeProto:
    a = AttributeProto(name=key)
    A = AttributeProto
    if isinstance(attr, IntegerAttr):
        a.type, a.i = A.INT, int(attr.value.data)
    elif isinstance(attr, FloatAttr):
        a.type, a.f = A.FLOAT, float(attr.value.data)
    elif isinstance(attr, StringAttr):
        a.type, a.s = A.STRING, attr.data.encode("utf-8")
    elif isinstance(attr, BytesValueAttr):
        a.type, a.s = A.STRING, attr.value.data
    elif isinstance(attr, TensorDataAttr):
        a.type = A.TENSOR
        a.t.CopyFrom(_tensor(attr, attr.tensor_name.data))
    elif isinstance(attr, SparseDataAttr):
        a.type = A.SPARSE_TENSOR
        a.sparse_tensor.CopyFrom(_sparse(attr))
    elif isinstance(attr, SubgraphAttr):
        a.type = A.GRAPH
        a.g.CopyFrom(_subgraph(regions[attr.index.data], names))
    elif isinstance(attr, ListAttr):
        items = attr.items.data
        kind = attr.kind.data
        if kind == "ints":
            a.type = A.INTS
            a.ints.extend(i.data for i in items if isinstance(i, IntAttr))
        elif kind == "floats":
            a.type = A.FLOATS
            a.floats.extend(float(f.value.data) for f in items if isinstance(f, FloatAttr))
        elif kind == "strings":
            a.type = A.STRINGS
            a.strings.extend(s.data for s in items if isinstance(s, BytesAttr))
        elif kind == "tensors":
            a.type = A.TENSORS
            a.tensors.extend(_tensor(t, t.tensor_name.data) for t in items if isinstance(t, TensorDataAttr))
        elif kind == "sparse_tensors":
            a.type = A.SPARSE_TENSORS
            a.sparse_tensors.extend(_sparse(s) for s in items if isinstance(s, SparseDataAttr))
        elif kind == "types":
            a.type = A.TYPE_PROTOS
            a.type_protos.extend(_type(t) for t in items)
        else:
            a.type = A.GRAPHS
            a.graphs.extend(_subgraph(regions[i.data], names) for i in items if isinstance(i, IntAttr))
    elif isinstance(attr, TypeAttribute):
        a.type = A.TYPE_PROTO
        a.tp.CopyFrom(_type(attr))
    else:
        raise UnsupportedError(f"attribute '{key}' ({attr}) has no ONNX form")
    return a


def _tensor(data: TensorDataAttr, name: str) -> TensorProto:
    t = TensorProto(name=name, data_type=data.elem.onnx, dims=list(data.shape))
    if data.is_external:
        t.data_location = TensorProto.EXTERNAL
        for key, value in data.external_entries:
            t.external_data.append(StringStringEntryProto(key=key, value=value))
    elif data.elem.name == "string":
        t.string_data.extend(s.data for s in data.strings.data)
    else:
        t.raw_data = data.raw.data
    return t


def _sparse(data: SparseDataAttr) -> SparseTensorProto:
    s = SparseTensorProto(dims=[d.data for d in data.dims.data])
    s.values.CopyFrom(_tensor(data.values, data.values.tensor_name.data))
    s.indices.CopyFrom(_tensor(data.indices, data.indices.tensor_name.data))
    return s


def _value_info(name: str, ty: Attribute) -> ValueInfoProto:
    vi = ValueInfoProto(name=name)
    if not isinstance(ty, UnknownType):  # an unknown type is written as no type at all
        vi.type.CopyFrom(_type(ty))
    return vi


def _type(ty: Attribute) -> TypeProto:
    tp = TypeProto()
    if isinstance(ty, TensorType | SparseTensorType):
        inner = tp.tensor_type if isinstance(ty, TensorType) else tp.sparse_tensor_type
        inner.elem_type = ty.elem.onnx
        shape = ty.shape
        if shape is not None:
            inner.shape.SetInParent()  # a rank-0 shape is present but empty
            for dim in shape:
                d = inner.shape.dim.add()
                if isinstance(dim, int):
                    d.dim_value = dim
                elif isinstance(dim, str):
                    d.dim_param = dim
    elif isinstance(ty, SeqType):
        tp.sequence_type.elem_type.SetInParent()  # present even when the element type is unknown
        tp.sequence_type.elem_type.CopyFrom(_type(ty.elem_type))
    elif isinstance(ty, OptType):
        tp.optional_type.elem_type.SetInParent()
        tp.optional_type.elem_type.CopyFrom(_type(ty.elem_type))
    elif isinstance(ty, MapType):
        tp.map_type.key_type = ty.key.onnx
        tp.map_type.value_type.SetInParent()
        tp.map_type.value_type.CopyFrom(_type(ty.value_type))
    elif isinstance(ty, UnknownType | NoneType):
        pass
    else:
        raise UnsupportedError(f"type {ty} has no ONNX form")
    return tp
