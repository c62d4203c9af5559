"""A `TileProgram` printed as one WGSL shader: a workgroup per program.

The workgroup's 64 invocations share each tile: invocation `lid` holds elements lid, lid + 64, ...
(row-major positions in the tile's own shape) in a private array, `ceil(size / 64)` elements; a
scalar is a value every invocation computes alike.  Lanes at or past a tile's size are off: they
load nothing, count in no reduction and store nothing.

A step reading a tile of its own shape (padded with leading 1s) reads the invocation's own
elements.  A step reading a smaller tile broadcast (an [BM, 1] column of row indices under a
[BM, BK] load) reads it from workgroup memory: such a tile is copied into a `var<workgroup>` array
once computed, between two barriers (the first so that no invocation still reads the previous
loop trip's copy).  `dot A B` copies both operands so (the cooperative load of a tiled product),
then each invocation sums its own elements of the [M, N] product over K from workgroup memory.  A
reduction folds each invocation's elements, then the workgroup's partial values through workgroup
memory, and every invocation reads the total.  A loop is a WGSL `for` every invocation runs alike
(its bound is a param), so its barriers stay in uniform control flow.

Params: the program count, the grid's extents along axes 0, 1 and 2 (1 where the grid has fewer),
then the program's own run-time numbers (`param K` is `params[4 + K]`).  A program's coordinates
come from its workgroup's index, axis 0 varying fastest.  Reductions run in f32 (the row kernels'
element type).
"""

from __future__ import annotations

from collections.abc import Callable

from loam.backends.wgsl_kernels.common import ENTRY, WORKGROUP, device_type, header
from loam.backends.wgsl_kernels.elementwise import HELPERS, expr_lines, literal
from loam.core.errors import UnsupportedError
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
    size_of,
)

GRID_PARAMS = 4
"""Params before the program's numbers: the program count and three grid extents."""


def _padded(shape: Shape, rank: int) -> Shape:
    return (1,) * (rank - len(shape)) + shape


def _strides(shape: Shape) -> list[int]:
    out = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        out[k] = out[k + 1] * shape[k + 1]
    return out


def _reader_shape(program: TileProgram, shapes: list[Shape | None], i: int) -> Shape | None:
    """The shape step `i` computes its elements over (None for a step reading no tile elementwise)."""
    step = program.steps[i]
    if isinstance(step, (Map, Load)):
        return shapes[i]
    if isinstance(step, Store):
        return broadcast(*(shapes[r] for r in (step.index, step.value, step.mask)))  # type: ignore[arg-type]  # values: each has a shape
    return None


def _elementwise_refs(step: object) -> tuple[int, ...]:
    if isinstance(step, Map):
        return step.args
    if isinstance(step, Load):
        return (step.index, step.mask)
    if isinstance(step, Store):
        return (step.index, step.value, step.mask)
    return ()


def _shared(program: TileProgram, shapes: list[Shape | None]) -> set[int]:
    """The tile steps some step reads from workgroup memory: dot operands, and tiles read broadcast."""
    found: set[int] = set()
    for i, step in enumerate(program.steps):
        if isinstance(step, Dot):
            found.update((step.lhs, step.rhs))
        reader = _reader_shape(program, shapes, i)
        if reader is None:
            continue
        for r in _elementwise_refs(step):
            own = shapes[r]
            if own and _padded(own, len(reader)) != reader:
                found.add(r)
    return found


def source_tile(program: TileProgram, operands: list[str], results: list[str]) -> str:
    """The shader of `program` over operands and results of the given Loam element types."""
    shapes = program.shapes()
    elems = program.elems()
    shared = _shared(program, shapes)
    lines = [
        "let prog = wid.y * nwg.x + wid.x;",
        "let live_prog = prog < params[0];",
    ]
    declarations = ""

    def size(i: int) -> int:
        shape = shapes[i]
        assert shape is not None
        return size_of(shape)

    def chunks(n: int) -> int:
        return -(-n // WORKGROUP)

    def lanes(n: int, inner: str) -> str:
        """A loop over the invocation's elements of an n-element tile: `p` the position, clamped."""
        return (
            f"for (var j: u32 = 0u; j < {chunks(n)}u; j = j + 1u) {{ let p = min(lid + {WORKGROUP}u * j, {n - 1}u); "
            + inner
            + " }"
        )

    def on(n: int) -> str:
        return f"lid + {WORKGROUP}u * j < {n}u"

    def at(a: int, reader: Shape) -> str:
        """Step `a`'s value at position `p` of a tile of shape `reader` (`j`: this invocation's element)."""
        own = shapes[a]
        assert own is not None
        if own == ():
            return f"t{a}"
        padded = _padded(own, len(reader))
        if padded == reader:
            return f"t{a}[j]"
        terms = []
        for axis, (extent, stride) in enumerate(zip(padded, _strides(padded), strict=True)):
            if extent != 1:
                whole = _strides(reader)[axis]
                terms.append(f"((p / {whole}u) % {reader[axis]}u) * {stride}u")
        return f"w{a}[{' + '.join(terms) or '0u'}]"

    def mask_on(m: int, reader: Shape) -> str:
        if device_type(elems[m]) != "u32":
            raise UnsupportedError(f"a tile program's mask is bool, not {elems[m]}")
        return f"{at(m, reader)} != 0u"

    def share(i: int) -> None:
        """Copy tile step `i` into workgroup memory, between barriers."""
        n = size(i)
        lines.extend(
            [
                "workgroupBarrier();",
                f"for (var j: u32 = 0u; j < {chunks(n)}u; j = j + 1u) {{ "
                f"if ({on(n)}) {{ w{i}[lid + {WORKGROUP}u * j] = t{i}[j]; }} }}",
                "workgroupBarrier();",
            ]
        )

    uses_reduce = False
    for i, step in enumerate(program.steps):
        dev = device_type(elems[i]) if elems[i] != "none" else ""
        shape = shapes[i]
        if i in shared:
            declarations += f"var<workgroup> w{i}: array<{dev}, {size(i)}>;\n"
        if isinstance(step, ProgramId):
            stride = {0: "1u", 1: "params[1]", 2: "(params[1] * params[2])"}[step.axis]
            lines.append(f"let t{i}: i32 = i32((prog / {stride}) % params[{1 + step.axis}]);")
        elif isinstance(step, Param):
            lines.append(f"let t{i}: i32 = param_i({GRID_PARAMS + step.index}u);")
        elif isinstance(step, Iota):
            assert shape
            n = size(i)
            axis_stride = _strides(shape)[step.axis]
            lines.append(f"var t{i}: array<i32, {chunks(n)}>;")
            lines.append(lanes(n, f"t{i}[j] = i32((p / {axis_stride}u) % {shape[step.axis]}u);"))
        elif isinstance(step, Fill) and shape == ():  # a scalar, as reductions and params are
            lines.append(f"var t{i}: {dev} = {literal(step.value, step.elem)};")
        elif isinstance(step, Fill):
            n = size(i)
            lines.append(f"var t{i}: array<{dev}, {chunks(n)}>;")
            lines.append(lanes(n, f"t{i}[j] = {literal(step.value, step.elem)};"))
        elif isinstance(step, Map):
            reader = shape if shape else ()
            refs = [at(a, reader) if reader else f"t{a}" for a in step.args]
            steps, last = expr_lines(step.expr, refs, [() for _ in step.args], [elems[a] for a in step.args],
                                     ((), elems[i]))  # fmt: skip
            if not reader:
                lines.append(f"var t{i}: {dev};")
                lines.append("{ " + " ".join(steps) + f" t{i} = {last}; }}")
            else:
                n = size(i)
                lines.append(f"var t{i}: array<{dev}, {chunks(n)}>;")
                lines.append(lanes(n, " ".join(steps) + f" t{i}[j] = {last};"))
        elif isinstance(step, Load):
            assert shape
            n = size(i)
            lines.append(f"var t{i}: array<{dev}, {chunks(n)}>;")
            condition = f"{on(n)} && live_prog && {mask_on(step.mask, shape)}"
            lines.append(
                lanes(
                    n,
                    f"t{i}[j] = {literal(step.other, step.elem)}; "
                    f"if ({condition}) {{ t{i}[j] = in{step.tensor}[u32({at(step.index, shape)})]; }}",
                )
            )
        elif isinstance(step, Reduce):
            if dev != "f32":
                raise UnsupportedError(f"tile reduction over {elems[step.arg]}: WGSL tile programs reduce f32")
            uses_reduce = True
            n = size(step.arg)
            init = {"sum": "0.0", "max": "-3.4028234663852886e38", "min": "3.4028234663852886e38"}[step.kind]
            fold = {"sum": "a + b", "max": "max(a, b)", "min": "min(a, b)"}[step.kind]
            lines += [
                f"var part{i}: f32 = {init};",
                f"for (var j: u32 = 0u; j < {chunks(n)}u; j = j + 1u) {{",
                f"  if ({on(n)}) {{ let a = part{i}; let b = t{step.arg}[j]; part{i} = {fold}; }}",
                "}",
                f"red[lid] = part{i};",
                "workgroupBarrier();",
                f"for (var half: u32 = {WORKGROUP // 2}u; half > 0u; half = half / 2u) {{",
                f"  if (lid < half) {{ let a = red[lid]; let b = red[lid + half]; red[lid] = {fold}; }}",
                "  workgroupBarrier();",
                "}",
                f"let t{i}: f32 = red[0];",
                "workgroupBarrier();",
            ]
        elif isinstance(step, Dot):
            assert shape
            n = size(i)
            inner = shapes[step.lhs][1]  # type: ignore[index]  # a dot's operands are tiles, with shapes
            cols = shape[1]
            lines.append(f"var t{i}: array<f32, {chunks(n)}>;")
            lines.append(
                lanes(
                    n,
                    f"let r = p / {cols}u; let c = p % {cols}u; var total = 0.0; "
                    f"for (var q: u32 = 0u; q < {inner}u; q = q + 1u) {{ "
                    f"total = total + w{step.lhs}[r * {inner}u + q] * w{step.rhs}[q * {cols}u + c]; }} "
                    f"t{i}[j] = total;",
                )
            )
        elif isinstance(step, Loop):
            for c in program.carries(i):
                carry = program.steps[c]
                assert isinstance(carry, Carry)
                kind = f"array<{device_type(elems[c])}, {chunks(size(c))}>" if shapes[c] else device_type(elems[c])
                lines.append(f"var t{c}: {kind} = t{carry.init};")
            lines.append(f"for (var t{i}: i32 = 0; t{i} < t{step.stop}; t{i} = t{i} + {step.step}) {{")
        elif isinstance(step, Carry):
            pass  # declared before its loop
        elif isinstance(step, End):
            loop = program.loop_of(i)
            assert loop is not None
            carried = program.carries(loop)
            nexts = [f"let next{k} = t{v};" for k, v in enumerate(step.values)]
            lines.append("{ " + " ".join([*nexts, *(f"t{c} = next{k};" for k, c in enumerate(carried))]) + " }")
            lines.append("}")
            for c in carried:
                if c in shared:
                    share(c)  # the last trip's value, for the readers after the loop
        else:
            assert isinstance(step, Store)
            stored = _reader_shape(program, shapes, i)
            assert stored
            n = size_of(stored)
            condition = f"{on(n)} && live_prog && {mask_on(step.mask, stored)}"
            value = at(step.value, stored)
            lines.append(lanes(n, f"if ({condition}) {{ out{step.result}[u32({at(step.index, stored)})] = {value}; }}"))
        if i in shared:
            share(i)
    if uses_reduce:
        declarations += f"var<workgroup> red: array<f32, {WORKGROUP}>;\n"
    body = "".join(f"  {line}\n" for line in lines)
    return header(results, operands) + HELPERS + declarations + ENTRY + body + "}\n"


def _p_tile_program(grid: int | tuple[int, ...], numbers: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """A tile program's params (the program count, the grid's three extents, then its own numbers
    as u32 bits) and workgroups: one per program."""
    sizes = tuple(grid) if isinstance(grid, tuple) else (grid,)
    count = 1
    for e in sizes:
        count *= e
    extents = (*sizes, 1, 1, 1)[:3]
    return (count, *extents, *(n & 0xFFFFFFFF for n in numbers)), count


PIECES: dict[str, Callable[..., object]] = {"_p_tile_program": _p_tile_program}
