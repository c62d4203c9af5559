"""com.microsoft Gelu, BiasGelu, FastGelu and QuickGelu against onnxruntime's CPU kernels."""

from __future__ import annotations

import numpy as np
import pytest

from loam.core.errors import ShapeError
from loam.testing import assert_same, run_loam, run_onnxruntime
from tests.ops.microsoft.models import ms_model

RNG = np.random.default_rng(20261202)
X = (RNG.standard_normal((2, 3, 8)) * 3).astype(np.float32)
BIAS = RNG.standard_normal(8).astype(np.float32)


@pytest.mark.parametrize(
    ("op", "bias", "attrs"),
    [
        ("Gelu", None, {}),
        ("BiasGelu", "input", {}),
        ("BiasGelu", "weight", {}),
        ("FastGelu", None, {}),
        ("FastGelu", "input", {}),
        ("FastGelu", "weight", {}),
        ("QuickGelu", None, {}),
        ("QuickGelu", None, {"alpha": 1.25}),
    ],
)
def test_the_gelu_family_matches_onnxruntime(op: str, bias: str | None, attrs: dict[str, float]) -> None:
    """`bias` is absent, a graph input or an initializer (a weight the build knows)."""
    inputs = {"x": X, **({"bias": BIAS} if bias == "input" else {})}
    weights = {"bias": BIAS} if bias == "weight" else {}
    model = ms_model(op, inputs, weights, **attrs)
    feeds = {"x": X, "bias": BIAS}
    assert_same(run_loam(model, feeds), run_onnxruntime(model, feeds), rtol=1e-5, atol=1e-6)


def test_quick_gelu_reads_its_alpha() -> None:
    """Not vacuous: alpha changes the numbers, so a rule ignoring it would fail above."""
    a = run_onnxruntime(ms_model("QuickGelu", {"x": X}), {"x": X})[0]
    b = run_onnxruntime(ms_model("QuickGelu", {"x": X}, alpha=1.25), {"x": X})[0]
    assert not np.allclose(a, b)


def test_a_bias_of_another_length_stops_the_build() -> None:
    model = ms_model("BiasGelu", {"x": X, "bias": BIAS[:5]})
    with pytest.raises(ShapeError, match="BiasGelu"):
        run_loam(model, {"x": X, "bias": BIAS[:5]})
