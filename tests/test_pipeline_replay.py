"""The pipeline is data: the passes `pipeline_passes` lists, replayed on the IR a build read (its first dump,
options attached), print the very module the build printed, for real models on both backends.

`lit/tools/loam-build-print-pipeline.test` does the same for the MLP through the command lines
(`loam-opt -p "$(loam build --print-pipeline)"`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import loam
from loam.backends.numpy_module import emit_python
from loam.driver.options import Options
from loam.driver.pipeline import pipeline_passes
from loam.frontends.context import make_context, parse_ir
from tests.smollm2_file import smollm2_gguf

MODELS = Path(__file__).resolve().parent / "models"


def replayed(dump: Path, backend: str, fuse: str, draft: bool = False) -> str:
    ir = parse_ir((dump / "00-read.mlir").read_text(encoding="utf-8"), "00-read.mlir")
    ctx = make_context()
    for p in pipeline_passes(fuse, backend, draft):
        p.apply(ctx, ir)
    if backend == "wgsl":
        from loam.backends.wgsl_module import wgsl_module

        return wgsl_module(ir)[0]
    return emit_python(ir)


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_tiny_gpt2_replays_to_the_same_module(tmp_path: Path, backend: str) -> None:
    here = MODELS / "tiny_gpt2"
    options = Options.from_toml(here / "decoder_with_past.loam.toml").merged(
        checkpoints=[here / "tiny_gpt2.safetensors"]
    )
    fuse = "dispatch" if backend == "wgsl" else "memory"
    built = loam.build(
        here / "decoder_with_past.onnxtext", options=options, dump_ir=tmp_path, backend=backend, fuse=fuse
    )
    assert replayed(tmp_path, backend, fuse) == built.source


@pytest.mark.xdist_group("smollm2")
@pytest.mark.parametrize("int8", [None, True])
def test_smollm2_with_its_architecture_table_replays_to_the_same_module(tmp_path: Path, int8: bool | None) -> None:
    """The replay packs what the build packed, from the IR alone; with `int8_activations` the module's
    `loam.int8_activations` makes the replay's packed products integer ones too."""
    options = Options(checkpoints=(smollm2_gguf(),), architecture="llama", int8_activations=int8)
    built = loam.build(MODELS / "smollm2" / "decoder_with_past.onnxtext", options=options, dump_ir=tmp_path)
    assert "matmul_packed" in built.source
    assert ("int8=1" in built.source) == bool(int8)
    assert replayed(tmp_path, "numpy", "memory", draft=True) == built.source
