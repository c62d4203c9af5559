"""The `tensor_axes` dialect: named-axis types and layouts print and parse back; bad ones are refused."""

from __future__ import annotations

from io import StringIO

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.context import Context
from xdsl.dialects import test
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Block, Region
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException

from loam.core.dtypes import BY_NAME, by_name
from loam.core.errors import AxisError
from loam.core.layout import LayoutRule
from loam.core.poly import Poly
from loam.dialects.tensor_axes import AxesTensorType, Axis, AxisAttr, LayoutAttr
from loam.frontends.context import make_context

NAMES = ["Batch", "Seq", "Hidden", "C", "H", "W", "In", "Out", "K", "_t0"]
SYMBOLS = ["N", "S", "seq-len", "past len", "naïve"]


def make_ctx() -> Context:
    ctx = make_context()
    ctx.load_dialect(test.Test)  # `test.op` carries the types under test
    return ctx


extents = st.recursive(
    st.one_of(st.integers(0, 1024).map(Poly.const), st.sampled_from(SYMBOLS).map(Poly.symbol)),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: ab[0] + ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] * ab[1]),
        st.tuples(inner, st.integers(1, 9)).map(lambda ab: ab[0] - ab[1]),
    ),
    max_leaves=4,
).filter(lambda p: not (p.is_const and p.const_value < 0))

axis_names = st.one_of(
    st.sampled_from(NAMES),
    st.lists(st.sampled_from(NAMES), min_size=2, max_size=4, unique=True).map(
        lambda parts: "(" + " ".join(parts) + ")"
    ),
)


@st.composite
def axes_types(draw: st.DrawFn) -> AxesTensorType:
    names = draw(st.lists(axis_names, max_size=4, unique=True))
    return AxesTensorType(draw(st.sampled_from(sorted(BY_NAME))), [(name, draw(extents)) for name in names])


rules = st.builds(
    LayoutRule,
    st.text(min_size=1, max_size=12),
    st.lists(axis_names, max_size=3).map(tuple),
    st.one_of(st.none(), st.text(min_size=1, max_size=8)),
)


def round_trip(module: ModuleOp) -> None:
    ctx = make_ctx()
    for generic in (False, True):
        out = StringIO()
        Printer(stream=out, print_generic_format=generic).print_op(module)
        reparsed = Parser(ctx, out.getvalue(), "roundtrip").parse_module()
        reparsed.verify()
        assert reparsed.is_structurally_equivalent(module), out.getvalue()


@settings(max_examples=60, deadline=None)
@given(st.lists(axes_types(), min_size=1, max_size=3), st.lists(rules, max_size=4))
def test_random_types_and_layouts_round_trip(types: list[AxesTensorType], layout: list[LayoutRule]) -> None:
    attrs: dict[str, Attribute] = {"layout": LayoutAttr(layout)}
    module = ModuleOp(Region(Block([test.TestOp(result_types=types, attributes=attrs)])))
    module.verify()
    round_trip(module)


def test_tensor_syntax_and_api() -> None:
    n = Poly.symbol("N")
    t = AxesTensorType("f32", [("Batch", n), ("Hidden", 768)])
    assert str(t) == "!tensor_axes.tensor<f32, [Batch: N, Hidden: 768]>"
    assert t.elem is by_name("f32")
    assert t.axes == (Axis("Batch", n), Axis("Hidden", Poly.const(768)))
    assert t.axis_names == ("Batch", "Hidden") and t.shape == (n, Poly.const(768)) and t.rank == 2
    assert str(AxesTensorType(by_name("i64"), [])) == "!tensor_axes.tensor<i64, []>"


def test_merged_axis_is_named_by_its_parts() -> None:
    merged = Axis.merged(["C", "H", "W"], 784)
    assert merged.name == "(C H W)" and merged.parts == ("C", "H", "W") and merged.is_merged
    t = AxesTensorType("f32", [("Batch", 4), merged])
    assert str(t) == "!tensor_axes.tensor<f32, [Batch: 4, (C H W): 784]>"
    assert Axis.named(" ( C  H W )", 784) == merged
    assert Axis.named("Hidden", 1).parts == ()


def test_parsed_text_reads_axes() -> None:
    text = '%0 = "test.op"() : () -> !tensor_axes.tensor<bf16, [( C H ): 2*N, S: "seq-len" + 1]>'
    op = Parser(make_ctx(), text).parse_module().body.block.first_op
    assert op is not None
    t = op.results[0].type
    assert isinstance(t, AxesTensorType)
    assert t.axes == (
        Axis("(C H)", Poly.parse("2*N"), ("C", "H")),
        Axis("S", Poly.symbol("seq-len") + 1),
    )


def test_axis_attr_syntax() -> None:
    attr = AxisAttr(Axis.merged(["C", "H"], Poly.symbol("N")))
    assert str(attr) == "#tensor_axes.axis<(C H): N>"
    round_trip(ModuleOp(Region(Block([test.TestOp(attributes={"a": attr})]))))


def test_layout_attr_syntax_and_conversion() -> None:
    rules = (
        LayoutRule("*.weight", ("In", "Out")),
        LayoutRule("mask", ("Seq", "(C H W)"), graph="decoder"),
        LayoutRule("scale", ()),
    )
    attr = LayoutAttr(rules)
    assert str(attr) == (
        '#tensor_axes.layout<["*.weight" -> [In, Out], "mask" in "decoder" -> [Seq, (C H W)], "scale" -> []]>'
    )
    assert attr.rules == rules
    ctx = make_ctx()
    parsed = Parser(ctx, f'"test.op"() {{l = {attr}}} : () -> ()').parse_module().body.block.first_op
    assert parsed is not None and parsed.attributes["l"] == attr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("!tensor_axes.tensor<f32, [A: 4, A: 5]>", "axis 'A' occurs twice .* with extents 4 and 5"),
        ("!tensor_axes.tensor<f32, [(C H): 4, (C H): 5]>", "axis '\\(C H\\)' occurs twice .* with extents 4 and 5"),
        ("!tensor_axes.tensor<f32, [(C): 4]>", "needs at least two parts; write C"),
        ("!tensor_axes.tensor<f32, [(C C): 4]>", "names a part twice"),
        ("!tensor_axes.tensor<f32, [A.b: 4]>", "neither an identifier nor a merge"),
        ("!tensor_axes.tensor<f32, [A: -4]>", "axis 'A' has negative extent -4"),
        ("!tensor_axes.tensor<f32, [4]>", "expected an axis name"),
        ("!tensor_axes.tensor<f32, [A 4]>", "Expected ':'"),
        ("!tensor_axes.tensor<f99, [A: 4]>", "unknown element type 'f99'"),
    ],
)
def test_malformed_types_are_refused(text: str, message: str) -> None:
    with pytest.raises((ParseError, VerifyException), match=message):
        Parser(make_ctx(), f'%0 = "test.op"() : () -> {text}').parse_module()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('#tensor_axes.layout<["" -> [A]]>', "non-empty pattern"),
        ('#tensor_axes.layout<["x" -> [A B]]>', "']' expected"),
        ("#tensor_axes.layout<[x -> [A]]>", "quoted glob pattern"),
        ('#tensor_axes.layout<["x" in -> [A]]>', "quoted graph name"),
        ('#tensor_axes.layout<["x" -> [(A)]]>', "at least two parts"),
    ],
)
def test_malformed_layouts_are_refused(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        Parser(make_ctx(), f'"test.op"() {{l = {text}}} : () -> ()').parse_module()


def test_api_refuses_bad_names_and_inconsistent_parts() -> None:
    with pytest.raises(AxisError, match="not an identifier"):
        Axis.named("(C H-1)", 4)
    with pytest.raises(VerifyException, match="does not match its parts"):
        AxisAttr(Axis("(C H)", Poly.const(4), ("C", "W")))
    with pytest.raises(VerifyException, match="occurs twice"):
        AxesTensorType("f32", [("A", 1), ("A", 2)])


def test_one_name_may_name_two_axes_of_one_extent() -> None:
    # A square projection weight: both axes are Hidden.
    square = AxesTensorType("f32", [("Hidden", 768), ("Hidden", 768)])
    assert square.axis_names == ("Hidden", "Hidden")
    parsed = Parser(make_ctx(), f'%0 = "test.op"() : () -> {square}').parse_module().body.block.first_op
    assert parsed is not None and parsed.results[0].type == square
