"""Conv, ConvTranspose and the pools over symbolic spatial extents: one build runs at every length.

Each case declares its spatial axes as dim_params, is built once per backend, and is run at several
extents against onnxruntime.  The output extents are the window arithmetic over the symbols
(`floordiv(L - 5, 2) + 1`), which the module computes before any kernel; an input too short for a
window is a ShapeError naming the input axis, and two branches whose extents differ for every
input stop the build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from loam.core.errors import ShapeError
from loam.driver.pipeline import BuildResult
from loam.testing import assert_same, build_for, run_built, run_onnxruntime

RNG = np.random.default_rng(40)


def weights(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def graph_model(
    nodes: Sequence[onnx.NodeProto], x_shape: Sequence[int | str], inits: Mapping[str, np.ndarray]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 8
    return model


def one_node(
    op: str, x_shape: Sequence[int | str], inits: Mapping[str, np.ndarray], **attrs: object
) -> onnx.ModelProto:
    return graph_model([helper.make_node(op, ["x", *inits], ["y"], name="n", **attrs)], x_shape, inits)


CASES = {
    "conv1d_strided_dilated": (
        one_node("Conv", ["N", 3, "L"], {"w": weights(4, 3, 3)}, strides=[2], pads=[1, 2], dilations=[2]),
        [(2, 3, 9), (1, 3, 16), (1, 3, 5)],
    ),
    "conv2d_depthwise_same_upper": (
        one_node(
            "Conv", ["N", 4, "H", "W"], {"w": weights(4, 1, 3, 3)}, group=4, auto_pad="SAME_UPPER", strides=[2, 2]
        ),
        [(1, 4, 5, 5), (2, 4, 8, 7)],
    ),
    "conv2d_same_lower_bias": (
        one_node(
            "Conv",
            ["N", 4, "H", "W"],
            {"w": weights(6, 4, 3, 3), "b": weights(6)},
            auto_pad="SAME_LOWER",
            strides=[3, 2],
        ),
        [(1, 4, 5, 5), (2, 4, 8, 7)],
    ),
    "conv2d_valid": (
        one_node("Conv", ["N", 2, "H", "W"], {"w": weights(3, 2, 2, 3)}, auto_pad="VALID", strides=[2, 1]),
        [(1, 2, 4, 3), (1, 2, 9, 6)],
    ),
    "conv3d": (
        one_node(
            "Conv", [1, 2, "D", "H", "W"], {"w": weights(2, 2, 2, 3, 2)}, pads=[0, 1, 1, 1, 0, 0], strides=[1, 2, 2]
        ),
        [(1, 2, 3, 4, 5), (1, 2, 5, 6, 3)],
    ),
    "conv_transpose1d_output_padding": (
        one_node("ConvTranspose", ["N", 3, "L"], {"w": weights(3, 2, 3)}, strides=[2], output_padding=[1], pads=[1, 0]),
        [(1, 3, 5), (2, 3, 9)],
    ),
    "conv_transpose2d_same_upper": (
        one_node(
            "ConvTranspose", ["N", 3, "H", "W"], {"w": weights(3, 2, 3, 3)}, strides=[2, 2], auto_pad="SAME_UPPER"
        ),
        [(1, 3, 5, 4), (2, 3, 3, 6)],
    ),
    "conv_transpose2d_output_shape": (
        one_node("ConvTranspose", [1, 2, "H", "W"], {"w": weights(2, 2, 3, 3)}, strides=[2, 2], output_shape=[9, 10]),
        [(1, 2, 4, 4), (1, 2, 5, 5)],
    ),
    "max_pool_ceil": (
        one_node("MaxPool", ["N", 3, "H", "W"], {}, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        [(1, 3, 7, 8), (1, 3, 10, 9), (1, 3, 3, 3)],
    ),
    "max_pool_same_lower_dilated": (
        one_node("MaxPool", ["N", 3, "L"], {}, kernel_shape=[2], strides=[3], dilations=[2], auto_pad="SAME_LOWER"),
        [(1, 3, 7), (2, 3, 11)],
    ),
    "average_pool_same_upper_counting_pads": (
        one_node(
            "AveragePool",
            ["N", 3, "H", "W"],
            {},
            kernel_shape=[3, 2],
            strides=[2, 3],
            auto_pad="SAME_UPPER",
            count_include_pad=1,
        ),
        [(1, 3, 7, 8), (1, 3, 10, 9)],
    ),
    "lp_pool": (
        one_node("LpPool", ["N", 3, "L"], {}, kernel_shape=[3], strides=[2], pads=[1, 1]),
        [(1, 3, 7), (1, 3, 10)],
    ),
    "global_average_pool": (one_node("GlobalAveragePool", ["N", 3, "H", "W"], {}), [(1, 3, 7, 8), (2, 3, 10, 9)]),
    "global_max_pool": (one_node("GlobalMaxPool", ["N", 3, "H", "W"], {}), [(1, 3, 7, 8), (2, 3, 10, 9)]),
    # ResNet's downsampling block: a 3x3 stride-2 branch and a 1x1 stride-2 shortcut meet in an Add;
    # floordiv(H - 1, 2) + 1 is each branch's extent, so the build proves them one length.
    "residual_downsample": (
        graph_model(
            [
                helper.make_node("Conv", ["x", "w3"], ["a"], name="branch", strides=[2, 2], pads=[1, 1, 1, 1]),
                helper.make_node("Conv", ["x", "w1"], ["s"], name="shortcut", strides=[2, 2]),
                helper.make_node("Add", ["a", "s"], ["y"], name="join"),
            ],
            ["N", 2, "H", "W"],
            {"w3": weights(4, 2, 3, 3), "w1": weights(4, 2, 1, 1)},
        ),
        [(1, 2, 7, 8), (2, 2, 12, 5)],
    ),
}

BUILDS: dict[tuple[str, str], BuildResult] = {}


def built(name: str, backend: str) -> BuildResult:
    """One build per case and backend, shared by every extent the case runs at."""
    key = (name, backend)
    if key not in BUILDS:
        BUILDS[key] = build_for(CASES[name][0], backend=backend)
    return BUILDS[key]


@pytest.mark.xdist_group("symbolic_windows")
@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
@pytest.mark.parametrize("name", list(CASES))
def test_one_build_runs_at_every_extent(name: str, backend: str) -> None:
    model, shapes = CASES[name]
    result = built(name, backend)
    for shape in shapes:
        x = RNG.standard_normal(shape).astype(np.float32)
        got, want = run_built(result, {"x": x}), run_onnxruntime(model, {"x": x})
        assert got[0].shape == want[0].shape, shape
        assert_same(got, want, rtol=1e-4, atol=1e-5)


def test_output_extent_is_the_window_arithmetic() -> None:
    model = one_node("Conv", ["N", 3, "L"], {"w": weights(4, 3, 5)}, strides=[2])
    ir = str(build_for(model).ir)
    assert "Y_2: floordiv(L - 5, 2) + 1]" in ir
    assert "shape_poly.owe 5 <= L for \"Conv node 'n'\"" in ir


def test_input_too_short_for_the_window_is_a_shape_error() -> None:
    model = one_node("MaxPool", ["N", 3, "H", "W"], {}, kernel_shape=[4, 4], strides=[2, 2])
    result = build_for(model)
    with pytest.raises(result.module.ShapeError, match=r"4 <= H \(MaxPool node 'n'\); x axis 2 gives H = 3"):
        run_built(result, {"x": RNG.standard_normal((1, 3, 3, 6)).astype(np.float32)})


def test_same_extents_owe_only_a_non_empty_input() -> None:
    model = one_node("Conv", ["N", 3, "L"], {"w": weights(4, 3, 3)}, auto_pad="SAME_UPPER")
    ir = str(build_for(model).ir)
    assert [line.strip() for line in ir.splitlines() if "shape_poly.owe" in line] == [
        "shape_poly.owe 1 <= L for \"Conv node 'n'\""
    ]
    assert "L: L]>" in ir.split("kernel.return")[1]  # the output keeps x's axis: same length, same name


def test_branches_of_different_lengths_stop_the_build() -> None:
    model = graph_model(
        [
            helper.make_node("Conv", ["x", "w"], ["a"], name="valid3"),
            helper.make_node("Add", ["a", "x"], ["y"], name="join"),
        ],
        ["N", 2, "L"],
        {"w": weights(2, 2, 3)},
    )
    with pytest.raises(ShapeError, match=r"Add node 'join'.*L - 2.*L"):
        build_for(model)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("stride", [1, 3])
def test_dilated_same_pool_pads_for_the_undilated_window(op: str, mode: str, stride: int) -> None:
    """onnxruntime's pools pad for the undilated window, then fit the dilated one: fewer than
    ceil(S / stride) outputs (7 -> 5 at stride 1).  Loam gave ceil(S / stride), a wrong shape."""
    model = one_node(op, [1, 3, 7], {}, kernel_shape=[3], strides=[stride], dilations=[2], auto_pad=mode)
    x = RNG.standard_normal((1, 3, 7)).astype(np.float32)
    got, want = run_built(build_for(model), {"x": x}), run_onnxruntime(model, {"x": x})
    assert got[0].shape == want[0].shape
    assert_same(got, want, rtol=1e-5, atol=1e-6)
