"""A graph input's dim with neither a value nor a name (ONNX allows it; Silero VAD's export leaves its batch
so, and onnxruntime runs such a graph at any extent) becomes a symbol of its own, `TENSOR_dimAXIS`, which the
module reads from the input it is fed, with a build note; `dims` fixes it, `loam layout` drafts its axis."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import loam
from loam.core.errors import OptionsError, ShapeError
from loam.core.layout import LayoutRule
from loam.driver.draft import draft_layout
from loam.driver.options import Options


def unnamed(name: str, dims: list[int | str | None]) -> onnx.ValueInfoProto:
    """A tensor value info whose `None` dims carry neither a dim_value nor a dim_param."""
    info = helper.make_tensor_value_info(name, TensorProto.FLOAT, [d if d is not None else 1 for d in dims])
    for axis, dim in enumerate(dims):
        if dim is None:
            info.type.tensor_type.shape.dim[axis].ClearField("dim_value")
    return info


def model(
    x: list[int | str | None], b: list[int | str | None], y: list[int | str | None] | None = None
) -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "b"], ["y"], name="add")]
    outputs = [unnamed("y", y or [None, 4])]
    graph = helper.make_graph(nodes, "g", [unnamed("x", x), unnamed("b", b)], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


LAYOUT = Options(
    layout=(LayoutRule("x", ("Rows", "Cols")), LayoutRule("b", ("Cols",)), LayoutRule("y", ("Rows", "Cols")))
)


def test_an_unnamed_dim_is_a_symbol_read_at_run_time_and_matches_onnxruntime() -> None:
    m = model([None, 4], [4])
    assert not m.graph.input[0].type.tensor_type.shape.dim[0].HasField("dim_param")
    result = loam.build(m, options=LAYOUT)
    assert result.notes == [
        "graph inputs declare dims with neither a value nor a name; each is a symbol of its own, read from the "
        "input at run time: 'x' axis 0 is x_dim0 (fix one with the `dims` option, name it with `interface`)"
    ]
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    weights = result.module.Weights()
    rng = np.random.default_rng(0)
    b = rng.standard_normal(4).astype(np.float32)
    for rows in (1, 3, 7):  # one build, every extent
        x = rng.standard_normal((rows, 4)).astype(np.float32)
        got = np.asarray(result.module.forward(weights, x, b))
        np.testing.assert_array_equal(got, session.run(None, {"x": x, "b": b})[0])


def test_two_unnamed_dims_are_two_symbols_so_a_mismatch_is_a_shape_error_at_run_time() -> None:
    result = loam.build(model([None, 4], [None, 4]), options=Options(layout=(LayoutRule("*", ("Rows", "Cols")),)))
    weights = result.module.Weights()
    x, b = np.ones((3, 4), np.float32), np.ones((2, 4), np.float32)
    with pytest.raises(result.module.ShapeError, match=r"x_dim0|b_dim0"):
        result.module.forward(weights, x, b)


def test_the_fresh_name_is_unlike_every_declared_one_and_dims_fixes_it() -> None:
    m = model([None, "x_dim0"], ["x_dim0"], [None, "x_dim0"])
    result = loam.build(m, options=Options(dims={"x_dim0_": 5}, layout=LAYOUT.layout))
    assert "'x' axis 0 is x_dim0_ " in result.notes[0]
    weights = result.module.Weights()
    x, b = np.ones((5, 3), np.float32), np.ones(3, np.float32)
    assert np.asarray(result.module.forward(weights, x, b)).shape == (5, 3)
    with pytest.raises(result.module.ShapeError):
        result.module.forward(weights, np.ones((4, 3), np.float32), b)  # fixed at 5 by `dims`


def test_a_tensor_name_is_spelled_as_an_identifier_in_its_dims_name() -> None:
    m = model([None, 4], [4])
    for node_input in (m.graph.input[0], m.graph.node[0]):
        if isinstance(node_input, onnx.ValueInfoProto):
            node_input.name = "/model/in + 1"
    m.graph.node[0].input[0] = "/model/in + 1"
    result = loam.build(m, options=Options(layout=(LayoutRule("b", ("Cols",)), LayoutRule("*", ("Rows", "Cols")))))
    assert "'/model/in + 1' axis 0 is _model_in___1_dim0" in result.notes[0]


def test_an_option_naming_no_dim_still_stops_the_build() -> None:
    with pytest.raises(OptionsError, match="declares no dim_param 'x_dim1'"):
        loam.build(model([None, 4], [4]), options=Options(dims={"x_dim1": 2}, layout=LAYOUT.layout))


def test_loam_layout_drafts_an_axis_for_it() -> None:
    draft = draft_layout(model([None, 4], [4]))
    rule = next(r for r in draft.rules if r.pattern == "x")
    assert len(rule.axes) == 2 and all(rule.axes), rule
    result = loam.build(model([None, 4], [4]), options=draft.options())
    x, b = np.ones((6, 4), np.float32), np.ones(4, np.float32)
    assert np.asarray(result.module.forward(result.module.Weights(), x, b)).shape == (6, 4)


def test_an_input_with_no_shape_at_all_is_still_refused() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="act")], "g", [x], [unnamed("y", [None])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ShapeError, match="graph input 'x' has no shape"):
        loam.build(m, options=Options(layout=(LayoutRule("*", ("N",)),)))
