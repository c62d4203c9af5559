"""`loam layout` / `loam.driver.draft.draft_layout`: a complete layout that the build accepts unedited."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import loam
from loam.core.errors import AxisError
from loam.core.layout import LayoutRule
from loam.driver.draft import draft_layout, glob_escape
from loam.driver.options import Options
from loam.testing import assert_same, run_loam, run_onnxruntime

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "examples" / "mlp"


def _model(nodes: list[onnx.NodeProto], inputs: list, outputs: list, inits: list | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _f32(name: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_mlp_draft_names_axes_by_what_they_meet() -> None:
    draft = draft_layout(MLP / "mlp.onnxtext")
    rules = {r.pattern: r.axes for r in draft.rules}
    # Gemm(transB=1) contracts x's axis 1 with fc1.weight's axis 1; fc1.bias meets fc1's output axis.
    assert rules["fc1.weight"][1] == rules["x"][1]
    assert rules["fc1.bias"] == (rules["fc1.weight"][0],)
    assert rules["fc2.weight"][0] == rules["fc1.weight"][0]
    assert rules["fc3.weight"][0] == rules["fc2.weight"][1]
    assert set(draft.invented) == {a for axes in rules.values() for a in axes}


def test_mlp_builds_with_its_draft_and_matches_the_expected_output() -> None:
    draft = draft_layout(MLP / "mlp.onnxtext")
    result = loam.build(MLP / "mlp.onnxtext", checkpoints=[MLP / "mlp.safetensors"], options=draft.options())
    weights = result.module.Weights.load((MLP / "mlp.safetensors").read_bytes())
    got = result.module.forward(weights, np.load(MLP / "input.npy"))
    np.testing.assert_allclose(got, np.load(MLP / "expected.npy"), rtol=1e-6, atol=1e-7)  # f32 sums: BLAS's order


def test_dim_params_name_their_axes() -> None:
    model = _model(
        [helper.make_node("Add", ["x", "y"], ["z"])],
        [_f32("x", ["batch", 3]), _f32("y", ["batch", 3])],
        [_f32("z", ["batch", 3])],
    )
    draft = draft_layout(model, options=Options(dims={"batch": 2}))
    rules = {r.pattern: r.axes for r in draft.rules}
    assert rules["x"] == rules["y"]
    assert rules["x"][1] in draft.invented


def test_given_rules_are_kept_and_spread_to_the_axes_they_meet() -> None:
    model = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [_f32("x", [2, 4])],
        [_f32("y", [2, 5])],
        [numpy_helper.from_array(np.ones((4, 5), np.float32), "w")],
    )
    options = Options(layout=(LayoutRule("x", ("Batch", "In")),))
    draft = draft_layout(model, options=options)
    rules = {r.pattern: r.axes for r in draft.rules}
    assert "x" not in rules  # the given rule names it
    assert rules["w"][0] == "In"
    assert draft.given == options.layout
    assert 'pattern = "x"' in draft.toml()


def test_given_rules_that_contradict_the_graph_stop_the_draft() -> None:
    model = _model(
        [helper.make_node("Add", ["x", "y"], ["z"])],
        [_f32("x", [2, 3]), _f32("y", [2, 3])],
        [_f32("z", [2, 3])],
    )
    options = Options(layout=(LayoutRule("x", ("A", "B")), LayoutRule("y", ("A", "C"))))
    with pytest.raises(AxisError, match=r"axis [BC] and axis [BC]"):
        draft_layout(model, options=options)


def test_names_with_glob_characters_are_matched_exactly() -> None:
    assert glob_escape("a*b?[c]") == "a[*]b[?][[]c]"
    model = _model(
        [helper.make_node("Relu", ["x[0]*"], ["y?"])],
        [_f32("x[0]*", [2, 3])],
        [_f32("y?", [2, 3])],
    )
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    assert_same(run_loam(model, {"x[0]*": x}), run_onnxruntime(model, {"x[0]*": x}))


def test_loam_layout_cli_writes_a_layout_loam_build_accepts(tmp_path: Path) -> None:
    out = tmp_path / "layout.toml"
    done = subprocess.run(
        [sys.executable, "-m", "loam.tools.loam_main", "layout", str(MLP / "mlp.onnxtext"), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "invented axis names" in done.stderr and "X_0" in done.stderr
    module = tmp_path / "mlp.py"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "loam.tools.loam_main",
            "build",
            str(MLP / "mlp.onnxtext"),
            "--options",
            str(out),
            "--checkpoint",
            str(MLP / "mlp.safetensors"),
            "-o",
            str(module),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert "class X_0:" in module.read_text()


def test_an_axis_meeting_a_merged_axis_is_named_by_the_merge() -> None:
    shape = numpy_helper.from_array(np.array([6], np.int64), "shape")
    model = _model(
        [helper.make_node("Reshape", ["x", "shape"], ["flat"]), helper.make_node("Add", ["flat", "y"], ["z"])],
        [_f32("x", [2, 3]), _f32("y", [6])],
        [_f32("z", [6])],
        [shape],
    )
    draft = draft_layout(model)
    rules = {r.pattern: r.axes for r in draft.rules}
    assert rules["y"] == (f"({rules['x'][0]} {rules['x'][1]})",)
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32), "y": rng.standard_normal(6).astype(np.float32)}
    assert_same(run_loam(model, feeds), run_onnxruntime(model, feeds))


def test_a_given_name_that_would_have_to_be_a_merge_stops_the_draft_naming_the_parts() -> None:
    shape = numpy_helper.from_array(np.array([6], np.int64), "shape")
    model = _model(
        [helper.make_node("Reshape", ["x", "shape"], ["flat"]), helper.make_node("Add", ["flat", "y"], ["z"])],
        [_f32("x", [2, 3]), _f32("y", [6])],
        [_f32("z", [6])],
        [shape],
    )
    options = Options(layout=(LayoutRule("y", ("Flat",)),))
    with pytest.raises(AxisError, match=r"axis Flat and the merge of axis 0 of tensor 'x', axis 1 of tensor 'x'"):
        draft_layout(model, options=options)
