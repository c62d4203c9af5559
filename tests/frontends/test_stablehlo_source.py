"""The StableHLO text preparation: locations, hex floats and key paths, on small texts.

`prepare` rewrites what xDSL 0.75 cannot read (location aliases defined after use, location ranges,
hex floats in `dense<...>`) without moving any line, and keeps columns where the rewritten text is
not longer; the locations it resolves name arguments and say where an op came from.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, DenseIntOrFPElementsAttr
from xdsl.parser import Parser

from loam.core.errors import ModelError
from loam.frontends.stablehlo import key_path
from loam.frontends.stablehlo_source import SourceLocation, prepare

TEXT = """\
#loc1 = loc("x")
module @jit_f {
  func.func public @main(%arg0: tensor<4xf32> loc(#loc1), %arg1: tensor<4xf32> loc("params['w']")) -> tensor<4xf32> {
    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32> loc(#loc7)
    return %0 : tensor<4xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc5 = loc("/home/me/model.py":12:8 to :30)
#loc6 = loc("f"(#loc5))
#loc7 = loc("jit(f)/add"(callsite(#loc6 at #loc8)))
#loc8 = loc("<module>"(#loc9))
#loc9 = loc("/home/me/run.py":3:1)
"""


def test_locations_resolve_aliases_defined_after_their_use() -> None:
    prepared = prepare(TEXT, "t.mlir")
    found = sorted(prepared.locations.values(), key=str)
    assert SourceLocation("jit(f)/add", "model.py:12:8") in found  # the callee's file position, not the caller's
    assert SourceLocation("x") in found and SourceLocation("params['w']") in found


def test_lines_and_columns_stay_put() -> None:
    prepared = prepare(TEXT, "t.mlir")
    assert prepared.text.count("\n") == TEXT.count("\n")
    for original, rewritten in zip(TEXT.splitlines(), prepared.text.splitlines(), strict=True):
        if not original.startswith("#loc"):
            assert rewritten.split("loc(")[0] == original.split("loc(")[0]  # up to the first location
            assert len(rewritten) == len(original)  # keys are padded to the location's width
        else:
            assert not rewritten.strip()  # an alias definition is blanked


def dense(text: str) -> np.ndarray:
    ctx = Context()
    ctx.load_dialect(Builtin)
    attr = Parser(ctx, prepare(text, "t.mlir").text).parse_attribute()
    assert isinstance(attr, DenseIntOrFPElementsAttr)
    return np.array(attr.get_values(), dtype=np.float64).reshape(attr.get_shape())


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("dense<0xFF800000> : tensor<f32>", np.array(-np.inf)),
        ("dense<0x7F800000> : tensor<2xf32>", np.array([np.inf, np.inf])),
        ("dense<[0xFF800000, 1.5, -2.0]> : tensor<3xf32>", np.array([-np.inf, 1.5, -2.0])),
        ("dense<[[0x3C00], [0xFC00]]> : tensor<2x1xf16>", np.array([[1.0], [-np.inf]])),
        ("dense<0xFFF0000000000000> : tensor<f64>", np.array(-np.inf)),
        ("dense<[0x3F80, 2.5]> : tensor<2xbf16>", np.array([1.0, 2.5])),
    ],
)
def test_hex_floats_read_as_their_bits(literal: str, expected: np.ndarray) -> None:
    np.testing.assert_array_equal(dense(literal), expected)


def test_hex_nan_keeps_its_payload() -> None:
    ctx = Context()
    ctx.load_dialect(Builtin)
    attr = Parser(ctx, prepare("dense<0x7FC00001> : tensor<f32>", "t.mlir").text).parse_attribute()
    assert isinstance(attr, DenseIntOrFPElementsAttr)
    assert struct.pack("<f", attr.get_values()[0]) == struct.pack("<I", 0x7FC00001)


def test_integer_hex_and_strings_are_left_alone() -> None:
    text = 'x = dense<0x10> : tensor<i32> {note = "loc(dense<0xFF>)"}'
    assert prepare(text, "t.mlir").text == text


def test_an_unterminated_location_is_refused_at_its_place() -> None:
    with pytest.raises(ModelError, match=r"^t\.mlir:2:7: unterminated loc\(\.\.\.\)"):
        prepare('%0 = 1\n  loc("x"', "t.mlir")


@pytest.mark.parametrize(
    ("label", "parts"),
    [
        ("x", ["x"]),
        ("params['fc1.weight']", ["params", "fc1.weight"]),
        ("params['layers'][0].w", ["params", "layers", "0", "w"]),
        ('batch["tokens"]', ["batch", "tokens"]),
        ("result[1]", ["result", "1"]),
        ("not a path!", ["not a path!"]),
    ],
)
def test_key_paths(label: str, parts: list[str]) -> None:
    assert key_path(label) == parts
