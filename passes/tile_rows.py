"""tile-rows: row softmaxes and layer normalisations become tile programs.

Why: a row kernel is easiest to state as a tile program (one program per row: load the row, reduce,
store), and a tile program is written once (`loam.dialects.tile_program`) and printed both to WGSL
and to numpy, so the numpy form is the oracle for the device's.  The WGSL pipeline runs this pass
after `fuse`; `loam-opt -p tile-rows` runs it on any kernel IR.

Rewritten into `kernel.tile_program` (`softmax_rows`, `layernorm_rows`):
- `kernel.softmax` of kind softmax over the last axis of an f32 tensor;
- `kernel.normalize` over the last axis with numpy-style scale and bias of that axis's extent
  (LayerNormalization), f32, statistics in f32 and not returned;
where the row length is at most `max_tile` for every input (a symbolic length needs a bound: the
tile size is the smallest power of two, at least 64, holding the longest row).  Anything else is
left to its library kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from loam.core.poly import Poly
from loam.dialects.kernel import NormalizeOp, SoftmaxOp, TileProgramOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.dialects.tile_program import TileProgram
from loam.passes.tile_kernels import layernorm_rows, softmax_rows
from loam.passes.tile_strides import longest


def _type(value: object) -> AxesTensorType | None:
    t = getattr(value, "type", None)
    return t if isinstance(t, AxesTensorType) else None


def _tile_for(length: Poly, max_tile: int) -> int | None:
    """The tile size for rows of `length` elements, or None when some input could exceed `max_tile`."""
    most = longest(length)
    if most > max_tile:
        return None
    tile = 64
    while tile < most:
        tile *= 2
    return tile


def _rows(op: Operation, max_tile: int) -> tuple[TileProgram, Poly, Poly] | None:
    """The tile program computing `op` row by row, the grid and the row length; None to keep it."""
    x, y = _type(op.operands[0]), _type(op.results[0])
    if x is None or y is None or not x.shape or x.elem.name != "f32" or y.elem.name != "f32":
        return None
    last = x.rank - 1
    length = x.shape[-1]
    grid = Poly.lift(1)
    for e in x.shape[:-1]:
        grid = grid * e
    tile = _tile_for(length, max_tile)
    if tile is None:
        return None
    if isinstance(op, SoftmaxOp):
        if op.param("kind") != "softmax" or tuple(op.param("axes")) != (last,):
            return None
        return softmax_rows(tile), grid, length
    if isinstance(op, NormalizeOp):
        p = op.params
        simple = tuple(op.param("axes")) == (last,) and p["channel_axis"] == -1 and p["stash"] == "float32"
        affine = [_type(v) for v in op.operands[1:]]
        if not simple or p["stats"] or len(affine) != 2:
            return None
        if any(t is None or t.elem.name != "f32" or tuple(t.shape) != (length,) for t in affine):
            return None
        return layernorm_rows(tile, float(op.param("epsilon"))), grid, length
    return None


def tile_rows(module: ModuleOp, max_tile: int = 1024) -> int:
    """Rewrite every eligible row kernel of `module`; the number rewritten."""
    count = 0
    for op in list(module.walk()):
        if not isinstance(op, (SoftmaxOp, NormalizeOp)):
            continue
        found = _rows(op, max_tile)
        if found is None:
            continue
        program, grid, length = found
        numbers = (length.const_value if length.is_const else length,)
        tiled = TileProgramOp(
            list(op.operands), [op.results[0].type], op.node.data, program,
            grid.const_value if grid.is_const else grid, numbers,
        )  # fmt: skip
        tiled.attributes.update({k: v for k, v in op.attributes.items() if k not in op.PARAMS})
        Rewriter.replace_op(op, tiled)
        count += 1
    return count


@dataclass(frozen=True)
class TileRowsPass(ModulePass):
    """Run row softmaxes and layer normalisations as tile programs."""

    name = "tile-rows"

    max_tile: int = 1024
    """The longest row a tile program takes (longer or unbounded rows keep their library kernel)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        tile_rows(op, self.max_tile)
