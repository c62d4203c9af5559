"""The `stablehlo` input dialect: JAX's custom syntax and the generic form read back alike, and
verification refuses ops whose types disagree.

Round trips run over the committed texts (every op the reader translates appears in them): parse,
print, parse again, and the two printed forms must be equal; the generic form printed by xDSL must
parse to the same custom form.  The verifier cases are one op each, built from text.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from loam.dialects.stablehlo import CHLO, StableHLO
from loam.frontends.stablehlo_source import prepare

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [
    ROOT / "examples" / "jax_mlp" / "mlp.mlir",
    ROOT / "examples" / "jax_attention" / "attention.generic.mlir",
    ROOT / "tests" / "frontends" / "stablehlo_ops" / "ops.mlir",
    ROOT / "tests" / "frontends" / "stablehlo_ops" / "handwritten.mlir",
    ROOT / "tests" / "frontends" / "stablehlo_cnn" / "cnn.mlir",
    ROOT / "tests" / "frontends" / "stablehlo_cnn" / "windows.generic.mlir",
    ROOT / "tests" / "frontends" / "stablehlo_indexing" / "indexing.mlir",
    ROOT / "tests" / "frontends" / "stablehlo_indexing" / "indexing.generic.mlir",
]


def context() -> Context:
    ctx = Context()
    for dialect in (Builtin, Func, StableHLO, CHLO):
        ctx.load_dialect(dialect)
    return ctx


def parse(text: str) -> ModuleOp:
    module = Parser(context(), prepare(text, "t.mlir").text).parse_module()
    module.verify()
    return module


def printed(module: ModuleOp, generic: bool = False) -> str:
    out = StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue()


@pytest.mark.parametrize("path", TEXTS, ids=[p.name for p in TEXTS])
def test_round_trip(path: Path) -> None:
    first = printed(parse(path.read_text()))
    assert printed(parse(first)) == first
    assert printed(parse(printed(parse(first), generic=True))) == first


def test_the_custom_forms_jax_prints() -> None:
    text = printed(parse((TEXTS[2]).read_text()))
    for spelling in (
        "stablehlo.compare  GT, ",
        "stablehlo.dot_general %",
        "batching_dims = [0] x [0], contracting_dims = [2] x [1]",
        "applies stablehlo.maximum across dimensions = [1]",
        "stablehlo.slice %",
        ":2]",
        "stablehlo.iota dim = 1 : tensor<3x4xi32>",
        "stablehlo.broadcast_in_dim %",
        ", dims = [2, 0] : (tensor<3x4xf32>) -> tensor<4x2x3xf32>",
    ):
        assert spelling in text
    assert "reducer(%" in printed(parse(TEXTS[3].read_text()))
    indexing = printed(parse(TEXTS[6].read_text()))
    for spelling in (
        ", sizes = [3, 5] : (tensor<4x5xf32>, tensor<i32>, tensor<i32>) -> tensor<3x5xf32>",
        "stablehlo.dynamic_update_slice %",
        "stablehlo.reverse %",
        ", dims = [1] : tensor<4x6xi32>",
        '"stablehlo.sort"(%',
        '"stablehlo.scatter"(%',
        "#stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0]",
    ):
        assert spelling in indexing


def op(text: str, args: str) -> str:
    return f"func.func @f({args}) {{\n  {text}\n  return\n}}"


@pytest.mark.parametrize(
    ("text", "args", "message"),
    [
        (
            "%0 = stablehlo.transpose %x, dims = [0, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>",
            "%x: tensor<2x3xf32>",
            "not a permutation",
        ),
        (
            "%0 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [1]"
            " : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x4xf32>",
            "%x: tensor<2x3xf32>, %y: tensor<4x5xf32>",
            r"lhs dim 1 \(3\) and rhs dim 1 \(5\) differ",
        ),
        (
            "%0 = stablehlo.reduce(%x init: %i) applies stablehlo.add across dimensions = [0]"
            " : (tensor<2xf32>, tensor<1xf32>) -> tensor<f32>",
            "%x: tensor<2xf32>, %i: tensor<1xf32>",
            "the init value must be a scalar",
        ),
        (
            "%0 = stablehlo.slice %x [0:4] : (tensor<3xf32>) -> tensor<4xf32>",
            "%x: tensor<3xf32>",
            "0:4:1 is not a slice of dim 0",
        ),
        (
            "%0 = stablehlo.select %p, %x, %x : tensor<2xf32>, tensor<2xf32>",
            "%p: tensor<2xf32>, %x: tensor<2xf32>",
            "predicate must be i1",
        ),
        (
            "%0 = stablehlo.concatenate %x, %y, dim = 0 : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>",
            "%x: tensor<2x3xf32>, %y: tensor<2x4xf32>",
            "must match",
        ),
        (
            "%0 = stablehlo.reshape %x : (tensor<2x3xf32>) -> tensor<5xf32>",
            "%x: tensor<2x3xf32>",
            "different numbers of elements",
        ),
        (
            "%0 = stablehlo.dynamic_slice %x, %i, sizes = [4] : (tensor<3xf32>, tensor<i32>) -> tensor<4xf32>",
            "%x: tensor<3xf32>, %i: tensor<i32>",
            r"sizes \[4\] do not fit",
        ),
        (
            "%0 = stablehlo.dynamic_update_slice %x, %u, %i : (tensor<3xf32>, tensor<2xf32>, tensor<2xi32>)"
            " -> tensor<3xf32>",
            "%x: tensor<3xf32>, %u: tensor<2xf32>, %i: tensor<2xi32>",
            "must be an integer scalar",
        ),
        (
            "%0 = stablehlo.reverse %x, dims = [2] : tensor<3xf32>",
            "%x: tensor<3xf32>",
            "dims \\[2\\] of rank 1",
        ),
        (
            '%0 = "stablehlo.sort"(%x) <{dimension = 0 : i64}> ({\n'
            "  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
            "    stablehlo.return %a : tensor<f32>\n"
            "  }) : (tensor<3xf32>) -> tensor<3xf32>",
            "%x: tensor<3xf32>",
            "must return one tensor<i1>",
        ),
        (
            "%0 = stablehlo.compare  LT, %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>",
            "%x: tensor<2xf32>",
            "result must be i1",
        ),
    ],
)
def test_verification_refuses_disagreeing_types(text: str, args: str, message: str) -> None:
    with pytest.raises(VerifyException, match=message):
        parse(op(text, args))
