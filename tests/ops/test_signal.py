"""DFT and STFT (`loam/ops/signal.py`) beyond the conformance cases: a batch known only at run time,
halves, folding, and the build's refusals, each naming the node and what it refuses.

The conformance suites hold the numbers (ONNX's node cases; the operators suite against onnxruntime
over real and complex input, inverse, one-sided, dft_length, axes, windows and frame lengths).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from loam.core.errors import ShapeError, UnsupportedError
from loam.testing import build_for, run_built, run_onnxruntime

RNG = np.random.default_rng(17)


def _model(
    op: str,
    x: tuple[Any, ...],
    operands: dict[str, np.ndarray | None],
    *,
    opset: int = 20,
    elem: int = TensorProto.FLOAT,
    runtime: tuple[str, ...] = (),
    **attrs: int,
) -> onnx.ModelProto:
    """One `op` node over input `x` (of `x`'s extents) and `operands` in order: an array is an
    initializer (a graph input when named in `runtime`), None an omitted input."""
    names, inputs, inits = ["x"], [helper.make_tensor_value_info("x", elem, list(x))], []
    for name, value in operands.items():
        if value is None:
            names.append("")
            continue
        names.append(name)
        if name in runtime:
            elem_of = helper.np_dtype_to_tensor_dtype(value.dtype)
            inputs.append(helper.make_tensor_value_info(name, elem_of, value.shape))
        else:
            inits.append(numpy_helper.from_array(value, name))
    node = helper.make_node(op, names, ["y"], name="node0", **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", elem, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def scalar(value: int, dtype: type = np.int64) -> np.ndarray:
    return np.array(value, dtype)


def test_a_dft_over_a_batch_known_only_at_run_time_matches_onnxruntime() -> None:
    model = _model("DFT", ("N", 12, 2), {"n": scalar(8), "axis": scalar(1)}, opset=20, inverse=1)
    built = build_for(model)
    for batch in (1, 3):
        feeds = {"x": RNG.standard_normal((batch, 12, 2)).astype(np.float32)}
        got, want = run_built(built, feeds), run_onnxruntime(model, feeds)
        assert got[0].shape == want[0].shape == (batch, 8, 2)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=2e-6)


def test_a_half_dft_is_computed_in_f32_and_narrowed() -> None:
    model = _model("DFT", (2, 10, 1), {}, opset=17, elem=TensorProto.FLOAT16, onesided=1)
    x = RNG.standard_normal((2, 10, 1)).astype(np.float16)
    got = run_built(build_for(model), {"x": x})[0]
    spectrum = np.fft.rfft(x[..., 0].astype(np.float32), axis=1)
    assert got.dtype == np.float16 and got.shape == (2, 6, 2)
    np.testing.assert_allclose(got, np.stack([spectrum.real, spectrum.imag], -1).astype(np.float16), rtol=1e-3)


def test_a_stft_of_a_known_signal_is_folded_into_a_constant() -> None:
    signal = RNG.standard_normal((1, 32, 1)).astype(np.float32)
    constant = helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(signal, "s"))
    node = helper.make_node("STFT", ["s", "step", "", "len"], ["y"], name="node0", onesided=0)
    inits = [numpy_helper.from_array(scalar(4), "step"), numpy_helper.from_array(scalar(8), "len")]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([constant, node], "g", [], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built = build_for(model)
    assert "kernel.stft" not in str(built.ir)
    frames = np.stack([signal[0, 4 * f : 4 * f + 8, 0] for f in range(7)])
    spectrum = np.fft.fft(frames, axis=-1)
    np.testing.assert_allclose(run_built(built, {})[0][0], np.stack([spectrum.real, spectrum.imag], -1), atol=1e-5)


@pytest.mark.parametrize(
    ("op", "operands", "runtime", "opset", "what"),
    [
        ("DFT", {"n": scalar(8)}, ("n",), 20, "the dft_length input must be known at build time"),
        ("DFT", {"n": None, "axis": scalar(1)}, ("axis",), 20, "the axis input must be known at build time"),
    ],
)  # STFT's frame_step and frame_length may come from the run: tests/ops/test_run_time_extents.py
def test_an_extent_operand_known_only_at_run_time_is_refused_by_name(
    op: str, operands: dict[str, np.ndarray | None], runtime: tuple[str, ...], opset: int, what: str
) -> None:
    with pytest.raises(UnsupportedError, match=f"{op} node 'node0': {what}"):
        build_for(_model(op, (2, 16, 1), operands, opset=opset, runtime=runtime))


def test_an_inverse_one_sided_dft_onnxruntime_computes_otherwise_is_refused_naming_dft_length() -> None:
    model = _model("DFT", (2, 8, 2), {"n": scalar(8)}, inverse=1, onesided=1)
    with pytest.raises(UnsupportedError, match=r"DFT node 'node0': dft_length 8 reads 5 bins .* but axis 1 holds 8"):
        build_for(model)


def test_a_stft_without_window_or_frame_length_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="STFT node 'node0': neither a window nor frame_length"):
        build_for(_model("STFT", (1, 16, 1), {"step": scalar(4)}, opset=17))


@pytest.mark.parametrize(
    ("x", "operands", "attrs", "message"),
    [
        ((2, 8, 2), {}, {"onesided": 1}, "a one-sided DFT takes a real input"),
        ((2, 8, 1), {}, {"onesided": 1, "inverse": 1}, "a one-sided inverse DFT \\(IRFFT\\) takes a complex input"),
        ((2, 8, 3), {}, {}, "the input's trailing extent is 3"),
        ((2, 8, 1), {"n": None, "axis": scalar(2)}, {}, "axis 2 is out of range for rank 3"),
        ((2, 8, 1), {"n": scalar(0)}, {}, "dft_length is 0"),
    ],
)
def test_a_malformed_dft_stops_the_build(
    x: tuple[int, ...], operands: dict[str, np.ndarray | None], attrs: dict[str, int], message: str
) -> None:
    with pytest.raises(ShapeError, match=f"DFT node 'node0': {message}"):
        build_for(_model("DFT", x, operands, **attrs))


def test_a_window_that_disagrees_with_frame_length_stops_the_build() -> None:
    operands = {"step": scalar(4), "w": np.ones(8, np.float32), "len": scalar(6)}
    with pytest.raises(ShapeError, match="the window holds 8 values but frame_length is 6"):
        build_for(_model("STFT", (1, 16, 1), operands, opset=17))
