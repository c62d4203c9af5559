"""A score's activation appended to a cross-encoder's graph, so a `score` stage returns the final scores.

A cross-encoder's head ends at its logits; sentence-transformers' `CrossEncoder` passes a one-label
model's logit through a sigmoid (its default activation) or leaves it as it is.  As with pooling
(`loam.serve.pooling`), the activation belongs inside the numerical program: `activated_model` writes it
as an ONNX node after the stage's one output, which keeps its name, and Loam compiles it with the rest.

- `sigmoid`: 1 / (1 + exp(-x)), ONNX's `Sigmoid`;
- `none`: the logit unchanged (no node appended).
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper

from loam.core.errors import ModelError
from loam.serve.pooling import graph_names

_PREFIX = "loam_activation"


def activated_model(model: onnx.ModelProto, activation: str, where: Path) -> onnx.ModelProto:
    """`model` (with one output) with `activation` applied to that output, under the output's own name: the
    node that wrote it (and any node that read it) now uses a fresh name no graph name starts with.
    `where` is the graph's file, named in a refusal."""
    if activation == "none":
        return model
    if activation != "sigmoid":
        raise ModelError(f"{where}: activation {activation!r} is not one of sigmoid, none")
    graph = model.graph
    if len(graph.output) != 1:
        raise ModelError(f"{where}: an activation reads one output; the graph has {len(graph.output)}")
    output = graph.output[0].name
    taken = graph_names(graph)
    prefix, tried = f"{_PREFIX}/", 1
    while any(name.startswith(prefix) for name in taken):
        tried += 1
        prefix = f"{_PREFIX}_{tried}/"
    logits = prefix + "logits"
    writer = next((node for node in graph.node if output in node.output), None)
    if writer is None:
        raise ModelError(f"{where}: no node computes the output {output!r} an activation would read")
    for node in graph.node:  # the node that wrote the output, and any that read it, use the new name
        node.output[:] = [logits if name == output else name for name in node.output]
        node.input[:] = [logits if name == output else name for name in node.input]
    graph.node.append(helper.make_node("Sigmoid", [logits], [output], name=prefix + "sigmoid"))
    return model
