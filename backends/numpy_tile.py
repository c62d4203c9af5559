"""A `TileProgram` printed as one numpy function: every program of the grid at once.

The grid becomes a leading axis: `program` is a column of program indices, `iota` a row of tile
offsets, so a tile value is a [grid, B] array and a scalar a [grid, 1] one; a reduction reduces the
tile axis.  Loads read the operands' flat elements at the indices where the mask holds (others
there); stores write the results' flat elements where it holds.  No Python loop runs over elements
or programs.  The function is the oracle the WGSL form of the same program is tested against.
"""

from __future__ import annotations

from loam.backends.numpy_kernels.elementwise import BINARY_SOURCE, UNARY_SOURCE
from loam.backends.numpy_module import _dtype_source, _expr_dtype, step_source
from loam.dialects.expr import Binary, Expr, Operand, Unary
from loam.dialects.tile_program import Iota, Load, Map, Param, ProgramId, Reduce, Store, TileProgram


def _expr(expr: Expr, args: list[str], name: str) -> tuple[list[str], str]:
    """numpy lines computing `expr` over the arrays named `args`; the result's name."""
    lines: list[str] = []
    refs: list[str] = []
    for i, step in enumerate(expr.steps):
        if isinstance(step, Operand):
            refs.append(args[step.index])
            continue
        lines.append(f"{name}_{i} = {step_source(step, refs)}")
        refs.append(f"{name}_{i}")
    return lines, refs[-1]


def tile_function_source(name: str, program: TileProgram) -> str:
    """`tile_function`'s source with the runtime pieces it calls declared before it (standalone)."""
    from loam.backends import numpy_runtime

    source, pieces = tile_function(name, program)
    declared = [numpy_runtime.source_of(p) for p in numpy_runtime.pieces_for(pieces)]
    return "\n\n".join([*declared, source])


def tile_function(name: str, program: TileProgram) -> tuple[str, set[str]]:
    """`def NAME(grid, params, *tensors)`: the program over `grid` programs; `tensors` are the
    operands then the (preallocated, contiguous) results, written in place.  Also the runtime
    pieces its expressions call (`_div`, ...), which the module must declare."""
    elems = program.elems()
    shape = f"(grid, {program.tile})"
    body = [
        "flat = [np.asarray(t).reshape(-1) for t in tensors]  # operands, then results (views)",
    ]
    pieces: set[str] = set()
    for i, step in enumerate(program.steps):
        v = f"t{i}"
        if isinstance(step, ProgramId):
            body.append(f"{v} = np.arange(grid, dtype=np.int32)[:, None]  # {step}")
        elif isinstance(step, Param):
            body.append(f"{v} = np.full((grid, 1), params[{step.index}], dtype=np.int32)  # {step}")
        elif isinstance(step, Iota):
            body.append(f"{v} = np.arange({program.tile}, dtype=np.int32)[None, :]  # {step}")
        elif isinstance(step, Load):
            dtype = _dtype_source(_expr_dtype(step.elem))
            body += [
                f"mask = np.broadcast_to(t{step.mask}, {shape})  # {step}",
                f"safe = np.where(mask, np.broadcast_to(t{step.index}, {shape}), 0)",
                f"{v} = np.where(mask, flat[{step.tensor}][safe], {dtype}({step.other!r})).astype({dtype})",
            ]
        elif isinstance(step, Map):
            lines, last = _expr(step.expr, [f"t{a}" for a in step.args], v)
            body += [f"{line}  # {step}" if k == 0 else line for k, line in enumerate(lines)]
            body.append(f"{v} = np.asarray({last})")
            for s in step.expr.steps:
                source = UNARY_SOURCE.get(getattr(s, "op", ""), "") if isinstance(s, Unary) else ""
                source = BINARY_SOURCE.get(s.op, "") if isinstance(s, Binary) else source
                if source.startswith("_"):
                    pieces.add(source)
        elif isinstance(step, Reduce):
            fn = {"sum": "np.add", "max": "np.maximum", "min": "np.minimum"}[step.kind]
            body.append(f"{v} = {fn}.reduce(t{step.arg}, axis=-1, keepdims=True)  # {step}")
        else:
            assert isinstance(step, Store)
            value = _dtype_source(_expr_dtype(elems[step.value]))
            body += [
                f"mask = np.broadcast_to(t{step.mask}, {shape})  # {step}",
                f"where = np.broadcast_to(t{step.index}, {shape})[mask]",
                f"flat[{program.operands + step.result}][where] = "
                f"np.broadcast_to(t{step.value}, {shape})[mask].astype({value})",
            ]
    head = [
        f"def {name}(grid: int, params: tuple[int, ...], *tensors: np.ndarray) -> None:",
        f'    """The tile program {program} over `grid` programs at once."""',
    ]
    return "\n".join([*head, *(f"    {line}" for line in body)]) + "\n", pieces
