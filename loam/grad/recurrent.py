"""The grad clauses of the recurrent kernels (`kernel.rnn`, `kernel.gru`, `kernel.lstm`).

A recurrent kernel's derivative is the derivative of its definition unrolled over the time steps, so
each clause (the sequence length and the hidden size known at build time) emits that unrolled forward
as ordinary kernel ops and runs a walk of its own (`Backward.nested`) over exactly those ops, seeded with
the adjoints of whichever results a gradient reaches (Y, Y_h, and Y_c for an LSTM); each operand a gradient is asked
of (X, W, R, B, initial_h, and initial_c and P for an LSTM) gets what that walk gives it.  The unrolled
forward, per direction (layout 1 permuted to layout 0 first and back at the end):

- X times W's gate rows for every step at once (one product per direction), cut into each step's and
  gate's [batch, hidden] piece; the state times R's rows once per step;
- each gate a `kernel.zip`: the products and biases summed (LSTM's peepholes times the cell), clipped
  to [-clip, clip] where clip is set, through its activation (any of ONNX's eleven, with its alpha and
  beta); RNN H = f(..); GRU z, r = f(..), h~ = g(..) with R's product of r H (or r times H's product
  plus Rb with linear_before_reset), H = (1 - z) h~ + z H; LSTM i, f (1 - i with input_forget), c, o,
  C = f C + i g(..), H = o h(C), its cell activation unclipped as the kernel computes it;
- a reverse direction runs the steps last to first; with sequence_lens, step t of entry b updates its
  state only where t < sequence_lens[b] and its Y there is zero, which reads each entry's first
  sequence_lens[b] steps in either order, and an entry of length 0 has zero final states;
- Y the steps' states joined along the sequence and direction axes, Y_h (Y_c) the last states joined.

So every gradient is exact where the activations are differentiable (at a kink of Relu, a clip bound or
a select, the side the forward took gets it); an operand the unrolled steps never multiply (R over one
step from a zero state) gets zeros.  A sequence length or hidden size only the run knows, or a sequence
of no step, is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.ir import Operation, SSAValue

from loam.dialects.expr import Expr
from loam.dialects.kernel import ConcatOp, GruOp, LstmOp, MatmulOp, PermuteOp, RegroupOp, RnnOp, SplitOp, ZipOp
from loam.dialects.kernel.recurrent import RecurrentOp
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, Clause, is_float, refuse, static_extents, type_of, zeros_like

OPTIONAL = ("b", "lens", "h0", "c0", "p")
"""The optional operands in ONNX's order, one `present` bit each (1, 2, 4, 8, 16)."""


class _Reads:
    """The operands one zip reads, in order: calling it with a value gives the `Expr` reading it."""

    def __init__(self) -> None:
        self.values: list[SSAValue] = []

    def __call__(self, value: SSAValue) -> Expr:
        for k, v in enumerate(self.values):
            if v is value:
                return Expr.operand(k)
        self.values.append(value)
        return Expr.operand(len(self.values) - 1)


def _activation(op: Operation, v: Expr, name: str, alpha: float, beta: float, elem: str) -> Expr:
    """ONNX's recurrent activation `name` of `v`, as the kernel computes it (`rnn_activation`)."""
    a, b, zero, one = (Expr.const(c, elem) for c in (alpha, beta, 0.0, 1.0))
    if name == "Tanh":
        return v.unary("tanh")
    if name == "Sigmoid":
        return v.unary("sigmoid")
    if name == "Relu":
        return v.unary("relu")
    if name == "Affine":
        return a * v + b
    if name == "LeakyRelu":
        return Expr.select(v.binary("greater_equal", zero), v, a * v)
    if name == "ThresholdedRelu":
        return Expr.select(v.binary("greater", a), v, zero)
    if name == "ScaledTanh":
        return a * (b * v).unary("tanh")
    if name == "HardSigmoid":
        return (a * v + b).binary("max", zero).binary("min", one)
    if name == "Elu":
        return Expr.select(v.binary("greater_equal", zero), v, a * (v.unary("exp") - one))
    if name == "Softsign":
        return v.unary("softsign")
    if name == "Softplus":
        return v.unary("softplus")
    raise refuse(op, f"no grad clause for the activation {name} yet")


class _Unrolled:
    """`op`'s forward unrolled over its time steps, emitted into `b` and listed in `ops` (program order)."""

    def __init__(self, emit: Callable[[Operation], object], op: RecurrentOp, node: str) -> None:
        self.put, self.op, self.node = emit, op, node
        self.ops: list[Operation] = []
        operands = iter(op.inputs[3:])
        present = int(op.param("present"))
        self.given = {n: next(operands) for bit, n in enumerate(OPTIONAL) if present >> bit & 1}
        x, w, r = op.inputs[0], op.inputs[1], op.inputs[2]
        self.layout = int(op.param("layout"))
        y = type_of(op.outputs[0])
        self.elem = y.elem.name
        s_ax, d_ax, b_ax, h_ax = (y.axes[i] for i in ((1, 2, 0, 3) if self.layout else (0, 1, 2, 3)))
        if not s_ax.extent.is_const:
            raise refuse(
                op,
                f"its grad clause unrolls the sequence, which needs its length known at build time, not {s_ax.extent}",
            )
        directions, rows, hidden = static_extents(op, type_of(r))
        if s_ax.extent.const_value == 0:
            raise refuse(op, "its grad clause unrolls the sequence, and it has no step")
        self.steps, self.directions, self.hidden = s_ax.extent.const_value, directions, hidden
        self.gates = rows // hidden  # GRU z, r, h; LSTM i, o, f, c in W's and R's rows
        self.s_ax, self.d_ax, self.b_ax, self.h_ax = s_ax, d_ax, b_ax, h_ax
        self.unit = Axis.named("Unit", 1)
        names = str(op.param("activations")).split(",")
        per = len(names) // directions
        self.acts = [
            [(names[d * per + j], float(op.param("alphas")[d * per + j]), float(op.param("betas")[d * per + j]))
             for j in range(per)]
            for d in range(directions)
        ]  # fmt: skip
        self.clip = float(op.param("clip"))
        self.x = self.permute(x, (1, 0, 2)) if self.layout else x  # [S, B, I]
        self.w = self.pieces(w, self.directions)  # each [G*H, I]
        self.r = self.pieces(r, self.directions)  # each [G*H, H]
        if "lens" in self.given:
            lens = self.given["lens"]
            self.lens: SSAValue | None = self.emit(
                RegroupOp(lens, AxesTensorType(type_of(lens).elem, [self.b_ax, self.unit]), self.node)
            )
        else:
            self.lens = None

    # -- emitting ---------------------------------------------------------------------------------

    def emit(self, new: Operation) -> SSAValue:
        self.put(new)
        self.ops.append(new)
        return new.results[0]

    def type(self, *axes: Axis) -> AxesTensorType:
        return AxesTensorType(self.elem, axes)

    def regroup(self, value: SSAValue, *axes: Axis) -> SSAValue:
        return self.emit(RegroupOp(value, self.type(*axes), self.node))

    def permute(self, value: SSAValue, perm: Sequence[int]) -> SSAValue:
        t = type_of(value)
        return self.emit(PermuteOp(value, list(perm), AxesTensorType(t.elem, [t.axes[p] for p in perm]), self.node))

    def split(self, value: SSAValue, axis: int, sizes: Sequence[int]) -> list[SSAValue]:
        """`value` cut along `axis` into consecutive pieces of `sizes` elements."""
        if len(sizes) == 1:
            return [value]
        t = type_of(value)

        def piece(size: int) -> AxesTensorType:
            cut = Axis.named("Unit", 1) if size == 1 else Axis.named(f"Piece{size}", size)
            return AxesTensorType(t.elem, [cut if a == axis else ax for a, ax in enumerate(t.axes)])

        split = SplitOp([value], [piece(n) for n in sizes], self.node, axis=axis, sizes=tuple(sizes))
        self.emit(split)
        return list(split.outputs)

    def pieces(self, value: SSAValue, count: int, *axes: Axis) -> list[SSAValue]:
        """`value` as `count` pieces of `axes` each (default: its axes after the first), in row-major order:
        regrouped to [count, *axes] and cut along the first axis."""
        t = type_of(value)
        axes = axes or t.axes[1:]
        as_rows = t.shape[0] == count and t.axes[1:] == axes
        rows = value if as_rows else self.regroup(value, Axis.named("Pieces", count), *axes)
        return [self.regroup(p, *axes) for p in self.split(rows, 0, [1] * count)]

    def concat(self, parts: Sequence[SSAValue], axis: int, result: AxesTensorType) -> SSAValue:
        if len(parts) == 1:
            return parts[0] if type_of(parts[0]) == result else self.emit(RegroupOp(parts[0], result, self.node))
        return self.emit(ConcatOp(list(parts), [result], self.node, axis=axis))

    def matmul(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        lt, rt = type_of(lhs), type_of(rhs)
        return self.emit(MatmulOp(lhs, rhs, self.type(*lt.axes[:-1], rt.axes[-1]), self.node))

    def zip(self, reads: _Reads, expr: Expr) -> SSAValue:
        """`expr` over `reads`' values, of the state's [batch, hidden] type."""
        return self.emit(ZipOp(reads.values, expr, self.type(self.b_ax, self.h_ax), self.node))

    def gate(self, d: int, j: int, terms: Sequence[Expr], clip: bool = True) -> Expr:
        """Activation `j` of direction `d` over the sum of `terms`, clipped where the kernel clips."""
        v = terms[0]
        for term in terms[1:]:
            v = v + term
        if clip and self.clip > 0:
            v = v.binary("max", Expr.const(-self.clip, self.elem)).binary("min", Expr.const(self.clip, self.elem))
        return _activation(self.op, v, *self.acts[d][j], self.elem)

    # -- the recurrence ---------------------------------------------------------------------------

    def run(self) -> list[SSAValue]:
        """The unrolled forward's results, of the op's result types."""
        h_ax, b_ax, d_ax, s_ax, unit = self.h_ax, self.b_ax, self.d_ax, self.s_ax, self.unit
        g, h = self.gates, self.hidden
        states = [self.initial(n) for n in ("h0", "c0")]
        bias = self.pieces(self.given["b"], self.directions * 2 * g, unit, h_ax) if "b" in self.given else None
        peep = self.pieces(self.given["p"], self.directions * 3, unit, h_ax) if "p" in self.given else None
        ys: list[SSAValue] = []
        finals: list[list[SSAValue]] = [[], []]
        for d in range(self.directions):
            # X's products with the gate rows of W for every step at once, then cut per step and gate.
            wt = self.permute(self.w[d], (1, 0))  # [I, G*H]
            xw = self.matmul(self.x, wt)  # [S, B, G*H]
            gates_ax = Axis.named("Gates", g)
            xw = self.permute(self.regroup(xw, s_ax, b_ax, gates_ax, h_ax), (0, 2, 1, 3))
            cut = self.pieces(xw, self.steps * g, b_ax, h_ax)
            rt = self.permute(self.r[d], (1, 0))  # [H, G*H]
            if isinstance(self.op, GruOp) and not self.op.param("linear_before_reset"):
                zr, hh = self.split(rt, 1, [2 * h, h])
                columns: tuple[SSAValue, SSAValue | None] = (zr, hh)
            else:
                columns = (rt, None)
            wb = rb = p = None
            if bias is not None:
                wb, rb = bias[d * 2 * g : d * 2 * g + g], bias[d * 2 * g + g : (d + 1) * 2 * g]
            if peep is not None:
                p = peep[d * 3 : (d + 1) * 3]
            hd, cd = (None if s is None else s[d] for s in states)
            out: dict[int, SSAValue] = {}
            reverse = self.op.param("direction") == "reverse" or d == 1
            for t in reversed(range(self.steps)) if reverse else range(self.steps):
                h_new, c_new = self.cell(d, cut[t * g : (t + 1) * g], columns, wb, rb, p, hd, cd)
                hd, out[t] = self.masked(t, h_new, hd)
                if c_new is not None:
                    cd, _ = self.masked(t, c_new, cd)
            ys.append(self.concat([self.regroup(out[t], unit, unit, b_ax, h_ax) for t in range(self.steps)], 0,
                                  self.type(s_ax, unit, b_ax, h_ax)))  # fmt: skip
            for k, state in enumerate((hd, cd)):
                if state is not None:
                    finals[k].append(self.regroup(self.emptied(state), unit, b_ax, h_ax))
        y = self.concat(ys, 1, self.type(s_ax, d_ax, b_ax, h_ax))
        results = [self.permute(y, (2, 0, 1, 3)) if self.layout else y]
        for parts in finals[: len(self.op.outputs) - 1]:
            joined = self.concat(parts, 0, self.type(d_ax, b_ax, h_ax))
            results.append(self.permute(joined, (1, 0, 2)) if self.layout else joined)
        return results

    def initial(self, name: str) -> list[SSAValue] | None:
        """initial_h (initial_c) per direction, [B, H] each; None where absent (zeros)."""
        if name not in self.given:
            return None
        state = self.given[name]
        state = self.permute(state, (1, 0, 2)) if self.layout else state
        return self.pieces(state, self.directions, self.b_ax, self.h_ax)

    def masked(self, t: int, new: SSAValue, old: SSAValue | None) -> tuple[SSAValue, SSAValue]:
        """(the state after step `t`, the step's Y): `new` for an entry whose sequence covers `t`, else the
        old state and zero."""
        if self.lens is None:
            return new, new
        reads = _Reads()
        zero = Expr.const(0.0, self.elem)
        active = Expr.const(t, type_of(self.lens).elem.name).binary("less", reads(self.lens))
        y = self.zip(reads, Expr.select(active, reads(new), zero))
        if old is None:
            return y, y
        reads = _Reads()
        active = Expr.const(t, type_of(self.lens).elem.name).binary("less", reads(self.lens))
        return self.zip(reads, Expr.select(active, reads(new), reads(old))), y

    def emptied(self, state: SSAValue) -> SSAValue:
        """A final state, zero for an entry of length 0 (as the kernel gives it)."""
        if self.lens is None:
            return state
        reads = _Reads()
        empty = reads(self.lens).binary("equal", Expr.const(0, type_of(self.lens).elem.name))
        return self.zip(reads, Expr.select(empty, Expr.const(0.0, self.elem), reads(state)))

    def cell(
        self,
        d: int,
        xw: Sequence[SSAValue],
        rt: tuple[SSAValue, SSAValue | None],
        wb: Sequence[SSAValue] | None,
        rb: Sequence[SSAValue] | None,
        p: Sequence[SSAValue] | None,
        h: SSAValue | None,
        c: SSAValue | None,
    ) -> tuple[SSAValue, SSAValue | None]:
        """One step of direction `d`: (the new state H, the new cell C or None), from X's products `xw` per
        gate, R^T's columns `rt` (those H multiplies; GRU's h~ columns, which r H multiplies, or None), the
        biases and peepholes per gate, and the state (None: zeros)."""
        g, one = self.gates, Expr.const(1.0, self.elem)
        linear_before_reset = isinstance(self.op, GruOp) and bool(self.op.param("linear_before_reset"))
        # H's products with R's gate rows; GRU's h~ (without linear_before_reset) reads r H's product instead.
        rt_state, rt_reset = rt
        hr: list[SSAValue | None] = [None] * g
        if h is not None:
            products = self.matmul(h, rt_state)
            hr[: g if rt_reset is None else g - 1] = self.split(
                products, 1, [self.hidden] * (g if rt_reset is None else g - 1)
            )

        def terms(reads: _Reads, j: int) -> list[Expr]:
            """Gate j's sum: X's product, H's product, Wb and Rb."""
            found = [reads(xw[j])]
            found += [reads(v) for v in (hr[j],) if v is not None]
            found += [reads(wb[j])] if wb is not None else []
            found += [reads(rb[j])] if rb is not None else []
            return found

        if isinstance(self.op, RnnOp):
            reads = _Reads()
            return self.zip(reads, self.gate(d, 0, terms(reads, 0))), None
        if isinstance(self.op, GruOp):
            reads = _Reads()
            z = self.zip(reads, self.gate(d, 0, terms(reads, 0)))
            reads = _Reads()
            r = self.zip(reads, self.gate(d, 0, terms(reads, 1)))
            reads = _Reads()
            if linear_before_reset:  # h~ = g(X Wh^T + r (H Rh^T + Rbh) + Wbh)
                inner = [reads(v) for v in (hr[2], *([rb[2]] if rb is not None else [])) if v is not None]
                found = [reads(xw[2]), *([reads(wb[2])] if wb is not None else [])]
                if inner:
                    total = inner[0]
                    for v in inner[1:]:
                        total = total + v
                    found.append(reads(r) * total)
            else:  # h~ = g(X Wh^T + (r H) Rh^T + Wbh + Rbh)
                found = terms(reads, 2)
                if h is not None:
                    rh = self.zip(rh_reads := _Reads(), rh_reads(r) * rh_reads(h))
                    assert rt_reset is not None
                    found.append(reads(self.matmul(rh, rt_reset)))
            hh = self.zip(reads, self.gate(d, 1, found))
            reads = _Reads()
            new = (one - reads(z)) * reads(hh)
            if h is not None:
                new = new + reads(z) * reads(h)
            return self.zip(reads, new), None
        # LSTM: gates i, o, f, c in W's rows, peepholes i, o, f in P's.
        assert isinstance(self.op, LstmOp)

        def peephole(reads: _Reads, k: int, cell: SSAValue | None) -> list[Expr]:
            return [reads(p[k]) * reads(cell)] if p is not None and cell is not None else []

        reads = _Reads()
        i = self.zip(reads, self.gate(d, 0, [*terms(reads, 0), *peephole(reads, 0, c)]))
        forget: SSAValue | None = None  # the forget gate, where there is a cell state to forget
        if c is not None:
            reads = _Reads()
            if self.op.param("input_forget"):
                forget = self.zip(reads, one - reads(i))
            else:
                forget = self.zip(reads, self.gate(d, 0, [*terms(reads, 2), *peephole(reads, 2, c)]))
        reads = _Reads()
        new_c = reads(i) * self.gate(d, 1, terms(reads, 3))
        if c is not None and forget is not None:
            new_c = reads(forget) * reads(c) + new_c
        c_new = self.zip(reads, new_c)
        reads = _Reads()
        o = self.zip(reads, self.gate(d, 0, [*terms(reads, 1), *peephole(reads, 1, c_new)]))
        reads = _Reads()
        return self.zip(reads, reads(o) * self.gate(d, 2, [reads(c_new)], clip=False)), c_new


def _recurrent(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, RecurrentOp)
    sources = list({v: None for v in op.inputs if is_float(v) and v in b.needed})
    # The unrolled steps compute the forward in the kernel's place where the walk owns the forward (computed
    # once, their values kept for the backward), else again in the backward (under ONNX's Gradient node).
    forward = b.in_forward(op)
    unrolled = _Unrolled(forward or b.emit, op, f"{node}.steps" if forward else f"{node}.grad")
    results = unrolled.run()
    seeds = [b.adjoint.get(result) for result in op.outputs]
    if forward is not None:
        b.stand_for(op, results)
    inner = b.nested(sources, unrolled.ops, b.emit)
    for mine, grad in zip(results, seeds, strict=True):
        if grad is not None:
            inner.send(mine, grad)
    inner.run()
    for source in sources:
        # An operand the unrolled steps never multiply (R over one step from a zero state) has zero gradient.
        grad = inner.adjoint.get(source)
        b.send(source, zeros_like(b, source, node) if grad is None else grad)


CLAUSES: dict[type[Operation], Clause] = {RnnOp: _recurrent, GruOp: _recurrent, LstmOp: _recurrent}
EVERY_RESULT: frozenset[type[Operation]] = frozenset({RnnOp, GruOp, LstmOp})
"""The ops whose clause reads the adjoint of each result itself (a gradient may reach any of them)."""
