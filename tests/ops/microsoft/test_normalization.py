"""com.microsoft SkipLayerNormalization and SkipSimplifiedLayerNormalization, and onnxruntime's
SimplifiedLayerNormalization of the default domain, against onnxruntime's CPU kernels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest

from loam.core.errors import ShapeError, UnsupportedError
from loam.testing import assert_same, build_for, run_built, run_loam, run_onnxruntime
from tests.ops.microsoft.models import ONNX_TYPE, ms_model

RNG = np.random.default_rng(20261203)
B, S, H = 2, 3, 16
F32 = onnx.TensorProto.FLOAT

# Output subsets: output alone, each optional output alone (earlier ones unnamed), and all four.
SKIP_OUTPUTS = [
    ("y",),
    ("y", "mean"),
    ("y", "", "inv"),
    ("y", "", "", "sum"),
    ("y", "mean", "inv", "sum"),
]


def _close(dtype: np.dtype) -> tuple[float, float]:
    """f32 to a few ulps; a half output to one ulp of f16 (both compute in f32, summing in another order)."""
    return (1e-3, 1e-3) if dtype == np.float16 else (2e-5, 2e-5)


def _data(shape: Sequence[int], dtype: type, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale + offset).astype(dtype)


def _types(outputs: Sequence[str], dtype: type) -> list[int]:
    """The output's and the sum's type is the input's; mean and inv_std_var are f32."""
    return [ONNX_TYPE[np.dtype(dtype)] if o in ("y", "sum") else F32 for o in outputs]


def _skip_model(
    op: str, dtype: type, outputs: Sequence[str], optional: dict[str, bool], skip_shape: Sequence[int] = (B, S, H)
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    names = ("bias",) if op == "SkipSimplifiedLayerNormalization" else ("beta", "bias")
    feeds = {
        "x": _data((B, S, H), dtype, 2.0, 0.5),
        "skip": _data(skip_shape, dtype),
        "gamma": _data((H,), dtype, 0.5, 1.0),
    }
    for name in names:
        feeds[name] = _data((H,), dtype, 0.3)
    inputs: dict[str, np.ndarray | None] = {k: v for k, v in feeds.items() if k not in names}
    inputs |= {name: feeds[name] if optional[name] else None for name in names}
    while inputs and next(reversed(inputs.values())) is None:
        inputs.popitem()
    model = ms_model(op, inputs, outputs=outputs, output_types=_types(outputs, dtype), epsilon=1e-5)
    return model, feeds


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("outputs", SKIP_OUTPUTS, ids=lambda o: "-".join(n or "_" for n in o))
@pytest.mark.parametrize(("beta", "bias"), [(False, False), (True, False), (False, True), (True, True)])
def test_skip_layer_norm_matches_onnxruntime(dtype: type, outputs: Sequence[str], beta: bool, bias: bool) -> None:
    model, feeds = _skip_model("SkipLayerNormalization", dtype, outputs, {"beta": beta, "bias": bias})
    assert_same(run_loam(model, feeds), run_onnxruntime(model, feeds), tolerance=_close)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("outputs", SKIP_OUTPUTS, ids=lambda o: "-".join(n or "_" for n in o))
@pytest.mark.parametrize("bias", [False, True])
def test_skip_simplified_layer_norm_matches_onnxruntime(dtype: type, outputs: Sequence[str], bias: bool) -> None:
    model, feeds = _skip_model("SkipSimplifiedLayerNormalization", dtype, outputs, {"bias": bias})
    assert_same(run_loam(model, feeds), run_onnxruntime(model, feeds), tolerance=_close)


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
@pytest.mark.parametrize("skip_shape", [(S, H), (1, S, H)], ids=["SH", "1SH"])
def test_a_skip_broadcasts_over_the_batch(op: str, skip_shape: tuple[int, ...]) -> None:
    model, feeds = _skip_model(op, np.float32, ("y", "", "", "sum"), {"beta": True, "bias": True}, skip_shape)
    assert_same(run_loam(model, feeds), run_onnxruntime(model, feeds), tolerance=_close)


def test_a_rank_2_input_and_weights_the_build_knows() -> None:
    """[tokens, H], gamma and beta initializers, onnxruntime's default epsilon."""
    x, skip = _data((5, H), np.float32, 2.0), _data((5, H), np.float32)
    weights = {"gamma": _data((H,), np.float32, 0.5, 1.0), "beta": _data((H,), np.float32, 0.3)}
    model = ms_model("SkipLayerNormalization", {"x": x, "skip": skip}, weights, outputs=("y", "mean", "inv"))
    feeds = {"x": x, "skip": skip}
    assert_same(run_loam(model, feeds), run_onnxruntime(model, feeds), tolerance=_close)


def _simplified_model(
    dtype: type, outputs: Sequence[str], shape: Sequence[int] = (B, S, H), axis: int = -1
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"x": _data(shape, dtype, 2.0, 0.5), "scale": _data(shape[axis:], dtype, 0.5, 1.0)}
    model = ms_model(
        "SimplifiedLayerNormalization",
        feeds,  # type: ignore[arg-type]
        outputs=outputs,
        output_types=[ONNX_TYPE[np.dtype(dtype)], F32][: len(outputs)],
        domain="",
        axis=axis,
        epsilon=1e-5,
        stash_type=1,
    )
    return model, feeds


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("outputs", [("y",), ("y", "inv")], ids=["y", "y-inv"])
@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_norm_matches_onnxruntime(dtype: type, outputs: Sequence[str], axis: int) -> None:
    """onnxruntime's default-domain RMS norm, as onnxruntime-genai's builder writes it (stash_type 1)."""
    model, feeds = _simplified_model(dtype, outputs, axis=axis)
    assert_same(run_loam(model, feeds), run_onnxruntime(model, feeds), tolerance=_close)


@pytest.mark.parametrize(
    ("op", "domain", "outputs"),
    [
        ("SkipLayerNormalization", "com.microsoft", ("y", "mean", "inv", "sum")),
        ("SkipSimplifiedLayerNormalization", "com.microsoft", ("y", "mean", "inv", "sum")),
        ("SimplifiedLayerNormalization", "", ("y", "inv")),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_wgsl_module_matches_onnxruntime(op: str, domain: str, outputs: Sequence[str], dtype: type) -> None:
    if domain:
        names = {"beta": True, "bias": True}
        model, feeds = _skip_model(op, dtype, outputs, names)
    else:
        model, feeds = _simplified_model(dtype, outputs)
    built = build_for(model, backend="wgsl")
    assert_same(run_built(built, feeds), run_onnxruntime(model, feeds), tolerance=_close)


# ---------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------


def test_a_stash_type_onnxruntime_ignores_is_refused() -> None:
    x, scale = _data((B, S, H), np.float32), _data((H,), np.float32)
    model = ms_model("SimplifiedLayerNormalization", {"x": x, "scale": scale}, domain="", stash_type=11)
    with pytest.raises(UnsupportedError, match=r"SimplifiedLayerNormalization node .*'stash_type' 11"):
        run_loam(model, {"x": x, "scale": scale})


def test_an_unread_attribute_is_refused() -> None:
    model, feeds = _skip_model("SkipLayerNormalization", np.float32, ("y",), {"beta": False, "bias": False})
    model.graph.node[0].attribute.append(onnx.helper.make_attribute("axis", -1))
    with pytest.raises(UnsupportedError, match=r"SkipLayerNormalization node .*'axis'"):
        run_loam(model, feeds)


def test_a_skip_that_does_not_broadcast_stops_the_build() -> None:
    model, feeds = _skip_model("SkipLayerNormalization", np.float32, ("y",), {"beta": False, "bias": False}, (B, 1, H))
    with pytest.raises(ShapeError, match=r"SkipLayerNormalization node .*skip of extents \[2, 1, 16\]"):
        run_loam(model, feeds)


def test_a_gamma_of_another_length_stops_the_build() -> None:
    x, skip, gamma = _data((B, S, H), np.float32), _data((B, S, H), np.float32), _data((H - 1,), np.float32)
    model = ms_model("SkipSimplifiedLayerNormalization", {"x": x, "skip": skip, "gamma": gamma})
    with pytest.raises(ShapeError, match=r"SkipSimplifiedLayerNormalization node .*gamma must have extents \[16\]"):
        run_loam(model, {"x": x, "skip": skip, "gamma": gamma})


def test_a_rank_4_input_stops_the_build() -> None:
    x = _data((1, B, S, H), np.float32)
    gamma = _data((H,), np.float32)
    model = ms_model("SkipLayerNormalization", {"x": x, "skip": x, "gamma": gamma})
    with pytest.raises(ShapeError, match=r"SkipLayerNormalization node .*rank 2 or 3, got 4"):
        run_loam(model, {"x": x, "skip": x, "gamma": gamma})


def test_mixed_element_types_are_refused() -> None:
    x, skip = _data((B, S, H), np.float16), _data((B, S, H), np.float16)
    gamma = _data((H,), np.float32)
    model = ms_model("SkipLayerNormalization", {"x": x, "skip": skip, "gamma": gamma})
    with pytest.raises(UnsupportedError, match=r"SkipLayerNormalization node .*gamma has element type f32"):
        run_loam(model, {"x": x, "skip": skip, "gamma": gamma})
