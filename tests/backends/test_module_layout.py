"""A generated module reads model first (axis markers, Weights, forward), then, under one banner,
what forward calls; and it carries only the runtime pieces its build reaches: a module checked
against a safetensors checkpoint has no GGUF reader, and refuses a GGUF file saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

import loam
from loam.backends.module_printer import RUNTIME_BANNER
from loam.backends.numpy_module import emit_python
from loam.driver.options import Options
from loam.frontends.context import parse_ir
from tests.backends.test_gguf_load import gguf_file

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp"

GGUF_ONLY = ("def parse_gguf_header(", "def _read_gguf(", "def dequantized(", "def _ggml_types(")
"""The pieces a module needs only to read GGUF files."""


@pytest.fixture(scope="module")
def mlp() -> loam.BuildResult:
    return loam.build(MLP / "mlp.onnxtext", options=Options.from_toml(MLP / "loam.toml"))


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_the_model_comes_first_and_the_runtime_after_one_banner(backend: str) -> None:
    built = loam.build(MLP / "mlp.onnxtext", options=Options.from_toml(MLP / "loam.toml"), backend=backend)
    source = built.source
    assert source.count(RUNTIME_BANNER) == 1
    model, runtime = source.split(RUNTIME_BANNER)
    for declared in ("class Batch:", "class Weights:", "def forward(", "INPUTS = "):
        assert declared in model and declared not in runtime
    for piece in ("def _check_input(", "def _load_weights(", "class ShapeError(", "SAFETENSORS_DTYPES = "):
        assert piece in runtime and piece not in model


def test_a_safetensors_build_carries_no_gguf_reader_and_refuses_gguf(mlp: loam.BuildResult, tmp_path: Path) -> None:
    for absent in (*GGUF_ONLY, "def graph_name_of(", "def _rotary_rows(", "def _packed_blocks("):
        assert absent not in mlp.source, absent
    assert "FORMATS = ('safetensors',)" in mlp.source
    weights = mlp.module.Weights.load_file(MLP / "mlp.safetensors")  # what it was built for still loads
    assert weights.fc1_weight.shape == (16, 8)
    gguf = gguf_file({"fc1.weight": ("F32", (8, 16), bytes(4 * 128))})
    with pytest.raises(mlp.module.LoadError, match="is a GGUF file, and this module was built to read safetensors"):
        mlp.module.Weights.load(gguf)


def test_a_module_printed_without_a_checked_checkpoint_reads_every_format(mlp: loam.BuildResult) -> None:
    ir = mlp.ir.clone()
    del ir.attributes["loam.checkpoint_formats"]
    source = emit_python(parse_ir(str(ir), "<mlp>"))
    for present in GGUF_ONLY:
        assert present in source, present
    assert "FORMATS = ('safetensors', 'gguf')" in source
