"""The numpy backend's kernel printer: the Python line computing each kernel op.

One method per kernel op (`NumpyKernelPrinter.PRINTERS`): a product is `np.matmul`, a permutation
and a regrouping are views, a cast is `astype` (or the float32 twin `Weights` prepared once), a zip
is a call of one function per distinct `Expr` (declared once, writing into a buffer where the
in-place plan allows), and a library kernel is a call of its runtime piece `kernel_NAME` with the op's
operands and then its parameters as keywords.  The numpy module prints its forward with it, and
the WGSL module prints with it each kernel its host computes, so a kernel's host form is written once.

The printer reads the module's names, symbols and weights through the module printer it serves
(`loam.backends.module_printer.ModulePrinter`) and registers the runtime pieces its lines call.
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import Operation, SSAValue

from loam.backends import numpy_runtime
from loam.backends.module_text import axes_type, dtype_source, node_label, numpy_dtype
from loam.backends.numpy_buffers import BufferPlan, broadcast_afterwards, fills_result
from loam.backends.numpy_inplace import OUT, InPlacePlan, plan_in_place
from loam.core.dtypes import by_name
from loam.core.errors import UnsupportedError
from loam.core.poly import Poly
from loam.dialects.build_contract import FUSED
from loam.dialects.expr import (
    Binary,
    Const,
    Convert,
    Expr,
    Operand,
    Select,
    Unary,
    format_float,
    step_args,
)
from loam.dialects.kernel import (
    AppendStateOp,
    AttentionOp,
    CastOp,
    LibraryOp,
    MatmulOp,
    NormalizeOp,
    PermuteOp,
    RandomOp,
    RegroupOp,
    SoftmaxOp,
    ZipOp,
)
from loam.runtime.kernels import elementwise as elementwise_kernels
from loam.runtime.kernels import zip_compiled

if TYPE_CHECKING:
    from loam.backends.module_printer import ModulePrinter

# Step spellings: numpy ufuncs, or pieces where the meaning depends on the element type.
_UNARY: dict[str, str] = elementwise_kernels.UNARY_SOURCE
_BINARY: dict[str, str] = elementwise_kernels.BINARY_SOURCE

ROWS_AT_A_TIME = 3
"""An expression of at least this many computing steps, written into a buffer, runs `_by_rows` (through
`zip_rows`, which runs one compiled loop instead where numba is, when `compiled_steps` takes the expression)."""

ROWS_MIN_ELEMENTS = 4 * 65536
"""The result size from which `_by_rows` splits an expression (the piece checks it again at run time);
a result the build knows to be smaller calls the expression directly, without the piece's call."""


def _plain_layer_norm(op: NormalizeOp) -> bool:
    """Whether `op` is a float32 LayerNormalization over the last axis with float32 scale (and bias)
    along it and no statistics: what `layer_norm_rows` computes (compiled where numba is, else
    `layer_norm`, with `kernel_normalize`'s bits)."""
    x = axes_type(op.inputs[0], "kernel.normalize")
    params = op.params
    if (params["stats"], params["channel_axis"], params["stash"]) != (0, -1, "float32") or x.elem.name != "f32":
        return False
    if params["axes"] != (x.rank - 1,) or len(op.inputs) < 2:  # a tuple, as every axes parameter
        return False
    last = x.shape[-1]
    others = [axes_type(v, "kernel.normalize") for v in op.inputs[1:]]
    return all(t.elem.name == "f32" and t.rank == 1 and t.shape[0] == last for t in others)


def _plain_softmax(op: SoftmaxOp) -> bool:
    """Whether `op` is a float32 softmax over the last axis: what `_softmax` computes."""
    x = axes_type(op.inputs[0], "kernel.softmax")
    return op.param("kind") == "softmax" and x.elem.name == "f32" and tuple(op.param("axes")) == (x.rank - 1,)


def _ufunc_operands(expr: Expr) -> list[int]:
    """The operands of `expr` that only numpy ufunc steps read (`np.add`, ...): those a full-extent copy
    may stand in for.  A piece may read an operand's extents (`_pow` takes a scalar 3 as a cube)."""
    operand_of = {i: step.index for i, step in enumerate(expr.steps) if isinstance(step, Operand)}
    readers: dict[int, list[object]] = {}
    for step in expr.steps:
        for arg in step_args(step):
            if arg in operand_of:
                readers.setdefault(operand_of[arg], []).append(step)
    return [
        index
        for index, steps in readers.items()
        if all(isinstance(s, Binary) and _BINARY[s.op].startswith("np.") for s in steps)
    ]


TINY_ELEMENTS = 1024
"""Below this many elements numpy's maximum against a scalar zero beats `_relu`'s zeros (its call
costs more than the faster loop saves); from it on, `_relu` is faster (256 x 64: 2.6 us against 7.3)."""


def fewer_than(shape: Sequence[Poly], count: int) -> bool:
    """Whether extents `shape` are all known and hold fewer than `count` elements."""
    return all(e.is_const for e in shape) and math.prod(int(e.const_value) for e in shape) < count


class NumpyKernelPrinter:
    """Prints kernel ops as numpy lines for one module (`module`), collecting the expression functions."""

    def __init__(self, module: ModulePrinter) -> None:
        self.m = module
        # Each expression function, keyed by the expression and the operands given in prepared f32.
        self.exprs: dict[tuple[Expr, frozenset[int], InPlacePlan, bool], str] = {}
        # The steps constant of each expression function `zip_rows` calls, and its declaration.
        self.steps_names: dict[str, str] = {}
        self.steps_source: dict[str, str] = {}
        # Where forward's top-level block stores its intermediates (`loam.backends.numpy_buffers`):
        # the numpy module plans it; a host kernel of the WGSL module has none.
        self.buffers = BufferPlan()

    def lines(
        self,
        op: Operation,
        result_ident: Callable[[Operation, SSAValue], str],
        operand_text: Mapping[SSAValue, str] | None = None,
    ) -> list[str]:
        """The statements computing `op` into the identifiers `result_ident` gives its results, each
        commented with the ONNX node (or the nodes the fuse pass composed into it).  `operand_text`
        spells operands another way than the module does (the WGSL module's downloaded copies)."""
        text = ChainMap(dict(operand_text or {}), self.m.value_text)
        rhs = self.line(op, text)
        idents = [result_ident(op, result) for result in op.results]
        comment = node_label(op)
        members = FUSED.get(op)
        names = list(members) if members is not None else [comment]
        if isinstance(op, MatmulOp) and op.epilogue is not None:
            # The product finished in its own buffer: the epilogue writes where np.matmul wrote.
            extras = [text[v] for v in op.extras]
            call = self._zip_call(op, [idents[0], *extras], idents[0], alias=0)
            return [f"{idents[0]} = {rhs}  # {names[0]}", f"{call}  # {', '.join(names[1:] or names)}: epilogue"]
        return [f"{', '.join(idents)} = {rhs}  # {comment}"]

    def declarations(self) -> list[str]:
        """The source of each expression function the lines call (and its steps, where `zip_rows` reads them)."""
        return [self._expr_source(key, name) + self.steps_source.get(name, "") for key, name in self.exprs.items()]

    def _steps_name(self, function: str, steps: tuple) -> str:
        """The module constant holding expression function `function`'s `steps`, declared after it."""
        name = self.steps_names.get(function)
        if name is None:
            name = self.steps_names[function] = self.m.names.mint(f"{function.upper()}_STEPS")
            note = f"# {function}'s steps, from which zip_rows compiles one loop"
            self.steps_source[function] = f"\n\n{note}\n{name} = {steps!r}\n"
        return name

    def prepared_text(self, value: SSAValue) -> str:
        """`weights.ATTR_f32`: the float32 form `Weights` prepares once for half weight `value`."""
        attr = self.m.half_weights[value]
        if attr not in self.m.prepared:
            self.m.prepared[attr] = self.m.names.mint(f"{attr}_f32")
            self.m.pieces.add("_prepared")
        return f"weights.{self.m.prepared[attr]}"

    def _expr_function(self, expr: Expr, wide: frozenset[int], plan: InPlacePlan, tiny: bool = False) -> str:
        """The function computing `expr`; operands in `wide` arrive as the f32 their casts would make,
        the steps `plan` names write into the result buffer, and a `tiny` result (fewer than
        `TINY_ELEMENTS`) takes ReLU as numpy's maximum against a scalar zero, which is faster there."""
        key = (expr, wide, plan, tiny)
        name = self.exprs.get(key)
        if name is None:
            name = self.m.names.mint(f"_zip_{len(self.exprs)}")
            self.exprs[key] = name
            for step in expr.steps:
                source = _UNARY[step.op] if isinstance(step, Unary) else _BINARY.get(getattr(step, "op", ""), "")
                if source.startswith("_") and not (tiny and source == "_relu"):
                    self.m.pieces.add(source)
                if isinstance(step, (Const, Convert)) and by_name(step.elem).from_ml_dtypes:
                    self.m.ml_dtypes = True
            if plan.into[-1] != OUT:
                self.m.pieces.add("_finished")
        return name

    def _zip_call(self, op: ZipOp | MatmulOp, args: list[str], out: str | None, alias: int | None = None) -> str:
        """A call of the function computing `op`'s Expr over `args` (writing into `out` when given)."""
        if isinstance(op, ZipOp):
            expr, values = op.expr.data, list(op.inputs)
        else:
            assert op.epilogue is not None
            expr, values = op.epilogue.data, [op.result, *op.extras]
        wide = frozenset(i for i in widened_only(expr) if values[i] in self.m.half_weights)
        for i in wide:
            args[i] = self.prepared_text(values[i])
        types = [axes_type(v, "kernel.zip operand") for v in values]
        result = axes_type(op.result, op.name)
        for i in _ufunc_operands(expr):
            if (
                i not in wide
                and types[i].shape != result.shape
                and any(not e.is_const or e.const_value != 1 for e in types[i].shape)
            ):
                args[i] = self.m.broadcast_at_load(op, values[i], result) or args[i]
        plan = plan_in_place(
            expr, [t.shape for t in types], [t.elem.name for t in types], (result.shape, result.elem.name), alias, wide
        )
        function = self._expr_function(expr, wide, plan, fewer_than(result.shape, TINY_ELEMENTS))
        computing = sum(not isinstance(step, (Operand, Const)) for step in expr.steps)
        if out is not None and computing >= ROWS_AT_A_TIME and not fewer_than(result.shape, ROWS_MIN_ELEMENTS):
            steps = None if wide else compiled_steps(expr, [t.elem.name for t in (*types, result)])
            if steps is not None:  # one compiled loop where numba is, else `_by_rows`
                self.m.pieces.add("zip_rows")
                return f"zip_rows({function}, {self._steps_name(function, steps)}, {out}, {', '.join(args)})"
            self.m.pieces.add("_by_rows")  # a long chain: evaluated a cache-sized block of rows at a time
            return f"_by_rows({function}, {out}, {', '.join(args)})"
        args = args[: expr.arity]  # the function's parameters: up to the last operand its Expr reads
        call_args = [*args, f"out={out}"] if out is not None else args
        return f"{function}({', '.join(call_args)})"

    def _expr_source(self, key: tuple[Expr, frozenset[int], InPlacePlan, bool], name: str) -> str:
        expr, wide, plan, tiny = key
        params = [f"a{i}: np.ndarray" for i in range(expr.arity)]
        lines = [f"def {name}({', '.join([*params, 'out: np.ndarray | None = None'])}) -> np.ndarray:"]
        notes = []
        if wide:
            notes.append(f"operands {', '.join(map(str, sorted(wide)))} arrive in prepared f32")
        if plan.alias is not None:
            notes.append(f"operand {plan.alias} arrives in out")
        written = [str(i) for i, into in enumerate(plan.into) if into == OUT]
        if written:
            notes.append(f"step {written[0]} writes" if len(written) == 1 else f"steps {', '.join(written)} write")
            notes[-1] += " into out"
        reused = [str(i) for i, into in enumerate(plan.into) if into is not None and into != OUT]
        if reused:
            notes.append(f"step{'s' * (len(reused) > 1)} {', '.join(reused)} reuse{'s' * (len(reused) == 1)} a buffer")
        note = f"; {'; '.join(notes)}" if notes else ""
        lines.append(f'    """#kernel.expr<{expr}>{note}."""')
        refs: list[str] = []
        # The variable holding each buffer now: `out` (None until a step makes it), or a step's array.
        buffer: dict[int, str] = {OUT: "out"}
        last = len(expr.steps) - 1
        for i, step in enumerate(expr.steps):
            into = plan.into[i]
            target = f", out={buffer[into]}" if into is not None else ""
            if isinstance(step, Operand):
                refs.append(f"a{step.index}")
                continue
            source = expr.steps[step.arg] if isinstance(step, Convert) else None
            prepared = isinstance(source, Operand) and source.index in wide
            rhs = step_source(step, refs, target, prepared, tiny)
            if into is not None:
                buffer[into] = f"s{i}"
            else:
                buffer[i] = f"s{i}"  # a new array; a later step may reuse it
            if i == last and into == OUT:
                lines.append(f"    return {rhs}")
            elif i == last:
                lines.append(f"    return _finished({rhs}, out)")
            else:
                lines.append(f"    s{i} = {rhs}")
                refs.append(f"s{i}")
        if isinstance(expr.steps[-1], Operand):
            lines.append(f"    return _finished({refs[-1]}, out)")
        return "\n".join(lines) + "\n"

    def line(self, op: Operation, text: Mapping[SSAValue, str]) -> str:
        """The right-hand side computing `op` from its operands as `text` spells them."""
        arg = [text[v] for v in op.operands]
        if isinstance(op, MatmulOp):
            slot = self.buffers.slot_of.get(op.result)
            out = "" if slot is None else f", out=_buf[{slot}]"
            ranks = [axes_type(v, "kernel.matmul operand").rank for v in op.operands]
            if ranks[0] >= 3 and ranks[1] == 2:  # a stack of rows by one matrix: one BLAS call
                self.m.pieces.add("_matmul_rows")
                call = f"_matmul_rows({arg[0]}, {arg[1]}{out})"
            else:
                call = f"np.matmul({arg[0]}, {arg[1]}{out})"
            # 1-D by 1-D gives a numpy scalar, not an array: keep every value an ndarray.
            return call if axes_type(op.result, "kernel.matmul").rank else f"np.asarray({call})"
        # The methods, not np.transpose/np.reshape: the same views at a fifth of the call's cost.
        if isinstance(op, PermuteOp):
            return f"{arg[0]}.transpose({tuple(op.permutation)!r})"
        if isinstance(op, RegroupOp):
            return f"{arg[0]}.reshape({self.m.shape_py(axes_type(op.result, 'kernel.regroup'))})"
        if isinstance(op, CastOp):
            result = axes_type(op.result, "kernel.cast")
            if op.operands[0] in self.m.half_weights and result.elem.name == "f32":
                return self.prepared_text(op.operands[0])  # widened once, by Weights
            dtype = numpy_dtype(result, f"kernel.cast '{op.node.data}'")
            return f"{arg[0]}.astype({dtype_source(dtype)})"
        if isinstance(op, ZipOp):
            slot = self.buffers.slot_of.get(op.result)
            at = self.buffers.in_place.get(op)
            zipped = axes_type(op.result, "kernel.zip")
            if at is not None:
                call = self._zip_call(op, arg, arg[at], alias=at)  # computed in a dead operand
            elif slot is not None:
                call = self._zip_call(op, arg, f"_buf[{slot}]")
            elif fills_result(op):
                # The operands it reads (none: a constant) stop short of its extents: a new array.
                spelled = dtype_source(numpy_dtype(zipped, f"kernel.zip '{op.node.data}'"))
                call = self._zip_call(op, arg, f"np.empty({self.m.shape_py(zipped)}, {spelled})")
            else:
                call = self._zip_call(op, arg, None)
            if broadcast_afterwards(op):  # the operands alone may not reach the result's extents
                self.m.pieces.add("_reach")
                return f"_reach({call}, {self.m.shape_py(zipped)})"
            return call
        if isinstance(op, LibraryOp) and op.kernel_name == "slice" and self._plain_slice(op):
            # A unit-step slice is plain indexing (a view), without the kernel's call.
            bounds = zip(op.param("starts"), op.param("counts"), strict=True)
            index = [self._slice_py(start, count) for start, count in bounds]
            return f"{arg[0]}[{', '.join(index)}{',' if len(index) == 1 else ''}]"
        if isinstance(op, LibraryOp) and op.kernel_name == "split" and all(type(n) is int for n in op.param("sizes")):
            return self._split_views(op, arg[0])
        if isinstance(op, SoftmaxOp) and _plain_softmax(op):
            self.m.pieces.add("_softmax")  # the build knows the dtype and the axis: no dispatch per call
            return f"_softmax({arg[0]})"
        if isinstance(op, NormalizeOp) and _plain_layer_norm(op):
            self.m.pieces.add("layer_norm_rows")  # the build knows the dtypes and the axis: no dispatch per call
            bias = arg[2] if len(arg) > 2 else "None"
            return f"layer_norm_rows({arg[0]}, {arg[1]}, {bias}, {self.m.param_py(op.param('epsilon'))})"
        if isinstance(op, LibraryOp):
            piece = f"kernel_{op.kernel_name}"
            if piece not in numpy_runtime.PIECES:
                raise UnsupportedError(f"the numpy backend has no kernel for {op.name} (node '{op.node.data}')")
            self.m.pieces.update({piece, *numpy_runtime.parameter_pieces(piece, op.params)})
            for i in numpy_runtime.WIDENED_OPERANDS.get(piece, ()):
                if i < len(op.operands) and op.operands[i] in self.m.half_weights:
                    arg[i] = self.prepared_text(op.operands[i])
            params = [f"{k}={self.m.param_py(v)}" for k, v in op.params.items()]
            if isinstance(op, AppendStateOp):  # in place in the state forward_in_place passes, if any
                arg.append("decode_state")
            if isinstance(op, AttentionOp) and self.m.decode_state:  # keys and values paged in the state, if so
                params.append("into=decode_state")
            if isinstance(op, RandomOp):  # its operand (None for a shape) and forward's generator
                arg = [*(arg or ["None"]), "_rng"]
            return f"{piece}({', '.join([*arg, *params])})"
        raise UnsupportedError(f"the numpy backend does not print {op.name}")

    @staticmethod
    def _split_views(op: LibraryOp, x: str) -> str:
        """A split whose sizes the build knows, as the views `kernel_split` returns: plain indexing, each
        chunk `start:start + size` along the axis, the last one to the axis's end."""
        rank = axes_type(op.inputs[0], "kernel.split").rank
        axis = op.param("axis") % rank
        lead = ":, " * axis
        chunks, start = [], 0
        for size in op.param("sizes")[:-1]:
            chunks.append(f"{x}[{lead}{start}:{start + size}]")
            start += size
        chunks.append(f"{x}[{lead}{start}:]")
        return ", ".join(chunks)

    @staticmethod
    def _plain_slice(op: LibraryOp) -> bool:
        """Whether a `kernel.slice` is plain Python indexing: unit steps, starts never negative."""
        from loam.core.bounds import Verdict
        from loam.core.derived import decide

        def never_negative(start: int | Poly) -> bool:
            return start >= 0 if isinstance(start, int) else decide(start) is Verdict.HOLDS

        return all(step == 1 for step in op.param("steps")) and all(map(never_negative, op.param("starts")))

    def _slice_py(self, start: int | Poly, count: int | Poly) -> str:
        """`start:start + count` as Python source (both known non-negative, as `kernel.slice` states them)."""
        first = self.m.param_py(start)
        if isinstance(start, int) and isinstance(count, int):
            return f"{start}:{start + count}"
        if isinstance(start, int) and start == 0:
            return f":{self.m.param_py(count)}"
        return f"{first}:{first} + {self.m.param_py(count)}"


def step_source(step: object, refs: Sequence[str], target: str = "", prepared: bool = False, tiny: bool = False) -> str:
    """The numpy expression computing one (non-operand) `Expr` step from the earlier steps `refs`.

    `target` (`, out=NAME`) makes a ufunc (or a piece taking `out`) write into a buffer; a `prepared`
    cast reads an operand Weights already holds in float32; a `tiny` result takes ReLU as
    `np.maximum(x, 0)`, the bits `_relu` gives, without its call."""
    if isinstance(step, Const):
        text = format_float(step.value)
        literal = {"inf": "np.inf", "-inf": "-np.inf", "nan": "np.nan"}.get(text, text)
        return f"{dtype_source(expr_dtype(step.elem))}({literal})"
    if isinstance(step, Unary):
        fn = _UNARY[step.op]
        if fn == "_relu" and tiny:
            return f"np.maximum({refs[step.arg]}, 0{target})"
        return f"{fn}({refs[step.arg]}{target})" if fn else refs[step.arg]
    if isinstance(step, Binary):
        return f"{_BINARY[step.op]}({refs[step.lhs]}, {refs[step.rhs]}{target})"
    if isinstance(step, Select):
        return f"np.where({refs[step.cond]}, {refs[step.a]}, {refs[step.b]})"
    assert isinstance(step, Convert)
    if prepared:
        return refs[step.arg]  # already the float32 this cast makes, prepared once by Weights
    return f"np.asarray({refs[step.arg]}).astype({dtype_source(expr_dtype(step.elem))})"


def compiled_steps(expr: Expr, elems: Sequence[str]) -> tuple | None:
    """`expr`'s steps as the data `zip_rows` compiles a loop from (`("operand", i)`, `("const", value)`,
    `(op, arg)`, `(op, lhs, rhs)`), or None where the loop cannot give the numpy function's bits: an
    operand or the result (`elems`, the result's last) not float32, a step outside `STEP_OPS`, a cast,
    a select, or a constant that is not a finite float32."""
    if any(elem != "f32" for elem in elems):
        return None
    steps: list[tuple] = []
    for step in expr.steps:
        if isinstance(step, Operand):
            steps.append(("operand", step.index))
        elif isinstance(step, Const) and step.elem == "f32" and math.isfinite(step.value):
            steps.append(("const", float(format_float(step.value))))  # the number the numpy function spells
        elif isinstance(step, Unary) and step.op in zip_compiled.STEP_OPS:
            steps.append((step.op, step.arg))
        elif isinstance(step, Binary) and step.op in zip_compiled.STEP_OPS:
            steps.append((step.op, step.lhs, step.rhs))
        else:
            return None
    return tuple(steps)


def expr_dtype(elem: str) -> np.dtype:
    """The dtype of an Expr constant or cast: plain numpy, or one of ml_dtypes'."""
    dtype = by_name(elem).numpy
    if dtype is None or dtype.kind == "O":
        raise UnsupportedError(f"expression step of element type {elem} has no numpy dtype")
    return dtype


def widened_only(expr: Expr) -> set[int]:
    """The operands `expr` reads only through a cast to f32: given in f32 already, they need no cast."""
    readers: dict[int, list[object]] = {}
    for step in expr.steps:
        for field_name in ("arg", "lhs", "rhs", "cond", "a", "b"):
            source = getattr(step, field_name, None)
            if isinstance(source, int) and not isinstance(step, Operand):
                readers.setdefault(source, []).append(step)
    found: set[int] = set()
    refused: set[int] = set()
    last = len(expr.steps) - 1
    for i, step in enumerate(expr.steps):
        if not isinstance(step, Operand):
            continue
        uses = readers.get(i, [])
        if i != last and uses and all(isinstance(u, Convert) and u.elem == "f32" for u in uses):
            found.add(step.index)
        else:
            refused.add(step.index)
    return found - refused
