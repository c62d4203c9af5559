"""tile-rows: row softmaxes and layer normalisations as tile programs, printed to numpy too.

The numpy module printed after the pass computes each row kernel through the tile program's numpy
form; it must give the library kernels' numbers (so the numpy form is a fit oracle for the WGSL one,
which tests/backends/wgsl checks against it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loam.backends.numpy_module import emit_python
from loam.dialects.kernel import NormalizeOp, SoftmaxOp, TileProgramOp
from loam.driver.pipeline import import_source
from loam.passes.tile_rows import tile_rows
from tests.passes.test_tile_matmul import gpt2_with_attention_kernels

GPT2 = Path(__file__).resolve().parents[1] / "models" / "tiny_gpt2"


def test_the_gpt2_decoder_through_tile_programs_matches_its_library_kernels(tmp_path: Path) -> None:
    result, ir = gpt2_with_attention_kernels("decoder_with_past", tmp_path)
    assert tile_rows(ir) == 7  # 2 attention softmaxes (rows of min(128, past + 1)) and 5 LayerNorms
    ops = list(ir.walk())
    assert not any(isinstance(op, (SoftmaxOp, NormalizeOp)) for op in ops)
    tiles = [op for op in ops if isinstance(op, TileProgramOp)]
    assert {op.program.data.tile for op in tiles} == {64, 128}
    source = emit_python(ir)
    assert "def _tile_0(grid: int | tuple[int, ...], params: tuple[int, ...], *tensors: np.ndarray) -> None:" in source
    tiled = import_source(source, "loam_tiled_gpt2")
    plain = result.module
    rng = np.random.default_rng(3)
    args = [np.array([[5]], np.int64), np.ones((1, 10), np.int64)]
    args += [rng.standard_normal((1, 4, 9, 16)).astype(np.float32) for _ in range(4)]  # the two layers' pasts
    weights_tiled = tiled.Weights.load_file(str(GPT2 / "tiny_gpt2.safetensors"))
    weights_plain = plain.Weights.load_file(str(GPT2 / "tiny_gpt2.safetensors"))
    got, want = tiled.forward(weights_tiled, *args), plain.forward(weights_plain, *args)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
