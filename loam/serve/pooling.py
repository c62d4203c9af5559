"""Pooling and normalization appended to an encoder's graph, so an embedding stage returns final vectors.

Projection and normalization belong inside the numerical program: the server never pools hidden
activations on the host.  An encoder export ends at `last_hidden_state` [batch, sequence,
hidden]; sentence-embedding models pool it (the mean over the attention mask, as sentence-transformers'
`Pooling` does, or the first token's row) and often L2-normalize the result.  `pooled_model` writes
those steps as ONNX nodes after the chosen output, and the stage's one output becomes
`sentence_embedding` [batch, hidden]; Loam then compiles them with the rest of the graph, and stage 0
checks their extents like any other node's.  A graph that already pools (a sentence-transformers export
whose own output is `sentence_embedding`) is served through that output with `pooling: none`, unchanged;
pooling another of its outputs names every appended node and value under a prefix none of the graph's
names starts with, and the result too where the graph already uses `sentence_embedding`.

- `mean`: sum(h * mask) / max(sum(mask), 1e-9) over the sequence (sentence-transformers' clamp);
- `cls`: the row of the first token;
- `normalize`: x / max(||x||_2, 1e-12) (torch's `F.normalize`, which sentence-transformers' `Normalize` calls).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from loam.core.errors import ModelError

OUTPUT = "sentence_embedding"
"""The name of a pooled stage's one output, where the graph does not already use it."""

_PREFIX = "loam_pooling"


def read_onnx(path: Path) -> onnx.ModelProto:
    """The ModelProto of a `.onnx` or `.onnxtext` file, its external data left where it is."""
    if path.suffix == ".onnxtext":
        from loam.frontends.onnx_text import read_onnx_text

        return read_onnx_text(path)
    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as err:  # protobuf reports damage as several exception types
        raise ModelError(f"{path}: not a readable ONNX protobuf ({err})") from None


def graph_names(graph: onnx.GraphProto) -> set[str]:
    """Every name `graph` uses: its inputs, outputs, initializers, value infos, nodes and their values, and
    the same in each subgraph (a branch reads its outer scope's values by name)."""
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    names |= {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    for node in graph.node:
        names |= {node.name, *node.input, *node.output}
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                names |= graph_names(sub)
    return names


def pooled_model(
    path: Path, pooling: str, normalize: bool, output: str | None = None, key: str = "output"
) -> onnx.ModelProto:
    """The model at `path` served through its output `output` (default: its first) as its one output.

    With `pooling` "none" and no `normalize` that output is kept as the graph computes it, under its own
    name (a graph that pools and normalizes itself, as a sentence-transformers export does, is served
    unchanged).  Otherwise it is pooled (`mean`, `cls`) and optionally L2-normalized by nodes appended to
    the graph under a prefix no graph name starts with, into `sentence_embedding` (or, where the graph
    already uses that name, the prefixed one), so nothing appended can collide with the graph's own names.
    `key` is how the caller names `output` in a refusal."""
    model = read_onnx(path)
    graph = model.graph
    outputs = {o.name: o for o in graph.output}
    chosen = output or graph.output[0].name
    if chosen not in outputs:
        raise ModelError(
            f"{path}: {key!r} names {chosen!r}, which is not one of the graph's outputs ({', '.join(outputs)})"
        )
    hidden_info = outputs[chosen]
    if pooling == "none" and not normalize:
        served = onnx.ValueInfoProto()
        served.CopyFrom(hidden_info)  # copied before its place in graph.output goes
        del graph.output[:]
        graph.output.append(served)
        return model
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:
        raise ModelError(f"{path}: opset {opset}; pooling is appended with opset 13 nodes (ReduceSum with axes input)")
    taken = graph_names(graph)
    prefix, tried = f"{_PREFIX}/", 1
    while any(name.startswith(prefix) for name in taken):
        tried += 1
        prefix = f"{_PREFIX}_{tried}/"
    result = OUTPUT if OUTPUT not in taken else prefix + OUTPUT
    dims = list(hidden_info.type.tensor_type.shape.dim)
    nodes: list[onnx.NodeProto] = []
    constants: list[TensorProto] = []

    def const(name: str, value: np.ndarray) -> str:
        constants.append(numpy_helper.from_array(value, prefix + name))
        return prefix + name

    def node(op: str, inputs: list[str], name: str, **attrs: int) -> str:
        made = helper.make_node(op, inputs, [prefix + name], name=prefix + name)
        made.attribute.extend(helper.make_attribute(key, value) for key, value in sorted(attrs.items()))  # as make_node
        nodes.append(made)
        return prefix + name

    value = chosen
    if pooling == "mean":
        if len(dims) != 3:
            raise ModelError(
                f"{path}: output {chosen!r} has rank {len(dims)}; mean pooling reads [batch, sequence, hidden]"
            )
        if "attention_mask" not in {i.name for i in graph.input}:
            raise ModelError(f"{path}: mean pooling needs the graph input 'attention_mask'")
        mask = node("Cast", ["attention_mask"], "mask", to=TensorProto.FLOAT)
        mask3 = node("Unsqueeze", [mask, const("axis2", np.array([2], np.int64))], "mask3")
        masked = node("Mul", [chosen, mask3], "masked")
        seq_axis = const("axis1", np.array([1], np.int64))
        total = node("ReduceSum", [masked, seq_axis], "total", keepdims=0)
        count = node("ReduceSum", [mask3, seq_axis], "count", keepdims=0)
        count = node("Max", [count, const("min_count", np.array(1e-9, np.float32))], "count_clamped")
        value = node("Div", [total, count], "mean")
    elif pooling == "cls":
        if len(dims) != 3:
            raise ModelError(
                f"{path}: output {chosen!r} has rank {len(dims)}; cls pooling reads [batch, sequence, hidden]"
            )
        value = node("Gather", [chosen, const("first", np.array(0, np.int64))], "cls", axis=1)
    elif pooling != "none":
        raise ModelError(f"pooling {pooling!r} is not one of mean, cls, none")
    if normalize:
        square = node("Mul", [value, value], "square")
        norm = node(
            "Sqrt", [node("ReduceSum", [square, const("last", np.array([-1], np.int64))], "sum_square")], "norm"
        )
        norm = node("Max", [norm, const("min_norm", np.array(1e-12, np.float32))], "norm_clamped")
        value = node("Div", [value, norm], "normalized")
    nodes.append(helper.make_node("Identity", [value], [result], name=prefix + "output"))
    kept = [dims[0], dims[-1]] if pooling != "none" else dims
    out_info = helper.make_tensor_value_info(result, hidden_info.type.tensor_type.elem_type, None)
    out_info.type.tensor_type.shape.dim.extend(kept)
    graph.node.extend(nodes)
    graph.initializer.extend(constants)
    del graph.output[:]
    graph.output.append(out_info)
    return model
