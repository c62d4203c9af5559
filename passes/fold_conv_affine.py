"""fold-conv-affine: a per-channel affine map after a convolution goes into its weights, computed at load.

Why: inference's BatchNormalization after a Conv computes, for each output channel m,
`(c - mean[m]) / sqrt(var[m] + eps) * scale[m] + bias[m]` over every element of the Conv's output:
five passes over memory on every call.  That map is `c * A[m] + B[m]`, and `c * A[m]` is the Conv
with its weights' output channel m scaled by `A[m]`.  So the Conv reads `W * A` instead of `W`, and
what is left per call is `c + B` (and whatever followed: a ReLU), one pass.  `W * A`, `A` and `B`
read only weights, so the numpy module computes them once, when `Weights` is made
(`loam.passes.weight_only`).  onnxruntime folds the same way (its Conv+BatchNormalization fusion), and
so the numbers are the same within float32 rounding, not bit for bit: the products are reassociated.

Input: kernel IR after `fuse`, where a BatchNormalization is a `kernel.zip`, usually with the
activation after it fused in.  A zip Z is folded into a `kernel.conv` C when
  - C's weights (and bias, if it has one) only weights determine, and Z is C's result's only reader;
  - Z's other operands only weights and constants determine;
  - some step P of Z's `Expr` is affine in C's result, `c * A + B` with A and B read from those
    other operands (steps of `add`, `sub`, `neg`, `identity`, and `mul`/`div` by a value that does
    not read c), A varies only along the output-channel axis, and every step after P reads c only
    through P;
  - the element type is f32.
Output: C reads `kernel.zip(W, A...)` (W times A, regrouped to W's rank) as its weights and no
bias, and Z becomes a zip over C's result and B computing its Expr with step P replaced by `c + B`
(C's bias b, if it had one, is part of B: `(c + b) * A + B0 = c * A + (b * A + B0)`).  The build
notes name each fold.  The numpy backend runs this pass; the WGSL one computes every kernel on the
device per call, so moving work onto the weights would add dispatches there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from loam.core.poly import Poly
from loam.dialects import build_contract as contract
from loam.dialects.expr import Binary, Const, Convert, Expr, Operand, Select, Unary, step_args
from loam.dialects.kernel import ConvOp, ProgramOp, RegroupOp, WeightOp, ZipOp
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.ops.base import unit_axes
from loam.passes.notes import add_notes
from loam.passes.weight_only import weight_only


@dataclass(frozen=True)
class FoldConvAffinePass(ModulePass):
    """Fold each per-channel affine map after a Conv into the Conv's weights."""

    name = "fold-conv-affine"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        notes: list[str] = []
        for program in [p for p in op.walk() if isinstance(p, ProgramOp)]:
            ops = list(program.block.ops)
            fixed = {v for v in weight_only(ops, ())[1] if _static(v.type)}
            folded: set[ConvOp] = set()
            for zip_op in [o for o in ops if isinstance(o, ZipOp)]:
                # A zip may read several Convs (a residual block's two BatchNormalizations): each in turn.
                current: ZipOp | None = zip_op
                while current is not None:
                    done = next(
                        (d for c in _convs_read(current, folded) if (d := _fold(current, c, fixed)) is not None), None
                    )
                    current = None
                    if done is not None:
                        current, conv, note = done
                        folded.add(conv)
                        notes.append(note)
        if notes:
            add_notes(op, notes)


def _static(t: object) -> bool:
    return isinstance(t, AxesTensorType) and all(p.is_const for p in t.shape)


@dataclass(frozen=True)
class _Affine:
    """A step's value as `c * scale + offset`; `scale` None where the step does not read c (then
    `offset` is its value), `offset` None for zero."""

    scale: Expr | None
    offset: Expr | None


def _is_one(e: Expr) -> bool:
    return len(e.steps) == 1 and isinstance(e.steps[0], Const) and e.steps[0].value == 1.0


def _times(a: Expr | None, b: Expr) -> Expr | None:
    if a is None:
        return None
    return b if _is_one(a) else a if _is_one(b) else a * b


def _plus(a: Expr | None, b: Expr | None, op: str = "add") -> Expr | None:
    if b is None:
        return a
    if a is None:
        return b if op == "add" else -b
    return a.binary(op, b)


def _affine(expr: Expr, c: int, fixed: set[int], bias: int | None) -> list[_Affine | None]:
    """Each step of `expr` as an affine map of operand `c` over the operands in `fixed` (None where it
    is not one: it reads another operand, or c other than affinely).  Operand `c` is the Conv's
    product without its bias, plus operand `bias` when given (the Conv's bias, per channel)."""
    lin: list[_Affine | None] = []
    for step in expr.steps:
        if isinstance(step, Operand):
            if step.index == c:
                lin.append(_Affine(Expr.const(1.0), None if bias is None else Expr.operand(bias)))
            else:
                lin.append(_Affine(None, Expr.operand(step.index)) if step.index in fixed else None)
            continue
        if isinstance(step, Const):
            lin.append(_Affine(None, Expr.const(step.value, step.elem)))
            continue
        args = [a for i in step_args(step) if (a := lin[i]) is not None]
        if len(args) != len(step_args(step)):
            lin.append(None)
        elif all(a.scale is None for a in args):
            lin.append(_Affine(None, _fixed_step(step, [a.offset for a in args])))
        else:
            lin.append(_linear_step(step, args))
    return lin


def _fixed_step(step: object, args: Sequence[Expr | None]) -> Expr:
    """A step over values that do not read c, as an expression of the fixed operands."""
    values = [a if a is not None else Expr.const(0.0) for a in args]
    if isinstance(step, Unary):
        return values[0].unary(step.op)
    if isinstance(step, Binary):
        return values[0].binary(step.op, values[1])
    if isinstance(step, Select):
        return Expr.select(*values)
    assert isinstance(step, Convert)
    return values[0].cast(step.elem)


def _linear_step(step: object, args: Sequence[_Affine]) -> _Affine | None:
    """A step reading c through `args`, when it stays affine in c."""
    if isinstance(step, Unary) and step.op in ("identity", "neg"):
        (a,) = args
        if step.op == "identity":
            return a
        assert a.scale is not None  # a step reading c reads it through its one operand
        return _Affine(-a.scale, None if a.offset is None else -a.offset)
    if not isinstance(step, Binary):
        return None
    p, q = args
    if step.op in ("add", "sub"):
        return _Affine(_plus(p.scale, q.scale, step.op), _plus(p.offset, q.offset, step.op))
    if step.op == "mul" and (p.scale is None or q.scale is None):
        k, a = (p, q) if p.scale is None else (q, p)
        factor = k.offset if k.offset is not None else Expr.const(0.0)
        return _Affine(_times(a.scale, factor), _times(a.offset, factor))
    if step.op == "div" and q.scale is None and q.offset is not None:
        return _Affine(
            p.scale / q.offset if p.scale is not None else None, p.offset / q.offset if p.offset is not None else None
        )
    return None


def _pivot(expr: Expr, c: int, lin: Sequence[_Affine | None]) -> int | None:
    """The last step affine in operand `c` through which every later step reads c."""
    reads_c: list[bool] = []
    for step in expr.steps:
        reads_c.append(step.index == c if isinstance(step, Operand) else any(reads_c[a] for a in step_args(step)))
    if not reads_c[-1]:
        return None
    for p in range(len(expr.steps) - 1, -1, -1):
        found = lin[p]
        if found is None or found.scale is None:
            continue
        later = (a for i in range(p + 1, len(expr.steps)) for a in step_args(expr.steps[i]) if reads_c[a])
        if all(a >= p for a in later):
            return p
    return None


def _rebuild(expr: Expr, root: int, replaced: int, by: Expr, operand: Sequence[int]) -> Expr:
    """Step `root` of `expr` with step `replaced` computed by `by`, reading operand `operand[i]` for i."""
    values: list[Expr] = []
    for i, step in enumerate(expr.steps[: root + 1]):
        if i == replaced:
            values.append(by)
        elif isinstance(step, Operand):
            values.append(Expr.operand(operand[step.index]))
        elif isinstance(step, Const):
            values.append(Expr.const(step.value, step.elem))
        else:
            values.append(_fixed_step(step, [values[a] for a in step_args(step)]))
    return values[root]


def _convs_read(zip_op: ZipOp, folded: set[ConvOp]) -> list[int]:
    """The operands of `zip_op` that a Conv not yet folded computes."""
    return [i for i, v in enumerate(zip_op.inputs) if isinstance(v.owner, ConvOp) and v.owner not in folded]


def _fold(zip_op: ZipOp, c: int, fixed: set[SSAValue]) -> tuple[ZipOp, ConvOp, str] | None:
    """Fold `zip_op`'s affine part in operand `c` into the Conv computing it, if it has one: the zip
    that replaces `zip_op`, the Conv, and the build note; None where it has none."""
    inputs = list(zip_op.inputs)
    conv = inputs[c].owner
    assert isinstance(conv, ConvOp)
    out = zip_op.result.type
    if (
        not all(v in fixed for v in conv.operands[1:])
        or len(list(inputs[c].uses)) != 1
        or not isinstance(out, AxesTensorType)
        or out.elem.name != "f32"
        or out.rank < 2
    ):
        return None
    expr = zip_op.expr.data
    bias = len(inputs) if len(conv.operands) == 3 else None  # read as one more operand of Z
    weight_operands = {i for i, v in enumerate(inputs) if v in fixed and i != c}
    lin = _affine(expr, c, weight_operands | ({bias} if bias is not None else set()), bias)
    p = _pivot(expr, c, lin)
    if p is None:
        return None
    pivot = lin[p]
    assert pivot is not None and pivot.scale is not None  # `_pivot` picks a step affine in c
    scale, offset = pivot.scale, pivot.offset
    if not all(_per_channel(inputs[i].type, out) for i in scale.operand_indices):
        return None
    node = zip_op.node.data
    before = InsertPoint.before(conv)
    # Z's other operands may be computed after the Conv (BatchNormalization's regrouped weights):
    # they read only weights, so they move up to just before it, where the new weights are made.
    after = _ops_after(conv)
    for i in {*scale.operand_indices, *(offset.operand_indices if offset is not None else ())} - {bias}:
        _move_before(inputs[i], conv, after)
    if bias is not None:  # the bias, per channel against Z's result: [C] -> [C, 1, 1]
        axes = unit_axes([out.axes[1], *([None] * (out.rank - 2))])
        regroup = RegroupOp(conv.operands[2], AxesTensorType(out.elem, axes), node)
        Rewriter.insert_op(regroup, before)
        inputs.append(regroup.result)

    def zip_of(expr: Expr, operands: Sequence[SSAValue], t: AxesTensorType, hint: str) -> SSAValue:
        made = ZipOp(operands, expr, t, node)
        if SSAValue.is_valid_name(hint):  # a node's name may hold characters an SSA name may not
            made.result.name_hint = hint
        Rewriter.insert_op(made, before)
        return made.result

    weights = conv.operands[1]
    w_type = weights.type
    assert isinstance(w_type, AxesTensorType)
    a_reads = sorted(scale.operand_indices)
    a_operands = [_as_weight_rank(inputs[i], out, w_type, node, before) for i in a_reads]
    a_expr = Expr.operand(0) * scale.remap_operands({i: k + 1 for k, i in enumerate(a_reads)})
    conv.operands = (conv.operands[0], zip_of(a_expr, [weights, *a_operands], w_type, f"{_hint(weights)}_folded"))

    # The zip left: the Expr after P, with P computed as c + B (B a zip of its own when it reads weights).
    tail_operands: list[SSAValue] = [conv.results[0]]
    by = Expr.operand(0)
    if offset is not None and offset.operand_indices:
        b_reads = sorted(offset.operand_indices)
        b_types = [t for i in b_reads if isinstance(t := inputs[i].type, AxesTensorType)]
        assert len(b_types) == len(b_reads)  # a kernel op reads named-axes tensors only
        b_type = _broadcast_type(b_types, out)
        b_expr = offset.remap_operands({i: k for k, i in enumerate(b_reads)})
        tail_operands.append(zip_of(b_expr, [inputs[i] for i in b_reads], b_type, f"{node}_offset"))
        by = by + Expr.operand(1)
    elif offset is not None:
        by = by + offset
    first = len(tail_operands)
    operand = [first + i for i in range(len(inputs))]
    tail = _rebuild(expr, len(expr.steps) - 1, p, by, operand)
    tail, kept = tail.dedupe_operands([*tail_operands, *inputs])
    reads = [[*tail_operands, *inputs][k] for k in kept]
    new = ZipOp(reads, tail, out, node)
    members = contract.FUSED.get(zip_op)  # the nodes the fuse pass composed into Z, as the report lists them
    if members is not None:
        contract.FUSED.set(new, members)
    new.result.name_hint = zip_op.result.name_hint
    Rewriter.replace_op(zip_op, new)
    names = list(members) if members is not None else [node]
    listed = ", ".join(f"'{n}'" for n in names)
    note = (
        f"node{'s' * (len(names) > 1)} {listed}: the per-channel scale folded into Conv '{conv.node.data}''s "
        "weights and the offset into one add, both computed once when Weights is made"
    )
    return new, conv, note


def _ops_after(op: Operation) -> set[Operation]:
    found: set[Operation] = set()
    current = op.next_op
    while current is not None:
        found.add(current)
        current = current.next_op
    return found


def _move_before(value: SSAValue, anchor: Operation, after: set[Operation]) -> None:
    """Move the op computing `value`, and those it reads, from `after` to just before `anchor`."""
    owner = value.owner
    if not isinstance(owner, Operation) or owner not in after:
        return
    for operand in owner.operands:
        _move_before(operand, anchor, after)
    after.discard(owner)
    owner.detach()
    Rewriter.insert_op(owner, InsertPoint.before(anchor))


def _hint(value: SSAValue) -> str:
    """The name the folded weights take after the weights they scale (an ONNX name made an SSA name)."""
    owner = value.owner
    name = owner.weight_name.data if isinstance(owner, WeightOp) else value.name_hint or "conv_weights"
    name = re.sub(r"[^A-Za-z0-9_$.-]", "_", name)
    return name if name[:1].isalpha() or name[:1] == "_" else f"w_{name}"


def _aligned(t: AxesTensorType, out: AxesTensorType) -> list[Poly]:
    """`t`'s extents placed against `out`'s axes, aligned at the end (1 where `t` has no axis)."""
    return [Poly.const(1)] * (out.rank - t.rank) + list(t.shape)


def _per_channel(t: object, out: AxesTensorType) -> bool:
    """Whether an operand of type `t` varies, against `out`, along axis 1 (the Conv's channels) alone."""
    if not isinstance(t, AxesTensorType) or t.rank > out.rank:
        return False
    return all(e.is_const and e.const_value == 1 for i, e in enumerate(_aligned(t, out)) if i != 1)


def _as_weight_rank(
    value: SSAValue, out: AxesTensorType, w_type: AxesTensorType, node: str, at: InsertPoint
) -> SSAValue:
    """`value` (per channel against the Conv's output) regrouped to the weights' rank: channel first."""
    t = value.type
    assert isinstance(t, AxesTensorType)
    channel = _aligned(t, out)[1]
    first: Axis | None = w_type.axes[0] if not (channel.is_const and channel.const_value == 1) else None
    axes = unit_axes([first, *([None] * (w_type.rank - 1))])
    regroup = RegroupOp(value, AxesTensorType(t.elem, axes), node)
    Rewriter.insert_op(regroup, at)
    return regroup.result


def _broadcast_type(types: Sequence[AxesTensorType], out: AxesTensorType) -> AxesTensorType:
    """The type operands of `types` broadcast to, named after `out`'s axes (unit axes where they stay 1)."""
    rank = max(t.rank for t in types)
    axes: list[Axis | None] = []
    for i in range(out.rank - rank, out.rank):
        extents = [_aligned(t, out)[i] for t in types]
        one = all(e.is_const and e.const_value == 1 for e in extents)
        axes.append(None if one else out.axes[i])
    return AxesTensorType(out.elem, unit_axes(axes))
