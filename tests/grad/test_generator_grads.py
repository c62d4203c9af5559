"""The clauses of TensorScatter, OneHot, EyeLike and Range (float start and delta): central finite differences
(`tests.grad.finite_differences`) and their closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st
from onnx import TensorProto, helper

from loam.core.errors import LoamError
from loam.testing import build_for, run_built
from tests.grad.finite_differences import TRAINING, Case, dims, fd_test


def _tensor_scatter(draw: st.DrawFn) -> Case:
    """TensorScatter (opset 24) into a [B, L, D] cache along axis 1, linear or circular, each row's write
    index drawn (absent: 0)."""
    n, length, d = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(dims)
    steps = draw(st.integers(1, length))
    mode = draw(st.sampled_from(["linear", "circular"]))
    high = length - steps if mode == "linear" else length + 2
    rows = draw(st.lists(st.integers(0, high), min_size=n, max_size=n))
    consts = {"write_indices": np.array(rows, np.int64)} if draw(st.booleans()) else {}
    shapes = {"past": (n, length, d), "update": (n, steps, d)}
    return Case("TensorScatter", shapes, [(n, length, d)], {"axis": 1, "mode": mode}, consts, opset=24)


def _one_hot(draw: st.DrawFn) -> Case:
    """OneHot: the off and on values differentiated, indices (negative and outside ones too) and the axis drawn."""
    depth = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(dims, max_size=2)))
    indices = np.array(draw(st.lists(st.integers(-depth - 1, depth), min_size=int(np.prod(shape)),
                                     max_size=int(np.prod(shape)))), np.int64).reshape(shape)  # fmt: skip
    axis = draw(st.integers(-len(shape) - 1, len(shape)))
    out = list(shape)
    out.insert(axis % (len(shape) + 1), depth)
    consts = {"indices": indices, "depth": np.array(depth, np.int64)}
    return Case("OneHot", {"values": (2,)}, [tuple(out)], {"axis": axis}, consts, order=("indices", "depth", "values"))


test_tensor_scatter = fd_test(_tensor_scatter, 12)
test_one_hot = fd_test(_one_hot, 8)


def test_range_of_float_start_and_delta_the_run_gives() -> None:
    """Range(start, limit, delta) over float scalars: d start = sum(g), d delta = sum(i g_i), limit none."""
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["y"], name="op"),
             helper.make_node("Sin", ["y"], ["s"]), helper.make_node("ReduceSum", ["s"], ["loss"], keepdims=0),
             helper.make_node("Gradient", ["start", "delta"], ["d_start", "d_delta"], domain=TRAINING,
                              xs=["start", "delta"], y="loss")]  # fmt: skip
    names = ("start", "limit", "delta")
    inputs = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, []) for n in names]
    outputs = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, []) for n in ("loss", "d_start", "d_delta")]
    built = build_for(_symbolic_model(nodes, inputs, outputs))
    feeds = {"start": np.array(0.3), "limit": np.array(2.9), "delta": np.array(0.45)}
    _, d_start, d_delta = run_built(built, feeds)
    y = 0.3 + 0.45 * np.arange(6)
    np.testing.assert_allclose(d_start, np.cos(y).sum(), rtol=1e-12)
    np.testing.assert_allclose(d_delta, (np.arange(6) * np.cos(y)).sum(), rtol=1e-12)


def _symbolic_model(nodes: list, inputs: list, outputs: list) -> object:
    graph = helper.make_graph(nodes, "symbolic", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24), helper.make_opsetid(TRAINING, 1)])


def test_eye_like_sends_zeros_to_its_operand() -> None:
    """EyeLike of an operand of a symbolic extent (a kernel, not a folded constant) reads no value of it:
    loss = sum(x * EyeLike(x)) gives d x = EyeLike(x) (the product's share) plus zeros (EyeLike's)."""
    nodes = [helper.make_node("EyeLike", ["x"], ["e"], name="op", k=1), helper.make_node("Mul", ["x", "e"], ["y"]),
             helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0),
             helper.make_node("Gradient", ["x"], ["d_x"], domain=TRAINING, xs=["x"], y="loss")]  # fmt: skip
    x_info = helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["N", 3])
    outputs = [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, []),
               helper.make_tensor_value_info("d_x", TensorProto.DOUBLE, ["N", 3])]  # fmt: skip
    built = build_for(_symbolic_model(nodes, [x_info], outputs))
    assert "kernel.eye_like" in built.report
    x = np.random.default_rng(0).standard_normal((4, 3))
    _, d_x = run_built(built, {"x": x})
    np.testing.assert_array_equal(d_x, np.eye(4, 3, k=1))


def test_a_circular_scatter_not_known_to_fit_its_cache_is_refused() -> None:
    """With the cache's length a symbol, two updates might land on one place (the later kept), which would
    need the earlier's share zeroed: refused rather than computed wrong."""
    nodes = [helper.make_node("TensorScatter", ["past", "update"], ["y"], name="op", axis=1, mode="circular"),
             helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0),
             helper.make_node("Gradient", ["update"], ["d_u"], domain=TRAINING, xs=["update"], y="loss")]  # fmt: skip
    inputs = [helper.make_tensor_value_info("past", TensorProto.DOUBLE, [1, "L", 1]),
              helper.make_tensor_value_info("update", TensorProto.DOUBLE, [1, 2, 1])]  # fmt: skip
    outputs = [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, []),
               helper.make_tensor_value_info("d_u", TensorProto.DOUBLE, [1, 2, 1])]  # fmt: skip
    message = r"kernel\.tensor_scatter 'op': its grad clause needs the 2 updates known to fit the axis's L places"
    with pytest.raises(LoamError, match=message):
        build_for(_symbolic_model(nodes, inputs, outputs))
