"""Operators whose value the build knows or passes through: Constant and Identity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loam.core import dtypes
from loam.core.poly import Poly
from loam.ops.base import Facts, KeepsAxes, LowerContext, NodeInfo, OpRule, int_attr, require_arity
from loam.ops.lowering import FLOAT_TYPES, filled, scalar_constant
from loam.ops.movement import MOVABLE, check_movable
from loam.ops.operands import emit_library, from_run, operand_facts, optional, present_bits

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
    """ONNX Constant: exactly one of `value`, `value_float(s)`, `value_int(s)`, `value_string(s)`.

    String constants (and a string `value` tensor) are refused: no Loam kernel takes strings.
    """

    op_types = ("Constant",)
    kernels: tuple[str, ...] = ("kernel.constant",)
    attributes = frozenset({"value", "sparse_value", *_VALUE_ATTRS})

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 0)
        given = [key for key in ("value", "sparse_value", *_VALUE_ATTRS) if node.attr(key) is not None]
        if len(given) != 1:
            raise node.fail(f"needs exactly one value attribute, has {', '.join(given) or 'none'}")
        (key,) = given
        if key == "sparse_value":
            raise node.unsupported("a sparse_value is not supported")
        value = node.attr(key)
        if key == "value":
            if not isinstance(value, np.ndarray):
                raise node.fail(f"attribute 'value' must be a tensor, got {value!r}")
            return [facts_of_array(value, _elem_of(node, value))]
        elem_name, np_type = _VALUE_ATTRS[key]
        if np_type is None:
            raise node.unsupported(f"'{key}' makes a string tensor; Loam compiles no strings")
        items = value if key.endswith("s") and isinstance(value, list) else [value]
        # An int attribute is a valid float; anything else (a string, a float for an int) is malformed.
        kinds = (int, float) if np_type is np.float32 else (int,)
        if (key.endswith("s") and not isinstance(value, list)) or not all(
            isinstance(v, kinds) and not isinstance(v, bool) for v in items
        ):
            raise node.fail(f"attribute '{key}' must hold {'floats' if np_type is np.float32 else 'integers'}")
        try:
            array: np.ndarray = np.asarray(value, dtype=np_type)
        except OverflowError:
            raise node.fail(f"attribute '{key}' holds a value outside int64") from None
        return [facts_of_array(array, dtypes.by_name(elem_name))]


def _elem_of(node: NodeInfo, array: np.ndarray) -> dtypes.ElementType:
    for elem in dtypes.BY_ONNX.values():
        if elem.numpy is not None and elem.numpy == array.dtype and elem.name != "string":
            return elem
    raise node.unsupported(f"value of numpy dtype {array.dtype} has no ONNX element type")


class IdentityRule(KeepsAxes):
    """ONNX Identity: the input, unchanged (any element type but strings)."""

    op_types = ("Identity",)
    kernels: tuple[str, ...] = ()
    keeps_values = True
    elem_types = MOVABLE

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        (x,) = inputs
        if x is None:
            raise node.fail("the input is absent")
        check_movable(node, x, "input")
        return [x]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        assert operands[0] is not None
        return [operands[0]]


class DropoutRule(OpRule):
    """ONNX Dropout at inference: the output is the input, and the optional mask is constant.

    Before opset 7 `is_test` (default 0: training) chooses; opsets 7-11 always infer; from 12 the
    `training_mode` input does, and a known true is refused, since training drops random elements.
    One only the run gives passes through `kernel.dropout`, which refuses training with a ratio
    other than 0 at run time (the module's DataError); with ratio 0 training keeps every element.
    The mask is bool from opset 10 and the data's type before.

    The mask's value at inference: from opset 12 ONNX defines `output = scale * data * mask`, so
    a mask that keeps every element is all true (as onnxruntime and ONNX's reference evaluator
    give it).  Before 12 the specification leaves it undefined ("not filled" in test mode for
    opsets 1 and 6, no word for 7-11); onnxruntime fills it with zeros (false) there, while the
    reference evaluator gives ones.  Loam follows onnxruntime for opsets before 12, the runtime
    models are deployed with and this project's oracle: zeros in the mask's type.
    """

    op_types = ("Dropout",)
    kernels: tuple[str, ...] = ("kernel.constant", "kernel.dropout")
    attributes = frozenset({"ratio", "is_test", "consumed_inputs", "seed"})
    elem_types = MOVABLE
    limitations = "inference only: training mode that drops elements is refused (at run time, where the run gives it)"

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        if node.since < 7:
            require_arity(node, inputs, 1)
            if not int_attr(node, "is_test", 0):
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
                if mode.elem.name != "bool" or mode.static_shape() not in ((), (1,)):
                    raise node.fail(
                        f"training_mode must be a bool scalar, got {mode.elem.name} [{', '.join(map(str, mode.shape))}]"
                    )
                if mode.value is None:  # the run decides: kernel.dropout refuses training that drops anything
                    ratio = optional(inputs, 1)
                    scalar = ratio is None or ratio.static_shape() in ((), (1,))
                    if ratio is not None and (ratio.elem.name not in FLOAT_TYPES or not scalar):
                        raise node.fail(
                            f"ratio must be a float scalar, got {ratio.elem.name} [{', '.join(map(str, ratio.shape))}]"
                        )
                elif bool(np.asarray(mode.value).reshape(-1)[0]):
                    raise node.unsupported(
                        "training_mode is true (drops random elements); Loam compiles inference only"
                    )
        x = inputs[0]
        if x is None:
            raise node.fail("the data input is absent")
        check_movable(node, x, "data")
        mask_elem = dtypes.by_name("bool") if node.since >= 10 else x.elem
        dims = x.static_shape()
        mask = None if dims is None or mask_elem.numpy is None else _mask(node, dims, mask_elem.numpy)
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
        mode = operands[2] if node.since >= 12 and len(operands) > 2 else None
        if mode is not None and from_run(operand_facts([mode])[0]):
            from loam.dialects.kernel import DropoutOp

            ratio = operands[1]
            kernel_inputs = [x, mode, *([ratio] if ratio is not None else [])]
            op = DropoutOp(kernel_inputs, ctx.result_types[:1], node.name, present=present_bits([ratio]))
            results = emit_library(ctx, op)
        if len(ctx.result_types) > 1:
            t = ctx.result_types[1]
            assert t.elem.numpy is not None
            if all(a.extent.is_const for a in t.axes):
                value = _mask(node, tuple(a.extent.const_value for a in t.axes), t.elem.numpy)
                mask = KernelConstantOp(TensorDataAttr.from_numpy(value, t.elem), t, node.name)
                ctx.emit(mask)
                results.append(mask.result)
            else:  # over symbolic extents: the mask's one value at every position
                results.append(filled(ctx, scalar_constant(ctx, _mask(node, (), t.elem.numpy), t.elem, node), t, node))
        return results


def _mask(node: NodeInfo, dims: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Dropout's inference mask: all true from opset 12, zeros before (see `DropoutRule`)."""
    return (np.ones if node.since >= 12 else np.zeros)(dims, dtype=dtype)


RULES: tuple[OpRule, ...] = (ConstantRule(), IdentityRule(), DropoutRule())
