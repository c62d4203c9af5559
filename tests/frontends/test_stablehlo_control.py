"""StableHLO control flow (`while`, `case`), a Flax scan RNN and a Flax transformer block, against JAX.

The files are written by scripts/export_jax_models.py (sections `control` and `flax`) with JAX as the
oracle: `tests/frontends/stablehlo_ops/control.*` (lax.cond, lax.switch, fori_loop over a traced
bound, a while_loop whose stop depends on the values, a loop inside a cond branch, and the
elementwise ops they came with: expm1/log1p near 0, is_finite, clamp, pad with negative and interior
widths, reverse, xor), `case_index.*` (a `case` with out-of-range indices, XLA's results),
`tests/frontends/stablehlo_flax/rnn.*` (flax.linen nn.RNN: a GRU and a reversed LSTM, each a
lax.scan) and `block.*` (flax.linen attention + MLP block, symbolic batch).  The control flow and the
scan RNN run on the WGSL backend too.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import loam
from loam.core.errors import UnsupportedError
from loam.dialects.graph import GraphOp, InitializerOp, NodeOp
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.frontends.stablehlo import import_stablehlo, read_stablehlo

HERE = Path(__file__).resolve().parent
OPS = HERE / "stablehlo_ops"
FLAX = HERE / "stablehlo_flax"


def drafted(model: Path, backend: str = "numpy") -> ModuleType:
    return loam.build(model, options=draft_layout(model).options(Options()), backend=backend).module


def nodes(model: Path) -> list[NodeOp]:
    """Every node of the model, those inside subgraphs too."""
    return [op for op in read_stablehlo(model).walk() if isinstance(op, NodeOp)]


@pytest.mark.parametrize("form", ["control.mlir", "control.generic.mlir"])
@pytest.mark.parametrize("case", [0, 1, 2])
def test_control_flow_and_its_elementwise_ops_match_jax(form: str, case: int) -> None:
    data = np.load(OPS / "control.npz")
    module = drafted(OPS / form)
    inputs = (data[f"x.{case}"], data[f"i.{case}"], data[f"k.{case}"], data["bits"])
    outputs = module.forward(module.Weights.embedded(), *inputs)
    expected = {k.removeprefix(f"result.{case}."): data[k] for k in data if k.startswith(f"result.{case}.")}
    got = {
        name.removeprefix("result_"): np.asarray(value) for name, value in zip(outputs._fields, outputs, strict=True)
    }
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        assert got[name].dtype == want.dtype, name
        # expm1/log1p at 1e-4 * x: exp(x) - 1 in f32 would be off by about 1e-3 of the value here
        np.testing.assert_allclose(got[name], want, rtol=2e-6, atol=1e-7, err_msg=name)


# expm1 and log1p of WGSL on llvmpipe: its exp and log round less closely than libm (4e-5 of the value)
WGSL_LOOSER = {"expm1", "log1p"}


@pytest.mark.parametrize("case", [0, 1, 2])
def test_the_control_flow_matches_jax_on_the_wgsl_backend(case: int) -> None:
    """The same cases through the WGSL module: the Loops and Ifs run on the host, reading each
    computed condition back from the device."""
    pytest.importorskip("wgpu")
    data = np.load(OPS / "control.npz")
    module = drafted(OPS / "control.mlir", backend="wgsl")
    inputs = (data[f"x.{case}"], data[f"i.{case}"], data[f"k.{case}"], data["bits"])
    outputs = module.forward(module.Weights.embedded(), *inputs)
    expected = {k.removeprefix(f"result.{case}."): data[k] for k in data if k.startswith(f"result.{case}.")}
    got = {
        name.removeprefix("result_"): np.asarray(value) for name, value in zip(outputs._fields, outputs, strict=True)
    }
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        assert got[name].dtype == want.dtype, name
        rtol = 1e-4 if name in WGSL_LOOSER else 2e-6
        np.testing.assert_allclose(got[name], want, rtol=rtol, atol=1e-7, err_msg=name)


def test_the_inputs_take_each_way_through_the_control_flow() -> None:
    """Not vacuous: the cases run the loops 0 and more times, both cond branches and the long while."""
    data = np.load(OPS / "control.npz")
    assert sorted(int(data[f"i.{n}"]) for n in range(3)) == [0, 2, 3]
    assert len({int(data[f"result.{n}.while_steps"]) for n in range(3)}) == 3
    np.testing.assert_array_equal(data["result.1.fori"], data["x.1"])  # no iterations
    assert int(data["result.2.while_steps"]) > 5
    took = {n: np.allclose(data[f"result.{n}.cond"], data[f"x.{n}"] * 2) for n in range(3)}
    assert set(took.values()) == {True, False}


def test_a_while_carries_only_what_its_body_changes() -> None:
    """fori_loop carries (counter, bound, value): the bound is read from the graph, not carried."""
    loops = [n for n in nodes(OPS / "control.mlir") if n.op_type == "Loop"]
    assert len(loops) == 3  # fori, while, and the one inside the cond branch
    fori = loops[0]
    assert len(fori.args) == 2 + 2  # no trip count, the first condition, the counter and the value
    body = fori.subgraphs[0].block
    assert len(body.args) == 2 + 2


@pytest.mark.parametrize("index", [-1, 0, 1, 2, 7])
def test_a_case_index_out_of_range_takes_the_last_branch(index: int) -> None:
    data = np.load(OPS / "case_index.npz")
    module = drafted(OPS / "case_index.mlir")
    got = module.forward(module.Weights.embedded(), np.array(index, np.int32), data["x"])
    np.testing.assert_array_equal(got, data[f"result.{index}"])


def test_a_case_is_a_chain_of_ifs() -> None:
    ifs = [n for n in nodes(OPS / "case_index.mlir") if n.op_type == "If"]
    assert len(ifs) == 2  # index == 0, else index == 1, else the last branch


def test_a_while_whose_cond_returns_no_bool_is_refused_at_the_op() -> None:
    text = """
    func.func public @main(%x: tensor<f32>) -> tensor<f32> {
      %r = stablehlo.while(%a = %x) : tensor<f32>
      cond {
        stablehlo.return %a : tensor<f32>
      } do {
        stablehlo.return %a : tensor<f32>
      }
      return %r : tensor<f32>
    }
    """
    with pytest.raises(loam.core.errors.ModelError, match=r"m\.mlir:3:\d+: .*stablehlo\.while cond returns"):
        import_stablehlo(text, "m.mlir")


def test_an_unsupported_op_inside_a_loop_body_is_named_at_its_line() -> None:
    text = """
    func.func public @main(%x: tensor<i32>) -> tensor<i32> {
      %r = stablehlo.while(%a = %x) : tensor<i32>
      cond {
        %c = stablehlo.constant dense<9> : tensor<i32>
        %p = stablehlo.compare LT, %a, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %p : tensor<i1>
      } do {
        %one = stablehlo.constant dense<1> : tensor<i32>
        %b = stablehlo.shift_left %a, %one : tensor<i32>
        stablehlo.return %b : tensor<i32>
      }
      return %r : tensor<i32>
    }
    """
    with pytest.raises(UnsupportedError, match=r"m\.mlir:10:\d+: 'stablehlo\.shift_left' is not an op Loam reads"):
        import_stablehlo(text, "m.mlir")


# -- a scan-based RNN --------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["rnn.mlir", "rnn.generic.mlir"])
def test_the_flax_scan_rnn_matches_jax(form: str) -> None:
    """flax.linen nn.RNN: a GRU forward and an LSTM backward over 7 steps, each a lax.scan that JAX
    prints as a while whose body reads the step's input with dynamic_slice and writes its output
    with dynamic_update_slice."""
    data = np.load(FLAX / "rnn.npz")
    module = drafted(FLAX / form)
    weights = module.Weights.load((FLAX / "rnn.safetensors").read_bytes())
    got = np.asarray(module.forward(weights, data["x"]))
    assert got.shape == (2, 7, 11)
    np.testing.assert_allclose(got, data["result"], rtol=1e-5, atol=1e-6)


def test_the_flax_scan_rnn_matches_jax_on_the_wgsl_backend() -> None:
    """The scans on the device: each Loop's counter and states in two buffers each, the condition (the
    counter against the length) read back every step."""
    pytest.importorskip("wgpu")
    data = np.load(FLAX / "rnn.npz")
    module = drafted(FLAX / "rnn.mlir", backend="wgsl")
    weights = module.Weights.load((FLAX / "rnn.safetensors").read_bytes())
    for _ in range(2):  # the second call reuses the first one's buffers
        got = np.asarray(module.forward(weights, data["x"]))
        np.testing.assert_allclose(got, data["result"], rtol=1e-5, atol=1e-6)


def test_the_scan_loops_read_the_weights_from_the_graph() -> None:
    """Each scan's Loop carries its counter, state and output buffer, never the sequence or a weight."""
    loops = [n for n in nodes(FLAX / "rnn.mlir") if n.op_type == "Loop"]
    assert len(loops) == 2
    carried = sorted(len(loop.args) - 2 for loop in loops)
    assert carried == [3, 4]  # GRU: counter, h, ys; LSTM: counter, c, h, ys


# -- a Flax transformer block ------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [2, 3])
@pytest.mark.parametrize("form", ["block.mlir", "block.generic.mlir"])
def test_the_flax_transformer_block_matches_jax(form: str, batch: int) -> None:
    """flax.linen LayerNorm, MultiHeadDotProductAttention (causal mask), Dense + GELU, exported with a
    symbolic batch; every parameter drawn at random, read from the checkpoint by its flax path."""
    data = np.load(FLAX / "block.npz")
    module = drafted(FLAX / form)
    weights = module.Weights.load((FLAX / "block.safetensors").read_bytes())
    got = np.asarray(module.forward(weights, data[f"x.{batch}"]))
    assert got.shape == (batch, 5, 16)
    np.testing.assert_allclose(got, data[f"result.{batch}"], rtol=1e-5, atol=1e-5)


def test_the_flax_block_reads_its_weights_by_their_flax_paths() -> None:
    graph = next(op for op in read_stablehlo(FLAX / "block.mlir").walk() if isinstance(op, GraphOp))
    weights = [op for op in graph.body.block.ops if isinstance(op, InitializerOp) and op.value is None]
    names = {op.onnx_name.data for op in weights}
    assert "MultiHeadDotProductAttention_0.query.kernel" in names and "LayerNorm_1.scale" in names
    assert len(names) == 16  # 2 LayerNorms, q/k/v/out and 2 Denses, each a scale or kernel and a bias


def test_interior_padding_before_a_dim_of_unknown_extent_is_refused_by_name() -> None:
    text = (
        'func.func public @main(%x: tensor<3x?xf32> loc("x")) -> tensor<5x?xf32> {\n'
        "  %c = stablehlo.constant dense<0.0> : tensor<f32>\n"
        "  %0 = stablehlo.pad %x, %c, low = [0, 0], high = [0, 0], interior = [1, 0]"
        " : (tensor<3x?xf32>, tensor<f32>) -> tensor<5x?xf32>\n"
        "  return %0 : tensor<5x?xf32>\n"
        "}\n"
    )
    with pytest.raises(UnsupportedError, match=r"^t\.mlir:3:3: stablehlo\.pad: interior padding of dim 0 before a dim"):
        import_stablehlo(text, "t.mlir")
