# ruff: noqa: E501 - kernel programs are written one op per line
"""A `kernel.zip` whose Expr leaves an operand unread (a constant over an operand's extents).

Such a zip still gives a new array of its result's extents and never writes into the operand it
does not read: the numpy module once passed that operand where the expression function took its
`out`, so the constant overwrote it and a later zip read the constant (the RMS norm's mean output
came out as 1/sqrt(epsilon)).  Each program runs on both backends, fused and not, call after call.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.parser import Parser

from loam.backends.numpy_module import emit_python
from loam.driver.pipeline import import_source
from loam.frontends.context import make_context
from loam.passes.fuse import fuse_program
from tests.backends.printing import t

RNG = np.random.default_rng(29)
X, W, H = t("f32", "B: N, In: 8"), t("f32", "In: 8, H: 16"), t("f32", "B: N, H: 16")
BIAS = t("f32", "H: 16")
W_VALUE = RNG.standard_normal((8, 16)).astype(np.float32)
B_VALUE = RNG.standard_normal(16).astype(np.float32)


def _hex(a: np.ndarray) -> str:
    return "0x" + a.astype("<f4").tobytes().hex().upper()


def _program(body: str, returns: str, names: str, types: str) -> str:
    return f"""
kernel.program "forward" (%x : {X}) names ["x"] attributes {{model = "unread"}} {{
  %w = kernel.weight "w" = #graph.data<f32, [8, 16], "{_hex(W_VALUE)}"> : {W}
  %b = kernel.weight "b" = #graph.data<f32, [16], "{_hex(B_VALUE)}"> : {BIAS}
  %m = kernel.matmul %x, %w {{node = "mm"}} : ({X}, {W}) -> {H}
{body}
  kernel.return {returns} names [{names}] : {types}
}}
"""


# The zero is an output; the product it does not read is read after it, and returned.
ZERO_THEN_READER = _program(
    f"""
  %z = kernel.zip(%m) #kernel.expr<[const 0.0 : f32]> {{node = "zero"}} : ({H}) -> {H}
  %r = kernel.zip(%m) #kernel.expr<[operand 0, mul 0 0, const 1.0e-05 : f32, add 1 2, sqrt 3]> {{node = "root"}} : ({H}) -> {H}""",
    "%z, %r, %m",
    '"z", "r", "m"',
    f"{H}, {H}, {H}",
)

# The constant is an intermediate (a preallocated buffer), read with the product by a later zip;
# a second zip reads only its small operand, its unread one giving the extents.
ZERO_INSIDE = _program(
    f"""
  %z = kernel.zip(%m) #kernel.expr<[const 2.0 : f32]> {{node = "two"}} : ({H}) -> {H}
  %s = kernel.zip(%z, %m) #kernel.expr<[operand 0, operand 1, mul 0 1]> {{node = "scale"}} : ({H}, {H}) -> {H}
  %c = kernel.zip(%b, %s) #kernel.expr<[operand 0, neg 0]> {{node = "bias_only"}} : ({BIAS}, {H}) -> {H}
  %k = kernel.zip() #kernel.expr<[const 3.0 : f32]> {{node = "three"}} : () -> {H}
  %e = kernel.zip(%c, %k) #kernel.expr<[operand 0, operand 1, add 0 1]> {{node = "add"}} : ({H}, {H}) -> {H}""",
    "%s, %e",
    '"s", "e"',
    f"{H}, {H}",
)


def _zero_then_reader(x: np.ndarray) -> list[np.ndarray]:
    m = x @ W_VALUE
    return [np.zeros_like(m), np.sqrt(m * m + np.float32(1e-5)), m]


def _zero_inside(x: np.ndarray) -> list[np.ndarray]:
    m = x @ W_VALUE
    return [2 * m, np.broadcast_to(3 - B_VALUE, m.shape)]


def _module(text: str, fuse: str | None) -> object:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    if fuse is not None:
        fuse_program(module, fuse)
        module.verify()
    return module


def _emit(backend: str, module: object) -> str:
    if backend == "numpy":
        return emit_python(module)  # type: ignore[arg-type]
    pytest.importorskip("wgpu")
    from loam.backends.wgsl_module import emit_wgsl

    return emit_wgsl(module)


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
@pytest.mark.parametrize("fuse", [None, "memory", "dispatch"])
@pytest.mark.parametrize(
    ("text", "reference"),
    [(ZERO_THEN_READER, _zero_then_reader), (ZERO_INSIDE, _zero_inside)],
    ids=["zero-then-reader", "zero-inside"],
)
def test_a_zip_reading_no_operand_fills_its_own_array(
    backend: str, fuse: str | None, text: str, reference: Callable[[np.ndarray], list[np.ndarray]]
) -> None:
    gen = import_source(_emit(backend, _module(text, fuse)), f"loam_unread_{backend}_{fuse}")
    weights = gen.Weights.embedded()
    kept = []
    for n in (3, 5, 3):
        x = RNG.standard_normal((n, 8)).astype(np.float32)
        got = list(gen.forward(weights, x))
        kept.append((x, got))
        for g, w in zip(got, reference(x), strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    for x, got in kept:  # every returned array still holds its numbers after later calls
        for g, w in zip(got, reference(x), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
