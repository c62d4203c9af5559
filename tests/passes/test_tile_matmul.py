"""tile-matmul: f32 products as the `matmul_tiles` tile program, printed to numpy too.

The numpy module printed after the pass computes every product through the tile program's numpy
form; it must give onnxruntime's numbers for the MLP example (whose first layer, a Gemm with
transB=1, reads its weight transposed) and the library kernels' for the tiny GPT-2 decoder (batched
attention products over symbolic extents, epilogues, a tied head), so the numpy form is a fit
oracle for the WGSL one, which tests/backends/wgsl checks against it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from loam.backends.numpy_module import emit_python
from loam.core.poly import Poly
from loam.dialects.kernel import MatmulOp, PermuteOp, TileProgramOp
from loam.driver.options import Options
from loam.driver.pipeline import BuildResult, build, import_source
from loam.frontends.context import make_context
from loam.passes.grouped_heads import GroupedHeadsPass
from loam.passes.tile_matmul import blocks, tile_matmul
from loam.passes.tile_rows import tile_rows

ROOT = Path(__file__).resolve().parents[2]
GPT2 = ROOT / "tests" / "models" / "tiny_gpt2"
MLP = ROOT / "examples" / "mlp"


def gpt2_with_attention_kernels(graph: str, dumps: Path) -> tuple[BuildResult, ModuleOp]:
    """The numpy build of tiny GPT-2's `graph`, and its IR with each attention still the chain of kernels the
    tile passes take (the build's own IR before `fuse-attention`, then the passes after it: `grouped-heads`)."""
    options = Options.from_toml(GPT2 / f"{graph}.loam.toml")
    result = build(
        GPT2 / f"{graph}.onnxtext", checkpoints=[GPT2 / "tiny_gpt2.safetensors"], options=options, dump_ir=dumps
    )
    ctx = make_context()
    (before,) = dumps.glob("*-decode-state-in-place.mlir")
    ir = Parser(ctx, before.read_text(encoding="utf-8"), str(before)).parse_module()
    GroupedHeadsPass().apply(ctx, ir)
    return result, ir


def test_the_mlp_through_tiled_products_gives_onnxruntimes_numbers() -> None:
    options = Options.from_toml(MLP / "loam.toml")
    result = build(MLP / "mlp.onnxtext", options=options, fuse="dispatch")
    assert tile_matmul(result.ir) == 3
    ops = list(result.ir.walk())
    assert not any(isinstance(op, (MatmulOp, PermuteOp)) for op in ops)  # fc1's transposed weight: strides
    fused = [op.attributes["fused"] for op in ops if isinstance(op, TileProgramOp) and "fused" in op.attributes]
    assert len(fused) == 3  # each layer's bias (and ReLU) rode along as the epilogue
    tiled = import_source(emit_python(result.ir), "loam_tiled_mlp")
    weights = tiled.Weights.load_file(str(MLP / "mlp.safetensors"))
    got = tiled.forward(weights, np.load(MLP / "input.npy"))
    np.testing.assert_allclose(got, np.load(MLP / "expected.npy"), rtol=1e-5, atol=1e-6)


def test_the_gpt2_decoder_through_tile_programs_matches_its_library_kernels(tmp_path: Path) -> None:
    result, ir = gpt2_with_attention_kernels("decoder_with_past", tmp_path)
    plain = result.module
    tile_rows(ir)
    # per layer: the QKV, output and two MLP projections, the scores and the weighted values; the head
    assert tile_matmul(ir) == 13
    ops = list(ir.walk())
    assert not any(isinstance(op, MatmulOp) for op in ops)
    grids = [op.param("grid") for op in ops if isinstance(op, TileProgramOp) and op.program.data.grid_rank > 1]
    assert sum(len(g) == 3 for g in grids) == 5  # batched: attention over the heads, the head over the batch
    tiled = import_source(emit_python(ir), "loam_tiled_gpt2_products")
    rng = np.random.default_rng(4)
    for past in (0, 9):
        args = [np.array([[5, 7]], np.int64), np.ones((1, past + 2), np.int64)]
        args += [rng.standard_normal((1, 4, past, 16)).astype(np.float32) for _ in range(4)]
        weights_tiled = tiled.Weights.load_file(str(GPT2 / "tiny_gpt2.safetensors"))
        weights_plain = plain.Weights.load_file(str(GPT2 / "tiny_gpt2.safetensors"))
        got, want = tiled.forward(weights_tiled, *args), plain.forward(weights_plain, *args)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_blocks_follow_the_products_extents() -> None:
    assert blocks(1, 768) == (1, 64, 16)  # a decode step: one row, 64 columns per program
    assert blocks(256, 10) == (16, 16, 16)  # at most 256 results per program
    assert blocks(4096, 4096) == (16, 16, 16)
    assert blocks(300, 1) == (64, 1, 16)  # a matrix-vector product: a column of 64 rows
    assert blocks(Poly.parse("min(N, 3)"), 100) == (4, 64, 16)  # a bound on a symbolic extent
