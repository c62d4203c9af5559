"""`loam.build` as a Python API: options, checkpoint headers, inlined weights and IR dumps."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load as load_safetensors
from safetensors.numpy import save_file as save_safetensors

import loam
from loam.core.errors import CheckpointError
from loam.driver.options import Options

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "examples" / "mlp"


def mlp_options(**flags: object) -> Options:
    return Options.from_toml(MLP / "loam.toml").merged(**flags)


def test_inline_weights_embeds_the_checkpoint() -> None:
    result = loam.build(MLP / "mlp.onnxtext", options=mlp_options(inline_weights=True))
    weights = result.module.Weights.embedded()
    got = result.module.forward(weights, np.load(MLP / "input.npy"))
    np.testing.assert_allclose(got, np.load(MLP / "expected.npy"), rtol=1e-5, atol=1e-6)
    # The module still reads checkpoints too, and agrees with itself on both paths.
    loaded = result.module.Weights.load((MLP / "mlp.safetensors").read_bytes())
    np.testing.assert_array_equal(result.module.forward(loaded, np.load(MLP / "input.npy")), got)


def test_without_inline_weights_the_module_has_no_embedded_weights() -> None:
    result = loam.build(MLP / "mlp.onnxtext", options=mlp_options())
    assert not hasattr(result.module.Weights, "embedded")
    # Only numpy and the standard library (json, for a safetensors header) are imported by the generated module.
    imports = [n for n in ast.walk(ast.parse(result.source)) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert {alias.name for n in imports for alias in n.names} == {"numpy", "json"}


def test_inline_weights_without_a_checkpoint_is_refused() -> None:
    options = Options(layout=mlp_options().layout, inline_weights=True)
    with pytest.raises(CheckpointError, match=r"inline_weights: the graph reads 6 weights it does not carry"):
        loam.build(MLP / "mlp.onnxtext", options=options)


def test_dump_ir_writes_every_stage(tmp_path: Path) -> None:
    loam.build(MLP / "mlp.onnxtext", options=mlp_options(), dump_ir=tmp_path)
    stages = sorted(p.name for p in tmp_path.iterdir())
    assert stages == [
        "00-read.mlir",
        "01-apply-options.mlir",
        "02-stage0.mlir",
        "03-name-axes.mlir",
        "04-lower-to-kernel.mlir",
        "05-pack-quantized.mlir",
        "06-fuse.mlir",
        "07-fold-conv-affine.mlir",
        "08-decode-state-in-place.mlir",
        "09-fuse-attention.mlir",
        "10-grouped-heads.mlir",
    ]
    assert 'graph.node "Gemm"' in (tmp_path / "00-read.mlir").read_text()
    assert "!shape_poly.tensor<f32, [4, 16]>" in (tmp_path / "02-stage0.mlir").read_text()
    assert "!tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>" in (tmp_path / "03-name-axes.mlir").read_text()
    assert "kernel.matmul" in (tmp_path / "04-lower-to-kernel.mlir").read_text()
    assert 'fused = ["fc1", "act1"]' in (tmp_path / "06-fuse.mlir").read_text()


def test_progress_names_each_stage() -> None:
    said: list[str] = []
    loam.build(MLP / "mlp.onnxtext", options=mlp_options(), progress=said.append)
    assert said[0] == f"reading {MLP / 'mlp.onnxtext'}"
    assert [s for s in said if s.startswith("running")] == [
        "running apply-options",
        "running stage0",
        "running name-axes",
        "running lower-to-kernel",
        "running pack-quantized",
        "running fuse",
        "running fold-conv-affine",
        "running decode-state-in-place",
        "running fuse-attention",
        "running grouped-heads",
    ]


def test_an_architecture_table_that_does_not_exist_is_refused() -> None:
    from loam.core.errors import OptionsError

    with pytest.raises(OptionsError, match=r"architecture 'falcon': no such table \(known: .*llama.*\)"):
        loam.build(MLP / "mlp.onnxtext", options=mlp_options(architecture="falcon"))


def test_a_layout_rule_reaching_nothing_is_refused() -> None:
    from loam.core.errors import OptionsError
    from loam.core.layout import LayoutRule

    options = mlp_options()
    options = Options(
        layout=(*options.layout, LayoutRule("fc4.weight", ("Hidden", "Out"))), checkpoints=options.checkpoints
    )
    with pytest.raises(OptionsError, match=r"layout rule 'fc4.weight' reaches no tensor the model declares"):
        loam.build(MLP / "mlp.onnxtext", options=options)


@pytest.mark.parametrize(
    ("stored", "accepted"),
    [("float16", True), ("float32", True), ("float64", False), ("int64", False)],
)
def test_build_accepts_exactly_the_checkpoint_dtypes_the_load_accepts(
    tmp_path: Path, stored: str, accepted: bool
) -> None:
    # The MLP's checkpoint with every tensor stored as `stored`.
    tensors = {k: v.astype(stored) for k, v in load_safetensors((MLP / "mlp.safetensors").read_bytes()).items()}
    path = tmp_path / "w.safetensors"
    save_safetensors(tensors, str(path))
    options = Options(layout=mlp_options().layout, checkpoints=(path,))
    if not accepted:
        name = {"float64": "f64", "int64": "i64"}[stored]
        with pytest.raises(CheckpointError, match=f"is {name}, the graph reads it as f32, and {name} does not convert"):
            loam.build(MLP / "mlp.onnxtext", options=options)
        return
    result = loam.build(MLP / "mlp.onnxtext", options=options)
    got = result.module.forward(result.module.Weights.load(path.read_bytes()), np.load(MLP / "input.npy"))
    # float16 weights carry about three decimal digits.
    tolerance = {"float32": 1e-5, "float16": 2e-2}[stored]
    np.testing.assert_allclose(got, np.load(MLP / "expected.npy"), rtol=tolerance, atol=1e-3 * (stored != "float32"))


def test_graph_dialect_text_builds_like_the_model_it_came_from(tmp_path: Path) -> None:
    from xdsl.printer import Printer

    from loam.core.errors import ModelError
    from loam.frontends.onnx_proto import read_model

    ir = tmp_path / "mlp.mlir"
    with open(ir, "w") as f:
        Printer(stream=f).print_op(read_model(MLP / "mlp.onnxtext"))
    from_ir = loam.build(ir, options=mlp_options())
    assert from_ir.source == loam.build(MLP / "mlp.onnxtext", options=mlp_options()).source
    (tmp_path / "bad.mlir").write_text("builtin.module { graph.bogus }\n")
    with pytest.raises(ModelError, match=r"bad.mlir:1:\d+"):
        loam.build(tmp_path / "bad.mlir", options=mlp_options())
