"""The `graph` dialect: syntax round trips (hypothesis), the Python API and the verifiers."""

from __future__ import annotations

import io
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import (
    BytesAttr,
    Float32Type,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException

from loam.core.dtypes import BY_NAME, by_name
from loam.dialects.graph import (
    BytesValueAttr,
    ConstantOp,
    GraphOp,
    InitializerOp,
    ListAttr,
    MapType,
    ModelOp,
    NodeOp,
    NoneOp,
    OptType,
    ReturnOp,
    SeqType,
    SparseDataAttr,
    SparseTensorType,
    SubgraphAttr,
    SubgraphInfoOp,
    TensorDataAttr,
    TensorType,
    UnknownType,
    set_name_hint,
)
from loam.frontends.context import make_context

CTX = make_context()


def text(module: ModuleOp, generic: bool = False) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue()


def reparse_attr(attr: Attribute) -> Attribute:
    return Parser(CTX, str(attr)).parse_attribute()


# --------------------------------------------------------------------------------------------------
# Strategies

ELEMS = [e for e in BY_NAME.values() if e.name != "undefined"]
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
dims = st.lists(st.one_of(st.integers(0, 9), st.none(), st.sampled_from(["N", "batch size", "ü"])), max_size=4)
tensor_types = st.builds(
    lambda e, d, cls: cls(e, d),
    st.sampled_from(ELEMS),
    st.one_of(st.none(), dims),
    st.sampled_from([TensorType, SparseTensorType]),
)
types: st.SearchStrategy[Attribute] = st.recursive(
    st.one_of(tensor_types, st.just(UnknownType())),
    lambda inner: st.one_of(
        st.builds(SeqType, inner),
        st.builds(OptType, inner),
        st.builds(MapType, st.sampled_from([by_name("i64"), by_name("string")]), inner),
    ),
    max_leaves=4,
)


@st.composite
def data_attrs(draw: st.DrawFn) -> TensorDataAttr:
    elem = draw(st.sampled_from(ELEMS))
    shape = draw(st.lists(st.integers(0, 3), max_size=3))
    name = draw(st.one_of(st.just(""), names))
    count = math.prod(shape)
    if draw(st.integers(0, 9)) == 0:
        entries = [("location", draw(names)), ("offset", str(draw(st.integers(0, 99))))]
        return TensorDataAttr(elem, shape, external=entries, name=name)
    if elem.name == "string":
        return TensorDataAttr(
            elem, shape, strings=draw(st.lists(st.binary(max_size=4), min_size=count, max_size=count))
        )
    size = (count * elem.bits + 7) // 8
    return TensorDataAttr(elem, shape, raw=draw(st.binary(min_size=size, max_size=size)), name=name)


floats32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
node_attrs: st.SearchStrategy[Attribute] = st.one_of(
    st.builds(lambda v: IntegerAttr(v, i64), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: FloatAttr(v, Float32Type()), floats32),
    st.builds(StringAttr, st.text(st.characters(codec="ascii"), max_size=8)),
    st.builds(BytesValueAttr, st.binary(max_size=4)),
    data_attrs(),
    st.builds(
        lambda d, v, i: SparseDataAttr(d, v, i), st.lists(st.integers(0, 9), max_size=2), data_attrs(), data_attrs()
    ),
    types,
    st.builds(lambda xs: ListAttr("ints", [IntAttr(x) for x in xs]), st.lists(st.integers(-(2**63), 2**63 - 1))),
    st.builds(lambda xs: ListAttr("floats", [FloatAttr(x, Float32Type()) for x in xs]), st.lists(floats32)),
    st.builds(lambda xs: ListAttr("strings", [BytesAttr(x) for x in xs]), st.lists(st.binary(max_size=4))),
    st.builds(lambda xs: ListAttr("tensors", xs), st.lists(data_attrs(), max_size=2)),
    st.builds(lambda xs: ListAttr("types", xs), st.lists(types, max_size=2)),
    st.builds(
        lambda xs: ListAttr("sparse_tensors", xs),
        st.lists(st.builds(lambda v, i: SparseDataAttr([2], v, i), data_attrs(), data_attrs()), max_size=1),
    ),
)


def _same(a: Attribute, b: Attribute) -> bool:
    # NaN floats compare by bits: FloatAttr equality already does, ListAttr holds FloatAttrs.
    return a == b


# --------------------------------------------------------------------------------------------------
# Attribute and type round trips


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(types)
def test_types_round_trip(ty: Attribute) -> None:
    assert reparse_attr(ty) == ty


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data_attrs())
def test_data_attrs_round_trip(attr: TensorDataAttr) -> None:
    assert reparse_attr(attr) == attr


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_attrs)
def test_node_attribute_values_round_trip(attr: Attribute) -> None:
    assert _same(reparse_attr(attr), attr)


@pytest.mark.parametrize(
    "source",
    [
        '!graph.tensor<f32, [4, "N", ?]>',
        "!graph.tensor<bf16>",
        "!graph.tensor<i64, []>",
        "!graph.sparse<f32, [3, 4]>",
        "!graph.seq<!graph.tensor<f32, [?]>>",
        "!graph.opt<!graph.seq<!graph.tensor<i64>>>",
        "!graph.map<string, !graph.tensor<f32>>",
        "!graph.unknown",
        "!graph.none",
        '#graph.data<"w", f32, [2], "0x0000803f00000040">',
        '#graph.data<string, [2], ["abc", "\\FF"]>',
        '#graph.data<f32, [16], external {location = "w.bin", offset = "0", length = "64"}>',
        "#graph.list<ints []>",
        "#graph.list<floats [0.5, -1.0, 1.0e+30, 0x7fc00000, 0xff800000]>",
        '#graph.list<strings ["LSTM", "\\FF"]>',
        "#graph.list<types [!graph.tensor<f32>]>",
        "#graph.list<graphs [0, 1]>",
        "#graph.subgraph<0>",
        '#graph.bytes<"\\FF">',
    ],
)
def test_readable_syntax_prints_back_identically(source: str) -> None:
    assert str(Parser(CTX, source).parse_attribute()) == source


def test_empty_lists_keep_their_kind() -> None:
    empties = [ListAttr(kind, []) for kind in ("ints", "floats", "strings", "tensors", "sparse_tensors", "types")]
    assert len({str(e) for e in empties}) == len(empties)
    assert all(reparse_attr(e) == e for e in empties)


@pytest.mark.parametrize(
    "source, message",
    [
        ("!graph.tensor<f99>", "unknown element type 'f99'"),
        ("!graph.tensor<f32, [-2]>", "dim -2 is negative"),
        ('#graph.data<f32, [2], "0x00">', "needs 8 bytes, got 1"),
        ('#graph.data<string, [2], ["a"]>', "holds 2 strings, got 1"),
        ('#graph.data<f32, [1], "abc">', "hex string"),
        ("#graph.list<bools []>", "list kind is one of"),
    ],
)
def test_bad_attributes_are_refused(source: str, message: str) -> None:
    with pytest.raises((VerifyException, ParseError), match=message):
        Parser(CTX, source).parse_attribute()


# --------------------------------------------------------------------------------------------------
# TensorDataAttr's numpy API


@pytest.mark.parametrize("elem", [e for e in ELEMS if e.numpy is not None and e.name != "string"], ids=lambda e: e.name)
def test_from_numpy_to_numpy(elem) -> None:  # type: ignore[no-untyped-def]
    values = np.array([[4, 1, 2], [2, 1, 4]]).astype(elem.numpy)  # representable in every type (e8m0: no 0)
    if elem.name == "ui2":
        values = np.array([[0, 1, 2], [3, 1, 0]]).astype(elem.numpy)
    if elem.name in ("i4", "i2"):
        values = np.array([[0, -1, 1], [-2, 1, 0]]).astype(elem.numpy)
    attr = TensorDataAttr.from_numpy(values, name="t")
    assert attr.elem == elem and attr.shape == (2, 3) and attr.tensor_name.data == "t"
    back = attr.to_numpy()
    assert back.dtype == elem.numpy
    assert np.array_equal(back.astype(np.complex128), values.astype(np.complex128))
    assert reparse_attr(attr) == attr


def test_sub_byte_packing_is_onnx_order() -> None:
    # ONNX packs the first element in the low nibble: [1, -2, 3] as int4 is 0xE1, 0x03.
    attr = TensorDataAttr.from_numpy(np.array([1, -2, 3], ml_dtypes.int4))
    assert attr.raw.data == bytes([0xE1, 0x03])


def test_strings_and_little_endian_bytes() -> None:
    attr = TensorDataAttr.from_numpy(np.array(["a", "bc"]))
    assert attr.elem.name == "string" and list(attr.to_numpy()) == [b"a", b"bc"]
    assert TensorDataAttr.from_numpy(np.array([1], np.dtype(">i4"))).raw.data == b"\x01\0\0\0"


# --------------------------------------------------------------------------------------------------
# Ops: the Python API, round trips of random modules, verifiers


def build_module(node_specs: list[tuple[str, dict[str, Attribute], int]], with_subgraph: bool) -> ModuleOp:
    """A model whose graph chains the given nodes (op type, attributes, input count)."""
    block = Block(arg_types=[TensorType(by_name("f32"), [2, "N"])])
    x = block.args[0]
    set_name_hint(x, "x")
    ops: list = []
    init = InitializerOp("w.0", TensorType(by_name("f32"), [1]), TensorDataAttr.from_numpy(np.ones(1, np.float32)))
    set_name_hint(init.result, "w.0")
    ops.append(init)
    values: list[SSAValue] = [x, init.result]
    for i, (op_type, attrs, n_inputs) in enumerate(node_specs):
        inputs = [values[(i + k) % len(values)] for k in range(n_inputs)]
        if n_inputs > 1:
            none = NoneOp()
            ops.append(none)
            inputs.insert(1, none.result)
        regions: list[Region] = []
        attrs = dict(attrs)
        if with_subgraph and i == 0:
            sub = Block()
            inner = NodeOp("Identity", [x], [UnknownType()], ["inner"], since=17)  # reads the outer %x
            sub.add_ops([SubgraphInfoOp("body", []), inner, ReturnOp([inner.results[0]], ["inner"], [UnknownType()])])
            regions.append(Region(sub))
            attrs["then_branch"] = SubgraphAttr(0)
        node = NodeOp(
            op_type, inputs, [UnknownType()], [f"v{i}"], node_name=f"n{i}", since=17, attrs=attrs, regions=regions
        )
        set_name_hint(node.results[0], f"v{i}")
        ops.append(node)
        values.append(node.results[0])
    ops.append(ReturnOp([values[-1]], ["out"], [TensorType(by_name("f32"))]))
    block.add_ops(ops)
    graph = GraphOp("g", ["x"], Region(block))
    model = ModelOp({"ir_version": IntegerAttr(8, i64), "opset_import": _opsets()}, Region(Block([graph])))
    return ModuleOp([model])


def _opsets() -> Attribute:
    from xdsl.dialects.builtin import DictionaryAttr

    return DictionaryAttr({"": IntegerAttr(17, i64)})


node_specs = st.lists(
    st.tuples(
        st.sampled_from(["Relu", "Add", "Custom Op", "Gemm"]),
        st.dictionaries(st.sampled_from(["alpha", "axes", "mode", "value", "to"]), node_attrs, max_size=3),
        st.integers(0, 3),
    ),
    max_size=4,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_specs, st.booleans())
def test_random_modules_round_trip(specs, with_subgraph: bool) -> None:  # type: ignore[no-untyped-def]
    module = build_module(specs, with_subgraph)
    module.verify()
    for generic in (False, True):
        reparsed = Parser(CTX, text(module, generic)).parse_module()
        reparsed.verify()
        assert reparsed.is_structurally_equivalent(module)


def test_custom_syntax_is_readable() -> None:
    module = build_module([("Gemm", {"transB": IntegerAttr(1, i64)}, 2)], with_subgraph=False)
    printed = text(module)
    assert '%w.0 = graph.initializer "w.0" = #graph.data<f32, [1], "0x0000803f"> : !graph.tensor<f32, [1]>' in printed
    assert (
        '%v0 = graph.node "Gemm" "n0" since 17 (%x, %0, %w.0) {transB = 1 : i64} -> ["v0"] : !graph.unknown' in printed
    )
    assert 'graph.return %v0 ["out"] : !graph.tensor<f32>' in printed
    assert '(%x: !graph.tensor<f32, [2, "N"]>) inputs ["x"]' in printed


def test_node_accessors() -> None:
    attrs: dict[str, Attribute] = {
        "i": IntegerAttr(3, i64),
        "f": FloatAttr(0.5, Float32Type()),
        "s": StringAttr("same"),
        "ints": ListAttr("ints", [IntAttr(1), IntAttr(-2)]),
        "floats": ListAttr("floats", [FloatAttr(1.5, Float32Type())]),
        "strings": ListAttr("strings", [BytesAttr(b"a")]),
        "t": TensorDataAttr.from_numpy(np.array([1, 2], np.int64)),
    }
    module = build_module([("Pad", attrs, 1)], with_subgraph=True)
    node = next(op for op in module.walk() if isinstance(op, NodeOp) and op.op_type == "Pad")
    assert (node.op_type, node.node_name, node.domain, node.since, node.output_names) == ("Pad", "n0", "", 17, ["v0"])
    assert node.get_attr("i") == 3 and node.get_attr("f") == 0.5 and node.get_attr("s") == "same"
    assert node.get_attr("ints") == [1, -2] and node.get_attr("floats") == [1.5] and node.get_attr("strings") == ["a"]
    assert np.array_equal(node.get_attr("t"), [1, 2])
    assert node.get_attr("missing", 7) == 7
    assert node.attr_names() == [*attrs, "then_branch"]
    body = node.subgraph("then_branch")
    assert isinstance(body.block.last_op, ReturnOp)
    with pytest.raises(KeyError, match="no graph attribute 'i'"):
        node.subgraph("i")


def test_name_hints_only_where_valid() -> None:
    block = Block(arg_types=[UnknownType(), UnknownType()])
    set_name_hint(block.args[0], "input.1")
    set_name_hint(block.args[1], "0")  # not a valid xDSL name: stays a number
    assert block.args[0].name_hint == "input.1" and block.args[1].name_hint is None


def test_duplicate_names_are_refused() -> None:
    module = build_module([("Relu", {}, 1), ("Relu", {}, 1)], with_subgraph=False)
    nodes = [op for op in module.walk() if isinstance(op, NodeOp)]
    nodes[1].properties["output_names"] = nodes[0].properties["output_names"]
    with pytest.raises(VerifyException, match="ONNX name 'v0' is defined twice"):
        module.verify()


def test_region_count_must_match_graph_attributes() -> None:
    module = build_module([("If", {}, 1)], with_subgraph=True)
    node = next(op for op in module.walk() if isinstance(op, NodeOp) and op.op_type == "If")
    attrs = dict(node.attrs.data)
    del attrs["then_branch"]
    from xdsl.dialects.builtin import DictionaryAttr

    node.attrs = DictionaryAttr(attrs)
    with pytest.raises(VerifyException, match=r"1 regions but the graph attributes refer to regions \[\]"):
        module.verify()


def test_constant_op_round_trips() -> None:
    const = ConstantOp(TensorDataAttr.from_numpy(np.array([2], np.int64)))
    assert str(const.result.type) == "!graph.tensor<i64, [1]>"
    block = Block([const, NodeOp("Relu", [const.result], [UnknownType()], ["y"], since=17)])
    module = ModuleOp(Region(block))
    assert Parser(CTX, text(module)).parse_module().is_structurally_equivalent(module)
