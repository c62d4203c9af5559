"""The `shape_poly` dialect: extents and tensor types print and parse back; bad ones are refused."""

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
from loam.core.poly import Poly
from loam.dialects.shape_poly import ExtentAttr, OweOp, PolyTensorType
from loam.frontends.context import make_context

SYMBOLS = ["N", "M", "seq_len", "seq-len", "batch size", 'q"uote', "x.y", "naïve"]
ELEMS = sorted(BY_NAME)


def make_ctx() -> Context:
    ctx = make_context()
    ctx.load_dialect(test.Test)  # `test.op` carries the types under test
    return ctx


def _leaf() -> st.SearchStrategy[Poly]:
    return st.one_of(st.integers(0, 4096).map(Poly.const), st.sampled_from(SYMBOLS).map(Poly.symbol))


polys = st.recursive(
    _leaf(),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: ab[0] + ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] - ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] * ab[1]),
    ),
    max_leaves=6,
)
# A tensor extent must not be a negative constant; symbolic ones may be anything.
dims = polys.filter(lambda p: not (p.is_const and p.const_value < 0))
tensor_types = st.builds(PolyTensorType, st.sampled_from(ELEMS), st.lists(dims, max_size=4))


def module_of(types: list[Attribute], attrs: dict[str, Attribute]) -> ModuleOp:
    block = Block([test.TestOp(result_types=types, attributes=attrs)])
    module = ModuleOp(Region(block))
    module.verify()
    return module


def round_trip(module: ModuleOp) -> None:
    ctx = make_ctx()
    for generic in (False, True):
        out = StringIO()
        Printer(stream=out, print_generic_format=generic).print_op(module)
        reparsed = Parser(ctx, out.getvalue(), "roundtrip").parse_module()
        reparsed.verify()
        assert reparsed.is_structurally_equivalent(module), out.getvalue()


@settings(max_examples=60, deadline=None)
@given(st.lists(tensor_types, max_size=3), st.lists(polys, max_size=3))
def test_random_types_and_extents_round_trip(types: list[PolyTensorType], extents: list[Poly]) -> None:
    attrs: dict[str, Attribute] = {f"e{i}": ExtentAttr(p) for i, p in enumerate(extents)}
    round_trip(module_of(list(types), attrs))


def test_extent_syntax_and_api() -> None:
    n = Poly.symbol("N")
    attr = ExtentAttr(2 * n + 1)
    assert str(attr) == "#shape_poly.extent<2*N + 1>"
    assert attr.poly == 2 * n + 1
    assert ExtentAttr(3).poly == Poly.const(3)


def test_tensor_syntax_and_api() -> None:
    n = Poly.symbol("N")
    t = PolyTensorType("f32", [4, n, 2 * n + 1])
    assert str(t) == "!shape_poly.tensor<f32, [4, N, 2*N + 1]>"
    assert t.elem is by_name("f32") and t.shape == (Poly.const(4), n, 2 * n + 1) and t.rank == 3
    assert str(PolyTensorType(by_name("i64"), [])) == "!shape_poly.tensor<i64, []>"
    quoted = PolyTensorType("f32", [Poly.symbol("seq-len") - 1])
    assert str(quoted) == '!shape_poly.tensor<f32, ["seq-len" - 1]>'


def test_parsed_text_reads_the_polynomial() -> None:
    text = '%0 = "test.op"() : () -> !shape_poly.tensor<bf16, [(N + 1)*(N - 1), "seq-len"]>'
    op = Parser(make_ctx(), text).parse_module().body.block.first_op
    assert op is not None
    t = op.results[0].type
    assert isinstance(t, PolyTensorType)
    assert t.shape == (Poly.parse("N*N - 1"), Poly.symbol("seq-len"))
    assert t.elem.name == "bf16"


def test_owe_round_trips_and_needs_a_reason() -> None:
    owe = OweOp(Poly.symbol("N"), 1024, "Slice 'attn/mask_slice'")
    assert str(owe) == "shape_poly.owe N <= 1024 for \"Slice 'attn/mask_slice'\""
    same = OweOp(Poly.parse("a"), Poly.parse("S + past"), "Add 'm'", equal=True)
    assert str(same) == "shape_poly.owe a == S + past for \"Add 'm'\""
    module = ModuleOp(Region(Block([owe, same])))
    round_trip(module)
    with pytest.raises(VerifyException, match="must name what relies on it"):
        OweOp(Poly.symbol("N"), 1024, " ").verify()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("!shape_poly.tensor<f33, [4]>", "unknown element type 'f33'"),
        ("!shape_poly.tensor<f32, [N +]>", "expected an integer, a symbol"),
        ("!shape_poly.tensor<f32, [N.x]>", "must be quoted"),
        ("!shape_poly.tensor<f32, [(N]>", "expected '\\)'"),
        ("!shape_poly.tensor<f32, 4>", "'\\[' expected"),
    ],
)
def test_malformed_types_are_refused(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        Parser(make_ctx(), f'%0 = "test.op"() : () -> {text}').parse_module()


def test_negative_constant_extent_is_refused() -> None:
    with pytest.raises(VerifyException, match="axis 1 has negative extent -3"):
        PolyTensorType("f32", [4, -3])
    # A symbolic extent may be negative for some symbol values; only the run can say.
    assert PolyTensorType("f32", [Poly.symbol("N") - 3]).shape[0] == Poly.parse("N - 3")
