"""The clauses of the kernels whose extents, bounds or kept places only the run gives equal central finite
differences.

Each case is one ONNX node whose shape, bounds, pads, sizes, repeats or condition are graph inputs (so the
lowering gives the run-time kernel: `kernel.reshape_to`, `kernel.slice_by`, `kernel.compress`, ...), then
loss = sum(sin(y)) (each element's derivative differs, so an element sent to the wrong place shows) and
ONNX's Gradient node of the loss.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper

from loam.testing import build_for, run_built
from tests.grad.finite_differences import TRAINING, central_differences

RUNTIME_KERNEL = {"Reshape": "reshape_to", "Expand": "expand_to", "Slice": "slice_by", "Pad": "pad_by",
                  "Split": "split_by", "Tile": "tile_by", "Compress": "compress"}  # fmt: skip


def _model(op: str, x_shape: list[int], ints: dict[str, np.ndarray], outs: int = 1, **attrs: object) -> object:
    """`op`(x, *ints) -> y0.., then loss = sum over the outputs of sum(sin(y)), and d loss / d x."""
    ys = [f"y{k}" for k in range(outs)]
    nodes = [helper.make_node(op, ["x", *ints], ys, name="op", **attrs)]
    for y in ys:
        nodes += [helper.make_node("Sin", [y], [f"s_{y}"]), helper.make_node("ReduceSum", [f"s_{y}"], [f"l_{y}"],
                                                                               keepdims=0)]  # fmt: skip
    nodes += [helper.make_node("Sum", [f"l_{y}" for y in ys], ["loss"]),
              helper.make_node("Gradient", ["x"], ["d_x"], domain=TRAINING, xs=["x"], y="loss")]  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", TensorProto.DOUBLE, x_shape)]
    inputs += [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in ints.items()
    ]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, []),
               helper.make_tensor_value_info("d_x", TensorProto.DOUBLE, x_shape)]  # fmt: skip
    graph = helper.make_graph(nodes, op.lower(), inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(TRAINING, 1)])


def _check(op: str, x_shape: list[int], feeds: dict[str, list[int]], outs: int = 1, **attrs: object) -> None:
    ints = {n: np.array(v, bool if op == "Compress" else np.int64) for n, v in feeds.items()}
    built = build_for(_model(op, x_shape, ints, outs, **attrs))
    assert f"kernel.{RUNTIME_KERNEL[op]}" in built.report  # the kernel of run-time operands, not a folded one
    x = np.random.default_rng(len(x_shape)).standard_normal(x_shape)
    run = functools.partial(run_built, built)
    _, d_x = run({"x": x, **ints})
    numeric = central_differences(lambda moved: float(run(moved)[0]), {"x": x, **ints}, "x")
    np.testing.assert_allclose(d_x, numeric, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [[6], [3, 2, 1], [0, 3], [-1, 2], [2, 0]])
def test_reshape_to_a_shape_the_run_gives(shape: list[int]) -> None:
    _check("Reshape", [2, 3, 1], {"shape": shape})


@pytest.mark.parametrize(("x_shape", "shape"), [([3, 1], [2, 3, 4]), ([1, 4], [3, 4]), ([2, 3], [1, 1]), ([2], [3, 1])])
def test_expand_to_a_shape_the_run_gives(x_shape: list[int], shape: list[int]) -> None:
    _check("Expand", x_shape, {"shape": shape})


@pytest.mark.parametrize(
    ("starts", "ends"),
    [([1, 0], [3, 2]), ([-2, 1], [100, -1]), ([0, -100], [-1, 9]), ([3, 1], [1, 2]), ([-9, 0], [2**62, 1])],
)
def test_slice_by_bounds_the_run_gives(starts: list[int], ends: list[int]) -> None:
    """Negative bounds, bounds past either end (clamped), and an empty slice (the end before the start)."""
    _check("Slice", [4, 3], {"starts": starts, "ends": ends})


@pytest.mark.parametrize("pads", [[1, 0, 2, 1], [0, 0, 0, 0], [-1, 1, 0, -2], [2, -1, -1, 0]])
def test_pad_by_widths_the_run_gives(pads: list[int]) -> None:
    """Pads and crops (negative pads) in constant mode."""
    _check("Pad", [3, 4], {"pads": pads})


@pytest.mark.parametrize("sizes", [[1, 3], [4, 0], [2, 2]])
def test_split_by_sizes_the_run_gives(sizes: list[int]) -> None:
    _check("Split", [4, 2], {"split": sizes}, outs=2, axis=0)


@pytest.mark.parametrize("repeats", [[1, 1], [3, 1], [2, 3], [1, 0]])
def test_tile_by_repeats_the_run_gives(repeats: list[int]) -> None:
    _check("Tile", [2, 3], {"repeats": repeats})


@pytest.mark.parametrize(
    ("keep", "attrs"),
    [([1, 0, 1], {"axis": 0}), ([0, 0, 0], {"axis": 0}), ([0, 1], {"axis": 1}), ([1, 1, 0, 0, 1, 0, 1], {}),
     ([0, 1, 1, 0], {"axis": -1})],
)  # fmt: skip
def test_compress_by_a_condition_the_run_gives(keep: list[int], attrs: dict[str, int]) -> None:
    """Along an axis, along the flattened data (no axis), none kept, and a condition shorter than the axis."""
    _check("Compress", [3, 4], {"condition": keep}, **attrs)
