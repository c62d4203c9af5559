"""Pooling: MaxPool, AveragePool, LpPool and their Global forms, lowered to one `kernel.pool` each.

The window geometry (auto_pad, ceil_mode, the output extents) is settled at build time by the
helpers Conv uses; the kernel receives explicit pads and the output extents.  A Global pool is the
same kernel with one window covering all spatial axes.  N and C carry through from X; a spatial
axis whose extent is unchanged keeps X's axis, any other is new (the layout names it).

MaxPool's NaN handling follows onnxruntime's: its scan (used for the Indices output, dilations and
f64) keeps each window's first tap unless a later one is strictly greater (`nan_rule="first"`);
its f32/f16 kernels otherwise skip NaNs (`"ignore"`, a window of NaNs only giving NaN).  Those
kernels are SIMD code whose NaN results depend on where the NaN sits (and on the CPU), so with
NaN inputs `ignore` is the rule they follow for the common placements, not for every one.

Older opsets read the same attributes with narrower defaults (no ceil_mode or dilations before
opset 10/18/19, no count_include_pad before 7), so every opset restates as the current one; LpPool
and GlobalLpPool before opset 2 take `p` as a float, read the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, int_attr, require_arity
from loam.ops.conv import framed_extents, kept_spatial_axes, spatial_attrs, window_geometry
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.lowering import axes_type
from loam.ops.operands import emit_library, fold_if_known, given, require_elem
from loam.poly import Poly

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

_MODES = {
    "MaxPool": "max",
    "AveragePool": "avg",
    "LpPool": "lp",
    "GlobalMaxPool": "max",
    "GlobalAveragePool": "avg",
    "GlobalLpPool": "lp",
}


class PoolRule(OpRule):
    """The six pooling operators; `params` settles each node's `kernel.pool` parameters."""

    op_types = tuple(_MODES)
    kernels: tuple[str, ...] = ("kernel.pool",)
    attributes = frozenset(
        {
            "auto_pad",
            "ceil_mode",
            "count_include_pad",
            "dilations",
            "kernel_shape",
            "p",
            "pads",
            "storage_order",
            "strides",
        }
    )
    elem_types = (*FLOATS, "i8", "ui8")
    limitations = (
        "channel and spatial extents must be numbers (the batch may be symbolic); i8/ui8 for MaxPool only; "
        "negative pads are refused"
    )

    def params(self, node: NodeInfo, x: tuple[int, ...], n_outputs: int, elem: str) -> dict[str, object]:
        if len(x) < 3:
            raise node.fail(f"X has rank {len(x)}; pooling needs N, C and at least one spatial axis")
        mode = _MODES[node.op_type]
        nsp = len(x) - 2
        spatial = x[2:]
        params: dict[str, object] = {"mode": mode}
        if node.op_type.startswith("Global"):
            kernel, strides, dilations = spatial, (1,) * nsp, (1,) * nsp
            pads, out = (0,) * (2 * nsp), (1,) * nsp
        else:
            given = node.attr("kernel_shape")
            if given is None:
                raise node.fail("kernel_shape is required")
            kernel = tuple(int(k) for k in given)
            if len(kernel) != nsp or any(k < 1 for k in kernel):
                raise node.fail(f"kernel_shape {list(kernel)} must give {nsp} positive extents")
            strides = spatial_attrs(node, nsp, "strides", 1)
            dilations = spatial_attrs(node, nsp, "dilations", 1)
            ceil_mode = bool(int_attr(node, "ceil_mode", 0, (0, 1)))
            pads, out = window_geometry(
                node, spatial, kernel, strides, dilations, ceil_mode=ceil_mode, negative_same=True
            )
        params.update(kernel_shape=kernel, strides=strides, pads=pads, dilations=dilations, out_shape=out)
        if mode == "avg":
            params["count_include_pad"] = int_attr(node, "count_include_pad", 0, (0, 1))
        if mode == "lp":
            p = float(node.attr("p", 2))
            if p <= 0:
                raise node.fail(f"p must be positive, got {p}")
            params["p"] = p
        if mode == "max" and (n_outputs == 2 or any(d > 1 for d in dilations) or elem == "f64"):
            # onnxruntime's MaxPool scans each window keeping the first tap unless a later one is
            # strictly greater (so a NaN first tap wins, a later NaN never does); that loop serves the
            # Indices output, dilations and f64.  Its f32/f16 kernels otherwise skip NaNs (`ignore`).
            params["nan_rule"] = "first"
        if n_outputs == 2:
            storage_order = int_attr(node, "storage_order", 0, (0, 1))
            if storage_order not in (0, 1):
                raise node.fail(f"storage_order must be 0 or 1, got {storage_order}")
            params.update(storage_order=storage_order, indices=1)
        return params

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        x = given(node, inputs, 0, "X")
        require_elem(node, x, self.elem_types if node.op_type == "MaxPool" else FLOATS, "X")
        if x.rank < 3:
            raise node.fail(f"X has rank {x.rank}; pooling needs N, C and at least one spatial axis")
        xs = framed_extents(node, x.shape)
        # MaxPool's optional Indices output: the graph names it, so the node's outputs decide.
        n_outputs = self.outputs_wanted(node)
        params = self.params(node, xs, n_outputs, x.elem.name)
        shape = (x.shape[0], *(Poly.const(d) for d in (xs[1], *params["out_shape"])))  # type: ignore[misc]
        from loam.runtime.kernels.conv import kernel_pool

        value = fold_if_known(inputs, lambda v: kernel_pool(v, **params))
        from loam import dtypes

        if n_outputs == 2:
            y, index = value if value is not None else (None, None)
            return [Facts(x.elem, shape, y), Facts(dtypes.by_name("i64"), shape, index)]
        return [Facts(x.elem, shape, value)]

    def outputs_wanted(self, node: NodeInfo) -> int:
        """How many outputs the node names (MaxPool's Indices is optional)."""
        count = node.outputs
        if (count == 2 and node.op_type != "MaxPool") or count > 2:
            raise node.fail(f"names {count} outputs; {node.op_type} has {2 if node.op_type == 'MaxPool' else 1}")
        return count

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        axes = (x[0], x[1], *kept_spatial_axes(x, outputs[0]))
        return [axes for _ in outputs]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import PoolOp

        x = operands[0]
        assert x is not None
        params = self.params(
            node, framed_extents(node, axes_type(x).shape), len(ctx.result_types), ctx.result_types[0].elem.name
        )
        return emit_library(ctx, PoolOp([x], ctx.result_types, node.name, **params))  # type: ignore[arg-type]


RULES: tuple[OpRule, ...] = (PoolRule(),)
