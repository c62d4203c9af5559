"""AffineGrid against onnxruntime and ONNX's reference evaluator: 2-D and 3-D, align_corners, a
symbolic batch, AffineGrid feeding GridSample, folding, and what the build refuses (a size only the
run knows, a theta of the wrong extents, align_corners over an extent of 1)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx.reference import ReferenceEvaluator

from loam.core.errors import ShapeError, UnsupportedError
from loam.testing import assert_same, build_for, run_built, run_loam, run_onnxruntime


def model(text: str, opset: int = 20) -> onnx.ModelProto:
    """A model from the text form of its graph."""
    return onnx.parser.parse_model(f'<ir_version: 9, opset_import: ["" : {opset}]>\n{text}')


def affine_grid(theta: str, size: list[int], grid: str, align: int = 0) -> onnx.ModelProto:
    """One AffineGrid node over `theta`, its size a Constant."""
    values = ", ".join(map(str, size))
    return model(
        f"g ({theta} theta) => ({grid} grid) {{\n"
        f"  size = Constant <value = int64[{len(size)}] {{{values}}}> ()\n"
        f"  grid = AffineGrid <align_corners = {align}> (theta, size)\n}}"
    )


def thetas(n: int, r: int, seed: int = 0, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, (n, r, r + 1)).astype(dtype)


SIZES = {"2d": [2, 3, 5, 6], "2d_thin": [1, 1, 2, 7], "3d": [2, 1, 4, 5, 6], "3d_thin": [1, 2, 1, 3, 2]}


# align_corners over a spatial extent of 1 is refused (test_align_corners_over_one_position_is_refused).
@pytest.mark.parametrize(
    ("size", "align"),
    [
        pytest.param(size, align, id=f"{name}-{align}")
        for name, size in SIZES.items()
        for align in (0, 1)
        if not (align and 1 in size[2:])
    ],
)
def test_against_onnxruntime_and_the_reference(size: list[int], align: int) -> None:
    r = len(size) - 2
    grid = ", ".join(map(str, [size[0], *size[2:], r]))
    m = affine_grid(f"float[{size[0]}, {r}, {r + 1}]", size, f"float[{grid}]", align)
    feeds = {"theta": thetas(size[0], r)}
    got = run_loam(m, feeds)
    assert_same(got, run_onnxruntime(m, feeds), rtol=1e-5, atol=1e-6)
    assert_same(got, list(ReferenceEvaluator(m).run(None, feeds)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_element_types(dtype: type) -> None:
    name = {np.float16: "float16", np.float64: "double"}[dtype]
    m = affine_grid(f"{name}[2, 2, 3]", [2, 1, 3, 4], f"{name}[2, 3, 4, 2]")
    feeds = {"theta": thetas(2, 2, dtype=dtype)}
    (got,) = run_loam(m, feeds)
    assert got.dtype == dtype
    assert_same([got], run_onnxruntime(m, feeds), rtol=1e-3, atol=1e-3)


def test_symbolic_batch_feeding_grid_sample() -> None:
    m = model(
        "g (float[N, 2, 3] theta, float[N, 3, 6, 7] x) => (float[N, 3, 6, 7] y) {\n"
        "  size = Shape (x)\n"
        "  grid = AffineGrid <align_corners = 1> (theta, size)\n"
        "  y = GridSample <align_corners = 1> (x, grid)\n}"
    )
    result = build_for(m)
    rng = np.random.default_rng(1)
    feeds = {"theta": thetas(2, 2) * 0.5, "x": rng.standard_normal((2, 3, 6, 7)).astype(np.float32)}
    assert_same(run_built(result, feeds), run_onnxruntime(m, feeds), rtol=1e-5, atol=1e-5)
    feeds = {"theta": thetas(3, 2) * 0.5, "x": rng.standard_normal((3, 3, 6, 7)).astype(np.float32)}
    assert_same(run_built(result, feeds), run_onnxruntime(m, feeds), rtol=1e-5, atol=1e-5)


def test_batches_that_differ_at_run_time() -> None:
    m = model(
        "g (float[N, 2, 3] theta, float[M, 3, 6, 7] x) => (float[N, 6, 7, 2] grid) {\n"
        "  size = Shape (x)\n"
        "  grid = AffineGrid (theta, size)\n}"
    )
    result = build_for(m)
    rng = np.random.default_rng(2)
    feeds = {"theta": thetas(2, 2), "x": rng.standard_normal((2, 3, 6, 7)).astype(np.float32)}
    assert_same(run_built(result, feeds), run_onnxruntime(m, feeds), rtol=1e-5, atol=1e-5)
    # size's batch is owed equal to theta's: another batch stops forward.
    with pytest.raises(result.module.ShapeError, match="AffineGrid"):
        run_built(result, {"theta": thetas(3, 2), "x": rng.standard_normal((2, 3, 6, 7)).astype(np.float32)})


def test_known_theta_folds() -> None:
    theta = thetas(1, 2)
    values = ", ".join(str(float(v)) for v in theta.reshape(-1))
    m = model(
        "g () => (float[1, 2, 3, 2] grid) {\n"
        f"  theta = Constant <value = float[1, 2, 3] {{{values}}}> ()\n"
        "  size = Constant <value = int64[4] {1, 1, 2, 3}> ()\n"
        "  grid = AffineGrid (theta, size)\n}"
    )
    result = build_for(m)
    assert "kernel_affine_grid(" not in result.source
    assert_same(run_built(result, {}), list(ReferenceEvaluator(m).run(None, {})), rtol=1e-6, atol=1e-6)


def test_size_only_the_run_knows_needs_its_length_known() -> None:
    # (A size of known length the run gives is read at run time: tests/ops/test_run_time_extents.py.)
    m = model("g (float[1, 2, 3] theta, int64[L] size) => (float[1, 2, 3, 2] grid) { grid = AffineGrid (theta, size) }")
    with pytest.raises(UnsupportedError, match="AffineGrid node 'grid': the size input is computed at run time"):
        run_loam(m, {"theta": thetas(1, 2), "size": np.array([1, 1, 2, 3])})


def test_theta_of_the_wrong_extents_is_a_model_error() -> None:
    m = affine_grid("float[1, 3, 4]", [1, 1, 2, 3], "float[1, 2, 3, 2]")
    with pytest.raises(ShapeError, match=r"theta has extents \[1, 3, 4\]; a size of 4 values takes theta \(N, 2, 3\)"):
        run_loam(m, {"theta": thetas(1, 3)})
    m = affine_grid("float[2, 2, 3]", [1, 1, 2, 3], "float[1, 2, 3, 2]")
    with pytest.raises(ShapeError, match="size's batch 1 is not theta's 2"):
        run_loam(m, {"theta": thetas(2, 2)})


def test_align_corners_over_one_position_is_refused() -> None:
    m = affine_grid("float[1, 2, 3]", [1, 1, 1, 3], "float[1, 1, 3, 2]", align=1)
    with pytest.raises(UnsupportedError, match="align_corners 1 with a spatial extent of 1"):
        run_loam(m, {"theta": thetas(1, 2)})
