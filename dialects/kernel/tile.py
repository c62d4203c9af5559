"""`kernel.tile_program`: a kernel written as a tile program (`loam.dialects.tile_program`), run over
a launch grid.

A library op in its syntax (the grid and the run-time numbers are parameters), but what it computes
is the program it carries, not a backend's library function.  The WGSL pipeline's `tile-rows` and
`tile-matmul` passes write it, with programs from `loam.passes.tile_kernels`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import irdl_op_definition, prop_def
from xdsl.utils.exceptions import VerifyException

from loam.core.poly import Poly
from loam.dialects.kernel.attributes import TileProgramAttr
from loam.dialects.kernel.library import LibraryOp
from loam.dialects.tile_program import TileProgram


@irdl_op_definition
class TileProgramOp(LibraryOp):
    """A kernel written as a tile program (`program`), run over a launch `grid` (the program count
    along one axis, or a tuple of one to three counts, one per axis) with the run-time `numbers` it
    reads as `param K`.  Its operands are the tensors it loads, its results those it stores
    (row-major, contiguous; every element is stored).  A `fused` list, when present, names the ONNX
    nodes of the fused product this op took over (kept for the build report).

    Example: `%y = kernel.tile_program(%x) {node = "sm", grid = #shape_poly.extent<4*N>,
    numbers = [#shape_poly.extent<64>], program = #kernel.tile_program<tile 64, [...]>} : (X) -> Y`
    """

    name = "kernel.tile_program"
    PARAMS: ClassVar[dict[str, type]] = {"grid": int, "numbers": tuple}

    program = prop_def(TileProgramAttr)

    def __init__(
        self,
        inputs: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
        node: str,
        program: TileProgram,
        grid: int | Poly | tuple[int | Poly, ...],
        numbers: tuple[int | Poly, ...],
    ) -> None:
        super().__init__(inputs, result_types, node, grid=grid, numbers=numbers)
        self.properties["program"] = TileProgramAttr(program)

    def verify_(self) -> None:
        # A library op's checks, but `grid` may be a tuple and a `fused` list may come along.
        where = f"{self.name} '{self.node.data}'"
        for key, attr in self.attributes.items():
            if key == "fused":
                if not (isinstance(attr, ArrayAttr) and all(isinstance(m, StringAttr) for m in attr.data)):
                    raise VerifyException(f"{where}: fused must list ONNX node names")
            elif key not in self.PARAMS:
                raise VerifyException(f"{where}: unknown parameter '{key}'")
        for key in self.PARAMS:
            if key not in self.attributes:
                raise VerifyException(f"{where}: missing parameter '{key}'")
        grid, numbers = self.param("grid"), self.param("numbers")
        axes = grid if isinstance(grid, tuple) else (grid,)
        if not isinstance(numbers, tuple) or not 1 <= len(axes) <= 3 or any(isinstance(e, float) for e in axes):
            raise VerifyException(f"{where}: grid must be one to three extents and numbers a list of them")
        rank = self.program.data.grid_rank
        if len(axes) < rank:
            raise VerifyException(f"{where}: the program reads {rank} grid axes, the grid has {len(axes)}")
        self.verify_kernel()

    def verify_kernel(self) -> None:
        program = self.program.data
        if program.operands != len(self.inputs) or program.results != len(self.outputs):
            raise VerifyException(
                f"kernel.tile_program '{self.node.data}': the program loads {program.operands} operands and "
                f"stores {program.results} results; the op has {len(self.inputs)} and {len(self.outputs)}"
            )
