"""Loam's declared layer order: which packages may import which.

Each layer lists its packages (a package holds its subpackages: `loam.dialects` holds
`loam.dialects.kernel`).  A module may import from its own layer and the layers below it, never from
one above; within a layer, the packages' imports form no cycle (`tests/test_import_layers.py` checks
both over every import, function-local included, and docs/architecture.md is drawn from this table).
The runtime is the bottom layer although the generated module is a backend's product: it imports only
numpy and the standard library, and the layers above run its kernels at build time (stage 0 folds
constants with them, gradients and dialects evaluate through them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    """One layer: its name, its packages (lowest first within the layer) and what it is for."""

    name: str
    packages: tuple[str, ...]
    purpose: str


LAYERS: tuple[Layer, ...] = (
    Layer(
        "runtime",
        ("loam.runtime",),
        "the code a generated module carries and the build runs: errors, weight loading, the forward prologue, "
        "the library kernels; numpy and the standard library only",
    ),
    Layer(
        "core",
        ("loam.core",),
        "the symbolic core: polynomials over named extents, bounds, derived symbols, owed conditions, dtypes, "
        "errors, size limits, layout rules",
    ),
    Layer(
        "dialects",
        ("loam.dialects",),
        "the IR: graph, shape_poly, tensor_axes, kernel, stablehlo, expr and tile programs, and the build "
        "contract's module attributes",
    ),
    Layer(
        "operator rules and front ends",
        ("loam.ops", "loam.frontends"),
        "each operator's stage-0 rule, axis rule and lowering; the readers of ONNX, StableHLO and checkpoints",
    ),
    Layer("gradients", ("loam.grad",), "reverse-mode clauses over kernel ops"),
    Layer("passes", ("loam.passes",), "the passes over the IR, one per module"),
    Layer("backends", ("loam.backends",), "the numpy, WGSL and browser module printers"),
    Layer(
        "driver",
        ("loam.driver",),
        "options, the pipeline, the front-end and target registry, the pass registry, the build cache, "
        "architecture tables, layout drafting",
    ),
    Layer(
        "applications",
        ("loam.text", "loam.serve", "loam.tools", "loam"),
        "text generation, `loam serve`, the command-line tools, and the public API at the package root",
    ),
)
"""Lowest first."""


def package_of(module: str) -> str | None:
    """The listed package `module` belongs to (the longest that contains it), or None."""
    listed = [p for layer in LAYERS for p in layer.packages]
    found = [p for p in listed if module == p or module.startswith(p + ".")]
    return max(found, key=len) if found else None


def layer_of(package: str) -> int:
    """The index in `LAYERS` of the layer listing `package`."""
    for index, layer in enumerate(LAYERS):
        if package in layer.packages:
            return index
    raise KeyError(package)
