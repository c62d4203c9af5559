"""The elementwise family against onnxruntime: arithmetic, comparisons, logic, activations, Clip,
Where, Cast/CastLike, over every element type ONNX allows them, with broadcasting; stage-0 folding
of known values; the older opsets' meanings Loam restates; and what the build refuses.

Each case is a small model built with `onnx.helper`, compiled by `loam.testing.run_loam` (drafted
layout) and compared with onnxruntime.  onnxruntime cannot hand bf16 arrays to numpy, so bf16
cases cast their f32 inputs to bf16 and the result back to f32 inside the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper, numpy_helper

from loam.core.errors import ModelError, ShapeError, UnsupportedError
from loam.runtime.kernels.elementwise import _pow
from loam.testing import assert_same, build_for, run_loam, run_onnxruntime

ELEM: dict[str, int] = {
    "f32": TensorProto.FLOAT, "f64": TensorProto.DOUBLE, "f16": TensorProto.FLOAT16,
    "bf16": TensorProto.BFLOAT16, "i8": TensorProto.INT8, "i16": TensorProto.INT16, "i32": TensorProto.INT32,
    "i64": TensorProto.INT64, "ui8": TensorProto.UINT8, "ui16": TensorProto.UINT16,
    "ui32": TensorProto.UINT32, "ui64": TensorProto.UINT64, "bool": TensorProto.BOOL,
}  # fmt: skip
NP: dict[str, Any] = {
    "f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i8": np.int8,
    "i16": np.int16, "i32": np.int32, "i64": np.int64, "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32,
    "ui64": np.uint64, "bool": np.bool_,
}  # fmt: skip


def model_of(
    op: str,
    inputs: Mapping[str, np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    opset: int = 21,
    elems: Mapping[str, str] | None = None,
    nodes_before: Sequence[onnx.NodeProto] = (),
) -> onnx.ModelProto:
    """One `op` node over `inputs` (None: an absent optional input) giving `y`.

    `elems` overrides an input's element type; a bf16 input is fed as f32 and cast inside, and a
    bf16 result is cast back to f32, so onnxruntime can take and give it.
    """
    elems = dict(elems or {})
    nodes: list[onnx.NodeProto] = list(nodes_before)
    graph_inputs = []
    args: list[str] = []
    for name, value in inputs.items():
        if value is None:
            args.append("")
            continue
        elem = elems.get(name) or _elem_of(value)
        if elem == "bf16":
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(value.shape)))
            nodes.append(helper.make_node("Cast", [name], [f"{name}_bf16"], to=TensorProto.BFLOAT16))
            args.append(f"{name}_bf16")
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, ELEM[elem], list(value.shape)))
            args.append(name)
    bf16_out = elems.get("y") == "bf16" or (elems.get("y") is None and "bf16" in elems.values())
    out = "y_bf16" if bf16_out else "y"
    nodes.append(helper.make_node(op, args, [out], name="n", **dict(attrs or {})))
    if bf16_out:
        nodes.append(helper.make_node("Cast", ["y_bf16"], ["y"], to=TensorProto.FLOAT))
    graph = helper.make_graph(nodes, "g", graph_inputs, [helper.make_value_info("y", onnx.TypeProto())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def _elem_of(value: np.ndarray) -> str:
    for name, t in NP.items():
        if np.dtype(t) == value.dtype and name != "bf16":
            return name
    raise AssertionError(value.dtype)


def feeds_of(inputs: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    return {k: v for k, v in inputs.items() if v is not None}


# Where onnxruntime has no kernel for a type (bf16 arithmetic, f64 trigonometry at opset 22, bool
# Where, i64 Relu), the oracle is onnxruntime on a type it has, converted to the tested one.
STAND_IN = {"bf16": "f32", "f64": "f32", "i64": "i32", "bool": "i32"}


def check(
    op: str,
    inputs: Mapping[str, np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    opset: int = 21,
    elems: Mapping[str, str] | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    model = model_of(op, inputs, attrs, opset, elems)
    feeds = feeds_of(inputs)
    got = run_loam(model, feeds)
    try:
        want = run_onnxruntime(model, feeds)
    except Exception as e:  # onnxruntime's NotImplemented
        if "NOT_IMPLEMENTED" not in str(e):
            raise
        explicit = dict(elems or {})
        stand_in: dict[str, str] = {}
        for name, value in feeds.items():
            elem = explicit.get(name) or _elem_of(value)
            if elem in STAND_IN and (elem != "bool" or name in explicit):
                stand_in[name] = STAND_IN[elem]
        assert stand_in, str(e)
        other = {k: (v.astype(NP[stand_in[k]]) if k in stand_in else v) for k, v in feeds.items()}
        want = run_onnxruntime(model_of(op, other, attrs, opset, {**explicit, **stand_in}), other)
        want = [w.astype(g.dtype) for g, w in zip(got, want, strict=True)]
        rtol, atol = max(rtol, 1e-4), max(atol, 1e-5)  # the stand-in computed in a narrower type
    assert_same(got, want, rtol=rtol, atol=atol)


def data(elem: str, shape: tuple[int, ...], seed: int = 0, low: int = -5, high: int = 6) -> np.ndarray:
    """Test values of `elem`: normal floats (bf16 fed as f32), small integers, random bools."""
    rng = np.random.default_rng(seed)
    if elem == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if elem.startswith("ui"):
        return rng.integers(max(low, 0), high, shape).astype(NP[elem])
    if elem.startswith("i"):
        return rng.integers(low, high, shape).astype(NP[elem])
    return rng.standard_normal(shape).astype(np.float32 if elem == "bf16" else NP[elem])


def tolerance(elem: str) -> dict[str, float]:
    return {"f16": {"rtol": 2e-3, "atol": 2e-3}, "bf16": {"rtol": 1e-2, "atol": 1e-2}}.get(
        elem, {"rtol": 1e-5, "atol": 1e-6}
    )


# -- binary arithmetic ---------------------------------------------------------------------------------

SHAPES = [((2, 3), (3,)), ((2, 1, 3), (4, 1)), ((), (2, 2)), ((3,), (3,))]
ARITH_TYPES = ["f32", "f64", "f16", "bf16", "i8", "i32", "i64", "ui8", "ui32"]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("elem", ARITH_TYPES)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_arithmetic(op: str, elem: str, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    a = data(elem, shapes[0], 1, -20, 21)
    b = data(elem, shapes[1], 2, 1, 6)
    if op == "Div" and not elem.startswith(("f", "bf")):
        b = np.where(np.arange(b.size).reshape(b.shape) % 2 == 0, b, -b) if not elem.startswith("ui") else b
    check(op, {"a": a, "b": b}, elems={"a": elem, "b": elem}, **tolerance(elem))


def test_integer_division_truncates_toward_zero() -> None:
    a = np.array([-7, 7, -7, 7, -1, 0], np.int32)
    b = np.array([2, -2, -2, 2, 3, -3], np.int32)
    model = model_of("Div", {"a": a, "b": b})
    (got,) = run_loam(model, {"a": a, "b": b})
    np.testing.assert_array_equal(got, [-3, -3, 3, 3, 0, 0])
    assert_same([got], run_onnxruntime(model, {"a": a, "b": b}))


@pytest.mark.parametrize(
    ("base", "exponent"),
    [("f32", "f32"), ("f64", "f64"), ("f16", "f16"), ("i32", "i32"), ("i64", "i64"), ("f32", "i64"), ("i32", "f32")],
)
def test_pow_keeps_the_base_type(base: str, exponent: str) -> None:
    a = np.abs(data(base, (2, 3), 3, 1, 5)).astype(NP[base])
    b = np.abs(data(exponent, (3,), 4, 0, 4)).astype(NP[exponent])
    check("Pow", {"a": a, "b": b}, opset=15, **tolerance(base))


@pytest.mark.parametrize("shapes", [((), ()), ((1,), ()), ((), (1, 1)), ((2, 3), (1,)), ((1, 1, 257), ())], ids=str)
def test_pow_by_three_of_any_rank(shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    """GELU's cube (a float32 base, exponent 3) is computed in float64 without np.power: a 0-d base
    too, where numpy's product of two 0-d arrays is a scalar, not an array."""
    a = np.asarray(data("f32", shapes[0], 9) * 3, np.float32)
    b = np.full(shapes[1], 3, np.float32)
    check("Pow", {"a": a, "b": b}, opset=15)


def _ulps(a: np.ndarray, b: np.ndarray) -> int:
    """The most units in the last place between float32 arrays `a` and `b` where both are finite."""
    a, b = a.reshape(-1), b.reshape(-1)
    finite = np.isfinite(a) & np.isfinite(b)
    steps = a[finite].view(np.int32).astype(np.int64) - b[finite].view(np.int32).astype(np.int64)
    return int(np.abs(steps).max(initial=0))


@settings(max_examples=40, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=70),
        elements=st.floats(width=32, allow_nan=True, allow_infinity=True),
    ),
    st.booleans(),
)
def test_a_float32_cube_is_onnxruntimes(x: np.ndarray, strided: bool) -> None:
    """The runtime's Pow by 3 of a float32 base is (x * x) * x in float32: onnxruntime's bits where it
    computes the same (a last axis of more than one element), within 2 units in the last place of its
    powf elsewhere (one element at a time); overflow, NaN and signed zeros as it gives them, any layout."""
    if strided and x.ndim:
        x = np.repeat(x, 2, axis=-1)[..., ::2]  # the same values, every other element of a buffer
    three = np.array(3, np.float32)
    model = model_of("Pow", {"a": x, "b": three}, opset=15)
    want = np.ascontiguousarray(run_onnxruntime(model, {"a": np.ascontiguousarray(x), "b": three})[0])
    with np.errstate(all="ignore"):
        got = _pow(x, three)
    assert got.dtype == np.float32 and got.shape == x.shape
    if x.ndim and x.shape[-1] > 1:
        assert got.tobytes() == want.tobytes()
    assert _ulps(got, want) <= 2
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want.reshape(-1))
    np.testing.assert_array_equal(got.reshape(-1)[inf], want.reshape(-1)[inf])


@pytest.mark.parametrize("elem", ["i8", "i32", "i64", "ui8", "f32", "f64", "f16"])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod(elem: str, fmod: int) -> None:
    a = data(elem, (2, 4), 5, -9, 10)
    b = np.array([3, -3, 2, -5], NP[elem]) if not elem.startswith("ui") else np.array([3, 4, 2, 5], NP[elem])
    if elem.startswith("f") and fmod == 0:
        # onnxruntime refuses fmod=0 on floats (ONNX defined it in opset 28): Python's % is the meaning.
        (got,) = run_loam(model_of("Mod", {"a": a, "b": b}, {"fmod": 0}, opset=13), {"a": a, "b": b})
        np.testing.assert_allclose(got, np.asarray(a.astype(np.float64) % b.astype(np.float64), a.dtype), rtol=1e-3)
        return
    check("Mod", {"a": a, "b": b}, {"fmod": fmod}, opset=13, **tolerance(elem))


# -- comparisons, logic, shifts ------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("elem", ["f32", "f16", "i32", "i64", "ui8"])
def test_comparisons(op: str, elem: str) -> None:
    a = data(elem, (2, 3), 6, -2, 3)
    b = data(elem, (3,), 7, -2, 3)
    if elem.startswith("f"):
        a[0, 0] = np.nan
        b[1] = a[1, 1]
    check(op, {"a": a, "b": b})


def test_equal_on_bool() -> None:
    check("Equal", {"a": data("bool", (2, 3), 1), "b": data("bool", (3,), 2)})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op: str) -> None:
    check(op, {"a": data("bool", (2, 1, 3), 1), "b": data("bool", (4, 1), 2)})


def test_not() -> None:
    check("Not", {"x": data("bool", (2, 3))})


@pytest.mark.parametrize("elem", ["ui8", "ui16", "ui32", "ui64"])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift(elem: str, direction: str) -> None:
    a = data(elem, (2, 3), 8, 0, 200)
    b = data(elem, (3,), 9, 0, 7)
    check("BitShift", {"a": a, "b": b}, {"direction": direction})


# -- variadic ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "elem"),
    [
        (op, e)
        for op in ("Max", "Min", "Sum", "Mean")
        for e in ("f32", "f16", "i32")
        if e[0] == "f" or op in ("Max", "Min")
    ],
)
@pytest.mark.parametrize("count", [1, 2, 3])
def test_variadic(op: str, count: int, elem: str) -> None:
    """Sum and Mean are defined on floats only."""
    shapes = [(2, 3), (3,), (1, 3)][:count]
    inputs = {f"x{i}": data(elem, s, i) for i, s in enumerate(shapes)}
    if elem.startswith("f"):
        inputs["x0"][0, 1] = np.nan  # Max and Min propagate NaN, as onnxruntime does
    check(op, inputs, opset=13, **tolerance(elem))


# -- unary ------------------------------------------------------------------------------------------------

# op -> a transform making the input lie in the op's domain
UNARY: dict[str, Any] = {
    "Relu": None, "Sigmoid": None, "Tanh": None, "Exp": None, "Log": np.abs, "Sqrt": np.abs,
    "Reciprocal": None, "Neg": None, "Abs": None, "Floor": None, "Ceil": None, "Round": None, "Sign": None,
    "Erf": None, "Softplus": None, "Softsign": None, "Sin": None, "Cos": None, "Tan": None,
    "Asin": np.tanh, "Acos": np.tanh, "Atan": None, "Sinh": None, "Cosh": None, "Asinh": None,
    "Acosh": lambda x: 1 + np.abs(x), "Atanh": np.tanh, "IsNaN": None, "HardSwish": None,
}  # fmt: skip


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("elem", ["f32", "f64", "f16"])
def test_unary(op: str, elem: str) -> None:
    x = data(elem, (3, 4), 11) * 3
    transform = UNARY[op]
    if transform is not None:
        x = transform(x).astype(x.dtype)
    x[0, 0] = np.round(x[0, 0]) + 0.5  # a tie for Round: half to even
    if op == "IsNaN":
        x[1, 1] = np.nan
    check(op, {"x": x}, opset=22 if op != "IsNaN" else 20, **tolerance(elem))


@pytest.mark.parametrize("op", ["Relu", "Abs", "Neg", "Sign"])
@pytest.mark.parametrize("elem", ["i8", "i32", "i64"])
def test_unary_integers(op: str, elem: str) -> None:
    check(op, {"x": data(elem, (3, 4), 12, -100, 100)}, opset=14)


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Erf", "Exp", "Gelu"])
def test_unary_bf16(op: str) -> None:
    check(op, {"x": data("bf16", (3, 4), 13)}, opset=20, elems={"x": "bf16"}, **tolerance("bf16"))


@pytest.mark.parametrize(
    ("op", "attrs", "opset"),
    [
        ("LeakyRelu", {}, 16),
        ("LeakyRelu", {"alpha": 0.3}, 16),
        ("Elu", {"alpha": 0.7}, 22),
        ("Selu", {}, 22),
        ("Selu", {"alpha": 1.5, "gamma": 2.0}, 22),
        ("Celu", {"alpha": 2.0}, 12),
        ("Gelu", {}, 20),
        ("Gelu", {"approximate": "tanh"}, 20),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 22),
        ("HardSigmoid", {}, 6),
        ("IsInf", {}, 20),
        ("IsInf", {"detect_negative": 0}, 20),
        ("IsInf", {"detect_positive": 0}, 20),
        ("IsInf", {"detect_positive": 0, "detect_negative": 0}, 20),
    ],
)
def test_activations_with_attributes(op: str, attrs: dict[str, Any], opset: int) -> None:
    x = data("f32", (3, 4), 14) * 3
    x[0, :3] = [np.inf, -np.inf, np.nan]
    check(op, {"x": x}, attrs, opset=opset)


@pytest.mark.parametrize("slope_shape", [(1,), (4,), (3, 4), (3, 1)])
@pytest.mark.parametrize("elem", ["f32", "f16", "i32"])
def test_prelu(slope_shape: tuple[int, ...], elem: str) -> None:
    x = data(elem, (2, 3, 4), 15)
    slope = np.abs(data(elem, slope_shape, 16, 1, 4)).astype(NP[elem])
    check("PRelu", {"x": x, "slope": slope}, opset=16, **tolerance(elem))


# -- Clip, Where --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bounds", ["both", "min", "max", "none", "crossed"])
@pytest.mark.parametrize("elem", ["f32", "f16", "i32", "ui8"])
def test_clip(bounds: str, elem: str) -> None:
    x = data(elem, (3, 4), 17, 0, 20)
    if elem.startswith("f"):
        x[0, 0] = np.nan
    lo = np.array(2 if bounds != "crossed" else 9, NP[elem])
    hi = np.array(7 if bounds != "crossed" else 3, NP[elem])
    inputs: dict[str, np.ndarray | None] = {"x": x, "lo": lo, "hi": hi}
    if bounds in ("max", "none"):
        inputs["lo"] = None
    if bounds in ("min", "none"):
        inputs["hi"] = None
    if bounds == "min":
        del inputs["hi"]
    check("Clip", inputs, opset=13, **tolerance(elem))


def test_clip_before_opset_11_reads_attributes() -> None:
    x = data("f32", (3, 4), 18) * 3
    check("Clip", {"x": x}, {"min": -1.0, "max": 0.5}, opset=6)
    check("Clip", {"x": x}, {"max": 0.5}, opset=6)


@pytest.mark.parametrize("elem", ["f32", "f16", "i64", "bool", "bf16"])
def test_where(elem: str) -> None:
    cond = data("bool", (2, 1, 3), 19)
    a, b = data(elem, (4, 1), 20), data(elem, (3,), 21)
    check("Where", {"c": cond, "a": a, "b": b}, elems={"a": elem, "b": elem}, **tolerance(elem))


# -- Cast, CastLike ---------------------------------------------------------------------------------------

CAST_TYPES = ["f32", "f64", "f16", "i8", "i32", "i64", "ui8", "bool"]


@pytest.mark.parametrize("source", CAST_TYPES)
@pytest.mark.parametrize("target", CAST_TYPES)
def test_cast(source: str, target: str) -> None:
    x = data(source, (3, 4), 22, -100, 100)
    if source.startswith("f"):
        x = (x * 40).astype(x.dtype)  # fractions to truncate, both signs, values beyond f16's step
        if target in ("bool", "f32", "f64", "f16"):
            x[0, 0] = 0
    check("Cast", {"x": x}, {"to": ELEM[target]}, opset=13)


@pytest.mark.parametrize("source", ["f32", "f64", "i32", "bool"])
def test_cast_to_and_from_bf16(source: str) -> None:
    x = data(source, (3, 4), 23)
    if source == "f32":
        x[0, :3] = [1.00390625, 1.01171875, 3.14159]  # ties and rounding to nearest even
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", ELEM[source], [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    assert_same(run_loam(model, {"x": x}), run_onnxruntime(model, {"x": x}), rtol=0, atol=0)


def test_castlike() -> None:
    x = data("f32", (3, 4), 24) * 10
    like = np.zeros((1,), np.int32)
    check("CastLike", {"x": x, "like": like}, opset=15)


def test_cast_opset_1_names_the_type() -> None:
    x = data("f32", (3,), 25) * 10
    model = model_of("Cast", {"x": x}, {"to": "INT32"}, opset=1)
    (got,) = run_loam(model, {"x": x})
    np.testing.assert_array_equal(got, x.astype(np.int32))


def test_bf16_module_imports_ml_dtypes_only_where_needed() -> None:
    x = data("f32", (3,), 26)
    plain = build_for(model_of("Relu", {"x": x}))
    assert "ml_dtypes" not in plain.source
    halves = build_for(model_of("Relu", {"x": x}, elems={"x": "bf16"}))
    assert "import ml_dtypes" in halves.source


# -- stage-0 folding --------------------------------------------------------------------------------------


def constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(value, name))


@pytest.mark.parametrize(
    ("op", "attrs", "values"),
    [
        ("Div", {}, [np.array([-7, 7, 9], np.int64), np.array([2, 2, -4], np.int64)]),
        ("Mod", {}, [np.array([-7, 7, 9], np.int64), np.array([2, -3, 4], np.int64)]),
        ("Pow", {}, [np.array([2, 3, 4], np.int64), np.array([3, 2, 0], np.int64)]),
        ("Where", {}, [np.array([True, False, True]), np.array([1, 2, 3], np.int64), np.array([9], np.int64)]),
        ("Cast", {"to": TensorProto.FLOAT}, [np.array([-7, 7, 9], np.int64)]),
        ("Max", {}, [np.array([-7, 7, 9], np.int64), np.array([0], np.int64)]),
        ("Equal", {}, [np.array([-7, 7, 9], np.int64), np.array([7], np.int64)]),
    ],
)
def test_known_values_fold(op: str, attrs: dict[str, Any], values: list[np.ndarray]) -> None:
    """A node over Constants is computed by the build (same Expr, same numpy functions)."""
    from loam.dialects.kernel import ConstantOp, ZipOp

    names = [f"c{i}" for i in range(len(values))]
    nodes = [constant(n, v) for n, v in zip(names, values, strict=True)]
    nodes.append(helper.make_node(op, names, ["k"], **attrs))
    nodes.append(helper.make_node("Add", ["x", "k"] if op != "Equal" and op != "Where" else ["x", "x"], ["y"]))
    if op in ("Equal",):
        nodes[-1] = helper.make_node("Where", ["k", "x", "x"], ["y"])
    k_elem = TensorProto.FLOAT if op == "Cast" else TensorProto.INT64
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", k_elem, [3])],
        [
            helper.make_tensor_value_info("y", k_elem, None),
            helper.make_value_info("k", onnx.TypeProto()),
        ],
    )
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]))
    feeds = {"x": np.arange(3).astype(np.float32 if op == "Cast" else np.int64)}
    result = build_for(model)
    folded = [op for op in result.ir.walk() if isinstance(op, ConstantOp)]
    assert folded, "the known node was not folded"
    assert sum(isinstance(o, ZipOp) for o in result.ir.walk()) <= 1  # only the node reading x computes
    from loam.testing import run_built

    assert_same(run_built(result, feeds), run_onnxruntime(model, feeds))


# -- older opsets --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("b_shape", "attrs"),
    [((3,), {"broadcast": 1, "axis": 1}), ((3, 4), {"broadcast": 1, "axis": 1}), ((4,), {"broadcast": 1}),
     ((2, 3, 4), {})],
)  # fmt: skip
@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div"])
def test_binary_before_opset_7_aligns_at_axis(b_shape: tuple[int, ...], attrs: dict[str, int], op: str) -> None:
    a = data("f32", (2, 3, 4), 27)
    b = data("f32", b_shape, 28) + 3
    # Opset 1 also had `consumed_inputs` (a no-op at inference); opset 6 dropped it.
    for opset, extra in ((1, {"consumed_inputs": [0, 0]}), (6, {})):
        model = model_of(op, {"a": a, "b": b}, {**extra, **attrs}, opset=opset)
        (got,) = run_loam(model, {"a": a, "b": b})
        axis = attrs.get("axis", 3 - len(b_shape))
        aligned = b.reshape(b_shape + (1,) * (3 - axis - len(b_shape)))
        fn = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract, "Div": np.divide}[op]
        np.testing.assert_allclose(got, fn(a, aligned), rtol=1e-6)


def test_binary_before_opset_7_needs_equal_shapes_without_broadcast() -> None:
    model = model_of("Add", {"a": data("f32", (2, 3), 1), "b": data("f32", (3,), 2)}, opset=6)
    with pytest.raises(ShapeError, match=r"Add node 'n': opset 6 without broadcast=1 needs equal shapes"):
        build_for(model)


def test_variadic_before_opset_8_needs_equal_shapes() -> None:
    model = model_of("Sum", {"a": data("f32", (2, 3), 1), "b": data("f32", (3,), 2)}, opset=6)
    with pytest.raises(ShapeError, match=r"Sum node 'n': opset 6 needs inputs of one shape"):
        build_for(model)


# -- refusals ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "opset", "kind", "message"),
    [
        ("Sub", {"a": np.ones(3, bool), "b": np.ones(3, bool)}, {}, 14, UnsupportedError, "element type bool"),
        ("Sqrt", {"x": np.ones(3, np.int32)}, {}, 13, UnsupportedError, "Sqrt node 'n': computes in element type i32"),
        ("Cast", {"x": np.ones(3, np.float32)}, {"to": TensorProto.STRING}, 13, UnsupportedError,
         "casts to element type string"),
        ("Cast", {"x": np.ones(3, np.float32)}, {"to": TensorProto.FLOAT8E8M0, "round_mode": "sideways"}, 24,
         ShapeError, "round_mode must be one of up, down, nearest, got 'sideways'"),
        ("Clip", {"x": np.ones(3, np.float32)}, {"min": 0.0}, 13, ModelError,
         "attribute 'min' is not defined for Clip at opset 13"),
        ("Gelu", {"x": np.ones(3, np.float32)}, {"approximate": "fast"}, 20, ShapeError,
         "approximate must be 'none' or 'tanh'"),
        ("Add", {"a": np.ones(3, np.float32), "b": np.ones(3, np.float64)}, {}, 14, ShapeError,
         "operands have element types f32 and f64"),
        ("Where", {"c": np.ones(3, np.int32), "a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}, {}, 16,
         ShapeError, "the condition must be bool"),
        ("PRelu", {"x": np.ones(3, np.float32), "s": np.ones((2, 3), np.float32)}, {}, 16, ShapeError,
         "unidirectional"),
    ],
)  # fmt: skip
def test_refusals(
    op: str, inputs: dict[str, np.ndarray], attrs: dict[str, Any], opset: int, kind: type[Exception], message: str
) -> None:
    model = model_of(op, inputs, attrs, opset)
    with pytest.raises(kind, match=message):
        build_for(model)


# -- fix-up regressions ------------------------------------------------------------------------------------


def test_rank_0_value_folds_to_rank_0() -> None:
    """A folded rank-0 value keeps rank 0 (attention's `1 / sqrt(head size)` once crashed the Div after it)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        constant("last", np.array(1, np.int64)),
        helper.make_node("Gather", ["shape", "last"], ["size"], axis=0),
        helper.make_node("Cast", ["size"], ["size_f"], to=TensorProto.FLOAT),
        helper.make_node("Sqrt", ["size_f"], ["root"]),
        constant("one", np.array(1.0, np.float32)),
        helper.make_node("Div", ["one", "root"], ["scale"]),
        helper.make_node("Sqrt", ["scale"], ["scale_root"]),
        helper.make_node("Mul", ["x", "scale_root"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = data("f32", (2, 8), 40)
    assert_same(run_loam(model, {"x": x}), run_onnxruntime(model, {"x": x}))


@pytest.mark.parametrize("opset", [7, 9, 10, 11, 12, 13, 22])
def test_dropout_mask_at_inference(opset: int) -> None:
    """Dropout's inference mask as onnxruntime gives it: zeros before opset 12 (ONNX leaves it undefined
    there), all true from 12 (where ONNX defines `output = scale * data * mask`)."""
    mask_elem = TensorProto.BOOL if opset >= 10 else TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Dropout", ["x"], ["y", "mask"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("mask", mask_elem, [3, 4])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = data("f32", (3, 4), 41)
    got, want = run_loam(model, {"x": x}), run_onnxruntime(model, {"x": x})
    assert_same(got, want)
    assert got[1].dtype == want[1].dtype and bool(got[1].all()) == (opset >= 12)


def _raw_node_model(op: str, inputs: Mapping[str, int], attrs: Mapping[str, Any], opset: int) -> onnx.ModelProto:
    """One node, attributes set as given (no ONNX checker, no shape inference): a malformed model."""
    node = helper.make_node(op, list(inputs), ["y"], name="n")
    node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, t, [2, 3]) for k, t in inputs.items()],
        [helper.make_value_info("y", onnx.TypeProto())],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


F, I32 = TensorProto.FLOAT, TensorProto.INT32


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "opset", "kind", "message"),
    [
        ("LeakyRelu", {"x": F}, {"alpha": "abc"}, 16, ShapeError, "attribute 'alpha' must be a float, got 'abc'"),
        ("Elu", {"x": F}, {"alpha": [1.0, 2.0]}, 6, ShapeError, "attribute 'alpha' must be a float"),
        ("Selu", {"x": F}, {"gamma": "g"}, 6, ShapeError, "attribute 'gamma' must be a float"),
        ("HardSigmoid", {"x": F}, {"beta": onnx.numpy_helper.from_array(np.ones(1, np.float32))}, 6, ShapeError,
         "attribute 'beta' must be a float"),
        ("IsInf", {"x": F}, {"detect_positive": "yes"}, 10, ShapeError, "'detect_positive' must be an integer"),
        ("Clip", {"x": F}, {"min": "a"}, 6, ShapeError, "Clip node 'n': attribute 'min' must be a float"),
        ("Clip", {"x": I32}, {"min": -1.0}, 6, UnsupportedError, "Clip node 'n': computes in element type i32"),
        ("Add", {"a": F, "b": F}, {"broadcast": 1, "axis": "a"}, 6, ShapeError, "attribute 'axis' must be an integer"),
        ("Mul", {"a": F, "b": F}, {"broadcast": "a"}, 6, ShapeError, "'broadcast' must be an integer"),
        ("Mod", {"a": I32, "b": I32}, {"fmod": 2}, 13, ShapeError, "attribute 'fmod' must be one of 0, 1, got 2"),
        ("Cast", {"x": F}, {"to": [1, 2]}, 13, ShapeError, "Cast node 'n': 'to' must be an element type"),
        ("Cast", {"x": F}, {"to": 1.5}, 13, ShapeError, "'to' must be an element type number or name, got 1.5"),
        ("Sum", {"a": F, "": F}, {}, 13, ShapeError, "Sum node 'n': input 1 is absent"),
        ("Constant", {}, {"value_float": "x"}, 13, ShapeError, "'value_float' must hold floats"),
        ("Constant", {}, {"value_ints": [1.5]}, 13, ShapeError, "'value_ints' must hold integers"),
        ("Constant", {}, {"value": 1.5}, 13, ShapeError, "attribute 'value' must be a tensor"),
        ("Constant", {}, {"value_float": 1.0, "value_int": 2}, 13, ShapeError, "exactly one value attribute"),
        ("Constant", {}, {"value_string": "abc"}, 13, UnsupportedError, "Loam compiles no strings"),
        ("Dropout", {"x": F}, {"is_test": "x"}, 6, ShapeError, "attribute 'is_test' must be an integer"),
    ],
)  # fmt: skip
def test_malformed_models_stop_with_loam_errors(
    op: str, inputs: dict[str, int], attrs: dict[str, Any], opset: int, kind: type[Exception], message: str
) -> None:
    """A malformed attribute or input ends the build with a LoamError naming the node, never a raw exception."""
    with pytest.raises(kind, match=message):
        build_for(_raw_node_model(op, inputs, attrs, opset))


def test_dropout_training_mode_must_be_a_bool_scalar() -> None:
    nodes = [constant("r", np.array(0.5, np.float32)), constant("t", np.zeros((0,), np.bool_))]
    nodes.append(helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="n"))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, [2])], [helper.make_value_info("y", onnx.TypeProto())]
    )
    with pytest.raises(ShapeError, match=r"Dropout node 'n': training_mode must be a bool scalar, got bool \[0\]"):
        build_for(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def test_prelu_before_opset_7_applies_a_slope_per_channel() -> None:
    # PRelu-6 has no broadcasting: PyTorch's old exporter writes a [C] slope for an NCHW input.
    x = np.random.default_rng(7).standard_normal((2, 3, 4)).astype(np.float32)
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    graph = helper.make_graph(
        [helper.make_node("PRelu", ["x", "slope"], ["y"], name="prelu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
        initializer=[numpy_helper.from_array(slope, "slope")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)])
    model.ir_version = 3
    (y,) = run_loam(model, {"x": x})
    want = np.where(x < 0, x * slope[None, :, None], x)
    np.testing.assert_allclose(y, want, rtol=1e-6)


# -- Robustness regressions (found by tests/test_robustness.py's mutation sweep) ---------------------------


@pytest.mark.parametrize(("op", "flag"), [("Cast", "saturate"), ("IsInf", "detect_positive")])
@pytest.mark.parametrize("value", [2, -1])
def test_flag_attribute_other_than_0_or_1_is_refused(op: str, flag: str, value: int) -> None:
    """onnxruntime reads such a flag as garbage (Cast) or as false; ONNX only defines 0 and 1."""
    attrs: dict[str, Any] = {flag: value, **({"to": TensorProto.DOUBLE} if op == "Cast" else {})}
    model = model_of(op, {"x": data("f32", (2, 3))}, attrs, opset=21)
    with pytest.raises(ShapeError, match=f"{op} node 'n': attribute '{flag}' must be one of 0, 1, got {value}"):
        build_for(model)


def test_selu_with_infinite_alpha_is_minus_infinity_below_zero() -> None:
    x = np.array([-1.0, 0.0, 3.0], np.float32)
    check("Selu", {"x": x}, {"alpha": float("inf")}, opset=6)


def test_a_cube_is_onnxruntimes_product_within_an_ulp_of_the_rounded_cube() -> None:
    """Pow(x, 3) (GELU's cube) is (x * x) * x in float32, as onnxruntime computes it over a tensor: its
    bits, and within one unit in the last place of the correctly rounded cube across the float32 range."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(2000).astype(np.float32) * s for s in (1e-20, 1e-3, 1.0, 7.0, 1e12)])
    x = np.concatenate([x, np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3e13, -3e13], np.float32)])
    node = helper.make_node("Pow", ["x", "three"], ["y"], name="cube")
    graph = helper.make_graph(
        [node],
        "cube",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.size])],
        [numpy_helper.from_array(np.array(3.0, np.float32), "three")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (got,) = run_loam(model, {"x": x})
    (want,) = run_onnxruntime(model, {"x": x})
    assert got.tobytes() == want.tobytes()
    with np.errstate(over="ignore", invalid="ignore"):  # the cubes past float32 are inf, as they must be
        exact = (x.astype(np.float64) ** 3).astype(np.float32)
    normal = np.abs(exact) >= np.finfo(np.float32).tiny
    assert _ulps(got[normal], exact[normal]) <= 1
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exact))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(exact))


@pytest.mark.parametrize("alpha", [0.01, 0.2, 1.0, 0.0, 1.5, -0.3])
def test_leaky_relu_at_special_values_is_onnxruntimes(alpha: float) -> None:
    """LeakyRelu computes max(x, alpha * x) where 0 < alpha <= 1 and a select elsewhere: either way every
    value, NaN, the infinities and both zeros included, is onnxruntime's, bit for bit."""
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=alpha)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.5, -3.5, 1e-40, -1e-40, -2e38], np.float32)
    got, want = run_loam(model, {"x": x})[0], run_onnxruntime(model, {"x": x})[0]
    assert got.tobytes() == want.tobytes(), (got, want)
