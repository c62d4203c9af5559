"""The identifiers a printed module mints never shadow a builtin, a keyword or the module's own names.

The bug this guards against: a `Not` whose output is named `bool` feeding an `If` built, then forward failed with
"'numpy.ndarray' object is not callable" (its local `bool` shadowed the `bool(...)` of the If's
line).  Every model here names its tensors after Python's builtins and keywords, numpy, the module's
own names (numpy and WGSL) or in non-ASCII text, and must give onnxruntime's outputs; `INPUTS` and
`OUTPUTS` keep the ONNX names.  A hypothesis test draws such names for small elementwise chains.
"""

from __future__ import annotations

import builtins
import itertools
import keyword
import os
import re

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from loam.backends.names import MARKER_RESERVED, Names, identifier
from loam.testing import assert_same, build_for, run_built, run_onnxruntime

F, B = TensorProto.FLOAT, TensorProto.BOOL

# Names that would shadow something the module relies on, or that are no Python identifier at all.
BUILTINS = ["bool", "len", "range", "float", "int", "sum", "max", "min", "print", "type", "object", "list",
            "tuple", "dict", "zip", "property", "isinstance", "None", "True", "Ellipsis", "__import__"]  # fmt: skip
KEYWORDS = ["class", "lambda", "if", "return", "match", "case", "_"]
NUMPY = ["np", "numpy", "array", "float32", "ml_dtypes", "wgpu"]
OWN = ["Weights", "Outputs", "forward", "INPUTS", "OUTPUTS", "ShapeError", "LoadError", "DeviceError", "_env",
       "_src", "_buf", "_key", "_POOL", "_zip_0", "_zip_1", "_CONST_0", "_k_cast", "_check_input", "_fields",
       "weights", "self", "cls", "g", "_w", "_b", "_sizes", "_gpu", "_SHADERS", "_if0_0", "_h0_0",
       "kernel_softmax", "widened", "narrowed", "derived_extent", "SAFETENSORS_DTYPES"]  # fmt: skip
ODD = ["häuser", "hauser", "日本", "x.y", "x_y", "1abc", "a-b", "a b", "__init__", "__class__", "ﬁ", "fi", "Ωmega"]
NAMES = BUILTINS + KEYWORDS + NUMPY + OWN + ODD


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "names", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **build) -> str:
    """Build `model`, run it on `feeds` and compare with onnxruntime; the module's source."""
    result = build_for(model, **build)
    assert_same(run_built(result, feeds), run_onnxruntime(model, feeds), rtol=1e-6, atol=1e-6)
    module = result.module
    assert [i[0] for i in module.INPUTS] == [i.name for i in model.graph.input]
    assert list(module.OUTPUTS) == [o.name for o in model.graph.output]
    return result.source


def not_feeding_if(cond: str = "bool", x: str = "x") -> onnx.ModelProto:
    """The issue's graph: `Not(x) -> bool`, `If(bool)`: then x, else Not(x)."""
    then = helper.make_graph([helper.make_node("Identity", [x], ["t_out"])], "then", [],
                             [helper.make_tensor_value_info("t_out", B, [1])])  # fmt: skip
    other = helper.make_graph([helper.make_node("Not", [x], ["e_out"])], "else", [],
                              [helper.make_tensor_value_info("e_out", B, [1])])  # fmt: skip
    nodes = [helper.make_node("Not", [x], [cond]), helper.make_node("If", [cond], ["y"], then_branch=then,
                                                                    else_branch=other)]  # fmt: skip
    return _model(nodes, [helper.make_tensor_value_info(x, B, [1])], [helper.make_tensor_value_info("y", B, [1])])


@pytest.mark.parametrize("cond", ["bool", "np", "len", "forward"])
def test_a_not_named_like_a_builtin_feeds_an_if(cond: str) -> None:
    model = not_feeding_if(cond)
    for value in (True, False):
        source = _check(model, {"x": np.array([value])})
    assert "if bool(" in source and not re.search(rf"^ *{cond} = ", source, re.MULTILINE)


def _chain(names: list[str]) -> onnx.ModelProto:
    """x [2, 3] (named names[0]) -> Relu -> Mul by a weight -> Add x -> Neg -> ... each value named in turn."""
    x, *rest = names
    w = numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), rest[0])
    ops = [("Relu", 1), ("Mul", 2), ("Add", 2), ("Neg", 1), ("Sigmoid", 1)]
    nodes, last = [], x
    for i, name in enumerate(rest[1:]):
        op, arity = ops[i % len(ops)]
        other = rest[0] if op == "Mul" else x
        nodes.append(helper.make_node(op, [last, other][:arity], [name], name=f"{op}_{name}"))
        last = name
    inputs = [helper.make_tensor_value_info(x, F, [2, 3])]
    return _model(nodes, inputs, [helper.make_tensor_value_info(last, F, [2, 3])], [w])


@pytest.mark.parametrize(
    "names",
    [
        ["np", "Weights", "len", "range", "bool", "forward"],
        ["self", "load", "_PACKED", "_env", "_buf", "float"],
        ["class", "_SPECS", "lambda", "None", "sum", "INPUTS"],
        ["日本", "häuser", "hauser", "x.y", "x_y", "1abc"],
        ["_zip_0", "__init__", "_CONST_0", "ShapeError", "_check_input", "tuple"],
        ["widened", "kernel_concat", "narrowed", "derived_extent", "SAFETENSORS_DTYPES", "graph_name_of"],
    ],
)
def test_values_named_like_builtins_and_the_modules_own_names(names: list[str]) -> None:
    """Inputs, a weight (an attribute of `Weights`), intermediates and the output, unfused and fused."""
    model = _chain(names)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for fuse in (None, "memory"):
        _check(model, {names[0]: x}, fuse=fuse)


def test_outputs_fields_named_like_tuple_and_outputs_attributes() -> None:
    """Several outputs: forward returns `Outputs`, whose fields are minted names too, never hiding one of its
    namedtuple methods."""
    names = ["_fields", "count", "cls", "__new__", "Outputs", "_asdict", "_replace", "_make", "_field_defaults"]
    nodes = [helper.make_node("Relu", ["x"], [names[0]])]
    nodes += [helper.make_node("Neg", [a], [b]) for a, b in itertools.pairwise(names)]
    outs = [helper.make_tensor_value_info(n, F, [3]) for n in names]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [3])], outs)
    source = _check(model, {"x": np.array([-1.0, 0.5, 2.0], np.float32)}, fuse=None)
    for method in ("_asdict", "_replace", "_make", "_field_defaults"):
        assert f"    {method}_ = property(" in source and f"    {method} = property(" not in source, method


@pytest.mark.parametrize(
    ("text", "ident"),
    [("fc1.weight", "fc1_weight"), ("1abc", "v_1abc"), ("häuser", "hauser"), ("日本", "u65e5_u672c"),
     ("x.日", "x_u65e5"), ("__init__", "_init__"), ("", "v"), ("-", "v"), ("_zip_0", "_zip_0")],
)  # fmt: skip
def test_identifier_spells_any_text_in_ascii(text: str, ident: str) -> None:
    assert identifier(text) == ident


def test_names_mints_each_text_once_never_a_reserved_name() -> None:
    names = Names()
    minted = [names.mint(t) for t in [*NAMES, *NAMES]]
    assert len(set(minted)) == len(minted)
    for ident in minted:
        assert ident.isascii() and ident.isidentifier() and not keyword.iskeyword(ident), ident
        assert not keyword.issoftkeyword(ident) and not ident.startswith("__"), ident
        assert not hasattr(builtins, ident), ident
    fresh = Names()
    assert fresh.mint("a.b") == "a_b" and fresh.mint("a_b") == "a_b_" and fresh.mint("a-b") == "a_b__"


def _relu_over(symbol: str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, [symbol, 3])
    return _model([helper.make_node("Relu", ["x"], ["y"])], [x], [helper.make_tensor_value_info("y", F, [symbol, 3])])


@pytest.mark.parametrize("symbol", ["len", "max", "Weights", "type", "np", "widened", "kernel_conv"])
def test_a_dim_param_named_like_a_builtin_drafts_an_axis_clear_of_it(symbol: str) -> None:
    """An axis is a marker class at the module's top: `len` there would be every piece's `len`."""
    source = _check(_relu_over(symbol), {"x": np.ones((2, 3), np.float32)})
    assert f"class {symbol}_2:" in source and f'class {symbol}:\n    """Axis' not in source


def test_a_layout_naming_an_axis_like_a_builtin_is_refused() -> None:
    from loam.core.errors import AxisError
    from loam.core.layout import LayoutRule
    from loam.driver.options import Options

    layout = (LayoutRule("x", ("len", "C")), LayoutRule("y", ("len", "C")))
    with pytest.raises(AxisError, match="marker class named like Python's 'len'"):
        build_for(_relu_over("n"), Options(layout=layout))


def test_marker_reserved_holds_every_runtime_name_an_axis_could_take() -> None:
    from loam.backends import numpy_runtime, wgsl_runtime
    from loam.backends.wgsl_kernel_printer import kernel_pieces

    pieces = {*numpy_runtime.PIECES, *wgsl_runtime.PIECES, *kernel_pieces()}
    assert {p for p in pieces if not p.startswith("_")} <= MARKER_RESERVED


# -- drawn names ------------------------------------------------------------------------------------

_UNARY_F = ["Relu", "Neg", "Identity", "Sigmoid"]
# Names forward spells itself (drawn more often: each would break it if a value took it).
HOT = ["bool", "np", "_env", "_src", "weights", "_zip_0", "_fields", "__init__", "float", "Outputs"]


@st.composite
def _graphs(draw: st.DrawFn) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A chain of 2-4 nodes over x [2, 2] (float or bool), its values named from NAMES (unique), with
    optionally an If on a bool input that negates the chain's last value or the input."""
    count = draw(st.integers(2, 4))
    with_if = draw(st.booleans())
    name = st.one_of(st.sampled_from(HOT), st.sampled_from(NAMES))
    names = draw(st.lists(name, min_size=count + 2, max_size=count + 2, unique=True))
    x, out, *values = names
    cond = draw(st.sampled_from(["bool", "np", "_env", "weights", "class", "日本"]).filter(lambda c: c not in names))
    boolean = draw(st.booleans())
    elem = B if boolean else F
    nodes, last = [], x
    for name in values[:count]:
        if boolean:
            op = draw(st.sampled_from(["Not", "Identity", "Xor", "And"]))
        else:
            op = draw(st.sampled_from([*_UNARY_F, "Add", "Mul"]))
        if op in ("Add", "Mul", "Xor", "And"):
            nodes.append(helper.make_node(op, [last, x], [name]))
        else:
            nodes.append(helper.make_node(op, [last], [name]))
        last = name
    inputs = [helper.make_tensor_value_info(x, elem, [2, 2])]
    rng = np.random.default_rng(draw(st.integers(0, 9)))
    feeds = {x: rng.random((2, 2)) < 0.5 if boolean else rng.standard_normal((2, 2)).astype(np.float32)}
    if with_if:
        flip = "Not" if boolean else "Neg"
        then = helper.make_graph([helper.make_node(flip, [last], ["then_out"])], "then", [],
                                 [helper.make_tensor_value_info("then_out", elem, [2, 2])])  # fmt: skip
        other = helper.make_graph([helper.make_node(flip, [x], ["else_out"])], "else", [],
                                  [helper.make_tensor_value_info("else_out", elem, [2, 2])])  # fmt: skip
        nodes.append(helper.make_node("If", [cond], [out], then_branch=then, else_branch=other))
        inputs.append(helper.make_tensor_value_info(cond, B, [1]))
        feeds[cond] = np.array([draw(st.booleans())])
        last = out
    model = _model(nodes, inputs, [helper.make_tensor_value_info(last, elem, [2, 2])])
    return model, feeds


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(_graphs(), st.sampled_from([None, "memory"]))
def test_drawn_names_give_onnxruntimes_outputs(case: tuple[onnx.ModelProto, dict[str, np.ndarray]], fuse) -> None:
    model, feeds = case
    _check(model, feeds, fuse=fuse)


# -- the WGSL module --------------------------------------------------------------------------------


def _adapter() -> None:
    """Skip unless wgpu finds an adapter (llvmpipe in CI, where its absence fails the test instead)."""
    wgpu = pytest.importorskip("wgpu")
    try:
        adapter = wgpu.gpu.request_adapter_sync()
        problem = "" if adapter is not None else "request_adapter_sync() gave None"
    except Exception as e:  # any failure to find one means there is no device to test on
        problem = str(e)
    if problem:
        message = f"wgpu finds no WebGPU adapter here ({problem}; scripts/dev-setup.sh installs Mesa's)"
        (pytest.fail if os.environ.get("CI") else pytest.skip)(message)


def test_wgsl_module_names_its_values_clear_of_its_own() -> None:
    """The WGSL module decides an If on an input: the condition input is named `bool`, and the
    values take the names its forward spells itself (`g`, `_w`, `_b`, `_sizes`)."""
    _adapter()
    then = helper.make_graph([helper.make_node("Relu", ["g"], ["_w"])], "then", [],
                             [helper.make_tensor_value_info("_w", F, [4])])  # fmt: skip
    other = helper.make_graph([helper.make_node("Neg", ["g"], ["_b"])], "else", [],
                              [helper.make_tensor_value_info("_b", F, [4])])  # fmt: skip
    nodes = [
        helper.make_node("Add", ["len", "len"], ["g"]),
        helper.make_node("If", ["bool"], ["_sizes"], then_branch=then, else_branch=other),
        helper.make_node("Mul", ["_sizes", "len"], ["forward"]),
    ]
    inputs = [helper.make_tensor_value_info("len", F, [4]), helper.make_tensor_value_info("bool", B, [1])]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("forward", F, [4])])
    x = np.array([-1.0, 0.5, 2.0, -3.0], np.float32)
    for value in (True, False):
        feeds = {"len": x, "bool": np.array([value])}
        source = _check(model, feeds, backend="wgsl", fuse="dispatch")
        assert "g = _gpu()" in source and "if bool(" in source
