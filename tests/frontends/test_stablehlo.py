"""The StableHLO front end end to end: JAX's text through the whole pipeline, against JAX.

The models are the committed exports of `scripts/export_jax_models.py` (JAX is not needed here):
`examples/jax_mlp` (a 3-layer MLP, both text forms, and its ONNX twin written with onnx.helper
from the same weights), `examples/jax_attention` (an attention block exported for a symbolic batch
`b`), `tests/frontends/stablehlo_ops` (one result per op the reader translates, and a
hand-written module whose expected results XLA computed) and `tests/frontends/stablehlo_cnn` (a
small NHWC CNN, and the convolutions and reduce_windows it does not have).  JAX's (or XLA's) outputs are the
oracle, at rtol 1e-5; onnxruntime checks that the twin is the same model.

The two MLP forms must reach the same kernel IR, character for character; the twin reaches it
with its own value and node names: `normalised` renames every SSA value by first appearance and
blanks the `node = "..."` and `fused = [...]` attributes (nothing else).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from onnx.external_data_helper import load_external_data_for_model
from safetensors.numpy import save, save_file

import loam
from loam.core.errors import CheckpointError
from loam.dialects.graph import GraphOp, InitializerOp, NodeOp, TensorType
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.driver.pipeline import BuildResult
from loam.driver.registry import read_model
from loam.frontends.onnx_text import read_onnx_text
from loam.frontends.stablehlo import read_stablehlo
from loam.testing import run_onnxruntime

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "jax_mlp"
ATTENTION = ROOT / "examples" / "jax_attention"
OPS = Path(__file__).resolve().parent / "stablehlo_ops"
CNN = Path(__file__).resolve().parent / "stablehlo_cnn"
RTOL, ATOL = 1e-5, 1e-6


def close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@functools.cache
def build(model: Path, backend: str = "numpy") -> BuildResult:
    """The build of a committed model with the options beside it."""
    return loam.build(model, options=Options.from_toml(model.parent / "loam.toml"), backend=backend)


def built(model: Path) -> ModuleType:
    return build(model).module


def checkpoint(module: ModuleType, path: Path) -> object:
    return module.Weights.load(path.read_bytes())


# -- the MLP: two forms and the ONNX twin reach the same kernels ----------------------------------


def kernel_ir(model: Path, dump: Path) -> dict[str, str]:
    """The kernel IR the build writes after lowering and after fusion."""
    loam.build(model, options=Options.from_toml(MLP / "loam.toml"), dump_ir=dump)
    return {stage: next(dump.glob(f"*-{stage}.mlir")).read_text() for stage in ("lower-to-kernel", "fuse")}


def normalised(ir: str) -> str:
    """`ir` with SSA values renamed in order of appearance and node names blanked (stage 0's record of the
    nodes, `loam.nodes`, too)."""
    ir = re.sub(r", loam\.nodes = \[(?:\[[^\]]*\](?:, )?)*\]", "", ir)
    names: dict[str, str] = {}
    text = re.sub(r"%[\w.$-]+", lambda m: names.setdefault(m.group(0), f"%v{len(names)}"), ir)
    text = re.sub(r'node = "[^"]*"', "node = _", text)
    return re.sub(r"fused = \[[^\]]*\]", "fused = _", text)


def test_the_mlp_forms_and_its_onnx_twin_reach_the_same_kernel_ir(tmp_path: Path) -> None:
    pretty = kernel_ir(MLP / "mlp.mlir", tmp_path / "pretty")
    generic = kernel_ir(MLP / "mlp.generic.mlir", tmp_path / "generic")
    twin = kernel_ir(MLP / "mlp.onnxtext", tmp_path / "twin")
    lowered = pretty["lower-to-kernel"]
    # Not vacuous: three products reading the checkpoint's weights, two ReLUs, three bias adds.
    assert lowered.count("kernel.matmul") == 3 and lowered.count("relu 0") == 2
    assert lowered.count("add 0 1") == 3 and lowered.count("kernel.weight") == 6 and "Expand" not in lowered
    for stage in ("lower-to-kernel", "fuse"):
        assert pretty[stage] == generic[stage]
        assert normalised(pretty[stage]) == normalised(twin[stage])
        assert pretty[stage] != twin[stage]  # the normalisation had names to even out


@pytest.mark.parametrize("form", ["mlp.mlir", "mlp.generic.mlir"])
def test_the_mlp_matches_jax(form: str) -> None:
    module = built(MLP / form)
    result = module.forward(checkpoint(module, MLP / "mlp.safetensors"), np.load(MLP / "inputs.npz")["x"])
    close(result, np.load(MLP / "outputs.npz")["result"])


def test_the_onnx_twin_is_the_same_model_for_onnxruntime() -> None:
    twin = read_onnx_text(MLP / "mlp.onnxtext")
    load_external_data_for_model(twin, str(MLP))
    (result,) = run_onnxruntime(twin, {"x": np.load(MLP / "inputs.npz")["x"]})
    close(result, np.load(MLP / "outputs.npz")["result"])


def test_the_mlp_runs_on_webgpu() -> None:
    pytest.importorskip("wgpu")
    wgsl = build(MLP / "mlp.mlir", "wgsl")
    assert "@compute" in wgsl.source  # the kernels are WGSL compute shaders
    module = wgsl.module
    result = module.forward(checkpoint(module, MLP / "mlp.safetensors"), np.load(MLP / "inputs.npz")["x"])
    close(result, np.load(MLP / "outputs.npz")["result"])


# -- the attention block: a symbolic batch -----------------------------------------------------------


@pytest.mark.parametrize("batch", [2, 5])
@pytest.mark.parametrize("form", ["attention.mlir", "attention.generic.mlir"])
def test_the_attention_block_matches_jax_at_two_batch_sizes(form: str, batch: int) -> None:
    module = built(ATTENTION / form)
    tokens = np.load(ATTENTION / "inputs.npz")[f"tokens_{batch}"]
    result = module.forward(checkpoint(module, ATTENTION / "attention.safetensors"), tokens)
    close(result, np.load(ATTENTION / "outputs.npz")[f"result_{batch}"])


@pytest.mark.parametrize("form", ["attention.mlir", "attention.generic.mlir"])
def test_the_exported_batch_is_the_symbol_b(form: str) -> None:
    graph = next(op for op in read_stablehlo(ATTENTION / form).walk() if isinstance(op, GraphOp))
    (tokens,) = graph.body.block.args
    assert isinstance(tokens.type, TensorType) and tokens.type.shape == ("b", 6)
    assert graph.doc_string is None  # every `?` had a name: no generated symbol to report


def test_a_dynamic_dim_the_text_does_not_name_gets_a_name_it_reports(tmp_path: Path) -> None:
    model = tmp_path / "exp.mlir"
    model.write_text("""func.func public @main(%x: tensor<?x3xf32> loc("x")) -> tensor<?x3xf32> {
      %0 = stablehlo.exponential %x : tensor<?x3xf32>
      return %0 : tensor<?x3xf32>
    }""")
    graph = next(op for op in read_stablehlo(model).walk() if isinstance(op, GraphOp))
    assert graph.body.block.args[0].type == TensorType("f32", ["x_dim0", 3])
    assert graph.doc_string is not None and "axis 0 of 'x'" in graph.doc_string.data
    module = loam.build(model, options=draft_layout(model).options(Options())).module
    for rows in (1, 4):
        x = np.linspace(-1, 1, 3 * rows, dtype=np.float32).reshape(rows, 3)
        close(module.forward(module.Weights.embedded(), x), np.exp(x))


def test_dynamic_iota_and_broadcast_follow_the_run_time_extent(tmp_path: Path) -> None:
    """The shapes StableHLO computes at run time (Shape, Range, Expand after stage 0) at two extents;
    the expected values are the StableHLO spec's iota and broadcast, spelled with numpy."""
    model = tmp_path / "iota.mlir"
    model.write_text("""func.func public @main(%x: tensor<?x3xf32> loc("x")) -> tensor<?x3xi32> {
      %n = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?x3xf32>) -> tensor<i32>
      %r = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
      %c = stablehlo.constant dense<3> : tensor<1xi32>
      %s = stablehlo.concatenate %r, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
      %i = stablehlo.dynamic_iota %s, dim = 0 : (tensor<2xi32>) -> tensor<?x3xi32>
      %two = stablehlo.constant dense<2> : tensor<i32>
      %b = stablehlo.dynamic_broadcast_in_dim %two, %s, dims = [], known_expanding_dimensions = [0, 1]
             : (tensor<i32>, tensor<2xi32>) -> tensor<?x3xi32>
      %m = stablehlo.multiply %i, %b : tensor<?x3xi32>
      return %m : tensor<?x3xi32>
    }""")
    module = loam.build(model, options=draft_layout(model).options(Options())).module
    for rows in (1, 4):
        got = module.forward(module.Weights.embedded(), np.zeros((rows, 3), np.float32))
        close(got, np.broadcast_to(2 * np.arange(rows, dtype=np.int32)[:, None], (rows, 3)).copy())


# -- one result per op -------------------------------------------------------------------------------


@functools.cache
def drafted(model: Path) -> ModuleType:
    """A module built with the layout `loam layout` drafts for it (the op models have no options file)."""
    return loam.build(model, options=draft_layout(model).options(Options())).module


@pytest.mark.parametrize("form", ["ops.mlir", "ops.generic.mlir"])
def test_each_op_matches_jax(form: str) -> None:
    data = np.load(OPS / "ops.npz")
    module = drafted(OPS / form)
    outputs = module.forward(module.Weights.embedded(), data["x"], data["y"], data["m"], data["t"])
    expected = {k.removeprefix("result."): data[k] for k in data if k.startswith("result.")}
    got = {name.removeprefix("result_"): value for name, value in zip(outputs._fields, outputs, strict=True)}
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        close(np.asarray(got[name]), want)
    # atan2 of signed zeros: +-0 and +-pi as JAX gives them, the zeros' signs included
    np.testing.assert_array_equal(np.signbit(got["atan2_zeros"]), np.signbit(expected["atan2_zeros"]))
    assert np.any(np.signbit(expected["atan2_zeros"]) & (expected["atan2_zeros"] == 0))


def test_the_handwritten_ops_match_xla() -> None:
    data = np.load(OPS / "handwritten.npz")
    module = drafted(OPS / "handwritten.mlir")
    weights = module.Weights.load(save({"w": data["w"]}))  # `params['w']` is a weight; `%extra` an input
    outputs = module.forward(weights, data["x"], data["extra"])
    for name, value in zip(outputs._fields, outputs, strict=True):
        close(np.asarray(value), data[name.replace("result_", "result.", 1)])


# -- convolutions and pooling: a small CNN -----------------------------------------------------------


@pytest.mark.parametrize("form", ["cnn.mlir", "cnn.generic.mlir"])
def test_the_cnn_matches_jax(form: str) -> None:
    """conv -> relu -> max pool -> conv -> relu -> avg pool -> mean -> dense, NHWC, weights under `params`."""
    data = np.load(CNN / "cnn.npz")
    module = drafted(CNN / form)
    got = np.asarray(module.forward(checkpoint(module, CNN / "cnn.safetensors"), data["x"]))
    assert got.shape == data["result"].shape == (2, 10)
    np.testing.assert_allclose(got, data["result"], rtol=1e-4, atol=1e-5)


def test_the_cnn_reads_as_onnx_conv_and_pooling() -> None:
    graph = next(op for op in read_stablehlo(CNN / "cnn.mlir").walk() if isinstance(op, GraphOp))
    kinds = [op.op_type for op in graph.body.block.ops if isinstance(op, NodeOp)]
    assert kinds.count("Conv") == 3  # two convolutions and the window sum of the avg pool
    assert kinds.count("MaxPool") == 1


@pytest.mark.parametrize("form", ["windows.mlir", "windows.generic.mlir"])
def test_the_window_ops_match_jax(form: str) -> None:
    data = np.load(CNN / "windows.npz")
    module = drafted(CNN / form)
    outputs = module.forward(module.Weights.embedded(), data["x"], data["w"], data["g"])
    expected = {k.removeprefix("result."): data[k] for k in data if k.startswith("result.")}
    got = {name.removeprefix("result_"): value for name, value in zip(outputs._fields, outputs, strict=True)}
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        np.testing.assert_allclose(np.asarray(got[name]), want, rtol=1e-4, atol=1e-5, err_msg=name)


# -- weights ----------------------------------------------------------------------------------------


def test_parameters_are_weights_a_checkpoint_supplies_by_name(tmp_path: Path) -> None:
    graph = next(op for op in read_model(ATTENTION / "attention.mlir").walk() if isinstance(op, GraphOp))
    weights = {op.onnx_name.data: op for op in graph.body.block.ops if isinstance(op, InitializerOp)}
    assert sorted(weights) == sorted(["b1", "b2", "embed", "ln1.bias", "ln1.scale", "ln2.bias", "ln2.scale",
                                      "pos", "w1", "w2", "wk", "wo", "wq", "wv"])  # fmt: skip
    assert all(op.value is None for op in weights.values())  # no data: the checkpoint's
    module = built(ATTENTION / "attention.mlir")
    tokens = np.load(ATTENTION / "inputs.npz")["tokens_2"]
    base = module.forward(checkpoint(module, ATTENTION / "attention.safetensors"), tokens)
    # The same checkpoint with b2 (added last) shifted: the output moves by exactly that shift.
    from safetensors.numpy import load_file

    tensors = load_file(ATTENTION / "attention.safetensors")
    tensors["b2"] = tensors["b2"] + np.float32(1.0)
    shifted = module.forward(module.Weights.load(save(tensors)), tokens)
    np.testing.assert_allclose(shifted - base, np.ones_like(base), rtol=1e-5, atol=1e-5)
    # A checkpoint that lacks a weight stops the build, naming it.
    del tensors["wq"]
    save_file(tensors, str(tmp_path / "partial.safetensors"))
    options = Options.from_toml(ATTENTION / "loam.toml").merged(checkpoints=[tmp_path / "partial.safetensors"])
    with pytest.raises(CheckpointError, match="wq"):
        loam.build(ATTENTION / "attention.mlir", options=options)


def test_constants_are_embedded_weights() -> None:
    graph = next(op for op in read_stablehlo(OPS / "handwritten.mlir").walk() if isinstance(op, GraphOp))
    embedded = [op for op in graph.body.block.ops if isinstance(op, InitializerOp) and op.value is not None]
    assert [op.value.shape for op in embedded if op.value is not None] == [(4, 3)]
    values = embedded[0].value.to_numpy() if embedded[0].value is not None else None
    assert values is not None and np.isneginf(values[0, 1]) and np.isposinf(values[1, 0])
