"""Resize and Upsample, lowered to one `kernel.resize` with its output extents and scales settled;
GridSample, lowered to one `kernel.grid_sample`; AffineGrid, the grid GridSample reads, lowered to
one `kernel.affine_grid` with its extents settled from its size input.

Scales or sizes (and roi for tf_crop_and_resize) the build knows fix the output extents statically.
Where the run gives one of them (a graph input, a float initializer), or X has symbolic extents, the
node lowers to `kernel.resize_to`, which reads them at run time: the extents of the axes resized are
lengths only the run knows (an axis a known scale of 1 leaves alone keeps its extent), and the rank
is X's.  Their lengths must be known at build time and match the axes resized.  Both paths settle
the geometry with the same function, `resize_geometry`.  Every opset restates as the current Resize:

- Resize 10, Upsample 7/9 (and Upsample 1's height_scale/width_scale): scales only, the
  `asymmetric` mapping, nearest taking floor when enlarging and ceil when shrinking (onnxruntime's
  reading of those opsets) and linear as N-linear;
- Resize 11/13: `roi`, `scales` or `sizes`, coordinate_transformation_mode, nearest_mode, cubic;
- Resize 18/19: `axes`, `keep_aspect_ratio_policy`, half_pixel_symmetric, and `antialias=1`, which
  stretches the linear or cubic filter by 1 / scale on each axis it shrinks (as ONNX defines it;
  nearest ignores it).

N-linear and N-cubic compute in floats; nearest gathers, so it serves every element type.  A kept
extent keeps its axis, a resized one is new (the layout names it).

GridSample reads X (N, C, *S) at the positions grid (N, *O, r) holds, so its output extents are
the grid's whatever their values: nothing needs to be known at build time.  Opsets 16-19 spell
the modes bilinear and bicubic, 20 on linear and cubic; onnxruntime is the oracle, so Loam samples
2-D and 3-D spatial inputs, and cubic only in 2-D, as it does.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Required, TypedDict, TypeVar

import numpy as np

from loam.core import derived, owed
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, float_attr, int_attr, require_arity, same_axis
from loam.ops.lowering import FLOAT_TYPES as FLOATS
from loam.ops.lowering import axes_type
from loam.ops.operands import (
    emit_library,
    fold_if_known,
    from_run,
    given,
    is_symbolic,
    keep_unchanged,
    known_extents,
    operand_facts,
    polys_of,
    present_bits,
    require_elem,
    run_time_length,
)
from loam.runtime.errors import DataError
from loam.runtime.kernels.resize import (
    kernel_affine_grid,
    kernel_grid_sample,
    kernel_resize,
    resize_geometry,
)

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

_COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_ALL_TYPES = (*FLOATS, "i8", "i16", "i32", "i64", "ui8", "bool")
_T = TypeVar("_T")
# A scale over a symbolic extent is read as a ratio p / q with q at most this (1.5 as 3 / 2, 0.7 as 7 / 10).
_MAX_DENOMINATOR = 1024
# The longest symbolic extent the build checks a scale's ratio against onnxruntime's f32 product for.
_CHECKED_LENGTH = 1 << 22


@functools.cache
def scale_ratio(scale: float) -> tuple[int, int, int] | None:
    """The ratio p / q a Resize scale spells (q <= 1024, p / q rounding to the scale in f32), and the
    longest extent n up to which floor(p * n / q) is onnxruntime's truncated f32 product for every
    extent (`scaled_extent`); None where no such ratio rounds to the scale."""
    ratio = Fraction(scale).limit_denominator(_MAX_DENOMINATOR)
    p, q = ratio.numerator, ratio.denominator
    if p < 1 or np.float32(p / q) != np.float32(scale):
        return None
    n = np.arange(_CHECKED_LENGTH + 1, dtype=np.int64)
    product = (np.float32(scale) * n.astype(np.float32)).astype(np.int64)  # `scaled_extent`, vectorised
    wrong = np.flatnonzero(product != p * n // q)
    return p, q, int(wrong[0]) - 1 if wrong.size else _CHECKED_LENGTH


class ResizeParams(TypedDict, total=False):
    """`kernel.resize`'s parameters (`kernel.resize_to` takes the mode's alone): the mode, then those
    only some modes read, then the geometry the build settles."""

    mode: Required[str]
    coordinate_mode: Required[str]
    nearest_mode: Required[str]
    antialias: int
    cubic_coeff_a: float
    exclude_outside: int
    extrapolation_value: float
    scales: tuple[float, ...]
    sizes: tuple[int | Poly, ...]
    roi: tuple[float, ...]


class GridSampleParams(TypedDict):
    """`kernel.grid_sample`'s parameters."""

    mode: str
    padding_mode: str
    align_corners: int


class ResizeRule(OpRule):
    """ONNX Resize (opsets 10-19) and Upsample (opsets 1-9, deprecated at 10)."""

    op_types = ("Resize", "Upsample")
    kernels: tuple[str, ...] = ("kernel.resize", "kernel.resize_to")
    attributes = frozenset(
        {
            "antialias",
            "axes",
            "coordinate_transformation_mode",
            "cubic_coeff_a",
            "exclude_outside",
            "extrapolation_value",
            "keep_aspect_ratio_policy",
            "mode",
            "nearest_mode",
            "scales",
            "height_scale",
            "width_scale",
        }
    )
    elem_types = _ALL_TYPES
    first_opset = 1
    limitations = (
        "scales/sizes (and roi for tf_crop_and_resize) known only at run time need their lengths known; "
        "linear and cubic compute floats only; tf_half_pixel_for_nn only with floor-like nearest modes"
    )

    # -- settling the geometry -------------------------------------------------------------------

    def attrs(self, node: NodeInfo, rank: int) -> tuple[ResizeParams, tuple[int, ...], str]:
        """What the attributes settle: the kernel's mode parameters, the axes resized and the
        keep_aspect_ratio_policy (opsets before 11 restated as the current Resize)."""
        legacy = node.op_type == "Upsample" or node.since < 11
        mode = str(node.attr("mode", "nearest"))
        if mode == "bilinear" and node.op_type == "Upsample":  # Upsample 1's spelling of linear
            mode = "linear"
        if mode not in ("nearest", "linear", "cubic") or (legacy and mode == "cubic"):
            raise node.fail(f"mode {mode!r} is not defined at opset {node.since}")
        if legacy:
            params: ResizeParams = {
                "mode": mode,
                "coordinate_mode": "asymmetric",
                "nearest_mode": "simple",
            }
            return params, tuple(range(rank)), "stretch"
        coordinate = str(node.attr("coordinate_transformation_mode", "half_pixel"))
        if coordinate not in _COORDINATE_MODES:
            raise node.fail(f"coordinate_transformation_mode {coordinate!r} is not one of Resize's")
        nearest = str(node.attr("nearest_mode", "round_prefer_floor"))
        if nearest not in _NEAREST_MODES:
            raise node.fail(f"nearest_mode {nearest!r} is not one of {', '.join(_NEAREST_MODES)}")
        floor_like = nearest in ("round_prefer_floor", "floor")
        if coordinate == "tf_half_pixel_for_nn" and (mode != "nearest" or not floor_like):
            raise node.unsupported(
                f"coordinate_transformation_mode tf_half_pixel_for_nn is supported with nearest_mode "
                f"round_prefer_floor or floor only, not mode {mode} with nearest_mode {nearest}"
            )
        params = {"mode": mode, "coordinate_mode": coordinate, "nearest_mode": nearest}
        if int_attr(node, "antialias", 0, (0, 1)) and mode != "nearest":
            params["antialias"] = 1
        if mode == "cubic":
            coeff = float_attr(node, "cubic_coeff_a", -0.75)
            if not math.isfinite(coeff):
                # A NaN or infinite coefficient makes every cubic weight NaN: a model error, not a number.
                raise node.fail(f"cubic_coeff_a must be finite, got {coeff}")
            params["cubic_coeff_a"] = coeff
            params["exclude_outside"] = int_attr(node, "exclude_outside", 0, (0, 1))
        if coordinate == "tf_crop_and_resize":
            params["extrapolation_value"] = float(node.attr("extrapolation_value", 0.0))
        axes = tuple(range(rank))
        if node.attr("axes") is not None:
            axes = tuple(int(a) + rank if int(a) < 0 else int(a) for a in node.attr("axes"))
            if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
                raise node.fail(f"axes {node.attr('axes')} are not distinct axes of a rank-{rank} input")
        policy = str(node.attr("keep_aspect_ratio_policy", "stretch"))
        if policy not in ("stretch", "not_larger", "not_smaller"):
            raise node.fail(f"keep_aspect_ratio_policy {policy!r} is not stretch, not_larger or not_smaller")
        return params, axes, policy

    def settle(
        self,
        node: NodeInfo,
        dims: tuple[Poly, ...],
        roi: np.ndarray | None,
        scales: np.ndarray | None,
        sizes: np.ndarray | None,
    ) -> ResizeParams:
        """The `kernel.resize` parameters: mode, mapping, output `sizes` and per-axis `scales`, from
        the values of roi, scales and sizes the build knows (the geometry is the run-time kernel's,
        `resize_geometry`).  Over X's symbolic extents (scales known: `symbolic_plan`) an output
        extent is floor(extent * scale), a derived symbol (`scaled`)."""
        params, axes, policy = self.attrs(node, len(dims))
        # A symbolic extent stands in as a length no scale empties; `scaled` gives its output extent.
        shape = tuple(d.const_value if d.is_const else _CHECKED_LENGTH for d in dims)
        if node.op_type == "Upsample" and node.since < 7:
            scales = np.array([1, 1, node.attr("height_scale", 1.0), node.attr("width_scale", 1.0)], dtype=np.float32)
        elif node.op_type == "Upsample" and node.since < 9:
            scales = np.asarray(node.attr("scales", []), dtype=np.float32)
        crop = params["coordinate_mode"] == "tf_crop_and_resize"
        try:
            full_scales, out, full_roi = resize_geometry(shape, axes, roi, scales, sizes, policy, crop)
        except DataError as err:  # known values Resize defines no result for
            raise node.fail(str(err)) from None
        params["scales"] = full_scales
        params["sizes"] = tuple(
            n if d.is_const else self.scaled(node, k, d, full_scales[k])
            for k, (d, n) in enumerate(zip(dims, out, strict=True))
        )
        if crop:
            params["roi"] = full_roi
        return params

    @staticmethod
    def scaled(node: NodeInfo, axis: int, extent: Poly, scale: float) -> Poly:
        """The output extent `scale` gives X's symbolic `extent` on `axis`: floor(extent * p / q), the
        ratio the scale spells, which the inputs owe to be at least 1 and within the lengths where it is
        onnxruntime's f32 product."""
        if scale == 1:
            return extent
        ratio = scale_ratio(float(scale))
        if ratio is None:
            raise node.unsupported(
                f"scale {scale} on axis {axis} of X ({extent}) is no ratio p / q with q <= {_MAX_DENOMINATOR}; "
                "the output extent over a symbolic one needs such a ratio (fix the extent with the `dims` option)"
            )
        p, q, longest = ratio
        owed.owe(Poly.const(longest) - extent, node, f"scale {scale} is {p}/{q} for axis {axis} of X up to {longest}")
        out = derived.floordiv(extent * p, q)
        owed.owe(out - 1, node, f"scale {scale} leaves axis {axis} of X ({extent}) at least 1")
        return out

    def _operands(self, node: NodeInfo, items: Sequence[_T]) -> tuple[_T | None, _T | None, _T | None]:
        """(roi, scales, sizes) among the inputs after X, by opset."""
        rest: list[_T | None] = list(items[1:])
        if node.op_type == "Upsample" or node.since < 11:
            return None, (rest[0] if rest else None), None
        rest += [None] * (3 - len(rest))
        return rest[0], rest[1], rest[2]

    def plan(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[bool, tuple[bool, bool, bool]]:
        """Whether the run settles the geometry (`kernel.resize_to`: an operand it reads is known only
        at run time, or X has symbolic extents), and which of roi, scales and sizes it reads: scales or
        sizes when given with values (an empty one counts as absent), roi for tf_crop_and_resize.
        Their lengths must be known and match the axes resized."""
        x = inputs[0]
        assert x is not None
        params, axes, _ = self.attrs(node, x.rank)
        crop = params["coordinate_mode"] == "tf_crop_and_resize"
        roi, scales, sizes = self._operands(node, inputs)
        used: list[Facts | None] = []
        for f, what in ((roi if crop else None, "roi"), (scales, "scales"), (sizes, "sizes")):
            if f is None:
                used.append(None)
                continue
            if f.value is not None:
                count = int(np.size(f.value))
            elif f.rank == 1 and f.shape[0].is_const:
                count = f.shape[0].const_value
            else:
                raise node.unsupported(
                    f"{what} has extents [{', '.join(map(str, f.shape))}]; Loam needs it 1-D with its length known "
                    "at build time (the length sets how many axes it resizes)"
                )
            if count == 0 and what != "roi":
                used.append(None)
                continue
            want = 2 * len(axes) if what == "roi" else len(axes)
            if count != want:
                per = "a start and an end per resized axis" if what == "roi" else "one value per resized axis"
                raise node.fail(f"{what} has {count} values; it takes {per}, {want} for the {len(axes)} axes")
            used.append(f)
        if used[1] is not None and used[2] is not None:
            raise node.fail("takes scales or sizes, not both")
        if node.op_type == "Upsample" and node.since < 9:
            return False, (False, False, False)
        # Over X's symbolic extents known scales derive the output extents (`scaled`); sizes meet the
        # extents at run time (`kernel.resize_to`), where the ratios they give are computed.
        runtime = any(f is not None and (f.value is None or is_symbolic(f)) for f in used) or (
            x.static_shape() is None and used[2] is not None
        )
        return runtime, (used[0] is not None, used[1] is not None, used[2] is not None)

    # -- the three questions -----------------------------------------------------------------------

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        legacy = node.op_type == "Upsample" or node.since < 11
        if node.op_type == "Upsample" and node.since < 9:
            require_arity(node, inputs, 1)
        elif legacy:
            require_arity(node, inputs, 2)
        else:
            require_arity(node, inputs, 1, 4)
        x = inputs[0]
        if x is None:
            raise node.fail("X must be given")
        params, axes, _ = self.attrs(node, x.rank)
        allowed = _ALL_TYPES if params["mode"] == "nearest" else FLOATS
        if x.elem.name not in allowed:
            raise node.unsupported(
                f"element type {x.elem.name} is not supported with mode {params['mode']}; "
                f"Loam computes it in {', '.join(allowed)}"
            )
        runtime, _ = self.plan(node, inputs)
        if runtime:  # the run settles the extents of the axes resized: lengths only it knows
            given_scales = self._operands(node, inputs)[1]
            kept: set[int] = set()  # an axis a known scale of 1 leaves alone keeps its extent
            if given_scales is not None and given_scales.value is not None and np.size(given_scales.value) == len(axes):
                factors = np.asarray(given_scales.value, np.float32).reshape(-1)
                kept = {a for a, s in zip(axes, factors, strict=True) if s == 1}
            extents = tuple(
                node.result_length(0, k) if k in axes and k not in kept else d for k, d in enumerate(x.shape)
            )
            given_sizes = self._operands(node, inputs)[2]
            _, _, policy = self.attrs(node, x.rank)
            if policy == "stretch" and is_symbolic(given_sizes):
                # Sizes a Shape computes (ViT's position embeddings resized to the image's patch
                # grid): with the stretch policy each resized axis is its size, as a polynomial.
                assert given_sizes is not None and given_sizes.value is not None
                by_axis = dict(zip(axes, polys_of(given_sizes.value).reshape(-1).tolist(), strict=True))
                extents = tuple(by_axis.get(k, d) for k, d in enumerate(x.shape))
            return [Facts(x.elem, extents)]
        roi, scales, sizes = (f.value if isinstance(f, Facts) else None for f in self._operands(node, inputs))
        params = self.settle(node, x.shape, roi, scales, sizes)
        value = None
        if x.value is not None:
            value = kernel_resize(np.asarray(x.value), **params)
        return [Facts(x.elem, tuple(Poly.lift(d) for d in params["sizes"]), value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x = inputs[0]
        assert x is not None
        # Resize may resize any axis (N and C too), so every axis is compared.
        return [keep_unchanged(x, outputs[0])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import ResizeOp, ResizeToOp

        x = operands[0]
        assert x is not None
        facts = operand_facts(operands)
        runtime, reads = self.plan(node, facts)
        if runtime:
            params, axes, policy = self.attrs(node, len(axes_type(x).axes))
            given = [v if read else None for v, read in zip(self._operands(node, operands), reads, strict=True)]
            op = ResizeToOp(
                [x, *(v for v in given if v is not None)],
                ctx.result_types[:1],
                node.name,
                axes=axes,
                keep_aspect_ratio_policy=policy,
                present=present_bits(given),
                **params,
            )
            return emit_library(ctx, op)
        roi, scales, sizes = (None if f is None else f.value for f in self._operands(node, facts))
        params = self.settle(node, axes_type(x).shape, roi, scales, sizes)
        return emit_library(ctx, ResizeOp([x], ctx.result_types[:1], node.name, **params))


# GridSample's modes by the opset that spells them, as the kernel names them.
_GRID_MODES: dict[int, dict[str, str]] = {
    16: {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"},
    20: {"linear": "linear", "nearest": "nearest", "cubic": "cubic"},
}
_PADDING_MODES = ("zeros", "border", "reflection")


class GridSampleRule(OpRule):
    """ONNX GridSample (opsets 16-22): X (N, C, *S) read at grid (N, *O, r), positions normalised to
    [-1, 1] in reverse axis order; the output (N, C, *O) takes X's N and C and the grid's points."""

    op_types = ("GridSample",)
    kernels: tuple[str, ...] = ("kernel.grid_sample",)
    attributes = frozenset({"mode", "padding_mode", "align_corners"})
    elem_types = FLOATS
    first_opset = 16
    limitations = (
        "2-D and 3-D spatial inputs only (X of rank 4 or 5), and mode cubic in 2-D only, as onnxruntime "
        "computes them; X and grid in floats"
    )

    def params(self, node: NodeInfo, rank: int) -> GridSampleParams:
        """The `kernel.grid_sample` parameters, from the attributes and X's rank."""
        spelled = _GRID_MODES[20 if node.since >= 20 else 16]
        default = "linear" if node.since >= 20 else "bilinear"
        mode = str(node.attr("mode", default))
        if mode not in spelled:
            raise node.fail(f"mode {mode!r} is not defined at opset {node.since} (it takes {', '.join(spelled)})")
        padding = str(node.attr("padding_mode", "zeros"))
        if padding not in _PADDING_MODES:
            raise node.fail(f"padding_mode {padding!r} is not one of {', '.join(_PADDING_MODES)}")
        align = int_attr(node, "align_corners", 0, (0, 1))
        if node.since < 20 and rank != 4:
            raise node.fail(f"X has rank {rank}; GridSample {node.since} takes a 4-D X (N, C, H, W), opset 20 on N-D")
        if rank not in (4, 5):
            raise node.unsupported(
                f"X has rank {rank}: Loam samples 2-D and 3-D spatial inputs (X of rank 4 or 5), as onnxruntime does"
            )
        if spelled[mode] == "cubic" and rank == 5:
            raise node.unsupported(
                f"mode {mode} on a 3-D spatial input (X of rank 5) is not supported; "
                "onnxruntime computes cubic in 2-D only"
            )
        return {"mode": spelled[mode], "padding_mode": padding, "align_corners": align}

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2)
        x, grid = given(node, inputs, 0, "X"), given(node, inputs, 1, "grid")
        require_elem(node, x, FLOATS, "X")
        require_elem(node, grid, FLOATS, "grid")
        if x.rank < 3:
            raise node.fail(f"X has rank {x.rank}; GridSample takes X (N, C, *spatial)")
        params = self.params(node, x.rank)
        spatial = x.rank - 2
        if grid.rank != x.rank:
            raise node.fail(f"grid has rank {grid.rank}; X of rank {x.rank} takes a grid (N, *out, {spatial})")
        for what, have, want in (
            (f"grid's last axis (one position per spatial axis of X, {spatial})", grid.shape[-1], Poly.const(spatial)),
            ("the batch (axis 0) of X and grid", grid.shape[0], x.shape[0]),
        ):
            if have.is_const and want.is_const and have != want:
                raise node.fail(f"{what}: {have} against {want}")
            if have != want:
                owed.require_equal(have, want, node, what)
        try:
            value = fold_if_known(inputs, lambda xv, gv: kernel_grid_sample(xv, gv, **params))
        except DataError as err:  # known values the operator defines no result for
            raise node.fail(str(err)) from None
        return [Facts(x.elem, (x.shape[0], x.shape[1], *grid.shape[1:-1]), value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        x, grid = inputs[0], inputs[1]
        assert x is not None and grid is not None
        same_axis(node, x[0], grid[0], "as the batch of X and grid")
        return [(x[0], x[1], *grid[1:-1])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import GridSampleOp

        x, grid = operands
        assert x is not None and grid is not None
        params = self.params(node, len(axes_type(x).axes))
        return emit_library(ctx, GridSampleOp([x, grid], ctx.result_types[:1], node.name, **params))


class AffineGridRule(OpRule):
    """ONNX AffineGrid (opset 20): theta (N, 2, 3) or (N, 3, 4) applied to the normalised positions
    of an output of extents `size` (N, C, H, W) or (N, C, D, H, W), giving the grid (N, H, W, 2) or
    (N, D, H, W, 3) GridSample reads.  `size` fixes the grid's extents: where only the run gives it,
    they are lengths only the run knows (its checks then run in the kernel)."""

    op_types = ("AffineGrid",)
    kernels: tuple[str, ...] = ("kernel.affine_grid",)
    attributes = frozenset({"align_corners"})
    elem_types = FLOATS
    first_opset = 20
    limitations = (
        "size known at build time must be numbers but for its batch (which may be an extent a Shape gives); "
        "with align_corners 1 every spatial extent must exceed 1 (ONNX divides by extent - 1, and its "
        "reference and onnxruntime disagree there)"
    )

    def geometry(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[Poly, tuple[int, ...]]:
        """The size input's batch (a number, or an extent a Shape gave) and the output's spatial
        extents (numbers), checked against theta."""
        theta = given(node, inputs, 0, "theta")
        size = known_extents(node, given(node, inputs, 1, "size"), "size", ("i64",))
        if len(size) not in (4, 5):
            raise node.fail(f"size holds {len(size)} values; AffineGrid takes (N, C, H, W) or (N, C, D, H, W)")
        if not all(d.is_const for d in size[2:]):
            raise node.unsupported(
                f"the size input's spatial extents [{', '.join(map(str, size[2:]))}] must be numbers "
                "(fix symbolic ones with the `dims` option)"
            )
        spatial = tuple(d.const_value for d in size[2:])
        r = len(spatial)
        if theta.rank != 3 or theta.shape[1:] != (Poly.const(r), Poly.const(r + 1)):
            raise node.fail(
                f"theta has extents [{', '.join(map(str, theta.shape))}]; a size of {len(size)} values "
                f"takes theta (N, {r}, {r + 1})"
            )
        if any(n < 0 for n in spatial):
            raise node.fail(f"size [{', '.join(map(str, size))}] holds a negative extent")
        if int_attr(node, "align_corners", 0, (0, 1)) and any(n == 1 for n in spatial):
            raise node.unsupported(
                f"align_corners 1 with a spatial extent of 1 (size [{', '.join(map(str, size))}]): ONNX's "
                "definition divides by extent - 1 there, and its reference evaluator (-1) and onnxruntime (1) disagree"
            )
        batch = size[0]
        if batch.is_const and theta.shape[0].is_const and theta.shape[0] != batch:
            raise node.fail(f"size's batch {batch} is not theta's {theta.shape[0]}")
        return batch, spatial

    def run_time_rank(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> int | None:
        """The count of spatial axes where the run gives size (None where the build knows it)."""
        size = given(node, inputs, 1, "size")
        if not from_run(size):
            return None
        count = run_time_length(node, size, "size", ("i64",))
        theta = given(node, inputs, 0, "theta")
        if count not in (4, 5) or theta.rank != 3 or theta.shape[1:] != (Poly.const(count - 2), Poly.const(count - 1)):
            raise node.fail(
                f"size holds {count} values and theta has extents [{', '.join(map(str, theta.shape))}]; AffineGrid "
                "takes size (N, C, H, W) with theta (N, 2, 3), or (N, C, D, H, W) with theta (N, 3, 4)"
            )
        return count - 2

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2)
        theta = given(node, inputs, 0, "theta")
        require_elem(node, theta, FLOATS, "theta")
        r = self.run_time_rank(node, inputs)
        if r is not None:  # the spatial extents are lengths only the run knows
            lengths = tuple(node.result_length(0, k) for k in range(1, r + 1))
            return [Facts(theta.elem, (theta.shape[0], *lengths, Poly.const(r)))]
        batch, spatial = self.geometry(node, inputs)
        if theta.shape[0] != batch:
            owed.require_equal(theta.shape[0], batch, node, "the batch of theta and size")
        align = int_attr(node, "align_corners", 0, (0, 1))
        value = None
        if theta.value is not None:
            value = kernel_affine_grid(np.asarray(theta.value), sizes=spatial, align_corners=align)
        dims = (theta.shape[0], *(Poly.const(n) for n in spatial), Poly.const(len(spatial)))
        return [Facts(theta.elem, dims, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        theta = inputs[0]
        assert theta is not None
        # The grid's last axis holds one coordinate per row of theta; its spatial axes are new.
        return [(theta[0], *([None] * (outputs[0].rank - 2)), theta[1])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import AffineGridOp

        theta = operands[0]
        assert theta is not None
        align = int_attr(node, "align_corners", 0, (0, 1))
        if self.run_time_rank(node, operand_facts(operands)) is not None:
            present = [v for v in operands[:2] if v is not None]  # theta and size: infer requires both
            op = AffineGridOp(present, ctx.result_types[:1], node.name, align_corners=align)
            return emit_library(ctx, op)
        spatial = tuple(d.const_value for d in ctx.result_types[0].shape[1:-1])
        op = AffineGridOp([theta], ctx.result_types[:1], node.name, sizes=spatial, align_corners=align)
        return emit_library(ctx, op)


RULES: tuple[OpRule, ...] = (ResizeRule(), GridSampleRule(), AffineGridRule())
