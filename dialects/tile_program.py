"""`TileProgram`: a kernel written once as a tile program, printed to WGSL and to numpy.

A tile program runs once per program of a launch grid (one to three axes), on *tiles*: small values
of compile-time shapes (`[B]`, `[BM, BK]`, ...), or scalars.  It reads its operand tensors only
through masked loads and writes its results only through masked stores, as the tile programs of the
language spec in shared/seeds do; everything between is elementwise arithmetic (an `Expr`, the same
data the zip kernels compute), reductions over a tile, a tile product, and loops carrying values
from one iteration to the next.  A row kernel (softmax, layer normalisation) is one program per row
with the row's elements in one tile; a matrix product is one program per [BM, BN] block of the
result, looping over the contraction in steps of BK.

Shapes broadcast as numpy's do (aligned at the last axis, an extent of 1 stretching): a map of an
[BM, 1] and a [1, BK] tile is a [BM, BK] tile.  `tile B` heads the program: a bare `iota` spans B
elements, and no tile may hold more than B (so a backend can size its per-invocation storage).

Steps, each reading earlier steps by index (`TileProgram.__str__` is its text form):

- `program` / `program A` — the program's index along grid axis A (0 when omitted; i32 scalar);
- `param K` — the K-th run-time number given at launch (an extent or a stride: i32 scalar);
- `iota` — 0, 1, ..., B-1 (an i32 tile of the program's tile size);
- `iota [E0, E1, ...] A` — an i32 tile of that shape counting 0, 1, ... along its axis A (constant
  along the others): `iota [BM, 1] 0` is a column of row offsets;
- `fill V [E0, ...] : ELEM` — a tile of that shape holding V everywhere;
- `load T I M OTHER : ELEM` — operand T's elements at the flat indices of step I, OTHER where the
  mask step M is false (memory is not read there); the tile has I and M's broadcast shape;
- `map [EXPR] (A, ...)` — `EXPR` over steps A, ... elementwise, their shapes broadcast;
- `reduce sum|max|min A` — the reduction of every element of tile A (a scalar);
- `dot A B` — the matrix product of tiles A [M, K] and B [K, N]: an [M, N] f32 tile, accumulated
  in f32;
- `loop S by STEP` — opens a loop whose value, the induction variable (i32 scalar), runs 0, STEP,
  2 STEP, ... while below scalar step S, which must be the same for every program (computed from
  params only), so every program of a workgroup takes the same trips;
- `carry I` — a value the loop carries (only right after `loop` or another `carry`): step I, from
  before the loop, on the first trip; inside the loop it is the current trip's value, after the
  loop's `end` the value the last trip left (I when the loop ran no trip);
- `end (V, ...)` — closes the innermost open loop, giving its carries, in order, their next values
  (steps of the carries' shapes and element types).  A step inside a loop is read only inside it;
  a carry is read after the loop too;
- `store R I V M` — writes step V into result R at the flat indices of step I where M is true.

Like `Expr`, a program is data, never a closure: `backends/numpy_tile.py` prints it as one numpy
function vectorised over every program at once, `backends/wgsl_kernels/tile.py` as one WGSL shader
with a workgroup per program, so the numpy form is the oracle for the WGSL form.

The kernels written once in this form (`softmax_rows`, `layernorm_rows`, `matmul_tiles`) live in
`loam.passes.tile_kernels`: this module defines the IR, not programs written in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from xdsl.parser import AttrParser

from loam.dialects.expr import Expr, format_float, parse_float, step_types

REDUCTIONS = ("sum", "max", "min")
GRID_AXES = 3
"""A launch grid has at most this many axes (`program 0` to `program 2`)."""

Shape = tuple[int, ...]
"""A tile's compile-time shape; `()` for a scalar."""


def _shape_text(shape: Shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


@dataclass(frozen=True)
class ProgramId:
    axis: int = 0

    def __str__(self) -> str:
        return "program" if self.axis == 0 else f"program {self.axis}"


@dataclass(frozen=True)
class Param:
    index: int

    def __str__(self) -> str:
        return f"param {self.index}"


@dataclass(frozen=True)
class Iota:
    """`iota` (shape None: the program's tile size) or `iota [shape] axis`."""

    shape: Shape | None = None
    axis: int = 0

    def __str__(self) -> str:
        return "iota" if self.shape is None else f"iota {_shape_text(self.shape)} {self.axis}"


@dataclass(frozen=True)
class Fill:
    value: float
    shape: Shape
    elem: str = "f32"

    def __str__(self) -> str:
        return f"fill {format_float(self.value)} {_shape_text(self.shape)} : {self.elem}"


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
class Dot:
    lhs: int
    rhs: int

    def __str__(self) -> str:
        return f"dot {self.lhs} {self.rhs}"


@dataclass(frozen=True)
class Loop:
    stop: int
    step: int

    def __str__(self) -> str:
        return f"loop {self.stop} by {self.step}"


@dataclass(frozen=True)
class Carry:
    init: int

    def __str__(self) -> str:
        return f"carry {self.init}"


@dataclass(frozen=True)
class End:
    values: tuple[int, ...]

    def __str__(self) -> str:
        return f"end ({', '.join(map(str, self.values))})"


@dataclass(frozen=True)
class Store:
    result: int
    index: int
    value: int
    mask: int

    def __str__(self) -> str:
        return f"store {self.result} {self.index} {self.value} {self.mask}"


Step = ProgramId | Param | Iota | Fill | Load | Map | Reduce | Dot | Loop | Carry | End | Store


def broadcast(*shapes: Shape) -> Shape | None:
    """The shape `shapes` broadcast to (numpy's rule), or None when two extents disagree."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for k in range(rank):
        extents = {s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0} - {1}
        if len(extents) > 1:
            return None
        out.append(extents.pop() if extents else 1)
    return tuple(out)


def size_of(shape: Shape) -> int:
    """The number of elements of a tile of `shape` (1 for a scalar)."""
    n = 1
    for e in shape:
        n *= e
    return n


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
        self._shapes  # noqa: B018  (checks every step)

    # -- what each step is -------------------------------------------------------------------------

    def shapes(self) -> list[Shape | None]:
        """Each step's shape (`()` for a scalar, None for `end` and `store`)."""
        return list(self._shapes)

    @cached_property
    def _shapes(self) -> tuple[Shape | None, ...]:
        """The steps' shapes, checking the program (ValueError says which step is wrong)."""
        shapes: list[Shape | None] = []
        scope: list[int | None] = []  # the loop whose body holds each step's value (None: the program)
        uniform: list[bool] = []  # the same in every program (params and arithmetic over them)
        open_loops: list[int] = []
        carries: dict[int, list[int]] = {}

        def known(r: int) -> Shape:
            """The shape of step `r`, which a step reads: the check of its refs below says it has one."""
            shape = shapes[r]
            assert shape is not None
            return shape

        for i, step in enumerate(self.steps):
            where = f"tile step {i} ({step})"
            for r in _refs(step):
                if not 0 <= r < i:
                    raise ValueError(f"{where} reads a step that does not precede it")
                if shapes[r] is None:
                    raise ValueError(f"{where} reads step {r}, which has no value")
                if scope[r] is not None and scope[r] not in open_loops:
                    raise ValueError(f"{where} reads step {r}, which lives inside a loop that ended before")
            inner = open_loops[-1] if open_loops else None
            shape: Shape | None = ()
            if isinstance(step, ProgramId):
                if not 0 <= step.axis < GRID_AXES:
                    raise ValueError(f"{where}: a grid has axes 0 to {GRID_AXES - 1}")
            elif isinstance(step, Iota):
                shape = (self.tile,) if step.shape is None else step.shape
                if step.shape is not None and not 0 <= step.axis < len(step.shape):
                    raise ValueError(f"{where}: axis {step.axis} is outside the tile's rank {len(step.shape)}")
            elif isinstance(step, Fill):
                shape = step.shape
            elif isinstance(step, Load):
                shape = broadcast(known(step.index), known(step.mask))
                if shape == ():
                    raise ValueError(f"{where}: a load reads a tile (its index or mask must be one)")
                if not 0 <= step.tensor < self.operands:
                    raise ValueError(f"tile step {i} loads operand {step.tensor} of {self.operands}")
            elif isinstance(step, Map):
                if step.expr.arity != len(step.args):
                    raise ValueError(
                        f"tile step {i} maps an expression of {step.expr.arity} operands over {len(step.args)}"
                    )
                shape = broadcast(*(known(a) for a in step.args))
            elif isinstance(step, Reduce):
                if shapes[step.arg] == ():
                    raise ValueError(f"{where}: reduces a scalar")
            elif isinstance(step, Dot):
                a, b = shapes[step.lhs], shapes[step.rhs]
                if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
                    raise ValueError(f"{where}: multiplies tiles {a} and {b}, not [M, K] and [K, N]")
                shape = (a[0], b[1])
            elif isinstance(step, Loop):
                if shapes[step.stop] != () or not uniform[step.stop]:
                    raise ValueError(f"{where}: the loop's bound must be a scalar computed from params only")
                if step.step <= 0:
                    raise ValueError(f"{where}: the loop's step must be positive")
                carries[i] = []
            elif isinstance(step, Carry):
                previous = self.steps[i - 1] if i else None
                if inner is None or not isinstance(previous, (Loop, Carry)):
                    raise ValueError(f"{where}: a carry follows its loop (or another carry) directly")
                if step.init >= inner:
                    raise ValueError(f"{where}: its first value must come from before the loop")
                shape = shapes[step.init]
                carries[inner].append(i)
            elif isinstance(step, End):
                if inner is None:
                    raise ValueError(f"{where}: no loop is open")
                own = carries[inner]
                if [shapes[v] for v in step.values] != [shapes[c] for c in own]:
                    raise ValueError(
                        f"{where}: the loop at step {inner} carries {len(own)} values of shapes "
                        f"{[shapes[c] for c in own]}, given {[shapes[v] for v in step.values]}"
                    )
                open_loops.pop()
                shape = None
            elif isinstance(step, Store):
                shape = broadcast(*(known(r) for r in (step.index, step.value, step.mask)))
                if shape == ():
                    raise ValueError(f"{where}: a store writes a tile (its index, value or mask must be one)")
                if not 0 <= step.result < self.results:
                    raise ValueError(f"tile step {i} stores result {step.result} of {self.results}")
            if shape is None and not isinstance(step, End):
                raise ValueError(f"{where}: shapes {[shapes[r] for r in _refs(step)]} do not broadcast")
            if shape is not None and (any(e <= 0 for e in shape) or size_of(shape) > self.tile):
                raise ValueError(f"{where}: a tile of shape {list(shape)} (at most {self.tile} elements, none empty)")
            if isinstance(step, Store):
                shape = None
            shapes.append(shape)
            if isinstance(step, Loop):
                scope.append(i)
                open_loops.append(i)
            elif isinstance(step, Carry):
                scope.append(open_loops[-2] if len(open_loops) > 1 else None)
            else:
                scope.append(inner)
            uniform.append(
                isinstance(step, (Param, Loop)) or (isinstance(step, Map) and all(uniform[a] for a in step.args))
            )
        if open_loops:
            raise ValueError(f"the loop at tile step {open_loops[-1]} has no end")
        if any(isinstance(s, (End, Dot)) for s in self.steps):
            self._check_elems()
        return tuple(shapes)

    def _check_elems(self) -> None:
        elems = self.elems()
        for i, step in enumerate(self.steps):
            if isinstance(step, Dot) and (elems[step.lhs], elems[step.rhs]) != ("f32", "f32"):
                raise ValueError(f"tile step {i} ({step}): dot multiplies f32 tiles, not {elems[step.lhs]}")
            if isinstance(step, End):
                loop = self.loop_of(i)
                assert loop is not None
                for v, c in zip(step.values, self.carries(loop), strict=True):
                    if elems[v] != elems[c]:
                        raise ValueError(f"tile step {i} ({step}) gives carry {c} ({elems[c]}) a {elems[v]} value")

    def is_tile(self, i: int) -> bool:
        """Whether step `i` is a tile (else a scalar, or no value)."""
        shape = self._shapes[i]
        return shape is not None and shape != ()

    @property
    def grid_rank(self) -> int:
        """The number of grid axes the program reads (at least 1)."""
        return 1 + max((s.axis for s in self.steps if isinstance(s, ProgramId)), default=0)

    def loop_of(self, i: int) -> int | None:
        """The innermost loop step whose body holds step `i` (a loop's own `end` included)."""
        open_loops: list[int] = []
        for j, step in enumerate(self.steps[: i + 1]):
            if j == i:
                return open_loops[-1] if open_loops else None
            if isinstance(step, Loop):
                open_loops.append(j)
            elif isinstance(step, End):
                open_loops.pop()
        return None

    def carries(self, loop: int) -> list[int]:
        """The carry steps of the loop at step `loop`, in order."""
        out: list[int] = []
        for j in range(loop + 1, len(self.steps)):
            if not isinstance(self.steps[j], Carry):
                break
            out.append(j)
        return out

    def elems(self) -> list[str]:
        """Each step's Loam element type (`none` for an end or a store)."""
        out: list[str] = []
        for step in self.steps:
            if isinstance(step, (ProgramId, Param, Iota, Loop)):
                out.append("i32")
            elif isinstance(step, (Load, Fill)):
                out.append(step.elem)
            elif isinstance(step, Map):
                types = step_types(step.expr, [() for _ in step.args], [out[a] for a in step.args])
                out.append(types[-1][1])
            elif isinstance(step, Reduce):
                out.append(out[step.arg])
            elif isinstance(step, Dot):
                out.append("f32")
            elif isinstance(step, Carry):
                out.append(out[step.init])
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


def _shape(parser: AttrParser) -> Shape:
    return tuple(parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: _int(parser)))


def _parse_step(parser: AttrParser) -> Step:
    at = parser.pos
    word = parser.parse_identifier(context_msg=" (a tile program step)")
    if word == "program":
        axis = parser.parse_optional_integer(allow_boolean=False, allow_negative=False)
        return ProgramId(axis or 0)
    if word == "param":
        return Param(_int(parser))
    if word == "iota":
        extents = parser.parse_optional_comma_separated_list(parser.Delimiter.SQUARE, lambda: _int(parser))
        return Iota() if extents is None else Iota(tuple(extents), _int(parser))
    if word == "fill":
        value = parse_float(parser)
        shape = _shape(parser)
        parser.parse_punctuation(":")
        return Fill(value, shape, parser.parse_identifier(context_msg=" (an element type)"))
    if word == "load":
        tensor, index, mask = _int(parser), _int(parser), _int(parser)
        other = parse_float(parser)
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
    if word == "dot":
        return Dot(_int(parser), _int(parser))
    if word == "loop":
        stop = _int(parser)
        parser.parse_keyword("by")
        return Loop(stop, _int(parser))
    if word == "carry":
        return Carry(_int(parser))
    if word == "end":
        return End(tuple(parser.parse_comma_separated_list(parser.Delimiter.PAREN, lambda: _int(parser))))
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
    if isinstance(step, Dot):
        return (step.lhs, step.rhs)
    if isinstance(step, Loop):
        return (step.stop,)
    if isinstance(step, Carry):
        return (step.init,)
    if isinstance(step, End):
        return step.values
    if isinstance(step, Store):
        return (step.index, step.value, step.mask)
    return ()
