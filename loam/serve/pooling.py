"""Pooling and normalization appended to an encoder's graph, so an embedding stage returns final vectors.

The guide puts projection and normalization inside the numerical program: the server never pools
hidden activations on the host.  An encoder export ends at `last_hidden_state` [batch, sequence,
hidden]; sentence-embedding models pool it (the mean over the attention mask, as sentence-transformers'
`Pooling` does, or the first token's row) and often L2-normalize the result.  `pooled_model` writes
those steps as ONNX nodes after the chosen output, and the stage's one output becomes
`sentence_embedding` [batch, hidden]; Loam then compiles them with the rest of the graph, and stage 0
checks their extents like any other node's.

- `mean`: sum(h * mask) / max(sum(mask), 1e-9) over the sequence (sentence-transformers' clamp);
- `cls`: the row of the first token;
- `normalize`: x / max(||x||_2, 1e-12) (torch's `F.normalize`, which sentence-transformers' `Normalize` calls).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from loam.errors import ModelError

OUTPUT = "sentence_embedding"
"""The name of a pooled stage's one output."""

_PREFIX = "loam_pooling/"


def read_onnx(path: Path) -> onnx.ModelProto:
    """The ModelProto of a `.onnx` or `.onnxtext` file, its external data left where it is."""
    if path.suffix == ".onnxtext":
        from loam.frontends.onnx_text import read_onnx_text

        return read_onnx_text(path)
    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as err:  # protobuf reports damage as several exception types
        raise ModelError(f"{path}: not a readable ONNX protobuf ({err})") from None


def pooled_model(path: Path, pooling: str, normalize: bool, output: str | None = None) -> onnx.ModelProto:
    """The model at `path` with its output `output` (default: its first) pooled (`mean`, `cls` or `none`)
    and optionally L2-normalized, as the single output `sentence_embedding`."""
    model = read_onnx(path)
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:
        raise ModelError(f"{path}: opset {opset}; pooling is appended with opset 13 nodes (ReduceSum with axes input)")
    outputs = {o.name: o for o in graph.output}
    chosen = output or graph.output[0].name
    if chosen not in outputs:
        raise ModelError(f"{path}: has no output {chosen!r} to pool (outputs: {', '.join(outputs)})")
    hidden_info = outputs[chosen]
    dims = list(hidden_info.type.tensor_type.shape.dim)
    nodes: list[onnx.NodeProto] = []
    constants: list[TensorProto] = []

    def const(name: str, value: np.ndarray) -> str:
        constants.append(numpy_helper.from_array(value, _PREFIX + name))
        return _PREFIX + name

    def node(op: str, inputs: list[str], name: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [_PREFIX + name], name=_PREFIX + name, **attrs))
        return _PREFIX + name

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
    nodes.append(helper.make_node("Identity", [value], [OUTPUT], name=_PREFIX + "output"))
    kept = [dims[0], dims[-1]] if pooling != "none" else dims
    out_info = helper.make_tensor_value_info(OUTPUT, hidden_info.type.tensor_type.elem_type, None)
    out_info.type.tensor_type.shape.dim.extend(kept)
    graph.node.extend(nodes)
    graph.initializer.extend(constants)
    del graph.output[:]
    graph.output.append(out_info)
    return model
