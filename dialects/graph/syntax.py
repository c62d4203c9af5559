"""Parsing and printing helpers that the `graph` dialect's types, attributes and ops share.

Strings that may not be ASCII (xDSL 0.75 prints non-ASCII UTF-8 as a bytes literal, which its lexer
then hands out as another token kind), float32s printed so that they read back exactly, element-type
names checked against `loam.core.dtypes`, and operands resolved with the type of their definition (ONNX
graphs are topologically ordered, so a use never comes before its definition).
"""

from __future__ import annotations

import math
import struct

import numpy as np
from xdsl.ir import SSAValue
from xdsl.parser import AttrParser, Parser, UnresolvedOperand
from xdsl.utils.exceptions import VerifyException

from loam.core.dtypes import ElementType, by_name


def parse_bytes(parser: AttrParser) -> bytes:
    """A string literal as bytes: the lexer hands out UTF-8 and non-UTF-8 literals as different tokens."""
    text = parser.parse_optional_str_literal()
    if text is not None:
        return text.encode("utf-8")
    return parser.parse_bytes_literal()


def parse_optional_text(parser: AttrParser) -> str | None:
    """A string literal, if present.  The printer escapes non-ASCII UTF-8 as `\\C3\\BC`, which the
    lexer then hands out as a bytes literal, so both token kinds are read and decoded."""
    text = parser.parse_optional_str_literal()
    if text is not None:
        return text
    raw = parser.parse_optional_bytes_literal()
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        parser.raise_error("expected a UTF-8 string")


def parse_text(parser: AttrParser) -> str:
    text = parse_optional_text(parser)
    if text is None:
        parser.raise_error("string literal expected")
    return text


def print_float(value: float) -> str:
    """A float32 as the shortest decimal that reads back exactly, or its IEEE bits when not finite."""
    if not math.isfinite(value):
        return f"0x{struct.unpack('<I', struct.pack('<f', value))[0]:08x}"
    text = str(np.float32(value))  # numpy's shortest digits that read back as the same float32
    # MLIR float literals need a dot: `1e+16` would lex as the integer 1 followed by `e`.
    if "e" in text and "." not in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def parse_float(parser: AttrParser) -> float:
    number = parser.parse_number()
    if isinstance(number, int):  # hex bits of a non-finite float
        return struct.unpack("<f", struct.pack("<I", number & 0xFFFFFFFF))[0]
    return number


def elem_of(name: str, where: str) -> ElementType:
    try:
        return by_name(name)
    except KeyError:
        raise VerifyException(f"{where}: unknown element type '{name}'") from None


def parse_defined_operand(parser: Parser) -> SSAValue:
    """An operand defined earlier (ONNX graphs are topologically ordered), resolved with its own type."""
    return resolve_defined(parser, parser.parse_unresolved_operand())


def resolve_defined(parser: Parser, unresolved: UnresolvedOperand) -> SSAValue:
    values = parser.ssa_values.get(unresolved.operand_name)
    if not values or unresolved.index >= len(values):
        parser.raise_error("a graph value is used before it is defined", unresolved.span)
    return parser.resolve_operand(unresolved, values[unresolved.index].type)
