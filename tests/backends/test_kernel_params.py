"""A library kernel's parameters are declared once, in its op's `PARAMS`; this holds the numpy
kernel (`kernel_NAME`, called with the operands and then the parameters as keywords) and the WGSL
kernel's host side (`_p_NAME`, called with the operands' and results' shapes and then the same
keywords) to that declaration, names and order, so a parameter added to one and not the others
fails here rather than in a generated module."""

from __future__ import annotations

import inspect

import pytest

from loam.backends import numpy_runtime
from loam.backends.wgsl_kernel_printer import WgslKernelPrinter, kernel_pieces, library_sources
from loam.dialects import kernel

LIBRARY_OPS = sorted(
    (c for c in vars(kernel).values() if isinstance(c, type) and issubclass(c, kernel.LibraryOp) and c.PARAMS),
    key=lambda c: c.name,
)
"""Every library kernel op that declares parameters."""

# Kernels the WGSL printer spells with pieces of its own (copies, generated ranges, tile programs):
# their `_p_NAME` takes the parameters it needs, in PARAMS order, after any shapes.
SPELLED = {name for name in vars(WgslKernelPrinter) if not name.startswith("_")}

HOST_ONLY = {
    "affine_grid",
    "append_state",  # made by decode-state-in-place, a pass of numpy builds only
    "attention",  # made by fuse-attention, which only the numpy pipeline runs (WGSL has its tile program)
    "batch_norm_train",
    "bitcast",
    "col2im",
    "compress",
    "conv_integer",
    "deform_conv",
    "det",
    "dft",
    "dropout",
    "expand_to",
    "eye_like",
    "gather_block_quantized",
    "grid_sample",
    "matmul_integer",
    "matmul_nbits",
    "max_unpool",
    "mel_weight_matrix",
    "non_max_suppression",
    "nonzero",
    "pad_by",
    "qlinear_conv",
    "qlinear_matmul",
    "random",
    "range_of",
    "reshape_to",
    "resize_to",
    "reverse_sequence",
    "roi_align",
    "slice_by",
    "split_by",
    "stft",
    "tensor_scatter",
    "tile_by",
    "unique",
    "window",
}
"""Library kernels with no WGSL form yet: a WGSL build refuses them, naming the op, and `--host-fallback`
computes them on the host (tests/conformance/expected_failures_wgsl.toml lists their cases)."""


def kernel_name(op: type[kernel.LibraryOp]) -> str:
    return op.name.split(".", 1)[1]


def parameters(piece: object) -> list[str]:
    return list(inspect.signature(piece).parameters)  # type: ignore[arg-type]


@pytest.mark.parametrize("op", LIBRARY_OPS, ids=kernel_name)
def test_the_numpy_kernel_takes_the_declared_parameters(op: type[kernel.LibraryOp]) -> None:
    piece = numpy_runtime.PIECES.get(f"kernel_{kernel_name(op)}")
    if piece is None:
        assert kernel_name(op) == "tile_program", f"{op.name} has no numpy kernel"
        return  # a tile program is printed as a function of its own (numpy_tile)
    declared = list(op.PARAMS)
    assert parameters(piece)[-len(declared) :] == declared


@pytest.mark.parametrize("op", LIBRARY_OPS, ids=kernel_name)
def test_the_wgsl_kernel_takes_the_declared_parameters(op: type[kernel.LibraryOp]) -> None:
    name = kernel_name(op)
    piece = kernel_pieces().get(f"_p_{name}")
    if name in HOST_ONLY:
        assert piece is None and name not in library_sources(), f"{op.name} has a WGSL form now"
        return
    if piece is None:
        assert name in SPELLED, f"{op.name} has no WGSL params piece"
        return
    given = [p for p in parameters(piece) if p not in ("shape", "shapes")]
    declared = list(op.PARAMS)
    if name.endswith("_packed"):  # the printer adds the block encoding of the weight read (its `stored`)
        # and passes no `int8`: its shaders multiply in float32
        assert given == [*[p for p in declared if p != "int8"], "encoding"]
        return
    if name in SPELLED:  # the printer passes what the shader reads, in declaration order
        assert given == [p for p in declared if p in given]
    else:  # printed generically: `_p_NAME((shapes...), **params)`
        assert given == declared
