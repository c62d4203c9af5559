"""MelWeightMatrix against onnxruntime and ONNX's reference evaluator: run-time scalars through the
kernel, known ones folded, output types, and what the build refuses."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx.reference import ReferenceEvaluator

from loam.core.errors import ShapeError, UnsupportedError
from loam.testing import assert_same, build_for, run_built, run_loam, run_onnxruntime


def mel_model(mel: int, dft: int, out: str = "float", attrs: str = "") -> onnx.ModelProto:
    """num_mel_bins and dft_length Constants; sample_rate and the band edges run-time inputs."""
    return onnx.parser.parse_model(
        '<ir_version: 9, opset_import: ["" : 17]>\n'
        f"g (int64 rate, float lo, float hi) => ({out}[{dft // 2 + 1}, {mel}] w) {{\n"
        f"  mel = Constant <value = int64 {{{mel}}}> ()\n"
        f"  dft = Constant <value = int64 {{{dft}}}> ()\n"
        f"  w = MelWeightMatrix {attrs} (mel, dft, rate, lo, hi)\n}}"
    )


def scalars(rate: int, lo: float, hi: float) -> dict[str, np.ndarray]:
    return {"rate": np.array(rate), "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}


@pytest.mark.parametrize(
    ("mel", "dft", "rate", "lo", "hi"),
    [(8, 16, 8192, 0.0, 4096.0), (10, 64, 16000, 20.0, 8000.0), (5, 31, 8000, 100.0, 3000.0), (3, 8, 1000, 0, 10)],
)
def test_against_onnxruntime_and_the_reference(mel: int, dft: int, rate: int, lo: float, hi: float) -> None:
    m = mel_model(mel, dft)
    feeds = scalars(rate, lo, hi)
    got = run_loam(m, feeds)
    assert_same(got, run_onnxruntime(m, feeds), rtol=0, atol=0)
    assert_same(got, list(ReferenceEvaluator(m).run(None, feeds)), rtol=0, atol=0)


def test_output_datatype_and_one_build_for_many_rates() -> None:
    m = mel_model(6, 32, "double", "<output_datatype = 11>")
    result = build_for(m)
    assert "kernel_mel_weight_matrix(" in result.source
    for rate in (4000, 8000, 16000):
        feeds = scalars(rate, 30.0, rate / 2 - 200)
        (w,) = run_built(result, feeds)
        assert w.dtype == np.float64
        assert_same([w], run_onnxruntime(m, feeds), rtol=0, atol=0)


def test_known_scalars_fold() -> None:
    m = onnx.parser.parse_model(
        '<ir_version: 9, opset_import: ["" : 17]>\n'
        "g () => (float[9, 8] w) {\n"
        "  mel = Constant <value = int32 {8}> ()\n"
        "  dft = Constant <value = int32 {16}> ()\n"
        "  rate = Constant <value = int32 {8192}> ()\n"
        "  lo = Constant <value = float {0.0}> ()\n"
        "  hi = Constant <value = float {4096.0}> ()\n"
        "  w = MelWeightMatrix (mel, dft, rate, lo, hi)\n}"
    )
    result = build_for(m)
    assert "kernel_mel_weight_matrix(" not in result.source
    assert_same(run_built(result, {}), run_onnxruntime(m, {}), rtol=0, atol=0)


def test_refusals() -> None:
    run_time = onnx.parser.parse_model(
        '<ir_version: 9, opset_import: ["" : 17]>\n'
        "g (int64 mel, int64 rate, float lo, float hi) => (float[9, N] w) {\n"
        "  dft = Constant <value = int64 {16}> ()\n"
        "  w = MelWeightMatrix (mel, dft, rate, lo, hi)\n}"
    )
    # A count the run gives is read at run time (test_run_time_extents.py); several values are no count.
    run_time.graph.input[0].type.tensor_type.shape.dim.add().dim_value = 2
    with pytest.raises(ShapeError, match="MelWeightMatrix node 'w': num_mel_bins must be one integer"):
        run_loam(run_time, {"mel": np.array([8, 8]), **scalars(8000, 0, 4000)})
    with pytest.raises(UnsupportedError, match="output_datatype 6 is not one of f32, f64, f16"):
        run_loam(mel_model(4, 16, "int32", "<output_datatype = 6>"), scalars(8000, 0, 4000))
    with pytest.raises(ShapeError, match="num_mel_bins \\(0\\) and dft_length \\(16\\) must be positive"):
        run_loam(mel_model(0, 16), scalars(8000, 0, 4000))
