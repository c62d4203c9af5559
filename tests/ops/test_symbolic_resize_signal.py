"""Resize, Pad, STFT and DFT over symbolic extents: each model built once, run at two extents against
onnxruntime on the numpy and the WGSL module (STFT and DFT have no device kernel: the WGSL module
computes them on the host), its output extents polynomials in the input's symbols, and an input
too short for what the node owes a ShapeError naming the input, the node and the condition."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx.parser
import pytest

from loam.core.errors import ShapeError
from loam.driver.pipeline import BuildResult
from loam.testing import assert_same, build_for, run_built, run_onnxruntime

RNG = np.random.default_rng(40)


def text_model(text: str, opset: int) -> onnx.ModelProto:
    return onnx.parser.parse_model(f'<ir_version: 9, opset_import: ["" : {opset}]>\n{text}')


def result_extents(built: BuildResult) -> list[str]:
    """The extents of the program's results, as the kernel IR spells them."""
    from loam.dialects.kernel import ProgramOp
    from loam.ops.lowering import axes_type

    for op in built.ir.walk():
        if isinstance(op, ProgramOp):
            ret = op.block.last_op
            assert ret is not None
            return [str(a.extent) for v in ret.operands for a in axes_type(v).axes]
    raise AssertionError("no kernel.program")


def check_runs(
    model: onnx.ModelProto, shapes: Sequence[tuple[int, ...]], backend: str, rtol: float = 1e-5
) -> BuildResult:
    """The model built once for `backend`, matching onnxruntime at every input extent of `shapes`."""
    built = build_for(model, backend=backend, host_fallback=backend == "wgsl")
    for shape in shapes:
        feeds = {"x": RNG.standard_normal(shape).astype(np.float32)}
        assert_same(run_built(built, feeds), run_onnxruntime(model, feeds), rtol=rtol, atol=rtol)
    return built


RESIZE = """
g (float[N, 2, H, W] x) => (float[?, ?, ?, ?] y) {
    s = Constant <value = float[4] {1, 1, 2, 0.7}> ()
    y = Resize <mode = "MODE"> (x, , s)
}"""


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_with_scales_over_symbolic_extents(backend: str, mode: str) -> None:
    # 0.7 is the ratio 7 / 10: over W = 10 onnxruntime's f32 product gives 7 (the f64 one 6.99999988).
    built = check_runs(text_model(RESIZE.replace("MODE", mode), 19), [(1, 2, 3, 10), (2, 2, 5, 7)], backend)
    assert result_extents(built) == ["N", "2", "2*H", "floordiv(7*W, 10)"]
    assert "kernel_resize_to" not in built.source  # the kernel reads extents the module computed first


def test_resize_too_narrow_for_its_scale_is_a_shape_error() -> None:
    built = build_for(text_model(RESIZE.replace("MODE", "nearest"), 19))
    with pytest.raises(built.module.ShapeError, match=r"1 <= floordiv\(7\*W, 10\) \(Resize node 'y'\); x axis 3"):
        run_built(built, {"x": np.zeros((1, 2, 3, 1), np.float32)})


def test_resize_with_a_scale_no_small_ratio_spells_is_refused() -> None:
    model = text_model(RESIZE.replace("MODE", "nearest").replace("0.7", "0.7071"), 19)
    with pytest.raises(Exception, match=r"Resize node 'y': scale 0\.70709997.* on axis 3 of X \(W\) is no ratio"):
        build_for(model)


def test_upsample_over_symbolic_extents() -> None:
    model = text_model(
        """
    g (float[N, 2, H, W] x) => (float[?, ?, ?, ?] y) {
        s = Constant <value = float[4] {1, 1, 2, 1.5}> ()
        y = Upsample <mode = "nearest"> (x, s)
    }""",
        9,
    )
    built = check_runs(model, [(1, 2, 3, 4), (1, 2, 2, 5)], "numpy")
    assert result_extents(built) == ["N", "2", "2*H", "floordiv(3*W, 2)"]


PAD_FROM_SHAPE = """
g (float[B, S] x) => (float[?, ?] y) {
    sh = Shape <start = 1> (x)
    z = Constant <value = int64[1] {0}> ()
    two = Constant <value = int64[1] {2}> ()
    t = Concat <axis = 0> (z, two, z, sh)
    y = Pad <mode = "MODE"> (x, t)
}"""


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
@pytest.mark.parametrize("mode", ["constant", "edge", "wrap"])
def test_pad_by_pads_computed_from_the_shape(backend: str, mode: str) -> None:
    built = check_runs(text_model(PAD_FROM_SHAPE.replace("MODE", mode), 19), [(1, 8), (2, 5)], backend)
    assert result_extents(built) == ["B", "2*S + 2"]


def test_pad_reflect_by_the_length_owes_a_longer_axis() -> None:
    # Reflecting S more values needs an axis longer than S (S - 1 - S >= 0): no input satisfies it.
    with pytest.raises(ShapeError, match=r"Pad node 'y': needs 1 <= 0 \(mode 'reflect' reads within axis 1, longer"):
        build_for(text_model(PAD_FROM_SHAPE.replace("MODE", "reflect"), 19))


SILERO_PAD = """
g (float[batch, sequence] x) => (float[?, ?] y) {
    p = Constant <value = int64[4] {0, 64, 0, 64}> ()
    y = Pad <mode = "reflect"> (x, p)
}"""


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_silero_reflect_pad_over_batch_and_sequence(backend: str) -> None:
    # Silero VAD's STFT reflects 64 samples at each end of [batch, sequence] before its Conv.
    model = text_model(SILERO_PAD, 15)
    built = check_runs(model, [(1, 512), (2, 576)], backend)
    assert result_extents(built) == ["batch", "sequence + 128"]
    if backend == "numpy":
        with pytest.raises(
            built.module.ShapeError, match=r"65 <= sequence \(Pad node 'y'\); x axis 1 gives sequence = 64"
        ):
            run_built(built, {"x": np.zeros((1, 64), np.float32)})


STFT = """
g (float[B, L, 1] x) => (float[?, ?, ?, ?] y) {
    step = Constant <value = int64 {4}> ()
    w = Constant <value = float[8] {0, 0.2, 0.5, 0.9, 1, 0.9, 0.5, 0.2}> ()
    y = STFT <onesided = ONESIDED> (x, step, w)
}"""


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_over_a_symbolic_signal_length(backend: str, onesided: int) -> None:
    model = text_model(STFT.replace("ONESIDED", str(onesided)), 17)
    built = check_runs(model, [(1, 16, 1), (2, 21, 1)], backend, rtol=1e-4)
    assert result_extents(built) == ["B", "floordiv(L - 8, 4) + 1", "5" if onesided else "8", "2"]


def test_stft_of_a_signal_shorter_than_a_frame_is_a_shape_error() -> None:
    built = build_for(text_model(STFT.replace("ONESIDED", "1"), 17))
    with pytest.raises(built.module.ShapeError, match=r"8 <= L \(STFT node 'y'\); x axis 1 gives L = 7"):
        run_built(built, {"x": np.zeros((1, 7, 1), np.float32)})


DFT = """
g (float[B, L, PARTS] x) => (float[?, ?, ?] y) {
    y = DFT <axis = 1, inverse = INVERSE, onesided = ONESIDED> (x)
}"""


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
@pytest.mark.parametrize(
    ("parts", "inverse", "onesided", "extent"),
    [(1, 0, 0, "L"), (1, 0, 1, "floordiv(L, 2) + 1"), (2, 1, 0, "L"), (2, 1, 1, "2*L - 2")],
)
def test_dft_over_a_symbolic_axis(backend: str, parts: int, inverse: int, onesided: int, extent: str) -> None:
    text = DFT.replace("PARTS", str(parts)).replace("INVERSE", str(inverse)).replace("ONESIDED", str(onesided))
    built = check_runs(text_model(text, 17), [(1, 9, parts), (2, 14, parts)], backend, rtol=1e-4)
    assert result_extents(built) == ["B", extent, "1" if inverse and onesided else "2"]


def test_an_inverse_one_sided_dft_of_an_empty_spectrum_is_a_shape_error() -> None:
    text = DFT.replace("PARTS", "2").replace("INVERSE", "1").replace("ONESIDED", "1")
    built = build_for(text_model(text, 17))
    with pytest.raises(built.module.ShapeError, match=r"3 <= 2\*L \(DFT node 'y'\); x axis 1 gives L = 1"):
        run_built(built, {"x": np.zeros((1, 1, 2), np.float32)})
