"""`loam.frontends.context.check_lexable`: text that would hang or exhaust xDSL's lexer is refused before it is
parsed, in linear time, naming the file, line and column; everything MLIR text legitimately holds passes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from loam.core.errors import ModelError
from loam.frontends.context import check_lexable, parse_ir
from loam.tools import loam_opt
from tests.tools.test_cli import assert_one_line_error, run

VALID = """\
// a comment with a lone " quote in it
builtin.module attributes {loam.note = "tab\\tnewline\\nquote\\"back\\\\slash\\0A"} {
  %i123456789 = "test.op"() {w = 3 : i32, v = dense<1> : tensor<2x?xi8>, u = 1 : ui4, s = 2 : si16} : () -> i1
}
"""


def test_what_mlir_text_holds_passes() -> None:
    check_lexable(VALID, "ok.mlir")
    check_lexable("%x = 1 : i16777215", "widest.mlir")


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        ('module {\n  "graph.node"() {name = "never closes} : () -> ()\n}', "bad.mlir:2:26:", "does not close"),
        ('"a\\q"', "bad.mlir:1:1:", "holds an escape"),
        ('"two\nlines"', "bad.mlir:1:1:", "does not close"),
        ("%c = arith.constant 1 : i99999999999", "bad.mlir:1:25:", "integer type of width 99999999999"),
        ("%t : tensor<2x?xui16777216>", "bad.mlir:1:17:", "integer type of width 16777216"),
    ],
)
def test_unlexable_text_is_refused_naming_the_place(text: str, where: str, reason: str) -> None:
    with pytest.raises(ModelError) as info:
        check_lexable(text, "bad.mlir")
    assert str(info.value).startswith(where) and reason in str(info.value)


def test_an_unclosed_literal_is_refused_in_linear_time() -> None:
    # xDSL's own literal pattern backtracks exponentially on this: 30 characters take a minute, and each
    # one more doubles that.
    text = 'builtin.module {"' + "abcdefgh " * 20_000 + "\\q"
    started = time.monotonic()
    with pytest.raises(ModelError, match="does not close"):
        parse_ir(text, "long.mlir")
    assert time.monotonic() - started < 5


def test_loam_opt_refuses_an_unclosed_literal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.mlir"
    path.write_text('builtin.module attributes {loam.note = "unterminated and long enough to hang } {\n}\n')
    code, _, err = run(loam_opt.main, [str(path)], capsys)
    assert code == 1
    assert_one_line_error(err, "loam-opt", "bad.mlir:1:40: a string literal that does not close")


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("builtin.module attributes {v = 100000000000000000000 : i64} {\n}", "x.mlir:1:59:", "out of range"),
        ("builtin.module attributes {v = array<i65: 1, 2>} {\n}", "x.mlir:1:47:", "Format not implemented for i65"),
        ("builtin.module attributes {v = array<i0: 1>} {\n}", "x.mlir:1:42:", "out of range for type i0"),
        ("#", "x.mlir:1:1:", "Expected suffix identifier"),  # raised as the parser is made, on its first token
    ],
)
def test_what_xdsl_raises_besides_parse_errors_is_a_model_error(text: str, where: str, message: str) -> None:
    with pytest.raises(ModelError) as info:
        parse_ir(text, "x.mlir")
    assert str(info.value).startswith(where) and message in str(info.value)
