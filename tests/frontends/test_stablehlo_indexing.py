"""The StableHLO indexing ops against JAX: dynamic_slice, dynamic_update_slice, gather, scatter, sort.

`stablehlo_indexing/` holds what `scripts/export_jax_models.py indexing` wrote: one function with a
result per use (`indexing.mlir`, its generic form `indexing.generic.mlir`), its inputs and JAX's
outputs (`indexing.npz`).  Integer and permutation results must match exactly, float ones to
rtol 1e-6 (they are moved, not computed, so in practice exactly; NaNs where JAX has them).  Hand
written modules check what JAX does not print here (a GT comparator, the generic and custom forms
of one op printing alike) and that what Loam cannot express is refused by name.
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
from loam.frontends.stablehlo import import_stablehlo

DATA = Path(__file__).resolve().parent / "stablehlo_indexing"
INPUTS = ("x", "m", "v", "s", "k", "i", "j", "g", "h", "a", "r", "w")


@functools.cache
def drafted(model: Path, backend: str = "numpy") -> ModuleType:
    return loam.build(model, options=draft_layout(model).options(Options()), backend=backend).module


def close(name: str, got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape, name
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got.astype(want.dtype), want, err_msg=name)
    else:
        assert got.dtype == want.dtype, name
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=name)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)  # -0.0 stays -0.0


def outputs(module: ModuleType) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """What the module computes and what JAX did, by result name (`sort_two.0`, ...)."""
    data = np.load(DATA / "indexing.npz")
    result = module.forward(module.Weights.embedded(), *(data[n] for n in INPUTS))
    got = {f.removeprefix("result_"): np.asarray(value) for f, value in zip(result._fields, result, strict=True)}
    want = {k.removeprefix("result.").replace(".", "_"): data[k] for k in data if k.startswith("result.")}
    return got, want


@pytest.mark.parametrize("form", ["indexing.mlir", "indexing.generic.mlir"])
def test_each_indexing_op_matches_jax(form: str) -> None:
    got, want = outputs(drafted(DATA / form))
    assert sorted(got) == sorted(want)
    for name, expected in want.items():
        close(name, got[name], expected)


def test_the_cases_are_not_vacuous() -> None:
    data = np.load(DATA / "indexing.npz")
    m = data["m"]
    # clamped starts: row 7 of 4 clamps to row 2, column -7 to 0
    np.testing.assert_array_equal(data["result.dynamic_slice_clamped"], m[2:4, 0:3])
    # index 9 is dropped, 2 comes twice (added twice), -7 (-3 after JAX wraps it) is dropped
    added = data["result.at_add"] - m
    np.testing.assert_allclose(added[2], data["v"][0] + data["v"][3], rtol=1e-6)
    assert not np.any(added[[1, 3]])
    # the window starting at row -1 is skipped whole (XLA's rule), row 0 untouched
    assert not np.any(data["result.window_out_of_range"][0] - m[0])
    # NaNs sort last, -0.0 ties 0.0 in input order, infinities in place
    assert np.isnan(data["result.sort"][0, -2:]).all() and np.isneginf(data["result.sort"][1, 0])
    assert list(data["result.argsort"][2, :3]) == [0, 1, 2]


def graph_of(text: str) -> list[str]:
    graph = next(op for op in import_stablehlo(text).walk() if isinstance(op, GraphOp))
    return [op.op_type for op in graph.body.block.ops if isinstance(op, NodeOp)]


def test_the_ops_lower_to_static_gathers_scatters_and_topk() -> None:
    text = (DATA / "indexing.mlir").read_text()
    kinds = graph_of(text)
    assert kinds.count("TopK") == 9  # one per sort
    assert kinds.count("ScatterND") == 11  # ten scatters and a dynamic_update_slice
    assert "Gather" in kinds and "GatherND" not in kinds


# -- hand-written: a GT comparator, and what is refused ---------------------------------------------

SORT = """\
func.func @main(%x: tensor<3x5xi32>, %y: tensor<3x5xf32>) -> (tensor<3x5xi32>, tensor<3x5xf32>) {
  %0:2 = "stablehlo.sort"(%x, %y) <{dimension = 1 : i64, is_stable = true}> ({
  ^bb0(%a: tensor<i32>, %b: tensor<i32>, %c: tensor<f32>, %d: tensor<f32>):
    %r = stablehlo.compare  DIRECTION, %a, %b,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %r : tensor<i1>
  }) : (tensor<3x5xi32>, tensor<3x5xf32>) -> (tensor<3x5xi32>, tensor<3x5xf32>)
  return %0#0, %0#1 : tensor<3x5xi32>, tensor<3x5xf32>
}
"""


@pytest.mark.parametrize("direction", ["LT", "GT"])
def test_a_gt_comparator_sorts_descending_and_stable(tmp_path: Path, direction: str) -> None:
    path = tmp_path / "sort.mlir"
    path.write_text(SORT.replace("DIRECTION", direction))
    module = loam.build(path, options=draft_layout(path).options(Options())).module
    x = np.array([[3, 1, 3, 2, 1], [0, 0, 0, 0, 0], [-4, 7, 7, -4, 2]], np.int32)
    y = np.arange(15, dtype=np.float32).reshape(3, 5)
    keys, values = module.forward(module.Weights.embedded(), x, y)
    order = np.argsort(-x if direction == "GT" else x, axis=1, kind="stable")
    np.testing.assert_array_equal(keys, np.take_along_axis(x, order, axis=1))
    np.testing.assert_array_equal(values, np.take_along_axis(y, order, axis=1))


@pytest.mark.parametrize(
    ("comparator", "named"),
    [
        ("%r = stablehlo.compare  LE, %a, %b,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>", "compare"),
        ("%r = stablehlo.compare  LT, %c, %d,  FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>", "compare"),
        (
            "%q = stablehlo.compare  GT, %a, %b,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
            "    %r = stablehlo.compare  LT, %a, %b,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>",
            "compare, stablehlo.compare",
        ),
        (
            "%n = stablehlo.negate %a : tensor<i32>\n"
            "    %r = stablehlo.compare  LT, %n, %b,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>",
            "negate",
        ),
    ],
)
def test_other_comparators_are_refused_by_name(comparator: str, named: str) -> None:
    text = SORT.replace(
        "%r = stablehlo.compare  DIRECTION, %a, %b,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>", comparator
    )
    with pytest.raises(UnsupportedError, match=rf"stablehlo\.sort.*comparator computes stablehlo\.{re.escape(named)}"):
        graph_of(text)


def test_an_uncanonicalized_totalorder_float_comparator_is_refused() -> None:
    text = """\
func.func @main(%x: tensor<5xf32>) -> tensor<5xf32> {
  %0 = "stablehlo.sort"(%x) <{dimension = 0 : i64, is_stable = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %r = stablehlo.compare  LT, %a, %b,  TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %r : tensor<i1>
  }) : (tensor<5xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}
"""
    with pytest.raises(UnsupportedError, match=r"TOTALORDER without mapping -0\.0"):
        graph_of(text)


SCATTER = """\
func.func @main(%x: tensor<4x5xf32>, %i: tensor<3x1xi32>, %u: tensor<3x5xf32>) -> tensor<4x5xf32> {
  %0 = "stablehlo.scatter"(%x, %i, %u) <{indices_are_sorted = false, scatter_dimension_numbers =
    #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0],
    index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    BODY
  }) : (tensor<4x5xf32>, tensor<3x1xi32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}
"""


def test_an_unrecognized_scatter_body_is_refused_by_name() -> None:
    body = "%s = stablehlo.subtract %a, %b : tensor<f32>\n    stablehlo.return %s : tensor<f32>"
    with pytest.raises(UnsupportedError, match=r"stablehlo\.scatter.*body computes stablehlo\.subtract"):
        graph_of(SCATTER.replace("BODY", body))


def test_a_scatter_of_two_operands_is_refused() -> None:
    text = """\
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>, %i: tensor<2x1xi32>, %u: tensor<2xf32>)
    -> (tensor<4xf32>, tensor<4xf32>) {
  %0:2 = "stablehlo.scatter"(%x, %y, %i, %u, %u) <{scatter_dimension_numbers = #stablehlo.scatter<
    inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<f32>, %d: tensor<f32>):
    stablehlo.return %b, %d : tensor<f32>, tensor<f32>
  }) : (tensor<4xf32>, tensor<4xf32>, tensor<2x1xi32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}
"""
    with pytest.raises(UnsupportedError, match="a scatter of 2 operands at once"):
        graph_of(text)


def test_the_custom_and_generic_forms_read_alike() -> None:
    custom = (DATA / "indexing.mlir").read_text()
    generic = (DATA / "indexing.generic.mlir").read_text()
    assert graph_of(custom) == graph_of(generic)


# -- WebGPU ------------------------------------------------------------------------------------------


def test_the_indexing_ops_run_on_webgpu() -> None:
    pytest.importorskip("wgpu")
    try:
        module = drafted(DATA / "indexing.mlir", "wgsl")
        got, want = outputs(module)
    except Exception as err:  # no adapter here: the numpy tests cover the lowering
        if "adapter" in str(err).lower():
            pytest.skip(str(err))
        raise
    for name, expected in want.items():
        close(name, got[name], expected)
