"""Where the numpy module stores intermediates: preallocated buffers, zips computed in place.

The plan (`loam.backends.numpy_buffers`) must never let a write reach a value still read, nor let a
returned array be a buffer the next call overwrites: these tests run printed modules and compare
with numpy written out by hand, call after call.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loam.backends.numpy_buffers import FRESH_KERNELS
from loam.backends.numpy_inplace import OUT, plan_in_place
from loam.core.poly import Poly
from loam.dialects.expr import Expr
from loam.runtime.kernels import PIECES as KERNELS
from tests.backends.printing import emit, forward_of, load, t

RNG = np.random.default_rng(7)

# Symbolic batch: every buffer is preallocated (a symbolic extent is never "small").
X, W, H = t("f32", "B: N, In: 8"), t("f32", "In: 8, H: 16"), t("f32", "B: N, H: 16")
BIAS = t("f32", "H: 16")
W2 = t("f32", "H: 16, H2: 16")


FLAT = t("f32", "(B H): 16*N")


def _program(body: str, names: str, rtypes: str, returns: str) -> str:
    return f"""
kernel.program "forward" (%x : {X}) names ["x"] attributes {{model = "buffers"}} {{
  %w = kernel.weight "w" = #graph.data<f32, [8, 16], "{_hex(W_VALUE)}"> : {W}
  %b = kernel.weight "b" = #graph.data<f32, [16], "{_hex(B_VALUE)}"> : {BIAS}
  %w2 = kernel.weight "w2" = #graph.data<f32, [16, 16], "{_hex(W2_VALUE)}"> : {W2}
{body}
  kernel.return {returns} {names} : {rtypes}
}}
"""


W_VALUE = RNG.standard_normal((8, 16)).astype(np.float32)
B_VALUE = RNG.standard_normal(16).astype(np.float32)
W2_VALUE = RNG.standard_normal((16, 16)).astype(np.float32)


def _hex(a: np.ndarray) -> str:
    return "0x" + a.astype("<f4").tobytes().hex().upper()


# Three products of the same extents, each read by a zip.  The second product is an output, the
# residual zip reads it and the first chain's result; the program returns a regrouped view of the
# last zip.
CHAIN = _program(
    f"""
  %p1 = kernel.matmul %x, %w {{node = "mm1"}} : ({X}, {W}) -> {H}
  %r1 = kernel.zip(%p1, %b) #kernel.expr<[operand 0, operand 1, add 0 1, relu 2]> {{node = "act1"}}
        : ({H}, {BIAS}) -> {H}
  %p2 = kernel.matmul %r1, %w2 {{node = "mm2"}} : ({H}, {W2}) -> {H}
  %s = kernel.zip(%p2, %r1) #kernel.expr<[operand 0, operand 1, add 0 1]> {{node = "residual"}} : ({H}, {H}) -> {H}
  %p3 = kernel.matmul %s, %w2 {{node = "mm3"}} : ({H}, {W2}) -> {H}
  %e = kernel.zip(%p3) #kernel.expr<[operand 0, exp 0]> {{node = "exp"}} : ({H}) -> {H}
  %y = kernel.regroup %e {{node = "flat"}} : {H} -> {FLAT}""",
    'names ["y", "mm2"]',
    f"{FLAT}, {H}",
    "%y, %p2",
)


def _chain_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r1 = np.maximum(x @ W_VALUE + B_VALUE, 0)
    p2 = r1 @ W2_VALUE
    s = p2 + r1
    return np.exp(s @ W2_VALUE).reshape(-1), p2


def test_chain_plan_computes_in_dead_operands_and_keeps_outputs_out_of_the_pool() -> None:
    source = emit(CHAIN)
    body = forward_of(source)
    # mm1's product gets the one buffer; act1 computes in it (the product has no other reader).
    assert "_buf = _POOL.pop(_key, None)\n" in body
    assert "    _buf = (np.empty((_env['N'], 16), np.float32),)" in body  # made on a miss only
    assert "p1 = np.matmul(x, weights.w, out=_buf[0])  # mm1" in body
    assert "r1 = _zip_0(p1, weights.b, out=p1)  # act1" in body
    # mm2 is returned: no buffer.  The residual reads mm2 (an output) and r1 (dead after it):
    # it computes in r1, that is in the buffer.
    assert "mm2 = np.matmul(r1, weights.w2)  # mm2" in body
    assert "s = _zip_1(mm2, r1, out=r1)  # residual" in body
    # The returned view of exp keeps mm3's product alive past the call: a fresh array, exp in it.
    assert "p3 = np.matmul(s, weights.w2)  # mm3" in body
    assert "e = _zip_2(p3, out=p3)  # exp" in body
    assert "_keep(_POOL, _key, _buf)" in body


def test_chain_outputs_survive_later_calls(tmp_path: Path) -> None:
    mod = load(CHAIN, tmp_path)
    weights = mod.Weights.embedded()
    xs = [RNG.standard_normal((n, 8)).astype(np.float32) for n in (3, 3, 5, 3)]
    kept = [mod.forward(weights, x) for x in xs]
    for x, out in zip(xs, kept, strict=True):
        y, p2 = _chain_reference(x)
        np.testing.assert_allclose(out.y, y, rtol=1e-5)
        np.testing.assert_allclose(out.mm2, p2, rtol=1e-5)
    assert len(mod._POOL) == 2  # one set of buffers per batch seen (3 and 5)


def test_a_zip_never_writes_into_an_operand_read_later(tmp_path: Path) -> None:
    # %p is read by the zip and again by the second zip: the first zip cannot compute in it.
    text = _program(
        f"""
  %p = kernel.matmul %x, %w {{node = "mm"}} : ({X}, {W}) -> {H}
  %a = kernel.zip(%p) #kernel.expr<[operand 0, neg 0]> {{node = "neg"}} : ({H}) -> {H}
  %v = kernel.permute %p [1, 0] {{node = "view"}} : {H} -> {t("f32", "H: 16, B: N")}
  %bt = kernel.permute %v [1, 0] {{node = "back"}} : {t("f32", "H: 16, B: N")} -> {H}
  %s = kernel.zip(%a, %bt) #kernel.expr<[operand 0, operand 1, mul 0 1]> {{node = "mul"}} : ({H}, {H}) -> {H}""",
        'names ["s"]',
        H,
        "%s",
    )
    source = emit(text)
    assert "out=p)" not in source  # the product is read later through a view
    mod = load(text, tmp_path)
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    p = x @ W_VALUE
    np.testing.assert_allclose(mod.forward(mod.Weights.embedded(), x), -p * p, rtol=1e-6)


def test_a_zip_never_writes_into_a_broadcast_view(tmp_path: Path) -> None:
    # %e is exp(c) broadcast to [N, 16] after the zip computed it: a read-only view of 16 new numbers, not a
    # buffer of the product's extents, though its type says so and nothing reads it later; the mul must not
    # compute in it (it did, and numpy refused to write into the view).
    text = _program(
        f"""
  %p = kernel.matmul %x, %w {{node = "mm"}} : ({X}, {W}) -> {H}
  %r = kernel.zip(%c) #kernel.expr<[operand 0, exp 0]> {{node = "exp"}} : ({BIAS}) -> {BIAS}
  %e = kernel.zip(%r) #kernel.expr<[operand 0]> {{node = "spread"}} : ({BIAS}) -> {H}
  %s = kernel.zip(%e, %p) #kernel.expr<[operand 0, operand 1, mul 0 1]> {{node = "mul"}} : ({H}, {H}) -> {H}""",
        'names ["s"]',
        H,
        "%s",
    ).replace(f'(%x : {X}) names ["x"]', f'(%x : {X}, %c : {BIAS}) names ["x", "c"]')
    source = emit(text)
    assert "e = _reach(" in source and "out=e)" not in source
    mod = load(text, tmp_path)
    x, c = RNG.standard_normal((4, 8)).astype(np.float32), RNG.standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(mod.forward(mod.Weights.embedded(), x, c), np.exp(c) * (x @ W_VALUE), rtol=1e-6)


def test_in_place_plan_keeps_an_aliased_operand_until_its_last_reader() -> None:
    # x * (x + 1) with x arriving in out: the add may not overwrite x, the mul may.
    expr = (Expr.operand(0) + 1.0) * Expr.operand(0)
    n = (Poly.symbol("N"),)
    plan = plan_in_place(expr, [n], ["f32"], (n, "f32"), alias=0)
    steps = [str(s) for s in expr.steps]
    add, mul = steps.index("add 0 1"), len(steps) - 1
    assert plan.into[add] is None and plan.into[mul] == OUT
    # Without an alias the add writes into out and the mul writes over it.
    free = plan_in_place(expr, [n], ["f32"], (n, "f32"))
    assert free.into[add] == OUT and free.into[mul] == OUT
    # A step of another element type or extents never writes into a buffer.
    small = plan_in_place(expr, [()], ["f32"], (n, "f32"))
    assert all(into is None for into in small.into)


def test_in_place_plan_reuses_a_dead_temporary_while_out_is_busy() -> None:
    # tanh(tanh(x) + 1) * x with x in out: the inner steps reuse the first tanh's array.
    x = Expr.operand(0)
    expr = (x.unary("tanh") + 1.0).unary("tanh") * x
    n = (Poly.symbol("N"),)
    plan = plan_in_place(expr, [n], ["f32"], (n, "f32"), alias=0)
    steps = [str(s) for s in expr.steps]
    first = steps.index("tanh 0")
    assert plan.into[first] is None  # a new array: out still holds x
    later = [i for i, into in enumerate(plan.into) if into == first]
    assert len(later) == 2 and plan.into[-1] == OUT


@pytest.mark.parametrize("kernel", sorted(FRESH_KERNELS))
def test_fresh_kernels_return_new_memory(kernel: str) -> None:
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    calls = {
        "concat": lambda: KERNELS["kernel_concat"](x, axis=0),
        "gather": lambda: KERNELS["kernel_gather"](x, np.array([0, 1]), axis=0),
        "normalize": lambda: KERNELS["kernel_normalize"](
            x, axes=(3,), epsilon=1e-5, channel_axis=-1, stash="float32", stats=0
        ),
        "softmax": lambda: KERNELS["kernel_softmax"](x, kind="softmax", axes=(3,)),
        "conv": lambda: KERNELS["kernel_conv"](
            x, np.ones((3, 3, 1, 1), np.float32), strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1
        ),
        "pool": lambda: KERNELS["kernel_pool"](
            x, mode="max", kernel_shape=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), out_shape=(4, 4)
        ),
    }
    result = calls[kernel]()
    for r in result if isinstance(result, tuple) else (result,):
        assert not np.shares_memory(r, x), f"kernel_{kernel} returned a view of its operand"


def test_products_whose_lifetimes_do_not_overlap_share_a_buffer(tmp_path: Path) -> None:
    # p1 -> tanh in place -> p2 -> tanh -> p3 -> tanh -> p4 (returned): p3 reuses p1's buffer,
    # free once p2 has read the first tanh.
    lines = [f'  %p1 = kernel.matmul %x, %w {{node = "mm1"}} : ({X}, {W}) -> {H}']
    for k in (1, 2, 3):
        lines.append(
            f'  %e{k} = kernel.zip(%p{k}) #kernel.expr<[operand 0, tanh 0]> {{node = "tanh{k}"}} : ({H}) -> {H}'
        )
        lines.append(f'  %p{k + 1} = kernel.matmul %e{k}, %w2 {{node = "mm{k + 1}"}} : ({H}, {W2}) -> {H}')
    text = _program("\n".join(lines), 'names ["y"]', H, "%p4")
    body = forward_of(emit(text))
    assert body.count("np.empty(") == 2
    assert "p3 = np.matmul(e2, weights.w2, out=_buf[0])" in body
    assert "p2 = np.matmul(e1, weights.w2, out=_buf[1])" in body
    mod = load(text, tmp_path)
    weights = mod.Weights.embedded()
    xs = [RNG.standard_normal((6, 8)).astype(np.float32) for _ in range(3)]
    outs = [mod.forward(weights, x) for x in xs]
    for x, y in zip(xs, outs, strict=True):
        want = x @ W_VALUE
        for _ in range(3):
            want = np.tanh(want) @ W2_VALUE
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
