"""Random draws: RandomNormal, RandomUniform, their Like forms and Bernoulli lower to `kernel.random`,
which reads the generator forward makes from its `seed` keyword.

One seed repeats a run and another differs; with the noise scaled to 0 (as a TTS model's noise
scales may be) the output equals onnxruntime's, whose draws are its own, and Bernoulli's of
probabilities 0 and 1 equal ONNX's reference evaluator's.
A draw over a constant is no weight: `Weights` never computes it at load, so calls without a seed
differ, while a node's own `seed` attribute repeats its draws.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx.parser
import pytest

from loam.core.errors import UnsupportedError
from loam.driver.pipeline import BuildResult
from loam.testing import assert_same, build_for, forward_inputs, run_built, run_onnxruntime


def model(text: str, opset: int = 15) -> onnx.ModelProto:
    return onnx.parser.parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>\n{text}')


@functools.cache
def built(text: str, backend: str = "numpy") -> BuildResult:
    return build_for(model(text), backend=backend, host_fallback=backend == "wgsl")


def forward(result: BuildResult, feeds: dict[str, np.ndarray], **seed: int) -> list[np.ndarray]:
    """forward's outputs on `feeds`, with `seed=` where given."""
    module = result.module
    out = module.forward(module.Weights.embedded(), *[feeds[n] for n in forward_inputs(result)], **seed)
    return list(out) if isinstance(out, tuple) else [out]


# x plus noise of standard deviation 0.5 scaled by w: the noise a TTS model adds, w its noise scale.
NOISY = """
g (float[N, 3] x, float[1] w) => (float[N, 3] y) {
    z = RandomNormalLike <mean = 0.0, scale = 0.5> (x)
    s = Mul (z, w)
    y = Add (x, s)
}"""


def feeds(n: int, w: float) -> dict[str, np.ndarray]:
    x = np.arange(3 * n, dtype=np.float32).reshape(n, 3) / 7
    return {"x": x, "w": np.array([w], np.float32)}


@pytest.mark.parametrize("n", [2, 5])
def test_a_seed_repeats_the_draws_and_another_differs(n: int) -> None:
    result = built(NOISY)
    (first,) = forward(result, feeds(n, 1.0), seed=7)
    (again,) = forward(result, feeds(n, 1.0), seed=7)
    (other,) = forward(result, feeds(n, 1.0), seed=8)
    np.testing.assert_array_equal(first, again)
    assert first.shape == (n, 3) and first.dtype == np.float32
    assert not np.array_equal(first, other)
    assert not np.array_equal(first, feeds(n, 1.0)["x"])  # the noise is on


@pytest.mark.parametrize("n", [2, 5])
def test_noise_scaled_to_zero_equals_onnxruntime(n: int) -> None:
    result = built(NOISY)
    assert_same(forward(result, feeds(n, 0.0), seed=3), run_onnxruntime(model(NOISY), feeds(n, 0.0)))
    assert_same(run_built(result, feeds(n, 0.0)), run_onnxruntime(model(NOISY), feeds(n, 0.0)))  # no seed


def test_the_module_says_how_to_seed() -> None:
    source = built(NOISY).source
    assert ", *, seed: int | None = None) -> np.ndarray:" in source
    assert "one seed repeats the random draws" in source


def test_a_model_without_draws_takes_no_seed() -> None:
    result = build_for(model("g (float[N] x) => (float[N] y) { y = Relu (x) }"))
    assert "seed" not in result.source


# Draws over a constant's extents (`Weights` could compute a function of it once, at load), and a
# RandomNormal of the shape its attribute gives.
CONSTANT_EXTENTS = """
g (float[2, 3] x) => (float[2, 3] y, float[4] r) {
    c = Constant <value = float[2, 3] {0, 0, 0, 0, 0, 0}> ()
    u = RandomUniformLike <low = 2.0, high = 3.0> (c)
    y = Add (x, u)
    r = RandomNormal <shape = [4], mean = 10.0, scale = 0.001> ()
}"""


def test_draws_are_made_at_each_call_not_at_load() -> None:
    result = built(CONSTANT_EXTENTS)
    x = np.zeros((2, 3), np.float32)
    (y1, r1), (y2, r2) = forward(result, {"x": x}), forward(result, {"x": x})
    assert not np.array_equal(y1, y2) and not np.array_equal(r1, r2)  # fresh entropy without a seed
    assert ((y1 >= 2) & (y1 < 3)).all() and r1.shape == (4,) and (np.abs(r1 - 10) < 0.01).all()
    np.testing.assert_array_equal(forward(result, {"x": x}, seed=1)[0], forward(result, {"x": x}, seed=1)[0])


def test_a_nodes_own_seed_repeats_its_draws() -> None:
    text = """
    g (float[4] x) => (float[4] y) {
        y = RandomUniformLike <seed = 5.0> (x)
    }"""
    result = built(text)
    x = np.zeros(4, np.float32)
    np.testing.assert_array_equal(forward(result, {"x": x}), forward(result, {"x": x}))
    assert not np.array_equal(forward(result, {"x": x}), forward(result, {"x": x}, seed=5))


def test_bernoulli_of_certain_probabilities_equals_the_onnx_reference() -> None:
    """1 with probability p, as ONNX defines Bernoulli and its reference evaluator computes it
    (onnxruntime's CPU kernel gives 1 where p is 0 and 0 where it is 1: its draws are compared the
    other way round, so it is no oracle here)."""
    from onnx.reference import ReferenceEvaluator

    text = """
    g (float[N] p) => (int32[N] y, double[N] z) {
        y = Bernoulli <dtype = 6> (p)
        z = Bernoulli <dtype = 11> (p)
    }"""
    result = built(text)
    reference = ReferenceEvaluator(model(text))
    for p in (np.array([0, 1, 1, 0, 1], np.float32), np.ones(2, np.float32)):
        assert_same(forward(result, {"p": p}, seed=0), list(reference.run(None, {"p": p})))
    half = forward(result, {"p": np.full(4000, 0.5, np.float32)}, seed=0)[0]
    assert 1800 < half.sum() < 2200  # about half of the draws are 1


def test_a_draw_of_an_integer_type_is_refused() -> None:
    text = "g (float[4] x) => (int32[4] y) { y = RandomNormalLike <dtype = 6> (x) }"
    with pytest.raises(UnsupportedError, match=r"RandomNormalLike node .*makes element type i32"):
        build_for(model(text))


def test_the_wgsl_module_draws_on_the_host() -> None:
    with pytest.raises(UnsupportedError, match=r"kernel.random"):
        build_for(model(NOISY), backend="wgsl")
    result = built(NOISY, "wgsl")
    for n in (2, 5):
        (got,) = forward(result, feeds(n, 1.0), seed=7)
        np.testing.assert_allclose(got, forward(built(NOISY), feeds(n, 1.0), seed=7)[0], rtol=1e-6)
