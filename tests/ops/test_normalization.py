"""The normalisations against onnxruntime: BatchNormalization, InstanceNormalization,
LayerNormalization, GroupNormalization and LRN; and MatMul/Gemm element types.

Parameters (scale, bias, mean, var) are float initializers, so the build treats them as weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from loam.core.errors import ModelError, ShapeError, UnsupportedError
from loam.testing import assert_same, build_for, run_built, run_loam, run_onnxruntime

NP_TO_ONNX = {
    np.dtype(np.float32): onnx.TensorProto.FLOAT,
    np.dtype(np.float64): onnx.TensorProto.DOUBLE,
    np.dtype(np.float16): onnx.TensorProto.FLOAT16,
    np.dtype(ml_dtypes.bfloat16): onnx.TensorProto.BFLOAT16,
    np.dtype(np.int32): onnx.TensorProto.INT32,
    np.dtype(np.int64): onnx.TensorProto.INT64,
}


def model_of(
    op: str,
    inputs: Mapping[str, np.ndarray],
    weights: Mapping[str, np.ndarray],
    opset: int,
    outputs: Sequence[str] = ("y",),
    **attrs: object,
) -> onnx.ModelProto:
    """One `op` node over the graph inputs then the initializers, in order."""
    node = helper.make_node(op, [*inputs, *weights], list(outputs), **attrs)
    first = next(iter(inputs.values()))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, NP_TO_ONNX[v.dtype], list(v.shape)) for k, v in inputs.items()],
        [
            helper.make_tensor_value_info(o, NP_TO_ONNX[first.dtype] if i == 0 else onnx.TensorProto.FLOAT, None)
            for i, o in enumerate(outputs)
        ],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def check(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    rtol: float = 1e-5,
    atol: float = 1e-5,
    oracle: str = "onnxruntime",
) -> None:
    """Loam against onnxruntime, or ONNX's reference evaluator where onnxruntime has no kernel."""
    if oracle == "onnxruntime":
        want = run_onnxruntime(model, feeds)
    else:
        want = list(ReferenceEvaluator(model).run(None, dict(feeds)))
    assert_same(run_loam(model, feeds), want, rtol=rtol, atol=atol)


def rand(shape: Sequence[int], seed: int, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4), (1, 3, 2, 2)])
@pytest.mark.parametrize("opset", [15, 9, 7, 6])
def test_batch_norm(shape: tuple[int, ...], opset: int) -> None:
    c = shape[1]
    weights = {
        "scale": rand((c,), 1),
        "b": rand((c,), 2),
        "mean": rand((c,), 3),
        "var": np.abs(rand((c,), 4)) + 0.5,
    }
    attrs: dict[str, object] = {"epsilon": 1e-3}
    if opset < 7:
        attrs["is_test"] = 1
    x = rand(shape, 0)
    # onnxruntime has no kernel for opset 6; ONNX's reference evaluator is the oracle there.
    oracle = "reference" if opset < 7 else "onnxruntime"
    check(model_of("BatchNormalization", {"x": x}, weights, opset, **attrs), {"x": x}, oracle=oracle)


@pytest.mark.parametrize(
    ("x_type", "scale_type", "mean_type", "opset"),
    [
        (np.float16, np.float32, np.float32, 15),
        (np.float32, np.float16, np.float16, 15),
        (np.float16, np.float16, np.float32, 15),
        (np.float16, np.float16, np.float32, 14),
        (np.float64, np.float32, np.float32, 15),
    ],
)
def test_batch_norm_mixed_types(x_type: type, scale_type: type, mean_type: type, opset: int) -> None:
    """From opset 14 mean/var (U, T2) and from 15 scale/B (T1) may differ from X's type: computed in
    f32 (f64 where an operand is f64), the result in X's type."""
    c = 3
    x = rand((2, c, 4), 0, x_type)
    weights = {
        "scale": rand((c,), 1, scale_type),
        "b": rand((c,), 2, scale_type),
        "mean": rand((c,), 3, mean_type),
        "var": np.abs(rand((c,), 4, mean_type)) + mean_type(0.5),
    }
    model = model_of("BatchNormalization", {"x": x}, weights, opset, epsilon=1e-3)
    # onnxruntime has no kernel for f64 X with f32 parameters: the reference evaluator checks it.
    oracle = "reference" if x_type is np.float64 else "onnxruntime"
    half = np.float16 in (x_type, scale_type, mean_type)
    check(model, {"x": x}, rtol=1e-3 if half else 1e-5, atol=1e-3 if half else 1e-5, oracle=oracle)
    (y,) = run_loam(model, {"x": x})
    assert y.dtype == x_type


def test_batch_norm_mixed_types_need_their_opset() -> None:
    c = 3
    x = rand((2, c), 0, np.float16)
    weights = {k: np.ones(c, np.float32) for k in ("scale", "b", "mean", "var")}
    with pytest.raises(ShapeError, match="scale has element type f32 and X f16; ONNX needs one at opset 14"):
        run_loam(model_of("BatchNormalization", {"x": x}, weights, 14), {"x": x})


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4), (3, 3, 2, 5)])
@pytest.mark.parametrize("opset", [15, 14])
def test_batch_norm_training_mode(shape: tuple[int, ...], opset: int) -> None:
    """training_mode 1: Y from the batch's own statistics, the running ones moved by momentum."""
    c = shape[1]
    weights = {"scale": rand((c,), 1), "b": rand((c,), 2), "mean": rand((c,), 3), "var": np.abs(rand((c,), 4)) + 0.5}
    x = rand(shape, 0) * 3 + 1
    outputs = ("y", "m", "v")
    model = model_of(
        "BatchNormalization", {"x": x}, weights, opset, outputs=outputs, training_mode=1, momentum=0.7, epsilon=1e-3
    )
    check(model, {"x": x})
    check(model, {"x": x}, oracle="reference")


def test_batch_norm_training_mode_f16_and_run_time_statistics() -> None:
    c = 3
    feeds = {
        "x": rand((4, c, 5), 0, np.float16),
        "scale": rand((c,), 1, np.float16),
        "b": rand((c,), 2, np.float16),
        "mean": rand((c,), 3, np.float32),
        "var": np.abs(rand((c,), 4, np.float32)) + 0.5,
    }
    model = model_of("BatchNormalization", feeds, {}, 15, outputs=("y", "m", "v"), training_mode=1)
    y, m, v = run_loam(model, feeds)
    # The running statistics take mean's and var's type (T2 at opset 15); ONNX's reference evaluator
    # casts them to X's, so its numbers are compared in f32.
    assert (y.dtype, m.dtype, v.dtype) == (np.float16, np.float32, np.float32)
    want = [
        np.asarray(w, t)
        for w, t in zip(ReferenceEvaluator(model).run(None, feeds), (np.float16, np.float32, np.float32), strict=True)
    ]
    assert_same([y, m, v], want, rtol=1e-3, atol=1e-3)


def test_batch_norm_training_mode_folds_known_inputs() -> None:
    """Every input a weight: stage 0 folds all three outputs with the kernel's numbers."""
    c = 2
    weights = {
        "x": rand((3, c, 2), 0),
        "scale": rand((c,), 1),
        "b": rand((c,), 2),
        "mean": rand((c,), 3),
        "var": np.abs(rand((c,), 4)) + 0.5,
    }
    node = helper.make_node("BatchNormalization", list(weights), ["y", "m", "v"], training_mode=1)
    graph = helper.make_graph(
        [node],
        "g",
        [],
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in ("y", "m", "v")],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    want = ReferenceEvaluator(model).run(None, {})
    assert_same(run_loam(model, {}), list(want), rtol=1e-5, atol=1e-5)


def test_batch_norm_refuses_training_before_opset_14() -> None:
    c = 3
    weights = {k: np.ones(c, np.float32) for k in ("scale", "b", "mean", "var")}
    x = rand((2, c), 0)
    model = model_of("BatchNormalization", {"x": x}, weights, 9, outputs=("y", "m", "v"))
    with pytest.raises(UnsupportedError, match=r"BatchNormalization node 'y': more than one output at opset 9"):
        run_loam(model, {"x": x})
    with pytest.raises(UnsupportedError, match="is_test 0 at opset 6 means training"):
        run_loam(model_of("BatchNormalization", {"x": x}, weights, 6), {"x": x})
    model = model_of("BatchNormalization", {"x": x}, weights, 15, outputs=("y", "m", "v"))
    with pytest.raises(ShapeError, match="running_mean and running_var are outputs of training_mode 1 only"):
        run_loam(model, {"x": x})
    model = model_of("BatchNormalization", {"x": x}, weights, 15, training_mode=1)
    with pytest.raises(ShapeError, match=r"training_mode 1 gives three outputs .*; the node names 1"):
        run_loam(model, {"x": x})


@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 2, 3, 3)])
def test_instance_norm(shape: tuple[int, ...]) -> None:
    c = shape[1]
    x = rand(shape, 0)
    weights = {"scale": rand((c,), 1), "b": rand((c,), 2)}
    check(model_of("InstanceNormalization", {"x": x}, weights, 6, epsilon=1e-4), {"x": x})


@pytest.mark.parametrize(("axis", "outputs", "bias"), [(-1, 1, True), (1, 3, True), (0, 2, False), (2, 3, False)])
def test_layer_norm(axis: int, outputs: int, bias: bool) -> None:
    x = rand((2, 3, 4), 0)
    axis_ = axis % 3
    weights = {"scale": rand(x.shape[axis_:], 1)}
    if bias:
        weights["b"] = rand(x.shape[axis_:], 2)
    names = ("y", "mean", "inv")[:outputs]
    check(model_of("LayerNormalization", {"x": x}, weights, 17, outputs=names, axis=axis), {"x": x})


def test_layer_norm_half() -> None:
    x = rand((2, 8), 0, np.float16)
    weights = {"scale": rand((8,), 1, np.float16), "b": rand((8,), 2, np.float16)}
    check(model_of("LayerNormalization", {"x": x}, weights, 17), {"x": x}, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(("opset", "groups"), [(21, 2), (21, 4), (18, 2), (18, 1)])
def test_group_norm(opset: int, groups: int) -> None:
    x = rand((2, 4, 3, 2), 0)
    per = groups if opset < 21 else 4
    weights = {"scale": rand((per,), 1), "bias": rand((per,), 2)}
    model = model_of("GroupNormalization", {"x": x}, weights, opset, num_groups=groups, epsilon=1e-3)
    if opset < 21:
        # onnxruntime runs opset 18's GroupNormalization as its function body; compare with the
        # per-channel reading of the same scale and bias at opset 21.
        expanded = {k: np.repeat(v, 4 // groups) for k, v in weights.items()}
        oracle = model_of("GroupNormalization", {"x": x}, expanded, 21, num_groups=groups, epsilon=1e-3)
        want = ReferenceEvaluator(oracle).run(None, {"x": x})
        assert_same(run_loam(model, {"x": x}), want, rtol=1e-5, atol=1e-5)
    else:
        check(model, {"x": x}, oracle="reference")


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_lrn(size: int) -> None:
    x = rand((2, 5, 3, 3), 0)
    model = model_of("LRN", {"x": x}, {}, 13, size=size, alpha=1e-3, beta=0.6, bias=2.0)
    if size % 2:
        check(model, {"x": x})
        return
    # onnxruntime takes odd sizes only (and ONNX's reference evaluator sums the wrong axis range), so
    # even sizes are checked against the specification's formula, written channel by channel.
    c = x.shape[1]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    squares = np.stack([np.sum(x[:, max(0, i - lo) : min(c - 1, i + hi) + 1] ** 2, axis=1) for i in range(c)], axis=1)
    want = x / (2.0 + 1e-3 / size * squares) ** 0.6
    assert_same(run_loam(model, {"x": x}), [want.astype(np.float32)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.float16])
@pytest.mark.parametrize(("a_shape", "b_shape"), [((3,), (3, 2)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4,))])
def test_matmul_types(dtype: type, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, a_shape).astype(dtype)
    b = rng.integers(-4, 5, b_shape).astype(dtype)
    check(model_of("MatMul", {"a": a, "b": b}, {}, 13), {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64])
def test_gemm_types(dtype: type) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, (3, 4)).astype(dtype)
    b = rng.integers(-4, 5, (5, 4)).astype(dtype)
    c = rng.integers(-4, 5, (5,)).astype(dtype)
    # onnxruntime has no integer Gemm kernel: the reference evaluator checks those.
    oracle = "reference" if np.dtype(dtype).kind == "i" else "onnxruntime"
    check(model_of("Gemm", {"a": a, "b": b, "c": c}, {}, 13, transB=1), {"a": a, "b": b, "c": c}, oracle=oracle)


def test_gemm_integer_scaling_is_refused() -> None:
    a = np.ones((2, 2), np.int32)
    with pytest.raises(UnsupportedError, match=r"integer Gemm with alpha 2\.0"):
        run_loam(model_of("Gemm", {"a": a, "b": a}, {}, 13, alpha=2.0), {"a": a, "b": a})


def test_matmul_bf16_is_narrowed_once() -> None:
    """numpy multiplies bfloat16 into f32; the kernel narrows the product back to bf16."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((3, 4)).astype(ml_dtypes.bfloat16)
    (y,) = run_loam(model_of("MatMul", {"a": a, "b": b}, {}, 13), {"a": a, "b": b})
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert y.dtype == want.dtype
    np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


def _gemm_model(
    opset: int, shapes: Sequence[tuple[int, ...]], dtype: type = np.float32, **attrs: object
) -> onnx.ModelProto:
    """A Gemm over graph inputs a, b[, c] (built without the checker, which refuses old broadcasts)."""
    names = "abc"[: len(shapes)]
    node = helper.make_node("Gemm", list(names), ["y"], **attrs)
    elem = NP_TO_ONNX[np.dtype(dtype)]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, elem, list(s)) for n, s in zip(names, shapes, strict=True)],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3
    return model


@pytest.mark.parametrize("c_shape", [(4,), (1, 4), (2, 1), (2, 4), ()])
@pytest.mark.parametrize("opset", [6, 1])
def test_gemm_broadcast_attribute(c_shape: tuple[int, ...], opset: int) -> None:
    """Opsets 1-6: broadcast 1 stretches C to [M, N] as opset 7 does (onnxruntime has no kernel
    before 7, so the same node at opset 7 is the oracle)."""
    shapes = [(2, 3), (3, 4), c_shape]
    feeds = {n: rand(s, i) for i, (n, s) in enumerate(zip("abc", shapes, strict=True))}
    old = _gemm_model(opset, shapes, broadcast=1, alpha=0.5, beta=2.0)
    new = _gemm_model(7, shapes, alpha=0.5, beta=2.0)
    assert_same(run_loam(old, feeds), run_onnxruntime(new, feeds))


def test_gemm_without_broadcast_needs_c_of_m_by_n() -> None:
    shapes = [(2, 3), (3, 4), (2, 4)]
    feeds = {n: rand(s, i) for i, (n, s) in enumerate(zip("abc", shapes, strict=True))}
    assert_same(run_loam(_gemm_model(6, shapes), feeds), run_onnxruntime(_gemm_model(7, shapes), feeds))
    feeds["c"] = rand((4,), 2)
    with pytest.raises(ShapeError, match=r"Gemm node 'y': C of extents \[4\] must be \[2, 4\]: broadcast is 0"):
        run_loam(_gemm_model(6, [(2, 3), (3, 4), (4,)]), feeds)
    with pytest.raises(ModelError, match="attribute 'broadcast' is not defined for Gemm at opset 7"):
        run_loam(_gemm_model(7, shapes, broadcast=1), feeds)


@pytest.mark.parametrize(
    ("op", "shapes", "attrs"),
    [
        ("MatMul", [(8, 256), (256, 16)], {}),
        ("MatMul", [(3, 8, 64), (64, 5)], {}),
        ("Gemm", [(8, 256), (256, 16), (16,)], {"alpha": 0.5, "beta": 2.0}),
        ("Gemm", [(8, 256), (256, 16)], {}),
    ],
)
def test_half_products_in_f32(op: str, shapes: list[tuple[int, ...]], attrs: dict[str, object]) -> None:
    """f16 products are summed in f32 and narrowed once (Gemm: after alpha and beta * C), which
    matches onnxruntime to the f16 ulp on these long contractions (summed in f16, they would stray
    by many); within that ulp the f32 sum's order decides, which is the CPU's BLAS's."""
    names = "abc"[: len(shapes)]
    feeds = {n: (rand(s, i) * 2).astype(np.float16) for i, (n, s) in enumerate(zip(names, shapes, strict=True))}
    model = model_of(op, feeds, {}, 13, **attrs)
    (y,) = run_loam(model, feeds)
    (want,) = run_onnxruntime(model, feeds)
    assert y.dtype == np.float16
    np.testing.assert_array_max_ulp(y, want, maxulp=1)


# -- Robustness regressions (found by tests/test_robustness.py's mutation sweep) ---------------------------


def test_batch_norm_training_mode_other_than_0_or_1_is_refused() -> None:
    x = np.ones((2, 3, 4), np.float32)
    params = {k: np.ones(3, np.float32) for k in ("scale", "b", "mean", "var")}
    node = helper.make_node("BatchNormalization", ["x", *params], ["y"], name="n", training_mode=2)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in params.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    with pytest.raises(ShapeError, match="attribute 'training_mode' must be one of 0, 1, got 2"):
        run_loam(model, {"x": x})


@pytest.mark.parametrize(
    ("dtype", "elem"), [(np.float32, onnx.TensorProto.FLOAT), (np.float16, onnx.TensorProto.FLOAT16)]
)
def test_batch_norm_of_constants_folds_to_what_its_kernel_computes(dtype: type, elem: int) -> None:
    # Every operand a Constant: stage 0 folds the node with the Expr the kernel would run; y = folded + x.
    values = {
        "X": rand((2, 3, 4), 1, dtype),
        "scale": rand((3,), 2, dtype),
        "B": rand((3,), 3, dtype),
        "mean": rand((3,), 4, dtype),
        "var": np.abs(rand((3,), 5, dtype)) + dtype(0.5),
    }
    nodes = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(v, n)) for n, v in values.items()]
    nodes += [
        helper.make_node("BatchNormalization", list(values), ["bn"], name="bn", epsilon=1e-3),
        helper.make_node("Add", ["bn", "x"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", elem, [2, 3, 4])],
        [helper.make_tensor_value_info("y", elem, [2, 3, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    x = rand((2, 3, 4), 6, dtype)
    result = build_for(model)
    assert "bn    kernel.constant\n" in result.report  # folded: a literal, no kernel computes it
    rtol = 1e-5 if dtype is np.float32 else 2e-3
    assert_same(run_built(result, {"x": x}), run_onnxruntime(model, {"x": x}), rtol=rtol, atol=rtol)
