"""The StableHLO reader's refusals: one `LoamError` naming the file, the line and column, and the op.

Each case is a small text the reader must refuse, with the error it must give: malformed text,
an op outside the reader's set, operands of the wrong type, and ops it parses but cannot express
in ONNX (a general gather over an extent only the run knows, a reduce body of another op, a TOTALORDER
comparison, a custom call other than JAX's shape assertion, recursion).  The command-line tools
print such an error as one line and exit 1; `.mlir` files that are neither Loam IR nor StableHLO are
refused by the model reader.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loam.core.errors import LoamError, ModelError, UnsupportedError
from loam.driver.registry import read_model
from loam.frontends.stablehlo import import_stablehlo, mlir_kind
from loam.tools import loam_main, loam_translate


def main_of(body: str, args: str = '%x: tensor<4xf32> loc("x")', result: str = "tensor<4xf32>") -> str:
    return f"func.func public @main({args}) -> {result} {{\n{body}\n}}\n"


CASES = [
    (
        "unknown op",
        main_of(
            "  %s, %0 = stablehlo.rng_bit_generator %x, algorithm = DEFAULT"
            " : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)\n  return %0 : tensor<4xui32>",
            '%x: tensor<2xui64> loc("x")',
            "tensor<4xui32>",
        ),
        UnsupportedError,
        r"^t\.mlir:2:3: 'stablehlo\.rng_bit_generator' is not an op Loam reads \(StableHLO ops it reads: abs, add,",
    ),
    (
        "unknown dialect",
        main_of("  %0 = chlo.erf_inv %x : tensor<4xf32> -> tensor<4xf32>\n  return %0 : tensor<4xf32>"),
        UnsupportedError,
        r"^t\.mlir:2:3: 'chlo\.erf_inv' is not an op Loam reads \(.*; and chlo\.acos, .*chlo\.erf, ",
    ),
    (
        "malformed",
        main_of(
            "  %0 = stablehlo.transpose %x, dims = [0 : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>"
        ),
        ModelError,
        r"^t\.mlir:2:42: ']' expected$",
    ),
    (
        "wrong operand type",
        main_of(
            "  %0 = stablehlo.add %x, %n : tensor<4xf32>\n  return %0 : tensor<4xf32>",
            args='%x: tensor<4xf32> loc("x"), %n: tensor<4xi32> loc("n")',
        ),
        ModelError,
        r"^t\.mlir:2:26: operand is used with type tensor<4xf32>, but has been previously used or defined "
        r"with type tensor<4xi32>",
    ),
    (
        "ill-typed generic op",
        main_of(
            '  %0 = "stablehlo.add"(%x, %n) : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xf32>\n'
            "  return %0 : tensor<4xf32>",
            args='%x: tensor<4xf32> loc("x"), %n: tensor<4xi32> loc("n")',
        ),
        ModelError,
        r"^t\.mlir:2:3: stablehlo\.add operand 1 has element type i32, the result f32$",
    ),
    (
        "bad broadcast",
        main_of(
            "  %0 = stablehlo.broadcast_in_dim %x, dims = [1] : (tensor<4xf32>) -> tensor<4x3xf32>\n"
            "  return %0 : tensor<4x3xf32>",
            result="tensor<4x3xf32>",
        ),
        ModelError,
        r"^t\.mlir:2:3: stablehlo\.broadcast_in_dim: operand dim 0 \(4\) cannot broadcast to result dim 1 \(3\)",
    ),
    (
        "gather of columns of a table of unknown width",
        main_of(
            '  %0 = "stablehlo.gather"(%t, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [0], '
            "collapsed_slice_dims = [1], start_index_map = [1], index_vector_dim = 1>, slice_sizes = array<i64: 4, 1>}>"
            " : (tensor<4x?xf32>, tensor<3x1xi32>) -> tensor<4x3xf32>\n  return %0 : tensor<4x3xf32>",
            args="%t: tensor<4x?xf32>, %i: tensor<3x1xi32>",
            result="tensor<4x3xf32>",
        ),
        UnsupportedError,
        r"^t\.mlir:2:3: stablehlo\.gather: the operand has the shape 4x\?; Loam needs its extents known here",
    ),
    (
        "reduce of a subtraction",
        main_of(
            "  %c = stablehlo.constant dense<0.0> : tensor<f32>\n"
            "  %0 = stablehlo.reduce(%x init: %c) applies stablehlo.subtract across dimensions = [0]"
            " : (tensor<4xf32>, tensor<f32>) -> tensor<f32>\n  return %0 : tensor<f32>",
            result="tensor<f32>",
        ),
        UnsupportedError,
        r"^t\.mlir:3:3: stablehlo\.reduce: its body computes stablehlo\.subtract; Loam reads a body of one",
    ),
    (
        "total order",
        main_of(
            "  %0 = stablehlo.compare  LT, %x, %x,  TOTALORDER : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>\n"
            "  return %0 : tensor<4xi1>",
            result="tensor<4xi1>",
        ),
        UnsupportedError,
        r"^t\.mlir:2:3: stablehlo\.compare: a TOTALORDER comparison",
    ),
    (
        "custom call",
        main_of(
            '  %0 = stablehlo.custom_call @my_kernel(%x) {backend_config = ""} : (tensor<4xf32>) -> tensor<4xf32>\n'
            "  return %0 : tensor<4xf32>"
        ),
        UnsupportedError,
        r"^t\.mlir:2:3: stablehlo\.custom_call: custom_call @my_kernel is not supported",
    ),
    (
        "recursion",
        main_of("  %0 = call @main(%x) : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>"),
        UnsupportedError,
        r"^t\.mlir:1:1: func\.func: @main calls itself",
    ),
    (
        "complex element type",
        main_of(
            "  return %x : tensor<4xcomplex<f32>>", args="%x: tensor<4xcomplex<f32>>", result="tensor<4xcomplex<f32>>"
        ),
        UnsupportedError,
        r"^t\.mlir:1:1: func\.func: 'arg0': element type complex<f32> is not one Loam compiles",
    ),
    (
        "convolution with batch groups",
        main_of(
            "  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f], window = {stride = [1]}"
            " {batch_group_count = 2 : i64, feature_group_count = 1 : i64}"
            " : (tensor<2x5x3xf32>, tensor<2x3x4xf32>) -> tensor<1x4x4xf32>\n  return %0 : tensor<1x4x4xf32>",
            args='%x: tensor<2x5x3xf32> loc("x"), %w: tensor<2x3x4xf32> loc("w")',
            result="tensor<1x4x4xf32>",
        ),
        UnsupportedError,
        r"^t\.mlir:2:3: stablehlo\.convolution: batch_group_count = 2 has no ONNX counterpart",
    ),
    (
        "convolution with lhs dilation",
        main_of(
            "  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f], window = {stride = [1],"
            " lhs_dilate = [2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64}"
            " : (tensor<2x5x3xf32>, tensor<2x3x4xf32>) -> tensor<2x8x4xf32>\n  return %0 : tensor<2x8x4xf32>",
            args='%x: tensor<2x5x3xf32> loc("x"), %w: tensor<2x3x4xf32> loc("w")',
            result="tensor<2x8x4xf32>",
        ),
        UnsupportedError,
        r"^t\.mlir:2:3: stablehlo\.convolution: lhs_dilate = \[2\] \(a transposed convolution\) is not supported",
    ),
    (
        "reduce_window with another body",
        main_of(
            '  %c = stablehlo.constant dense<1.0> : tensor<f32>\n  %0 = "stablehlo.reduce_window"(%x, %c)'
            " <{window_dimensions = array<i64: 2>}> ({\n  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
            "    %m = stablehlo.multiply %a, %b : tensor<f32>\n    stablehlo.return %m : tensor<f32>\n"
            "  }) : (tensor<4xf32>, tensor<f32>) -> tensor<3xf32>\n  return %0 : tensor<3xf32>",
            result="tensor<3xf32>",
        ),
        UnsupportedError,
        r"^t\.mlir:3:3: stablehlo\.reduce_window: its body computes stablehlo\.multiply; Loam reads a body of one",
    ),
    (
        "two arguments named alike",
        main_of("  return %x : tensor<4xf32>", args='%x: tensor<4xf32> loc("x"), %y: tensor<4xf32> loc("x")'),
        ModelError,
        r"^t\.mlir:1:1: func\.func: two arguments are both named 'x'",
    ),
]


@pytest.mark.parametrize(("text", "error", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_reader_refuses_naming_the_place(text: str, error: type[LoamError], message: str) -> None:
    with pytest.raises(error, match=message):
        import_stablehlo(text, "t.mlir")


def test_a_module_without_main_is_refused() -> None:
    text = "func.func private @f(%x: tensor<f32>) -> tensor<f32> {\n  return %x : tensor<f32>\n}\n"
    text += text.replace("@f", "@g")
    with pytest.raises(ModelError, match=r"t\.mlir: no func\.func @main"):
        import_stablehlo(text, "t.mlir")


def test_the_cli_prints_one_line_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "bad.mlir"
    model.write_text(CASES[0][1])
    with pytest.raises(SystemExit) as exit_info:
        loam_translate.main(["--import-stablehlo", str(model)])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"loam-translate: error: {model}:2:3: 'stablehlo.rng_bit_generator'")
    with pytest.raises(SystemExit) as exit_info:
        loam_main.main(["build", str(model), "-o", str(tmp_path / "out.py"), "--no-cache"])
    assert exit_info.value.code == 1
    assert f"{model}:2:3: 'stablehlo.rng_bit_generator' is not an op Loam reads" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('builtin.module { graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {} }', "graph"),
        ('"graph.model"() ({}) : () -> ()', "graph"),
        ("func.func @main() {\n  return\n}", "stablehlo"),
        (
            '"func.func"() <{function_type = () -> (), sym_name = "main"}> ({ "func.return"() : () -> () }) : () -> ()',
            "stablehlo",
        ),
        ("%0 = stablehlo.constant dense<1.0> : tensor<f32>", "stablehlo"),
        ('// a comment naming "graph.model" and "stablehlo.add" in strings only', None),
        ("builtin.module {}", None),
    ],
)
def test_mlir_kind_tells_loam_ir_from_stablehlo(text: str, kind: str | None) -> None:
    assert mlir_kind(text) == kind


def test_an_mlir_file_of_neither_kind_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "empty.mlir"
    model.write_text("builtin.module {}\n")
    with pytest.raises(ModelError, match=r"empty\.mlir: neither Loam graph IR \(graph\.\* ops\) nor StableHLO"):
        read_model(model)
