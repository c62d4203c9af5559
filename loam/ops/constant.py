"""Operators whose value the build knows or passes through: Constant and Identity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam import dtypes
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, require_arity
from loam.poly import Poly

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

# Constant's value attributes (opset 12+ adds the scalar and list forms) and the numpy dtype each makes.
_VALUE_ATTRS: dict[str, tuple[str, type | None]] = {
    "value_float": ("f32", np.float32),
    "value_floats": ("f32", np.float32),
    "value_int": ("i64", np.int64),
    "value_ints": ("i64", np.int64),
    "value_string": ("string", None),
    "value_strings": ("string", None),
}


def facts_of_array(array: np.ndarray, elem: dtypes.ElementType) -> Facts:
    """Facts of a value the build holds."""
    return Facts(elem, tuple(Poly.const(int(d)) for d in array.shape), array)


class ConstantRule(OpRule):
    """ONNX Constant: exactly one of `value`, `value_float(s)`, `value_int(s)`, `value_string(s)`."""

    op_types = ("Constant",)
    attributes = frozenset({"value", "sparse_value", *_VALUE_ATTRS})

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 0)
        if node.attr("sparse_value") is not None:
            raise node.unsupported("a sparse_value is not supported")
        tensor = node.attr("value")
        if tensor is not None:
            array = np.asarray(tensor)
            elem = _elem_of(node, array)
            return [facts_of_array(array, elem)]
        for key, (elem_name, np_type) in _VALUE_ATTRS.items():
            given = node.attr(key)
            if given is not None:
                array = np.asarray(given, dtype=np_type if np_type is not None else object)
                return [facts_of_array(array, dtypes.by_name(elem_name))]
        raise node.fail("has no value attribute")


def _elem_of(node: NodeInfo, array: np.ndarray) -> dtypes.ElementType:
    for elem in dtypes.BY_ONNX.values():
        if elem.numpy is not None and elem.numpy == array.dtype and elem.name != "string":
            return elem
    raise node.unsupported(f"value of numpy dtype {array.dtype} has no ONNX element type")


class IdentityRule(OpRule):
    """ONNX Identity (and Dropout at inference, with one output): the input, unchanged."""

    op_types = ("Identity",)

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        (x,) = inputs
        if x is None:
            raise node.fail("the input is absent")
        return [x]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        assert inputs[0] is not None
        return [inputs[0]]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        assert operands[0] is not None
        return [operands[0]]


RULES: tuple[OpRule, ...] = (ConstantRule(), IdentityRule())
