"""The kernel dialect: Expr builders, text round trips (custom and generic), verifiers."""

from __future__ import annotations

import math
from io import StringIO

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException

from loam.dialects.expr import BINARY_OPS, UNARY_OPS, Binary, Const, Convert, Expr, Operand, Select, Unary
from loam.dialects.kernel import ExprAttr
from loam.frontends.context import make_context

T = "!tensor_axes.tensor"
ELEMS = ["f32", "f64", "f16", "bf16", "i8", "i32", "i64", "ui8", "ui64", "bool"]


@st.composite
def exprs(draw: st.DrawFn) -> Expr:
    steps: list[object] = []
    for i in range(draw(st.integers(1, 8))):
        kinds = ["operand", "const"] + (["unary", "binary", "select", "cast"] if i else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "operand":
            steps.append(Operand(draw(st.integers(0, 3))))
        elif kind == "const":
            elem = draw(st.sampled_from(ELEMS))
            steps.append(Const(draw(st.floats(allow_nan=True, allow_infinity=True, width=32)), elem))
        elif kind == "select":
            steps.append(Select(*(draw(st.integers(0, i - 1)) for _ in range(3))))
        elif kind == "cast":
            steps.append(Convert(draw(st.integers(0, i - 1)), draw(st.sampled_from(ELEMS))))
        elif kind == "unary":
            steps.append(Unary(draw(st.sampled_from(sorted(UNARY_OPS))), draw(st.integers(0, i - 1))))
        else:
            op = draw(st.sampled_from(sorted(BINARY_OPS)))
            steps.append(Binary(op, draw(st.integers(0, i - 1)), draw(st.integers(0, i - 1))))
    return Expr(tuple(steps))  # type: ignore[arg-type]


def parse_attr(text: str) -> object:
    return Parser(make_context(), text).parse_attribute()


@settings(max_examples=200, deadline=None)
@given(exprs())
def test_expr_attr_round_trips(expr: Expr) -> None:
    attr = ExprAttr(expr)
    assert parse_attr(str(attr)) == attr


def test_builders_share_and_compose() -> None:
    x, b = Expr.operand(0), Expr.operand(1)
    assert str((x + b).unary("relu")) == "[operand 0, operand 1, add 0 1, relu 2]"
    assert str(x.binary("mul", x)) == "[operand 0, mul 0 0]"
    fused = Expr.operand(0).unary("relu").substitute([x + b])
    assert fused == (x + b).unary("relu")
    assert str((x - b).remap_operands([1, 0])) == "[operand 1, operand 0, sub 0 1]"
    assert (x * 0.5).arity == 1 and (x + b).operand_indices == {0, 1}


def test_select_and_cast_steps() -> None:
    c, x = Expr.operand(0), Expr.operand(1)
    where = Expr.select(c, x, 0.0)
    assert str(where) == "[operand 0, operand 1, const 0.0 : f32, select 0 1 2]"
    assert str(x.cast("f16")) == "[operand 1, cast 0 : f16]"
    assert str(x.binary("less_equal", x).binary("and", c)) == "[operand 1, less_equal 0 0, operand 0, and 1 2]"
    widened = (c * 2.0).substitute([Expr.operand(0).cast("f32")])
    assert str(widened) == "[operand 0, cast 0 : f32, const 2.0 : f32, mul 1 2]"
    assert parse_attr(f"#kernel.expr<{where}>") == ExprAttr(where)


def test_const_equality_is_by_bits() -> None:
    assert Const(math.nan) == Const(float("nan"))
    assert Const(0.0) != Const(-0.0)
    assert str(Const(1e-5)) == "const 1.0e-05 : f32"


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ((Unary("relu", 0),), "not an earlier step"),
        ((Operand(0), Unary("frobnicate", 0)), "unknown unary operator"),
        ((Operand(0), Binary("add", 0, 1)), "not an earlier step"),
        ((Operand(0), Select(0, 0, 1)), "not an earlier step"),
        ((Operand(0), Convert(0, "f7")), "unknown element type 'f7'"),
        ((), "at least one step"),
    ],
)
def test_bad_exprs_are_refused(steps: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Expr(steps)  # type: ignore[arg-type]


def test_bad_expr_text_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="unknown expression step 'frob'"):
        parse_attr("#kernel.expr<[operand 0, frob 0]>")
    with pytest.raises(ParseError, match="unknown element type 'f7'"):
        parse_attr("#kernel.expr<[operand 0, cast 0 : f7]>")


def t(axes: str) -> str:
    return f"{T}<f32, [{axes}]>"


PROGRAM = f"""
kernel.program "forward" (%x : {t("B: 2, K: 3")}) names ["x"] attributes {{model = "m"}} {{
  %w = kernel.weight "w" : {t("K: 3, N: 4")}
  %0 = kernel.matmul %x, %w {{node = "mm"}} : ({t("B: 2, K: 3")}, {t("K: 3, N: 4")}) -> {t("B: 2, N: 4")}
  %1 = kernel.zip(%0) #kernel.expr<[operand 0, const 0.5 : f32, mul 0 1]> {{node = "z"}}
       : ({t("B: 2, N: 4")}) -> {t("B: 2, N: 4")}
  %2 = kernel.permute %1 [1, 0] {{node = "p"}} : {t("B: 2, N: 4")} -> {t("N: 4, B: 2")}
  %3 = kernel.regroup %2 {{node = "r"}} : {t("N: 4, B: 2")} -> {t("(N B): 8")}
  %4 = kernel.cast %3 {{node = "c"}} : {t("(N B): 8")} -> {T}<f16, [(N B): 8]>
  kernel.return %4 names ["y"] : {T}<f16, [(N B): 8]>
}}
"""


@pytest.mark.parametrize("generic", [False, True])
def test_program_round_trips(generic: bool) -> None:
    ctx = make_context()
    module = Parser(ctx, PROGRAM).parse_module()
    module.verify()
    out = StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    again = Parser(ctx, out.getvalue()).parse_module()
    assert again.is_structurally_equivalent(module)
    assert str(again) == str(module)


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (
            f'%0 = kernel.matmul %x, %x {{node = "mm"}} : ({t("B: 2, K: 3")}, {t("B: 2, K: 3")}) -> {t("B: 2, K: 3")}',
            "contraction extents disagree: lhs 3, rhs 2",
        ),
        (
            f'%0 = kernel.permute %x [0, 0] {{node = "p"}} : {t("B: 2, K: 3")} -> {t("B: 2, K: 3")}',
            r"\[0, 0\] is not a permutation of rank 2",
        ),
        (
            f'%0 = kernel.zip(%x) #kernel.expr<[operand 0, operand 1, add 0 1]> {{node = "z"}} '
            f": ({t('B: 2, K: 3')}) -> {t('B: 2, K: 3')}",
            r"1 operands but the expression reads operands \[0, 1\]",
        ),
        (
            f'%0 = kernel.regroup %x {{node = "r"}} : {t("B: 2, K: 3")} -> {t("F: 5")}',
            "6 elements cannot regroup into 5",
        ),
    ],
)
def test_verifiers(op: str, message: str) -> None:
    text = (
        f'kernel.program "forward" (%x : {t("B: 2, K: 3")}) names ["x"] {{\n  {op}\n'
        f'  kernel.return %x names ["y"] : {t("B: 2, K: 3")}\n}}'
    )
    module = Parser(make_context(), text).parse_module()
    with pytest.raises(VerifyException, match=message):
        module.verify()


def canonical(expr: Expr, operands: int) -> Expr:
    """`expr` reading its operand `i` as operand `i % operands`, in the builders' form."""
    return expr.substitute([Expr.operand(i % operands) for i in range(expr.arity)])


@settings(max_examples=300, deadline=None)
@given(exprs(), exprs(), st.integers(1, 4))
def test_inlining_into_a_one_operand_consumer_is_the_general_walk(consumer: Expr, producer: Expr, arity: int) -> None:
    # The shortcut for a chain (the consumer reads one operand, both in the builders' form) gives the steps
    # the general walk gives, and the facts it carries over without a walk are the ones a walk finds.
    own, made = canonical(consumer, 1), canonical(producer, arity)
    if own.arity != 1:
        return  # a constant consumer reads no operand to inline
    fused = own.inline_operand(0, made)
    assert fused.steps == own.substitute([made]).steps
    fresh = Expr(fused.steps)  # checked, with nothing cached
    assert fused.computed_steps == fresh.computed_steps
    assert fused.operand_indices == fresh.operand_indices
    assert fused.step_index == fresh.step_index
    assert fused.substitute([Expr.operand(i) for i in range(fused.arity)]).steps == fused.steps  # the builders' form


def test_a_long_chain_of_inlined_steps_is_the_general_walk() -> None:
    chain = Expr.operand(0).binary("add", Expr.operand(1))
    for i in range(200):
        step = Expr.operand(0).unary(("neg", "abs", "relu")[i % 3])
        if i % 7 == 0:
            step = step.binary("mul", Expr.const(0.5))  # a constant the chain already holds after the first
        expected = step.substitute([chain])
        chain = step.inline_operand(0, chain)
        assert chain.steps == expected.steps
    assert chain.computed_steps == Expr(chain.steps).computed_steps
