"""Casts into the narrow types against their oracles, over float32 bit patterns of every exponent
and sign.

float8 is checked against ONNX's reference evaluator bit for bit, and with `saturate` against
onnxruntime too (through a cast back to float32: its Python API returns only e4m3fn).  Without
`saturate` onnxruntime departs from ONNX's table for e4m3fn and e5m2: a value whose rounding
exceeds the largest finite one, such as 480.8 into e4m3fn, becomes that largest value (448) where
ONNX says NaN (e5m2: inf); Loam follows ONNX.  float8e8m0 (each `round_mode`) is checked against
ONNX's reference, as onnxruntime cannot return it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.numpy_helper import to_float8e8m0
from onnx.reference import ReferenceEvaluator

from loam.testing import build_for, run_built, run_onnxruntime


def _bit_patterns() -> np.ndarray:
    """float32 values for every top-16-bit pattern (sign, exponent, 7 fraction bits: NaN, ±inf,
    subnormals, every binade), the low bits drawn, plus the exact ties of a float8 rounding."""
    rng = np.random.default_rng(7)
    top = np.arange(1 << 16, dtype=np.uint32) << 16
    low = rng.integers(0, 1 << 16, size=top.shape, dtype=np.uint32)
    ties = np.arange(1 << 16, dtype=np.uint32) << 16  # low bits zero: halfway points of coarse types
    return np.concatenate([top | low, ties]).view(np.float32)


def _cast_model(to: int, saturate: int, round_mode: str | None = None) -> onnx.ModelProto:
    attrs: dict[str, object] = {"to": to, "saturate": saturate}
    if round_mode is not None:
        attrs["round_mode"] = round_mode
    node = helper.make_node("Cast", ["x"], ["y"], name="c", **attrs)
    graph = helper.make_graph(
        [node],
        "cast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("y", to, ["N"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24 if round_mode else 21)])
    model.ir_version = 10
    return model


FLOAT8 = {
    TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
}


def _same_float8(got: np.ndarray, want: np.ndarray) -> None:
    """The same values bit for bit where `want` is not NaN, and NaN where it is (its bits may differ)."""
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(
        got.astype(np.float32).view(np.uint32)[~nan], want.astype(np.float32).view(np.uint32)[~nan]
    )


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("to", list(FLOAT8), ids=lambda t: TensorProto.DataType.Name(t))
def test_float8_casts_equal_onnx_reference_bit_for_bit(to: int, saturate: int) -> None:
    model = _cast_model(to, saturate)
    x = _bit_patterns()
    (got,) = run_built(build_for(model), {"x": x})
    assert got.dtype == FLOAT8[to]
    _same_float8(got, ReferenceEvaluator(model).run(None, {"x": x})[0])
    if saturate:  # nothing but NaN becomes NaN: every other value lands within the type
        assert not np.isnan(got.astype(np.float32)[~np.isnan(x)]).any()


@pytest.mark.parametrize("to", list(FLOAT8), ids=lambda t: TensorProto.DataType.Name(t))
def test_saturating_float8_casts_equal_onnxruntime(to: int) -> None:
    model = _cast_model(to, 1)
    x = _bit_patterns()
    (got,) = run_built(build_for(model), {"x": x})
    model.graph.node.append(helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N"]))
    (want,) = run_onnxruntime(model, {"x": x})  # exact: every float8 value is a float32
    _same_float8(got, want)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
def test_float8e8m0_casts_equal_onnx_reference(round_mode: str, saturate: int) -> None:
    model = _cast_model(TensorProto.FLOAT8E8M0, saturate, round_mode)
    x = np.abs(_bit_patterns())  # ONNX leaves a negative value's power of two unspecified
    (got,) = run_built(build_for(model), {"x": x})
    want = to_float8e8m0(x, bool(saturate), round_mode)
    assert got.dtype == ml_dtypes.float8_e8m0fnu
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
