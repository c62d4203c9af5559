"""The grad clauses of the Fourier transforms (`loam.grad.signal`) equal central finite differences in
float64, at hypothesis-drawn shapes and attributes; the WGSL module computes the numpy module's gradients;
and an STFT whose frame_step only the run gives is refused, naming the op.

DFT is linear in its input and STFT bilinear in signal and window, so finite differences hold at any point.
dft_length, axis, frame_step and frame_length are int64 initializers (values the build knows).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from loam.core.errors import UnsupportedError
from loam.testing import build_for
from tests.grad.finite_differences import Case, compare_on_wgsl, fd_test, feeds_for, model_of


def _dft(draw: st.DrawFn) -> Case:
    """DFT of a real or complex input along a drawn axis of one or two signal axes: forward, inverse,
    onesided (RFFT, IRFFT), dft_length absent, cropping or padding; the axis an attribute (opset 17) or an
    input (opset 20, negative or not)."""
    signal = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 2)))]
    axis = draw(st.integers(0, len(signal) - 1))
    signal[axis] = draw(st.integers(1, 6))
    n = signal[axis]
    inverse, onesided = draw(st.booleans()), draw(st.booleans())
    irfft = inverse and onesided
    parts = 2 if irfft else 1 if onesided else draw(st.sampled_from([1, 2]))
    if irfft:
        length: int | None = draw(st.sampled_from([m for m in (2 * (n - 1), 2 * n - 1) if m >= 1]))
    else:
        length = draw(st.none() | st.integers(1, n + 2))
    used = length if length is not None else n
    out_n = used if irfft or not onesided else used // 2 + 1
    out = (*signal[:axis], out_n, *signal[axis + 1 :], 1 if irfft else 2)
    opset = draw(st.sampled_from([17, 20]))
    attrs: dict[str, object] = {"inverse": int(inverse), "onesided": int(onesided)}
    consts = {} if length is None else {"dft_length": np.array(length, np.int64)}
    order = ["x", "dft_length" if length is not None else ""]
    rank = len(signal) + 1
    if opset == 20:
        consts["axis"] = np.array(axis - rank if draw(st.booleans()) else axis, np.int64)
        order.append("axis")
    else:
        attrs["axis"] = axis
    while order[-1] == "":
        order.pop()
    return Case("DFT", {"x": (*signal, parts)}, [out], attrs, consts, order=tuple(order), opset=opset)


def _stft(draw: st.DrawFn) -> Case:
    """STFT of a real or complex signal: frames overlapping or not (a tail no frame reads), a window (then
    frame_length given or not) or none (frame_length given), onesided or not."""
    batch, parts = draw(st.integers(1, 2)), draw(st.sampled_from([1, 2]))
    length, step, frames = draw(st.integers(1, 5)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    size = (frames - 1) * step + length + draw(st.integers(0, step - 1))
    onesided = draw(st.booleans())
    windowed = draw(st.booleans())
    shapes = {"s": (batch, size, parts)} | ({"w": (length,)} if windowed else {})
    consts = {"step": np.array(step, np.int64)}
    order = ["s", "step", "w" if windowed else ""]
    if not windowed or draw(st.booleans()):
        consts["length"] = np.array(length, np.int64)
        order.append("length")
    bins = length // 2 + 1 if onesided else length
    return Case("STFT", shapes, [(batch, frames, bins, 2)], {"onesided": int(onesided)}, consts, order=tuple(order))


test_dft = fd_test(_dft, 12)
test_stft = fd_test(_stft, 10)


@pytest.mark.parametrize("name", ["dft", "stft"])
@settings(max_examples=3, deadline=None, derandomize=True)
@given(data=st.data())
def test_the_wgsl_module_computes_the_numpy_modules_gradients(name: str, data: st.DataObject) -> None:
    """The same clauses on the device: float32 gradients within 1e-4 of the numpy module's."""
    case = data.draw(st.composite({"dft": _dft, "stft": _stft}[name])())
    compare_on_wgsl(case, feeds_for(case, data.draw(st.integers(0, 2**16)), np.float32))


def test_a_frame_step_only_the_run_gives_is_refused_naming_the_op() -> None:
    case = Case("STFT", {"s": (1, 8, 1), "w": (4,)}, [(1, 3, 3, 2)], {"onesided": 1}, order=("s", "step", "w"))
    model = model_of(case)
    model.graph.input.append(helper.make_tensor_value_info("step", TensorProto.INT64, []))
    for value_info in model.graph.input:  # the frames are then the run's: the loss weighs them by a scalar
        if value_info.name == "r0":
            del value_info.type.tensor_type.shape.dim[:]
    with pytest.raises(UnsupportedError, match=r"kernel\.stft 'op': .*frame_step or frame_length only the run gives"):
        build_for(model)
