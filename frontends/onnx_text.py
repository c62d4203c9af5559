"""The ONNX textual-format reader: `.onnxtext` source → `onnx.ModelProto`.

The text is the language `onnx.parser` reads and `onnx.printer` writes.  This reader parses it with
the lark grammar `loam/grammar/onnx.lark` (LALR, contextual lexer) and fills exactly the protobuf
fields `onnx.parser` fills, so the shared importer cannot tell a text model from a binary one.  It
never calls `onnx.parser`: the tests use that only as an oracle.

Behaviour copied from onnx's parser on purpose (found by experiment), because the oracle demands it:

* tensor data goes to the field onnx.parser picks per element type: `int32_data` for every type of
  32 bits or fewer except float (float16/bfloat16/float8/... values are bit patterns: 15360 is a
  float16 1.0), `int64_data`, `uint64_data` (uint32 too; negative literals wrap modulo 2**64 like
  `strtoull`), `float_data` (float, complex64), `double_data` (double, complex128), `string_data`;
* float literals are rounded once, straight to float32 (like `strtof`); overflow is an error and
  underflow gives zero;
* in an attribute list the first element fixes the element type; tensors, graphs and types inside a
  list are parsed and dropped, as onnx.parser does;
* identifier lists allow empty entries (`Op(, x)` has two inputs, `Op(x,)` one).

Every error is an `OnnxSyntaxError` (`file:line:column: message`) or another `ModelError`.
"""

from __future__ import annotations

import importlib.resources
import pathlib
from typing import cast

import lark
import onnx
from lark import Token

from loam.core.errors import ModelError, OnnxSyntaxError
from loam.frontends.onnx_text_builder import ProtoBuilder
from loam.frontends.onnx_text_data import TokenError

__all__ = ["parse_model_text", "read_onnx_text"]

# Readable names for the grammar's terminals in "expected one of ..." messages.
_TERMINAL_NAMES = {
    "IDENT": "an identifier",
    "STRING": "a string",
    "INTEGER": "an integer",
    "DECIMAL": "a number",
    "FLOATWORD": "a number",
    "NUMBLOCK": "'{'",
    "$END": "the end of the input",
}

_PARSER: lark.Lark | None = None


def _parser() -> lark.Lark:
    """The LALR parser, built once per process (building takes a good fraction of a second)."""
    global _PARSER
    if _PARSER is None:
        grammar = importlib.resources.files("loam.grammar").joinpath("onnx.lark").read_text("utf-8")
        _PARSER = lark.Lark(
            grammar,
            parser="lalr",
            lexer="contextual",
            transformer=ProtoBuilder(),
            maybe_placeholders=True,
            propagate_positions=False,
        )
    return _PARSER


def _describe_expected(names: set[str] | frozenset[str]) -> str:
    parser = _parser()
    shown: set[str] = set()
    for name in names:
        if name in _TERMINAL_NAMES:
            shown.add(_TERMINAL_NAMES[name])
            continue
        try:
            pattern = parser.get_terminal(name).pattern
        except KeyError:
            shown.add(name)
            continue
        if isinstance(pattern, lark.lexer.PatternStr):
            shown.add(f"'{pattern.value}'")
        else:
            shown.add(name.lower())
    return ", ".join(sorted(shown))


def _got(token: Token) -> str:
    if token.type == "$END":
        return "the end of the input"
    return repr(token.value) if len(token.value) <= 40 else repr(token.value[:40] + "...")


def parse_model_text(text: str, filename: str = "<string>") -> onnx.ModelProto:
    """Parse an ONNX model in the textual format into the `ModelProto` onnx.parser would build.

    Raises `OnnxSyntaxError` (a `ModelError`) naming `filename`, the line and the column.
    """
    nul = text.find("\x00")
    if nul >= 0:
        # onnx's C++ parser reads a NUL as the end of the text; no spelling of a model contains one.
        line = text.count("\n", 0, nul) + 1
        raise OnnxSyntaxError(filename, line, nul - (text.rfind("\n", 0, nul) + 1) + 1, "a NUL character")
    try:
        # The parser runs ProtoBuilder as it reduces, so what it returns is the model, not a tree.
        return cast(onnx.ModelProto, _parser().parse(text))
    except lark.exceptions.UnexpectedToken as err:
        tok = err.token
        line = tok.line if tok.line is not None else err.line
        column = tok.column if tok.column is not None else err.column
        if tok.type == "$END":
            line, column = _end_position(text)
        raise OnnxSyntaxError(
            filename, line, column, f"expected one of {_describe_expected(err.expected)}, got {_got(tok)}"
        ) from None
    except lark.exceptions.UnexpectedCharacters as err:
        allowed = err.allowed or set()
        at = err.pos_in_stream
        assert at is not None  # the lexer stopped at a character: it says where
        got = text[at : at + 1]
        if text.startswith(".", at) and text[at + 1 : at + 2].isdigit():
            got = ".5-style number (write 0.5)"
        raise OnnxSyntaxError(
            filename, err.line, err.column, f"expected one of {_describe_expected(allowed)}, got {got!r}"
        ) from None
    except lark.exceptions.UnexpectedEOF as err:
        line, column = _end_position(text)
        raise OnnxSyntaxError(
            filename, line, column, f"expected one of {_describe_expected(set(err.expected))}, got the end of the input"
        ) from None
    except lark.exceptions.VisitError as err:
        raise _located_error(err.orig_exc, filename, text) from None
    except TokenError as err:
        raise _located_error(err, filename, text) from None


def _located_error(exc: BaseException, filename: str, text: str) -> ModelError:
    if isinstance(exc, TokenError):
        if exc.token is not None and exc.token.line is not None:
            return OnnxSyntaxError(filename, exc.token.line, exc.token.column or 1, exc.message)
        return OnnxSyntaxError(filename, *_end_position(text), exc.message)
    if isinstance(exc, ModelError):
        return exc
    raise exc


def _end_position(text: str) -> tuple[int, int]:
    line = text.count("\n") + 1
    return line, len(text) - (text.rfind("\n") + 1) + 1


def read_onnx_text(path: str | pathlib.Path) -> onnx.ModelProto:
    """Read a `.onnxtext` file (UTF-8); errors name the file."""
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ModelError(f"{path}: cannot read the model: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ModelError(f"{path}: the model is not UTF-8 text (byte {err.start})") from None
    return parse_model_text(text, str(path))
