"""The operator rule interface: one object per ONNX operator holds all of its meaning in Loam.

Each rule answers the three questions the pipeline asks of a node, so an operator's semantics live
in one place rather than spread across the passes:

- `infer` (stage 0): the element type and extents of every output, and the output values where the
  build knows every input (folding);
- `axes` (name-axes): the named axes of every output from those of the inputs, or `None` for an axis
  the operator leaves undetermined (the layout names it);
- `lower` (lower-to-kernel): the kernel-dialect ops that compute the node.

The passes ask through three hooks whose defaults are those questions: `stage0` (by default `infer`
over the inputs' facts), `node_axes` (by default `axes` over the inputs' axes, for name-axes and the
layout drafter alike) and `lower`.  An operator whose node holds regions (If, Loop) overrides the first
two to walk its regions with the steps the pass offers it (`Stage0Walk`, `AxesWalk`), and lowers them
through `LowerContext.region`, so no pass asks what operator a node is.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, SupportsInt

import numpy as np

from loam.core.dtypes import ElementType, by_onnx
from loam.core.errors import ShapeError, UnsupportedError
from loam.core.poly import Poly

if TYPE_CHECKING:
    from xdsl.ir import Block, Operation, Region, SSAValue

    from loam.core.owed import ExtentScope
    from loam.dialects.graph import NodeOp
    from loam.dialects.tensor_axes import Axis


@dataclass(frozen=True)
class Facts:
    """What stage 0 knows of one value: its element type, its extents and, when folded, its value."""

    elem: ElementType
    shape: tuple[Poly, ...]
    value: np.ndarray | None = None
    # Where the value is not known: bounds (inclusive) every element lies within, as far as the build
    # knows them (a Range over symbols counts from start toward limit), so a Gather can owe its
    # indices' range instead of failing inside the kernel.
    span: tuple[Poly, Poly] | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    def static_shape(self) -> tuple[int, ...] | None:
        """The extents as integers, or None where one is symbolic."""
        if all(d.is_const for d in self.shape):
            return tuple(d.const_value for d in self.shape)
        return None


@dataclass(frozen=True)
class NodeInfo:
    """A node as the rules see it: its identity and attribute reader, detached from the IR."""

    op_type: str
    name: str
    since: int
    get_attr: Callable[[str, Any], Any]
    outputs: int = 1  # how many outputs the graph names for the node (Split, Dropout's mask, ...)
    output_names: tuple[str, ...] = ()
    domain: str = ""  # the operator's domain: "" (ONNX's own) or another, `com.microsoft` say

    def result_length(self, output: int, axis: int) -> Poly:
        """The length only the run knows of output `output` at `axis` (`result_length`)."""
        names = self.output_names
        return result_length(names[output] if output < len(names) and names[output] else f"{self.name}#{output}", axis)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.get_attr(key, default)

    def where(self) -> str:
        """How messages name the node: `Gemm node 'fc1'`."""
        return f"{self.op_type} node '{self.name}'"

    def fail(self, message: str) -> ShapeError:
        return ShapeError(f"{self.where()}: {message}")

    def unsupported(self, message: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where()}: {message}")


def result_length(output: str, axis: int) -> Poly:
    """The symbol of a length only the run knows: output `output`'s extent at `axis` (`y[0]`).

    An If whose branches give the output different lengths, and an operator whose output length
    depends on values (NonZero, Compress, Unique), give such a length; forward binds it from the
    value once the node has run, and checks what is owed of it right there.
    """
    return Poly.symbol(f"{output}[{axis}]")


class ReverseWalk(Protocol):
    """Reverse-mode differentiation over kernel ops already emitted (`loam.grad.reverse.Reverse`): seed
    values with `send`, `run`, then read each source's `adjoint`."""

    adjoint: dict[SSAValue, SSAValue]

    def emit(self, op: Operation) -> SSAValue: ...
    def send(self, value: SSAValue, grad: SSAValue) -> None: ...
    def run(self) -> None: ...
    def unreached(self, source: SSAValue, destination: str) -> str: ...


Differentiator = Callable[[Sequence["SSAValue"], Sequence["Operation"], Callable[["Operation"], object]], ReverseWalk]
"""Makes a `ReverseWalk` over (sources, the ops to walk, where to emit): what the lowering pass hands a rule
that differentiates (ONNX's Gradient), since the gradient clauses sit a layer above the operator rules."""


class LowerContext:
    """What a rule's `lower` uses to build kernel ops: an insertion point, the node's result types and
    a place for build notes.

    `emit(op)` inserts `op` before the node being lowered and returns it; `result_types` are the
    node's outputs' `!tensor_axes.tensor` types after name-axes; `note(text, node)` leaves a build
    note (`loam build` prints it), one per distinct text, naming the nodes that left it;
    `differentiate`, where the lowering pass gives one, starts a reverse-mode walk (`ReverseWalk`);
    `region(key)` lowers one of the node's regions (`regions`, where the node holds any);
    `int8_activations` is the build's option of that name (None: not given, each rule's default).
    """

    def __init__(
        self,
        emit: Callable[[Operation], Operation],
        result_types: Sequence[Any],
        notes: dict[str, list[str]] | None = None,
        differentiate: Differentiator | None = None,
        regions: Callable[[str], Region] | None = None,
        int8_activations: bool | None = None,
    ) -> None:
        self.emit = emit
        self.result_types = list(result_types)
        self.notes = notes if notes is not None else {}
        self.differentiate = differentiate
        self.regions = regions
        self.int8_activations = int8_activations

    def note(self, text: str, node: NodeInfo) -> None:
        """Leave build note `text` for `node`; the nodes that leave one text share one note."""
        self.notes.setdefault(text, []).append(node.name)

    def region(self, key: str) -> Region:
        """The node's region `key` (an If's `then_branch`, a Loop's `body`) lowered to kernel ops: its
        block takes arguments of the types the region's block has, and reads the enclosing scope's values
        as the kernel ops that compute them."""
        if self.regions is None:
            raise AssertionError(f"lowering a node without regions asked for its region '{key}'")
        return self.regions(key)


class Stage0Walk(Protocol):
    """Stage 0 over one graph's block (`loam.passes.stage0`), as a rule drives it for its node
    (`OpRule.stage0`): what it knows of each value, the extent scope its conditions go to, and its steps."""

    facts: dict[SSAValue, Facts]
    scope: ExtentScope

    def inputs(self, op: NodeOp) -> list[Facts | None]:
        """What stage 0 knows of each input of `op` (None: an absent optional input)."""
        ...

    def infer(self, op: NodeOp, info: NodeInfo, rule: OpRule) -> None:
        """`rule.infer` over the inputs' facts gives the outputs; a node whose every output it evaluates
        folds to constants."""
        ...

    def branch(self, op: NodeOp, key: str, info: NodeInfo) -> list[Facts]:
        """Stage 0 over region `key` of `op`, a branch that reads the scope around it and takes no inputs
        of its own, in a copy of this scope (what it owes is checked at its top): the facts of the values
        it returns."""
        ...

    def nested(self, graph_name: str, within: str) -> Stage0Walk:
        """A walk over a region's block named `graph_name`, in a copy of this scope; `within` is how
        its messages name the node that holds it."""
        ...

    def settle(self, value: SSAValue, facts: Facts) -> SSAValue:
        """Record `facts` for `value` (retyped to say them); the value, retyped."""
        ...

    def run_ops(self, block: Block) -> None:
        """Stage 0 over each op of `block`, in order."""
        ...

    def close_region(self, block: Block, header: Operation) -> None:
        """Drop the folded values nothing in `block` reads; check what the region owes right after its
        `header`."""
        ...

    def fold(self, op: NodeOp, info: NodeInfo, outputs: Sequence[Facts]) -> None:
        """Replace `op` by constants holding the values of `outputs` (every one known)."""
        ...

    def settle_results(self, op: NodeOp, info: NodeInfo, outputs: Sequence[Facts]) -> None:
        """Settle each result of `op` with its facts; bind the lengths only the run knows once it has run."""
        ...


class AxesWalk(Protocol):
    """A walk giving every value named axes, as a rule drives it for its node (`OpRule.node_axes`):
    name-axes (`loam.passes.name_axes`), and the layout drafter (`loam.driver.draft`), which takes axis
    variables where name-axes takes names from the layout and unifies them."""

    def input_axes(self, op: NodeOp) -> list[tuple[Axis, ...] | None]:
        """The axes of each input of `op` (None: an absent optional input)."""
        ...

    def branch_axes(self, op: NodeOp, key: str) -> list[tuple[Axis, ...]]:
        """Walk region `key` of `op`, a branch reading the scope around it (the rules scoped to its graph
        may relabel a graph input there): the axes of the values it returns."""
        ...

    def body_axes(self, op: NodeOp, key: str, given: Sequence[SSAValue | None]) -> list[tuple[Axis, ...]]:
        """Walk region `key` of `op`, whose block's arguments enter under the axes of the outer values
        `given` (None: as the walk names a tensor of the arguments' own name): the axes of the values it
        returns."""
        ...

    def one_axis(self, a: Axis, b: Axis) -> Axis | None:
        """Axes `a` and `b`, of one length, made one axis where the walk can (the drafter unifies their
        variables); None where a name is the layout's to give (name-axes)."""
        ...


class OpRule:
    """Base class of the operator rules; subclasses set `op_types` and override what applies."""

    op_types: tuple[str, ...] = ()
    # The domain of `op_types`: "" for ONNX's own operators, else another (`com.microsoft`), whose
    # rules `loam.ops.DOMAIN_RULES` holds apart.
    domain: str = ""
    # The attributes the rule reads; any other stops the build, so an attribute whose meaning the
    # rule would ignore (an old opset's `broadcast` and `axis`, say) never yields a wrong number.
    attributes: frozenset[str] = frozenset()
    # What docs/operators.md says of the rule (generated from these, so it cannot drift): the first
    # opset the rule reads (older models are refused), the element types it computes, and what it
    # does not do yet.
    first_opset: int = 1
    # Who defines an operator of the default domain that ONNX does not (onnxruntime's
    # SimplifiedLayerNormalization); "" for ONNX's own.
    defined_by: str = ""
    elem_types: tuple[str, ...] = ("f32",)
    limitations: str = ""
    # The kernel ops `lower` emits (docs/operators.md lists them; the conformance suite holds every
    # node it builds to them).
    kernels: tuple[str, ...] = ()
    # Whether output 0 holds only elements of input 0 (moved, not computed), so stage 0 carries a
    # value span (`Facts.span`) through it.
    keeps_values: bool = False

    def check_attributes(self, node: NodeInfo, names: Sequence[str]) -> None:
        """Refuse an attribute the rule does not read, or one ONNX does not define for the operator
        at the model's opset (a rule shared by several operators reads the union of theirs)."""
        defined = schema_attributes(node.op_type, node.since) if node.domain in ("", "ai.onnx") else None
        foreign = sorted(n for n in names if defined is not None and n not in defined)
        if foreign:
            from loam.core.errors import ModelError

            raise ModelError(
                f"{node.where()}: attribute{'s' if len(foreign) > 1 else ''} {', '.join(repr(n) for n in foreign)} "
                f"{'are' if len(foreign) > 1 else 'is'} not defined for {node.op_type} at opset {node.since}"
            )
        unknown = sorted(n for n in names if n not in self.attributes)
        if unknown:
            raise node.unsupported(
                f"attribute{'s' if len(unknown) > 1 else ''} {', '.join(repr(n) for n in unknown)} "
                f"of opset {node.since} {'are' if len(unknown) > 1 else 'is'} not supported"
            )

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        raise node.unsupported("stage 0 has no rule for this operator")

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        """Named axes of each output; `None` marks an axis the layout must name."""
        return [tuple(None for _ in f.shape) for f in outputs]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        raise node.unsupported("no kernel computes this operator yet")

    def stage0(self, stage: Stage0Walk, op: NodeOp, info: NodeInfo) -> None:
        """Stage 0 over node `op`: its outputs as `infer` gives them from its inputs' facts (folded where
        it evaluates every one).  An operator whose node holds regions checks them first."""
        stage.infer(op, info, self)

    def node_axes(
        self, walk: AxesWalk, op: NodeOp, info: NodeInfo, outputs: Sequence[Facts]
    ) -> list[Sequence[Axis | None]]:
        """Named axes of each output of node `op`, as name-axes and the layout drafter ask: `axes` over
        its inputs' axes (`None` where the layout names the axis).  An operator whose node holds regions
        walks them first."""
        return list(self.axes(info, walk.input_axes(op), outputs))


def float_attr(node: NodeInfo, key: str, default: float) -> float:
    """ONNX float attribute `key` (an int is taken as its value); any other kind stops the build.

    Rules read attributes through these typed readers so a malformed model (`alpha="x"`, a list
    where ONNX wants a scalar) ends in a ShapeError naming the node, not in a Python exception.
    """
    value = node.attr(key, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise node.fail(f"attribute '{key}' must be a float, got {value!r}")
    return float(value)


def elem_of(node: NodeInfo, key: str, code: SupportsInt) -> ElementType:
    """The element type ONNX's enum number `code` (attribute `key`) names; a number naming none
    stops the build."""
    try:
        return by_onnx(int(code))
    except KeyError:
        raise node.fail(f"'{key}' is {code}, which is no ONNX element type") from None


def elem_attr(node: NodeInfo, key: str, required: bool = False) -> ElementType | None:
    """The element type attribute `key` names (Cast's `to`, EyeLike's `dtype`, ...); None where the
    node leaves it out, unless it is `required`."""
    code = node.attr(key, None)
    if code is None:
        if required:
            raise node.fail(f"has no '{key}' attribute")
        return None
    return elem_of(node, key, code)


def int_attr(node: NodeInfo, key: str, default: int, choices: Sequence[int] | None = None) -> int:
    """ONNX int attribute `key`, one of `choices` when given; any other kind or value stops the build."""
    value = node.attr(key, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise node.fail(f"attribute '{key}' must be an integer, got {value!r}")
    if choices is not None and int(value) not in choices:
        raise node.fail(f"attribute '{key}' must be one of {', '.join(map(str, choices))}, got {value}")
    return int(value)


@functools.cache
def schema_attributes(op_type: str, opset: int) -> frozenset[str] | None:
    """The attributes ONNX defines for `op_type` (default domain) at `opset`; None without a schema."""
    import onnx.defs

    try:  # onnx takes a C int: a version past it reads as the newest schema, one below 0 as none (as 0 does)
        schema = onnx.defs.get_schema(op_type, max(0, min(opset, 2**31 - 1)), "")
    except onnx.defs.SchemaError:
        return None
    return frozenset(schema.attributes)


class KeepsAxes(OpRule):
    """A rule whose one output carries its first input's axes (a cast, a cumulative sum, an LRN)."""

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        assert inputs[0] is not None
        return [inputs[0]]


def require_arity(node: NodeInfo, inputs: Sequence[object], low: int, high: int | None = None) -> None:
    """Stop the build when the node's input count is outside [low, high]."""
    high = low if high is None else high
    present = len(inputs)
    if not low <= present <= high:
        want = str(low) if low == high else f"{low} to {high}"
        raise node.fail(f"takes {want} inputs, got {present}")


def same_axis(node: NodeInfo, a: Axis, b: Axis, where: str, message: str | None = None) -> None:
    """Two axes the operator makes one (a contraction, a broadcast, concatenation's other axes)
    must carry one name.

    `where` says where they meet (`"at output axis 1"`); `message` replaces the whole explanation
    when the operator words it better.  The layout drafter (`loam.driver.draft`) turns this check into a
    unification of the two names.
    """
    from loam.core.errors import AxisError

    hook = _UNIFY.get()
    if hook is not None:
        hook(a, b)
        return
    if a.name != b.name:
        raise AxisError(
            f"{node.where()}: "
            + (
                message
                or f"axis {a.name} meets axis {b.name} {where}; two axes meet only where the layout gives them one name"
            )
        )


UNIT_AXIS = "Unit"
"""The stem of the names of extent-1 axes no layout names (`Unit`, `Unit1`, ...)."""


def is_unit_axis(axis: Axis) -> bool:
    """Whether `axis` is an extent-1 axis `unit_axes` named (`Unit`, `Unit1`, ...)."""
    stem, digits = axis.name[: len(UNIT_AXIS)], axis.name[len(UNIT_AXIS) :]
    return stem == UNIT_AXIS and (digits == "" or digits.isdigit()) and not axis.parts and axis.extent == Poly.const(1)


def unit_axes(given: Sequence[Axis | None]) -> list[Axis]:
    """`given` with each open axis named by its position (`Unit`, `Unit1`, ...) and extent 1.

    A one-element value folds into the Expr that reads it, or stretches to whatever it meets, so
    its unit axes need no name from the layout.
    """
    from loam.dialects.tensor_axes import Axis

    return [a or Axis.named(f"{UNIT_AXIS}{i or ''}", 1) for i, a in enumerate(given)]


# While the layout drafter runs, a function unifying two axes that must be one (see `same_axis`).
_UNIFY: contextvars.ContextVar[Callable[[Axis, Axis], None] | None] = contextvars.ContextVar("unify", default=None)


@contextlib.contextmanager
def axes_unified_by(unify: Callable[[Axis, Axis], None]) -> Iterator[None]:
    """Within the block, `same_axis` calls `unify(a, b)` instead of checking that the names agree."""
    token = _UNIFY.set(unify)
    try:
        yield
    finally:
        _UNIFY.reset(token)


def broadcast_shapes(node: NodeInfo, shapes: Sequence[tuple[Poly, ...]]) -> tuple[Poly, ...]:
    """ONNX multidirectional (numpy) broadcasting of extents, aligned at the end.

    Two extents meet where they are equal or one is 1.  Symbolic extents meet by `loam.core.owed`'s
    rules (a derived symbol read as its operand, two symbolic lengths owed equal); two numbers that
    differ stop the build naming the node and the output axis.
    """
    from loam.core import owed

    rank = max((len(s) for s in shapes), default=0)
    one = Poly.const(1)
    out: list[Poly] = []
    for i in range(rank):
        extent = one
        for s in shapes:
            j = i - (rank - len(s))
            if j < 0:
                continue
            d = s[j]
            if d == one or d == extent:
                continue
            if extent == one:
                extent = d
                continue
            if extent.is_const and d.is_const:
                raise node.fail(f"cannot broadcast extents {extent} and {d} at output axis {i}")
            extent = owed.broadcast(extent, d, node, f"broadcast at output axis {i}")
        out.append(extent)
    return tuple(out)


def broadcast_axes(
    node: NodeInfo, operands: Sequence[tuple[Axis, ...]], *, onto: tuple[Axis, ...] | None = None
) -> tuple[Axis, ...]:
    """Named-axes broadcasting: axes meeting at one position must carry one name.

    An axis of extent 1 holds one element, so it stretches to whatever it meets and may carry a
    name of its own; any other two names meeting stop the build naming both.  With `onto`, the
    operands broadcast one way onto that axis list (Gemm's C, an Expand).
    """
    lists = list(operands) if onto is None else [onto, *operands]
    rank = max((len(a) for a in lists), default=0)
    one = Poly.const(1)
    out: list[Axis] = []
    for i in range(rank):
        chosen: Axis | None = None
        for axes in lists:
            j = i - (rank - len(axes))
            if j < 0:
                continue
            axis = axes[j]
            if chosen is None or (chosen.extent == one and axis.extent != one):
                chosen = axis
            elif axis.extent != one:
                same_axis(node, chosen, axis, f"at output axis {i}")
        assert chosen is not None
        out.append(chosen)
    return tuple(out)
