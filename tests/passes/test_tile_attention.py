"""tile-attention (`passes/tile_attention.py`): an attention chain as one `attention_rows` tile program.

Oracles: onnxruntime on the ONNX graph, through the WGSL module on the machine's adapter (llvmpipe in
CI); and, for the tiny GPT-2 decoders, the same module without the pass (its library kernels), with
the program's numpy form in its place.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from loam.backends.numpy_module import emit_python
from loam.core.layout import LayoutRule
from loam.dialects.kernel import SoftmaxOp, TileProgramOp
from loam.driver.options import Options
from loam.driver.pipeline import build, import_source
from loam.passes.tile_attention import tile_attention
from tests.passes.test_tile_matmul import GPT2, gpt2_with_attention_kernels

pytest.importorskip("wgpu")
RNG = np.random.default_rng(8)
LOWEST = np.finfo(np.float32).min


def _graph(
    batch: int, heads: int, rows: int, keys: int, d: int, dv: int, *, mask: bool, scale: bool, rank: int = 4
) -> tuple[onnx.ModelProto, Options, dict[str, np.ndarray]]:
    """softmax(Q K^T [* 1/sqrt(d)] [+ mask]) V as ONNX builds it, with inputs to feed it."""
    lead = [batch, heads] if rank == 4 else [heads]
    lead_axes = ["B", "H"] if rank == 4 else ["H"]
    shapes = {"q": [*lead, rows, d], "k": [*lead, keys, d], "v": [*lead, keys, dv]}
    axes = {"q": [*lead_axes, "S", "D"], "k": [*lead_axes, "T", "D"], "v": [*lead_axes, "T", "E"]}
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[*range(rank - 2), rank - 1, rank - 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"], name="scores"),
    ]
    inits, last = [], "s0"
    if scale:
        inits.append(numpy_helper.from_array(np.array(1 / np.sqrt(d), np.float32), "scale"))
        nodes.append(helper.make_node("Mul", [last, "scale"], ["s1"], name="scaled"))
        last = "s1"
    if mask:
        shapes["mask"] = [batch, 1, 1, keys] if rank == 4 else [1, 1, keys]
        axes["mask"] = ["B", "One", "One1", "T"] if rank == 4 else ["One", "One1", "T"]
        nodes.append(helper.make_node("Add", [last, "mask"], ["s2"], name="masked"))
        last = "s2"
    nodes += [
        helper.make_node("Softmax", [last], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"], name="context"),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    out_shape = [*lead, rows, dv]
    graph = helper.make_graph(
        nodes, "attention", inputs, [helper.make_tensor_value_info("o", TensorProto.FLOAT, out_shape)], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    axes["o"] = [*lead_axes, "S", "E"]
    options = Options(layout=tuple(LayoutRule(n, tuple(a)) for n, a in axes.items()))
    feeds = {n: (RNG.standard_normal(s) * 2).astype(np.float32) for n, s in shapes.items() if n != "mask"}
    if mask:
        masked = RNG.random(shapes["mask"]) < 0.3
        if batch > 1 and rank == 4:
            masked[-1] = True  # a batch entry whose every key is masked: equal scores, uniform weights
        feeds["mask"] = np.where(masked, LOWEST, 0).astype(np.float32)
    return model, options, feeds


CASES = {
    "gpt2-like": dict(batch=2, heads=3, rows=4, keys=6, d=16, dv=16, mask=True, scale=True),
    "a decode step over 70 keys": dict(batch=1, heads=2, rows=1, keys=70, d=64, dv=64, mask=True, scale=True),
    "no scale, no mask, Dv != D": dict(batch=1, heads=1, rows=5, keys=3, d=8, dv=24, mask=False, scale=False),
    "odd head width": dict(batch=2, heads=1, rows=3, keys=33, d=20, dv=7, mask=True, scale=False),
    "one batch axis": dict(batch=1, heads=4, rows=3, keys=9, d=32, dv=32, mask=True, scale=True, rank=3),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_an_attention_chain_runs_as_one_tile_program_with_onnxruntimes_numbers(case: dict) -> None:
    model, options, feeds = _graph(**case)
    result = build(model, options=options, backend="wgsl", fuse="dispatch")
    programs = [op for op in result.ir.walk() if isinstance(op, TileProgramOp) and "fused" in op.attributes]
    assert len(programs) == 1 and not any(isinstance(op, SoftmaxOp) for op in result.ir.walk())
    nodes = ["scores"] + ["scaled"] * case["scale"] + ["masked"] * case["mask"] + ["softmax", "context"]
    assert [n.data for n in programs[0].attributes["fused"].data] == nodes  # type: ignore[attr-defined]
    assert any(note.startswith("nodes 'scores'") and "one attention kernel" in note for note in result.notes)
    assert result.fusion is not None and result.fusion.device is not None
    assert result.fusion.device.dispatches == 1  # the permutation goes too: K is read through its strides
    got = result.module.forward(result.module.Weights.embedded(), *feeds.values())
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("change", "why"),
    [({"d": 80, "dv": 80}, "a row of Q wider than 64"), ({}, "the softmax is also an output")],
)
def test_a_chain_the_program_cannot_take_keeps_its_kernels(change: dict, why: str) -> None:
    model, options, _ = _graph(**{**CASES["gpt2-like"], **change})
    if not change:
        model.graph.output.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, [2, 3, 4, 6]))
        options = Options(layout=(*options.layout, LayoutRule("p", ("B", "H", "S", "T"))))
    result = build(model, options=options, backend="numpy")
    assert tile_attention(result.ir) == 0, why
    assert any(isinstance(op, SoftmaxOp) for op in result.ir.walk())


@pytest.mark.parametrize("graph", ["decoder", "decoder_with_past"])
def test_the_gpt2_decoders_attention_runs_as_tile_programs_with_the_library_kernels_numbers(
    graph: str, tmp_path: Path
) -> None:
    result, ir = gpt2_with_attention_kernels(graph, tmp_path)
    plain = result.module
    assert tile_attention(ir) == 2  # one per layer, the causal mask (a bool Where) inside the score
    tiled = import_source(emit_python(ir), f"loam_tiled_attention_{graph}")
    checkpoint = str(GPT2 / "tiny_gpt2.safetensors")
    weights_tiled, weights_plain = tiled.Weights.load_file(checkpoint), plain.Weights.load_file(checkpoint)
    rng = np.random.default_rng(4)
    for past in (0, 9):
        if graph == "decoder":
            args = [np.array([[5, 7, 9, 2]], np.int64), np.array([[1, 1, 0, 1]], np.int64)]
        else:
            args = [np.array([[5, 7]], np.int64), np.ones((1, past + 2), np.int64)]
            args += [rng.standard_normal((1, 4, past, 16)).astype(np.float32) for _ in range(4)]
        for a, b in zip(tiled.forward(weights_tiled, *args), plain.forward(weights_plain, *args), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
