"""StableHLO `while` and `case` as ONNX Loop and If: their regions become subgraphs.

    while (cond, body)          Loop with no trip count: its first condition is `cond` of the initial
                                values; its body is `body`, then `cond` of what `body` returns
    case (index, branches)      If(index == 0, branch 0, If(index == 1, branch 1, ... branch N-1)):
                                an index out of range takes the last branch, as StableHLO says

A value that `while`'s body returns unchanged (the weights and the inputs a `lax.scan` reads, its
length) is not carried: the subgraphs read it from the graph around them, as ONNX bodies may, so a
loop over a model's weights copies none of them per iteration.  Every other value is a Loop
loop-carried value, whose extents stay fixed across iterations (StableHLO's types say so; Loam's
Loop rule checks it).  Regions read values of the enclosing function directly, as `case` branches
JAX prints do.

The reader (`loam.frontends.stablehlo`) passes `lower_control` a function that lowers a region's
block with its arguments bound, so a region holds anything a function body may: calls, nested loops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from xdsl.ir import Block, Operation, Region, SSAValue

from loam.core.dtypes import ElementType, by_name
from loam.dialects import stablehlo as hlo
from loam.dialects.graph import NodeOp, NoneOp, ReturnOp, SubgraphAttr, SubgraphInfoOp, UnknownType, set_name_hint
from loam.dialects.graph import TensorType as GraphTensorType
from loam.frontends.stablehlo_broadcast import full
from loam.frontends.stablehlo_builder import GraphBuilder, LoweringError, Operand, Shape, shape_and_element

__all__ = ["RegionLowering", "lower_control"]

RegionLowering = Callable[[Block, Sequence[Operand]], list[Operand]]
"""Lowers a region's block, its arguments bound to the operands given; the values it returns."""


def lower_control(b: GraphBuilder, op: Operation, operands: list[Operand], region: RegionLowering) -> list[Operand]:
    """The operands of a `while`'s or a `case`'s results."""
    if isinstance(op, hlo.WhileOp):
        return _while(b, op, operands, region)
    if isinstance(op, hlo.CaseOp):
        return _case(b, op, operands[0], region)
    raise LoweringError("not a control-flow op")


def _results(op: Operation) -> list[tuple[Shape, ElementType]]:
    """Each result's shape and element type."""
    return [shape_and_element(r.type) for r in op.results]


def _output_name(value: SSAValue) -> str:
    """The ONNX name of a value a `GraphBuilder` node gives."""
    node = value.owner
    assert isinstance(node, NodeOp)
    return node.output_names[0]


def _operands(values: Sequence[SSAValue], results: Sequence[tuple[Shape, ElementType]]) -> list[Operand]:
    return [Operand(v, shape, elem) for v, (shape, elem) in zip(values, results, strict=True)]


def _subgraph(
    b: GraphBuilder,
    what: str,
    inputs: Sequence[tuple[str, GraphTensorType]],
    build: Callable[[list[SSAValue]], list[Operand]],
) -> Region:
    """A subgraph named `<op>_<what>` taking `inputs` (name, type), returning what `build` gives for its
    arguments, each through an Identity named after the op (its outputs' ONNX names)."""
    base = b.base
    names = [b.unique(f"{base}_{what}_{name}") for name, _ in inputs]
    block = Block(arg_types=[t for _, t in inputs])
    for arg, name in zip(block.args, names, strict=True):
        set_name_hint(arg, name)
    with b.region() as ops:
        values = build(list(block.args))
        b.base = base
        returned = [b.node("Identity", [full(b, v)], what=f"{what}_out") for v in values]
        header = SubgraphInfoOp(b.unique(f"{base}_{what}"), names)
    out_names = [_output_name(r) for r in returned]
    block.add_ops([header, *ops, ReturnOp(returned, out_names, [UnknownType()] * len(returned))])
    return Region(block)


def _case(b: GraphBuilder, op: hlo.CaseOp, index: Operand, region: RegionLowering) -> list[Operand]:
    results = _results(op)
    branches = list(op.branches)

    def chain(first: int) -> list[SSAValue]:
        """The outputs of branch `first`, or of an If choosing among branches `first`... ."""
        if first == len(branches) - 1:
            return [full(b, v) for v in region(branches[first].block, [])]
        name = b.unique(b.base if first == 0 else f"{b.base}_from{first}")  # before the branches' nodes
        k = b.constant(np.array(first), index.elem, f"is_{first}")
        cond = b.node("Equal", [full(b, index), k], what=f"is_{first}")
        then = _subgraph(b, f"branch{first}", [], lambda _: region(branches[first].block, []))
        other = _subgraph(b, f"after{first}", [], lambda _: _operands(chain(first + 1), results))
        return b.nodes(
            "If",
            [cond],
            len(results),
            {"then_branch": SubgraphAttr(0), "else_branch": SubgraphAttr(1)},
            [then, other],
            name=name,
        )

    return _operands(chain(0), results)


def _while(b: GraphBuilder, op: hlo.WhileOp, operands: list[Operand], region: RegionLowering) -> list[Operand]:
    body_args = op.body.block.args
    returned = op.body.block.last_op
    assert isinstance(returned, hlo.ReturnOp)
    carried = [i for i, v in enumerate(returned.values) if v is not body_args[i]]
    if not carried:  # nothing changes: the loop computes nothing (or never ends)
        return list(operands)
    name = b.unique(b.base)  # before the body's nodes
    first_cond = full(b, region(op.cond.block, operands)[0])
    initial = [full(b, operands[i]) for i in carried]
    results = _results(op)
    i64, boolean = by_name("i64"), by_name("bool")

    def body(args: list[SSAValue]) -> list[Operand]:
        values = list(operands)
        for i, arg in zip(carried, args[2:], strict=True):
            values[i] = Operand(arg, *results[i])
        after = region(op.body.block, values)
        next_values = list(operands)
        for i in carried:
            next_values[i] = after[i]
        cond = region(op.cond.block, next_values)[0]
        return [cond, *(after[i] for i in carried)]

    inputs = [
        ("iteration", GraphTensorType(i64, [])),
        ("cond", GraphTensorType(boolean, [])),
        *((f"carried{i}", GraphTensorType(results[i][1], list(results[i][0]))) for i in carried),
    ]
    loop_body = _subgraph(b, "body", inputs, body)
    none = NoneOp()
    b.ops.append(none)
    outs = b.nodes(
        "Loop", [none.result, first_cond, *initial], len(carried), {"body": SubgraphAttr(0)}, [loop_body], name=name
    )
    values = list(operands)
    for i, out in zip(carried, outs, strict=True):
        values[i] = Operand(out, *results[i])
    return values
