"""Loam's xDSL dialects, registered lazily by name (the xDSL `get_all_dialects` pattern)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect


def get_all_dialects() -> dict[str, Callable[[], Dialect]]:
    """Each Loam dialect's name and a zero-argument function that imports and returns it."""

    def get_graph() -> Dialect:
        from loam.dialects.graph import Graph

        return Graph

    def get_shape_poly() -> Dialect:
        from loam.dialects.shape_poly import ShapePoly

        return ShapePoly

    def get_tensor_axes() -> Dialect:
        from loam.dialects.tensor_axes import TensorAxes

        return TensorAxes

    def get_kernel() -> Dialect:
        from loam.dialects.kernel import Kernel

        return Kernel

    def get_stablehlo() -> Dialect:
        from loam.dialects.stablehlo import StableHLO

        return StableHLO

    return {
        "graph": get_graph,
        "shape_poly": get_shape_poly,
        "tensor_axes": get_tensor_axes,
        "kernel": get_kernel,
        "stablehlo": get_stablehlo,
    }
