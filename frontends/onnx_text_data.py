"""The ONNX text reader's literals and tensor data: numbers, strings and names as onnx.parser reads them.

`loam.frontends.onnx_text_builder` calls these while the parser reduces: an integer, float or
string token becomes its value, and a tensor's declared type and data (a brace block, literals
token by token, or external-data entries) fill a `TensorProto` exactly as onnx.parser fills it.
The rules copied from onnx.parser (which field each element type fills, float32 rounded once,
`strtoull`'s wrap-around) are listed in `loam.frontends.onnx_text`'s docstring.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import onnx
from lark import Token

TP = onnx.TensorProto

# Element type keywords → TensorProto.DataType, as onnx.printer spells them.
ELEM_TYPES: dict[str, int] = {
    "float": TP.FLOAT, "uint8": TP.UINT8, "int8": TP.INT8, "uint16": TP.UINT16,
    "int16": TP.INT16, "int32": TP.INT32, "int64": TP.INT64, "string": TP.STRING,
    "bool": TP.BOOL, "float16": TP.FLOAT16, "double": TP.DOUBLE, "uint32": TP.UINT32,
    "uint64": TP.UINT64, "complex64": TP.COMPLEX64, "complex128": TP.COMPLEX128,
    "bfloat16": TP.BFLOAT16, "float8e4m3fn": TP.FLOAT8E4M3FN,
    "float8e4m3fnuz": TP.FLOAT8E4M3FNUZ, "float8e5m2": TP.FLOAT8E5M2,
    "float8e5m2fnuz": TP.FLOAT8E5M2FNUZ, "uint4": TP.UINT4, "int4": TP.INT4,
    "float4e2m1": TP.FLOAT4E2M1, "float8e8m0": 24, "uint2": 25, "int2": 26,
    "float6e2m3": 27, "float6e3m2": 28,
}  # fmt: skip

# Which TensorProto field onnx.parser fills for each element type (the list in `loam.frontends.onnx_text`).
_FLOAT_FIELD = {TP.FLOAT, TP.COMPLEX64}
_DOUBLE_FIELD = {TP.DOUBLE, TP.COMPLEX128}
_INT64_FIELD = {TP.INT64}
_UINT64_FIELD = {TP.UINT32, TP.UINT64}
_INT32_FIELD = set(ELEM_TYPES.values()) - _FLOAT_FIELD - _DOUBLE_FIELD - _INT64_FIELD - _UINT64_FIELD
_INT32_FIELD.discard(TP.STRING)

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MAX = 2**64 - 1

# Literal forms, the same as the grammar's INTEGER, DECIMAL and FLOATWORD terminals.
# Possessive quantifiers: these validate blocks of a million numbers, so no backtracking.
_INT_RE = r"-?[0-9]++"
_NUM_RE = r"-?[0-9]++(?:\.[0-9]*+)?+(?:[eE][+-]?+[0-9]++)?+|-?+(?i:infinity|inf|nan)"
_INT_BLOCK = re.compile(rf"\s*+(?:(?:{_INT_RE})\s*+(?:,\s*+(?:{_INT_RE})\s*+)*+)?+")
_NUM_BLOCK = re.compile(rf"\s*+(?:(?:{_NUM_RE})\s*+(?:,\s*+(?:{_NUM_RE})\s*+)*+)?+")
_INT_FULL = re.compile(_INT_RE)
_NUM_FULL = re.compile(_NUM_RE)
_COMMENT = re.compile(r"#[^\n]*")
_ESCAPE = re.compile(r"\\([\s\S])")


class TokenError(Exception):
    """An error found while building protos, with the token where onnx.parser would stop."""

    def __init__(self, token: Token | None, message: str) -> None:
        super().__init__(message)
        self.token = token
        self.message = message


def unquote(token: Token) -> str:
    """The value of a STRING token: a backslash keeps the character after it, whatever it is."""
    body = token.value[1:-1]
    return _ESCAPE.sub(r"\1", body) if "\\" in body else body


def identifier(token: Token | None) -> str:
    """An identifier, or a quoted identifier (onnx accepts a string wherever a name may be quoted)."""
    if token is None:
        return ""
    return unquote(token) if token.type == "STRING" else token.value


def parse_int(token: Token, lo: int = _INT64_MIN, hi: int = _INT64_MAX) -> int:
    if token.type != "INTEGER":
        raise TokenError(token, f"expected an integer, got '{token.value}'")
    value = int(token.value)
    if not lo <= value <= hi:
        raise TokenError(token, f"integer {token.value} is out of range [{lo}, {hi}]")
    return value


def _round_f32(text: str, value: float) -> float:
    """Round the decimal `text` (already read as the double `value`) to float32 exactly once.

    Going through a double can round twice; that differs from strtof only when the double lies
    exactly halfway between two float32 values, and then the exact decimal decides.
    """
    with np.errstate(over="ignore"):
        f32 = np.float32(value)
    if math.isinf(f32) and not math.isinf(value):
        raise OverflowError(text)
    near = float(f32)
    if near == value or math.isnan(value):
        return near
    with np.errstate(over="ignore"):
        other = float(np.nextafter(f32, np.float32(math.copysign(math.inf, value - near))))
    if (near + other) / 2 != value:
        return near
    exact = Fraction(text)
    exact_double = Fraction(value)
    if exact == exact_double:
        return near
    # The decimal lies on one side of the midpoint: take the float32 on that side.
    return max(near, other) if exact > exact_double else min(near, other)


def parse_float32(token: Token) -> float:
    if token.type not in ("INTEGER", "DECIMAL", "FLOATWORD"):
        raise TokenError(token, f"expected a number, got '{token.value}'")
    try:
        return _round_f32(token.value, float(token.value))
    except OverflowError:
        raise TokenError(token, f"{token.value} is out of the range of float") from None


def _parse_double(token: Token) -> float:
    if token.type not in ("INTEGER", "DECIMAL", "FLOATWORD"):
        raise TokenError(token, f"expected a number, got '{token.value}'")
    value = float(token.value)
    if math.isinf(value) and token.type != "FLOATWORD":
        raise TokenError(token, f"{token.value} is out of the range of double")
    return value


def _parse_uint64(token: Token) -> int:
    value = parse_int(token, -_UINT64_MAX, _UINT64_MAX)
    # strtoull negates a minus-signed value modulo 2**64.
    return value % (2**64)


def _floats_to_f32(parts: Sequence[str], token: Token) -> list[float]:
    """Bulk float32 conversion of validated literals, rounding each exactly once."""
    doubles = np.array([float(p) for p in parts], dtype=np.float64)
    with np.errstate(over="ignore"):
        singles = doubles.astype(np.float32)
    back = singles.astype(np.float64)
    inexact = ~((back == doubles) | np.isnan(doubles))
    if not inexact.any():
        return back.tolist()
    overflow = np.isinf(singles) & ~np.isinf(doubles)
    if overflow.any():
        index = int(np.argmax(overflow))
        raise TokenError(token, f"{parts[index].strip()} is out of the range of float")
    # Only a double lying exactly halfway between two float32 values can be rounded wrongly.
    with np.errstate(over="ignore"):
        toward = np.where(doubles > back, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
        other = np.nextafter(singles, toward).astype(np.float64)
    halfway = inexact & ((back + other) / 2 == doubles)
    values = back.tolist()
    for index in np.nonzero(halfway)[0].tolist():
        values[index] = _round_f32(parts[index].strip(), float(doubles[index]))
    return values


def _locate_bad_element(token: Token, body: str, pattern: re.Pattern[str], what: str) -> TokenError:
    """Find the first element of a numeric block that is not a `pattern` literal (error path)."""
    offset = 1
    for part in body.split(","):
        stripped = part.strip()
        if not pattern.fullmatch(stripped):
            at = offset + (part.index(stripped) if stripped else 0)
            assert token.line is not None and token.column is not None  # a lexed token knows its place
            line = token.line + token.value.count("\n", 0, at)
            last_nl = token.value.rfind("\n", 0, at)
            column = at - last_nl if last_nl >= 0 else token.column + at
            shown = stripped or ("'}'" if part is body.split(",")[-1] else "','")
            bad = Token("NUMBLOCK", stripped, line=line, column=column)
            return TokenError(bad, f"expected {what}, got {shown if not stripped else repr(stripped)}")
        offset += len(part) + 1
    return TokenError(token, f"expected {what}")


def _fill_numeric_block(tensor: onnx.TensorProto, dtype: int, token: Token) -> None:
    """Convert a NUMBLOCK token (`{1, 2.5, nan}`) into the data field onnx.parser fills."""
    body = token.value[1:-1]
    if "#" in body:
        # Blank comments out, keeping offsets for error positions.
        body = _COMMENT.sub(lambda m: " " * len(m.group()), body)
    if not body.strip():
        return
    parts = body.split(",")
    if dtype in _FLOAT_FIELD or dtype in _DOUBLE_FIELD:
        if not _NUM_BLOCK.fullmatch(body):
            raise _locate_bad_element(token, body, _NUM_FULL, "a number")
        if dtype in _FLOAT_FIELD:
            tensor.float_data.extend(_floats_to_f32(parts, token))
        else:
            doubles = [float(p) for p in parts]
            for value, part in zip(doubles, parts, strict=True):
                if math.isinf(value) and part.strip()[-1].isdigit():
                    raise TokenError(token, f"{part.strip()} is out of the range of double")
            tensor.double_data.extend(doubles)
        return
    if dtype == TP.STRING:
        raise _locate_bad_element(token, body, re.compile(r'"'), "a string")
    if not _INT_BLOCK.fullmatch(body):
        raise _locate_bad_element(token, body, _INT_FULL, "an integer")
    ints = [int(p) for p in parts]
    if dtype in _INT32_FIELD:
        lo, hi, field = _INT32_MIN, _INT32_MAX, tensor.int32_data
    elif dtype in _INT64_FIELD:
        lo, hi, field = _INT64_MIN, _INT64_MAX, tensor.int64_data
    else:
        lo, hi, field = -_UINT64_MAX, _UINT64_MAX, tensor.uint64_data
    if min(ints) < lo or max(ints) > hi:
        bad = next(p.strip() for p, v in zip(parts, ints, strict=True) if not lo <= v <= hi)
        raise TokenError(token, f"integer {bad} is out of range for {_dtype_name(dtype)} data")
    if field is tensor.uint64_data:
        ints = [v % (2**64) for v in ints]
    field.extend(ints)


def _dtype_name(dtype: int) -> str:
    return next((k for k, v in ELEM_TYPES.items() if v == dtype), str(dtype))


def _fill_literals(tensor: onnx.TensorProto, dtype: int, tokens: list[Token]) -> None:
    """Tensor data given token by token (the brace block holds a string)."""
    if dtype == TP.STRING:
        for tok in tokens:
            if tok.type != "STRING":
                raise TokenError(tok, f"expected a string, got '{tok.value}'")
            tensor.string_data.append(unquote(tok).encode("utf-8"))
    elif dtype in _FLOAT_FIELD:
        tensor.float_data.extend(parse_float32(tok) for tok in tokens)
    elif dtype in _DOUBLE_FIELD:
        tensor.double_data.extend(_parse_double(tok) for tok in tokens)
    elif dtype in _INT32_FIELD:
        tensor.int32_data.extend(parse_int(tok, _INT32_MIN, _INT32_MAX) for tok in tokens)
    elif dtype in _INT64_FIELD:
        tensor.int64_data.extend(parse_int(tok) for tok in tokens)
    else:
        tensor.uint64_data.extend(_parse_uint64(tok) for tok in tokens)


# Tensor data as the transformer hands it on: (kind, payload).
TensorData = tuple[str, Any]


def fill_tensor(tensor: onnx.TensorProto, type_proto: onnx.TypeProto, data: TensorData | None,
                 where: Token | None) -> None:  # fmt: skip
    """Fill `tensor` from its declared type and data, as onnx.parser does for initializers."""
    if not type_proto.HasField("tensor_type"):
        raise TokenError(where, "a tensor value needs a tensor type")
    tensor_type = type_proto.tensor_type
    dtype = tensor_type.elem_type
    tensor.data_type = dtype
    if not tensor_type.HasField("shape"):
        raise TokenError(where, "a tensor value needs a shape ('[]' leaves the rank unknown)")
    for dim in tensor_type.shape.dim:
        if not dim.HasField("dim_value"):
            raise TokenError(where, "a tensor value needs numeric dimensions")
        tensor.dims.append(dim.dim_value)
    if data is None:
        return
    kind, payload = data
    if kind == "numeric":
        _fill_numeric_block(tensor, dtype, payload)
    elif kind == "literal":
        _fill_literals(tensor, dtype, payload)
    else:
        tensor.data_location = TP.EXTERNAL
        for key, value in payload:
            entry = tensor.external_data.add()
            entry.key = key
            entry.value = value
