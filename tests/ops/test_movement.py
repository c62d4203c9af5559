"""Movement operators against onnxruntime: one-node models over small shapes, element types, old opsets.

Shape operands are integer initializers (known at build time, as Loam needs them); refusals are
checked by message.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import loam.core.errors
from loam.testing import assert_same, run_loam, run_onnxruntime


def one_node(
    op: str,
    x: np.ndarray,
    consts: dict[str, np.ndarray | None] | None = None,
    attrs: dict[str, Any] | None = None,
    outputs: int = 1,
    opset: int = 18,
    out_type: int | None = None,
) -> onnx.ModelProto:
    """`op` over graph input `x` and the given initializers (None: an absent optional input)."""
    consts = consts or {}
    inits = [numpy_helper.from_array(np.asarray(v), name=k) for k, v in consts.items() if v is not None]
    names = ["x"] + [k if v is not None else "" for k, v in consts.items()]
    node = helper.make_node(op, names, [f"y{i}" for i in range(outputs)], name="n", **(attrs or {}))
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, x.shape)],
        [helper.make_tensor_value_info(f"y{i}", out_type or elem, None) for i in range(outputs)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    got = run_loam(model, {"x": x})
    assert_same(got, run_onnxruntime(model, {"x": x}))
    return got


def i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

CASES: list[tuple[str, dict[str, np.ndarray | None], dict[str, Any], int, int]] = [
    ("Transpose", {}, {}, 1, 18),
    ("Transpose", {}, {"perm": [1, 0, 2]}, 1, 18),
    ("Reshape", {"s": i64(0, -1)}, {}, 1, 18),
    ("Reshape", {"s": i64(4, 3, 2)}, {}, 1, 14),
    ("Reshape", {}, {"shape": [6, 4]}, 1, 4),
    ("Flatten", {}, {}, 1, 18),
    ("Flatten", {}, {"axis": -1}, 1, 18),
    ("Flatten", {}, {"axis": 0}, 1, 9),
    ("Unsqueeze", {"a": i64(0, -1)}, {}, 1, 18),
    ("Unsqueeze", {}, {"axes": [1]}, 1, 11),
    ("Expand", {"s": i64(2, 1, 1, 4)}, {}, 1, 18),
    ("Concat", {"c": np.ones((2, 1, 4), np.float32)}, {"axis": 1}, 1, 18),
    ("Concat", {"c": np.ones((2, 3, 1), np.float32)}, {"axis": -1}, 1, 11),
    ("Split", {"s": i64(1, 2)}, {"axis": 1}, 2, 18),
    ("Split", {}, {"axis": 2, "num_outputs": 3}, 3, 18),
    ("Split", {}, {"axis": 2}, 2, 13),
    ("Split", {}, {"axis": 1, "split": [2, 1]}, 2, 11),
    ("Slice", {"s": i64(1), "e": i64(2**63 - 1)}, {}, 1, 18),
    ("Slice", {"s": i64(-1, 0), "e": i64(-100, 9), "a": i64(2, 1), "st": i64(-2, 2)}, {}, 1, 18),
    ("Slice", {}, {"starts": [0, 1], "ends": [1, 100], "axes": [0, 2]}, 1, 9),
    ("Pad", {"p": i64(0, 1, 2, 1, 0, 2)}, {"mode": "constant"}, 1, 18),
    ("Pad", {"p": i64(0, 1, -1, 1, 0, 2), "v": np.array(7.5, np.float32)}, {}, 1, 18),
    ("Pad", {"p": i64(1, 2, 2, 1), "v": None, "a": i64(1, -1)}, {"mode": "reflect"}, 1, 18),
    ("Pad", {"p": i64(0, 1, 2, 1, 0, -2)}, {"mode": "edge"}, 1, 18),
    ("Pad", {"p": i64(0, 1, 2, 1, 0, 2)}, {"mode": "wrap"}, 1, 19),
    ("Pad", {}, {"pads": [0, 0, 1, 0, 0, 1], "value": 2.0}, 1, 2),
    ("Tile", {"r": i64(1, 2, 3)}, {}, 1, 18),
    ("Trilu", {}, {}, 1, 18),
    ("Trilu", {"k": np.array(-1, np.int64)}, {"upper": 0}, 1, 18),
    ("Identity", {}, {}, 1, 18),
    ("Dropout", {}, {}, 2, 18),
    ("Dropout", {}, {"ratio": 0.3}, 1, 7),
]


@pytest.mark.parametrize(("op", "consts", "attrs", "outputs", "opset"), CASES)
def test_against_onnxruntime(
    op: str, consts: dict[str, np.ndarray | None], attrs: dict[str, Any], outputs: int, opset: int
) -> None:
    model = one_node(op, X, consts, attrs, outputs, opset)
    if op == "Dropout" and outputs == 2:
        model.graph.output[1].type.tensor_type.elem_type = onnx.TensorProto.BOOL
    check(model, X)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_round_trip(mode: str) -> None:
    x = np.arange(2 * 8 * 2 * 3, dtype=np.float32).reshape(2, 8, 2, 3)
    check(one_node("DepthToSpace", x, {}, {"blocksize": 2, "mode": mode}), x)
    y = np.arange(2 * 2 * 4 * 6, dtype=np.float32).reshape(2, 2, 4, 6)
    check(one_node("SpaceToDepth", y, {}, {"blocksize": 2}, opset=13), y)


def test_squeeze_forms() -> None:
    x = X.reshape(1, 2, 1, 12)
    check(one_node("Squeeze", x, {"a": i64(2)}), x)
    check(one_node("Squeeze", x), x)
    check(one_node("Squeeze", x, {}, {"axes": [0]}, opset=11), x)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_])
def test_element_types(dtype: type) -> None:
    x = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    check(one_node("Transpose", x), x)
    check(one_node("Concat", x, {"c": np.ones((2, 1, 4), dtype)}, {"axis": 1}), x)
    check(one_node("Slice", x, {"s": i64(1), "e": i64(3), "a": i64(2)}), x)
    check(one_node("Reshape", x, {"s": i64(-1)}), x)
    check(one_node("Expand", x, {"s": i64(2, 2, 3, 4)}), x)
    check(one_node("Split", x, {}, {"axis": 1, "num_outputs": 2}, outputs=2), x)


def test_bfloat16_moves_unchanged() -> None:
    import ml_dtypes

    from loam.runtime.kernels.movement import kernel_pad, kernel_slice

    x = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
    y = kernel_pad(x, pads=(0, 1, 0, 1), mode="constant", value=1.5)
    assert y.dtype == x.dtype and y.shape == (2, 5) and float(y[0, 0]) == 1.5
    assert kernel_slice(x, starts=(1, 2), counts=(1, 3), steps=(1, -1)).tolist() == x[1:, ::-1].tolist()


def test_folds_known_shapes() -> None:
    # Shape -> Slice -> Concat -> Reshape: the shape arithmetic folds; only the Reshape runs.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Shape", ["x"], ["s2"], name="shape2", start=-1),
        helper.make_node("Slice", ["s", "zero", "one"], ["lead"], name="lead"),
        helper.make_node("Concat", ["lead", "minus"], ["target"], name="cat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
        helper.make_node("Size", ["x"], ["n"], name="size"),
    ]
    inits = [numpy_helper.from_array(i64(0), "zero"), numpy_helper.from_array(i64(1), "one"),
             numpy_helper.from_array(i64(-1), "minus")]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, X.shape)],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("y", 1), ("s2", 7), ("n", 7))],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    got = check(model, X)
    assert got[0].shape == (2, 12)


def test_reverse_sequence_of_known_values_folds() -> None:
    # Integer data and lengths as initializers: stage 0 knows both and computes the reversal itself.
    data = np.arange(12, dtype=np.int64).reshape(3, 4)
    nodes = [
        helper.make_node("ReverseSequence", ["data", "lens"], ["r"], name="rev", batch_axis=1, time_axis=0),
        helper.make_node("Add", ["r", "x"], ["y"], name="add"),
    ]
    inits = [numpy_helper.from_array(data, "data"), numpy_helper.from_array(i64(1, 2, 3, 3), "lens")]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.INT64, data.shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT64, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (got,) = check(model, np.zeros_like(data))
    assert got.tolist() == [[0, 5, 10, 11], [4, 1, 6, 7], [8, 9, 2, 3]]


def refuse(model: onnx.ModelProto, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        run_loam(model, {"x": X})


def test_refusals() -> None:
    runtime_shape = one_node("Reshape", X, {"s": None})
    runtime_shape.graph.node[0].input[1] = "x_shape"
    # A shape only the run gives is read at run time, but its length (the result's rank) the build must know.
    runtime_shape.graph.input.append(helper.make_tensor_value_info("x_shape", onnx.TensorProto.INT64, ["R"]))
    refuse(
        runtime_shape, loam.core.errors.UnsupportedError, "Reshape node 'n': the shape input is computed at run time"
    )
    refuse(
        one_node("Reshape", X, {"s": i64(5, -1)}), loam.core.errors.ShapeError, "Reshape node 'n': cannot reshape 24"
    )
    refuse(one_node("Tile", X, {"t": i64(2), "a": i64(0)}, opset=5), loam.core.errors.UnsupportedError, "opset 6")
    refuse(one_node("Pad", X, {"p": i64(0, 0, 1, 0, 0, 1)}, {"mode": "mirror"}), loam.core.errors.UnsupportedError,
           "mode 'mirror'")  # fmt: skip
    refuse(one_node("Dropout", X, {}, {"is_test": 0}, opset=6), loam.core.errors.UnsupportedError, "is_test=0")
    refuse(one_node("Dropout", X, {"r": np.array(0.5, np.float32), "t": np.array(True)}),
           loam.core.errors.UnsupportedError, "training_mode is true")  # fmt: skip
    refuse(one_node("Concat", X, {}, {}, opset=11), loam.core.errors.ShapeError, "has no axis attribute")
    refuse(one_node("Squeeze", X, {"a": i64(1)}), loam.core.errors.ShapeError, "cannot squeeze axis 1 of extent 3")
    refuse(one_node("Transpose", X, {}, {"perm": [0, 0, 1]}), loam.core.errors.ShapeError, "not a permutation")


def test_dropout_whose_training_mode_the_run_gives() -> None:
    """Inference, or training with ratio 0, keeps the data and an all-true mask (as onnxruntime);
    training that drops random elements is the module's DataError naming why."""
    from loam.testing import build_for, run_built

    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], name="d")
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, []),
         helper.make_tensor_value_info("t", onnx.TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None),
         helper.make_tensor_value_info("mask", onnx.TensorProto.BOOL, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    result = build_for(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    for ratio, training in ((0.5, False), (0.0, True)):
        feeds = {"x": x, "r": np.array(ratio, np.float32), "t": np.array(training)}
        got = run_built(result, feeds)
        assert_same(got, run_onnxruntime(model, feeds))
        assert got[1].all()
    with pytest.raises(result.module.DataError, match=r"training mode with ratio 0\.5 drops random elements"):
        run_built(result, {"x": x, "r": np.array(0.5, np.float32), "t": np.array(True)})


def test_regroup_names_merges() -> None:
    from loam.dialects.tensor_axes import Axis
    from loam.ops.regroup import regroup_axes

    n, c, h, w = (Axis.named(a, e) for a, e in (("N", 2), ("C", 3), ("H", 4), ("W", 5)))
    merged = regroup_axes((n, c, h, w), [2, 60])
    assert merged[0] == n and merged[1] is not None and merged[1].name == "(C H W)"
    back = regroup_axes((n, merged[1]), [2, 3, 4, 5])
    assert [a.name for a in back if a is not None] == ["N", "C", "H", "W"]
    assert regroup_axes((n, c, Axis.named("One", 1)), [2, 3]) == (n, c)
    assert regroup_axes((n, c), [6])[0] is not None
    assert regroup_axes((n, c), [3, 2]) == (None, None)


# -- Robustness regressions (found by tests/test_robustness.py's mutation sweep) ---------------------------


def test_trilu_k_must_hold_one_value() -> None:
    refuse(one_node("Trilu", X, {"k": np.zeros(0, np.int64)}), loam.core.errors.ShapeError, "k must be an i64 scalar")
    refuse(one_node("Trilu", X, {"k": i64(1, 2)}), loam.core.errors.ShapeError, "k must be an i64 scalar")


@pytest.mark.parametrize("flag", ["upper", "allowzero"])
def test_flags_other_than_0_or_1_are_refused(flag: str) -> None:
    op, consts = ("Trilu", {}) if flag == "upper" else ("Reshape", {"s": i64(4, 6)})
    refuse(one_node(op, X, consts, {flag: 2}), loam.core.errors.ShapeError, f"'{flag}' must be one of 0, 1, got 2")


def test_squeeze_with_empty_axes_is_refused_where_the_meaning_differs() -> None:
    """onnxruntime squeezes every unit axis for an empty axes input, ONNX's reference none."""
    x = np.zeros((1, 3, 1), np.float32)
    with pytest.raises(loam.core.errors.UnsupportedError, match="Squeeze node 'n': the axes given are empty"):
        run_loam(one_node("Squeeze", x, {"a": i64()}), {"x": x})
    check(one_node("Squeeze", X, {"a": i64()}), X)  # no unit axis: both readings agree


@pytest.mark.parametrize(("mode", "pads"), [("wrap", (0, 0, 1, 0, 0, -1)), ("reflect", (0, 0, 2, 0, 0, -2))])
def test_pad_whose_padding_reads_what_it_crops_is_refused(mode: str, pads: tuple[int, ...]) -> None:
    """onnxruntime crops before it wraps or reflects; ONNX does not say which comes first."""
    refuse(one_node("Pad", X, {"p": i64(*pads)}, {"mode": mode}), loam.core.errors.UnsupportedError,
           "both pad and crop axis 2")  # fmt: skip


@pytest.mark.parametrize("mode", ["wrap", "reflect", "edge", "constant"])
@pytest.mark.parametrize("pads", [(0, 0, -1, 0, 0, -2), (0, 0, 1, 0, 0, -2), (0, -1, 0, 0, 1, 0)])
def test_pad_and_crop_where_the_order_does_not_matter(mode: str, pads: tuple[int, ...]) -> None:
    if mode == "wrap" and min(pads) < 0 < max(pads):
        return
    check(one_node("Pad", X, {"p": i64(*pads)}, {"mode": mode}), X)


def test_split_num_outputs_disagreeing_with_the_outputs_is_refused_at_once() -> None:
    """A huge num_outputs listed that many sizes before the count check (the build hung)."""
    refuse(one_node("Split", X, {}, {"num_outputs": 1 << 40}, outputs=2), loam.core.errors.ShapeError,
           "num_outputs is 1099511627776, but the node has 2 outputs")  # fmt: skip
