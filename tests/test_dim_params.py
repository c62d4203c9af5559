"""dim_param spellings, their binding in forward, and the `dims` and `outputs` options, against onnxruntime.

A dim_param spelled `past + 1`, `2 * n` or `batch * seq` reads as that polynomial (`loam.dialects.dim_params`);
forward binds each name from an input axis that is the name alone, reads the others back from a
linear axis, and checks every input axis against its spelling.  Each model here runs at several
symbol values beside onnxruntime, and inputs that disagree with a spelling, or with an owed
condition, raise the module's own ShapeError.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.core.errors import ModelError, OptionsError
from loam.core.poly import Poly
from loam.dialects.dim_params import binding_plan, read_dim_param, read_spelling, spelled_shapes
from loam.dialects.kernel import ProgramOp
from loam.driver.options import Options
from loam.testing import assert_same, build_for, run_built, run_onnxruntime

RNG = np.random.default_rng(0)
P = Poly.parse


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def model(
    nodes: list[onnx.NodeProto],
    inputs: list[tuple[str, list[int | str]]],
    outputs: list[tuple[str, list[int | str] | None]],
    initializers: list[onnx.TensorProto] = (),  # type: ignore[assignment]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def ints(name: str, values: list[int]) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def input_extents(result: object) -> list[list[Poly]]:
    """The extents of forward's inputs, as the build read them."""
    for op in result.ir.walk():  # type: ignore[attr-defined]
        if isinstance(op, ProgramOp):
            return [[a.extent for a in arg.type.axes] for arg in op.block.args]
    raise AssertionError("no kernel.program")


def same_as_onnxruntime(m: onnx.ModelProto, result: object, feeds: dict[str, np.ndarray]) -> None:
    assert_same(run_built(result, feeds), run_onnxruntime(m, feeds), rtol=1e-5, atol=1e-5)  # type: ignore[arg-type]


# -- reading a dim_param -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("past + 1", P("past + 1")),
        ("2 * n", P("2*n")),
        ("batch * seq", P("batch*seq")),
        ("past_sequence_length + sequence_length", P("past_sequence_length + sequence_length")),
        ("a * b - 2 * c + 3", P("a*b - 2*c + 3")),  # `*` binds first
        ("n - 1", P("n - 1")),
        ("2 * 3", P("6")),
    ],
)
def test_a_spelling_reads_as_its_polynomial(text: str, want: Poly) -> None:
    assert read_dim_param(text) == want
    assert read_spelling(text) == want


@pytest.mark.parametrize("text", ["N", "seq-len", "a+1", "a +1", "a  + 1", " a + 1", "a + 1 ", "a / 2", "a + b.c", "5"])
def test_anything_else_is_one_opaque_name(text: str) -> None:
    assert read_spelling(text) is None
    assert read_dim_param(text) == Poly.symbol(text)


@pytest.mark.parametrize("text", ["min(a, 1)", "floordiv(N + 1, 2)", "max(a,b)", "wrap32(x)"])
def test_a_derived_symbols_definition_is_reserved(text: str) -> None:
    with pytest.raises(ModelError, match="reserved for the shape arithmetic"):
        read_dim_param(text)


def test_an_empty_dim_param_is_refused() -> None:
    with pytest.raises(ModelError, match="empty"):
        read_dim_param("")


def test_binding_plan_binds_lone_names_first_then_reads_back() -> None:
    # mask [1, past + 1] comes first, but past is carried alone by the later keys: bound from there.
    plan, open_names = binding_plan([[P("1"), P("past + 1")], [P("1"), P("past"), P("4")], [P("2*n + past")]])
    assert open_names == frozenset()
    assert [(b.symbol, b.input, b.axis, b.alone) for b in plan] == [("past", 1, 1, True), ("n", 2, 0, False)]
    assert (plan[1].coefficient, plan[1].rest) == (P("2"), P("past"))


def test_binding_plan_leaves_names_no_axis_yields() -> None:
    _, open_names = binding_plan([[P("batch*seq")], [P("n*n")]])
    assert open_names == {"batch", "seq", "n"}


def test_a_spelling_over_names_no_axis_yields_is_one_opaque_name() -> None:
    assert spelled_shapes([["batch * seq", 4]]) == [[Poly.symbol("batch * seq"), P("4")]]
    # With batch carried alone, seq reads back from the product: the spelling stands.
    assert spelled_shapes([["batch", 4], ["batch * seq"]]) == [[P("batch"), P("4")], [P("batch*seq")]]


# -- spelled inputs, built and run -------------------------------------------------------------------


def past_plus_one_model() -> onnx.ModelProto:
    """A decoder's boundary in miniature: past keys [1, past, 4] and a mask [1, past + 1]."""
    nodes = [
        helper.make_node("Concat", ["past_key", "x"], ["keys"], axis=1, name="/Concat"),
        helper.make_node("ReduceSum", ["keys", "axes"], ["scores"], keepdims=0, name="/ReduceSum"),
        helper.make_node("Add", ["scores", "mask"], ["y"], name="/Add"),
    ]
    return model(
        nodes,
        [("mask", [1, "past + 1"]), ("past_key", [1, "past", 4]), ("x", [1, 1, 4])],
        [("y", None)],
        [ints("axes", [2])],
    )


@pytest.mark.parametrize("past", [0, 1, 5])
def test_past_plus_one_beside_past(past: int) -> None:
    m = past_plus_one_model()
    result = build_for(m)
    assert input_extents(result)[0] == [P("1"), P("past + 1")]
    feeds = {"mask": f32(1, past + 1), "past_key": f32(1, past, 4), "x": f32(1, 1, 4)}
    same_as_onnxruntime(m, result, feeds)


def test_a_mask_that_disagrees_with_its_spelling() -> None:
    result = build_for(past_plus_one_model())
    feeds = {"mask": f32(1, 5), "past_key": f32(1, 3, 4), "x": f32(1, 1, 4)}
    with pytest.raises(result.module.ShapeError) as err:
        run_built(result, feeds)
    pattern = r"input 'mask' axis 1 \(\w+\) must be past \+ 1 = 4, got 5 \(past_key axis 1 gives past = 3\)"
    assert re.fullmatch(pattern, str(err.value)), str(err.value)


def two_n_model() -> onnx.ModelProto:
    """y is `2 * n` long and nothing carries n alone: forward reads n back as half y's length."""
    nodes = [helper.make_node("Reshape", ["y", "shape"], ["z"], name="/Reshape")]
    return model(nodes, [("y", ["2 * n", 3])], [("z", None)], [ints("shape", [2, -1])])


@pytest.mark.parametrize("n", [0, 1, 3])
def test_two_n_read_back(n: int) -> None:
    m = two_n_model()
    result = build_for(m)
    assert input_extents(result)[0] == [P("2*n"), P("3")]
    same_as_onnxruntime(m, result, {"y": f32(2 * n, 3)})


def test_two_n_of_odd_length_is_refused() -> None:
    result = build_for(two_n_model())
    with pytest.raises(
        result.module.ShapeError, match=r"input 'y' axis 0 \(\w+\) is 2\*n, got 5, which gives no whole n"
    ):
        run_built(result, {"y": f32(5, 3)})


def test_a_name_read_back_as_negative_stops_the_run() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="/Relu")]
    m = model(nodes, [("x", ["n + 2", 3])], [("y", None)])
    result = build_for(m)
    same_as_onnxruntime(m, result, {"x": f32(2, 3)})
    with pytest.raises(result.module.ShapeError, match="gives n = -1; a length cannot be negative"):
        run_built(result, {"x": f32(1, 3)})


@pytest.mark.parametrize("length", [0, 6])
def test_batch_times_seq_alone_is_one_opaque_name(length: int) -> None:
    nodes = [helper.make_node("Relu", ["y"], ["z"], name="/Relu")]
    m = model(nodes, [("y", ["batch * seq", 4])], [("z", None)])
    result = build_for(m)
    assert input_extents(result)[0] == [Poly.symbol("batch * seq"), P("4")]
    same_as_onnxruntime(m, result, {"y": f32(length, 4)})


@pytest.mark.parametrize(("batch", "seq"), [(1, 1), (2, 3), (3, 0)])
def test_batch_times_seq_beside_its_names(batch: int, seq: int) -> None:
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["flat"], name="/Reshape"),
        helper.make_node("Add", ["flat", "y"], ["z"], name="/Add"),
    ]
    m = model(nodes, [("x", ["batch", "seq", 4]), ("y", ["batch * seq", 4])], [("z", None)], [ints("shape", [-1, 4])])
    result = build_for(m)
    same_as_onnxruntime(m, result, {"x": f32(batch, seq, 4), "y": f32(batch * seq, 4)})
    with pytest.raises(result.module.ShapeError, match=rf"input 'y' axis 0 .* must be batch\*seq = {batch * seq}, got"):
        run_built(result, {"x": f32(batch, seq, 4), "y": f32(batch * seq + 1, 4)})


def test_a_dim_param_spelled_like_a_derived_symbol_stops_the_build() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="/Relu")]
    with pytest.raises(ModelError, match=r"dim_param 'min\(a, 1\)'"):
        build_for(model(nodes, [("x", ["min(a, 1)"])], [("y", None)]))


# -- owed conditions, built and run --------------------------------------------------------------------


def add_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "y"], ["z"], name="/Add")]
    return model(nodes, [("x", ["N", 4]), ("y", ["M", 4])], [("z", None)])


@pytest.mark.parametrize("n", [1, 3])
def test_an_owed_equality_holds(n: int) -> None:
    m = add_model()
    result = build_for(m)
    same_as_onnxruntime(m, result, {"x": f32(n, 4), "y": f32(n, 4)})


def test_an_owed_equality_fails_naming_node_condition_and_values() -> None:
    result = build_for(add_model())
    with pytest.raises(result.module.ShapeError) as err:
        run_built(result, {"x": f32(3, 4), "y": f32(4, 4)})
    assert str(err.value) == "M == N (Add node '/Add'); x axis 0 gives N = 3, y axis 0 gives M = 4"


# -- the dims option ---------------------------------------------------------------------------------


@pytest.mark.parametrize("past", [0, 2])
def test_dims_fixes_a_name_inside_a_spelling(past: int) -> None:
    m = past_plus_one_model()
    result = build_for(m, Options(dims={"past": past}))
    assert input_extents(result)[:2] == [[P("1"), P(str(past + 1))], [P("1"), P(str(past)), P("4")]]
    feeds = {"mask": f32(1, past + 1), "past_key": f32(1, past, 4), "x": f32(1, 1, 4)}
    same_as_onnxruntime(m, result, feeds)
    with pytest.raises(result.module.ShapeError, match=rf"input 'mask' axis 1 \(\w+\) must be {past + 1}, got"):
        run_built(result, {**feeds, "mask": f32(1, past + 2)})


def past_and_sequence_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Concat", ["past_key", "key"], ["keys"], axis=1, name="/Concat"),
        helper.make_node("Add", ["keys", "mask"], ["y"], name="/Add"),
    ]
    return model(
        nodes,
        [("past_key", [1, "past", 4]), ("key", [1, "seq", 4]), ("mask", [1, "past + seq", 1])],
        [("y", None)],
    )


def test_dims_fixing_every_name_of_a_spelling_makes_it_a_number() -> None:
    m = past_and_sequence_model()
    result = build_for(m, Options(dims={"past": 2, "seq": 3}))
    assert input_extents(result)[2] == [P("1"), P("5"), P("1")]
    same_as_onnxruntime(m, result, {"past_key": f32(1, 2, 4), "key": f32(1, 3, 4), "mask": f32(1, 5, 1)})


@pytest.mark.parametrize(("seq", "past"), [(1, 0), (3, 4)])
def test_past_plus_seq_spelled_runs(seq: int, past: int) -> None:
    m = past_and_sequence_model()
    result = build_for(m)
    feeds = {"past_key": f32(1, past, 4), "key": f32(1, seq, 4), "mask": f32(1, past + seq, 1)}
    same_as_onnxruntime(m, result, feeds)


def test_dims_fixing_part_of_a_spelling_stops_the_build() -> None:
    with pytest.raises(
        OptionsError, match=r"graph input 'mask' axis 1 is spelled 'past \+ seq'.*fixes past but not seq"
    ):
        build_for(past_and_sequence_model(), Options(dims={"past": 0}))


def test_dims_making_a_spelling_negative_stops_the_build() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="/Relu")]
    m = model(nodes, [("x", ["n - 2", 3])], [("y", None)])
    with pytest.raises(OptionsError, match=r"spelled 'n - 2', which is -1 with n = 1: a negative extent"):
        build_for(m, Options(dims={"n": 1}))


def test_dims_naming_nothing_the_graph_declares_stops_the_build() -> None:
    with pytest.raises(OptionsError, match="declares no dim_param 'sequence'"):
        build_for(past_and_sequence_model(), Options(dims={"sequence": 2}))


def test_dims_fixes_an_opaque_dim_param_whole() -> None:
    nodes = [helper.make_node("Relu", ["y"], ["z"], name="/Relu")]
    m = model(nodes, [("y", ["batch * seq", 4])], [("z", None)])
    result = build_for(m, Options(dims={"batch * seq": 6}))
    assert input_extents(result)[0] == [P("6"), P("4")]
    same_as_onnxruntime(m, result, {"y": f32(6, 4)})


# -- the outputs option ------------------------------------------------------------------------------


def two_outputs_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="/Relu"),
        helper.make_node("Neg", ["x"], ["n"], name="/Neg"),
        helper.make_node("Sigmoid", ["x"], ["s"], name="/Sigmoid"),
    ]
    return model(nodes, [("x", ["N", 3])], [("s", None), ("r", None), ("n", None)])


def test_several_outputs_come_back_as_outputs_in_declared_order() -> None:
    m = two_outputs_model()
    result = build_for(m)
    x = f32(2, 3)
    out = result.module.forward(result.module.Weights.embedded(), x)
    assert type(out).__name__ == "Outputs" and out._fields == ("s", "r", "n")
    assert_same(list(out), run_onnxruntime(m, {"x": x}), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out.r, np.maximum(x, 0))


def test_outputs_cuts_the_graph_in_the_order_named() -> None:
    m = two_outputs_model()
    result = build_for(m, Options(outputs=("n", "s")))
    x = f32(4, 3)
    out = result.module.forward(result.module.Weights.embedded(), x)
    assert out._fields == ("n", "s")
    np.testing.assert_allclose(out.n, -x)
    assert "/Relu" not in result.source
    one = build_for(m, Options(outputs=("r",)))
    single = one.module.forward(one.module.Weights.embedded(), x)
    assert isinstance(single, np.ndarray)
    np.testing.assert_array_equal(single, np.maximum(x, 0))


def test_outputs_naming_an_undeclared_output_stops_the_build() -> None:
    with pytest.raises(OptionsError, match=r"outputs: the graph declares no output 'logits' \(it declares s, r, n\)"):
        build_for(two_outputs_model(), Options(outputs=("logits",)))
