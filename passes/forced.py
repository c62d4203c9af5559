"""Owed conditions that pin a symbol to one number: said at build time, naming the declarations behind them.

ONNX's dim_params are one value each, so an owed condition such as `sequence_length == past_sequence_length
+ sequence_length` is right to hold the run to it.  But that condition can only hold with an empty past:
the inputs' own declarations (optimum's merged decoder gives `attention_mask` the new tokens' length
although its with-past branch feeds it past + new columns) leave the run one value for
`past_sequence_length`, and inside an If branch it makes the branch useless for what it was written
for.  The run would stop with a ShapeError on the first decode step; this says so before any run.

`forced_extent_notes` reads the `shape_poly.owe` ops stage 0 left (the graph's and each branch's and
body's) and, for each that fixes a symbol (an equality linear in one symbol, or a length owed at most
0), writes a build note: the condition, the node relying on it, the subgraph it is in, and each input
axis that declares a symbol it reads, with what to change (`interface`, `dims`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from loam.core.owed import declarations
from loam.core.poly import Poly, derived_call
from loam.dialects.dim_params import read_spelling
from loam.dialects.graph import GraphOp, NodeOp, SubgraphInfoOp, TensorType
from loam.dialects.shape_poly import OweOp

__all__ = ["declared_axes", "forced_extent_notes", "forced_value"]


def forced_value(slack: Poly, *, equal: bool) -> tuple[str, int] | None:
    """(symbol, value) when `slack == 0` (`equal`) or `slack >= 0` leaves a plain symbol one value:
    `a*s + c == 0` with `a` dividing `c`, or `-a*s >= 0` for a length `s`."""
    symbols = slack.symbols
    if len(symbols) != 1:
        return None
    (symbol,) = symbols
    if derived_call(symbol) is not None:
        return None
    coeff, const = 0, 0
    for mono, c in slack.terms:
        if not mono:
            const = c
        elif mono == ((symbol, 1),):
            coeff = c
        else:
            return None  # not linear
    if equal:
        return (symbol, -const // coeff) if const % coeff == 0 and -const // coeff >= 0 else None
    return (symbol, 0) if coeff < 0 and const == 0 else None


def declared_axes(graph: GraphOp) -> dict[str, list[str]]:
    """Each symbol -> the graph input axes whose declared dim reads it (`attention_mask axis 1`); read
    before stage 0 retypes the inputs."""
    found: dict[str, list[str]] = {}
    for arg, name in zip(graph.body.block.args, graph.input_names.data, strict=True):
        t = arg.type
        for axis, dim in enumerate(t.shape or () if isinstance(t, TensorType) else ()):
            if not isinstance(dim, str):
                continue
            spelled = read_spelling(dim)
            for symbol in spelled.symbols if spelled is not None else {dim}:
                found.setdefault(symbol, []).append(f"{name.data} axis {axis} ({dim})")
    return found


def _place(op: Operation) -> str:
    """Where an owed condition sits: the graph, or `subgraph 'then_branch' of If node 'n'`."""
    block = op.parent_block()
    first = block.first_op if block is not None else None
    node = op.parent_op()
    if isinstance(first, SubgraphInfoOp) and isinstance(node, NodeOp):
        return f"in subgraph '{first.graph_name.data}' of {node.op_type} node '{node.node_name}'"
    return "in the graph"


def forced_extent_notes(module: ModuleOp, declared: dict[str, list[str]]) -> list[str]:
    """A note per owed condition that leaves a symbol one value (see the module docstring);
    `declared` maps each symbol to the input axes declaring it (`declared_axes`)."""
    notes: list[str] = []
    seen: set[tuple[str, int, str]] = set()
    for op in module.walk():
        if not isinstance(op, OweOp):
            continue
        lhs, rhs = op.lhs.poly, op.rhs.poly
        forced = forced_value(rhs - lhs, equal=op.equal)
        if forced is None:
            continue
        symbol, value = forced
        place = _place(op)
        if (symbol, value, place) in seen:
            continue
        seen.add((symbol, value, place))
        relation = "==" if op.equal else "<="
        symbols = sorted(lhs.symbols | rhs.symbols)
        said = declarations(symbols, declared)
        notes.append(
            f"the run can only pass with {symbol} = {value}: {op.reason.data} {place} needs {lhs} {relation} {rhs}"
            + (f", and {said}" if said else "")
            + ". If the model means another length there, re-declare the input with the `interface` option "
            "(`[interface] NAME = [dims]`, `--interface NAME=DIM,...`); if it means this one, fix it with "
            f"`[dims] {symbol} = {value}`"
        )
    return notes
