"""fold-conv-affine: a per-channel affine map after a bias-free Conv goes into the Conv's weights.

Each graph runs through `loam.build` and onnxruntime with its graph optimisations off (so
onnxruntime computes the BatchNormalization unfolded, as the graph says); the outputs agree within
float32 rounding.  The build notes say which nodes were folded, and only those: a scale that varies
along a spatial axis and a Conv output some other node also reads stay as they were (a scale from a
graph input keeps only that scale out of the fold; a Conv's own bias joins the offset).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from loam.testing import assert_same, build_for, run_built, run_onnxruntime

RNG = np.random.default_rng(11)
N, CI, CO, H, W = 2, 4, 6, 7, 7


def _weights(*shapes_by_name: tuple[str, tuple[int, ...]]) -> list[onnx.TensorProto]:
    out = []
    for name, shape in shapes_by_name:
        values = RNG.standard_normal(shape).astype(np.float32)
        if name in ("var", "v2"):  # variances: positive
            values = np.abs(values) + 0.1
        out.append(numpy_helper.from_array(values, name))
    return out


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], extra_inputs: tuple[str, ...] = (),
           outputs: tuple[str, ...] = ("y",)) -> onnx.ModelProto:  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, CI, H, W])]
    inputs += [helper.make_tensor_value_info(name, TensorProto.FLOAT, [CO]) for name in extra_inputs]
    graph = helper.make_graph(
        nodes, "fold", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv(group: int = 1, bias: bool = False) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    names = ["x", "w", "cb"] if bias else ["x", "w"]
    node = helper.make_node("Conv", names, ["c"], name="conv", pads=[1, 1, 1, 1], group=group)
    inits = _weights(("w", (CO, CI // group, 3, 3)), *((("cb", (CO,)),) if bias else ()))
    return node, inits


def _bn(source: str = "c", out: str = "bn_out") -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    node = helper.make_node(
        "BatchNormalization", [source, "scale", "bias", "mean", "var"], [out], name="bn", epsilon=1e-3
    )
    return node, _weights(("scale", (CO,)), ("bias", (CO,)), ("mean", (CO,)), ("var", (CO,)))


@dataclass(frozen=True)
class Case:
    name: str
    model: onnx.ModelProto
    folded: bool


def _cases() -> list[Case]:
    cases = []
    for group in (1, 2):
        conv, ci = _conv(group)
        bn, bi = _bn()
        relu = helper.make_node("Relu", ["bn_out"], ["y"], name="relu")
        cases.append(Case(f"conv-bn-relu-group{group}", _model([conv, bn, relu], ci + bi), True))
    conv, ci = _conv()
    bn, bi = _bn(out="y")
    cases.append(Case("conv-bn", _model([conv, bn], ci + bi), True))
    # A scale and a shift as Mul and Add of weights broadcast per channel, then a sigmoid.
    conv, ci = _conv()
    nodes = [
        conv,
        helper.make_node("Mul", ["c", "k"], ["ck"], name="mul"),
        helper.make_node("Add", ["ck", "t"], ["ckt"], name="add"),
        helper.make_node("Sigmoid", ["ckt"], ["y"], name="sigmoid"),
    ]
    cases.append(Case("conv-mul-add-sigmoid", _model(nodes, ci + _weights(("k", (CO, 1, 1)), ("t", (CO, 1, 1)))), True))
    # The Conv's own bias goes into the offset.
    conv, ci = _conv(bias=True)
    bn, bi = _bn(out="y")
    cases.append(Case("conv-with-bias-bn", _model([conv, bn], ci + bi), True))
    # A projection block's join: two Convs, each with its BatchNormalization, added, then a ReLU.
    conv, ci = _conv()
    other = helper.make_node("Conv", ["x", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1])
    bn, bi = _bn()
    bn2 = helper.make_node("BatchNormalization", ["c2", "s2", "b2", "m2", "v2"], ["bn2_out"], name="bn2")
    b2i = _weights(("w2", (CO, CI, 3, 3)), ("s2", (CO,)), ("b2", (CO,)), ("m2", (CO,)), ("v2", (CO,)))
    join = [helper.make_node("Add", ["bn_out", "bn2_out"], ["sum"], name="add"),
            helper.make_node("Relu", ["sum"], ["y"], name="relu")]  # fmt: skip
    cases.append(Case("two-convs-joined", _model([conv, other, bn, bn2, *join], ci + bi + b2i), True))
    # A scale that arrives as an input: only the normalisation before it folds.
    conv, ci = _conv()
    node = helper.make_node("BatchNormalization", ["c", "s_in", "bias", "mean", "var"], ["y"], name="bn")
    bi = _weights(("bias", (CO,)), ("mean", (CO,)), ("var", (CO,)))
    cases.append(Case("scale-from-input", _model([conv, node], ci + bi, extra_inputs=("s_in",)), True))
    # Not folded: the scale varies along the width ...
    conv, ci = _conv()
    node = helper.make_node("Mul", ["c", "k"], ["y"], name="mul")
    cases.append(Case("spatial-scale", _model([conv, node], ci + _weights(("k", (1, 1, W)))), False))
    # ... the Conv's output is an output of the graph too.
    conv, ci = _conv()
    bn, bi = _bn(out="y")
    cases.append(Case("conv-output-returned", _model([conv, bn], ci + bi, outputs=("y", "c")), False))
    return cases


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fold_matches_onnxruntime_and_notes_it(case: Case) -> None:
    result = build_for(case.model)
    feeds = {"x": RNG.standard_normal((N, CI, H, W)).astype(np.float32)}
    if any(i.name == "s_in" for i in case.model.graph.input):
        feeds["s_in"] = RNG.standard_normal(CO).astype(np.float32)
    assert_same(run_built(result, feeds), run_onnxruntime(case.model, feeds), rtol=1e-5, atol=1e-5)
    notes = [n for n in result.notes if "folded into Conv 'conv'" in n]
    assert bool(notes) == case.folded, result.notes
    if case.name == "two-convs-joined":
        assert any("folded into Conv 'conv2'" in n for n in result.notes), result.notes
    forward = result.source.split("def forward(")[1].split("\n\n\n")[0]
    assert ("weights.w_folded" in forward) == case.folded, forward
