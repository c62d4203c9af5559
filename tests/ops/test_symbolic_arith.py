"""Symbolic values through elementwise arithmetic, and symbolic extents through the compute rules.

Two kinds of check, both against onnxruntime:

- folds: an operator rule's stage-0 value over operands that hold polynomials of the symbols (what
  a Shape of a symbolic tensor gives, and shape arithmetic makes of it), evaluated at several symbol
  values, must be what onnxruntime computes from the same operands as numbers (including values
  where a truncation, a wrap to int32 or a comparison changes the outcome);
- models: small graphs with dim_params (the torch attention-scale pattern, a MatMul with a
  symbolic batch, Softmax and LayerNormalization over symbolic axes, ...) built once and run at
  several symbol values, plus what the build refuses and what `forward` refuses at run time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import helper

from loam.core import dtypes, owed
from loam.core.derived import evaluate
from loam.core.errors import LoamError, ShapeError
from loam.core.owed import ExtentScope
from loam.core.poly import Poly
from loam.ops import rule_for
from loam.ops.base import Facts, NodeInfo, broadcast_shapes
from loam.testing import assert_same, build_for, run_built, run_onnxruntime

N, M = Poly.symbol("N"), Poly.symbol("M")

# Symbol values to evaluate folds at: small, equal, one, and past int32 (where wrap32 differs).
ENVS: tuple[dict[str, int], ...] = (
    {"N": 0, "M": 0},
    {"N": 1, "M": 3},
    {"N": 5, "M": 5},
    {"N": 7, "M": 2},
    {"N": 70000, "M": 40000},
)

ONNX_TYPES = {"i64": onnx.TensorProto.INT64, "i32": onnx.TensorProto.INT32, "bool": onnx.TensorProto.BOOL}


# ---------------------------------------------------------------------------------------------
# Folds over symbolic values
# ---------------------------------------------------------------------------------------------


def polys(values: Sequence[object], shape: Sequence[int] | None = None) -> np.ndarray:
    """An object array of Poly (ints lifted), reshaped to `shape` when given."""
    flat = np.array([Poly.lift(v) for v in values], dtype=object)  # type: ignore[arg-type]
    return flat.reshape(shape) if shape is not None else flat


def at(value: np.ndarray, env: Mapping[str, int], elem: str) -> np.ndarray:
    """A folded value at one assignment of the symbols, as numbers of element type `elem`."""
    arr = np.asarray(value)
    numbers = [evaluate(Poly.lift(v) if not isinstance(v, Poly) else v, env) for v in arr.reshape(-1).tolist()]
    dtype = dtypes.by_name(elem).numpy
    return np.array(numbers, dtype=object).reshape(arr.shape).astype(dtype)


def fold(op: str, operands: Sequence[tuple[str, np.ndarray] | None], opset: int = 17, **attrs: object) -> Facts:
    """The rule's stage-0 facts for one `op` node over operands (element type, value), in an open scope."""
    info = NodeInfo(op, f"/{op}", opset, lambda key, default: attrs.get(key, default))
    inputs = [
        None if o is None else Facts(dtypes.by_name(o[0]), tuple(Poly.const(d) for d in o[1].shape), o[1])
        for o in operands
    ]
    with owed.scope(ExtentScope(bound={"N", "M"})):
        (out,) = rule_for(info, "").infer(info, inputs)
    return out


def onnxruntime_of(
    op: str, operands: Sequence[tuple[str, np.ndarray] | None], out_elem: str, opset: int = 17, **attrs: object
) -> np.ndarray:
    """onnxruntime's result of one `op` node over concrete operands."""
    names = ["" if o is None else f"x{i}" for i, o in enumerate(operands)]
    node = helper.make_node(op, names, ["y"], **attrs)
    inputs = [
        helper.make_tensor_value_info(name, ONNX_TYPES[o[0]], list(o[1].shape))
        for name, o in zip(names, operands, strict=True)
        if o is not None
    ]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", ONNX_TYPES[out_elem], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    feeds = {name: o[1] for name, o in zip(names, operands, strict=True) if o is not None}
    return run_onnxruntime(model, feeds)[0]


def check_fold(op: str, operands: Sequence[tuple[str, np.ndarray] | None], opset: int = 17, **attrs: object) -> None:
    """The fold, at every assignment of ENVS, equals onnxruntime over the operands at that assignment."""
    out = fold(op, operands, opset, **attrs)
    assert out.value is not None, f"{op} did not fold"
    for env in ENVS:
        concrete = [None if o is None else (o[0], at(o[1], env, o[0])) for o in operands]
        want = onnxruntime_of(op, concrete, out.elem.name, opset, **attrs)
        got = at(out.value, env, out.elem.name)
        assert_same([got], [want])


def i64(*values: object, shape: Sequence[int] | None = None) -> tuple[str, np.ndarray]:
    return ("i64", polys(values, shape))


def boolean(*values: object) -> tuple[str, np.ndarray]:
    return ("bool", polys(values))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
def test_ring_operators_fold(op: str) -> None:
    check_fold(op, [i64(N, M, 3, N * M), i64(2, N, -1, M - 7)])


def test_integer_div_truncates_toward_zero() -> None:
    check_fold("Div", [i64(N, -N, N - 3, 7 - M, N * M), i64(2, 3, -2, N + 1, 4)])


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_takes_the_sign_onnx_says(fmod: int) -> None:
    check_fold("Mod", [i64(N, -N, N - 5, 2 * M + 1), i64(3, 3, -4, 2)], fmod=fmod)


@pytest.mark.parametrize("op", ["Neg", "Abs", "Sign"])
def test_unary_operators_fold(op: str) -> None:
    check_fold(op, [i64(N - 3, M, -N - 1, 0)], opset=14)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_variadic_max_min_fold(op: str) -> None:
    check_fold(op, [i64(N, M), i64(M, 4), i64(N - 2, 1)])


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons_fold_to_zero_one(op: str) -> None:
    check_fold(op, [i64(N, N, 1, M, N + 1), i64(1, M, N, M, N)])


def test_comparison_decided_by_bounds_is_a_number() -> None:
    out = fold("Less", [i64(N + 1, -1), i64(0, N)])
    assert out.value is not None
    assert [str(v) for v in out.value] == ["0", "1"]


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic_over_symbolic_bools(op: str) -> None:
    a = fold("Equal", [i64(N, N, M), i64(1, M, 1)]).value
    b = fold("Less", [i64(M, 2, N), i64(N, N, 3)]).value
    assert a is not None and b is not None
    check_fold(op, [("bool", a), ("bool", b)])
    check_fold("Not", [("bool", a)])


def test_where_selects_between_symbolic_values() -> None:
    cond = fold("Equal", [i64(N, M), i64(1, 1)]).value
    assert cond is not None
    check_fold("Where", [("bool", cond), i64(M, N), i64(N, 4)])


def test_where_with_a_numeric_condition_picks_the_branch() -> None:
    out = fold("Where", [("bool", np.array([True, False])), i64(N, M), i64(3, 4)])
    assert out.value is not None
    assert [str(v) for v in out.value] == ["N", "4"]


def test_clip_of_symbolic_values() -> None:
    check_fold("Clip", [i64(N, M - 3, N * M), i64(1, shape=()), i64(6, shape=())], opset=13)


def test_broadcast_of_symbolic_values_keeps_numpy_shapes() -> None:
    out = fold("Add", [i64(N, M, shape=(2, 1)), i64(N, 3, 1, shape=(3,))])
    assert out.value is not None and out.value.shape == (2, 3)
    check_fold("Add", [i64(N, M, shape=(2, 1)), i64(N, 3, 1, shape=(3,))])


@pytest.mark.parametrize("to", ["i64", "i32", "bool"])
def test_cast_of_symbolic_values(to: str) -> None:
    check_fold("Cast", [i64(N, N * M, N - 1, 3 * N * M)], to=ONNX_TYPES[to])


def test_cast_to_int32_wraps_only_where_it_may_leave_int32() -> None:
    out = fold("Cast", [i64(N, N * M)], to=onnx.TensorProto.INT32)
    assert out.value is not None
    assert [str(v) for v in out.value] == ["N", "wrap32(M*N)"]


def test_int32_arithmetic_wraps_as_the_run_does() -> None:
    n32 = fold("Cast", [i64(N)], to=onnx.TensorProto.INT32).value
    assert n32 is not None
    check_fold("Mul", [("i32", n32), ("i32", polys([N]))])


def test_cast_to_float_is_left_to_the_run() -> None:
    assert fold("Cast", [i64(N)], to=onnx.TensorProto.FLOAT).value is None


def test_pow_with_a_symbolic_exponent_is_left_to_the_run() -> None:
    assert fold("Pow", [i64(2), i64(N)]).value is None
    check_fold("Pow", [i64(N, M - 1), i64(2, 3)])


@pytest.mark.parametrize(
    ("op", "attrs"),
    [("ReduceProd", {}), ("ReduceSum", {}), ("ReduceMax", {}), ("ReduceMin", {"keepdims": 0}), ("ReduceMean", {})],
)
def test_reductions_of_symbolic_values(op: str, attrs: dict[str, object]) -> None:
    check_fold(op, [i64(N, M, 3, N - M, 1, 2 * N, shape=(2, 3))], opset=11, axes=[1], **attrs)


def test_a_derived_extent_meeting_its_operand_owes_the_clamp() -> None:
    short = Poly.parse("min(N, 16)")
    scope = ExtentScope(bound={"N"})
    info = NodeInfo("Add", "/Add", 17, lambda key, default: default)
    with owed.scope(scope):
        shape = broadcast_shapes(info, [(short, Poly.const(4)), (N, Poly.const(4))])
    assert shape[0] in (N, short)
    assert [str(o) for o in scope.owed] == ["N <= 16"]


# ---------------------------------------------------------------------------------------------
# Models with dim_params, against onnxruntime
# ---------------------------------------------------------------------------------------------


def parse(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def feeds_of(model: onnx.ModelProto, env: Mapping[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded normal float inputs of the shapes `env` gives the model's dim_params."""
    rng = np.random.default_rng(seed)
    out = {}
    for inp in model.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else env[d.dim_param] for d in inp.type.tensor_type.shape.dim]
        out[inp.name] = rng.standard_normal(dims).astype(np.float32)
    return out


def check_model(model: onnx.ModelProto, envs: Sequence[Mapping[str, int]], rtol: float = 1e-5) -> None:
    result = build_for(model)
    for env in envs:
        feeds = feeds_of(model, env)
        assert_same(run_built(result, feeds), run_onnxruntime(model, feeds), rtol=rtol, atol=1e-5)


def check_refused_at_run(model: onnx.ModelProto, env: Mapping[str, int], node: str) -> None:
    """onnxruntime fails on these inputs, and `forward` raises its ShapeError naming `node`."""
    feeds = feeds_of(model, env)
    with pytest.raises(Exception):  # noqa: B017 - any onnxruntime failure
        run_onnxruntime(model, feeds)
    result = build_for(model)
    with pytest.raises(result.module.ShapeError, match=node):
        run_built(result, feeds)


ATTENTION_SCALE = parse(
    HEADER
    + """
scale (float[B, S, D] q, float[B, S, S] scores) => (float[B, S, S] y) {
    shape = Shape (q)
    two = Constant <value = int64 {2}> ()
    d = Gather <axis = 0> (shape, two)
    df = Cast <to = 1> (d)
    root = Sqrt (df)
    y = Div (scores, root)
}
"""
)


def test_attention_scale_reads_a_symbolic_extent_as_a_float() -> None:
    check_model(ATTENTION_SCALE, [{"B": 1, "S": 3, "D": 4}, {"B": 2, "S": 5, "D": 16}, {"B": 1, "S": 1, "D": 7}])


MATMUL = parse(
    HEADER
    + """
proj (float[B, S, 64] x) => (float[B, S, 10] y) <float[64, 10] w = {"""
    + ", ".join(f"{(i % 13 - 6) / 7:.4f}" for i in range(640))
    + """}> {
    y = MatMul (x, w)
}
"""
)


def test_matmul_with_symbolic_batch_and_sequence() -> None:
    check_model(MATMUL, [{"B": 1, "S": 1}, {"B": 2, "S": 7}, {"B": 3, "S": 0}], rtol=1e-4)


SYMBOLIC_CONTRACTION = parse(
    HEADER
    + """
contract (float[N, K] a, float[J, M] b) => (float[N, M] y) {
    y = MatMul (a, b)
}
"""
)


def test_matmul_contraction_of_two_symbols_is_owed_equal() -> None:
    check_model(SYMBOLIC_CONTRACTION, [{"N": 2, "K": 3, "J": 3, "M": 4}, {"N": 1, "K": 5, "J": 5, "M": 1}], rtol=1e-4)
    check_refused_at_run(SYMBOLIC_CONTRACTION, {"N": 2, "K": 3, "J": 4, "M": 4}, "MatMul")


def test_matmul_contraction_of_a_number_and_a_symbol_is_refused_at_build() -> None:
    model = parse(
        HEADER
        + """
contract (float[N, 8] a, float[J, 4] b) => (float[N, 4] y) {
    y = MatMul (a, b)
}
"""
    )
    with pytest.raises(ShapeError, match=r"MatMul node.*8 meets J"):
        build_for(model)


GEMM = parse(
    HEADER
    + """
gemm (float[N, 8] a, float[8, 4] b, float[4] c) => (float[N, 4] y) {
    y = Gemm <alpha = 0.5, beta = 2.0> (a, b, c)
}
"""
)


def test_gemm_with_symbolic_rows() -> None:
    check_model(GEMM, [{"N": 1}, {"N": 6}], rtol=1e-4)


SOFTMAX = parse(
    HEADER
    + """
soft (float[B, S] x) => (float[B, S] y, float[B, S] z) {
    y = Softmax <axis = -1> (x)
    z = LogSoftmax <axis = 0> (x)
}
"""
)


def test_softmax_over_symbolic_axes() -> None:
    check_model(SOFTMAX, [{"B": 1, "S": 1}, {"B": 2, "S": 9}, {"B": 4, "S": 3}])


LAYER_NORM = parse(
    HEADER
    + """
norm (float[B, S, 16] x, float[16] scale, float[16] bias) => (float[B, S, 16] y, float[B, S] r) {
    y = LayerNormalization <axis = -1, epsilon = 0.00001> (x, scale, bias)
    r = ReduceMean <axes = [2], keepdims = 0> (y)
}
"""
)


def test_layer_normalization_with_symbolic_batch_and_sequence() -> None:
    check_model(LAYER_NORM, [{"B": 1, "S": 1}, {"B": 2, "S": 5}, {"B": 3, "S": 2}], rtol=1e-4)


REDUCE = parse(
    HEADER
    + """
reduce (float[B, S] x) => (float[B] s, float[1, S] m, int64[S] i) {
    s = ReduceSum <keepdims = 0> (x, axes)
    m = ReduceMax <axes = [0]> (x)
    i = ArgMax <axis = 0, keepdims = 0> (x)
}
""".replace("(x, axes)", "(x, one)").replace("{\n    s =", "{\n    one = Constant <value = int64[1] {1}> ()\n    s =")
)


def test_reductions_over_symbolic_axes() -> None:
    check_model(REDUCE, [{"B": 1, "S": 1}, {"B": 3, "S": 4}, {"B": 2, "S": 0}])


def test_argmax_over_a_symbolic_axis_owes_one_element() -> None:
    check_refused_at_run(REDUCE, {"B": 0, "S": 3}, "ArgMax")


EINSUM = parse(
    HEADER
    + """
ein (float[B, I, J] a, float[B, J, K] b) => (float[B, I, K] y) {
    y = Einsum <equation = "bij,bjk->bik"> (a, b)
}
"""
)


def test_einsum_with_symbolic_letters() -> None:
    check_model(EINSUM, [{"B": 1, "I": 2, "J": 3, "K": 4}, {"B": 2, "I": 1, "J": 5, "K": 2}], rtol=1e-4)


CONV = parse(
    HEADER
    + """
conv (float[N, 2, 6, 6] x) => (float[N, 3, 4, 4] y, float[N, 3, 2, 2] p) <float[3, 2, 3, 3] w = {"""
    + ", ".join(f"{(i % 7 - 3) / 5:.3f}" for i in range(54))
    + """}> {
    y = Conv (x, w)
    p = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (y)
}
"""
)


def test_conv_and_pool_with_a_symbolic_batch() -> None:
    check_model(CONV, [{"N": 1}, {"N": 3}], rtol=1e-4)


def test_conv_with_a_symbolic_channel_extent_is_refused_clearly() -> None:
    model = parse(
        HEADER
        + """
conv (float[1, C, H, 6] x, float[3, 2, 3, 3] w) => (float[1, 3, ?, 4] y) {
    y = Conv (x, w)
}
"""
    )
    with pytest.raises(LoamError, match=r"Conv node.*needs its channel extent \(C\) as a number"):
        build_for(model)


ADD_TWO_LENGTHS = parse(
    HEADER
    + """
add (float[N, 4] x, float[M, 4] y) => (float[N, 4] z) {
    z = Add (x, y)
}
"""
)


def test_broadcast_of_two_symbolic_lengths() -> None:
    check_model(ADD_TWO_LENGTHS, [{"N": 3, "M": 3}, {"N": 1, "M": 1}])
    check_refused_at_run(ADD_TWO_LENGTHS, {"N": 4, "M": 3}, "Add")


WHERE_BROADCAST = parse(
    HEADER
    + """
where (float[B, S] x, float[B, S] y) => (float[B, S] z) {
    zero = Constant <value = float {0.0}> ()
    c = Less (x, zero)
    z = Where (c, x, y)
}
"""
)


def test_where_over_symbolic_extents() -> None:
    check_model(WHERE_BROADCAST, [{"B": 1, "S": 1}, {"B": 2, "S": 6}])


# -- shape arithmetic feeding the movement rules (their symbolic targets are the movement helper's) --

DIV_RESHAPE = parse(
    HEADER
    + """
halves (float[N, 4] x) => (float[2, ?, 4] y) {
    shape = Shape (x)
    zero = Constant <value = int64 {0}> ()
    n = Gather <axis = 0> (shape, zero)
    two = Constant <value = int64 {2}> ()
    half = Div (n, two)
    half1 = Unsqueeze (half, zero1)
    target = Concat <axis = 0> (two1, half1, four)
    y = Reshape (x, target)
}
""".replace(
        "    half1 =",
        "    zero1 = Constant <value = int64[1] {0}> ()\n    two1 = Constant <value = int64[1] {2}> ()\n"
        "    four = Constant <value = int64[1] {4}> ()\n    half1 =",
    )
)

CAST_ROUND_TRIP = parse(
    HEADER
    + """
roundtrip (float[N, 3] x) => (float[N, 3] y) {
    shape = Shape (x)
    narrow = Cast <to = 6> (shape)
    wide = Cast <to = 7> (narrow)
    y = Reshape (x, wide)
}
"""
)

WHERE_EQUAL_ONE = parse(
    HEADER
    + """
expand (float[N, 4] x, float[M, 4] y) => (float[?, 4] z) {
    sx = Shape (x)
    sy = Shape (y)
    one = Constant <value = int64[1] {1}> ()
    is1 = Equal (sx, one)
    target = Where (is1, sy, sx)
    z = Expand (x, target)
}
"""
)


@pytest.mark.parametrize(
    ("model", "envs"),
    [
        (DIV_RESHAPE, [{"N": 2}, {"N": 6}]),
        (CAST_ROUND_TRIP, [{"N": 1}, {"N": 5}]),
        (WHERE_EQUAL_ONE, [{"N": 1, "M": 3}, {"N": 3, "M": 3}, {"N": 1, "M": 1}, {"N": 1, "M": 0}]),
    ],
    ids=["div_shape_by_2_reshape", "cast_shape_int32_and_back", "where_equal_one_expand"],
)
def test_shape_arithmetic_feeding_movement(model: onnx.ModelProto, envs: list[dict[str, int]]) -> None:
    check_model(model, envs)


def test_div_shape_by_2_owes_an_even_length() -> None:
    check_refused_at_run(DIV_RESHAPE, {"N": 3}, "Reshape")
