"""What `loam.driver.pipeline.build` refuses, and how it says so.

Every refusal is a `LoamError` subclass whose message names the culprit (node, operator, tensor,
axis, extent, option); each test builds a small model with `onnx.helper` and asserts both the
class and the message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import save_file

from loam.core.errors import (
    AxisError,
    CheckpointError,
    LoamError,
    ModelError,
    OptionsError,
    ShapeError,
    UnsupportedError,
)
from loam.core.layout import LayoutRule
from loam.driver.options import Options
from loam.driver.pipeline import build

Dims = Sequence[int | str | None]


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, Dims],
    outputs: Mapping[str, Dims | None],
    initializers: Mapping[str, np.ndarray] | None = None,
    elem: int = TensorProto.FLOAT,
    opsets: Mapping[str, int] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "g",
        [helper.make_tensor_value_info(name, elem, list(dims)) for name, dims in inputs.items()],
        [
            helper.make_tensor_value_info(name, elem, None if dims is None else list(dims))
            for name, dims in outputs.items()
        ],
        [numpy_helper.from_array(array, name) for name, array in (initializers or {}).items()],
    )
    opset_imports = [helper.make_opsetid(domain, v) for domain, v in {"": 17, **(opsets or {})}.items()]
    model = helper.make_model(graph, opset_imports=opset_imports)
    model.ir_version = 8
    return model


def layout(**axes: Sequence[str]) -> Options:
    return Options(layout=tuple(LayoutRule(name, tuple(names)) for name, names in axes.items()))


def refused(kind: type[LoamError], message: str, model: onnx.ModelProto, **kwargs: object) -> LoamError:
    """Build `model`; it must stop with `kind` whose message contains `message` (a literal)."""
    with pytest.raises(kind, match=re.escape(message)) as info:
        build(model, **kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, LoamError)
    return info.value


def matmul_model(x: Dims = (3, 4), w: tuple[int, ...] = (4, 5)) -> onnx.ModelProto:
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")
    return make_model([node], {"x": x}, {"y": None}, {"w": np.ones(w, np.float32)})


W = np.arange(20, dtype=np.float32).reshape(4, 5)


# -- operators ----------------------------------------------------------------------------------------


def test_unknown_operator_names_the_node_and_op_type() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="act"),
        helper.make_node("TfIdfVectorizer", ["h"], ["y"], name="probs"),
    ]
    model = make_model(nodes, {"x": (2, 3)}, {"y": (2, 3)})
    refused(
        UnsupportedError,
        "node 'probs' uses operator 'TfIdfVectorizer', which Loam does not compile",
        model,
        options=layout(x=("B", "N")),
    )


def test_unknown_operator_of_another_domain_is_qualified() -> None:
    node = helper.make_node("Fuse", ["x"], ["y"], name="fused", domain="com.acme")
    model = make_model([node], {"x": (2, 3)}, {"y": None}, opsets={"com.acme": 1})
    refused(UnsupportedError, "node 'fused' uses operator 'com.acme.Fuse'", model, options=layout(x=("B", "N")))


def test_unknown_operator_without_a_node_name_is_named_by_its_output() -> None:
    model = make_model([helper.make_node("TfIdfVectorizer", ["x"], ["tfidf_out"])], {"x": (2, 3)}, {"tfidf_out": None})
    refused(UnsupportedError, "node 'tfidf_out' uses operator 'TfIdfVectorizer'", model, options=layout(x=("B", "N")))


# -- axis naming ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "tensor"),
    [(layout(x=("M", "K")), "w"), (layout(w=("K", "N")), "x")],
    ids=["weight", "input"],
)
def test_layout_gap_names_the_tensor(options: Options, tensor: str) -> None:
    refused(
        AxisError, f"tensor '{tensor}' (rank 2): no layout rule names its axes 0, 1", matmul_model(), options=options
    )


def test_layout_rule_of_the_wrong_rank() -> None:
    refused(
        AxisError,
        "tensor 'w' has rank 2, but layout rule 'w*' names 1 axes (K)",
        matmul_model(),
        options=Options(layout=(LayoutRule("x", ("M", "K")), LayoutRule("w*", ("K",)))),
    )


def test_axis_clash_in_a_contraction_names_both_axes_and_the_node() -> None:
    refused(
        AxisError,
        "MatMul node 'proj': contracts axis K of the first operand with axis J of the second",
        matmul_model(),
        options=layout(x=("M", "K"), w=("J", "N")),
    )


def test_axis_clash_in_a_gemm_contraction_respects_transB() -> None:
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=1)
    model = make_model([node], {"x": (3, 4)}, {"y": None}, {"w": np.ones((5, 4), np.float32)})
    # With transB the contracted axis of w is its second: naming w (K, N) puts N against K.
    refused(
        AxisError,
        "Gemm node 'fc': contracts axis K of the first operand with axis N of the second",
        model,
        options=layout(x=("M", "K"), w=("K", "N")),
    )


def test_axis_clash_in_a_broadcast_names_both_axes_and_the_node() -> None:
    node = helper.make_node("Add", ["x", "b"], ["y"], name="bias")
    model = make_model([node], {"x": (3, 4)}, {"y": None}, {"b": np.ones(4, np.float32)})
    refused(
        AxisError,
        "Add node 'bias': axis Hidden meets axis Out at output axis 1",
        model,
        options=layout(x=("Batch", "Hidden"), b=("Out",)),
    )


def test_axis_clash_of_gemm_bias() -> None:
    node = helper.make_node("Gemm", ["x", "w", "c"], ["y"], name="fc")
    model = make_model(
        [node], {"x": (3, 4)}, {"y": None}, {"w": np.ones((4, 5), np.float32), "c": np.ones(5, np.float32)}
    )
    refused(
        AxisError,
        "Gemm node 'fc': axis N meets axis Out at output axis 1",
        model,
        options=layout(x=("M", "K"), w=("K", "N"), c=("Out",)),
    )


def test_one_name_on_two_axes_of_one_tensor_is_one_axis() -> None:
    # [M, K] @ [K, M] gives [M, M]: one name on two axes is allowed where the extents agree ...
    result = build(matmul_model(x=(3, 4), w=(4, 3)), options=layout(x=("M", "K"), w=("K", "M")))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = result.module.forward(result.module.Weights.embedded(), x)
    np.testing.assert_array_equal(got, x @ np.ones((4, 3), np.float32))


def test_one_name_on_two_axes_of_different_extents_is_refused() -> None:
    # ... and refused where they do not: one name is one axis.
    refused(
        AxisError,
        "tensor 'y': axis M is 3 long at axis 0 and 5 long at axis 1 by MatMul node 'proj'",
        matmul_model(x=(3, 4), w=(4, 5)),
        options=layout(x=("M", "K"), w=("K", "M")),
    )
    refused(
        AxisError,
        "tensor 'w': axis K is 4 long at axis 0 and 5 long at axis 1 by layout rule 'w'",
        matmul_model(w=(4, 5)),
        options=layout(x=("M", "K"), w=("K", "K")),
    )


# -- extents ----------------------------------------------------------------------------------------


def test_contraction_extent_mismatch() -> None:
    refused(
        ShapeError,
        "MatMul node 'proj': contracted extents disagree: 6 in the first operand, 4 in the second",
        matmul_model(x=(3, 6)),
        options=layout(x=("M", "K"), w=("K", "N")),
    )


def test_gemm_contraction_extent_mismatch_after_transA() -> None:
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transA=1)
    model = make_model([node], {"x": (3, 4)}, {"y": None}, {"w": W})
    # transA makes x [K=3, M=4] -> contracted extent 3 against w's 4.
    refused(
        ShapeError,
        "Gemm node 'fc': contracted extents disagree: 3 in the first operand, 4 in the second",
        model,
        options=layout(x=("K", "M"), w=("K", "N")),
    )


def test_broadcast_extent_mismatch() -> None:
    node = helper.make_node("Mul", ["x", "s"], ["y"], name="scale")
    model = make_model([node], {"x": (3, 4)}, {"y": None}, {"s": np.ones(5, np.float32)})
    refused(
        ShapeError,
        "Mul node 'scale': cannot broadcast extents 4 and 5 at output axis 1",
        model,
        options=layout(x=("M", "N"), s=("N",)),
    )


def test_gemm_bias_that_does_not_stretch() -> None:
    node = helper.make_node("Gemm", ["x", "w", "c"], ["y"], name="fc")
    model = make_model([node], {"x": (3, 4)}, {"y": None}, {"w": W, "c": np.ones((2, 5), np.float32)})
    refused(
        ShapeError,
        "Gemm node 'fc': cannot broadcast extents 3 and 2 at output axis 0",
        model,
        options=layout(x=("M", "K"), w=("K", "N"), c=("Two", "N")),
    )


def test_declared_output_extent_disagrees() -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="act")], {"x": (3, 4)}, {"y": (3, 5)})
    refused(
        ShapeError, "graph output 'y' axis 1 is declared 5, the nodes produce 4", model, options=layout(x=("M", "N"))
    )


# -- options naming what the graph does not declare -------------------------------------------------------


def test_dims_option_naming_an_undeclared_dim_param() -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="act")], {"x": ("N", 4)}, {"y": ("N", 4)})
    options = Options(dims={"N": 2, "Batch": 8}, layout=(LayoutRule("x", ("B", "C")),))
    refused(OptionsError, "dims: the graph 'g' declares no dim_param 'Batch'", model, options=options)


def test_outputs_option_naming_an_undeclared_output() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="act"), helper.make_node("Tanh", ["h"], ["y"], name="t")]
    model = make_model(nodes, {"x": (3, 4)}, {"y": None})
    # `h` exists inside the graph but is not one of its outputs.
    options = Options(outputs=("y", "h"), layout=(LayoutRule("x", ("M", "N")),))
    refused(OptionsError, "outputs: the graph declares no output 'h' (it declares y)", model, options=options)


# -- element types ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elem", "op", "name"),
    [(TensorProto.FLOAT8E4M3FN, "Add", "f8E4M3FN"), (TensorProto.STRING, "Mul", "string")],
)
def test_arithmetic_in_an_unsupported_type_names_the_element_type(elem: int, op: str, name: str) -> None:
    model = make_model(
        [helper.make_node(op, ["a", "b"], ["y"], name="arith")], {"a": (3,), "b": (3,)}, {"y": None}, elem=elem
    )
    refused(
        UnsupportedError,
        f"{op} node 'arith': computes in element type {name}; Loam computes it in f32, f64",
        model,
        options=layout(a=("N",), b=("N",)),
    )


def test_matmul_in_an_unsupported_type_names_the_element_type() -> None:
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    model = make_model([node], {"a": (3, 4), "b": (4, 2)}, {"y": None}, elem=TensorProto.INT8)
    refused(
        UnsupportedError,
        "MatMul node 'mm': operands have element type i8; Loam computes MatMul in f32",
        model,
        options=layout(a=("M", "K"), b=("K", "N")),
    )


def test_mixed_element_types_are_refused() -> None:
    node = helper.make_node("Add", ["x", "b"], ["y"], name="bias")
    model = make_model([node], {"x": (3,)}, {"y": None}, {"b": np.ones(3, np.float64)})
    refused(
        ShapeError,
        "Add node 'bias': operands have element types f32 and f64",
        model,
        options=layout(x=("N",), b=("N",)),
    )


# -- checkpoint headers ---------------------------------------------------------------------------------


def stripped_matmul() -> onnx.ModelProto:
    """`y = x @ w` with w's data in an external file (the checkpoint supplies it)."""
    model = matmul_model()
    init = model.graph.initializer[0]
    init.ClearField("raw_data")
    init.ClearField("float_data")
    init.data_location = TensorProto.EXTERNAL
    entry = init.external_data.add()
    entry.key, entry.value = "location", "w.safetensors"
    return model


MATMUL_LAYOUT = layout(x=("M", "K"), w=("K", "N"))


def test_checkpoint_that_matches_builds(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"w": W, "unused": np.zeros(2, np.float32)}, str(path))
    result = build(stripped_matmul(), checkpoints=[path], options=MATMUL_LAYOUT)
    assert result.notes == [f"checkpoint {path}: 1 tensor the graph never reads: unused"]
    x = np.ones((3, 4), np.float32)
    np.testing.assert_allclose(result.module.forward(result.module.Weights.load(path.read_bytes()), x), x @ W)


def test_checkpoint_missing_a_tensor(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"weight": W}, str(path))
    refused(
        CheckpointError,
        f"checkpoint {path}: has no tensor 'w', which the graph reads",
        stripped_matmul(),
        checkpoints=[path],
        options=MATMUL_LAYOUT,
    )


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((4, 6), "tensor 'w' axis 1 (N) is 5 in the graph, 6 in the checkpoint"),
        ((3, 5), "tensor 'w' axis 0 (K) is 4 in the graph, 3 in the checkpoint"),
    ],
)
def test_checkpoint_with_a_wrong_axis_extent(tmp_path: Path, shape: tuple[int, int], message: str) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"w": np.zeros(shape, np.float32)}, str(path))
    refused(
        CheckpointError, f"checkpoint {path}: {message}", stripped_matmul(), checkpoints=[path], options=MATMUL_LAYOUT
    )


def test_checkpoint_with_a_wrong_rank(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"w": np.zeros(20, np.float32)}, str(path))
    refused(
        CheckpointError,
        "tensor 'w' has rank 1, the graph's has rank 2 (K, N)",
        stripped_matmul(),
        checkpoints=[path],
        options=MATMUL_LAYOUT,
    )


def test_checkpoint_with_an_integer_tensor_for_a_float_weight(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"w": np.zeros((4, 5), np.int32)}, str(path))
    refused(
        CheckpointError,
        "tensor 'w' is i32, the graph reads it as f32",
        stripped_matmul(),
        checkpoints=[path],
        options=MATMUL_LAYOUT,
    )


def test_checkpoint_file_that_does_not_exist(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.safetensors"
    refused(
        CheckpointError,
        f"checkpoint {path}: no such file",
        stripped_matmul(),
        checkpoints=[path],
        options=MATMUL_LAYOUT,
    )


def test_checkpoint_truncated_inside_its_header(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"w": W}, str(path))
    data = path.read_bytes()
    path.write_bytes(data[:20])
    refused(
        CheckpointError,
        "runs past the end of the file (20 bytes)",
        stripped_matmul(),
        checkpoints=[path],
        options=MATMUL_LAYOUT,
    )


def test_checkpoint_named_in_the_options(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"w": np.zeros((4, 6), np.float32)}, str(path))
    options = Options(layout=MATMUL_LAYOUT.layout, checkpoints=(path,))
    refused(
        CheckpointError,
        "tensor 'w' axis 1 (N) is 5 in the graph, 6 in the checkpoint",
        stripped_matmul(),
        options=options,
    )


def test_tensor_in_two_checkpoint_shards(tmp_path: Path) -> None:
    first, second = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file({"w": W}, str(first))
    save_file({"w": W}, str(second))
    refused(
        CheckpointError,
        f"tensor 'w' is in two checkpoints: {first} and {second}",
        stripped_matmul(),
        checkpoints=[first, second],
        options=MATMUL_LAYOUT,
    )


def test_an_attribute_onnx_does_not_define_for_the_operator_is_refused() -> None:
    # One rule computes MaxPool, AveragePool and LpPool; LpPool's `p` on an AveragePool is not ONNX.
    node = helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[2], p=3)
    model = make_model([node], {"x": (1, 1, 4)}, {"y": None})
    refused(
        ModelError,
        "AveragePool node 'pool': attribute 'p' is not defined for AveragePool at opset 17",
        model,
        options=layout(x=("N", "C", "W"), y=("N", "C", "W2")),
    )
