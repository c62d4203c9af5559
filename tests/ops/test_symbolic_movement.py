"""Symbolic extents and values through the movement, regrouping and indexing rules.

Each model is a small ONNX graph with dim_params, written in ONNX's text form, built once by
`loam.testing.build_for` and run at several values of its symbols against onnxruntime (including
values where a Slice clamp, a from-the-end bound or an uneven count takes effect).  Then what the
build refuses (naming the node), and what `forward` refuses at run time: an owed condition the
inputs break raises the module's `ShapeError` naming the node that relies on it.  Last, the kernel
parameters that carry extents only the run knows (`#shape_poly.extent`), and the axis naming of a
regrouping over symbolic extents (a merge of B and S is `(B S)`, and splitting it restores both).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnx.parser
import pytest

from loam.core.errors import LoamError, ShapeError, UnsupportedError
from loam.core.poly import Poly
from loam.driver.pipeline import BuildResult
from loam.testing import assert_same, build_for, run_built, run_onnxruntime

INT64_MAX = 2**63 - 1


def model(text: str, opset: int = 18) -> onnx.ModelProto:
    """A model from the text form of its graph."""
    return onnx.parser.parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>\n{text}')


@functools.cache
def built(text: str, opset: int = 18) -> tuple[onnx.ModelProto, BuildResult]:
    m = model(text, opset)
    return m, build_for(m)


def feeds_for(m: onnx.ModelProto, env: Mapping[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs whose dim_params take the values `env` gives."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in m.graph.input:
        t = vi.type.tensor_type
        shape = [env[d.dim_param] if d.dim_param else d.dim_value for d in t.shape.dim]
        if t.elem_type == onnx.TensorProto.FLOAT:
            out[vi.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            out[vi.name] = rng.integers(-5, 5, size=shape).astype(np.int64)
    return out


def check(text: str, envs: Sequence[Mapping[str, int]], opset: int = 18) -> None:
    """The model built once, matching onnxruntime at every assignment of `envs`."""
    m, result = built(text, opset)
    for env in envs:
        feeds = feeds_for(m, env)
        try:
            assert_same(run_built(result, feeds), run_onnxruntime(m, feeds))
        except AssertionError as err:
            raise AssertionError(f"at {dict(env)}: {err}") from err


def refused_at_run(text: str, env: Mapping[str, int], match: str, opset: int = 18) -> None:
    """onnxruntime refuses these inputs, and forward raises the module's ShapeError matching `match`."""
    m, result = built(text, opset)
    feeds = feeds_for(m, env)
    with pytest.raises(Exception):  # noqa: B017 - any onnxruntime failure: ONNX refuses the inputs too
        run_onnxruntime(m, feeds)
    with pytest.raises(result.module.ShapeError, match=match):
        run_built(result, feeds)


# ---------------------------------------------------------------------------------------------
# Slice: clamps, from-the-end bounds, steps, bounds from Shape
# ---------------------------------------------------------------------------------------------


def slice_model(start: int, end: int, step: int = 1) -> str:
    return f"""
    g (float[N, 3] x) => (float[?, 3] y) {{
        starts = Constant <value = int64[1] {{{start}}}> ()
        ends = Constant <value = int64[1] {{{end}}}> ()
        axes = Constant <value = int64[1] {{0}}> ()
        steps = Constant <value = int64[1] {{{step}}}> ()
        y = Slice (x, starts, ends, axes, steps)
    }}"""


N_VALUES = [{"N": n} for n in (0, 1, 2, 3, 5, 8)]


@pytest.mark.parametrize(
    ("start", "end", "step"),
    [
        (1, 2**62, 1),  # "to the end" as a bound past any length
        (1, INT64_MAX, 1),
        (0, 4, 1),  # an end past the axis for N < 4: the clamp takes effect
        (3, 100, 1),  # a start past the axis for N < 3
        (-2, INT64_MAX, 1),  # a negative start counts from the end (and clamps to 0 for N < 2)
        (-7, -1, 1),
        (0, INT64_MAX, 2),
        (1, 6, 3),
        (-1, -(2**63), -1),  # the whole axis reversed
        (INT64_MAX, -(2**63), -2),
        (4, 0, -1),  # a negative step from a start past the axis
    ],
)
def test_slice_over_a_symbolic_axis(start: int, end: int, step: int) -> None:
    check(slice_model(start, end, step), N_VALUES)


def test_slice_bounds_from_shape() -> None:
    """x[:, 1 : S - 1] with the bounds from Shape: the start and count are extents of S."""
    text = """
    g (float[B, S] x) => (float[?, ?] y) {
        shape = Shape (x)
        one = Constant <value = int64[1] {1}> ()
        two = Constant <value = int64[1] {2}> ()
        s = Slice (shape, one, two)
        end = Sub (s, one)
        y = Slice (x, one, end, one)
    }"""
    check(text, [{"B": 2, "S": 5}, {"B": 1, "S": 2}, {"B": 3, "S": 1}, {"B": 1, "S": 0}])


def test_slice_of_a_buffer_at_symbolic_bounds() -> None:
    """GPT-2's causal mask: a constant [8, 8] buffer sliced to [K - Q : K, : K]; the kernel reads the
    starts forward computes from the symbols."""
    buffer = ", ".join(str(v) for v in np.tril(np.ones((8, 8), np.int64)).reshape(-1))
    text = f"""
    g (float[Q, 8] q, float[K, 8] k) => (float[?, ?] y) {{
        sq = Shape (q)
        sk = Shape (k)
        zero = Constant <value = int64[1] {{0}}> ()
        one = Constant <value = int64[1] {{1}}> ()
        nq = Slice (sq, zero, one)
        nk = Slice (sk, zero, one)
        start = Sub (nk, nq)
        starts = Concat <axis = 0> (start, zero)
        ends = Concat <axis = 0> (nk, nk)
        bias = Constant <value = int64[8, 8] {{{buffer}}}> ()
        mask = Slice (bias, starts, ends)
        kt = Transpose (k)
        scores = MatMul (q, kt)
        fm = Cast <to = 1> (mask)
        y = Mul (scores, fm)
    }}"""
    check(text, [{"Q": 1, "K": 1}, {"Q": 3, "K": 5}, {"Q": 8, "K": 8}, {"Q": 1, "K": 7}])


def test_slice_steps_from_shape_are_refused() -> None:
    text = """
    g (float[N, 3] x) => (float[?, ?] y) {
        shape = Shape (x)
        zero = Constant <value = int64[1] {0}> ()
        one = Constant <value = int64[1] {1}> ()
        n = Slice (shape, zero, one)
        y = Slice (x, zero, one, zero, n)
    }"""
    with pytest.raises(UnsupportedError, match=r"Slice node .*steps input depends on symbolic extents"):
        build_for(model(text))


# ---------------------------------------------------------------------------------------------
# Reshape and Flatten: 0, -1 and targets from Shape
# ---------------------------------------------------------------------------------------------


def test_reshape_zero_minus_one() -> None:
    text = """
    g (float[B, S, 4] x) => (float[?, ?] y) {
        target = Constant <value = int64[2] {0, -1}> ()
        y = Reshape (x, target)
    }"""
    check(text, [{"B": 2, "S": 3}, {"B": 1, "S": 5}, {"B": 3, "S": 0}])


def test_reshape_view_size0_minus_one() -> None:
    """torch's `x.view(x.size(0), -1)`: the target [N, -1] from Shape, Gather, Unsqueeze, Concat."""
    text = """
    g (float[N, 3, 4] x) => (float[?, ?] y) {
        shape = Shape (x)
        i0 = Constant <value = int64 {0}> ()
        n = Gather <axis = 0> (shape, i0)
        ax = Constant <value = int64[1] {0}> ()
        n1 = Unsqueeze (n, ax)
        minus = Constant <value = int64[1] {-1}> ()
        target = Concat <axis = 0> (n1, minus)
        y = Reshape (x, target)
    }"""
    check(text, [{"N": 1}, {"N": 2}, {"N": 5}])


def test_reshape_split_heads_and_merge_back() -> None:
    """[B, S, 8] to [B, S, 2, 4] (a target from Shape) and back with [0, 0, -1]."""
    text = """
    g (float[B, S, 8] x) => (float[?, ?, ?] y) {
        shape = Shape (x)
        zero = Constant <value = int64[1] {0}> ()
        two = Constant <value = int64[1] {2}> ()
        lead = Slice (shape, zero, two)
        heads = Constant <value = int64[2] {2, 4}> ()
        target = Concat <axis = 0> (lead, heads)
        h = Reshape (x, target)
        back = Constant <value = int64[3] {0, 0, -1}> ()
        y = Reshape (h, back)
    }"""
    check(text, [{"B": 2, "S": 3}, {"B": 1, "S": 1}])


def test_reshape_minus_one_that_does_not_divide_is_owed() -> None:
    """[N, 4] to [-1, 3]: the -1 is floor(4 N / 3), and the inputs owe that 3 divides 4 N."""
    text = """
    g (float[N, 4] x) => (float[?, 3] y) {
        target = Constant <value = int64[2] {-1, 3}> ()
        y = Reshape (x, target)
    }"""
    check(text, [{"N": 3}, {"N": 6}, {"N": 0}])
    refused_at_run(text, {"N": 2}, "Reshape node")


def test_reshape_symbolic_entry_at_zero() -> None:
    """[B, S, 2] to [2 B S]: the entry is 0 exactly where the extent it would copy (B) is, or it is not
    0 at all; both are ONNX's answer."""
    text = """
    g (float[B, S, 2] x) => (float[?] y) {
        n = Size (x)
        ax = Constant <value = int64[1] {0}> ()
        target = Unsqueeze (n, ax)
        y = Reshape (x, target)
    }"""
    check(text, [{"B": 1, "S": 1}, {"B": 2, "S": 3}, {"B": 0, "S": 4}])


def test_reshape_to_a_number_against_a_symbol_is_refused() -> None:
    text = """
    g (float[N, 4] x) => (float[8] y) {
        target = Constant <value = int64[1] {8}> ()
        y = Reshape (x, target)
    }"""
    with pytest.raises(ShapeError, match="Reshape node"):
        build_for(model(text))


def test_flatten_over_symbolic_extents() -> None:
    text = """
    g (float[B, S, 3] x) => (float[?, ?] y) {
        y = Flatten <axis = 2> (x)
    }"""
    check(text, [{"B": 2, "S": 3}, {"B": 1, "S": 0}])


# ---------------------------------------------------------------------------------------------
# Range, Expand, ConstantOfShape, Tile
# ---------------------------------------------------------------------------------------------


def test_range_over_a_symbol_added_to_x() -> None:
    """x + Range(0, Shape(x)[1], 1): a kernel.range whose limit forward computes."""
    text = """
    g (int64[B, S] x) => (int64[?, ?] y) {
        shape = Shape (x)
        i1 = Constant <value = int64 {1}> ()
        s = Gather <axis = 0> (shape, i1)
        zero = Constant <value = int64 {0}> ()
        one = Constant <value = int64 {1}> ()
        pos = Range (zero, s, one)
        y = Add (x, pos)
    }"""
    check(text, [{"B": 2, "S": 5}, {"B": 1, "S": 1}, {"B": 3, "S": 0}])


def test_range_with_a_symbolic_step_owes_it_is_not_zero() -> None:
    text = """
    g (float[N] x, float[D] d) => (int64[?] r) {
        sx = Shape (x)
        sd = Shape (d)
        i0 = Constant <value = int64 {0}> ()
        n = Gather <axis = 0> (sx, i0)
        step = Gather <axis = 0> (sd, i0)
        two = Constant <value = int64 {2}> ()
        r = Range (two, n, step)
    }"""
    check(text, [{"N": 10, "D": 3}, {"N": 1, "D": 2}, {"N": 9, "D": 9}])
    refused_at_run(text, {"N": 4, "D": 0}, "Range node")


def test_range_whose_step_sign_the_build_cannot_tell_is_refused() -> None:
    text = """
    g (float[N] x, float[M] y) => (int64[?] r) {
        sx = Shape (x)
        sy = Shape (y)
        i0 = Constant <value = int64 {0}> ()
        n = Gather <axis = 0> (sx, i0)
        m = Gather <axis = 0> (sy, i0)
        step = Sub (n, m)
        zero = Constant <value = int64 {0}> ()
        r = Range (zero, n, step)
    }"""
    with pytest.raises(UnsupportedError, match=r"Range node .*sign of delta"):
        build_for(model(text))


def test_expand_to_a_shape_from_shape() -> None:
    text = """
    g (float[B, S] x, float[1, S] row) => (float[?, ?] y) {
        shape = Shape (x)
        y = Expand (row, shape)
    }"""
    check(text, [{"B": 3, "S": 2}, {"B": 1, "S": 4}, {"B": 0, "S": 3}])


def test_constant_of_shape_of_a_symbolic_shape() -> None:
    text = """
    g (float[N, 3] x) => (float[?, ?] y) {
        shape = Shape (x)
        fill = ConstantOfShape <value = float[1] {1.5}> (shape)
        y = Add (x, fill)
    }"""
    check(text, [{"N": 0}, {"N": 1}, {"N": 4}])


def test_tile_over_a_symbolic_axis() -> None:
    text = """
    g (float[N, 2] x) => (float[?, ?] y) {
        reps = Constant <value = int64[2] {2, 3}> ()
        y = Tile (x, reps)
    }"""
    check(text, [{"N": 1}, {"N": 3}])


# ---------------------------------------------------------------------------------------------
# Split, Concat, Gather
# ---------------------------------------------------------------------------------------------


def test_split_with_sizes_from_shape() -> None:
    text = """
    g (float[N, 3] x) => (float[?, ?] a, float[?, ?] b) {
        shape = Shape (x)
        zero = Constant <value = int64[1] {0}> ()
        one = Constant <value = int64[1] {1}> ()
        two = Constant <value = int64[1] {2}> ()
        n = Slice (shape, zero, one)
        head = Sub (n, two)
        sizes = Concat <axis = 0> (head, two)
        a, b = Split <axis = 0> (x, sizes)
    }"""
    check(text, [{"N": 2}, {"N": 3}, {"N": 7}])
    refused_at_run(text, {"N": 1}, "Split node")


def test_split_into_equal_parts_of_a_symbolic_axis() -> None:
    text = """
    g (float[B, N] x) => (float[?, ?] a, float[?, ?] b) {
        a, b = Split <axis = 1> (x)
    }"""
    check(text, [{"B": 1, "N": 2}, {"B": 2, "N": 6}, {"B": 3, "N": 0}], opset=17)
    refused_at_run(text, {"B": 2, "N": 3}, "Split node", opset=17)


def test_split_num_outputs_of_a_symbolic_axis() -> None:
    """ONNX 18: parts of ceil(N / 3), the last what remains."""
    text = """
    g (float[N, 2] x) => (float[?, ?] a, float[?, ?] b, float[?, ?] c) {
        a, b, c = Split <axis = 0, num_outputs = 3> (x)
    }"""
    check(text, [{"N": 3}, {"N": 7}, {"N": 8}, {"N": 9}])


def test_concat_along_a_symbolic_axis() -> None:
    """[N, 4] and [M, 4] joined into [N + M, 4], then regrouped."""
    text = """
    g (float[N, 4] x, float[M, 4] y) => (float[?] z) {
        c = Concat <axis = 0> (x, y)
        flat = Constant <value = int64[1] {-1}> ()
        z = Reshape (c, flat)
    }"""
    check(text, [{"N": 1, "M": 2}, {"N": 0, "M": 3}, {"N": 4, "M": 0}])


def test_concat_owes_its_other_axes_equal() -> None:
    text = """
    g (float[N, 4] x, float[M, 2] y) => (float[?, ?] z) {
        z = Concat <axis = 1> (x, y)
    }"""
    check(text, [{"N": 3, "M": 3}, {"N": 0, "M": 0}])
    refused_at_run(text, {"N": 4, "M": 3}, "Concat node")


def test_concat_of_a_number_and_a_symbol_on_another_axis_is_refused() -> None:
    text = """
    g (float[N, 4] x, float[3, 2] y) => (float[?, ?] z) {
        z = Concat <axis = 1> (x, y)
    }"""
    with pytest.raises(LoamError, match="Concat node"):
        build_for(model(text))


def test_gather_of_the_last_position_along_a_symbolic_axis() -> None:
    """x[:, -1] over [B, S, 4]: a constant negative index into a symbolic axis, owed S >= 1."""
    text = """
    g (float[B, S, 4] x) => (float[?, ?] y) {
        last = Constant <value = int64 {-1}> ()
        y = Gather <axis = 1> (x, last)
    }"""
    check(text, [{"B": 2, "S": 3}, {"B": 1, "S": 1}])
    m, result = built(text)
    with pytest.raises(result.module.ShapeError, match="Gather node"):
        run_built(result, feeds_for(m, {"B": 2, "S": 0}))


def test_gather_a_shape_entry_from_the_end() -> None:
    """Shape(x)[-1] and Shape(x)[-2] fold to S and B (a constant negative index reads from the end)."""
    text = """
    g (float[B, S] x) => (float[?, ?] y) {
        shape = Shape (x)
        idx = Constant <value = int64[2] {-1, -2}> ()
        swapped = Gather <axis = 0> (shape, idx)
        y = Reshape (x, swapped)
    }"""
    check(text, [{"B": 2, "S": 2}, {"B": 3, "S": 3}])
    _, result = built(text)
    assert "kernel.gather" not in str(result.ir)  # folded: no kernel computes the target


# ---------------------------------------------------------------------------------------------
# Kernel parameters carrying extents, and axis naming by parts
# ---------------------------------------------------------------------------------------------


def test_kernel_parameters_carry_extents() -> None:
    from xdsl.dialects.builtin import ArrayAttr, IntegerAttr

    from loam.dialects.kernel import param_attr, param_value
    from loam.dialects.shape_poly import ExtentAttr

    n = Poly.symbol("N")
    assert isinstance(param_attr(n - 1), ExtentAttr)
    assert param_value(param_attr(n - 1)) == n - 1
    assert isinstance(param_attr(Poly.const(3)), IntegerAttr)
    assert param_value(param_attr(Poly.const(3))) == 3
    mixed = param_attr((Poly.const(0), n))
    assert isinstance(mixed, ArrayAttr)
    assert param_value(mixed) == (0, n)
    assert param_value(param_attr((Poly.const(1), 2))) == (1, 2)


def test_slice_kernel_reads_symbolic_starts() -> None:
    _, result = built(slice_model(-2, INT64_MAX))
    ir = str(result.ir)
    assert "kernel.slice" in ir and "#shape_poly.extent<" in ir


def test_merge_of_symbolic_axes_is_named_by_its_parts_and_splits_back() -> None:
    """Flatten [B, S, 4] to [B*S, 4] merges the two input axes into (B S); a Reshape to the Shape's
    [B, S, 4] splits the merge back into them."""
    text = """
    g (float[B, S, 4] x) => (float[?, ?, ?] y) {
        flat = Flatten <axis = 2> (x)
        shape = Shape (x)
        y = Reshape (flat, shape)
    }"""
    check(text, [{"B": 2, "S": 3}])
    _, result = built(text)
    from loam.dialects.kernel import ProgramOp, RegroupOp

    program = next(op for op in result.ir.walk() if isinstance(op, ProgramOp))
    x_axes = program.body.block.args[0].type.axes
    regroups = [op for op in program.walk() if isinstance(op, RegroupOp)]
    merged = regroups[0].result.type.axes[0]
    assert merged.parts == (x_axes[0].name, x_axes[1].name)
    assert merged.extent == Poly.symbol("B") * Poly.symbol("S")
    assert [a.name for a in regroups[-1].result.type.axes] == [a.name for a in x_axes]


# ---------------------------------------------------------------------------------------------
# Pad and Trilu over symbolic extents
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_a_symbolic_axis(mode: str) -> None:
    text = f"""
    g (float[N, 3] x) => (float[?, ?] y) {{
        pads = Constant <value = int64[4] {{1, 0, 2, 1}}> ()
        y = Pad <mode = "{mode}"> (x, pads)
    }}"""
    check(text, [{"N": 3}, {"N": 5}])


def test_pad_reflect_owes_the_axis_long_enough() -> None:
    text = """
    g (float[N, 3] x) => (float[?, ?] y) {
        pads = Constant <value = int64[4] {2, 0, 2, 0}> ()
        y = Pad <mode = "reflect"> (x, pads)
    }"""
    check(text, [{"N": 3}, {"N": 4}])
    refused_at_run(text, {"N": 2}, "Pad node")


def test_trilu_over_symbolic_axes() -> None:
    text = """
    g (float[N, M] x) => (float[?, ?] y) {
        k = Constant <value = int64 {1}> ()
        y = Trilu <upper = 0> (x, k)
    }"""
    check(text, [{"N": 3, "M": 4}, {"N": 1, "M": 0}])
