"""A `TileProgram` printed as one numpy function: every program of the grid at once.

The grid becomes a leading axis: a value of tile shape S is an array [programs, *S] (S padded with
leading 1s to the program's largest tile rank, so numpy's broadcasting is the tile program's), a
scalar one of 1s after the program axis.  `program A` is the program's coordinate along grid axis A
(axis 0 varying fastest), params and loop variables are alike in every program (the program axis
is 1), a reduction reduces every tile axis, `dot` is numpy's batched matmul over the program axis.
Loads read the operands' flat elements at the indices where the mask holds (others there); stores
write the results' flat elements where it holds.  A tile program's loop is a Python loop (its trip
count is the same for every program); no Python loop runs over elements or programs.  The function
is the oracle the WGSL form of the same program is tested against.
"""

from __future__ import annotations

from loam.backends.module_text import dtype_source
from loam.backends.numpy_kernel_printer import expr_dtype, step_source
from loam.dialects.expr import Binary, Expr, Operand, Unary
from loam.dialects.tile_program import (
    Carry,
    Dot,
    End,
    Fill,
    Iota,
    Load,
    Loop,
    Map,
    Param,
    ProgramId,
    Reduce,
    Shape,
    Store,
    TileProgram,
    broadcast,
)
from loam.runtime.kernels.elementwise import BINARY_SOURCE, UNARY_SOURCE


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
    """`def NAME(grid, params, *tensors)`: the program over `grid` (the program count, or one
    count per grid axis); `tensors` are the operands then the (preallocated, contiguous) results,
    written in place.  Also the runtime pieces its expressions call (`_div`, ...), which the module
    must declare."""
    shapes = program.shapes()
    elems = program.elems()
    rank = max((len(s) for s in shapes if s), default=1)

    def full(shape: Shape | None) -> str:
        """The array shape of a value of tile shape `shape` in every program."""
        assert shape is not None
        padded = (1,) * (rank - len(shape)) + shape
        return f"(count, {', '.join(map(str, padded))})"

    ones = "(" + ", ".join(["1"] * (rank + 1)) + ")"
    body = [
        "sizes = tuple(grid) if isinstance(grid, tuple) else (grid,)",
        "count = int(np.prod(sizes, dtype=np.int64))",
        "ids = np.arange(count, dtype=np.int64)",
        "flat = [np.asarray(t).reshape(-1) for t in tensors]  # operands, then results (views)",
    ]
    pieces: set[str] = set()
    indent = ""
    for i, step in enumerate(program.steps):
        v = f"t{i}"
        lines: list[str] = []
        if isinstance(step, ProgramId):
            lines.append(
                f"{v} = ((ids // int(np.prod(sizes[:{step.axis}], dtype=np.int64))) % sizes[{step.axis}])"
                f".astype(np.int32).reshape(count, {', '.join(['1'] * rank)})  # {step}"
            )
        elif isinstance(step, Param):
            lines.append(f"{v} = np.full({ones}, params[{step.index}], dtype=np.int32)  # {step}")
        elif isinstance(step, Iota):
            shape = shapes[i]
            assert shape
            padded = [1] * rank
            padded[rank - len(shape) + step.axis] = shape[step.axis]
            layout = ", ".join(map(str, padded))
            lines.append(f"{v} = np.arange({shape[step.axis]}, dtype=np.int32).reshape(1, {layout})  # {step}")
        elif isinstance(step, Fill):
            dtype = dtype_source(expr_dtype(step.elem))
            shape = (1,) * (rank - len(step.shape)) + step.shape
            lines.append(f"{v} = np.full((1, {', '.join(map(str, shape))}), {step.value!r}, dtype={dtype})  # {step}")
        elif isinstance(step, Load):
            dtype = dtype_source(expr_dtype(step.elem))
            lines += [
                f"mask = np.broadcast_to(t{step.mask}, {full(shapes[i])})  # {step}",
                f"safe = np.where(mask, np.broadcast_to(t{step.index}, {full(shapes[i])}), 0)",
                f"{v} = np.where(mask, flat[{step.tensor}][safe], {dtype}({step.other!r})).astype({dtype})",
            ]
        elif isinstance(step, Map):
            expr_lines, last = _expr(step.expr, [f"t{a}" for a in step.args], v)
            lines += [f"{line}  # {step}" if k == 0 else line for k, line in enumerate(expr_lines)]
            lines.append(f"{v} = np.asarray({last})")
            for s in step.expr.steps:
                source = UNARY_SOURCE.get(getattr(s, "op", ""), "") if isinstance(s, Unary) else ""
                source = BINARY_SOURCE.get(s.op, "") if isinstance(s, Binary) else source
                if source.startswith("_"):
                    pieces.add(source)
        elif isinstance(step, Reduce):
            fn = {"sum": "np.add", "max": "np.maximum", "min": "np.minimum"}[step.kind]
            axes = tuple(range(1, rank + 1))
            lines.append(f"{v} = {fn}.reduce(t{step.arg}, axis={axes}, keepdims=True)  # {step}")
        elif isinstance(step, Dot):
            lines.append(f"{v} = np.matmul(t{step.lhs}, t{step.rhs}, dtype=np.float32)  # {step}")
        elif isinstance(step, Loop):
            for c in program.carries(i):
                carry = program.steps[c]
                assert isinstance(carry, Carry)
                lines.append(f"t{c} = t{carry.init}  # {carry}")
            lines.append(f"for k{i} in range(0, int(t{step.stop}.reshape(-1)[0]), {step.step}):  # {step}")
            body += [indent + line for line in lines]
            indent += "    "
            lines = [f"{v} = np.full({ones}, k{i}, dtype=np.int32)"]
        elif isinstance(step, Carry):
            continue  # named before the loop
        elif isinstance(step, End):
            loop = program.loop_of(i)
            assert loop is not None
            carried = program.carries(loop)
            if carried:
                targets = "".join(f"t{c}, " for c in carried)
                values = "".join(f"t{a}, " for a in step.values)
                lines.append(f"{targets.rstrip(', ')}, = {values.rstrip(', ')},  # {step}")
            else:
                lines.append(f"pass  # {step}")
            body += [indent + line for line in lines]
            indent = indent[:-4]
            continue
        else:
            assert isinstance(step, Store)
            value = dtype_source(expr_dtype(elems[step.value]))
            stored = broadcast(*(shapes[r] for r in (step.index, step.value, step.mask)))  # type: ignore[arg-type]  # values: each has a shape
            extents = full(stored)
            lines += [
                f"mask = np.broadcast_to(t{step.mask}, {extents})  # {step}",
                f"where = np.broadcast_to(t{step.index}, {extents})[mask]",
                f"flat[{program.operands + step.result}][where] = "
                f"np.broadcast_to(t{step.value}, {extents})[mask].astype({value})",
            ]
        body += [indent + line for line in lines]
    head = [
        f"def {name}(grid: int | tuple[int, ...], params: tuple[int, ...], *tensors: np.ndarray) -> None:",
        f'    """The tile program {program} over the programs of `grid` at once."""',
    ]
    return "\n".join([*head, *(f"    {line}" for line in body)]) + "\n", pieces
