"""The fuse pass: fused modules compute what the unfused ones and onnxruntime compute, and the
report gives every ONNX node exactly one decision with the reason the rules say."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.dialects.expr import Expr, Operand
from loam.dialects.kernel import MatmulOp, ZipOp
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.driver.pipeline import BuildResult, build
from loam.passes.fuse import MAX_FUSED_STEPS
from loam.passes.report import DECISIONS, FOLDED, FUSED, KEPT, Reason
from loam.testing import assert_same, run_built, run_onnxruntime

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(
    nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, list[int]]], outputs: list[str], out_type: int = F32
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, out_type, None) for n in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _build(model: onnx.ModelProto, fuse: str | None) -> BuildResult:
    draft = draft_layout(model)
    return build(model, options=draft.options(None), fuse=fuse)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == I64:
            feeds[vi.name] = rng.integers(-5, 6, size=shape).astype(np.int64)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _check(model: onnx.ModelProto, objective: str = "memory") -> BuildResult:
    """Build fused and unfused; both equal onnxruntime (and each other, exactly)."""
    feeds = _feeds(model)
    fused, plain = _build(model, objective), _build(model, None)
    got, unfused = run_built(fused, feeds), run_built(plain, feeds)
    assert_same(got, run_onnxruntime(model, feeds))
    for a, b in zip(got, unfused, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    assert plain.fusion is None and fused.fusion is not None
    names = [d.node for d in fused.fusion.decisions]
    assert sorted(names) == sorted(n.name for n in model.graph.node)  # exactly one decision each
    assert all(d.decision in DECISIONS for d in fused.fusion.decisions)
    return fused


def _zips(result: BuildResult) -> list[ZipOp]:
    return [op for op in result.ir.walk() if isinstance(op, ZipOp)]


def test_chain_add_relu_mul_is_one_zip() -> None:
    model = _model(
        [
            helper.make_node("Add", ["x", "y"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["r"], name="relu"),
            helper.make_node("Mul", ["r", "z"], ["out"], name="mul"),
        ],
        {"x": (F32, [2, 3]), "y": (F32, [2, 3]), "z": (F32, [3])},
        ["out"],
    )
    result = _check(model)
    (zip_op,) = _zips(result)
    assert str(zip_op.expr.data) == "[operand 0, operand 1, operand 2, add 1 2, relu 3, mul 4 0]"
    report = result.fusion
    assert report is not None and report.groups == {"g1": ["add", "relu", "mul"]}
    assert {d.node: (d.decision, d.group) for d in report.decisions} == {
        "add": (FUSED, "g1"),
        "relu": (FUSED, "g1"),
        "mul": (FUSED, "g1"),
    }
    assert report.decision("add").bytes_saved == 2 * 6 * 4  # a [2, 3] f32 written and read back
    assert report.decision("mul").bytes_saved == 0
    assert "def _zip_0" in result.source and result.source.count("def _zip_") == 1


def test_producer_with_two_consumers_stays() -> None:
    model = _model(
        [
            helper.make_node("Add", ["x", "y"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["r"], name="relu"),
            helper.make_node("Mul", ["r", "x"], ["out1"], name="mul"),
            helper.make_node("Neg", ["a"], ["n"], name="neg"),
            helper.make_node("Exp", ["n"], ["out2"], name="exp"),
        ],
        {"x": (F32, [4]), "y": (F32, [4])},
        ["out1", "out2"],
    )
    result = _check(model)
    report = result.fusion
    assert report is not None
    assert report.decision("add").decision == KEPT
    assert report.decision("add").reason == "producer has 2 consumers"
    assert report.groups == {"g1": ["relu", "mul"], "g2": ["neg", "exp"]}
    assert len(_zips(result)) == 3


def test_diamond_collapses_when_both_consumers_fuse_first() -> None:
    # relu and neg fuse into mul first; then add has one consumer reading it twice: computed once.
    model = _model(
        [
            helper.make_node("Add", ["x", "y"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["r"], name="relu"),
            helper.make_node("Neg", ["a"], ["n"], name="neg"),
            helper.make_node("Mul", ["r", "n"], ["out"], name="mul"),
        ],
        {"x": (F32, [4]), "y": (F32, [4])},
        ["out"],
    )
    result = _check(model)
    (zip_op,) = _zips(result)
    assert [str(s) for s in zip_op.expr.data.steps].count("add 0 1") == 1


def test_broadcast_producer_is_not_fused() -> None:
    model = _model(
        [
            helper.make_node("Add", ["x", "y"], ["a"], name="add"),
            helper.make_node("Mul", ["a", "z"], ["out"], name="mul"),
        ],
        {"x": (F32, [3]), "y": (F32, [3]), "z": (F32, [2, 3])},
        ["out"],
    )
    result = _check(model)
    report = result.fusion
    assert report is not None and report.groups == {}
    assert report.decision("add").reason == Reason.BROADCAST.text() == "broadcast changes extent"
    assert report.decision("mul").reason == "result is an output"


def test_i64_chain_fuses_for_memory_not_for_dispatch() -> None:
    model = _model(
        [
            helper.make_node("Add", ["i", "j"], ["a"], name="add"),
            helper.make_node("Mul", ["a", "j"], ["m"], name="mul"),
            helper.make_node("Greater", ["m", "i"], ["out"], name="gt"),
        ],
        {"i": (I64, [5]), "j": (I64, [5])},
        ["out"],
        TensorProto.BOOL,
    )
    memory = _check(model)
    assert memory.fusion is not None and memory.fusion.groups == {"g1": ["add", "mul", "gt"]}
    assert len(_zips(memory)) == 1
    dispatch = _check(model, "dispatch")
    assert dispatch.fusion is not None and dispatch.fusion.groups == {}
    assert dispatch.fusion.decision("add").reason == "element type i64"


def test_a_consumer_reading_the_producer_twice() -> None:
    model = _model(
        [
            helper.make_node("Sub", ["x", "y"], ["d"], name="sub"),
            helper.make_node("Mul", ["d", "d"], ["out"], name="square"),
        ],
        {"x": (F32, [3]), "y": (F32, [3])},
        ["out"],
    )
    result = _check(model)
    (zip_op,) = _zips(result)
    assert str(zip_op.expr.data) == "[operand 0, operand 1, sub 0 1, mul 2 2]"


def test_output_in_the_middle_of_a_chain_stays() -> None:
    model = _model(
        [
            helper.make_node("Add", ["x", "y"], ["a"], name="add"),
            helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),
            helper.make_node("Mul", ["s", "x"], ["out"], name="mul"),
        ],
        {"x": (F32, [2, 2]), "y": (F32, [2, 2])},
        ["a", "out"],
    )
    result = _check(model)
    report = result.fusion
    assert report is not None
    assert report.decision("add").decision == KEPT and report.decision("add").reason == "result is an output"
    assert report.groups == {"g1": ["sig", "mul"]}


def test_folded_and_reduction_boundary_reasons() -> None:
    two = helper.make_tensor("two", F32, [], [2.0])
    model = _model(
        [
            helper.make_node("Constant", [], ["c"], name="const", value=two),
            helper.make_node("Mul", ["x", "c"], ["m"], name="scale"),
            helper.make_node("Exp", ["m"], ["e"], name="exp"),
            helper.make_node("ReduceSum", ["e"], ["out"], name="sum", keepdims=0),
        ],
        {"x": (F32, [2, 3])},
        ["out"],
    )
    result = _check(model)
    report = result.fusion
    assert report is not None
    assert report.decision("const").decision == FOLDED
    assert report.decision("const").reason == "folded at build time"
    assert report.groups == {"g1": ["scale", "exp"]}
    assert report.decision("exp").decision == FUSED
    assert report.decision("sum").reason == "reduction boundary"
    assert "reduction boundary" in {d.reason for d in report.decisions}


def test_renderings() -> None:
    model = _model(
        [
            helper.make_node("Add", ["x", "y"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["out"], name="relu"),
        ],
        {"x": (F32, [2]), "y": (F32, [2])},
        ["out"],
    )
    report = _check(model).fusion
    assert report is not None
    rows = json.loads(report.render("json"))
    assert rows[0] == {
        "node": "add", "op": "Add", "group": "g1", "decision": "fused",
        "reason": "elementwise chain", "bytes_saved": 16,
    }  # fmt: skip
    text = report.render("text").splitlines()
    assert text[1].split() == ["node", "op", "decision", "reason", "bytes", "saved"]
    assert text[1].index("decision") == text[2].index("fused into g1")  # aligned columns
    dot = report.render("dot")
    assert 'subgraph "cluster_g1"' in dot and '"add" -> "relu";' in dot
    with pytest.raises(ValueError):
        report.render("yaml")


def test_inline_operand_and_dedupe() -> None:
    consumer = Expr.operand(0) * Expr.operand(1)
    fused = consumer.inline_operand(1, Expr.operand(0) + Expr.operand(1))
    assert str(fused) == "[operand 0, operand 1, operand 2, add 1 2, mul 0 3]"
    merged, kept = fused.dedupe_operands(["x", "x", "b"])
    assert kept == [0, 2]
    assert str(merged) == "[operand 0, operand 1, add 0 1, mul 0 2]"


@pytest.mark.parametrize("graph", ["decoder", "decoder_merged"])
def test_tiny_gpt2_fused_equals_unfused(graph: str) -> None:
    """The GPT-2 decoders fused give the unfused module's outputs bit for bit; every node one decision."""
    here = Path(__file__).parents[1] / "models" / "tiny_gpt2"
    checkpoint = here / "tiny_gpt2.safetensors"
    options = Options.from_toml(here / f"{graph}.loam.toml")
    fused = build(here / f"{graph}.onnxtext", checkpoints=[checkpoint], options=options)
    plain = build(here / f"{graph}.onnxtext", checkpoints=[checkpoint], options=options, fuse=None)
    assert fused.fusion is not None and fused.fusion.groups
    assert len(_zips(fused)) < len(_zips(plain))
    decisions = [d.node for d in fused.fusion.decisions]
    assert len(decisions) == len(set(decisions))
    onnx_nodes = {n.name for n in onnx.parser.parse_model((here / f"{graph}.onnxtext").read_text()).graph.node}
    assert onnx_nodes <= set(decisions)

    rng = np.random.default_rng(1)
    ids = rng.integers(0, 50, size=(1, 5)).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones((1, 5), np.int64)}
    if graph == "decoder_merged":
        feeds["use_cache_branch"] = np.array([False])
        for i in range(2):
            for kv in ("key", "value"):
                feeds[f"past_key_values.{i}.{kv}"] = np.zeros((1, 4, 0, 16), np.float32)
    outputs = []
    for result in (fused, plain):
        module = result.module
        weights = module.Weights.load(checkpoint.read_bytes())
        by_ident = {re.sub(r"\W", "_", k): v for k, v in feeds.items()}
        names = [
            n for n, p in inspect.signature(module.forward).parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD
        ][1:]
        out = module.forward(weights, *[by_ident[n] for n in names])
        outputs.append(list(out) if isinstance(out, tuple) else [out])
    for a, b in zip(*outputs, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)


def _matmul_model(nodes: list, outputs: list[str]) -> onnx.ModelProto:
    w = helper.make_tensor("w", F32, [4, 3], np.arange(12, dtype=np.float32) / 7 - 0.8)
    b = helper.make_tensor("b", F32, [3], np.array([0.5, -0.25, 0.125], dtype=np.float32))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F32, [5, 4]), helper.make_tensor_value_info("r", F32, [5, 3])],
        [helper.make_tensor_value_info(o, F32, None) for o in outputs],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_bias_activation_and_residual_finish_the_product() -> None:
    model = _matmul_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"),
            helper.make_node("Add", ["p", "b"], ["a"], name="bias"),
            helper.make_node("Tanh", ["a"], ["t"], name="act"),
            helper.make_node("Add", ["t", "r"], ["out"], name="residual"),
        ],
        ["out"],
    )
    result = _check(model)
    (product,) = [op for op in result.ir.walk() if isinstance(op, MatmulOp)]
    assert product.epilogue is not None and len(product.extras) == 2 and not _zips(result)
    report = result.fusion
    assert report is not None and report.groups == {"g1": ["mm", "bias", "act", "residual"]}
    assert {d.reason for d in report.decisions} == {"epilogue into product"}
    assert report.decision("mm").bytes_saved == 2 * 5 * 3 * 4
    # The module finishes the product in its own buffer (in one call: [5, 3] is too small to split).
    assert "out = np.matmul(x, weights.w)  # mm" in result.source
    # The bias is read at the product's extents, broadcast once when Weights is made.
    assert "_zip_0(out, r, weights.b_broadcast, out=out)  # bias, act, residual: epilogue" in result.source


def test_a_product_read_twice_or_returned_keeps_its_zips_apart() -> None:
    model = _matmul_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"),
            helper.make_node("Relu", ["p"], ["out1"], name="relu"),
            helper.make_node("Neg", ["p"], ["out2"], name="neg"),
            helper.make_node("Sigmoid", ["r"], ["out3"], name="unused_input_keeper"),
        ],
        ["out1", "out2", "out3"],
    )
    result = _check(model)
    report = result.fusion
    assert report is not None
    assert report.decision("mm").decision == KEPT and report.decision("mm").reason == "producer has 2 consumers"
    assert all(op.epilogue is None for op in result.ir.walk() if isinstance(op, MatmulOp))


def test_dispatch_computes_a_cheap_shared_producer_in_each_consumer() -> None:
    model = _model(
        [
            helper.make_node("Add", ["x", "y"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["out1"], name="relu"),
            helper.make_node("Neg", ["a"], ["out2"], name="neg"),
        ],
        {"x": (F32, [4]), "y": (F32, [4])},
        ["out1", "out2"],
    )
    memory = _check(model)
    assert memory.fusion is not None and memory.fusion.decision("add").reason == "producer has 2 consumers"
    assert len(_zips(memory)) == 3
    dispatch = _check(model, "dispatch")  # one launch per output: add is computed in both
    assert dispatch.fusion is not None and len(_zips(dispatch)) == 2
    assert dispatch.fusion.decision("add").decision == FUSED
    assert all("add 0 1" in str(z.expr.data) for z in _zips(dispatch))


def test_a_long_chain_is_cut_at_the_fused_size_limit() -> None:
    # 300 one-step nodes: kernels of at most MAX_FUSED_STEPS steps each, the cut reported, numbers unchanged.
    count = 300
    names = [f"t{i}" for i in range(count - 1)] + ["out"]
    nodes = [
        helper.make_node("Neg" if i % 2 else "Abs", [names[i - 1] if i else "x"], [names[i]], name=f"n{i}")
        for i in range(count)
    ]
    result = _check(_model(nodes, {"x": (F32, [2, 3])}, ["out"]))
    zips = _zips(result)
    computed = [sum(1 for s in z.expr.data.steps if not isinstance(s, Operand)) for z in zips]
    assert len(zips) == -(-count // MAX_FUSED_STEPS) and max(computed) == MAX_FUSED_STEPS and sum(computed) == count
    report = result.fusion
    assert report is not None
    assert all(d.decision == FUSED for d in report.decisions)
    cuts = [d.node for d in report.decisions if d.reason == Reason.SIZE.value]  # each kernel's last node but one
    assert cuts == [f"n{MAX_FUSED_STEPS * k - 1}" for k in range(1, len(zips))]
