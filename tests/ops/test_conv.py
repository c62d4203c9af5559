"""Conv and ConvTranspose against onnxruntime, over 1 to 3 spatial axes, groups and every auto_pad.

Weights and biases are float initializers (the build treats them as weights); each case is a
one-node model.  Folding is checked on a Conv of Constants, refusals by their messages.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from loam.core.errors import ShapeError, UnsupportedError
from loam.runtime.kernels.conv import kernel_conv
from loam.testing import assert_same, build_for, run_loam, run_onnxruntime

ONNX_TYPES = {
    np.dtype(np.float32): onnx.TensorProto.FLOAT,
    np.dtype(np.float64): onnx.TensorProto.DOUBLE,
    np.dtype(np.float16): onnx.TensorProto.FLOAT16,
}
RNG = np.random.default_rng(7)


def one_node(
    op: str, x: np.ndarray, weights: Mapping[str, np.ndarray], opset: int = 17, **attrs: object
) -> onnx.ModelProto:
    """A model of one `op` node reading graph input `x`, then the initializers `weights` in order."""
    node = helper.make_node(op, ["x", *weights], ["y"], name="n", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", ONNX_TYPES[x.dtype], list(x.shape))],
        [helper.make_tensor_value_info("y", ONNX_TYPES[x.dtype], None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def check(model: onnx.ModelProto, x: np.ndarray, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    assert_same(run_loam(model, {"x": x}), run_onnxruntime(model, {"x": x}), rtol=rtol, atol=atol)


def data(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((1, 3, 7), (4, 3, 3), {}),
        ((2, 3, 7), (4, 3, 2), {"strides": [2], "pads": [1, 2], "dilations": [2]}),
        ((1, 2, 6, 5), (3, 2, 3, 3), {"pads": [1, 1, 1, 1]}),
        ((1, 4, 6, 5), (6, 2, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 0, 1]}),
        ((1, 4, 5, 5), (4, 1, 3, 3), {"group": 4, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ((1, 2, 6, 5), (3, 2, 2, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
        ((1, 2, 6, 5), (3, 2, 2, 3), {"auto_pad": "VALID", "strides": [2, 2], "kernel_shape": [2, 3]}),
        ((1, 2, 4, 5, 3), (2, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1]}),
        # Pointwise (1x1, no pads): computed as one product over the channels, strided or grouped.
        ((2, 4, 5, 6), (6, 4, 1, 1), {}),
        ((2, 4, 7, 6), (6, 4, 1, 1), {"strides": [2, 3]}),
        ((1, 4, 5, 5), (6, 2, 1, 1), {"group": 2, "strides": [2, 2]}),
        ((2, 3, 9), (5, 3, 1), {"strides": [4], "dilations": [3]}),
        ((1, 4, 5, 5), (6, 4, 1, 1), {"pads": [1, 0, 0, 1]}),
    ],
)
@pytest.mark.parametrize("bias", [False, True])
def test_conv(x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, object], bias: bool) -> None:
    weights = {"w": data(*w_shape)}
    if bias:
        weights["b"] = data(w_shape[0])
    check(one_node("Conv", data(*x_shape), weights, **attrs), data(*x_shape))


@st.composite
def conv_nodes(draw: st.DrawFn) -> tuple:
    """A 2-D Conv's shapes and attributes: kernels 1 to 7, strides 1 and 2, pads or an auto_pad,
    dilations, groups, odd extents, batches of 1 and 3 (each of kernel_conv's paths)."""
    group = draw(st.sampled_from([1, 1, 2]))
    kernel = [draw(st.sampled_from([1, 3, 5, 7])) for _ in range(2)]
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    # onnxruntime refuses dilations with a SAME auto_pad
    dilations = [draw(st.sampled_from([1, 1, 2])) if auto_pad[:4] != "SAME" else 1 for _ in range(2)]
    strides = [draw(st.sampled_from([1, 2])) for _ in range(2)]
    attrs: dict[str, object] = {"kernel_shape": kernel, "group": group, "strides": strides, "dilations": dilations}
    if auto_pad == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, 3)) for _ in range(4)]
    else:
        attrs["auto_pad"] = auto_pad
    spatial = [draw(st.integers(s, s + 9)) for s in ((k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True))]
    x_shape = (draw(st.sampled_from([1, 3])), group * draw(st.integers(1, 4)), *spatial)
    w_shape = (group * draw(st.integers(1, 4)), x_shape[1] // group, *kernel)
    return x_shape, w_shape, attrs


@settings(max_examples=25, deadline=None)
@given(conv_nodes(), st.booleans())
def test_conv_of_drawn_shapes(node: tuple, bias: bool) -> None:
    x_shape, w_shape, attrs = node
    weights = {"w": data(*w_shape)}
    if bias:
        weights["b"] = data(w_shape[0])
    check(one_node("Conv", data(*x_shape), weights, **attrs), data(*x_shape))


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_conv_element_types(dtype: type) -> None:
    """f64 computes natively, f16 in f32; onnxruntime's CPU Conv has no f64, so f32 is the reference."""
    x = data(1, 2, 5, 5, dtype=dtype)
    weights = {"w": data(3, 2, 3, 3, dtype=dtype), "b": data(3, dtype=dtype)}
    got = run_loam(one_node("Conv", x, weights, pads=[1, 1, 1, 1]), {"x": x})[0]
    wide = {k: v.astype(np.float32) for k, v in weights.items()}
    x32 = x.astype(np.float32)
    (want,) = run_onnxruntime(one_node("Conv", x32, wide, pads=[1, 1, 1, 1]), {"x": x32})
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2 if dtype == np.float16 else 1e-5, atol=1e-2)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((1, 3, 4), (3, 2, 3), {}),
        ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [3, 2], "output_padding": [1, 1], "pads": [1, 0, 0, 1]}),
        ((1, 4, 3, 4), (4, 2, 2, 3), {"group": 2, "dilations": [2, 1], "strides": [2, 2]}),
        ((1, 2, 3, 3), (2, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ((1, 2, 3, 3), (2, 2, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
        ((1, 2, 3, 3), (2, 2, 3, 3), {"output_shape": [10, 8], "strides": [3, 2]}),
        ((1, 2, 3, 3), (2, 2, 3, 3), {"output_shape": [6, 5], "strides": [2, 2]}),
        ((1, 2, 3, 3), (2, 2, 3, 3), {"output_shape": [6, 6], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
        ((1, 1, 2, 3, 2), (1, 2, 2, 2, 2), {"strides": [2, 1, 2]}),
    ],
)
def test_conv_transpose(x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, object]) -> None:
    weights = {"w": data(*w_shape), "b": data(w_shape[1] * int(attrs.get("group", 1)))}  # type: ignore[call-overload]
    x = data(*x_shape)
    check(one_node("ConvTranspose", x, weights, **attrs), x)


def test_conv_opset_1_reads_as_today() -> None:
    x = data(1, 2, 5, 5)
    check(one_node("Conv", x, {"w": data(3, 2, 3, 3)}, opset=1, strides=[2, 2]), x)


def test_conv_of_constants_folds() -> None:
    """A Conv whose operands the build knows becomes a constant, computed by the module's own kernel."""
    x, w = data(1, 1, 4, 4), data(2, 1, 3, 3)
    nodes = [
        helper.make_node("Constant", [], ["cx"], value=numpy_helper.from_array(x, "cx")),
        helper.make_node("Constant", [], ["cw"], value=numpy_helper.from_array(w, "cw")),
        helper.make_node("Conv", ["cx", "cw"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "a"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    result = build_for(model)
    assert "kernel.conv" not in {op.name for op in result.ir.walk()}
    a = data(1, 2, 4, 4)
    assert_same(run_loam(model, {"a": a}), run_onnxruntime(model, {"a": a}))
    expected = kernel_conv(x, w, strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), group=1)
    np.testing.assert_allclose(run_loam(model, {"a": a})[0], expected + a, rtol=1e-6)


def test_conv_refuses_negative_pads_and_bad_groups() -> None:
    x = data(1, 4, 5, 5)
    with pytest.raises(UnsupportedError, match="Conv node 'n': negative pads"):
        run_loam(one_node("Conv", x, {"w": data(2, 4, 3, 3)}, pads=[-1, 0, 0, 0]), {"x": x})
    with pytest.raises(ShapeError, match="Conv node 'n': group 3 does not divide"):
        run_loam(one_node("Conv", x, {"w": data(3, 1, 3, 3)}, group=3), {"x": x})
    with pytest.raises(ShapeError, match=r"Conv node 'n': kernel_shape \[2, 2\] disagrees"):
        run_loam(one_node("Conv", x, {"w": data(2, 4, 3, 3)}, kernel_shape=[2, 2]), {"x": x})


def test_conv_refuses_integer_input() -> None:
    x = np.ones((1, 1, 3, 3), np.float32)
    model = one_node("Conv", x, {"w": np.ones((1, 1, 1, 1), np.float32)})
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.INT32
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones((1, 1, 1, 1), np.int32), "w"))
    with pytest.raises(UnsupportedError, match="Conv node 'n': X has element type i32; Loam computes this operator in"):
        build_for(model)
