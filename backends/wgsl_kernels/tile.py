"""A `TileProgram` printed as one WGSL shader: a workgroup per program.

The workgroup's 64 invocations share the tile: invocation `lid` holds elements lid, lid + 64, ...
of every tile value in a private array (`ceil(B / 64)` elements each); a scalar is a `let` every
invocation computes alike.  A reduction folds each invocation's elements, then the workgroup's
partial values through workgroup memory, and every invocation reads the total.  Lanes at or past
the tile size B are off: they load nothing, count in no reduction and store nothing.

Params: the grid (the number of programs), then the program's own run-time numbers (`param K`
is `params[1 + K]`).  Reductions run in f32 (the row kernels' element type).
"""

from __future__ import annotations

from loam.backends.wgsl_kernels.common import ENTRY, WORKGROUP, device_type, header
from loam.backends.wgsl_kernels.elementwise import HELPERS, expr_lines
from loam.dialects.tile_program import Iota, Load, Map, Param, ProgramId, Reduce, Store, TileProgram
from loam.errors import UnsupportedError


def source_tile(program: TileProgram, operands: list[str], results: list[str]) -> str:
    """The shader of `program` over operands and results of the given Loam element types."""
    elems = program.elems()
    chunks = -(-program.tile // WORKGROUP)
    lines = [
        "let prog = wid.y * nwg.x + wid.x;",
        "let live_prog = prog < params[0];",
    ]
    shared = "var<workgroup> red: array<f32, 64>;\n"

    def ref(a: int, j: str) -> str:
        return f"t{a}[{j}]" if program.is_tile(a) else f"t{a}"

    for i, step in enumerate(program.steps):
        dev = device_type(elems[i]) if elems[i] != "none" else ""
        if isinstance(step, ProgramId):
            lines.append(f"let t{i}: i32 = i32(prog);")
        elif isinstance(step, Param):
            lines.append(f"let t{i}: i32 = param_i({1 + step.index}u);")
        elif isinstance(step, Iota):
            lines.append(f"var t{i}: array<i32, {chunks}>;")
            lines.append(
                f"for (var j: u32 = 0u; j < {chunks}u; j = j + 1u) {{ t{i}[j] = i32(lid + {WORKGROUP}u * j); }}"
            )
        elif isinstance(step, Map):
            if not program.is_tile(i):
                steps, last = expr_lines(step.expr, [ref(a, "0") for a in step.args], [() for _ in step.args],
                                         [elems[a] for a in step.args], ((), elems[i]))  # fmt: skip
                lines.append(f"var t{i}: {dev};")
                lines.append("{ " + " ".join(steps) + f" t{i} = {last}; }}")
                continue
            steps, last = expr_lines(step.expr, [ref(a, "j") for a in step.args], [() for _ in step.args],
                                     [elems[a] for a in step.args], ((), elems[i]))  # fmt: skip
            lines.append(f"var t{i}: array<{dev}, {chunks}>;")
            lines.append(
                f"for (var j: u32 = 0u; j < {chunks}u; j = j + 1u) {{ " + " ".join(steps) + f" t{i}[j] = {last}; }}"
            )
        elif isinstance(step, Load):
            lines.append(f"var t{i}: array<{dev}, {chunks}>;")
            lines.append(f"for (var j: u32 = 0u; j < {chunks}u; j = j + 1u) {{")
            lines.append(f"  t{i}[j] = {dev}({step.other!r});")
            on = f"lid + {WORKGROUP}u * j < {program.tile}u && {ref(step.mask, 'j')} != 0u && live_prog"
            lines.append(f"  if ({on}) {{ t{i}[j] = in{step.tensor}[u32({ref(step.index, 'j')})]; }}")
            lines.append("}")
        elif isinstance(step, Reduce):
            if dev != "f32":
                raise UnsupportedError(f"tile reduction over {elems[step.arg]}: WGSL tile programs reduce f32")
            init = {"sum": "0.0", "max": "-3.4028235e38", "min": "3.4028235e38"}[step.kind]
            fold = {"sum": "a + b", "max": "max(a, b)", "min": "min(a, b)"}[step.kind]
            lines += [
                f"var part{i}: f32 = {init};",
                f"for (var j: u32 = 0u; j < {chunks}u; j = j + 1u) {{",
                f"  if (lid + {WORKGROUP}u * j < {program.tile}u) {{ let a = part{i}; let b = {ref(step.arg, 'j')}; "
                f"part{i} = {fold}; }}",
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
        else:
            assert isinstance(step, Store)
            lines.append(f"for (var j: u32 = 0u; j < {chunks}u; j = j + 1u) {{")
            on = f"lid + {WORKGROUP}u * j < {program.tile}u && {ref(step.mask, 'j')} != 0u && live_prog"
            lines.append(f"  if ({on}) {{ out{step.result}[u32({ref(step.index, 'j')})] = {ref(step.value, 'j')}; }}")
            lines.append("}")
    body = "".join(f"  {line}\n" for line in lines)
    return header(results, operands) + HELPERS + shared + ENTRY + body + "}\n"


def _p_tile_program(grid: int, numbers: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """A tile program's params (the grid, then its own numbers as u32 bits) and workgroups: one per program."""
    return (grid, *(n & 0xFFFFFFFF for n in numbers)), grid


PIECES: dict[str, object] = {"_p_tile_program": _p_tile_program}
DEPENDS: dict[str, tuple[str, ...]] = {}
