"""The grad clauses of the kernels that sample or place elements by computed positions (`kernel.resize`,
`kernel.grid_sample`, `kernel.affine_grid`, `kernel.roi_align`, `kernel.col2im`, `kernel.max_unpool`,
`kernel.deform_conv`).

- `kernel.resize` (every mode, coordinate mode, nearest mode, cubic coefficient, exclude_outside,
  antialias, tf_crop_and_resize's crop and extrapolation): separable, so along each axis the forward is a
  fixed matrix M (output positions by input positions), the one the forward's own kernel
  (`loam.runtime.kernels.resize.kernel_resize`) makes of the identity at build time; an output position
  tf_crop_and_resize maps outside the input is a zero row (the extrapolation value is a constant).
  dX = g with M^T applied along each resized axis (`base.through_matrix`).  scales, sizes and roi take
  none; `kernel.resize_to` (geometry the run settles) is refused;
- `kernel.max_unpool`: element i was written at flat position I[i] (the later of two writers to one place
  stays), so dX[i] = g[I[i]] where i is the last writer there, else 0: a `kernel.gather` of the flat g,
  the last writer found by a scatter (reduction max) of each element's number;
- `kernel.col2im`: each tap was added onto its padded image position, so its gradient is g (padded with
  zeros) read back there: im2col, one `kernel.gather` at build-time positions;
- `kernel.affine_grid`: linear in theta, grid[n, p, i] = sum_j H[p, j] theta[n, i, j] for the homogeneous
  base positions H (the forward's kernel run on unit thetas at build time), so dtheta = g^T @ H;
- `kernel.grid_sample`: `loam.grad.sampling_grid`;
- `kernel.roi_align`: each bin reads samples (sampling_ratio x sampling_ratio, or, with 0, each region's
  own ceil(extent / bins) per axis) of four weighted neighbours (hy hx, hy lx, ly hx, ly lx, zero for a
  sample more than a pixel outside) in image batch_indices[r], the positions and weights computed from
  the rois in the backward (zips, as the forward's `_bilinear`).  avg: the mean, so X's share is g over
  the count times each tap's weight; max: the largest weighted tap w X[tap], so g times its weight goes
  to the tap that won (a `kernel.arg_reduce`, the first in the forward's order, sample row, sample column,
  neighbour row, neighbour column, on a tie), a region's taps past its own count taking no part.  Either
  is one `kernel.scatter_elements` into X as (C, N*H*W).  With sampling_ratio 0 the counts (static extents
  of the backward) are computed at build time from the rois, which must be a constant; refused: rois only
  the run gives there, and a gradient asked of the rois;
- `kernel.deform_conv` (X, W, offset, B, mask): `loam.grad.sampling_deform`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from xdsl.ir import Operation, SSAValue

from loam.dialects.expr import Expr
from loam.dialects.kernel import (
    AffineGridOp,
    ArgReduceOp,
    Col2ImOp,
    DeformConvOp,
    GatherElementsOp,
    GatherOp,
    GridSampleOp,
    MatmulOp,
    MaxUnpoolOp,
    PadOp,
    RegroupOp,
    ResizeOp,
    ResizeToOp,
    RoiAlignOp,
    ScatterElementsOp,
)
from loam.dialects.kernel.library import Param
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import (
    Backward,
    Clause,
    cut,
    known,
    param_float,
    param_floats,
    param_int,
    param_ints,
    param_str,
    permuted,
    refuse,
    static_extents,
    through_matrix,
    type_of,
    zeros_like,
)
from loam.grad.indexing import last_writers
from loam.grad.sampling_deform import deform_conv
from loam.grad.sampling_grid import constant, grid_sample
from loam.runtime.kernels.common import widened
from loam.runtime.kernels.resize import kernel_affine_grid, kernel_resize


def regrouped(b: Backward, value: SSAValue, axes: list[Axis], node: str) -> SSAValue:
    """`value`'s elements in row-major order, as a tensor of `axes`."""
    return b.emit(RegroupOp(value, AxesTensorType(type_of(value).elem, axes), f"{node}.grad"))


# -- resize ----------------------------------------------------------------------------------------------


def resize_matrix(params: Mapping[str, Param], shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """The forward's map along `axis` as a matrix (output positions by input positions), from its own
    kernel run on the identity; None where it leaves the axis alone."""
    n_in, rank = shape[axis], len(shape)
    scales, sizes = param_floats(params, "scales"), param_ints(params, "sizes")
    roi = param_floats(params, "roi", ())
    axis_roi = (0.0, float(roi[axis]), 1.0, float(roi[axis + rank])) if roi else ()
    # Rows of the identity as a batch axis the kernel leaves alone: column j of its result is row j of M.
    moved = kernel_resize(
        np.eye(n_in, dtype=np.float64),
        mode=param_str(params, "mode"),
        coordinate_mode=param_str(params, "coordinate_mode"),
        nearest_mode=param_str(params, "nearest_mode"),
        scales=(1.0, scales[axis]),
        sizes=(n_in, sizes[axis]),
        roi=axis_roi,
        cubic_coeff_a=param_float(params, "cubic_coeff_a", -0.75),
        exclude_outside=param_int(params, "exclude_outside", 0),
        extrapolation_value=0.0,  # a constant: the positions it fills take no gradient
        antialias=param_int(params, "antialias", 0),
    )
    if moved.shape == (n_in, n_in) and np.array_equal(moved, np.eye(n_in)):
        return None
    return np.ascontiguousarray(moved.T)


def _resize(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, ResizeOp)
    x = op.inputs[0]
    t = type_of(x)
    shape = static_extents(op, t)
    for axis in range(t.rank):
        matrix = resize_matrix(op.params, shape, axis)
        if matrix is not None:  # dX = M^T g along this axis
            g = through_matrix(b, g, axis, matrix, t.axes[axis], node)
    b.send(x, g if type_of(g) == t else regrouped(b, g, list(t.axes), node))


def _resize_to(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    raise refuse(op, "no grad clause for a resize whose scales, sizes or roi only the run gives")


# -- unpooling and col2im ---------------------------------------------------------------------------------


def _max_unpool(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, MaxUnpoolOp)
    x, indices = op.inputs[0], op.inputs[1]
    t = type_of(x)
    count = math.prod(static_extents(op, t))
    size = math.prod(static_extents(op, type_of(g)))
    # The flat output is a scatter (reduction none) of the flat x at the flat indices: x's element is g where
    # it is the writer the place keeps (the last), else 0.
    written = [Axis.named("Written", count)]
    flat_g = regrouped(b, g, [Axis.named("Positions", size)], node)
    flat_i, flat_x = regrouped(b, indices, written, node), regrouped(b, x, written, node)
    kept = last_writers(b, ScatterElementsOp, flat_g, flat_i, flat_x, {"axis": 0}, node)
    read = b.emit(GatherOp([flat_g, flat_i], [AxesTensorType(t.elem, written)], f"{node}.grad", axis=0))
    o = Expr.operand
    dx = b.zip([read, kept], Expr.select(o(1), o(0), Expr.const(0.0, t.elem.name)), type_of(read), f"{node}.grad")
    b.send(x, regrouped(b, dx, list(t.axes), node))


def _col2im(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, Col2ImOp)
    x = op.inputs[0]
    p = op.params
    if "image_shape" not in p or "block_shape" not in p:
        raise refuse(op, "no grad clause for a col2im whose image_shape or block_shape only the run gives")
    t, gt = type_of(x), type_of(g)
    static_extents(op, t, 1)
    image, block = list(param_ints(p, "image_shape")), list(param_ints(p, "block_shape"))
    strides, pads, dilations = (list(param_ints(p, k)) for k in ("strides", "pads", "dilations"))
    nsp = len(image)
    padded = [image[i] + pads[i] + pads[nsp + i] for i in range(nsp)]
    blocks = [(padded[i] - (block[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(nsp)]
    # Tap k of block l sat at block l's corner plus tap k's offset, in the padded image (row-major flat).
    taps_at = np.indices(block).reshape(nsp, -1, 1) * np.array(dilations).reshape(nsp, 1, 1)
    corners = np.indices(blocks).reshape(nsp, 1, -1) * np.array(strides).reshape(nsp, 1, 1)
    at = np.ravel_multi_index(tuple(taps_at + corners), padded)
    widths = (0, 0, *pads[:nsp], 0, 0, *pads[nsp:])
    padded_type = AxesTensorType(t.elem, [*gt.axes[:2], *(Axis.named(f"Padded{i}", e) for i, e in enumerate(padded))])
    padded_g = b.emit(PadOp([g], [padded_type], f"{node}.grad", pads=widths, mode="constant", value=0.0))
    flat = regrouped(b, padded_g, [*gt.axes[:2], Axis.named("Positions", math.prod(padded))], node)
    taps = constant(b, at.reshape(-1), ["Taps"], "i64", node)
    read = b.emit(GatherOp([flat, taps], [AxesTensorType(t.elem, [*gt.axes[:2], type_of(taps).axes[0]])],
                           f"{node}.grad", axis=2))  # fmt: skip
    b.send(x, regrouped(b, read, list(t.axes), node))


# -- affine grid --------------------------------------------------------------------------------------------


def _affine_grid(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, AffineGridOp)
    if len(op.inputs) > 1:
        raise refuse(op, "no grad clause for an affine grid whose size only the run gives")
    theta = op.inputs[0]
    t = type_of(theta)
    sizes = tuple(int(v) for v in op.param("sizes"))
    r, points = len(sizes), math.prod(sizes)
    # The base positions H (points, r + 1): the forward run on thetas whose first row picks one of H's columns.
    units = np.zeros((r + 1, r, r + 1))
    units[np.arange(r + 1), 0, np.arange(r + 1)] = 1.0
    base = kernel_affine_grid(units, sizes=sizes, align_corners=int(op.param("align_corners")))
    h_t = base[..., 0].reshape(r + 1, points)
    flat_g = regrouped(b, g, [t.axes[0], Axis.named("Points", points), t.axes[1]], node)
    # dtheta^T = H^T g, as (N, r + 1, r), then theta's axes back.
    lhs = constant(b, h_t, ["Homogeneous", "Points"], t.elem.name, node)
    product = b.emit(MatmulOp(lhs, flat_g, AxesTensorType(t.elem, [t.axes[0], t.axes[2], t.axes[1]]), f"{node}.grad"))
    b.send(theta, permuted(b, product, [0, 2, 1], node))


# -- roi align ----------------------------------------------------------------------------------------------


def _roi_align(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, RoiAlignOp)
    x, rois, batch = op.inputs
    p = op.params
    if rois in b.needed:
        raise refuse(op, "no grad clause for the rois' share (X's only)")
    if x not in b.needed:
        return
    t, rt = type_of(x), type_of(rois)
    _, _, h, w = static_extents(op, t, 1)
    e = t.elem.name
    ratio = param_int(p, "sampling_ratio")
    # Samples per bin along each axis: `ratio`, or (0) each region's own count, which rois the build knows set.
    samples_h: int | np.ndarray = ratio
    samples_w: int | np.ndarray = ratio
    if ratio < 1:
        samples_h, samples_w = _adaptive_samples(op, rois, t)
    regions = rt.axes[0]
    # Each axis's samples (R, bins, taps): the two neighbours of each of its samples per bin.
    rows = _roi_taps(b, op, rois, 1, h, param_int(p, "output_height"), samples_h, node)
    columns = _roi_taps(b, op, rois, 0, w, param_int(p, "output_width"), samples_w, node)
    (row_at, row_weight), (column_at, column_weight) = rows, columns
    bins_h, bins_w = type_of(row_at).axes[1], type_of(column_at).axes[1]
    taps_h, taps_w = type_of(row_at).axes[2], type_of(column_at).axes[2]
    unit = Axis.named("Unit", 1)
    as_rows = [regions, bins_h, unit, taps_h, unit]
    as_columns = [regions, unit, bins_w, unit, taps_w]

    def laid(value: SSAValue, axes: list[Axis]) -> SSAValue:
        return regrouped(b, value, axes, node)

    image = laid(batch, [regions, unit, unit, unit, unit])
    every = [regions, bins_h, bins_w, taps_h, taps_w]
    at = (Expr.operand(0).cast("i64") * Expr.const(h * w, "i64") + Expr.operand(1) * Expr.const(w, "i64")
          + Expr.operand(2))  # fmt: skip
    index = b.zip(
        [image, laid(row_at, as_rows), laid(column_at, as_columns)], at, AxesTensorType("i64", every), f"{node}.grad"
    )
    weight = b.zip([laid(row_weight, as_rows), laid(column_weight, as_columns)], Expr.operand(0) * Expr.operand(1),
                   AxesTensorType(e, every), f"{node}.grad")  # fmt: skip
    # The taps in the forward's order, (R, PH, PW, taps): sample row, sample column, neighbour row, neighbour column.
    ry, rx = type_of(row_at).shape[2].const_value // 2, type_of(column_at).shape[2].const_value // 2
    split = [regions, bins_h, bins_w, Axis.named("RowSamples", ry), Axis.named("RowNeighbours", 2),
             Axis.named("ColumnSamples", rx), Axis.named("ColumnNeighbours", 2)]  # fmt: skip
    taps = Axis.named("Taps", ry * rx * 4)

    def in_order(value: SSAValue) -> SSAValue:
        return laid(permuted(b, laid(value, split), [0, 1, 2, 3, 5, 4, 6], node), [regions, bins_h, bins_w, taps])

    index, weight = in_order(index), in_order(weight)
    # g (R, C, PH, PW) as (C, R, PH, PW, 1); the reads spread over C, (C, R, PH, PW, taps).
    g_c = regrouped(b, permuted(b, g, [1, 0, 2, 3], node), [t.axes[1], regions, bins_h, bins_w, unit], node)
    spread = [t.axes[1], regions, bins_h, bins_w, taps]
    reads = Axis.named("Reads", regions.extent * bins_h.extent * bins_w.extent * taps.extent)
    indices = laid(b.zip([index], Expr.operand(0), AxesTensorType("i64", spread), f"{node}.grad"), [t.axes[1], reads])
    x_c = permuted(b, x, [1, 0, 2, 3], node)
    planes = regrouped(b, x_c, [t.axes[1], Axis.named("Pixels", t.shape[0] * h * w)], node)
    if p["mode"] == "avg":  # each bin the mean of its samples: g w / count
        count = _sample_counts(b, samples_h, samples_w, e, node)
        share = Expr.operand(0) * Expr.operand(1) / (Expr.operand(2) if isinstance(count, SSAValue) else count)
        operands = [g_c, weight] + ([count] if isinstance(count, SSAValue) else [])
        updates = b.zip(operands, share, AxesTensorType(e, spread), f"{node}.grad")
    else:  # each bin the largest w X[tap]: g w to the tap that won (the first, in the forward's order, on a tie)
        read = laid(b.emit(GatherElementsOp([planes, indices], [AxesTensorType(e, [t.axes[1], reads])],
                                            f"{node}.grad", axis=1)), spread)  # fmt: skip
        candidates = [read, weight]
        value = Expr.operand(0) * Expr.operand(1)
        if isinstance(samples_h, np.ndarray):  # a region's samples past its own count take no part
            assert isinstance(samples_w, np.ndarray)  # both are set together, by _adaptive_samples
            live = _live_taps(samples_h, samples_w, ry, rx)
            candidates.append(constant(b, live, [regions.name, "Unit", "Unit", "Taps"], e, node))
            lowest = Expr.const(float(np.finfo(t.elem.numpy).min), e)
            value = Expr.select(Expr.operand(2).binary("greater", Expr.const(0.5, e)), value, lowest)
        weighed = b.zip(candidates, value, AxesTensorType(e, spread), f"{node}.grad")
        won_type = AxesTensorType("i64", [*spread[:4], unit])
        won = b.emit(ArgReduceOp([weighed], [won_type], f"{node}.grad", kind="max", axis=4, keepdims=1,
                                 select_last_index=0))  # fmt: skip
        numbers = constant(b, np.arange(ry * rx * 4), ["Taps"], "i64", node)
        kept = Expr.select(Expr.operand(2).binary("equal", Expr.operand(3)), Expr.operand(0) * Expr.operand(1),
                           Expr.const(0.0, e))  # fmt: skip
        updates = b.zip([g_c, weight, numbers, won], kept, AxesTensorType(e, spread), f"{node}.grad")
    operands = [zeros_like(b, planes, node), indices, laid(updates, [t.axes[1], reads])]
    added = b.emit(ScatterElementsOp(operands, [type_of(planes)], f"{node}.grad", axis=1, reduction="add"))
    b.send(x, permuted(b, regrouped(b, added, list(type_of(x_c).axes), node), [1, 0, 2, 3], node))


def _adaptive_samples(op: RoiAlignOp, rois: SSAValue, t: AxesTensorType) -> tuple[np.ndarray, np.ndarray]:
    """With sampling_ratio 0, each region's samples per bin along y and x, ceil(extent / bins), as the
    forward computes them (in X's arithmetic type) from rois the build knows; refused where only the run
    gives them (the number of samples, an extent, would be the run's)."""
    given = known(rois)
    if given is None:
        raise refuse(op, "no grad clause for roi_align with sampling_ratio 0 and rois only the run gives "
                         "(they set each region's number of samples)")  # fmt: skip
    dtype = widened(np.zeros(0, t.elem.numpy)).dtype
    ct = dtype.type
    r = widened(given).astype(dtype).reshape(-1, 4)
    half = bool(op.param("half_pixel"))
    scale, shift = ct(op.param("spatial_scale")), ct(0.5 if half else 0.0)
    counts = []
    for column, bins in ((1, int(op.param("output_height"))), (0, int(op.param("output_width")))):
        extent = (r[:, column + 2] * scale - shift) - (r[:, column] * scale - shift)
        if not half:  # malformed regions become 1 pixel wide
            extent = np.maximum(extent, ct(1))
        counts.append(np.ceil(extent / ct(bins)).astype(np.int64))
    return counts[0], counts[1]


def _sample_counts(
    b: Backward, samples_h: int | np.ndarray, samples_w: int | np.ndarray, e: str, node: str
) -> Expr | SSAValue:
    """Each bin's number of samples (at least 1, as the forward divides): a constant, or (R, 1, 1, 1) per region."""
    if isinstance(samples_h, int):
        return Expr.const(float(samples_h * samples_w), e)
    per_region = np.maximum(samples_h * samples_w, 1).astype(np.float64).reshape(-1, 1, 1, 1)
    return constant(b, per_region, ["Regions", "Unit", "Unit", "Unit"], e, node)


def _live_taps(samples_h: np.ndarray, samples_w: np.ndarray, ry: int, rx: int) -> np.ndarray:
    """(R, 1, 1, taps), 1 where a tap (in the forward's order) belongs to one of its region's samples, else 0."""
    qy, qx, _, _ = (a.reshape(-1) for a in np.indices((ry, rx, 2, 2)))
    live = (qy[None, :] < samples_h[:, None]) & (qx[None, :] < samples_w[:, None])
    return live.astype(np.float64).reshape(len(samples_h), 1, 1, -1)


def _roi_taps(
    b: Backward,
    op: RoiAlignOp,
    rois: SSAValue,
    column: int,
    length: int,
    bins: int,
    samples: int | np.ndarray,
    node: str,
) -> tuple[SSAValue, SSAValue]:
    """Along one axis (x: rois' columns 0 and 2; y: 1 and 3) of `length`, each region's `bins` x `samples`
    samples' two neighbours, as (R, bins, samples * 2): where each reads (i64) and its weight, as the
    forward's `_bilinear` settles them (a sample more than a pixel outside weighs 0; one past the last
    pixel reads it alone).  `samples` per region (sampling_ratio 0): the most of any, those past a region's
    own count weighing 0."""
    name = "Column" if column == 0 else "Row"
    rt = type_of(rois)
    e = rt.elem.name
    regions = rt.axes[0]
    scale, shift = float(op.param("spatial_scale")), 0.5 if op.param("half_pixel") else 0.0
    ends = []
    for k in (column, column + 2):
        one = AxesTensorType(e, [regions, Axis.named("Unit", 1)])
        part = cut(b, rois, one, (0, k), node)
        ends.append(b.zip([part], Expr.operand(0) * Expr.const(scale, e) - Expr.const(shift, e), one, f"{node}.grad"))
    start, stop = ends
    extent = Expr.operand(1) - Expr.operand(0)
    if not op.param("half_pixel"):  # malformed regions become 1 pixel wide
        extent = extent.binary("max", Expr.const(1.0, e))
    bin_size = b.zip([start, stop], extent / Expr.const(float(bins), e), type_of(start), f"{node}.grad")
    three = [regions, Axis.named("Unit", 1), Axis.named("Unit", 1), Axis.named("Unit", 1)]
    # Sample q of bin p: start + p * bin + (q + 0.5) * bin / count.
    if isinstance(samples, int):
        ratio, count = samples, Expr.const(float(samples), e)
        extra: list[SSAValue] = []
    else:  # each region's own count (operand 5), at least 1 where it divides (a region without samples reads none)
        ratio, count = max(1, int(samples.max(initial=0))), Expr.operand(5)
        per_region = np.maximum(samples, 1).astype(np.float64).reshape(-1, 1, 1, 1)
        extra = [constant(b, per_region, [regions.name, "Unit", "Unit", "Unit"], e, node)]
    ps = constant(b, np.arange(bins, dtype=np.float64).reshape(bins, 1, 1), [f"{name}Bins", "Unit", "Unit"], e, node)
    qs = constant(b, np.arange(ratio).reshape(ratio, 1) + 0.5, ["Samples", "Unit"], e, node)
    js = constant(b, np.array([0.0, 1.0]), ["Neighbours"], e, node)
    samples_axes = [regions, Axis.named(f"{name}Bins", bins), Axis.named("Samples", ratio), Axis.named("Neighbours", 2)]
    where = Expr.operand(0) + Expr.operand(2) * Expr.operand(1) + Expr.operand(3) * Expr.operand(1) / count
    operands = [regrouped(b, start, three, node), regrouped(b, bin_size, three, node), ps, qs, js, *extra]
    y = where.binary("max", Expr.const(0.0, e))
    low = y.unary("floor")
    edge = low.binary("greater_equal", Expr.const(length - 1.0, e))
    low = Expr.select(edge, Expr.const(length - 1.0, e), low)
    frac = Expr.select(edge, Expr.const(0.0, e), y - low)
    j = Expr.operand(4)
    one_e = Expr.const(1.0, e)
    taken = Expr.select(edge, low, low + j).cast("i64")
    inside = where.binary("greater_equal", Expr.const(-1.0, e)).binary(
        "and", where.binary("less_equal", Expr.const(float(length), e))
    )
    if extra:  # a sample past its region's own count
        limit = np.asarray(samples).astype(np.float64).reshape(-1, 1, 1, 1)
        operands.append(constant(b, limit, [regions.name, "Unit", "Unit", "Unit"], e, node))
        inside = inside.binary("and", Expr.operand(3).binary("less", Expr.operand(6)))
    weight = Expr.select(inside, j * frac + (one_e - j) * (one_e - frac), Expr.const(0.0, e))
    flat = [regions, Axis.named(f"{name}Bins", bins), Axis.named(f"{name}Taps", 2 * ratio)]
    at = b.zip(operands, taken, AxesTensorType("i64", samples_axes), f"{node}.grad")
    weighed = b.zip(operands, weight, AxesTensorType(e, samples_axes), f"{node}.grad")
    return regrouped(b, at, flat, node), regrouped(b, weighed, flat, node)


CLAUSES: dict[type[Operation], Clause] = {
    ResizeOp: _resize,
    ResizeToOp: _resize_to,
    MaxUnpoolOp: _max_unpool,
    Col2ImOp: _col2im,
    AffineGridOp: _affine_grid,
    GridSampleOp: grid_sample,
    RoiAlignOp: _roi_align,
    DeformConvOp: deform_conv,
}
EVERY_RESULT: frozenset[type[Operation]] = frozenset()
"""The ops whose clause reads the adjoint of each result itself (a gradient may reach any of them)."""
