"""DeformConv's grad clause (`loam.grad.sampling_deform`) equals central finite differences in float64 for
every operand (X, W, offset, B, mask), at hypothesis-drawn shapes, groups, offset groups, strides, pads and
dilations; the WGSL comparison (`tests.grad.test_sampling_grads`) draws its cases here too.

The offsets are drawn a fifth of a pixel or more away from whole numbers: each tap's place is a whole
number plus its offset, so its sample stays between the same corners (and on the same side of the map's
edges, which lie at whole numbers too) within the differences' step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loam.testing import build_for, run_built
from tests.grad.finite_differences import Case, feeds_for
from tests.grad.test_sampling_grads import NO_SHRINK, check, compare_on_wgsl, model_for


def deform_offsets(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Offsets from -2 to 3 pixels, their fractions a fifth or more from whole numbers."""
    whole = rng.integers(-2, 3, shape)
    return whole + rng.choice([0.2, 0.3, 0.7, 0.8], shape) + rng.uniform(-0.04, 0.04, shape)


def _deform_conv(draw: st.DrawFn) -> Case:
    """DeformConv of (N, C, H, W) by (M, C/group, KH, KW): group and offset_group 1 or 2, strides, pads and
    dilations drawn, with or without B and the mask."""
    group, offset_group = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    c = math.lcm(group, offset_group) * draw(st.integers(1, 2))
    m = group * draw(st.integers(1, 2))
    kernel = [draw(st.integers(1, 2)), draw(st.integers(1, 3))]
    strides = [draw(st.integers(1, 2)) for _ in range(2)]
    dilations = [draw(st.integers(1, 2)) for _ in range(2)]
    pads = [draw(st.integers(0, 1)) for _ in range(4)]
    reach = [(kernel[i] - 1) * dilations[i] + 1 for i in range(2)]
    spatial = [draw(st.integers(max(2, reach[i]), 5)) for i in range(2)]
    out = [
        (spatial[i] + pads[i] + pads[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(2)
    ]
    n = draw(st.integers(1, 2))
    taps = offset_group * kernel[0] * kernel[1]
    shapes = {"x": (n, c, *spatial), "w": (m, c // group, *kernel), "offset": (n, 2 * taps, *out)}
    bias, mask = draw(st.booleans()), draw(st.booleans())
    if bias:
        shapes["b"] = (m,)
    if mask:
        shapes["mask"] = (n, taps, *out)
    attrs = {"kernel_shape": kernel, "group": group, "offset_group": offset_group, "strides": strides,
             "pads": pads, "dilations": dilations}  # fmt: skip
    case = Case("DeformConv", shapes, [(n, m, *out)], attrs)
    case.order = ("x", "w", "offset", "b" if bias else "", "mask" if mask else "")
    case.opset = 19
    return case


@settings(max_examples=24, deadline=None, derandomize=True, phases=NO_SHRINK)
@given(st.composite(_deform_conv)(), st.integers(0, 2**16))
def test_deform_conv(case: Case, seed: int) -> None:
    """Every operand's gradient, at offsets away from where a tap's corners change."""
    check(case, seed, {"offset": deform_offsets(np.random.default_rng(seed), case.shapes["offset"])})


def _fixed_case(bias: bool, mask: bool, group: int = 1, offset_group: int = 1) -> Case:
    """One (1, 2 * offset_group, 4, 4) DeformConv of a 2 x 2 kernel at stride 2, pads 1 and dilation 1 x 2."""
    c, m = 2 * max(group, offset_group), 2 * group
    taps = offset_group * 4
    shapes = {"x": (1, c, 4, 4), "w": (m, c // group, 2, 2), "offset": (1, 2 * taps, 3, 2)}
    shapes |= ({"b": (m,)} if bias else {}) | ({"mask": (1, taps, 3, 2)} if mask else {})
    attrs = {"kernel_shape": [2, 2], "group": group, "offset_group": offset_group, "strides": [2, 2],
             "pads": [1, 1, 1, 0], "dilations": [1, 2]}  # fmt: skip
    case = Case("DeformConv", shapes, [(1, m, 3, 2)], attrs)
    case.order = ("x", "w", "offset", "b" if bias else "", "mask" if mask else "")
    case.opset = 19
    return case


@pytest.mark.parametrize(
    ("bias", "mask", "group", "offset_group"),
    [
        (False, False, 1, 1),
        (True, False, 1, 1),
        (False, True, 1, 1),
        (True, True, 2, 1),
        (True, True, 1, 2),
        (False, True, 2, 2),
    ],
)
def test_deform_conv_with_and_without_the_bias_and_mask(bias: bool, mask: bool, group: int, offset_group: int) -> None:
    """Each combination of the optional operands (and of groups and offset groups) at once, whatever the
    draws above reach."""
    case = _fixed_case(bias, mask, group, offset_group)
    check(case, 7, {"offset": deform_offsets(np.random.default_rng(7), case.shapes["offset"])})


def test_deform_conv_offsets_far_outside_read_nothing() -> None:
    """Taps moved more than a pixel off the map read 0 and take no gradient, their offsets none either (the
    other taps' as usual)."""
    case = _fixed_case(True, True)
    rng = np.random.default_rng(3)
    offsets = deform_offsets(rng, case.shapes["offset"])
    offsets[0, [0, 2]] += 9.0  # the first two taps' rows moved far below the map
    check(case, 3, {"offset": offsets})


def test_deform_conv_with_a_symbolic_batch_gives_the_static_builds_gradients() -> None:
    """The clause needs only the channel and spatial extents at build time: a batch named N computes the
    same gradients."""
    case = _fixed_case(True, True, 1, 2)
    feeds = feeds_for(case, 5) | {"offset": deform_offsets(np.random.default_rng(5), case.shapes["offset"])}
    model = model_for(case)
    for value_info in [*model.graph.input, *model.graph.output]:
        dims = value_info.type.tensor_type.shape.dim
        if value_info.name in ("x", "offset", "mask", "r0", "d_x", "d_offset", "d_mask"):
            dims[0].dim_param = "N"
    want = run_built(build_for(model_for(case)), feeds)
    got = run_built(build_for(model), feeds)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"output {k}")


@settings(max_examples=4, deadline=None, derandomize=True, phases=NO_SHRINK)
@given(st.composite(_deform_conv)(), st.integers(0, 2**16))
def test_the_wgsl_module_computes_the_numpy_modules_deform_conv_gradients(case: Case, seed: int) -> None:
    """The same clause on the device (`tests.grad.test_sampling_grads`'s comparison): float32 gradients
    within 1e-4 of the numpy module's."""
    feeds = feeds_for(case, seed, np.float32)
    feeds["offset"] = deform_offsets(np.random.default_rng(seed), case.shapes["offset"]).astype(np.float32)
    compare_on_wgsl(case, feeds)
