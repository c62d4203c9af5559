"""`TileProgram`: a kernel written once as a tile program, printed to WGSL and to numpy.

A tile program runs once per program of a launch grid (one axis), on *tiles*: 1-D values of the
program's compile-time tile size `B` (or scalars).  It reads its operand tensors only through masked
loads and writes its results only through masked stores, as the tile programs of the language spec
in shared/seeds do; everything between is elementwise arithmetic (an `Expr`, the same data the zip
kernels compute) and reductions over the tile.  A row kernel (softmax, layer normalisation) is one
program per row with the row's elements in one tile.

Steps, each reading earlier steps by index (`TileProgram.__str__` is its text form):

- `program` — the program's index along the grid (i32 scalar);
- `param K` — the K-th run-time number given at launch (an extent: i32 scalar);
- `iota` — 0, 1, ..., B-1 (i32 tile);
- `load T I M OTHER : ELEM` — operand T's elements at the flat indices of step I, OTHER where the
  mask step M is false (memory is not read there);
- `map [EXPR] (A, ...)` — `EXPR` over steps A, ... elementwise (scalars broadcast over tiles);
- `reduce sum|max|min A` — the reduction of tile A (a scalar);
- `store R I V M` — writes step V into result R at the flat indices of step I where M is true.

Like `Expr`, a program is data, never a closure: `backends/numpy_tile.py` prints it as one numpy
function vectorised over every program at once, `backends/wgsl_kernels/tile.py` as one WGSL shader
with a workgroup per program, so the numpy form is the oracle for the WGSL form.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.parser import AttrParser

from loam.dialects.expr import Expr, _parse_float_word, format_float

REDUCTIONS = ("sum", "max", "min")


@dataclass(frozen=True)
class ProgramId:
    def __str__(self) -> str:
        return "program"


@dataclass(frozen=True)
class Param:
    index: int

    def __str__(self) -> str:
        return f"param {self.index}"


@dataclass(frozen=True)
class Iota:
    def __str__(self) -> str:
        return "iota"


@dataclass(frozen=True)
class Load:
    tensor: int
    index: int
    mask: int
    other: float
    elem: str = "f32"

    def __str__(self) -> str:
        return f"load {self.tensor} {self.index} {self.mask} {format_float(self.other)} : {self.elem}"


@dataclass(frozen=True)
class Map:
    expr: Expr
    args: tuple[int, ...]

    def __str__(self) -> str:
        return f"map {self.expr} ({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class Reduce:
    kind: str
    arg: int

    def __post_init__(self) -> None:
        if self.kind not in REDUCTIONS:
            raise ValueError(f"tile reduction '{self.kind}' is not one of {', '.join(REDUCTIONS)}")

    def __str__(self) -> str:
        return f"reduce {self.kind} {self.arg}"


@dataclass(frozen=True)
class Store:
    result: int
    index: int
    value: int
    mask: int

    def __str__(self) -> str:
        return f"store {self.result} {self.index} {self.value} {self.mask}"


Step = ProgramId | Param | Iota | Load | Map | Reduce | Store


@dataclass(frozen=True)
class TileProgram:
    """A tile program of tile size `tile` over `operands` input tensors and `results` outputs."""

    steps: tuple[Step, ...]
    tile: int
    operands: int
    results: int

    def __post_init__(self) -> None:
        if self.tile <= 0:
            raise ValueError("a tile program's tile size must be positive")
        for i, step in enumerate(self.steps):
            refs = _refs(step)
            if any(r >= i for r in refs):
                raise ValueError(f"tile step {i} ({step}) reads a step that does not precede it")
            if isinstance(step, Store) and not 0 <= step.result < self.results:
                raise ValueError(f"tile step {i} stores result {step.result} of {self.results}")
            if isinstance(step, Load) and not 0 <= step.tensor < self.operands:
                raise ValueError(f"tile step {i} loads operand {step.tensor} of {self.operands}")
            if isinstance(step, Map) and step.expr.arity != len(step.args):
                raise ValueError(
                    f"tile step {i} maps an expression of {step.expr.arity} operands over {len(step.args)}"
                )

    def is_tile(self, i: int) -> bool:
        """Whether step `i` is a tile (else a scalar)."""
        step = self.steps[i]
        if isinstance(step, (Iota, Load)):
            return True
        if isinstance(step, Map):
            return any(self.is_tile(a) for a in step.args)
        return False

    def elems(self) -> list[str]:
        """Each step's Loam element type (`none` for a store)."""
        from loam.backends.numpy_inplace import step_types

        out: list[str] = []
        for step in self.steps:
            if isinstance(step, (ProgramId, Param, Iota)):
                out.append("i32")
            elif isinstance(step, Load):
                out.append(step.elem)
            elif isinstance(step, Map):
                types = step_types(step.expr, [() for _ in step.args], [out[a] for a in step.args])
                out.append(types[-1][1])
            elif isinstance(step, Reduce):
                out.append(out[step.arg])
            else:
                out.append("none")
        return out

    def __str__(self) -> str:
        return f"tile {self.tile}, [" + ", ".join(str(s) for s in self.steps) + "]"


def parse_program(parser: AttrParser) -> TileProgram:
    """Parse `tile B, [step, ...]` (the text inside `#kernel.tile_program<...>`) with an xDSL parser;
    the operand and result counts are those the steps read and write."""
    start = parser.pos
    parser.parse_keyword("tile")
    tile = parser.parse_integer(allow_boolean=False, allow_negative=False)
    parser.parse_punctuation(",")
    steps = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: _parse_step(parser))
    operands = max((s.tensor + 1 for s in steps if isinstance(s, Load)), default=0)
    results = max((s.result + 1 for s in steps if isinstance(s, Store)), default=0)
    try:
        return TileProgram(tuple(steps), tile, operands, results)
    except ValueError as e:
        parser.raise_error(str(e), start, parser.pos)


def _int(parser: AttrParser) -> int:
    return parser.parse_integer(allow_boolean=False, allow_negative=False)


def _parse_step(parser: AttrParser) -> Step:
    at = parser.pos
    word = parser.parse_identifier(context_msg=" (a tile program step)")
    if word == "program":
        return ProgramId()
    if word == "param":
        return Param(_int(parser))
    if word == "iota":
        return Iota()
    if word == "load":
        tensor, index, mask = _int(parser), _int(parser), _int(parser)
        other = _parse_float_word(parser)
        parser.parse_punctuation(":")
        return Load(tensor, index, mask, other, parser.parse_identifier(context_msg=" (an element type)"))
    if word == "map":
        expr = Expr.parse_steps(parser)
        args = parser.parse_comma_separated_list(parser.Delimiter.PAREN, lambda: _int(parser))
        return Map(expr, tuple(args))
    if word == "reduce":
        kind = parser.parse_identifier(context_msg=" (sum, max or min)")
        if kind not in REDUCTIONS:
            parser.raise_error(f"unknown tile reduction '{kind}'", at, parser.pos)
        return Reduce(kind, _int(parser))
    if word == "store":
        return Store(_int(parser), _int(parser), _int(parser), _int(parser))
    parser.raise_error(f"unknown tile program step '{word}'", at, parser.pos)


def _refs(step: Step) -> tuple[int, ...]:
    if isinstance(step, Load):
        return (step.index, step.mask)
    if isinstance(step, Map):
        return step.args
    if isinstance(step, Reduce):
        return (step.arg,)
    if isinstance(step, Store):
        return (step.index, step.value, step.mask)
    return ()


# ---- the library: kernels written once as tile programs ----------------------------------------------


def _x(i: int) -> Expr:
    return Expr.operand(i)


def softmax_rows(tile: int) -> TileProgram:
    """Softmax of each row of a [R, C] f32 tensor, C <= `tile` (params: C); grid R."""
    steps: list[Step] = [
        ProgramId(),  # 0 row
        Param(0),  # 1 C
        Iota(),  # 2 cols
        Map(_x(0).binary("less", _x(1)), (2, 1)),  # 3 mask = cols < C
        Map(_x(0) * _x(1) + _x(2), (0, 1, 2)),  # 4 index = row * C + cols
        Load(0, 4, 3, -3.0e38),  # 5 v
        Reduce("max", 5),  # 6 m
        Map((_x(0) - _x(1)).unary("exp"), (5, 6)),  # 7 e (masked lanes: exp(-3e38 - m) = 0)
        Reduce("sum", 7),  # 8 s
        Map(_x(0) / _x(1), (7, 8)),  # 9 y
        Store(0, 4, 9, 3),
    ]
    return TileProgram(tuple(steps), tile, 1, 1)


def layernorm_rows(tile: int, epsilon: float) -> TileProgram:
    """LayerNormalization of each row of a [R, C] f32 tensor over its last axis with scale and bias
    [C], C <= `tile` (params: C); grid R."""
    zero = Expr.const(0.0)
    steps: list[Step] = [
        ProgramId(),  # 0 row
        Param(0),  # 1 C
        Iota(),  # 2 cols
        Map(_x(0).binary("less", _x(1)), (2, 1)),  # 3 mask
        Map(_x(0) * _x(1) + _x(2), (0, 1, 2)),  # 4 index
        Load(0, 4, 3, 0.0),  # 5 x
        Load(1, 2, 3, 0.0),  # 6 scale
        Load(2, 2, 3, 0.0),  # 7 bias
        Reduce("sum", 5),  # 8 total
        Map(_x(0) / _x(1).cast("f32"), (8, 1)),  # 9 mean
        Map(Expr.select(_x(2), _x(0) - _x(1), zero), (5, 9, 3)),  # 10 centred (0 off the row)
        Map(_x(0) * _x(0), (10,)),  # 11 squares
        Reduce("sum", 11),  # 12 sum of squares
        Map(Expr.const(1.0) / ((_x(0) / _x(1).cast("f32")) + epsilon).unary("sqrt"), (12, 1)),  # 13 inv
        Map(_x(0) * _x(1) * _x(2) + _x(3), (10, 13, 6, 7)),  # 14 y
        Store(0, 4, 14, 3),
    ]
    return TileProgram(tuple(steps), tile, 3, 1)
