"""grouped-heads: grouped-query attention's repeated key/value heads are multiplied once per group, with
onnxruntime's numbers.

A small attention block written as transformers' `repeat_kv` exports it (Unsqueeze, Expand, Reshape of the
keys and values, then the two products), with symbolic batch, query and key lengths: Loam's module must
give onnxruntime's output at several lengths, report the grouped products in its notes, and print no
Expand (no repeated copy).  A block whose repeat is not the heads' (the Expand along another axis) is left
as it is.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.testing import assert_same, build_for, run_built, run_onnxruntime

GROUPS, REPEATS, HEAD = 2, 3, 8


def attention_block(repeat_axis: int = 2, probs_out: bool = False) -> onnx.ModelProto:
    """softmax(Q K^T / sqrt(HEAD) + mask) V with K and V [B, GROUPS, L, HEAD] repeated to GROUPS*REPEATS heads:
    each head REPEATS times in a row (`repeat_axis` 2, repeat_kv's order), or the whole set of heads REPEATS
    times over (`repeat_axis` 1).  `probs_out` returns the probabilities too (so the chain is not one
    attention kernel: `fuse-attention` leaves the products to this pass)."""
    heads = GROUPS * REPEATS
    unit = [1, 1, 1, 1, 1]
    unit[repeat_axis] = REPEATS
    nodes = []
    for name in ("k", "v"):
        nodes += [
            helper.make_node("Unsqueeze", [name, "unsqueeze_at"], [f"{name}_u"]),
            helper.make_node("Shape", [f"{name}_u"], [f"{name}_shape"]),
            helper.make_node("Mul", [f"{name}_shape", "repeats"], [f"{name}_target"]),
            helper.make_node("Expand", [f"{name}_u", f"{name}_target"], [f"{name}_e"]),
            helper.make_node("Shape", [name], [f"{name}_s4"]),
            helper.make_node("Mul", [f"{name}_s4", "heads_by"], [f"{name}_flat_shape"]),
            helper.make_node("Reshape", [f"{name}_e", f"{name}_flat_shape"], [f"{name}_r"]),
        ]
    nodes += [
        helper.make_node("Transpose", ["k_r"], ["k_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "k_t"], ["scores"]),
        helper.make_node("Div", ["scores", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "v_r"], ["y"]),
    ]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "gqa",
        [
            helper.make_tensor_value_info("q", f32, ["B", heads, "S", HEAD]),
            helper.make_tensor_value_info("k", f32, ["B", GROUPS, "L", HEAD]),
            helper.make_tensor_value_info("v", f32, ["B", GROUPS, "L", HEAD]),
            helper.make_tensor_value_info("mask", f32, ["B", 1, "S", "L"]),
        ],
        [helper.make_tensor_value_info("y", f32, ["B", heads, "S", HEAD])]
        + ([helper.make_tensor_value_info("probs", f32, ["B", heads, "S", "L"])] if probs_out else []),
        initializer=[
            helper.make_tensor("unsqueeze_at", TensorProto.INT64, [1], [repeat_axis]),
            helper.make_tensor("repeats", TensorProto.INT64, [5], unit),
            helper.make_tensor("heads_by", TensorProto.INT64, [4], [1, REPEATS, 1, 1]),
            helper.make_tensor("scale", f32, [], [float(np.sqrt(HEAD))]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds_for(batch: int, queries: int, keys: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 100 + queries * 10 + keys)
    return {
        "q": rng.standard_normal((batch, GROUPS * REPEATS, queries, HEAD)).astype(np.float32),
        "k": rng.standard_normal((batch, GROUPS, keys, HEAD)).astype(np.float32),
        "v": rng.standard_normal((batch, GROUPS, keys, HEAD)).astype(np.float32),
        "mask": np.where(rng.random((batch, 1, queries, keys)) < 0.2, -1e9, 0).astype(np.float32),
    }


@pytest.mark.parametrize(("batch", "queries", "keys"), [(1, 1, 7), (2, 1, 33), (2, 5, 5), (1, 4, 12)])
def test_grouped_products_give_onnxruntimes_attention(batch: int, queries: int, keys: int) -> None:
    model = attention_block(probs_out=True)
    result = build_for(model)
    assert any(n.startswith("grouped heads: 2 attention product(s)") for n in result.notes), result.notes
    assert "_reach(" not in result.source  # the Expand's broadcast copy is gone
    feeds = feeds_for(batch, queries, keys)
    assert_same(run_built(result, feeds), run_onnxruntime(model, feeds), rtol=1e-5, atol=1e-5)


def test_heads_repeated_as_a_whole_set_are_left_as_they_are() -> None:
    """Query head h reads key head h mod GROUPS there, not h // REPEATS: grouping would be wrong, none is made."""
    model = attention_block(repeat_axis=1)
    result = build_for(model)
    assert not any(n.startswith("grouped heads") for n in result.notes), result.notes
    feeds = feeds_for(2, 3, 9)
    assert_same(run_built(result, feeds), run_onnxruntime(model, feeds), rtol=1e-5, atol=1e-5)
