"""Graph-dialect types and attributes compare by every parameter.

xDSL takes a parametrized attribute's parameters from the decorated class's own annotations, so a
parameter declared only on a shared base class silently drops out of equality; round-trip tests
cannot see that (everything compares equal), so these tests check inequality directly.
"""

from __future__ import annotations

import pytest
from xdsl.ir import Attribute

from loam.dialects.graph import OptType, SeqType, SparseTensorType, TensorDataAttr, TensorType

DIFFERENT_PAIRS: list[tuple[Attribute, Attribute]] = [
    (TensorType("f32", [1]), TensorType("f32", [2])),
    (TensorType("f32", [1]), TensorType("i64", [1])),
    (TensorType("f32", ["N"]), TensorType("f32", ["M"])),
    (TensorType("f32", [None]), TensorType("f32", ["N"])),
    (TensorType("f32"), TensorType("f32", [])),
    (SparseTensorType("f32", [3]), SparseTensorType("f32", [4])),
    (SeqType(TensorType("f32", [1])), SeqType(TensorType("f32", [2]))),
    (OptType(TensorType("f32", [1])), OptType(TensorType("i64", [1]))),
    (TensorDataAttr("f32", [1], raw=b"\0\0\0\0"), TensorDataAttr("f32", [1], raw=b"\0\0\x80\x3f")),
]


@pytest.mark.parametrize(("a", "b"), DIFFERENT_PAIRS, ids=lambda a: str(a))
def test_differing_parameters_make_differing_attributes(a: Attribute, b: Attribute) -> None:
    assert a != b
    assert a == type(a).new(a.parameters)  # type: ignore[attr-defined]
