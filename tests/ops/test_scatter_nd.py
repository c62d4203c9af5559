"""ScatterND against onnxruntime: every reduction at the opsets that define it, every k, repeated tuples,
element types, folding, symbolic extents (the causal-mask pattern of a Llama export), and refusals.

One-node models over fixed extents run the numpy module and onnxruntime on the same inputs.  The
symbolic models are built once and run at several values of their symbols; an equality of extents
the build cannot prove is owed, so `forward` refuses inputs that break it (the module's ShapeError
naming the node), and a tuple outside the data stops the run (IndexError), as onnxruntime refuses it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from loam.core.errors import ModelError, ShapeError, UnsupportedError
from loam.dialects.kernel import ScatterNDOp
from loam.testing import assert_same, build_for, run_built, run_loam, run_onnxruntime
from tests.ops.test_symbolic_movement import built, check, feeds_for, model, refused_at_run

DATA = np.arange(4 * 3 * 2, dtype=np.float32).reshape(4, 3, 2)


def scatter(
    x: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    *,
    reduction: str | None = None,
    opset: int = 18,
    constant: tuple[str, ...] = ("indices", "updates"),
) -> onnx.ModelProto:
    """One ScatterND node 'n' over x, indices and updates: those named in `constant` are initializers,
    the others graph inputs (with their fixed extents)."""
    values = {"x": x, "indices": indices, "updates": updates}
    inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for name, v in values.items()
        if name not in constant
    ]
    inits = [numpy_helper.from_array(values[name], name) for name in constant]
    attrs = {} if reduction is None else {"reduction": reduction}
    node = helper.make_node("ScatterND", list(values), ["y"], name="n", **attrs)
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), None)
    graph = helper.make_graph([node], "g", inputs, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def feeds(m: onnx.ModelProto, x: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> dict[str, np.ndarray]:
    given = {"x": x, "indices": indices, "updates": updates}
    return {vi.name: given[vi.name] for vi in m.graph.input}


def check_one(m: onnx.ModelProto, x: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    f = feeds(m, x, indices, updates)
    got = run_loam(m, f)
    assert_same(got, run_onnxruntime(m, f))
    return got[0]


# (indices, k): slices of the first axis, rows of the first two, single elements, negative entries.
INDICES = [
    np.array([[0], [2]], np.int64),
    np.array([[[1, 0]], [[3, -1]]], np.int64),
    np.array([[0, 1, 1], [-1, -3, 0], [2, 2, -1]], np.int64),
    np.array([[-4], [3]], np.int64),
]


def updates_for(indices: np.ndarray, scale: float = 1.0) -> np.ndarray:
    shape = indices.shape[:-1] + DATA.shape[indices.shape[-1] :]
    return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 100) * np.float32(scale)


@pytest.mark.parametrize("indices", INDICES, ids=["k1", "k2", "k3", "k1-ends"])
@pytest.mark.parametrize(("reduction", "opset"), [(None, 11), (None, 13), ("add", 16), ("mul", 16), ("max", 18),
                                                  ("min", 18), ("none", 18)])  # fmt: skip
def test_against_onnxruntime(indices: np.ndarray, reduction: str | None, opset: int) -> None:
    check_one(scatter(DATA, indices, updates_for(indices, 0.5), reduction=reduction, opset=opset), DATA, indices,
              updates_for(indices, 0.5))  # fmt: skip


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_repeated_tuples_reduce_in_order(reduction: str) -> None:
    indices = np.array([[1], [1], [-3], [0]], np.int64)  # row 1 three times
    updates = np.stack([np.full((3, 2), v, np.float32) for v in (2.0, -3.0, 20.0, 7.0)])
    got = check_one(scatter(DATA, indices, updates, reduction=reduction), DATA, indices, updates)
    assert not np.array_equal(got[1], DATA[1])


def test_a_repeated_tuple_keeps_its_last_update() -> None:
    # ONNX leaves the result undefined; onnxruntime (and Loam) keep the last update.
    indices = np.array([[2, 1], [0, 0], [2, 1]], np.int64)
    updates = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    got = check_one(scatter(DATA, indices, updates), DATA, indices, updates)
    np.testing.assert_array_equal(got[2, 1], [5.0, 6.0])


def test_k_zero_replaces_the_whole_data() -> None:
    indices = np.zeros((2, 0), np.int64)
    updates = np.stack([DATA + 1, DATA * 2])
    check_one(scatter(DATA, indices, updates), DATA, indices, updates)
    check_one(scatter(DATA, indices, updates, reduction="add"), DATA, indices, updates)


# onnxruntime computes no reduction of f16, nor max / min of bool: there ONNX's reference evaluator is the oracle.
NOT_IN_ORT = {("float16", "add"), ("float16", "mul"), ("float16", "max"), ("float16", "min"), ("bool", "max"),
              ("bool", "min")}  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.int32, np.uint8, np.bool_, np.float64])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_element_types(dtype: type, reduction: str) -> None:
    x = (np.arange(12).reshape(4, 3) % 3).astype(dtype)
    indices = np.array([[3], [1], [3]], np.int64)
    updates = (np.arange(9).reshape(3, 3) % 2 + 1).astype(dtype)
    m = scatter(x, indices, updates, reduction=reduction)
    if (np.dtype(dtype).name, reduction) not in NOT_IN_ORT:
        check_one(m, x, indices, updates)
        return
    from onnx.reference import ReferenceEvaluator

    assert_same(run_loam(m, {"x": x}), ReferenceEvaluator(m).run(None, {"x": x}))


def test_run_time_indices_and_updates() -> None:
    indices = np.array([[[0, 2]], [[-1, 0]]], np.int64)
    updates = np.array([[[9.0, 8.0]], [[7.0, 6.0]]], np.float32)
    m = scatter(DATA, indices, updates, reduction="add", constant=())
    check_one(m, DATA, indices, updates)
    # A tuple outside the data: onnxruntime refuses it, and so does forward (never a wrapped write).
    bad = np.array([[[0, 2]], [[0, 3]]], np.int64)
    with pytest.raises(Exception):  # noqa: B017 - any onnxruntime failure
        run_onnxruntime(m, feeds(m, DATA, bad, updates))
    with pytest.raises(IndexError, match=r"index 3 along data axis 1 is outside \[-3, 2\]"):
        run_loam(m, feeds(m, DATA, bad, updates))


def test_known_inputs_fold() -> None:
    # data, indices and updates all Constants: the node folds, and no kernel.scatter_nd is left.
    known = {"data": DATA, "indices": np.array([[1, -1]], np.int64), "updates": np.array([[5.0, 6.0]], np.float32)}
    nodes = [helper.make_node("Constant", [], [k], name=k, value=numpy_helper.from_array(v)) for k, v in known.items()]
    nodes += [
        helper.make_node("ScatterND", list(known), ["s"], name="n", reduction="mul"),
        helper.make_node("Add", ["s", "x"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    result = build_for(m)
    assert not any(isinstance(op, ScatterNDOp) for op in result.ir.walk())
    x = np.ones(2, np.float32)
    assert_same(run_built(result, {"x": x}), run_onnxruntime(m, {"x": x}))


# ---------------------------------------------------------------------------------------------
# Symbolic extents
# ---------------------------------------------------------------------------------------------

# The causal-mask pattern of transformers' Llama export: index tuples over every element of a
# [B, S] value, built from Ranges over its extents, Expanded, Unsqueezed and Concatenated; here
# the sequence position is written from the end (-1 - s), so the scatter reverses each row.
CAUSAL = """
g (float[B, S] x) => (float[?, ?] y) {
    zero = Constant <value = int64 {0}> ()
    one = Constant <value = int64 {1}> ()
    minus_one = Constant <value = int64 {-1}> ()
    axis1 = Constant <value = int64[1] {1}> ()
    last = Constant <value = int64[1] {-1}> ()
    shape = Shape (x)
    b = Shape <start = 0, end = 1> (x)
    s = Shape <start = 1, end = 2> (x)
    nb = Squeeze (b)
    ns = Squeeze (s)
    rows = Range (zero, nb, one)
    cols = Range (zero, ns, one)
    back = Sub (minus_one, cols)
    rows2 = Unsqueeze (rows, axis1)
    eb = Expand (rows2, shape)
    es = Expand (back, shape)
    ib = Unsqueeze (eb, last)
    is = Unsqueeze (es, last)
    idx = Concat <axis = -1> (ib, is)
    data = ConstantOfShape <value = float[1] {-3.5}> (shape)
    two = Constant <value = float {2.0}> ()
    upd = Mul (x, two)
    y = ScatterND (data, idx, upd)
}"""


def test_causal_mask_pattern_over_symbolic_extents() -> None:
    check(CAUSAL, [{"B": 2, "S": 5}, {"B": 1, "S": 1}, {"B": 3, "S": 8}])
    _, result = built(CAUSAL)
    (op,) = [op for op in result.ir.walk() if isinstance(op, ScatterNDOp)]
    assert [str(a.extent) for a in op.results[0].type.axes] == ["B", "S"]


# A slice update, `y[:, :2] = 10 * x[:, :2]`: the updates' second extent is min(S, 2), which the
# build reads as 2 by owing S >= 2.
SLICE = """
g (float[B, S] x) => (float[?, ?] y) {
    zero = Constant <value = int64 {0}> ()
    one = Constant <value = int64 {1}> ()
    two = Constant <value = int64 {2}> ()
    axis1 = Constant <value = int64[1] {1}> ()
    last = Constant <value = int64[1] {-1}> ()
    b = Shape <start = 0, end = 1> (x)
    nb = Squeeze (b)
    rows = Range (zero, nb, one)
    cols = Range (zero, two, one)
    rows2 = Unsqueeze (rows, axis1)
    width = Constant <value = int64[1] {2}> ()
    grid = Concat <axis = 0> (b, width)
    eb = Expand (rows2, grid)
    es = Expand (cols, grid)
    ib = Unsqueeze (eb, last)
    is = Unsqueeze (es, last)
    idx = Concat <axis = -1> (ib, is)
    starts = Constant <value = int64[1] {0}> ()
    ends = Constant <value = int64[1] {2}> ()
    head = Slice (x, starts, ends, axis1)
    ten = Constant <value = float {10.0}> ()
    upd = Mul (head, ten)
    y = ScatterND (x, idx, upd)
}"""


def test_slice_update_owes_the_axis_long_enough() -> None:
    check(SLICE, [{"B": 2, "S": 5}, {"B": 1, "S": 2}, {"B": 3, "S": 3}])
    refused_at_run(SLICE, {"B": 2, "S": 1}, "ScatterND node")


# Updates whose extents are another input's symbols: the build owes T == S (and that the tuples'
# count N matches), and forward refuses inputs that break it.
OWED = """
g (float[B, S] x, int64[N, 1] idx, float[N, T] u) => (float[?, ?] y) {
    y = ScatterND <reduction = "add"> (x, idx, u)
}"""


def test_updates_extents_owed_equal() -> None:
    m, result = built(OWED)
    for b, s, n in ((3, 4, 2), (1, 2, 5), (4, 1, 0)):
        f = feeds_for(m, {"B": b, "S": s, "N": n, "T": s})
        t = np.arange(n, dtype=np.int64).reshape(n, 1)
        f["idx"] = np.where(t % 2 == 1, t % b - b, t % b)  # rows from the start and from the end
        assert_same(run_built(result, f), run_onnxruntime(m, f))
    f = feeds_for(m, {"B": 3, "S": 4, "N": 2, "T": 3})
    f["idx"] = np.zeros((2, 1), np.int64)
    with pytest.raises(result.module.ShapeError, match="ScatterND node"):
        run_built(result, f)


# ---------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------


def test_updates_of_other_extents_are_refused_naming_the_node_and_axis() -> None:
    indices = np.array([[0], [2]], np.int64)
    updates = np.zeros((2, 3, 5), np.float32)
    with pytest.raises(ShapeError, match=r"ScatterND node 'n': updates axis 2 against data axis 2: extents 5 and 2"):
        build_for(scatter(DATA, indices, updates))
    with pytest.raises(ShapeError, match=r"ScatterND node 'n': the updates have rank 2; ONNX needs 3"):
        build_for(scatter(DATA, indices, np.zeros((2, 3), np.float32)))


def test_a_symbolic_extent_meeting_a_number_is_refused() -> None:
    text = """
    g (float[B, S] x, int64[N, 1] idx, float[N, 3] u) => (float[?, ?] y) {
        y = ScatterND (x, idx, u)
    }"""
    with pytest.raises(ShapeError, match=r"ScatterND node '.*': updates axis 1 against data axis 1: extent 3 meets S"):
        build_for(model(text))


def test_other_refusals() -> None:
    with pytest.raises(ShapeError, match=r"ScatterND node 'n': index 4 is outside \[-4, 3\]"):
        build_for(scatter(DATA, np.array([[4]], np.int64), np.zeros((1, 3, 2), np.float32)))
    with pytest.raises(ShapeError, match="the indices' last extent 4 exceeds the data's rank 3"):
        build_for(scatter(DATA, np.zeros((1, 4), np.int64), np.zeros((1,), np.float32)))
    with pytest.raises(ShapeError, match="the indices are a scalar"):
        build_for(scatter(DATA, np.array(0, np.int64), np.zeros((3, 2), np.float32)))
    with pytest.raises(ShapeError, match="the indices have element type i32; ONNX needs i64"):
        build_for(scatter(DATA, np.zeros((1, 1), np.int32), np.zeros((1, 3, 2), np.float32)))
    with pytest.raises(UnsupportedError, match="ScatterND node 'n': reduction 'mean'"):
        build_for(scatter(DATA, np.zeros((1, 1), np.int64), np.zeros((1, 3, 2), np.float32), reduction="mean"))
    with pytest.raises(ModelError, match="attribute 'reduction' is not defined for ScatterND at opset 13"):
        build_for(scatter(DATA, np.zeros((1, 1), np.int64), np.zeros((1, 3, 2), np.float32), reduction="add",
                          opset=13))  # fmt: skip
    text = """
    g (float[B, S] x, int64[N, K] idx, float[N] u) => (float[?, ?] y) {
        y = ScatterND (x, idx, u)
    }"""
    with pytest.raises(UnsupportedError, match="the indices' last extent is K"):
        build_for(model(text))


@pytest.mark.parametrize(
    ("indices", "updates", "message"),
    [
        ("N: 2, K: 1", "N: 2, Y: 5", r"the updates' extents are not indices\[:-1\] \+ data\[k:\]"),
        ("N: 2, K: 3", "N: 2", "the indices' last extent 3 is not a number <= rank"),
        ("N: 2, K: 2", "N: 2, Y: 3", "the updates' rank is not"),
    ],
)
def test_the_kernel_op_verifies_its_extents(indices: str, updates: str, message: str) -> None:
    from xdsl.parser import Parser
    from xdsl.utils.exceptions import VerifyException

    from loam.frontends.context import make_context

    x, i, u = (
        f"!tensor_axes.tensor<{e}, [{a}]>" for e, a in (("f32", "X: 4, Y: 3"), ("i64", indices), ("f32", updates))
    )
    text = (
        f'kernel.program "forward" (%x : {x}, %i : {i}, %u : {u}) names ["x", "i", "u"] {{\n'
        f'  %y = kernel.scatter_nd(%x, %i, %u) {{node = "s", reduction = "none"}} : ({x}, {i}, {u}) -> {x}\n'
        f'  kernel.return %y names ["y"] : {x}\n}}'
    )
    module = Parser(make_context(), text).parse_module()
    with pytest.raises(VerifyException, match=f"kernel.scatter_nd 's': {message}"):
        module.verify()
