"""The pieces that split a large computation for speed (`_by_rows`, `_matmul_rows`) give the numbers
the whole computation gives, and fall back to it where the split does not apply."""

from __future__ import annotations

import numpy as np
import pytest

from loam.runtime.kernels.elementwise import _erf
from loam.runtime.kernels.products import _matmul_rows
from loam.runtime.kernels.zip_compiled import _by_rows


def _gelu(a0: np.ndarray, a1: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A bias-GELU epilogue as the printer writes one: operand 0 arrives in `out`."""
    s = np.add(a1, a0, out=out)
    t = _erf(s / np.float32(1.4142135))
    t += np.float32(1)
    t *= s
    return np.multiply(t, np.float32(0.5), out=s)


RNG = np.random.default_rng(7)


@pytest.mark.parametrize(
    "bias_shape",
    [(1536,), (1, 1, 1536), (1, 1536), ()],
    ids=["vector", "kept-axes", "row", "scalar"],
)
def test_by_rows_equals_one_call(bias_shape: tuple[int, ...]) -> None:
    x = RNG.standard_normal((3, 200, 1536), dtype=np.float32)
    bias = RNG.standard_normal(bias_shape, dtype=np.float32)
    want = _gelu(x.copy(), bias, out=np.empty_like(x))
    buffer = x.copy()
    got = _by_rows(_gelu, buffer, buffer, bias)
    assert got is buffer
    np.testing.assert_array_equal(got, want)


def test_by_rows_takes_one_call_for_operands_it_cannot_cut() -> None:
    x = RNG.standard_normal((600, 1024), dtype=np.float32)
    column = RNG.standard_normal((600, 1), dtype=np.float32)  # repeats along the last axis: not a row
    strided = RNG.standard_normal((1024, 600), dtype=np.float32).T
    calls: list[int] = []

    def add3(a0: np.ndarray, a1: np.ndarray, a2: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        calls.append(len(a0))
        return np.add(np.add(a0, a1), a2, out=out)

    for other in (column, strided):
        calls.clear()
        got = _by_rows(add3, np.empty_like(x), x, other, x)
        np.testing.assert_array_equal(got, x + other + x)
        assert calls == [600]
    calls.clear()
    _by_rows(add3, np.empty_like(x), x, x, x)
    assert len(calls) == 10 and sum(calls) == 600  # 64 rows of 1024 a block


def test_matmul_rows_equals_numpy_matmul() -> None:
    a = RNG.standard_normal((4, 33, 64), dtype=np.float32)
    w = RNG.standard_normal((96, 64), dtype=np.float32)
    want = np.matmul(a, w.T)
    np.testing.assert_allclose(_matmul_rows(a, w.T), want, rtol=1e-5, atol=1e-5)
    out = np.empty((4, 33, 96), np.float32)
    assert _matmul_rows(a, w.T, out) is out
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    view = a.transpose(1, 0, 2)  # rows not laid out as one matrix: numpy's own loop
    np.testing.assert_array_equal(_matmul_rows(view, w.T), np.matmul(view, w.T))
    empty = np.zeros((0, 5, 64), np.float32)
    assert _matmul_rows(empty, w.T).shape == (0, 5, 96)


@pytest.mark.parametrize(("batch", "split"), [("N", True), (4, False), (1024, True)])
def test_the_printer_splits_long_expressions_only_where_they_can_be_large(batch: object, split: bool) -> None:
    from onnx import TensorProto, helper

    from loam.core.layout import LayoutRule
    from loam.driver.options import Options
    from loam.driver.pipeline import build
    from loam.testing import run_onnxruntime

    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"),
        helper.make_node("Tanh", ["p"], ["t"], name="act"),
        helper.make_node("Mul", ["t", "p"], ["m"], name="gate"),
        helper.make_node("Add", ["m", "p"], ["y"], name="skip"),
    ]
    w = helper.make_tensor("w", TensorProto.FLOAT, [256, 256], RNG.standard_normal(256 * 256).astype(np.float32) / 16)
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 256])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    layout = tuple(
        LayoutRule(n, a)
        for n, a in (("x", ("Batch", "Hidden")), ("w", ("Hidden", "Hidden2")), ("y", ("Batch", "Hidden2")))
    )
    result = build(model, options=Options(layout=layout))
    assert ("_by_rows(" in result.source) is split
    x = RNG.standard_normal((1024 if batch != 4 else 4, 256), dtype=np.float32)
    got = result.module.forward(result.module.Weights.embedded(), x)
    np.testing.assert_allclose(got, run_onnxruntime(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
