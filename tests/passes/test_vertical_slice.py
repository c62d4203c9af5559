"""The whole vertical slice over static shapes, checked against onnxruntime.

Each model is written with `onnx.helper`, compiled by `loam.driver.pipeline.build` twice and run on random
inputs from a fixed seed:

- with its weights as initializers, run with `Weights.embedded()`;
- stripped (every initializer's data moved to a safetensors file written by `safetensors.numpy`),
  built against that checkpoint's header and run with `Weights.load(bytes)`.

onnxruntime, running the original model, is the oracle (rtol 1e-5, atol 1e-6).  The last sections
check what the generated module refuses at run time: `forward`'s `ShapeError` and
`Weights.load`'s `LoadError`, with their messages.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import save as save_safetensors

from loam.core.layout import LayoutRule
from loam.driver.options import Options
from loam.driver.pipeline import BuildResult, build
from loam.testing import assert_same, run_onnxruntime

RTOL, ATOL = 1e-5, 1e-6
OPSET = 17
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "mlp"

Shape = tuple[int, ...]
Layout = Mapping[str, Sequence[str]]


# -- building models and running them ---------------------------------------------------------------


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, Shape],
    outputs: Sequence[str],
    initializers: Mapping[str, np.ndarray] | None = None,
    elem: int = TensorProto.FLOAT,
) -> onnx.ModelProto:
    """A checked opset-17 model; ONNX shape inference declares the outputs' shapes."""
    graph = helper.make_graph(
        list(nodes),
        "slice",
        [helper.make_tensor_value_info(name, elem, list(shape)) for name, shape in inputs.items()],
        [helper.make_tensor_value_info(name, elem, None) for name in outputs],
        [numpy_helper.from_array(array, name) for name, array in (initializers or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.value_info[:]
    onnx.checker.check_model(model)
    return model


def rules(layout: Layout) -> tuple[LayoutRule, ...]:
    """One exact-name rule per entry (an exact name is a glob that matches only itself)."""
    return tuple(LayoutRule(name, tuple(axes)) for name, axes in layout.items())


def random_inputs(model: onnx.ModelProto, seed: int = 0, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = np.asarray(scale * rng.standard_normal(shape), dtype=np.float32)
    return feeds


def strip(model: onnx.ModelProto, location: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model with every initializer's data moved out (external data in `location`), and that data."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    weights: dict[str, np.ndarray] = {}
    for init in stripped.graph.initializer:
        weights[init.name] = numpy_helper.to_array(init)
        init.ClearField("raw_data")
        init.ClearField("float_data")
        init.data_location = TensorProto.EXTERNAL
        entry = init.external_data.add()
        entry.key, entry.value = "location", location
    return stripped, weights


def as_list(result: object) -> list[object]:
    return list(result) if isinstance(result, tuple) else [result]


def assert_matches(got: Sequence[object], want: Sequence[np.ndarray]) -> None:
    for g in got:
        assert isinstance(g, np.ndarray), f"forward returned {type(g).__name__}, not an ndarray"
    assert_same(got, want, RTOL, ATOL)  # type: ignore[arg-type]


def check_model(
    model: onnx.ModelProto,
    layout: Layout,
    tmp_path: Path,
    *,
    seed: int = 0,
    scale: float = 1.0,
    given: Mapping[str, np.ndarray] | None = None,
) -> tuple[BuildResult, BuildResult]:
    """Build `model` embedded and stripped + checkpoint; both must match onnxruntime.

    The inputs are random (`seed`, `scale`) except those `given`.
    """
    feeds = {**random_inputs(model, seed, scale), **(given or {})}
    want = run_onnxruntime(model, feeds)
    options = Options(layout=rules(layout))

    embedded = build(model, options=options)
    module = embedded.module
    assert_matches(as_list(module.forward(module.Weights.embedded(), *feeds.values())), want)

    stripped, weights = strip(model, "weights.safetensors")
    checkpoint = tmp_path / "weights.safetensors"
    checkpoint.write_bytes(save_safetensors(weights))
    loaded = build(stripped, checkpoints=[checkpoint], options=options)
    module = loaded.module
    if model.graph.initializer:
        assert not hasattr(module.Weights, "embedded"), "a stripped graph carries no weight to embed"
    assert_matches(as_list(module.forward(module.Weights.load(checkpoint.read_bytes()), *feeds.values())), want)
    return embedded, loaded


def weight(shape: Shape, seed: int) -> np.ndarray:
    return np.random.default_rng(1000 + seed).standard_normal(shape).astype(np.float32)


def away_from_zero(shape: Shape, seed: int) -> np.ndarray:
    """A divisor: magnitudes in [0.5, 2], random signs."""
    rng = np.random.default_rng(2000 + seed)
    return (rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


def ir_text(result: BuildResult) -> str:
    """The kernel program's text (without the module's attributes, such as stage 0's record of every node)."""
    from loam.dialects.kernel import ProgramOp

    return "\n".join(str(op) for op in result.ir.walk() if isinstance(op, ProgramOp))


# -- 1. Gemm ----------------------------------------------------------------------------------------

M, K, N = 3, 4, 5

# C's shape and the axis names the layout gives it (a unit axis may carry a name of its own).
C_CASES: dict[str, tuple[Shape, tuple[str, ...]]] = {
    "C[N]": ((N,), ("N",)),
    "C[M,1]": ((M, 1), ("M", "One")),
    "C[1,N]": ((1, N), ("One", "N")),
    "C[M,N]": ((M, N), ("M", "N")),
    "C[1]": ((1,), ("One",)),
    "C[]": ((), ()),
}


def gemm_model(
    trans_a: int, trans_b: int, c_shape: Shape | None, attrs: Mapping[str, float]
) -> tuple[onnx.ModelProto, dict[str, tuple[str, ...]]]:
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)
    layout: dict[str, tuple[str, ...]] = {
        "a": ("K", "M") if trans_a else ("M", "K"),
        "b": ("N", "K") if trans_b else ("K", "N"),
    }
    inits = {"b": weight(b_shape, 1)}
    names = ["a", "b"]
    if c_shape is not None:
        inits["c"] = weight(c_shape, 2)
        names.append("c")
    node = helper.make_node("Gemm", names, ["y"], name="gemm", transA=trans_a, transB=trans_b, **attrs)
    return make_model([node], {"a": a_shape}, ["y"], inits), layout


@pytest.mark.parametrize("c_case", list(C_CASES))
@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_transposes_and_bias_shapes(trans_a: int, trans_b: int, c_case: str, tmp_path: Path) -> None:
    c_shape, c_axes = C_CASES[c_case]
    model, layout = gemm_model(trans_a, trans_b, c_shape, {"alpha": 0.75, "beta": -1.25})
    check_model(model, {**layout, "c": c_axes}, tmp_path)


@pytest.mark.parametrize(
    ("c_case", "attrs"),
    [
        ("C[N]", {}),  # the defaults: alpha = beta = 1
        ("C[M,N]", {"alpha": 2.0}),
        ("C[M,1]", {"beta": 3.0}),
        ("C[N]", {"alpha": -0.5, "beta": 0.0}),  # beta = 0: C is not read at all
        (None, {}),
        (None, {"alpha": 1.5}),
        (None, {"alpha": 1.5, "beta": 4.0}),  # beta without C means nothing
    ],
)
@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 1), (1, 0)])
def test_gemm_alpha_beta(
    trans_a: int, trans_b: int, c_case: str | None, attrs: dict[str, float], tmp_path: Path
) -> None:
    c_shape, c_axes = C_CASES[c_case] if c_case is not None else (None, ())
    model, layout = gemm_model(trans_a, trans_b, c_shape, attrs)
    if c_shape is not None:
        layout["c"] = c_axes
    embedded, loaded = check_model(model, layout, tmp_path)
    if c_shape is not None and attrs.get("beta") == 0.0:
        # C multiplies by zero: neither module asks for it.
        assert "'c'" not in embedded.source.split("class Weights", 1)[1].split("def forward", 1)[0]
        assert loaded.notes and "c" in loaded.notes[0]


def test_gemm_with_both_operands_as_inputs(tmp_path: Path) -> None:
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm", transB=1, alpha=0.5)
    model = make_model([node], {"a": (M, K), "b": (N, K)}, ["y"], {"c": weight((N,), 3)})
    check_model(model, {"a": ("M", "K"), "b": ("N", "K"), "c": ("N",)}, tmp_path)


# -- 2. MatMul --------------------------------------------------------------------------------------

MATMUL_CASES: list[tuple[Shape, tuple[str, ...], Shape, tuple[str, ...]]] = [
    ((3,), ("K",), (3, 4), ("K", "N")),
    ((3, 4), ("M", "K"), (4,), ("K",)),
    ((4,), ("K",), (4,), ("K",)),
    ((2, 3, 4), ("B", "M", "K"), (4,), ("K",)),
    ((4,), ("K",), (2, 4, 5), ("B", "K", "N")),
    ((3, 4), ("M", "K"), (4, 5), ("K", "N")),
    ((2, 3, 4), ("B", "M", "K"), (4, 5), ("K", "N")),
    ((3, 4), ("M", "K"), (2, 4, 5), ("B", "K", "N")),
    ((2, 3, 4), ("B", "M", "K"), (2, 4, 5), ("B", "K", "N")),
    ((1, 3, 4), ("One", "M", "K"), (2, 4, 5), ("B", "K", "N")),
    ((2, 1, 3, 4), ("B", "One", "M", "K"), (5, 4, 6), ("C", "K", "N")),
    ((2, 1, 3, 4), ("B", "One", "M", "K"), (1, 5, 4, 6), ("One", "C", "K", "N")),
    ((4,), ("K",), (2, 3, 4, 5), ("B", "C", "K", "N")),
    ((2, 3, 5, 4), ("B", "C", "M", "K"), (4,), ("K",)),
]


def _case_id(case: tuple[Shape, tuple[str, ...], Shape, tuple[str, ...]]) -> str:
    return f"{list(case[0])}x{list(case[2])}"


@pytest.mark.parametrize("weight_side", ["b", "a"])
@pytest.mark.parametrize("case", MATMUL_CASES, ids=_case_id)
def test_matmul_ranks_and_batch_broadcast(
    case: tuple[Shape, tuple[str, ...], Shape, tuple[str, ...]], weight_side: str, tmp_path: Path
) -> None:
    a_shape, a_axes, b_shape, b_axes = case
    shapes = {"a": a_shape, "b": b_shape}
    inputs = {n: s for n, s in shapes.items() if n != weight_side}
    inits = {weight_side: weight(shapes[weight_side], 4)}
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")], inputs, ["y"], inits)
    check_model(model, {"a": a_axes, "b": b_axes}, tmp_path)


def test_matmul_of_two_inputs(tmp_path: Path) -> None:
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")], {"a": (2, 1, 3, 4), "b": (5, 4, 6)}, ["y"]
    )
    check_model(model, {"a": ("B", "One", "M", "K"), "b": ("C", "K", "N")}, tmp_path)


# -- 3. Elementwise operators, constants, several outputs, Identity -----------------------------------

BINARY_CASES: list[tuple[str, Shape, tuple[str, ...], Shape, tuple[str, ...]]] = [
    ("Add", (2, 3, 4), ("B", "M", "N"), (4,), ("N",)),
    ("Add", (2, 3, 4), ("B", "M", "N"), (), ()),
    ("Sub", (2, 3, 4), ("B", "M", "N"), (3, 1), ("M", "One")),
    ("Sub", (3, 1), ("M", "One"), (2, 3, 4), ("B", "M", "N")),
    ("Mul", (3, 1), ("M", "One"), (1, 4), ("One", "N")),
    ("Mul", (2, 3, 4), ("B", "M", "N"), (2, 3, 4), ("B", "M", "N")),
    ("Div", (2, 3, 4), ("B", "M", "N"), (2, 1, 4), ("B", "One", "N")),
    ("Div", (4,), ("N",), (2, 3, 4), ("B", "M", "N")),
]


@pytest.mark.parametrize("weight_side", ["b", "a", None])
@pytest.mark.parametrize("case", BINARY_CASES, ids=lambda c: f"{c[0]}{list(c[1])}{list(c[3])}")
def test_binary_broadcasting(
    case: tuple[str, Shape, tuple[str, ...], Shape, tuple[str, ...]], weight_side: str | None, tmp_path: Path
) -> None:
    op, a_shape, a_axes, b_shape, b_axes = case
    shapes = {"a": a_shape, "b": b_shape}
    inputs = {n: s for n, s in shapes.items() if n != weight_side}
    inits: dict[str, np.ndarray] = {}
    if weight_side is not None:
        make = away_from_zero if op == "Div" and weight_side == "b" else weight
        inits[weight_side] = make(shapes[weight_side], 5)
    model = make_model([helper.make_node(op, ["a", "b"], ["y"], name="op")], inputs, ["y"], inits)
    # A divisor given as an input stays away from zero too, so the quotient is well conditioned.
    given = {"b": away_from_zero(b_shape, 6)} if op == "Div" and "b" in inputs else None
    check_model(model, {"a": a_axes, "b": b_axes}, tmp_path, given=given)


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh"])
def test_unary_activations(op: str, tmp_path: Path) -> None:
    model = make_model([helper.make_node(op, ["x"], ["y"], name="act")], {"x": (2, 3, 4)}, ["y"])
    # Scaled inputs reach the saturated ends of Sigmoid and Tanh as well as their middles.
    check_model(model, {"x": ("B", "M", "N")}, tmp_path, scale=30.0)
    check_model(model, {"x": ("B", "M", "N")}, tmp_path, seed=1, scale=0.5)


def test_elementwise_chain(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Mul", ["x", "scale"], ["t1"], name="scale"),
        helper.make_node("Add", ["t1", "bias"], ["t2"], name="bias"),
        helper.make_node("Tanh", ["t2"], ["t3"], name="tanh"),
        helper.make_node("Sub", ["t3", "x"], ["t4"], name="residual"),
        helper.make_node("Relu", ["t4"], ["t5"], name="relu"),
        helper.make_node("Div", ["t5", "norm"], ["t6"], name="norm"),
        helper.make_node("Sigmoid", ["t6"], ["y"], name="gate"),
    ]
    inits = {"scale": weight((4,), 6), "bias": weight((3, 1), 7), "norm": away_from_zero((2, 1, 4), 8)}
    model = make_model(nodes, {"x": (2, 3, 4)}, ["y"], inits)
    layout = {"x": ("B", "M", "N"), "scale": ("N",), "bias": ("M", "One"), "norm": ("B", "One", "N")}
    check_model(model, layout, tmp_path)


def _constant(name: str, value: np.ndarray | float) -> onnx.NodeProto:
    if isinstance(value, float):
        return helper.make_node("Constant", [], [name], name=f"make_{name}", value_float=value)
    return helper.make_node("Constant", [], [name], name=f"make_{name}", value=numpy_helper.from_array(value, name))


@pytest.mark.parametrize(
    "value",
    [np.array([2.5], np.float32), np.array(2.5, np.float32), 2.5, np.array([[2.5]], np.float32)],
    ids=["[1]", "scalar-tensor", "value_float", "[1,1]"],
)
@pytest.mark.parametrize("op", ["Mul", "Sub", "Div"])
def test_one_element_constant_folds_into_the_expr(op: str, value: np.ndarray | float, tmp_path: Path) -> None:
    # The constant is the first operand of Sub/Div: folding must keep the operand order.
    operands = ["x", "c"] if op == "Mul" else ["c", "x"]
    nodes = [
        _constant("c", value),
        helper.make_node(op, operands, ["t"], name="op"),
        helper.make_node("Add", ["t", "x"], ["y"], name="add"),
    ]
    model = make_model(nodes, {"x": (3, 4)}, ["y"])
    embedded, _ = check_model(model, {"x": ("M", "N")}, tmp_path, seed=3)
    text = ir_text(embedded)
    assert "kernel.constant" not in text
    assert "const 2.5" in text
    assert "_DATA_" not in embedded.source


def test_one_element_constant_that_sets_the_result_rank(tmp_path: Path) -> None:
    # [1,1,1] + [3,4] is [1,3,4]: the constant raises the rank, so a scalar cannot stand for it.
    nodes = [_constant("c", np.array([[[0.5]]], np.float32)), helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    model = make_model(nodes, {"x": (3, 4)}, ["y"])
    check_model(model, {"x": ("M", "N")}, tmp_path)


def test_folded_nodes_need_no_layout_for_the_constants_they_consumed(tmp_path: Path) -> None:
    # Constant -> Relu folds at build time; only the folded result, which Add reads, needs axis names.
    nodes = [
        _constant("c", np.array([[1.0, -2.0, 3.0]], np.float32)),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Add", ["x", "r"], ["y"], name="add"),
    ]
    model = make_model(nodes, {"x": (2, 3)}, ["y"])
    embedded, _ = check_model(model, {"x": ("B", "N"), "r": ("One", "N")}, tmp_path)
    assert "Relu" not in ir_text(embedded) and "relu" not in embedded.report


def test_constant_tensor_operand(tmp_path: Path) -> None:
    # A many-element Constant is not a scalar: it stays a tensor the kernel reads.
    nodes = [_constant("c", np.arange(4, dtype=np.float32)), helper.make_node("Mul", ["x", "c"], ["y"], name="mul")]
    model = make_model(nodes, {"x": (3, 4)}, ["y"])
    check_model(model, {"x": ("M", "N"), "c": ("N",)}, tmp_path)


def test_several_outputs(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
        helper.make_node("Relu", ["h"], ["act.relu"], name="relu"),
        helper.make_node("Sigmoid", ["h"], ["gate"], name="sigmoid"),
        helper.make_node("Mul", ["act.relu", "gate"], ["y"], name="gated"),
    ]
    model = make_model(nodes, {"x": (3, 4)}, ["y", "act.relu", "h"], {"w": weight((4, 5), 9)})
    embedded, loaded = check_model(model, {"x": ("M", "K"), "w": ("K", "N")}, tmp_path)
    feeds = random_inputs(model)
    want = run_onnxruntime(model, feeds)
    checkpoint = (tmp_path / "weights.safetensors").read_bytes()
    for module, weights in (
        (embedded.module, embedded.module.Weights.embedded()),
        (loaded.module, loaded.module.Weights.load(checkpoint)),
    ):
        out = module.forward(weights, feeds["x"])
        assert isinstance(out, tuple) and isinstance(out, module.Outputs)
        # Fields are the ONNX output names, in the graph's order (`act.relu` sanitised).
        assert out._fields == ("y", "act_relu", "h")
        np.testing.assert_allclose(out.y, want[0], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(out.act_relu, want[1], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(out.h, want[2], rtol=RTOL, atol=ATOL)


def test_identity(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Identity", ["x"], ["x_copy"], name="copy"),
        helper.make_node("Add", ["x_copy", "b"], ["s"], name="add"),
        helper.make_node("Identity", ["s"], ["y"], name="out"),
    ]
    model = make_model(nodes, {"x": (2, 3)}, ["y", "x_copy"], {"b": weight((3,), 10)})
    check_model(model, {"x": ("B", "N"), "b": ("N",)}, tmp_path)


def test_identity_of_a_weight(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Identity", ["w"], ["w_out"], name="expose"),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
    ]
    model = make_model(nodes, {"x": (2, 3)}, ["y", "w_out"], {"w": weight((3, 4), 11)})
    check_model(model, {"x": ("B", "K"), "w": ("K", "N")}, tmp_path)


def test_names_that_are_not_python_identifiers(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("MatMul", ["input:0", "class"], ["lambda"], name="def"),
        helper.make_node("Add", ["lambda", "1bias"], ["out/put"], name="for"),
    ]
    inits = {"class": weight((3, 4), 12), "1bias": weight((4,), 13)}
    model = make_model(nodes, {"input:0": (2, 3)}, ["out/put", "lambda"], inits)
    check_model(model, {"input:0": ("B", "K"), "class": ("K", "N"), "1bias": ("N",)}, tmp_path)


def test_outputs_option_cuts_the_graph() -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
        helper.make_node("Relu", ["h"], ["y"], name="act"),
        helper.make_node("Add", ["x", "b"], ["z"], name="bias"),
    ]
    model = make_model(nodes, {"x": (2, 3)}, ["y", "z"], {"w": weight((3, 4), 14), "b": weight((3,), 15)})
    options = Options(outputs=("z",), layout=rules({"x": ("B", "K"), "w": ("K", "N"), "b": ("K",)}))
    result = build(model, options=options)
    module = result.module
    assert [name for name, *_ in module.Weights._SPECS] == ["b"]  # w feeds only the cut-off output
    feeds = random_inputs(model)
    (z,) = run_onnxruntime(model, feeds)[1:]
    got = module.forward(module.Weights.embedded(), feeds["x"])
    assert_matches([got], [z])


def test_dims_option_makes_a_dim_param_static() -> None:
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=1)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
        [numpy_helper.from_array(weight((2, 3), 16), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    result = build(model, options=Options(dims={"N": 5}, layout=rules({"x": ("B", "K"), "w": ("Out", "K")})))
    module = result.module
    assert module.B.EXTENT == 5
    x = np.random.default_rng(7).standard_normal((5, 3)).astype(np.float32)
    assert_matches([module.forward(module.Weights.embedded(), x)], run_onnxruntime(model, {"x": x}))
    with pytest.raises(module.ShapeError, match=re.escape("input 'x' axis 0 (B) must be 5, got 4")):
        module.forward(module.Weights.embedded(), x[:4])


# -- 4. MLPs ----------------------------------------------------------------------------------------


def test_shipped_mlp_example_matches_expected_and_onnxruntime() -> None:
    options = Options.from_toml(EXAMPLES / "loam.toml")
    assert [p.name for p in options.checkpoints] == ["mlp.safetensors"]
    result = build(EXAMPLES / "mlp.onnxtext", options=options)
    module = result.module
    weights = module.Weights.load((EXAMPLES / "mlp.safetensors").read_bytes())
    x = np.load(EXAMPLES / "input.npy")
    y = module.forward(weights, x)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (4, 3)

    # onnxruntime on the same model, the checkpoint's tensors put in as initializers.
    from safetensors.numpy import load_file

    model = onnx.parser.parse_model((EXAMPLES / "mlp.onnxtext").read_text(encoding="utf-8"))
    tensors = load_file(str(EXAMPLES / "mlp.safetensors"))
    filled = [numpy_helper.from_array(tensors[init.name], init.name) for init in model.graph.initializer]
    del model.graph.initializer[:]
    model.graph.initializer.extend(filled)
    (reference,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(y, reference, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(y, np.load(EXAMPLES / "expected.npy"), rtol=RTOL, atol=ATOL)
    for node in ("fc1", "act1", "fc2.matmul", "fc2.add", "act2", "fc3"):
        assert re.search(rf"^{re.escape(node)}\s", result.report, re.MULTILINE), node


def test_mlp_written_with_helper(tmp_path: Path) -> None:
    batch, d_in, hidden, hidden2, d_out = 6, 10, 16, 12, 3
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["fc1.out"], name="fc1", transB=1),
        helper.make_node("Relu", ["fc1.out"], ["act1"], name="act1"),
        helper.make_node("MatMul", ["act1", "fc2.weight"], ["fc2.mm"], name="fc2.matmul"),
        helper.make_node("Add", ["fc2.mm", "fc2.bias"], ["fc2.out"], name="fc2.add"),
        helper.make_node("Tanh", ["fc2.out"], ["act2"], name="act2"),
        helper.make_node("Gemm", ["act2", "fc3.weight", "fc3.bias"], ["logits"], name="fc3", alpha=0.5),
        helper.make_node("Sigmoid", ["logits"], ["probs"], name="probs"),
    ]
    inits = {
        "fc1.weight": weight((hidden, d_in), 20),
        "fc1.bias": weight((hidden,), 21),
        "fc2.weight": weight((hidden, hidden2), 22),
        "fc2.bias": weight((hidden2,), 23),
        "fc3.weight": weight((hidden2, d_out), 24),
        "fc3.bias": weight((1, d_out), 25),
    }
    model = make_model(nodes, {"x": (batch, d_in)}, ["probs", "logits"], inits)
    layout = {
        "x": ("Batch", "In"),
        "fc1.weight": ("Hidden", "In"),
        "fc1.bias": ("Hidden",),
        "fc2.weight": ("Hidden", "Hidden2"),
        "fc2.bias": ("Hidden2",),
        "fc3.weight": ("Hidden2", "Out"),
        "fc3.bias": ("One", "Out"),
    }
    embedded, _ = check_model(model, layout, tmp_path)
    module = embedded.module
    assert (module.Batch.EXTENT, module.In.EXTENT, module.Hidden.EXTENT, module.Out.EXTENT) == (6, 10, 16, 3)


def test_mlp_with_glob_layout_rules(tmp_path: Path) -> None:
    # The first rule that matches wins: `*.bias` before `*`-style fallbacks, weights by glob.
    nodes = [
        helper.make_node("MatMul", ["x", "l1.weight"], ["h"], name="l1"),
        helper.make_node("Add", ["h", "l1.bias"], ["hb"], name="l1.add"),
        helper.make_node("Relu", ["hb"], ["a"], name="relu"),
        helper.make_node("Gemm", ["a", "l2.weight", "l2.bias"], ["y"], name="l2", transB=1),
    ]
    inits = {
        "l1.weight": weight((8, 6), 30),
        "l1.bias": weight((6,), 31),
        "l2.weight": weight((2, 6), 32),
        "l2.bias": weight((2,), 33),
    }
    model = make_model(nodes, {"x": (5, 8)}, ["y"], inits)
    layout = {"l1.bias": ("H",), "l2.bias": ("Out",), "l1.*": ("In", "H"), "l2.*": ("Out", "H"), "x": ("B", "In")}
    check_model(model, layout, tmp_path)


# -- 5. What the generated module refuses at run time -------------------------------------------------


@pytest.fixture(scope="module")
def mlp_module(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, bytes]:
    """A two-input model built stripped against a checkpoint, and that checkpoint's bytes."""
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc", transB=1),
        helper.make_node("Add", ["h", "skip"], ["y"], name="skip_add"),
    ]
    model = make_model(nodes, {"x": (4, 8), "skip": (4, 3)}, ["y"], {"w": weight((3, 8), 40), "b": weight((3,), 41)})
    stripped, weights = strip(model, "w.safetensors")
    data = save_safetensors(weights)
    path = tmp_path_factory.mktemp("ckpt") / "w.safetensors"
    path.write_bytes(data)
    layout = {"x": ("Batch", "In"), "skip": ("Batch", "Out"), "w": ("Out", "In"), "b": ("Out",)}
    result = build(stripped, checkpoints=[path], options=Options(layout=rules(layout)))
    return result.module, data


W, B = weight((3, 8), 40), weight((3,), 41)


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    return rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)


def test_forward_accepts_good_inputs(mlp_module: tuple[ModuleType, bytes]) -> None:
    module, data = mlp_module
    x, skip = _inputs()
    tensors = {"w": weight((3, 8), 40), "b": weight((3,), 41)}
    y = module.forward(module.Weights.load(data), x, skip)
    np.testing.assert_allclose(y, x @ tensors["w"].T + tensors["b"] + skip, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    ("which", "bad", "message"),
    [
        ("x", np.zeros((4, 9), np.float32), "input 'x' axis 1 (In) must be 8, got 9"),
        ("x", np.zeros((5, 8), np.float32), "input 'x' axis 0 (Batch) must be 4, got 5"),
        ("skip", np.zeros((4, 2), np.float32), "input 'skip' axis 1 (Out) must be 3, got 2"),
        ("x", np.zeros((4, 8, 1), np.float32), "input 'x' must have rank 2 [Batch, In], got 3"),
        ("skip", np.zeros((12,), np.float32), "input 'skip' must have rank 2 [Batch, Out], got 1"),
        ("x", np.zeros((4, 8), np.float64), "input 'x' must have dtype float32, got float64"),
        ("skip", np.zeros((4, 3), np.int64), "input 'skip' must have dtype float32, got int64"),
        ("x", [[0.0] * 8] * 4, "input 'x' must be a numpy.ndarray, got list"),
        ("skip", None, "input 'skip' must be a numpy.ndarray, got NoneType"),
    ],
)
def test_forward_refuses_bad_inputs(
    mlp_module: tuple[ModuleType, bytes], which: str, bad: object, message: str
) -> None:
    module, data = mlp_module
    x, skip = _inputs()
    args = {"x": x, "skip": skip, which: bad}
    with pytest.raises(module.ShapeError) as info:
        module.forward(module.Weights.load(data), args["x"], args["skip"])
    assert message in str(info.value)


def _safetensors_bytes(tensors: Mapping[str, np.ndarray]) -> bytes:
    return save_safetensors(dict(tensors))


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"w": W}, "tensor 'b' is missing from the checkpoint"),
        ({"w": W[:, :7].copy(), "b": B}, "tensor 'w' axis 1 (In) is 8 in the graph, 7 in the checkpoint"),
        ({"w": W, "b": np.concatenate([B, B[:1]])}, "tensor 'b' axis 0 (Out) is 3 in the graph, 4 in the checkpoint"),
        ({"w": W[..., None], "b": B}, "tensor 'w' has rank 2 in the graph, 3 in the checkpoint"),
        ({"w": W.astype(np.float64), "b": B}, "tensor 'w' is F64 in the checkpoint"),
        ({"w": W, "b": np.arange(3, dtype=np.int32)}, "tensor 'b' is I32 in the checkpoint"),
    ],
    ids=["missing", "wrong-extent-w", "wrong-extent-b", "wrong-rank", "f64", "i32"],
)
def test_weights_load_refuses_a_mismatched_checkpoint(
    mlp_module: tuple[ModuleType, bytes], tensors: dict[str, np.ndarray], message: str
) -> None:
    module, _ = mlp_module
    with pytest.raises(module.LoadError) as info:
        module.Weights.load(_safetensors_bytes(tensors))
    assert message in str(info.value)


def test_weights_load_accepts_f16_for_f32(mlp_module: tuple[ModuleType, bytes]) -> None:
    module, _ = mlp_module
    w, b = weight((3, 8), 40).astype(np.float16), weight((3,), 41).astype(np.float16)
    weights = module.Weights.load(_safetensors_bytes({"w": w, "b": b}))
    x, skip = _inputs()
    y = module.forward(weights, x, skip)
    want = x @ w.astype(np.float32).T + b.astype(np.float32) + skip
    np.testing.assert_allclose(y, want, rtol=RTOL, atol=ATOL)


def test_weights_load_refuses_truncated_bytes(mlp_module: tuple[ModuleType, bytes]) -> None:
    module, data = mlp_module
    (header_len,) = struct.unpack("<Q", data[:8])
    # Cut inside the payload: the last tensor's data_offsets now run past the end.
    with pytest.raises(module.LoadError) as info:
        module.Weights.load(data[:-4])
    assert "data_offsets" in str(info.value) and "outside the payload" in str(info.value)
    # Cut inside the header.
    with pytest.raises(module.LoadError) as info:
        module.Weights.load(data[: 8 + header_len // 2])
    assert f"header length {header_len} runs past the end" in str(info.value)
    # Cut inside the 8-byte length.
    with pytest.raises(module.LoadError) as info:
        module.Weights.load(data[:5])
    assert "too short for its 8-byte header length" in str(info.value)


def test_weights_load_refuses_a_payload_of_the_wrong_length(mlp_module: tuple[ModuleType, bytes]) -> None:
    module, data = mlp_module
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    header["b"]["data_offsets"][1] -= 4  # 'b' now spans 8 bytes where [3] of F32 needs 12
    raw = json.dumps(header).encode()
    with pytest.raises(module.LoadError) as info:
        module.Weights.load(struct.pack("<Q", len(raw)) + raw + data[8 + header_len :])
    assert "tensor 'b' holds 8 bytes" in str(info.value)


def test_weights_load_refuses_non_bytes(mlp_module: tuple[ModuleType, bytes]) -> None:
    module, _ = mlp_module
    with pytest.raises(module.LoadError, match="a checkpoint is bytes, got str"):
        module.Weights.load("w.safetensors")
