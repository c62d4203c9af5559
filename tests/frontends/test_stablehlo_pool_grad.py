"""`stablehlo.select_and_scatter`, the gradient of max pooling, against JAX and XLA.

The models are committed exports of `scripts/export_jax_models.py` (JAX is not needed here):
`pool_grad.mlir` (both forms) is `jax.grad` through max pools of NHWC and HWC operands, VALID and
SAME, windows side by side and overlapping, their inputs whole numbers so that windows hold ties
and the first maximum must be the one picked; `select_and_scatter.mlir` is hand-written for what
JAX does not print (the spec's example in i64, a padding attribute, GT, LT, a compare of the
arguments swapped, a non-zero init value, windows of padding alone), XLA computing its results.
Both are exact: the same elements are picked and the same few numbers added.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import loam
from loam.core.errors import UnsupportedError
from loam.dialects.graph import GraphOp, NodeOp
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.frontends.stablehlo import import_stablehlo, read_stablehlo

CNN = Path(__file__).resolve().parent / "stablehlo_cnn"


@functools.cache
def built(model: Path, backend: str = "numpy") -> ModuleType:
    return loam.build(model, options=draft_layout(model).options(Options()), backend=backend).module


def pool_grads(module: ModuleType) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each case's gradient from `module` and from JAX."""
    data = np.load(CNN / "pool_grad.npz")
    cotangents = [data[k] for k in sorted(k for k in data if k.startswith("g."))]  # JAX's order: sorted keys
    outputs = module.forward(module.Weights.embedded(), data["x"], data["x3"], *cotangents)
    got = {name.removeprefix("result_"): np.asarray(v) for name, v in zip(outputs._fields, outputs, strict=True)}
    want = {k.removeprefix("result."): data[k] for k in data if k.startswith("result.")}
    assert sorted(got) == sorted(want)
    return {name: (got[name], want[name]) for name in want}


@pytest.mark.parametrize("form", ["pool_grad.mlir", "pool_grad.generic.mlir"])
def test_max_pool_gradients_match_jax(form: str) -> None:
    for name, (got, want) in pool_grads(built(CNN / form)).items():
        assert got.shape == want.shape and got.dtype == want.dtype, name
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=name)


def test_the_exports_have_ties_and_overlaps() -> None:
    """Not vacuous: windows tie, and overlapping windows pick one element twice."""
    data = np.load(CNN / "pool_grad.npz")
    windows = data["x"][:, :6, :6, :].reshape(2, 3, 2, 3, 2, 3).transpose(0, 1, 3, 5, 2, 4).reshape(-1, 4)
    assert ((windows == windows.max(axis=1, keepdims=True)).sum(axis=1) > 1).sum() >= 10
    text = (CNN / "pool_grad.mlir").read_text()
    assert text.count('"stablehlo.select_and_scatter"') == 6 and "stablehlo.pad" in text
    # Where windows overlap, an element may take two cotangents: a value that is no single one of them.
    got, g = data["result.valid_3x3_stride1"], data["g.valid_3x3_stride1"]
    assert not np.all(np.isin(got[got != 0], g))


def test_the_last_maximum_is_not_what_jax_picks(tmp_path: Path) -> None:
    """GT keeps the last maximum: with ties the gradients differ from JAX's (GE, the first)."""
    text = (CNN / "pool_grad.generic.mlir").read_text()
    swapped = tmp_path / "pool_grad_gt.mlir"
    swapped.write_text(text.replace("comparison_direction GE>", "comparison_direction GT>"), encoding="utf-8")
    differing = [name for name, (got, want) in pool_grads(built(swapped)).items() if not np.array_equal(got, want)]
    assert len(differing) == 6


def test_a_select_and_scatter_reads_as_slices_and_one_scatter() -> None:
    graph = next(op for op in read_stablehlo(CNN / "pool_grad.mlir").walk() if isinstance(op, GraphOp))
    kinds = [op.op_type for op in graph.body.block.ops if isinstance(op, NodeOp)]
    assert kinds.count("ScatterElements") == 6
    assert kinds.count("Pad") == 4  # the SAME and explicit pools' stablehlo.pad; VALID's pads nothing
    assert "MaxPool" not in kinds  # the loss is linear in the pools: JAX computes none of them forward


def test_the_handwritten_select_and_scatters_match_xla() -> None:
    data = np.load(CNN / "select_and_scatter.npz")
    module = built(CNN / "select_and_scatter.mlir")
    outputs = module.forward(module.Weights.embedded(), *(data[k] for k in ("x", "s", "y", "g2", "g3", "g4")))
    for name, value in zip(outputs._fields, outputs, strict=True):
        want = data[name.replace("result_", "result.", 1)]
        assert np.asarray(value).dtype == want.dtype, name
        np.testing.assert_allclose(np.asarray(value), want, rtol=1e-6, atol=1e-7, err_msg=name)
    # The spec's example, its result as the spec gives it.
    np.testing.assert_array_equal(data["result.spec"], [[0, 0], [0, 0], [5, 14], [7, 0]])


def test_max_pool_gradients_run_on_webgpu() -> None:
    pytest.importorskip("wgpu")
    for name, (got, want) in pool_grads(built(CNN / "pool_grad.mlir", "wgsl")).items():
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=name)


# -- refusals ------------------------------------------------------------------------------------


def select_and_scatter(select: str, scatter: str = "%r = stablehlo.add %a, %b : tensor<f32>") -> str:
    return (
        'func.func public @main(%x: tensor<4xf32> loc("x"), %s: tensor<2xf32> loc("s")) -> tensor<4xf32> {\n'
        "  %c = stablehlo.constant dense<0.0> : tensor<f32>\n"
        '  %0 = "stablehlo.select_and_scatter"(%x, %s, %c) <{window_dimensions = array<i64: 2>,'
        " window_strides = array<i64: 2>}> ({\n"
        "  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
        f"    {select}\n"
        f"    stablehlo.return %p : tensor<{'i1' if 'compare' in select else 'f32'}>\n"
        "  }, {\n"
        "  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
        f"    {scatter}\n"
        "    stablehlo.return %r : tensor<f32>\n"
        "  }) : (tensor<4xf32>, tensor<2xf32>, tensor<f32>) -> tensor<4xf32>\n"
        "  return %0 : tensor<4xf32>\n"
        "}\n"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            select_and_scatter("%p = stablehlo.compare EQ, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>"),
            "its select region compares EQ; Loam reads GE, GT, LE or LT",
        ),
        (
            select_and_scatter("%p = stablehlo.compare GE, %a, %a, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>"),
            "its select region computes stablehlo.compare; Loam reads one stablehlo.compare GE, GT, LE or LT of its "
            "two arguments",
        ),
        (
            select_and_scatter(
                "%p = stablehlo.compare GE, %a, %b, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>"
            ),
            "its select region compares in TOTALORDER",
        ),
        (
            select_and_scatter(
                "%p = stablehlo.compare GE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>",
                "%r = stablehlo.multiply %a, %b : tensor<f32>",
            ),
            "its scatter region computes stablehlo.multiply; Loam reads one stablehlo.add of its two arguments",
        ),
    ],
    ids=["select EQ", "select of one argument", "select TOTALORDER", "scatter multiply"],
)
def test_other_regions_are_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(UnsupportedError, match=r"^t\.mlir:3:3: stablehlo\.select_and_scatter: " + re.escape(message)):
        import_stablehlo(text, "t.mlir")


def test_a_select_region_of_another_op_is_refused_by_name() -> None:
    text = select_and_scatter("%p = stablehlo.maximum %a, %b : tensor<f32>")
    with pytest.raises(UnsupportedError, match=r"its select region computes stablehlo\.maximum; Loam reads one"):
        import_stablehlo(text, "t.mlir")
