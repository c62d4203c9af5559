"""What each StableHLO op becomes in the `graph` dialect: ONNX nodes with the same meaning.

`loam.frontends.stablehlo` walks a function and calls `lower_op` on each op; the rules here emit
ONNX nodes through a `GraphBuilder`, so every later pass sees an ordinary ONNX graph:

    add/subtract/multiply/divide/maximum/minimum/power   Add/Sub/Mul/Div/Max/Min/Pow
    and/or/not                                           And/Or/Not (booleans)
    negate/abs/exponential/log/tanh/logistic/sqrt        Neg/Abs/Exp/Log/Tanh/Sigmoid/Sqrt
    rsqrt                                                Reciprocal(Sqrt)
    exponential_minus_one, log_plus_one                  composed from Exp/Log, exact near 0 (Kahan)
    is_finite, clamp, xor                                Not(IsInf or IsNaN), Min(Max), BitwiseXor/Xor
    sine/cosine/tan/sign/floor/ceil/round_nearest_even   Sin/Cos/Tan/Sign/Floor/Ceil/Round
    chlo.erf/sinh/cosh/asin/acos/atan, chlo.square       Erf/Sinh/Cosh/Asin/Acos/Atan, Mul(x, x)
    remainder                                            Mod (fmod = 1)
    cbrt, atan2                                          composed from Sign/Abs/Pow, Atan/Where (floats)
    maximum(x, 0)                                        Relu (a zero constant on either side)
    compare EQ/NE/LT/LE/GT/GE                            Equal/Not(Equal)/Less/LessOrEqual/Greater/GreaterOrEqual
    select, convert                                      Where, Cast
    constant                                             Constant (a splat: its one element), or an
                                                         embedded initializer (a weight carrying data)
    broadcast_in_dim (and dynamic_)                      nothing, an Unsqueeze or a Transpose (see below)
    reshape (and dynamic_), transpose, concatenate       Reshape, Transpose, Concat
    slice, iota (and dynamic_)                           Slice, Range (+ Unsqueeze)
    reverse, pad                                         Slice (step -1); Pad and Slice (+ Reshape for
                                                         interior padding)
    dot_general                                          MatMul (+ Transpose), else Einsum
    reduce (body add/maximum/minimum/multiply)           ReduceSum/ReduceMax/ReduceMin/ReduceProd
    reduce (body or/and, booleans: jnp.any, jnp.all)     ReduceMax/ReduceMin
    get_dimension_size                                   Shape + Reshape + Cast
    convolution, reduce_window                           Conv, MaxPool (`loam.frontends.stablehlo_windows`)
    while, case                                          Loop, If (`loam.frontends.stablehlo_control`)
    select_and_scatter (the gradient of max pooling)     Slice/compare/Where per tap + ScatterElements (add)
    dynamic_slice, dynamic_update_slice                  Gather at clamped starts, ScatterND
    gather (the embedding form: rows of a table)         Clip + Gather
    gather (general), scatter                            Gather / ScatterND at computed flat positions
    sort (JAX's LT or GT comparator)                     TopK of every element + GatherElements
                                                         (these five: `loam.frontends.stablehlo_indexing`)

Broadcasts are kept lazy.  StableHLO spells every broadcast out (`broadcast_in_dim` to the full
shape) where ONNX's elementwise ops broadcast implicitly, right-aligned, as numpy does.  So an
`Operand` may stand for a graph value of a smaller shape that broadcasts to its StableHLO shape;
elementwise ops read it as it is, and any other op (or a function result) first expands it
(`Expand`).  A bias added after a product thus reads the bias itself, as in an ONNX export, and
the two front ends reach the same kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IntAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from loam.core.dtypes import ElementType, by_name
from loam.dialects import stablehlo as hlo
from loam.dialects.graph import InitializerOp, ListAttr, NodeOp, TensorDataAttr, UnknownType, set_name_hint
from loam.dialects.graph import TensorType as GraphTensorType

__all__ = ["GraphBuilder", "LoweringError", "Operand", "element_type", "lower_op", "shape_of"]

Dim = int | None  # an extent, None for StableHLO's `?`
Shape = tuple[Dim, ...]


class LoweringError(Exception):
    """An op the reader cannot express in ONNX; the reader adds the op's name and place."""


def element_type(t: Attribute) -> ElementType:
    """Loam's element type of a StableHLO element type (i1 is bool, signless integers are signed)."""
    if isinstance(t, Float32Type):
        return by_name("f32")
    if isinstance(t, Float16Type):
        return by_name("f16")
    if isinstance(t, BFloat16Type):
        return by_name("bf16")
    if isinstance(t, Float64Type):
        return by_name("f64")
    if isinstance(t, IntegerType) and t.width.data in (1, 8, 16, 32, 64):
        if t.width.data == 1:
            return by_name("bool")
        prefix = "ui" if t.signedness.data == Signedness.UNSIGNED else "i"
        return by_name(f"{prefix}{t.width.data}")
    raise LoweringError(f"element type {t} is not one Loam compiles")


def shape_of(t: Attribute) -> Shape:
    """The StableHLO shape of a tensor type (None for `?`)."""
    if not isinstance(t, TensorType):
        raise LoweringError(f"{t} is not a ranked tensor")
    return tuple(None if d == DYNAMIC_INDEX else int(d) for d in t.get_shape())


@dataclass(frozen=True)
class Operand:
    """A StableHLO value as the graph holds it.

    `value` has the StableHLO shape `shape`, or, when `actual` is set, the smaller shape `actual`
    that broadcasts to `shape` (right-aligned, as ONNX broadcasts; None in `actual` is the `?`
    extent at that place).  `target` is the i64 vector of `shape`'s extents when `shape` has `?`s
    and `value` must be expanded at run time; `known` is `value`'s contents when they are constant.
    """

    value: SSAValue
    shape: Shape
    elem: ElementType
    actual: Shape | None = None
    target: SSAValue | None = None
    known: np.ndarray | None = None

    @property
    def held_shape(self) -> Shape:
        """The shape `value` really has."""
        return self.shape if self.actual is None else self.actual


class GraphBuilder:
    """Appends initializers and nodes to one graph, naming each uniquely.

    The nodes of one StableHLO op are named after the op's kind and its count among the ops of
    that kind (`dot_general_2`, `dot_general_2_rhs_T`), which the custom and the generic form of a
    text agree on; each node's doc string gives the op's place in the file and the JAX source line.
    """

    def __init__(self, opset: int, reserved: Sequence[str] = ()) -> None:
        self.opset = opset
        self.ops: list[Operation] = []
        self.top = self.ops  # where initializers go, also while a region is built
        self.used: set[str] = set(reserved)
        self.counts: dict[str, int] = {}
        self.base = "node"
        self.doc: str | None = None

    def start(self, kind: str, doc: str | None = None) -> None:
        """Name the nodes that follow after the next op of `kind`; `doc` says where it is."""
        count = self.counts.get(kind, 0)
        self.counts[kind] = count + 1
        self.base, self.doc = f"{kind}_{count}", doc

    def unique(self, name: str) -> str:
        if name not in self.used:
            self.used.add(name)
            return name
        k = 1
        while f"{name}_{k}" in self.used:
            k += 1
        self.used.add(f"{name}_{k}")
        return f"{name}_{k}"

    @contextmanager
    def region(self) -> Iterator[list[Operation]]:
        """Build into a fresh op list (a subgraph's nodes), yielded; the op being lowered stays named."""
        saved = self.ops, self.base, self.doc
        self.ops = []
        try:
            yield self.ops
        finally:
            self.ops, self.base, self.doc = saved

    def node(
        self, op_type: str, inputs: Sequence[SSAValue], attrs: dict[str, Attribute] | None = None, what: str = ""
    ) -> SSAValue:
        """One ONNX node with one output, named after the StableHLO op being lowered (`self.base`)."""
        return self.nodes(op_type, inputs, 1, attrs, what=what)[0]

    def nodes(
        self,
        op_type: str,
        inputs: Sequence[SSAValue],
        count: int,
        attrs: dict[str, Attribute] | None = None,
        regions: Sequence[Region] = (),
        what: str = "",
        name: str | None = None,
    ) -> list[SSAValue]:
        """One ONNX node with `count` outputs (and subgraph `regions`), named as `node` names its one
        (or `name`, one `unique` gave)."""
        name = name or self.unique(f"{self.base}_{what}" if what else self.base)
        outputs = [name] if count == 1 else [self.unique(f"{name}_{k}") for k in range(count)]
        node = NodeOp(
            op_type, inputs, [UnknownType()] * count, outputs, node_name=name, since=self.opset, attrs=attrs or {},
            regions=regions, doc_string=self.doc,
        )  # fmt: skip
        self.ops.append(node)
        for out, out_name in zip(node.outs, outputs, strict=True):
            set_name_hint(out, out_name)
        return list(node.outs)

    def constant(self, array: np.ndarray, elem: ElementType, what: str = "") -> SSAValue:
        """A `Constant` node holding `array`."""
        data = TensorDataAttr.from_numpy(np.asarray(array, dtype=elem.numpy), elem)
        return self.node("Constant", [], {"value": data}, what)

    def ints(self, values: Sequence[int], what: str) -> SSAValue:
        """A 1-D i64 `Constant`: axes, shapes, starts and ends."""
        return self.constant(np.array(list(values), dtype=np.int64), by_name("i64"), what)

    def weight(self, array: np.ndarray, elem: ElementType) -> SSAValue:
        """An initializer carrying `array`: an embedded weight."""
        name = self.unique(self.base)
        data = TensorDataAttr.from_numpy(np.asarray(array, dtype=elem.numpy), elem)
        op = InitializerOp(name, GraphTensorType(elem, list(array.shape)), data)
        self.top.append(op)  # a subgraph reads it from the graph: ONNX bodies keep no initializers here
        set_name_hint(op.result, name)
        return op.result


def _ints(values: Sequence[int]) -> ListAttr:
    return ListAttr("ints", [IntAttr(v) for v in values])


def _int(value: int) -> IntegerAttr:
    return IntegerAttr(value, i64)


# --------------------------------------------------------------------------------------------------
# Broadcasting


def full(b: GraphBuilder, x: Operand) -> SSAValue:
    """`x`'s value in its whole StableHLO shape: expanded when it is held smaller."""
    if x.actual is None:
        return x.value
    static = all(d is not None for d in x.shape)
    if x.known is not None and static and int(np.prod(x.shape)) <= 16:
        return b.constant(np.broadcast_to(x.known, x.shape), x.elem, "expanded")  # type: ignore[arg-type]
    if static:
        target = b.ints([d for d in x.shape if d is not None], "shape")
    elif x.target is not None:
        target = x.target
    else:
        raise LoweringError(f"cannot expand a value of shape {_spell(x.held_shape)} to {_spell(x.shape)}")
    return b.node("Expand", [x.value, target], what="expand")


def _strip(shape: Shape) -> Shape:
    """A shape without its leading 1s (ONNX broadcasting adds them back)."""
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return shape[i:]


def broadcast_to(b: GraphBuilder, x: Operand, dims: Sequence[int], shape: Shape, target: SSAValue | None) -> Operand:
    """`broadcast_in_dim`: x's dim i becomes dim `dims[i]` of `shape`, kept lazy."""
    held = x.held_shape
    rank_in = len(x.shape)
    padded: list[Dim] = [1] * (rank_in - len(held)) + list(held)
    value, held_dims = x.value, list(dims[rank_in - len(held) :])
    known = x.known
    if list(dims) != sorted(dims):  # the operand's dims come in another order: transpose it first
        if len(held) < rank_in:
            value = b.node("Unsqueeze", [value, b.ints(range(rank_in - len(held)), "axes")], what="rank")
            known = None if known is None else known.reshape([1] * (rank_in - len(held)) + list(known.shape))
        perm = sorted(range(rank_in), key=lambda i: dims[i])
        value = b.node("Transpose", [value], {"perm": _ints(perm)}, what="order")
        known = None if known is None else known.transpose(perm)
        padded = [padded[p] for p in perm]
        dims = [dims[p] for p in perm]
        held, held_dims = tuple(padded), list(dims)
    placed: list[Dim] = [1] * len(shape)
    for i, d in enumerate(dims):
        placed[d] = padded[i]
    if not held_dims or _strip(tuple(placed)) == _strip(tuple(held)):
        actual = tuple(held)
    else:  # give the value the result's rank from its first dim on: insert the 1s between
        first = held_dims[0]
        axes = [j - first for j in range(first, len(shape)) if j not in held_dims]
        value = b.node("Unsqueeze", [value, b.ints(axes, "axes")], what="align")
        actual = tuple(placed[first:])
        known = None if known is None else known.reshape([1 if d is None else d for d in actual])
    if actual == shape:
        return Operand(value, shape, x.elem, known=known)
    return Operand(value, shape, x.elem, actual, target, known)


def _elementwise_result(value: SSAValue, operands: Sequence[Operand], shape: Shape, elem: ElementType) -> Operand:
    """An elementwise op's result: held at the broadcast of its operands' held shapes."""
    held = [o.held_shape for o in operands]
    rank = max((len(h) for h in held), default=0)
    out: list[Dim] = []
    for k in range(rank, 0, -1):
        dims = [h[len(h) - k] if k <= len(h) else 1 for h in held]
        out.append(None if any(d is None for d in dims) else max(d for d in dims if d is not None))
    if tuple(out) == shape:
        return Operand(value, shape, elem)
    target = next((o.target for o in operands if o.target is not None), None)
    return Operand(value, shape, elem, tuple(out), target)


def _spell(shape: Shape) -> str:
    return "x".join("?" if d is None else str(d) for d in shape) or "scalar"


# --------------------------------------------------------------------------------------------------
# The rules

Rule = Callable[[GraphBuilder, Operation, list[Operand]], list[Operand]]
RULES: dict[type[Operation], Rule] = {}


def rule(*op_types: type[Operation]) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for t in op_types:
            RULES[t] = fn
        return fn

    return register


def lower_op(b: GraphBuilder, op: Operation, operands: list[Operand]) -> list[Operand]:
    """The operands of `op`'s results (LoweringError when Loam cannot express it)."""
    fn = RULES.get(type(op))
    if fn is None:
        raise LoweringError("Loam does not lower this op")
    return fn(b, op, operands)


def _result(op: Operation) -> tuple[Shape, ElementType]:
    t = op.results[0].type
    return shape_of(t), element_type(t.element_type)  # type: ignore[attr-defined]


_ELEMENTWISE: dict[type[Operation], str] = {
    hlo.AddOp: "Add",
    hlo.SubtractOp: "Sub",
    hlo.MultiplyOp: "Mul",
    hlo.DivideOp: "Div",
    hlo.MaximumOp: "Max",
    hlo.MinimumOp: "Min",
    hlo.PowerOp: "Pow",
    hlo.AndOp: "And",
    hlo.OrOp: "Or",
    hlo.NegateOp: "Neg",
    hlo.AbsOp: "Abs",
    hlo.ExponentialOp: "Exp",
    hlo.LogOp: "Log",
    hlo.TanhOp: "Tanh",
    hlo.LogisticOp: "Sigmoid",
    hlo.SqrtOp: "Sqrt",
    hlo.SineOp: "Sin",
    hlo.CosineOp: "Cos",
    hlo.TanOp: "Tan",
    hlo.SignOp: "Sign",
    hlo.FloorOp: "Floor",
    hlo.CeilOp: "Ceil",
    hlo.RoundNearestEvenOp: "Round",  # ONNX rounds halves to even
    hlo.ErfOp: "Erf",
    hlo.SinhOp: "Sinh",
    hlo.CoshOp: "Cosh",
    hlo.AsinOp: "Asin",
    hlo.AcosOp: "Acos",
    hlo.AtanOp: "Atan",
    hlo.NotOp: "Not",
    hlo.SelectOp: "Where",
}
_BOOLEAN_ONLY = {"And", "Or", "Not"}


def _is_zero(x: Operand) -> bool:
    """A float 0 broadcast from one element (a splat constant)."""
    return x.known is not None and x.elem.is_float and x.held_shape == () and not np.any(x.known)


@rule(*_ELEMENTWISE)
def _elementwise(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = _result(op)
    op_type = _ELEMENTWISE[type(op)]
    if op_type in _BOOLEAN_ONLY and elem.name != "bool":
        raise LoweringError(f"{op.name} of {elem.name} (bitwise) has no ONNX counterpart Loam compiles")
    if op_type == "Max" and (_is_zero(xs[0]) or _is_zero(xs[1])):
        x = xs[1] if _is_zero(xs[0]) else xs[0]  # max(x, 0) is what ONNX calls Relu
        return [_elementwise_result(b.node("Relu", [x.value]), [x], shape, elem)]
    return [_elementwise_result(b.node(op_type, [x.value for x in xs]), xs, shape, elem)]


@rule(hlo.RsqrtOp)
def _rsqrt(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = _result(op)
    root = b.node("Sqrt", [xs[0].value], what="sqrt")
    return [_elementwise_result(b.node("Reciprocal", [root]), xs, shape, elem)]


@rule(hlo.SquareOp)
def _square(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = _result(op)
    return [_elementwise_result(b.node("Mul", [xs[0].value, xs[0].value]), xs, shape, elem)]


@rule(hlo.RemainderOp)
def _remainder(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = _result(op)  # the dividend's sign, as C's fmod (for integers too)
    return [_elementwise_result(b.node("Mod", [x.value for x in xs], {"fmod": _int(1)}), xs, shape, elem)]


def _float_only(op: Operation, elem: ElementType) -> None:
    if not elem.is_float:
        raise LoweringError(f"{op.name} of {elem.name} is not supported (floats only)")


@rule(hlo.CbrtOp)
def _cbrt(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """cbrt(x) = sign(x) * |x|^(1/3): ONNX has no cube root (NaN and the infinities come out right)."""
    shape, elem = _result(op)
    _float_only(op, elem)
    x = xs[0].value
    third = b.constant(np.array(1 / 3), elem, "third")
    root = b.node("Pow", [b.node("Abs", [x], what="abs"), third], what="root")
    return [_elementwise_result(b.node("Mul", [b.node("Sign", [x], what="sign"), root]), xs, shape, elem)]


def _sign_bit(b: GraphBuilder, x: SSAValue, zero: SSAValue, one: SSAValue, what: str) -> SSAValue:
    """x < 0, or x is -0 (1 / -0 is -inf): the sign bit, without a bit cast (ONNX 17 has none)."""
    is_zero = b.node("Equal", [x, zero], what=f"{what}_is_zero")
    signed = b.node("Where", [is_zero, b.node("Div", [one, x], what=f"{what}_inverse"), x], what=f"{what}_signed")
    return b.node("Less", [signed, zero], what=f"{what}_negative")


@rule(hlo.Atan2Op)
def _atan2(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """atan2(y, x) from Atan: r = atan(min(|y|, |x|) / max(|y|, |x|)) in [0, pi/4] (0 where both are 0,
    pi/4 where both are infinite), then pi/2 - r where |y| > |x|, pi - r where x's sign bit is set,
    and -r where y's is: every quadrant, the axes and the signed zeros as C's atan2 (and JAX) give
    them: atan2(+-0, +0) = +-0, atan2(+-0, -0) = +-pi.  A NaN operand gives NaN."""
    shape, elem = _result(op)
    _float_only(op, elem)
    y, x = xs[0].value, xs[1].value
    zero, one = b.constant(np.array(0), elem, "zero"), b.constant(np.array(1), elem, "one")
    ay, ax = b.node("Abs", [y], what="abs_y"), b.node("Abs", [x], what="abs_x")
    low, high = b.node("Min", [ay, ax], what="low"), b.node("Max", [ay, ax], what="high")
    ratio = b.node("Div", [low, high], what="ratio")
    ratio = b.node("Where", [b.node("Equal", [high, zero], what="both_zero"), zero, ratio], what="ratio_zero")
    ratio = b.node("Where", [b.node("IsInf", [low], what="both_inf"), one, ratio], what="ratio_inf")
    r = b.node("Atan", [ratio], what="base")
    half_pi, pi = b.constant(np.array(np.pi / 2), elem, "half_pi"), b.constant(np.array(np.pi), elem, "pi")
    steep = b.node("Greater", [ay, ax], what="steep")
    r = b.node("Where", [steep, b.node("Sub", [half_pi, r], what="from_half_pi"), r], what="octant")
    r = b.node("Where", [_sign_bit(b, x, zero, one, "x"), b.node("Sub", [pi, r], what="from_pi"), r], what="half")
    r = b.node("Where", [_sign_bit(b, y, zero, one, "y"), b.node("Neg", [r], what="negated"), r], what="signed")
    nan = b.node("Or", [b.node("IsNaN", [y], what="y_nan"), b.node("IsNaN", [x], what="x_nan")], what="nan")
    value = b.node("Where", [nan, b.node("Add", [y, x], what="nan_value"), r])
    return [_elementwise_result(value, xs, shape, elem)]


@rule(hlo.ExponentialMinusOneOp)
def _expm1(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """e^x - 1 without the cancellation near 0 (Kahan): with u = e^x, x where u is 1, -1 where u - 1 is
    -1, u where u is infinite, else (u - 1) * x / log(u).  A NaN comes out NaN."""
    shape, elem = _result(op)
    _float_only(op, elem)
    x = xs[0].value
    one = b.constant(np.array(1), elem, "one")
    u = b.node("Exp", [x], what="exp")
    less = b.node("Sub", [u, one], what="less")
    r = b.node("Div", [b.node("Mul", [less, x], what="scaled"), b.node("Log", [u], what="log")], what="ratio")
    r = b.node("Where", [b.node("Equal", [u, one], what="tiny"), x, r], what="near_zero")
    minus_one = b.constant(np.array(-1), elem, "minus_one")
    r = b.node("Where", [b.node("Equal", [less, minus_one], what="floor"), minus_one, r], what="low")
    value = b.node("Where", [b.node("IsInf", [u], what="huge"), u, r])
    return [_elementwise_result(value, xs, shape, elem)]


@rule(hlo.LogPlusOneOp)
def _log1p(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """log(1 + x) without the rounding of 1 + x near 0 (Kahan): with u = 1 + x, x where u - 1 is 0,
    u where u is infinite, else log(u) * x / (u - 1).  -1 gives -inf, below -1 and NaN give NaN."""
    shape, elem = _result(op)
    _float_only(op, elem)
    x = xs[0].value
    one = b.constant(np.array(1), elem, "one")
    zero = b.constant(np.array(0), elem, "zero")
    u = b.node("Add", [x, one], what="shifted")
    step = b.node("Sub", [u, one], what="step")
    r = b.node("Mul", [b.node("Log", [u], what="log"), b.node("Div", [x, step], what="ratio")], what="scaled")
    r = b.node("Where", [b.node("Equal", [step, zero], what="tiny"), x, r], what="near_zero")
    value = b.node("Where", [b.node("IsInf", [u], what="huge"), u, r])
    return [_elementwise_result(value, xs, shape, elem)]


@rule(hlo.IsFiniteOp)
def _is_finite(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = _result(op)
    _float_only(op, xs[0].elem)
    x = xs[0].value
    bad = b.node("Or", [b.node("IsInf", [x], what="inf"), b.node("IsNaN", [x], what="nan")], what="bad")
    return [_elementwise_result(b.node("Not", [bad]), xs, shape, elem)]


@rule(hlo.ClampOp)
def _clamp(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """min(max(x, lo), hi): Max and Min broadcast a scalar bound (a NaN anywhere gives NaN, as XLA's)."""
    shape, elem = _result(op)
    lo, x, hi = xs
    low = b.node("Max", [x.value, lo.value], what="low")
    return [_elementwise_result(b.node("Min", [low, hi.value]), xs, shape, elem)]


@rule(hlo.XorOp)
def _xor(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = _result(op)
    kind = "Xor" if elem.name == "bool" else "BitwiseXor"
    return [_elementwise_result(b.node(kind, [x.value for x in xs]), xs, shape, elem)]


_COMPARISONS = {"EQ": "Equal", "LT": "Less", "LE": "LessOrEqual", "GT": "Greater", "GE": "GreaterOrEqual"}


@rule(hlo.CompareOp)
def _compare(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.CompareOp)
    shape, elem = _result(op)
    kind = op.compare_type.text if op.compare_type is not None else None
    if kind == "TOTALORDER":
        raise LoweringError("a TOTALORDER comparison (NaNs ordered) has no ONNX counterpart")
    if kind == "UNSIGNED" and not xs[0].elem.name.startswith("ui"):
        raise LoweringError(f"an UNSIGNED comparison of {xs[0].elem.name} has no ONNX counterpart")
    direction = op.comparison_direction.text
    if direction == "NE":
        equal = b.node("Equal", [x.value for x in xs], what="equal")
        return [_elementwise_result(b.node("Not", [equal]), xs, shape, elem)]
    return [_elementwise_result(b.node(_COMPARISONS[direction], [x.value for x in xs]), xs, shape, elem)]


@rule(hlo.ConvertOp)
def _convert(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = _result(op)
    x = xs[0]
    if elem == x.elem:
        return [x]
    cast = b.node("Cast", [x.value], {"to": _int(elem.onnx)})
    known = None if x.known is None else x.known.astype(elem.numpy)
    return [replace(_elementwise_result(cast, xs, shape, elem), known=known)]


@rule(hlo.ConstantOp)
def _constant(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.ConstantOp)
    shape, elem = _result(op)
    array = dense_array(op.value, elem)
    flat = array.reshape(-1)
    if flat.size and flat.tobytes() == flat[:1].tobytes() * flat.size:
        scalar = flat[:1].reshape(())  # a splat: one element, broadcast where it is read
        value = b.constant(scalar, elem)
        if not shape:
            return [Operand(value, shape, elem, known=scalar)]
        return [Operand(value, shape, elem, (), None, scalar)]
    if elem.is_float:
        return [Operand(b.weight(array, elem), shape, elem, known=array)]
    return [Operand(b.constant(array, elem), shape, elem, known=array)]


def dense_array(attr: DenseIntOrFPElementsAttr, elem: ElementType) -> np.ndarray:
    """The contents of a `dense<...>` literal as a numpy array of `elem`."""
    values = attr.get_values()
    shape = tuple(attr.get_shape())
    if elem.name == "bool":
        return np.array([v != 0 for v in values], dtype=np.bool_).reshape(shape)
    return np.array(values, dtype=np.float64 if elem.is_float else object).astype(elem.numpy).reshape(shape)


@rule(hlo.BroadcastInDimOp, hlo.DynamicBroadcastInDimOp)
def _broadcast(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.BroadcastInDimOp | hlo.DynamicBroadcastInDimOp)
    shape, _ = _result(op)
    target = None
    if isinstance(op, hlo.DynamicBroadcastInDimOp) and None in shape:
        target = _as_i64(b, xs[1])
    return [broadcast_to(b, xs[0], op.dims, shape, target)]


def _as_i64(b: GraphBuilder, x: Operand) -> SSAValue:
    value = full(b, x)
    if x.elem.name == "i64":
        return value
    return b.node("Cast", [value], {"to": _int(by_name("i64").onnx)}, what="i64")


@rule(hlo.ReshapeOp, hlo.DynamicReshapeOp)
def _reshape(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    shape, elem = _result(op)
    x = xs[0]
    if x.held_shape == () and x.actual is not None:  # a broadcast scalar stays one
        target = _as_i64(b, xs[1]) if isinstance(op, hlo.DynamicReshapeOp) and None in shape else None
        return [Operand(x.value, shape, elem, (), target, x.known)]
    if isinstance(op, hlo.DynamicReshapeOp):
        target, zero = _as_i64(b, xs[1]), True
    else:
        static = [d for d in shape if d is not None]
        target, zero = b.ints(static, "shape"), 0 in static
    attrs = {"allowzero": _int(1)} if zero else {}  # StableHLO's extents are literal: a 0 is a 0
    known = None if x.known is None or None in shape else x.known.reshape(shape)  # type: ignore[arg-type]
    return [Operand(b.node("Reshape", [full(b, x), target], attrs), shape, elem, known=known)]


@rule(hlo.TransposeOp)
def _transpose(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.TransposeOp)
    shape, elem = _result(op)
    x = xs[0]
    if x.held_shape == () and x.actual is not None:
        return [Operand(x.value, shape, elem, (), x.target, x.known)]
    perm = list(op.perm)
    known = None if x.known is None or x.actual is not None else x.known.transpose(perm)
    return [Operand(b.node("Transpose", [full(b, x)], {"perm": _ints(perm)}), shape, elem, known=known)]


@rule(hlo.ConcatenateOp)
def _concatenate(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.ConcatenateOp)
    shape, elem = _result(op)
    known = None
    if all(x.known is not None for x in xs) and None not in shape:
        known = np.concatenate([np.broadcast_to(x.known, x.shape) for x in xs], axis=op.dim)  # type: ignore[arg-type]
    value = b.node("Concat", [full(b, x) for x in xs], {"axis": _int(op.dim)})
    return [Operand(value, shape, elem, known=known)]


@rule(hlo.SliceOp)
def _slice(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.SliceOp)
    shape, elem = _result(op)
    x = xs[0]
    ranges = op.ranges
    if all(a == 0 and c == 1 and n == e for (a, n, c), e in zip(ranges, x.shape, strict=True)):
        return [x]
    starts = b.ints([a for a, _, _ in ranges], "starts")
    ends = b.ints([n for _, n, _ in ranges], "ends")
    axes = b.ints(range(len(ranges)), "axes")
    steps = b.ints([c for _, _, c in ranges], "steps")
    return [Operand(b.node("Slice", [full(b, x), starts, ends, axes, steps]), shape, elem)]


@rule(hlo.ReverseOp)
def _reverse(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """Slice with step -1 from the last element along each reversed dim."""
    assert isinstance(op, hlo.ReverseOp)
    shape, elem = _result(op)
    dims = [d for d in op.dims if shape[d] != 1]
    if not dims:
        return [xs[0]]
    n = len(dims)
    starts, ends = b.ints([-1] * n, "starts"), b.ints([np.iinfo(np.int64).min] * n, "ends")
    steps = b.ints([-1] * n, "steps")
    return [Operand(b.node("Slice", [full(b, xs[0]), starts, ends, b.ints(dims, "axes"), steps]), shape, elem)]


@rule(hlo.PadOp)
def _pad(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    """Interior padding per dim first (the dim unsqueezed, padded after its new unit axis, merged back
    and the padding after the last element cut off), then one Pad for the positive edge widths and
    one Slice for the negative ones (the elements they cut off)."""
    assert isinstance(op, hlo.PadOp)
    shape, elem = _result(op)
    x, value = xs
    fill = full(b, value)
    current = full(b, x)
    extents: list[Dim] = list(x.shape)
    rank = len(extents)
    for d, (_, _, inner) in enumerate(op.widths):
        n = extents[d]
        if inner == 0 or n in (0, 1):
            continue
        if any(e is None for e in extents[d + 1 :]):
            raise LoweringError(f"interior padding of dim {d} before a dim of unknown extent is not supported")
        spread = b.node("Unsqueeze", [current, b.ints([d + 1], "axes")], what=f"spread{d}")
        pads = [0] * (2 * (rank + 1))
        pads[rank + 1 + d + 1] = inner
        spread = b.node("Pad", [spread, b.ints(pads, "pads"), fill], what=f"interior{d}")
        merged = [0] * d + [-1] + [e for e in extents[d + 1 :] if e is not None]
        current = b.node("Reshape", [spread, b.ints(merged, "shape")], what=f"merged{d}")
        end = -inner
        current = b.node(
            "Slice", [current, b.ints([0], "starts"), b.ints([end], "ends"), b.ints([d], "axes")], what=f"trim{d}"
        )
        extents[d] = None if n is None else n + (n - 1) * inner
    lows, highs = [w[0] for w in op.widths], [w[1] for w in op.widths]
    if any(w > 0 for w in lows + highs):
        pads = [max(w, 0) for w in lows] + [max(w, 0) for w in highs]
        current = b.node("Pad", [current, b.ints(pads, "pads"), fill], what="edges")
    cut = [d for d in range(rank) if lows[d] < 0 or highs[d] < 0]
    if cut:
        starts = b.ints([-min(lows[d], 0) for d in cut], "starts")
        ends = b.ints([highs[d] if highs[d] < 0 else np.iinfo(np.int64).max for d in cut], "ends")
        current = b.node("Slice", [current, starts, ends, b.ints(cut, "axes")], what="cut")
    return [Operand(current, shape, elem)]


@rule(hlo.IotaOp, hlo.DynamicIotaOp)
def _iota(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.IotaOp | hlo.DynamicIotaOp)
    shape, elem = _result(op)
    counting = elem if elem.name in ("f32", "f64", "f16", "bf16", "i16", "i32", "i64") else by_name("i64")
    extent = shape[op.dim]
    target = None
    if isinstance(op, hlo.DynamicIotaOp) and None in shape:
        target = _as_i64(b, xs[0])
    if extent is None:
        assert target is not None
        index = b.constant(np.array(op.dim, dtype=np.int64), by_name("i64"), "dim")
        limit = b.node("Gather", [target, index], {"axis": _int(0)}, what="extent")
        if counting.name != "i64":
            limit = b.node("Cast", [limit], {"to": _int(counting.onnx)}, what="extent_cast")
    else:
        limit = b.constant(np.array(extent), counting, "limit")
    start = b.constant(np.array(0), counting, "start")
    delta = b.constant(np.array(1), counting, "delta")
    value = b.node("Range", [start, limit, delta])
    if counting != elem:
        value = b.node("Cast", [value], {"to": _int(elem.onnx)}, what="cast")
    counted = Operand(value, (extent,), elem)
    return [broadcast_to(b, counted, [op.dim], shape, target)]


@rule(hlo.GetDimensionSizeOp)
def _dimension_size(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.GetDimensionSizeOp)
    shape, elem = _result(op)
    x = xs[0]
    if x.shape[op.dim] is not None:
        extent = np.array(x.shape[op.dim])
        return [Operand(b.constant(extent, elem), shape, elem, known=extent.astype(elem.numpy))]
    extents = b.node("Shape", [full(b, x)], {"start": _int(op.dim), "end": _int(op.dim + 1)}, what="shape")
    scalar = b.node("Reshape", [extents, b.ints([], "scalar")], what="scalar")
    return [Operand(b.node("Cast", [scalar], {"to": _int(elem.onnx)}), shape, elem)]


# --------------------------------------------------------------------------------------------------
# Contractions and reductions


@rule(hlo.DotGeneralOp)
def _dot_general(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.DotGeneralOp)
    shape, elem = _result(op)
    lhs, rhs = xs
    lb, rb, lc, rc = op.dot_dimension_numbers.dims()
    a, c = full(b, lhs), full(b, rhs)
    if lhs.elem != elem:
        a = b.node("Cast", [a], {"to": _int(elem.onnx)}, what="lhs")
    if rhs.elem != elem:
        c = b.node("Cast", [c], {"to": _int(elem.onnx)}, what="rhs")
    nl, nr, nb = len(lhs.shape), len(rhs.shape), len(lb)
    batch = tuple(range(nb))
    if lb == rb == batch and len(lc) == 1:
        if nb == 0 and nr == 2 and lc[0] == nl - 1:  # [..., K] x [K, N] (or [N, K])
            if rc[0] == 1:
                c = b.node("Transpose", [c], {"perm": _ints([1, 0])}, what="rhs_T")
            return [Operand(b.node("MatMul", [a, c]), shape, elem)]
        if nl == nr == nb + 2 and lc[0] in (nb, nb + 1) and rc[0] in (nb, nb + 1):  # [B..., M, K] x [B..., K, N]
            swap = [*batch, nb + 1, nb]
            if lc[0] == nb:
                a = b.node("Transpose", [a], {"perm": _ints(swap)}, what="lhs_T")
            if rc[0] == nb + 1:
                c = b.node("Transpose", [c], {"perm": _ints(swap)}, what="rhs_T")
            return [Operand(b.node("MatMul", [a, c]), shape, elem)]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    left = [next(letters) for _ in range(nl)]
    right = [""] * nr
    for i, j in (*zip(lb, rb, strict=True), *zip(lc, rc, strict=True)):
        right[j] = left[i]
    right = [r or next(letters) for r in right]
    out = [left[i] for i in lb]
    out += [left[i] for i in range(nl) if i not in lb and i not in lc]
    out += [right[j] for j in range(nr) if j not in rb and j not in rc]
    equation = f"{''.join(left)},{''.join(right)}->{''.join(out)}"
    return [Operand(b.node("Einsum", [a, c], {"equation": StringAttr(equation)}), shape, elem)]


_REDUCTIONS: dict[type[Operation], tuple[str, str]] = {  # body op -> (reduction, how an init value joins)
    hlo.AddOp: ("ReduceSum", "Add"),
    hlo.MaximumOp: ("ReduceMax", "Max"),
    hlo.MinimumOp: ("ReduceMin", "Min"),
    hlo.MultiplyOp: ("ReduceProd", "Mul"),
    hlo.OrOp: ("ReduceMax", "Or"),  # jnp.any: booleans only
    hlo.AndOp: ("ReduceMin", "And"),  # jnp.all: booleans only
}


def _identity(reduction: str, elem: ElementType) -> object:
    """The init value that changes nothing: 0, 1, or the lowest / highest value of `elem`."""
    if reduction in ("ReduceSum", "ReduceProd"):
        return 0 if reduction == "ReduceSum" else 1
    low = reduction == "ReduceMax"
    if elem.name == "bool":
        return not low
    if elem.is_float:
        return -np.inf if low else np.inf
    info = np.iinfo(elem.numpy)
    return info.min if low else info.max


T = TypeVar("T")


def reduction_body(block: Block, table: Mapping[type[Operation], T], reads: str) -> tuple[Operation, T]:
    """The one op of a reduction's body (its two arguments combined, the result returned: a reduce's
    or a reduce_window's) and what `table` says of its kind; else a LoweringError naming what the
    body computes and the one op Loam `reads`."""
    body = list(block.ops)
    combine = body[0] if len(body) == 2 else None
    known = table.get(type(combine)) if combine is not None else None
    if (
        combine is None
        or known is None
        or set(combine.operands) != set(block.args)
        or len(combine.operands) != 2
        or not isinstance(body[1], hlo.ReturnOp)
        or tuple(body[1].values) != tuple(combine.results)
    ):
        names = ", ".join(o.name for o in body[:-1])
        raise LoweringError(f"its body computes {names or 'nothing'}; Loam reads a body of one {reads}")
    return combine, known


@rule(hlo.ReduceOp)
def _reduce(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.ReduceOp)
    if len(op.inputs) != 1:
        raise LoweringError(f"a reduce of {len(op.inputs)} operands at once (an argmax, say) is not supported")
    combine, (reduction, joining) = reduction_body(
        op.body.block, _REDUCTIONS, "stablehlo.add, maximum, minimum, multiply, and or or of the two arguments"
    )
    shape, elem = _result(op)
    if joining in ("And", "Or") and elem.name != "bool":
        raise LoweringError(f"a reduce with a bitwise {combine.name} body over {elem.name} is not supported")
    x, init = xs
    dims = list(op.dims)
    if not dims:  # nothing reduced: ONNX would read empty axes as "all of them"
        value, held = full(b, x), [x]
    elif reduction == "ReduceSum":
        value = b.node(reduction, [full(b, x), b.ints(dims, "axes")], {"keepdims": _int(0)})
        held = [Operand(value, shape, elem)]
    else:
        value = b.node(reduction, [full(b, x)], {"axes": _ints(dims), "keepdims": _int(0)})
        held = [Operand(value, shape, elem)]
    if init.known is not None and np.all(init.known == _identity(reduction, elem)):
        return [_elementwise_result(value, held, shape, elem)]
    combined = b.node(joining, [value, init.value], what="init")
    return [_elementwise_result(combined, [*held, init], shape, elem)]


@rule(hlo.CustomCallOp)
def _custom_call(b: GraphBuilder, op: Operation, xs: list[Operand]) -> list[Operand]:
    assert isinstance(op, hlo.CustomCallOp)
    if op.target == "shape_assertion":  # JAX checks a symbolic dim (b >= 1); forward checks its inputs
        return []
    raise LoweringError(f"custom_call @{op.target} is not supported (only JAX's @shape_assertion is)")
