"""The grad clauses of the sampling kernels (`loam.grad.sampling`, `loam.grad.sampling_grid`) equal central
finite differences in float64, at hypothesis-drawn shapes, modes and attributes; the WGSL module computes
the numpy module's gradients; and what they do not cover is refused, naming the op.

Float operands the gradient is not asked of (Resize's scales and roi) are Constant nodes, so the build
knows their values (an initializer would be a weight, its value the run's).  Resize, MaxUnpool, Col2Im and
AffineGrid are linear in the operand differentiated, so finite differences hold at any point; GridSample's
positions are drawn away from the places its taps change (whole and, for nearest, half coordinates);
RoiAlign (every mode, fixed and adaptive sampling_ratio) is linear in X but for max mode's choice of tap,
which two taps' values tie to change (with probability 0 for X from N(0, 1)).  DeformConv's cases are in
`tests.grad.test_deform_grads`.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from loam.core.errors import UnsupportedError
from loam.runtime.kernels.resize import resize_geometry
from loam.testing import build_for, run_built
from tests.grad import finite_differences
from tests.grad.finite_differences import Case, feeds_for, model_of

# A failing draw is reported as drawn: these cases are small, and shrinking one costs minutes.
NO_SHRINK = (Phase.explicit, Phase.generate)


def constants_as_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its initializers made Constant nodes (values the build knows, never weights)."""
    graph = model.graph
    nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in graph.initializer]
    del graph.initializer[:]
    nodes += list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def model_for(case: Case, elem: int = TensorProto.DOUBLE) -> onnx.ModelProto:
    return constants_as_nodes(model_of(case, elem))


def check(case: Case, seed: int, feeds: dict[str, np.ndarray] | None = None) -> None:
    """`tests.grad.finite_differences.check` over `model_for` (`feeds` replace the drawn operands)."""
    finite_differences.check(case, seed, feeds, model_for(case))


# -- Resize -------------------------------------------------------------------------------------------------

COORDINATE_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_half_pixel_for_nn", "tf_crop_and_resize"]  # fmt: skip
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def _resize(draw: st.DrawFn, mode: str) -> Case:
    """Resize of the last two axes of (N, C, H, W) by drawn scales or sizes, enlarging or shrinking, every
    coordinate mode (tf_crop_and_resize with a drawn roi and extrapolation value)."""
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(2, 5)))
    # tf_half_pixel_for_nn: nearest only, rounding down (as Loam supports it).
    coordinate = draw(
        st.sampled_from([m for m in COORDINATE_MODES if mode == "nearest" or m != "tf_half_pixel_for_nn"])
    )
    attrs: dict[str, object] = {"mode": mode, "coordinate_transformation_mode": coordinate}
    if mode == "nearest":
        rounding = ["round_prefer_floor", "floor"] if coordinate == "tf_half_pixel_for_nn" else NEAREST_MODES
        attrs["nearest_mode"] = draw(st.sampled_from(rounding))
    else:
        attrs["antialias"] = int(draw(st.booleans()))
        attrs["exclude_outside"] = int(draw(st.booleans()))
    if mode == "cubic":
        attrs["cubic_coeff_a"] = draw(st.sampled_from([-0.75, -0.5]))
    consts: dict[str, np.ndarray] = {}
    roi = None
    if coordinate == "tf_crop_and_resize":
        starts = [draw(st.sampled_from([0.0, 0.2, -0.3])) for _ in range(2)]
        ends = [draw(st.sampled_from([1.0, 0.7, 1.4])) for _ in range(2)]
        roi = np.array([*starts, *ends])
        attrs["extrapolation_value"] = draw(st.sampled_from([0.0, 2.5]))
        consts["roi"] = roi
    axes = np.array([2, 3], np.int64)
    attrs["axes"] = [2, 3]
    if draw(st.booleans()):
        scales = np.array([draw(st.sampled_from([0.5, 0.6, 1.0, 1.5, 2.0, 2.7])) for _ in range(2)], np.float32)
        consts["scales"] = scales
        order = ("x", "roi" if roi is not None else "", "scales")
        out = resize_geometry(shape, tuple(axes), roi, scales, None, "stretch", roi is not None)[1]
    else:
        sizes = np.array([draw(st.integers(1, 6)) for _ in range(2)], np.int64)
        consts["sizes"] = sizes
        order = ("x", "roi" if roi is not None else "", "", "sizes")
        out = resize_geometry(shape, tuple(axes), roi, None, sizes, "stretch", roi is not None)[1]
    case = Case("Resize", {"x": shape}, [tuple(out)], attrs, consts)
    case.order = order
    return case


def resize_test(mode: str, examples: int) -> object:
    @settings(max_examples=examples, deadline=None, derandomize=True, phases=NO_SHRINK)
    @given(data=st.data())
    def test(data: st.DataObject) -> None:
        check(data.draw(st.composite(_resize)(mode)), data.draw(st.integers(0, 2**16)))

    test.__doc__ = f"Resize, mode {mode}: {_resize.__doc__}"
    return test


test_resize_nearest = resize_test("nearest", 10)
test_resize_linear = resize_test("linear", 12)
test_resize_cubic = resize_test("cubic", 12)


# -- MaxUnpool, Col2Im, AffineGrid --------------------------------------------------------------------------


def _max_unpool(draw: st.DrawFn) -> Case:
    """MaxUnpool of (N, C, h, w) with kernel and stride 2, the indices drawn anywhere in the whole output,
    repeats among them (the later writer keeps the place)."""
    n, c, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    out = (n, c, 2 * h, 2 * w)
    count = n * c * h * w
    picks = draw(st.lists(st.integers(0, int(np.prod(out)) - 1), min_size=count, max_size=count))
    indices = np.array(picks, np.int64).reshape(n, c, h, w)
    case = Case("MaxUnpool", {"x": (n, c, h, w)}, [out], {"kernel_shape": [2, 2], "strides": [2, 2]})
    case.consts = {"indices": indices}
    return case


def _col2im(draw: st.DrawFn) -> Case:
    """Col2Im over a 1-D or 2-D image, drawn block, strides, pads and dilations."""
    nsp = draw(st.integers(1, 2))
    image = [draw(st.integers(2, 5)) for _ in range(nsp)]
    block = [draw(st.integers(1, 3)) for _ in range(nsp)]
    strides = [draw(st.integers(1, 2)) for _ in range(nsp)]
    dilations = [draw(st.integers(1, 2)) for _ in range(nsp)]
    pads = [draw(st.integers(0, 1)) for _ in range(2 * nsp)]
    blocks = []
    for i in range(nsp):
        room = image[i] + pads[i] + pads[nsp + i] - (block[i] - 1) * dilations[i] - 1
        if room < 0:  # the block must fit the padded image
            dilations[i], block[i] = 1, min(block[i], image[i])
            room = image[i] + pads[i] + pads[nsp + i] - block[i]
        blocks.append(room // strides[i] + 1)
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    x = (n, c * int(np.prod(block)), int(np.prod(blocks)))
    attrs = {"strides": strides, "pads": pads, "dilations": dilations}
    consts = {"image_shape": np.array(image, np.int64), "block_shape": np.array(block, np.int64)}
    return Case("Col2Im", {"x": x}, [(n, c, *image)], attrs, consts)


def _affine_grid(draw: st.DrawFn) -> Case:
    """AffineGrid in 2-D and 3-D, align_corners drawn."""
    r = draw(st.integers(2, 3))
    n = draw(st.integers(1, 2))
    sizes = [draw(st.integers(2, 4)) for _ in range(r)]
    size = np.array([n, 1, *sizes], np.int64)
    attrs = {"align_corners": int(draw(st.booleans()))}
    case = Case("AffineGrid", {"theta": (n, r, r + 1)}, [(n, *sizes, r)], attrs, {"size": size})
    case.opset = 20
    return case


def fd(draw_case: object, examples: int) -> object:
    @settings(max_examples=examples, deadline=None, derandomize=True, phases=NO_SHRINK)
    @given(st.composite(draw_case)(), st.integers(0, 2**16))  # type: ignore[arg-type]
    def test(case: Case, seed: int) -> None:
        check(case, seed)

    test.__doc__ = draw_case.__doc__
    return test


test_max_unpool = fd(_max_unpool, 6)
test_col2im = fd(_col2im, 8)
test_affine_grid = fd(_affine_grid, 6)


# -- GridSample ---------------------------------------------------------------------------------------------


def grid_at(rng: np.random.Generator, grid: tuple[int, ...], spatial: tuple[int, ...], align: int) -> np.ndarray:
    """Grid positions whose coordinates lie a quarter away from whole and half numbers (where the taps
    change), from a pixel before the input to one after it."""
    r = len(spatial)
    points = np.empty(grid)
    for i in range(r):
        length = spatial[r - 1 - i]  # component i is spatial axis r - 1 - i
        whole = rng.integers(-2, length + 1, grid[:-1])
        c = whole + rng.choice([0.2, 0.3, 0.7, 0.8], grid[:-1]) + rng.uniform(-0.04, 0.04, grid[:-1])
        points[..., i] = 2 * c / max(length - 1, 1) - 1 if align else (2 * c + 1) / length - 1
    return points


def _grid_sample(draw: st.DrawFn) -> Case:
    """GridSample in 2-D (every mode) and 3-D (nearest, linear), every padding mode, align_corners drawn;
    X and the grid differentiated."""
    r = draw(st.integers(2, 3))
    mode = draw(st.sampled_from(["nearest", "linear", "cubic"] if r == 2 else ["nearest", "linear"]))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    spatial = tuple(draw(st.integers(1, 4)) for _ in range(r))
    out = tuple(draw(st.integers(1, 3)) for _ in range(r))
    attrs = {"mode": mode, "padding_mode": draw(st.sampled_from(["zeros", "border", "reflection"])),
             "align_corners": int(draw(st.booleans()))}  # fmt: skip
    case = Case("GridSample", {"x": (n, c, *spatial), "grid": (n, *out, r)}, [(n, c, *out)], attrs)
    case.opset = 20
    return case


@settings(max_examples=24, deadline=None, derandomize=True, phases=NO_SHRINK)
@given(st.composite(_grid_sample)(), st.integers(0, 2**16))
def test_grid_sample(case: Case, seed: int) -> None:
    """GridSample's X and grid gradients at grid positions away from where the taps change."""
    x, grid = case.shapes["x"], case.shapes["grid"]
    positions = grid_at(np.random.default_rng(seed), grid, x[2:], int(case.attrs["align_corners"]))  # type: ignore[call-overload]
    check(case, seed, {"grid": positions})


# -- RoiAlign -----------------------------------------------------------------------------------------------


def _roi_align(draw: st.DrawFn, mode: str = "avg", ratios: tuple[int, ...] = (1, 2)) -> Case:
    """RoiAlign (`mode`, a sampling_ratio among `ratios`: 0, each region's own count) of drawn regions over
    (N, C, H, W), both coordinate modes and a spatial scale; regions reach a pixel past the map (samples
    there weigh 0) and past its last pixel, and (half_pixel) may be reversed (no samples at all)."""
    n, c, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(2, 4)), draw(st.integers(2, 4))
    count = draw(st.integers(1, 3))
    rois = []
    for _ in range(count):
        x1, y1 = draw(st.sampled_from([-1.6, -0.3, 0.0, 0.6, 1.2])), draw(st.sampled_from([-1.6, -0.3, 0.0, 0.6]))
        rois.append(
            [x1, y1, x1 + draw(st.sampled_from([0.4, 1.7, 2.9, 4.5])), y1 + draw(st.sampled_from([0.4, 2.3, 3.8]))]
        )
    if draw(st.booleans()) and 0 in ratios:  # a reversed region (malformed, or, half_pixel, without samples)
        rois[0][0], rois[0][2] = rois[0][2], rois[0][0]
    batch = np.array(draw(st.lists(st.integers(0, n - 1), min_size=count, max_size=count)), np.int64)
    height, width = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    attrs = {"mode": mode, "output_height": height, "output_width": width,
             "sampling_ratio": draw(st.sampled_from(ratios)), "spatial_scale": draw(st.sampled_from([1.0, 0.5])),
             "coordinate_transformation_mode": draw(st.sampled_from(["half_pixel", "output_half_pixel"]))}  # fmt: skip
    case = Case("RoiAlign", {"x": (n, c, h, w)}, [(count, c, height, width)], attrs)
    case.consts = {"rois": np.array(rois, np.float64), "batch_indices": batch}
    return case


def roi_align_test(mode: str, ratios: tuple[int, ...], examples: int) -> object:
    @settings(max_examples=examples, deadline=None, derandomize=True, phases=NO_SHRINK)
    @given(data=st.data())
    def test(data: st.DataObject) -> None:
        check(data.draw(st.composite(_roi_align)(mode, ratios)), data.draw(st.integers(0, 2**16)))

    test.__doc__ = f"RoiAlign, mode {mode}, sampling_ratio among {ratios}: {_roi_align.__doc__}"
    return test


# Max mode: X drawn from N(0, 1), so two taps' weighted values tie (a kink) with probability 0.
test_roi_align = roi_align_test("avg", (1, 2), 16)
test_roi_align_max = roi_align_test("max", (1, 2), 16)
test_roi_align_adaptive = roi_align_test("avg", (0,), 10)
test_roi_align_max_adaptive = roi_align_test("max", (0,), 10)


def test_roi_align_max_sends_g_to_the_corners_of_the_winning_sample() -> None:
    """One bin of two samples over a map whose largest weighted corner is known: all of g goes to that
    corner (times its weight), none to the other taps."""
    x = np.zeros((1, 1, 2, 4))
    x[0, 0, 0, 3] = 5.0
    case = Case("RoiAlign", {"x": (1, 1, 2, 4)}, [(1, 1, 1, 1)],
                {"mode": "max", "output_height": 1, "output_width": 1, "sampling_ratio": 2,
                 "coordinate_transformation_mode": "output_half_pixel"})  # fmt: skip
    # Samples at y = 0.25, 0.75 and x = 1.25, 2.75: (0.25, 2.75)'s corner (0, 3) weighs 0.75 * 0.75.
    case.consts = {"rois": np.array([[0.5, 0.0, 3.5, 1.0]]), "batch_indices": np.zeros(1, np.int64)}
    feeds = feeds_for(case, 0) | {"x": x, "r0": np.full((1, 1, 1, 1), 2.0)}
    loss, dx = run_built(build_for(model_for(case)), feeds)
    want = np.zeros_like(x)
    want[0, 0, 0, 3] = 2.0 * 0.75 * 0.75
    np.testing.assert_allclose(loss, 2.0 * 5.0 * 0.75 * 0.75)
    np.testing.assert_allclose(dx, want)


def test_roi_align_max_adaptive_takes_no_part_from_samples_past_a_regions_own_count() -> None:
    """sampling_ratio 0 with regions of 3 x 4 and 1 x 1 samples over a negative map: the small region's
    largest weighted corner is negative, so a tap past its own count (weighing 0) must not win."""
    case = Case("RoiAlign", {"x": (1, 2, 4, 4)}, [(2, 2, 1, 1)],
                {"mode": "max", "output_height": 1, "output_width": 1, "sampling_ratio": 0,
                 "coordinate_transformation_mode": "output_half_pixel"})  # fmt: skip
    case.consts = {"rois": np.array([[0.1, 0.2, 2.9, 3.3], [1.2, 1.1, 2.1, 1.9]]),
                   "batch_indices": np.zeros(2, np.int64)}  # fmt: skip
    negative = -np.random.default_rng(4).uniform(1.0, 2.0, (1, 2, 4, 4))
    check(case, 4, {"x": negative})


# -- the WGSL module ----------------------------------------------------------------------------------------

DRAWERS = {
    "resize_nearest": lambda draw: _resize(draw, "nearest"),
    "resize_linear": lambda draw: _resize(draw, "linear"),
    "resize_cubic": lambda draw: _resize(draw, "cubic"),
    "max_unpool": _max_unpool,
    "col2im": _col2im,
    "affine_grid": _affine_grid,
    "grid_sample": _grid_sample,
    "roi_align": _roi_align,
    "roi_align_max": lambda draw: _roi_align(draw, "max"),
    "roi_align_adaptive": lambda draw: _roi_align(draw, draw(st.sampled_from(["avg", "max"])), (0,)),
}


@pytest.mark.parametrize("name", sorted(DRAWERS))
@settings(max_examples=3, deadline=None, derandomize=True, phases=NO_SHRINK)
@given(data=st.data())
def test_the_wgsl_module_computes_the_numpy_modules_gradients(name: str, data: st.DataObject) -> None:
    """The same clauses on the device: float32 gradients within 1e-4 of the numpy module's."""
    case = data.draw(st.composite(DRAWERS[name])())
    case.consts = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in case.consts.items()}
    seed = data.draw(st.integers(0, 2**16))
    feeds = feeds_for(case, seed, np.float32)
    if case.op == "GridSample":
        x, grid = case.shapes["x"], case.shapes["grid"]
        align = int(case.attrs["align_corners"])  # type: ignore[call-overload]
        feeds["grid"] = grid_at(np.random.default_rng(seed), grid, x[2:], align).astype(np.float32)
    compare_on_wgsl(case, feeds)


def compare_on_wgsl(case: Case, feeds: dict[str, np.ndarray]) -> None:
    """`tests.grad.finite_differences.compare_on_wgsl` over `model_for`."""
    finite_differences.compare_on_wgsl(case, feeds, model_for(case, TensorProto.FLOAT))


# -- what is refused ----------------------------------------------------------------------------------------


def given_by_the_run(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """`model` with Constant `name` made a graph input of its type and extents (a value only the run gives),
    the loss's weights r0 a scalar."""
    graph = model.graph
    node = next(n for n in graph.node if n.op_type == "Constant" and n.output[0] == name)
    value = node.attribute[0].t
    graph.node.remove(node)
    graph.input.append(helper.make_tensor_value_info(name, value.data_type, list(value.dims)))
    # The result's extents are then the run's: the loss weighs it by a scalar.
    for value_info in graph.input:
        if value_info.name == "r0":
            del value_info.type.tensor_type.shape.dim[:]
    return model


def _resize_at_run_time_scales() -> onnx.ModelProto:
    case = Case("Resize", {"x": (1, 1, 2, 3)}, [(1, 1, 4, 6)], {"mode": "linear"})
    case.consts = {"scales": np.array([1, 1, 2, 2], np.float32)}
    case.order = ("x", "", "scales")
    return given_by_the_run(model_for(case), "scales")


def _col2im_at_run_time_shape() -> onnx.ModelProto:
    consts = {"image_shape": np.array([3, 3], np.int64), "block_shape": np.array([2, 2], np.int64)}
    case = Case("Col2Im", {"x": (1, 4, 4)}, [(1, 1, 3, 3)], {}, consts)
    return given_by_the_run(model_for(case), "image_shape")


def _affine_grid_at_run_time_size() -> onnx.ModelProto:
    case = Case("AffineGrid", {"theta": (1, 2, 3)}, [(1, 2, 2, 2)], {}, {"size": np.array([1, 1, 2, 2], np.int64)})
    case.opset = 20
    return given_by_the_run(model_for(case), "size")


def _roi_align_case(attrs: dict[str, object], rois_differentiated: bool = False) -> onnx.ModelProto:
    rois = np.array([[0.0, 0.0, 2.0, 2.0]])
    shapes = {"x": (1, 1, 3, 3)} | ({"rois": (1, 4)} if rois_differentiated else {})
    case = Case("RoiAlign", shapes, [(1, 1, 1, 1)], {"output_height": 1, "output_width": 1} | attrs)
    case.consts = ({} if rois_differentiated else {"rois": rois}) | {"batch_indices": np.zeros(1, np.int64)}
    case.order = ("x", "rois", "batch_indices")
    return model_for(case)


def _grid_sample_of_mixed_types() -> onnx.ModelProto:
    case = Case("GridSample", {"x": (1, 1, 2, 2)}, [(1, 1, 1, 1)], {"mode": "linear"}, {"grid": np.zeros((1, 1, 1, 2))})
    case.opset = 20
    model = model_for(case, TensorProto.FLOAT)
    model.graph.node[0].attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(np.zeros((1, 1, 1, 2)), "grid"))
    return model


REFUSED = {
    "resize_to": (_resize_at_run_time_scales, r"kernel\.resize_to 'op': .*scales, sizes or roi only the run gives"),
    "col2im": (_col2im_at_run_time_shape, r"kernel\.col2im 'op': .*image_shape or block_shape only the run gives"),
    "affine_grid": (_affine_grid_at_run_time_size, r"kernel\.affine_grid 'op': .*size only the run gives"),
    "roi_align_adaptive": (
        lambda: given_by_the_run(_roi_align_case({"mode": "max"}), "rois"),
        r"kernel\.roi_align 'op': no grad clause for roi_align with sampling_ratio 0 and rois only the run gives",
    ),
    "roi_align_rois": (lambda: _roi_align_case({"sampling_ratio": 1}, True), r"kernel\.roi_align 'op': .*rois' share"),
    "grid_sample_mixed": (_grid_sample_of_mixed_types, r"kernel\.grid_sample 'op': .*f32 X at a f64 grid"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_no_clause_covers_is_refused_naming_the_op(name: str) -> None:
    model, message = REFUSED[name]
    with pytest.raises(UnsupportedError, match=message):
        build_for(model())
