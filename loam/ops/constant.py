"""Operators whose value the build knows or passes through: Constant and Identity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam import dtypes
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, require_arity
from loam.ops.movement import MOVABLE, check_movable
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
    """ONNX Identity: the input, unchanged (any element type but strings)."""

    op_types = ("Identity",)
    elem_types = MOVABLE

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        (x,) = inputs
        if x is None:
            raise node.fail("the input is absent")
        check_movable(node, x, "input")
        return [x]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        assert inputs[0] is not None
        return [inputs[0]]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        assert operands[0] is not None
        return [operands[0]]


class DropoutRule(OpRule):
    """ONNX Dropout at inference: the output is the input, and the optional mask is all true.

    Before opset 7 `is_test` (default 0: training) chooses; opsets 7-11 always infer; from 12 the
    `training_mode` input does, and a known true (or one computed at run time) is refused, since
    training drops random elements.  The mask is bool from opset 10 and the data's type before.
    """

    op_types = ("Dropout",)
    attributes = frozenset({"ratio", "is_test", "consumed_inputs", "seed"})
    elem_types = MOVABLE
    limitations = "inference only: training mode is refused"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        if node.since < 7:
            require_arity(node, inputs, 1)
            if not node.attr("is_test", 0):
                raise node.unsupported(
                    f"is_test=0 (training, the default before opset 7) drops random elements; Loam compiles "
                    f"inference only (opset {node.since})"
                )
        elif node.since < 12:
            require_arity(node, inputs, 1)
        else:
            require_arity(node, inputs, 1, 3)
            mode = inputs[2] if len(inputs) > 2 else None
            if mode is not None:
                if mode.value is None:
                    raise node.unsupported("training_mode is computed at run time; Loam compiles inference only")
                if bool(np.asarray(mode.value).reshape(-1)[0]):
                    raise node.unsupported(
                        "training_mode is true (drops random elements); Loam compiles inference only"
                    )
        x = inputs[0]
        if x is None:
            raise node.fail("the data input is absent")
        check_movable(node, x, "data")
        mask_elem = dtypes.by_name("bool") if node.since >= 10 else x.elem
        dims = x.static_shape()
        mask = None if dims is None or mask_elem.numpy is None else np.ones(dims, dtype=mask_elem.numpy)
        # stage 0 asks for every output the graph names; the mask is the second when named.
        return [x, Facts(mask_elem, x.shape, mask)][: node.outputs]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        assert inputs[0] is not None
        return [inputs[0] for _ in outputs]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.graph import TensorDataAttr
        from loam.dialects.kernel import ConstantOp as KernelConstantOp

        x = operands[0]
        assert x is not None
        results = [x]
        if len(ctx.result_types) > 1:
            t = ctx.result_types[1]
            assert t.elem.numpy is not None
            ones = np.ones(tuple(a.extent.const_value for a in t.axes), dtype=t.elem.numpy)
            mask = KernelConstantOp(TensorDataAttr.from_numpy(ones, t.elem), t, node.name)
            ctx.emit(mask)
            results.append(mask.result)
        return results


RULES: tuple[OpRule, ...] = (ConstantRule(), IdentityRule(), DropoutRule())
