"""Resize and Upsample against onnxruntime: every mode and coordinate mapping, scales or sizes, axes.

Most cases give the scales, sizes and roi as Constant nodes (the build settles the output extents);
the last section feeds them at run time (`kernel.resize_to`: the extents are lengths only the run
knows), building each model once and running it at several values.  Where onnxruntime departs
from ONNX's definition (align_corners when shrinking by a non-integer factor, tf_crop_and_resize on
an axis it does not resize), the cases avoid it: the ONNX node tests cover those with the
reference's numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import helper, numpy_helper

from loam.core.errors import ShapeError, UnsupportedError
from loam.testing import assert_same, build_for, run_built, run_loam, run_onnxruntime

ONNX_TYPES = {
    np.dtype(np.float32): onnx.TensorProto.FLOAT,
    np.dtype(np.float16): onnx.TensorProto.FLOAT16,
    np.dtype(np.uint8): onnx.TensorProto.UINT8,
    np.dtype(np.int32): onnx.TensorProto.INT32,
}
RNG = np.random.default_rng(3)


def one_node(
    op: str, x: np.ndarray, consts: Mapping[str, np.ndarray | None], opset: int = 19, **attrs: object
) -> onnx.ModelProto:
    """A model of one `op` node reading `x`, then Constants `consts` in order (None: an absent input)."""
    nodes = [
        helper.make_node("Constant", [], [k], value=numpy_helper.from_array(v, k))
        for k, v in consts.items()
        if v is not None
    ]
    names = ["x", *(k if v is not None else "" for k, v in consts.items())]
    nodes.append(helper.make_node(op, names, ["y"], name="n", **attrs))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", ONNX_TYPES[x.dtype], list(x.shape))],
        [helper.make_tensor_value_info("y", ONNX_TYPES[x.dtype], None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def check(model: onnx.ModelProto, x: np.ndarray, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    assert_same(run_loam(model, {"x": x}), run_onnxruntime(model, {"x": x}), rtol=rtol, atol=atol)


def check_reference(model: onnx.ModelProto, x: np.ndarray) -> None:
    """Against ONNX's reference evaluator, for mappings where onnxruntime departs from the spec."""
    from onnx.reference import ReferenceEvaluator

    want = [np.asarray(v) for v in ReferenceEvaluator(model).run(None, {"x": x})]
    assert_same(run_loam(model, {"x": x}), want, rtol=1e-5, atol=1e-5)


def scales(*values: float) -> np.ndarray:
    return np.array(values, np.float32)


X = RNG.standard_normal((1, 2, 4, 5)).astype(np.float32)
COORDINATES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]
FACTORS = [(1, 1, 2.0, 3.0), (1, 1, 0.5, 0.45), (1, 1, 1.5, 0.6)]


@pytest.mark.parametrize("coordinate", COORDINATES)
@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("factors", FACTORS)
def test_nearest(coordinate: str, nearest: str, factors: tuple[float, ...]) -> None:
    # onnxruntime maps align_corners by the rounded-down length, and rounds one half_pixel_symmetric
    # coordinate that lands on a pixel within f32 rounding the other way: the spec decides there.
    by_spec = (coordinate == "align_corners" and factors[2] < 1) or (
        coordinate == "half_pixel_symmetric" and factors[3] == 0.6 and nearest == "floor"
    )
    model = one_node(
        "Resize",
        X,
        {"roi": None, "scales": scales(*factors)},
        mode="nearest",
        coordinate_transformation_mode=coordinate,
        nearest_mode=nearest,
    )
    (check_reference if by_spec else check)(model, X)


@pytest.mark.parametrize("coordinate", COORDINATES)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("factors", FACTORS)
def test_linear_and_cubic(coordinate: str, mode: str, factors: tuple[float, ...]) -> None:
    attrs: dict[str, object] = {"mode": mode, "coordinate_transformation_mode": coordinate}
    if mode == "cubic":
        attrs.update(cubic_coeff_a=-0.5, exclude_outside=1)
    model = one_node("Resize", X, {"roi": None, "scales": scales(*factors)}, **attrs)
    # onnxruntime maps align_corners by the rounded-down length; the spec (and ONNX's data) do not.
    (check_reference if coordinate == "align_corners" and factors[2] < 1 else check)(model, X)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("sizes", [(7, 3), (2, 8)])
def test_sizes_axes_and_aspect_ratio(policy: str, sizes: tuple[int, int]) -> None:
    model = one_node(
        "Resize",
        X,
        {"roi": None, "scales": None, "sizes": np.array(sizes, np.int64)},
        axes=[3, 2],
        mode="linear",
        keep_aspect_ratio_policy=policy,
    )
    check(model, X)


def test_tf_crop_and_resize() -> None:
    roi = np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 1.3], np.float32)
    for mode in ("nearest", "linear"):
        model = one_node(
            "Resize",
            X,
            {"roi": roi, "scales": scales(1, 1, 1.5, 2.0)},
            mode=mode,
            coordinate_transformation_mode="tf_crop_and_resize",
            extrapolation_value=-7.0,
        )
        check(model, X)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float16])
def test_nearest_element_types(dtype: type) -> None:
    x = (X * 40 + 50).astype(dtype)
    check(one_node("Resize", x, {"roi": None, "scales": scales(1, 1, 2.0, 1.5)}, mode="nearest"), x)


def test_linear_half() -> None:
    x = X.astype(np.float16)
    model = one_node("Resize", x, {"roi": None, "scales": scales(1, 1, 2.0, 1.5)}, mode="linear")
    check(model, x, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("factors", [(1, 1, 2.0, 3.0), (1, 1, 0.5, 0.6)])
def test_opset_10_resize_and_upsample(mode: str, factors: tuple[float, ...]) -> None:
    check(one_node("Resize", X, {"scales": scales(*factors)}, opset=10, mode=mode), X)
    if factors[2] >= 1:
        check(one_node("Upsample", X, {"scales": scales(*factors)}, opset=9, mode=mode), X)
        check(one_node("Upsample", X, {}, opset=7, mode=mode, scales=list(factors)), X)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coordinate", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("factors", [(1, 1, 0.5, 0.45), (1, 1, 0.3, 1.5), (1, 1, 1.5, 2.0)])
def test_antialias_stretches_the_filter_where_it_shrinks(mode: str, coordinate: str, factors: tuple) -> None:
    x = RNG.standard_normal((1, 2, 9, 11)).astype(np.float32)
    attrs = {"mode": mode, "antialias": 1, "coordinate_transformation_mode": coordinate}
    model = one_node("Resize", x, {"roi": None, "scales": scales(*factors)}, **attrs)
    check_reference(model, x)
    if coordinate != "align_corners":  # onnxruntime departs from ONNX's align_corners when shrinking
        check(model, x)
    # Enlarging, antialias changes nothing.
    if min(factors) >= 1:
        plain = one_node(
            "Resize", x, {"roi": None, "scales": scales(*factors)}, mode=mode, coordinate_transformation_mode=coordinate
        )
        assert_same(run_loam(model, {"x": x}), run_loam(plain, {"x": x}), rtol=1e-6, atol=1e-6)


def test_resize_refusals() -> None:
    x = (X * 10).astype(np.int32)
    model = one_node("Resize", x, {"roi": None, "scales": scales(1, 1, 2, 2)}, mode="linear")
    with pytest.raises(UnsupportedError, match="Resize node 'n': element type i32 is not supported with mode linear"):
        run_loam(model, {"x": x})


@pytest.mark.parametrize("coeff", [float("nan"), float("inf"), float("-inf")])
def test_resize_refuses_non_finite_cubic_coeff(coeff: float) -> None:
    model = one_node("Resize", X, {"roi": None, "scales": scales(1, 1, 2, 2)}, mode="cubic", cubic_coeff_a=coeff)
    with pytest.raises(ShapeError, match="Resize node 'n': cubic_coeff_a must be finite"):
        run_loam(model, {"x": X})


def _with_initializers(x: np.ndarray, inputs: Mapping[str, np.ndarray | None], **attrs: object) -> onnx.ModelProto:
    """A Resize reading `x`, then `inputs` in order as initializers (None: an absent input)."""
    names = ["x", *(k if v is not None else "" for k, v in inputs.items())]
    graph = helper.make_graph(
        [helper.make_node("Resize", names, ["y"], name="n", **attrs)],
        "g",
        [helper.make_tensor_value_info("x", ONNX_TYPES[x.dtype], list(x.shape))],
        [helper.make_tensor_value_info("y", ONNX_TYPES[x.dtype], None)],
        [numpy_helper.from_array(v, k) for k, v in inputs.items() if v is not None],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize(
    "attrs",
    [
        {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
        {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
        {"mode": "nearest", "coordinate_transformation_mode": "pytorch_half_pixel"},
        {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"},
        {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"},
    ],
)
def test_sizes_from_an_integer_initializer(attrs: dict[str, object]) -> None:
    # Regression: roi and scales given as empty names, sizes as an i64 initializer (what exporters
    # write).  Stage 0 knew the sizes but the lowering only read folded Constants, so the build refused.
    sizes = np.array([6, 5] if "axes" in attrs else [1, 2, 3, 7], np.int64)
    check(_with_initializers(X, {"roi": None, "scales": None, "sizes": sizes}, **attrs), X)


def test_scales_as_a_float_initializer_are_read_at_run_time() -> None:
    # A float initializer is a weight: stage 0 never reads its value, so the run settles the extents.
    model = _with_initializers(X, {"roi": None, "scales": scales(1, 1, 2, 1.5)}, mode="nearest")
    check(model, X)


# -- Robustness regressions (found by tests/test_robustness.py's mutation sweep) ---------------------------


def test_sizes_for_an_empty_axis_are_refused() -> None:
    """A not_smaller ratio over an empty axis was NaN (a raw ValueError); onnxruntime refuses it too."""
    x = np.zeros((1, 1, 0, 4), np.float32)
    model = one_node("Resize", x, {"roi": None, "scales": None, "sizes": np.array([3, 2], np.int64)},
                     axes=[2, 3], keep_aspect_ratio_policy="not_smaller")  # fmt: skip
    with pytest.raises(ShapeError, match="Resize node 'n': axis 2 is empty"):
        run_loam(model, {"x": x})
    negative = one_node("Resize", X, {"roi": None, "scales": None, "sizes": np.array([1, 2, -3, 5], np.int64)})
    with pytest.raises(ShapeError, match="sizes asks extent -3 on axis 2"):
        run_loam(negative, {"x": X})


# -- scales, sizes and roi the run gives (kernel.resize_to) ---------------------------------------------------


def text_model(text: str, opset: int = 19) -> onnx.ModelProto:
    """A model from the text form of its graph."""
    return onnx.parser.parse_model(f'<ir_version: 9, opset_import: ["" : {opset}]>\n{text}')


def check_runs(model: onnx.ModelProto, runs: Sequence[Mapping[str, np.ndarray]], rtol: float = 1e-5) -> None:
    """The model built once, matching onnxruntime on every set of feeds in `runs` (the extents differ)."""
    built = build_for(model)
    assert "kernel.resize_to" in built.source or "kernel_resize_to" in built.source
    shapes = set()
    for feeds in runs:
        got = run_built(built, feeds)
        assert_same(got, run_onnxruntime(model, feeds), rtol=rtol, atol=1e-5)
        shapes.add(got[0].shape)
    assert len(shapes) == len(runs), f"the runs should give different extents, gave {shapes}"


RUN_TIME_SCALES = """
g (float[1, 2, 4, 5] x, float[4] s) => (float[?, ?, ?, ?] y) {
    r = Resize <mode = "MODE", coordinate_transformation_mode = "COORD"> (x, , s)
    y = Relu (r)
}"""


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coordinate", ["half_pixel", "asymmetric", "pytorch_half_pixel"])
def test_scales_fed_at_run_time(mode: str, coordinate: str) -> None:
    model = text_model(RUN_TIME_SCALES.replace("MODE", mode).replace("COORD", coordinate))
    factors = [(1, 1, 2.0, 1.5), (1, 1, 0.5, 0.6)]
    if mode == "nearest":  # onnxruntime interpolates the two innermost axes only
        factors.append((2, 1, 1.5, 1))
    check_runs(model, [{"x": X, "s": scales(*f)} for f in factors])


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_sizes_and_axes_fed_at_run_time(policy: str) -> None:
    model = text_model(f"""
    g (float[1, 2, 4, 5] x, int64[2] sizes) => (float[?, ?, ?, ?] y) {{
        y = Resize <mode = "linear", axes = [3, 2], keep_aspect_ratio_policy = "{policy}"> (x, , , sizes)
    }}""")
    runs = [{"x": X, "sizes": np.array(v, np.int64)} for v in ((7, 3), (2, 9))]
    check_runs(model, runs)


def test_tf_crop_and_resize_with_roi_and_sizes_fed_at_run_time() -> None:
    model = text_model("""
    g (float[1, 2, 4, 5] x, float[4] roi, int64[2] sizes) => (float[?, ?, ?, ?] y) {
        y = Resize <mode = "linear", coordinate_transformation_mode = "tf_crop_and_resize", axes = [2, 3],
                    extrapolation_value = -7.0> (x, roi, , sizes)
    }""")
    roi = np.array([0.1, 0.2, 0.9, 1.3], np.float32)
    runs = [{"x": X, "roi": roi, "sizes": np.array(v, np.int64)} for v in ((3, 8), (6, 4))]
    check_runs(model, runs)


def test_upsample_9_and_resize_10_with_scales_fed_at_run_time() -> None:
    for op, opset in (("Upsample", 9), ("Resize", 10)):
        model = text_model(
            f"""
        g (float[1, 2, 4, 5] x, float[4] s) => (float[?, ?, ?, ?] y) {{
            y = {op} <mode = "nearest"> (x, s)
        }}""",
            opset,
        )
        check_runs(model, [{"x": X, "s": scales(1, 1, 2.0, 3.0)}, {"x": X, "s": scales(1, 1, 1.5, 2.0)}])


def test_symbolic_input_with_known_scales() -> None:
    # X's batch and width are symbolic: the resized width is floor(3 * W / 2), a derived extent the
    # module computes before any kernel, the batch (scale 1) keeps its extent, and the Add after it
    # owes nothing new.
    model = text_model("""
    g (float[B, 2, 4, W] x) => (float[?, ?, ?, ?] y) {
        s = Constant <value = float[4] {1, 1, 2, 1.5}> ()
        r = Resize <mode = "nearest"> (x, , s)
        y = Add (r, r)
    }""")
    built = build_for(model)
    assert "kernel_resize_to" not in built.source
    assert "sizes=(_env['B'], 2, 8, _env['floordiv(3*W, 2)'])" in built.source
    for b, w in ((1, 5), (3, 2)):
        x = RNG.standard_normal((b, 2, 4, w)).astype(np.float32)
        got = run_built(built, {"x": x})
        assert got[0].shape == (b, 2, 8, int(1.5 * w))
        assert_same(got, run_onnxruntime(model, {"x": x}))


def test_run_time_values_resize_defines_no_result_for() -> None:
    model = text_model(RUN_TIME_SCALES.replace("MODE", "nearest").replace("COORD", "asymmetric"))
    built = build_for(model)
    with pytest.raises(built.module.DataError, match=r"Resize: scale -2\.0 on axis 2 must be positive and finite"):
        run_built(built, {"x": X, "s": scales(1, 1, -2, 1)})
    with pytest.raises(built.module.DataError, match=r"Resize: scale nan on axis 3"):
        run_built(built, {"x": X, "s": scales(1, 1, 2, float("nan"))})
    with pytest.raises(built.module.DataError, match=r"Resize: the output extents \[1, 2, 0, 5\] must be positive"):
        run_built(built, {"x": X, "s": scales(1, 1, 0.1, 1)})
    sizes = text_model("""
    g (float[1, 2, 4, 5] x, int64[2] sizes) => (float[?, ?, ?, ?] y) {
        y = Resize <axes = [2, 3]> (x, , , sizes)
    }""")
    built = build_for(sizes)
    with pytest.raises(built.module.DataError, match="Resize: sizes asks extent -3 on axis 3"):
        run_built(built, {"x": X, "sizes": np.array([2, -3], np.int64)})
    crop = text_model("""
    g (float[1, 2, 4, 5] x, float[4] roi, int64[2] sizes) => (float[?, ?, ?, ?] y) {
        y = Resize <coordinate_transformation_mode = "tf_crop_and_resize", axes = [2, 3]> (x, roi, , sizes)
    }""")
    built = build_for(crop)
    with pytest.raises(built.module.DataError, match=r"Resize: roi \[0\.0, nan, 1\.0, 1\.0\] must be finite"):
        run_built(built, {"x": X, "roi": np.array([0, np.nan, 1, 1], np.float32), "sizes": np.array([3, 3], np.int64)})


def test_run_time_operands_the_build_refuses() -> None:
    cases = [
        ("float[3] s", "(x, , s)", ShapeError, "scales has 3 values; it takes one value per resized axis, 4 for the 4"),
        ("float[N] s", "(x, , s)", UnsupportedError, r"scales has extents \[N\]; Loam needs it 1-D with its length"),
        ("int64[3] s", "(x, , , s)", ShapeError, "sizes has 3 values; it takes one value per resized axis"),
    ]
    for decl, call, error, match in cases:
        model = text_model(f"""
        g (float[1, 2, 4, 5] x, {decl}) => (float[?, ?, ?, ?] y) {{
            y = Resize {call}
        }}""")
        with pytest.raises(error, match=f"Resize node '.*': {match}"):
            build_for(model)
    both = text_model("""
    g (float[1, 2, 4, 5] x, float[4] s, int64[4] n) => (float[?, ?, ?, ?] y) {
        y = Resize (x, , s, n)
    }""")
    with pytest.raises(ShapeError, match="takes scales or sizes, not both"):
        build_for(both)


def test_an_empty_scales_input_counts_as_absent() -> None:
    # Resize 11/13 writers pass an empty scales tensor beside sizes; its length (0) is known at build
    # time.  onnxruntime refuses an empty scales graph input, so it computes the model without it.
    text = """
    g (float[1, 2, 4, 5] xDECL, int64[4] sizes) => (float[?, ?, ?, ?] y) {
        y = Resize <mode = "nearest"> (x, , SCALES, sizes)
    }"""
    model = text_model(text.replace("DECL", ", float[0] s").replace("SCALES", "s"), 13)
    oracle = text_model(text.replace("DECL", "").replace("SCALES", ""), 13)
    built = build_for(model)
    for v in ((1, 2, 7, 3), (2, 1, 3, 9)):
        sizes = np.array(v, np.int64)
        got = run_built(built, {"x": X, "s": np.zeros((0,), np.float32), "sizes": sizes})
        assert got[0].shape == v
        assert_same(got, run_onnxruntime(oracle, {"x": X, "sizes": sizes}))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_with_scales_fed_at_run_time(mode: str) -> None:
    # The run-time kernel passes antialias on: shrinking stretches the filter, enlarging does not.
    model = text_model(f"""
    g (float[1, 2, 4, 5] x, float[4] s) => (float[?, ?, ?, ?] y) {{
        y = Resize <mode = "{mode}", antialias = 1> (x, , s)
    }}""")
    check_runs(model, [{"x": X, "s": scales(1, 1, 0.5, 0.6)}, {"x": X, "s": scales(1, 1, 0.75, 2.0)}])
