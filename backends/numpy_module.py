"""Print a `kernel.program` as one readable Python module that imports only numpy.

`emit_python(module)` returns the module's source.  It declares, in order: a docstring naming the
model; `import numpy as np` (and `import ml_dtypes` where a bf16 value appears); the runtime
pieces the program uses, copied from `loam.backends.numpy_runtime` (so `ShapeError` and
`LoadError` are the module's own); one marker class per axis (with `EXTENT` where every value
the program declares gives the axis one constant extent); one function per distinct `Expr`; the
folded constants as byte literals; the weights the IR carries as ONE bytes literal (`_WEIGHT_BYTES`,
read back as numpy.frombuffer views); `class Weights` (`load(data)` of one safetensors or GGUF
file's bytes or a mapping of shard name -> bytes, `load_file(path)` through a read-only memory map,
`stored(name)`, and `embedded()` when the IR carries every weight: see `_weights_source`);
`class Outputs` when there are several outputs; and `forward(weights, *inputs)`, which runs its
prologue and then one line per kernel, each commented with the ONNX node it computes.  A half
weight that forward computes with in f32 (a matmul's cast, an expression's widening, a kernel in
`numpy_runtime.WIDENED_OPERANDS`) is read from a float32 twin `Weights` prepares once.

The prologue runs before any kernel.  It checks each input (ndarray, dtype, rank, numbers) and binds
each extent symbol from the first input axis that is the symbol alone, recording in `_src` which
axis gave it; reads back a symbol no input carries alone from a spelled axis (`2*n`: n is half the
length); checks every spelled axis against its spelling (`past + 1`); then checks each owed
condition (`shape_poly.owe`), computing each derived symbol (`min(S, 1024)`, with the runtime's
`derived_extent`) into `_env` just before the first condition that reads it, and last the derived symbols
the kernels' shapes and parameters read.  Every extent in the module is an expression over `_env`.

A `kernel.if` prints as `if bool(np.asarray(cond).reshape(-1)[0]):` / `else:`, each block laid out
like forward's body: the owed conditions only its branch relies on, the derived symbols they and its
kernels read (computed there, so a branch not taken computes nothing and refuses nothing), its
kernels, and last the If's results assigned from what it yields, so they are bound after the If
either way.  Blocks nest.  A length only an If's result has (`present.0.key[2]`, when the branches
give it differently) is bound from the result right after the If where a later extent reads it, and
a condition owed on it is checked there; read anywhere else, it stops emission.

Example of the output for a one-layer MLP:

```python
@np.errstate(all="ignore")  # inf and nan are ONNX results, not warnings
def forward(weights: "Weights", x: np.ndarray) -> np.ndarray:
    _env: dict[str, int] = {}  # each extent symbol's value
    _src: dict[str, str] = {}  # the input axis that gave it
    _check_input("x", x, "float32", (("Batch", "N"), ("In", 8)), _env, _src)
    fc1 = np.matmul(x, weights.fc1_weight)  # fc1
    y = _zip_0(fc1, weights.fc1_bias, out=fc1)  # fc1: bias and ReLU in the product's buffer
    return y
```

and of a prologue that owes a condition:

```python
    _check_input("input_ids", input_ids, "int64", (("Batch", "batch"), ("Seq", "seq")), _env, _src)
    _check_spelled("mask", 1, "Total", mask.shape[1], "past + seq", _env["past"] + _env["seq"], ...)
    _owe(_env["past"] + _env["seq"] <= 128, "past + seq <= 128", "Slice node 'attn/Slice_3'", ...)
```

Identifiers come from one set (`loam.backends.names.Names`): Python's keywords and builtins and
every name the module declares or spells are reserved first, then each ONNX name is spelled as an
ASCII identifier (`fc1.weight` -> `fc1_weight`, `日本` -> `u65e5_u672c`) with `_` appended while
taken (a tensor named `bool` is forward's `bool_`; `INPUTS` and `OUTPUTS` keep the ONNX names).  An
axis whose marker would take a reserved name stops emission with an `AxisError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, IntAttr, ModuleOp, StringAttr
from xdsl.ir import Attribute, Operation, SSAValue

from loam.backends import numpy_runtime
from loam.backends.names import PYTHON_NAMES, Names, identifier
from loam.backends.numpy_buffers import BufferPlan, plan_buffers
from loam.backends.numpy_expr import _dtype_source, _expr_dtype, step_source
from loam.backends.numpy_inplace import OUT, InPlacePlan, plan_in_place
from loam.dialects.expr import Const, Convert, Expr, Operand, Unary, broadcast_extents
from loam.dialects.kernel import (
    CastOp,
    ConstantOp,
    IfOp,
    LibraryOp,
    MatmulOp,
    PermuteOp,
    ProgramOp,
    RegroupOp,
    ReturnOp,
    TileProgramOp,
    WeightOp,
    YieldOp,
    ZipOp,
)
from loam.dialects.shape_poly import ExtentAttr, OweOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.dim_params import binding_plan
from loam.errors import AxisError, LoamError, UnsupportedError
from loam.poly import Poly, derived_call
from loam.runtime.kernels import elementwise as elementwise_kernels

__all__ = ["emit_python"]

# Step spellings: numpy ufuncs, or pieces where the meaning depends on the element type.
_UNARY: dict[str, str] = elementwise_kernels.UNARY_SOURCE
_BINARY: dict[str, str] = elementwise_kernels.BINARY_SOURCE

# Element types whose arithmetic runs in float32: a weight of one is prepared in f32 once by `Weights`.
_HALVES = ("f16", "bf16")

# A preallocated buffer is worth its bookkeeping from this many elements on (or for a symbolic extent).
_SLOT_MIN = 16384

# Byte alignment of each tensor within the embedded weights' one bytes literal.
_EMBED_ALIGN = 64


def emit_python(module: ModuleOp) -> str:
    """The Python source of the one `kernel.program` in `module`.

    The module attribute `loam.checkpoint_names` (an array of [pattern, template] string pairs, the
    `[checkpoint_names]` rules), where present, becomes `Weights._CHECKPOINT_NAMES`: `Weights.load`
    renames each checkpoint tensor by the first matching rule before checking it against the graph.

    Raises `UnsupportedError` for IR the numpy backend does not print (a type without named axes,
    an element type plain numpy lacks, an extent no input binds) and `AxisError` for an axis
    whose marker class would take a name the module declares.
    """
    programs = [op for op in module.walk() if isinstance(op, ProgramOp)]
    if len(programs) != 1:
        raise UnsupportedError(f"the numpy backend prints one kernel.program, found {len(programs)}")
    return _Emitter(programs[0], _checkpoint_names(module), _row_orders(module)).emit()


def _row_orders(module: ModuleOp) -> tuple[tuple[str, int], ...]:
    """The module attribute `loam.row_orders` (an array of [checkpoint tensor, head count] pairs: the
    tensors whose rows llama.cpp interleaved for its rotary embedding), for `Weights._ROW_ORDERS`."""
    attr = module.attributes.get("loam.row_orders")
    if attr is None:
        return ()
    pairs: list[tuple[str, int]] = []
    for pair in attr.data if isinstance(attr, ArrayAttr) else ():
        items = pair.data if isinstance(pair, ArrayAttr) else ()
        if len(items) != 2 or not isinstance(items[0], StringAttr) or not isinstance(items[1], IntAttr):
            raise UnsupportedError(f"loam.row_orders holds {pair}, not a [tensor name, head count] pair")
        pairs.append((items[0].data, items[1].data))
    return tuple(pairs)


def _checkpoint_names(module: ModuleOp) -> tuple[tuple[str, str], ...]:
    """The `[checkpoint_names]` rules the build attached to `module` (none: checkpoint names are the graph's)."""
    attr = module.attributes.get("loam.checkpoint_names")
    if attr is None:
        return ()
    if not isinstance(attr, ArrayAttr):
        raise UnsupportedError(f"loam.checkpoint_names is {attr}, not an array of [pattern, template] pairs")
    rules: list[tuple[str, str]] = []
    for pair in attr.data:
        items = pair.data if isinstance(pair, ArrayAttr) else ()
        if len(items) != 2 or not isinstance(items[0], StringAttr) or not isinstance(items[1], StringAttr):
            raise UnsupportedError(f"loam.checkpoint_names holds {pair}, not a [pattern, template] pair of strings")
        rules.append((items[0].data, items[1].data))
    return tuple(rules)


def _axes_type(value: SSAValue, what: str) -> AxesTensorType:
    t = value.type
    if not isinstance(t, AxesTensorType):
        raise UnsupportedError(f"{what} has type {t}; the numpy backend needs !tensor_axes.tensor")
    return t


def _numpy_dtype(t: AxesTensorType, what: str) -> np.dtype:
    """The dtype holding `t`'s elements: a plain numpy one, or ml_dtypes.bfloat16."""
    dtype = t.elem.numpy
    if dtype is None or dtype.kind == "O" or (dtype.type.__module__ != "numpy" and t.elem.name != "bf16"):
        raise UnsupportedError(f"{what} has element type {t.elem.name}, which plain numpy cannot hold")
    return dtype


def _type_text(t: AxesTensorType) -> str:
    return f"{t.elem.name} [{', '.join(str(a) for a in t.axes)}]"


class _Emitter:
    """Collects what the program needs, then prints the module top to bottom."""

    # Further attributes of `Weights` (name -> what it holds), for a backend keeping more per weights.
    weight_slots: dict[str, str] = {}  # noqa: RUF012 - read-only; a subclass replaces it whole

    def __init__(
        self,
        program: ProgramOp,
        checkpoint_names: tuple[tuple[str, str], ...] = (),
        row_orders: tuple[tuple[str, int], ...] = (),
    ) -> None:
        self.program = program
        self.checkpoint_names = checkpoint_names
        self.row_orders = row_orders
        self.names = Names()
        self.pieces: set[str] = set()
        # Each expression function, keyed by the expression and the operands given in prepared f32.
        self.exprs: dict[tuple[Expr, frozenset[int], InPlacePlan], str] = {}
        self.consts: list[tuple[str, np.ndarray]] = []
        # Symbols forward binds from its inputs, in binding order (for messages).
        self.input_symbols: list[str] = []
        # The block being collected (None while rendering): derived symbols a printed extent reads
        # are registered in it, so each is computed in the innermost block that needs it.
        self.scope: _Scope | None = None
        # Symbols naming a length only an If's result has (`y[0]` when the branches differ): the If
        # node, and whether some later extent reads it (then forward binds it from the result).
        self.if_symbols: dict[str, str] = {}
        self.if_symbols_read: set[str] = set()
        self.value_text: dict[SSAValue, str] = {}
        # Each program output's identifier, so the value computing it is named that way.
        self.returned: dict[SSAValue, str] = {}
        self.weights: list[tuple[WeightOp, str]] = []
        # Half weights (f16, bf16) by value -> attribute, and the attribute of each one's float32
        # form, prepared once by `Weights` wherever forward would widen it on every call.
        self.half_weights: dict[SSAValue, str] = {}
        self.prepared: dict[str, str] = {}
        # Whether a bf16 value appears, so the module imports ml_dtypes (and only then).
        self.ml_dtypes = False
        # Where forward's top-level block stores its intermediates (`loam.backends.numpy_buffers`).
        self.buffers = BufferPlan()
        # Each tile program's numpy function (`loam.backends.numpy_tile`), and their sources.
        self.tile_functions: dict[object, str] = {}
        self.tile_sources: list[str] = []

    # -- collection -----------------------------------------------------------------------------

    def _ops(self) -> list[Operation]:
        """Every op of the program, those inside If branches included."""
        return [op for op in self.program.walk() if op is not self.program]

    def _all_types(self) -> list[AxesTensorType]:
        types = [_axes_type(a, f"input '{n.data}'") for a, n in
                 zip(self.program.block.args, self.program.input_names, strict=True)]  # fmt: skip
        for op in self._ops():
            for r in op.results:
                types.append(_axes_type(r, f"{op.name} result"))
        return types

    def _markers(self) -> dict[str, int | None]:
        """Axis marker name -> EXTENT (None where the program gives the axis no single constant)."""
        extents: dict[str, set[Poly | None]] = {}
        for t in self._all_types():
            for axis in t.axes:
                if axis.parts:
                    for part in axis.parts:
                        extents.setdefault(part, set())  # a merge states no extent for its parts
                else:
                    extents.setdefault(axis.name, set()).add(axis.extent)
        markers: dict[str, int | None] = {}
        for name, found in extents.items():
            only = next(iter(found)) if len(found) == 1 else None  # type: ignore[misc]
            markers[name] = only.const_value if only is not None and only.is_const else None
        return markers

    def declared_names(self) -> set[str]:
        """The module's own names besides `names.MODULE_NAMES`: the runtime pieces it may carry, and
        the attributes a subclass's `Weights` keeps (a backend declaring more adds its own)."""
        return {*numpy_runtime.PIECES, "SAFETENSORS_DTYPES", *self.weight_slots}

    def _reserve_declared(self, markers: Iterable[str]) -> None:
        """Reserve every name the module relies on, then each axis marker class (refused where it
        would take one of those: a keyword, a builtin, the module's own name)."""
        for name in self.declared_names():
            self.names.reserve(name)
        for name in markers:
            if name in self.names:
                what = "Python's" if name in PYTHON_NAMES else "the module's own"
                raise AxisError(
                    f"axis '{name}' would declare a marker class named like {what} '{name}'; "
                    "rename the axis in the layout"
                )
            if not name.isidentifier() or name.startswith("_"):
                raise AxisError(f"axis '{name}' is not a Python identifier, so it cannot name a marker class")
            self.names.reserve(name)

    # -- shapes ---------------------------------------------------------------------------------

    def _symbol_py(self, name: str) -> str:
        """`_env[name]`, once `name` is known to be bound by an input or derived from bound symbols.

        While collecting, a derived symbol not yet computed where the current block runs is
        registered: in the block's own set (computed at its top), or, where it reads the length
        an If's result has, as a line at this point of the block (that length is bound only after
        the If ran).
        """
        scope = self.scope
        if scope is None or name in self.input_symbols or scope.knows(name):
            return f"_env[{name!r}]"
        if name in self.if_symbols:
            if scope.binds(name):
                self.if_symbols_read.add(name)
                return f"_env[{name!r}]"
            raise UnsupportedError(
                f"extent symbol '{name}' is the length If node '{self.if_symbols[name]}' gives its result, "
                "which forward knows only after the If ran; it is read before that or outside the branch"
            )
        call = derived_call(name)
        if call is None:
            raise UnsupportedError(f"extent symbol '{name}' is bound by no input axis and derived from none")
        for arg in call.args:
            self._poly_py(arg)
        if self._reads_if_symbol([name]):
            args = ", ".join([repr(call.function), *(self._poly_py(a) for a in call.args)])
            scope.items.append(f"_env[{name!r}] = derived_extent({args})")
            self.pieces.add("derived_extent")
            scope.inline.add(name)
        else:
            scope.derived.add(name)
        return f"_env[{name!r}]"

    def _reads_if_symbol(self, names: Iterable[str]) -> bool:
        """Whether any of `names`, or a derived symbol's operands, is the length an If's result has."""
        return any(n in self.if_symbols for n in _symbols_closure(names))

    def _poly_py(self, p: Poly) -> str:
        """`p` as a Python expression over the bound symbols (`2*_env['N'] + 1`)."""
        if p.is_const:
            return str(p.const_value)
        text = ""
        for mono, coeff in p.terms:
            factors = [self._symbol_py(sym) for sym, power in mono for _ in range(power)]
            magnitude = abs(coeff)
            if magnitude != 1 or not factors:
                factors.insert(0, str(magnitude))
            body = "*".join(factors)
            if not text:
                text = f"-{body}" if coeff < 0 else body
            else:
                text += f" - {body}" if coeff < 0 else f" + {body}"
        return text

    def _input_symbols_of(self, polys: Iterable[Poly]) -> tuple[str, ...]:
        """The symbols forward binds (from inputs, or from an If's result) that `polys` read, through
        their derived symbols, in binding order."""
        seen: set[str] = set()
        stack = [name for p in polys for name in p.symbols]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            call = derived_call(name)
            if call is not None:
                stack.extend(n for a in call.args for n in a.symbols)
        return tuple(s for s in [*self.input_symbols, *self.if_symbols] if s in seen)

    def _derived_lines(self, names: Iterable[str], done: set[str]) -> list[str]:
        """Lines computing each derived symbol of `names` not in `done`, its operands' symbols first."""
        lines: list[str] = []
        for name in sorted(names, key=lambda n: (len(n), n)):
            call = derived_call(name)
            if call is None or name in done:
                continue
            inner = {n for a in call.args for n in a.symbols}
            lines += self._derived_lines(inner, done)
            args = ", ".join([repr(call.function), *(self._poly_py(a) for a in call.args)])
            lines.append(f"_env[{name!r}] = derived_extent({args})")
            self.pieces.add("derived_extent")
            done.add(name)
        return lines

    def _shape_py(self, t: AxesTensorType) -> str:
        items = [self._poly_py(a.extent) for a in t.axes]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"

    # -- kernels -----------------------------------------------------------------------------------

    def _prepared_text(self, value: SSAValue) -> str:
        """`weights.ATTR_f32`: the float32 form `Weights` prepares once for half weight `value`."""
        attr = self.half_weights[value]
        if attr not in self.prepared:
            self.prepared[attr] = self.names.mint(f"{attr}_f32")
            self.pieces.add("_prepared")
        return f"weights.{self.prepared[attr]}"

    def _expr_function(self, expr: Expr, wide: frozenset[int], plan: InPlacePlan) -> str:
        """The function computing `expr`; operands in `wide` arrive as the f32 their casts would make,
        and the steps `plan` names write into the result buffer."""
        key = (expr, wide, plan)
        name = self.exprs.get(key)
        if name is None:
            name = self.names.mint(f"_zip_{len(self.exprs)}")
            self.exprs[key] = name
            for step, into in zip(expr.steps, plan.into, strict=True):
                source = _UNARY[step.op] if isinstance(step, Unary) else _BINARY.get(getattr(step, "op", ""), "")
                if source.startswith("_") and not (into is not None and source == "_relu"):
                    self.pieces.add(source)
                if isinstance(step, (Const, Convert)) and step.elem == "bf16":
                    self.ml_dtypes = True
            if plan.into[-1] != OUT:
                self.pieces.add("_finished")
        return name

    def _zip_call(self, op: ZipOp | MatmulOp, args: list[str], out: str | None, alias: int | None = None) -> str:
        """A call of the function computing `op`'s Expr over `args` (writing into `out` when given)."""
        if isinstance(op, ZipOp):
            expr, values = op.expr.data, list(op.inputs)
        else:
            assert op.epilogue is not None
            expr, values = op.epilogue.data, [op.result, *op.extras]
        wide = frozenset(i for i in _widened_only(expr) if values[i] in self.half_weights)
        for i in wide:
            args[i] = self._prepared_text(values[i])
        types = [_axes_type(v, "kernel.zip operand") for v in values]
        result = _axes_type(op.result, op.name)
        plan = plan_in_place(
            expr, [t.shape for t in types], [t.elem.name for t in types], (result.shape, result.elem.name), alias, wide
        )
        call_args = [*args, f"out={out}"] if out is not None else args
        return f"{self._expr_function(expr, wide, plan)}({', '.join(call_args)})"

    def _expr_source(self, key: tuple[Expr, frozenset[int], InPlacePlan], name: str) -> str:
        expr, wide, plan = key
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
            rhs = step_source(step, refs, target, into is not None, prepared)
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

    def _kernel_line(self, op: Operation) -> str | None:
        """The right-hand side computing `op`, or None for ops that declare no line."""
        arg = [self.value_text[v] for v in op.operands]
        if isinstance(op, MatmulOp):
            slot = self.buffers.slot_of.get(op.result)
            out = "" if slot is None else f", out=_buf[{slot}]"
            call = f"np.matmul({arg[0]}, {arg[1]}{out})"
            # 1-D by 1-D gives a numpy scalar, not an array: keep every value an ndarray.
            return call if _axes_type(op.result, "kernel.matmul").rank else f"np.asarray({call})"
        # The methods, not np.transpose/np.reshape: the same views at a fifth of the call's cost.
        if isinstance(op, PermuteOp):
            return f"{arg[0]}.transpose({tuple(op.permutation)!r})"
        if isinstance(op, RegroupOp):
            return f"{arg[0]}.reshape({self._shape_py(_axes_type(op.result, 'kernel.regroup'))})"
        if isinstance(op, CastOp):
            result = _axes_type(op.result, "kernel.cast")
            if op.operands[0] in self.half_weights and result.elem.name == "f32":
                return self._prepared_text(op.operands[0])  # widened once, by Weights
            dtype = _numpy_dtype(result, f"kernel.cast '{op.node.data}'")
            return f"{arg[0]}.astype({_dtype_source(dtype)})"
        if isinstance(op, ZipOp):
            slot = self.buffers.slot_of.get(op.result)
            at = self.buffers.in_place.get(op)
            if at is not None:
                call = self._zip_call(op, arg, arg[at], alias=at)  # computed in a dead operand
            else:
                call = self._zip_call(op, arg, None if slot is None else f"_buf[{slot}]")
            out = _axes_type(op.result, "kernel.zip")
            broadcast = broadcast_extents([_axes_type(v, "kernel.zip operand").shape for v in op.inputs])
            if broadcast != out.shape:  # the operands alone may not reach the result's extents
                self.pieces.add("_reach")
                return f"_reach({call}, {self._shape_py(out)})"
            return call
        if isinstance(op, LibraryOp) and op.kernel_name == "slice" and self._plain_slice(op):
            # A unit-step slice is plain indexing (a view), without the kernel's call.
            bounds = zip(op.param("starts"), op.param("counts"), strict=True)
            index = [self._slice_py(start, count) for start, count in bounds]
            return f"{arg[0]}[{', '.join(index)}{',' if len(index) == 1 else ''}]"
        if isinstance(op, LibraryOp):
            piece = f"kernel_{op.kernel_name}"
            if piece not in numpy_runtime.PIECES:
                raise UnsupportedError(f"the numpy backend has no kernel for {op.name} (node '{op.node.data}')")
            self.pieces.add(piece)
            for i in numpy_runtime.WIDENED_OPERANDS.get(piece, ()):
                if i < len(op.operands) and op.operands[i] in self.half_weights:
                    arg[i] = self._prepared_text(op.operands[i])
            params = [f"{k}={self._param_py(v)}" for k, v in op.params.items()]
            return f"{piece}({', '.join([*arg, *params])})"
        raise UnsupportedError(f"the numpy backend does not print {op.name}")

    @staticmethod
    def _plain_slice(op: LibraryOp) -> bool:
        """Whether a `kernel.slice` is plain Python indexing: unit steps, starts never negative."""
        from loam.bounds import Verdict
        from loam.derived import decide

        def never_negative(start: int | Poly) -> bool:
            return start >= 0 if isinstance(start, int) else decide(start) is Verdict.HOLDS

        return all(step == 1 for step in op.param("steps")) and all(map(never_negative, op.param("starts")))

    def _slice_py(self, start: int | Poly, count: int | Poly) -> str:
        """`start:start + count` as Python source (both known non-negative, as `kernel.slice` states them)."""
        first = self._param_py(start)
        if isinstance(start, int) and isinstance(count, int):
            return f"{start}:{start + count}"
        if isinstance(start, int) and start == 0:
            return f":{self._param_py(count)}"
        return f"{first}:{first} + {self._param_py(count)}"

    def _param_py(self, value: object) -> str:
        """A kernel parameter as Python source; a `Poly` (or a tuple holding some) over the bound symbols."""
        if isinstance(value, Poly):
            return self._poly_py(value)
        if isinstance(value, tuple) and any(isinstance(v, Poly) for v in value):
            items = [self._param_py(v) for v in value]
            return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"
        return _py_literal(value)

    def _values_line(self, op: ConstantOp) -> str:
        """A `kernel.constant` holding polynomials: computed in forward from the bound symbols."""
        t = _axes_type(op.result, "kernel.constant")
        dtype = _numpy_dtype(t, f"kernel.constant '{op.node.data}'")
        assert isinstance(op.value, ArrayAttr)
        items = ", ".join(self._poly_py(e.data) for e in op.value.data if isinstance(e, ExtentAttr))
        return f"np.array([{items}], dtype={_dtype_source(dtype)}).reshape({self._shape_py(t)})"

    # -- the prologue: bind the symbols, check the inputs and what the build owes ------------------

    def _inputs(self) -> tuple[list[str], list[str]]:
        """forward's parameters, and its input checks: each input, then each symbol read back from a
        spelled axis, then every spelled axis against its spelling."""
        program = self.program
        args = list(zip(program.block.args, [n.data for n in program.input_names.data], strict=True))
        types = [_axes_type(a, f"input '{name}'") for a, name in args]
        for (_, name), t in zip(args, types, strict=True):
            for axis in t.axes:
                if any(derived_call(s) is not None for s in axis.extent.symbols):
                    raise UnsupportedError(
                        f"input '{name}' axis {axis.name} has extent {axis.extent}, which reads a derived "
                        "symbol; an input's extent is a number or a spelling over input symbols"
                    )
        plan, unyielded = binding_plan([[axis.extent for axis in t.axes] for t in types])
        if unyielded:
            raise UnsupportedError(
                f"input extent symbols {', '.join(sorted(unyielded))} are carried alone by no input axis and "
                "read back from none"
            )
        self.input_symbols = [b.symbol for b in plan]
        params: list[str] = []
        checks: list[str] = []
        for (arg, onnx_name), t in zip(args, types, strict=True):
            ident = self.names.mint(onnx_name)
            params.append(ident)
            self.value_text[arg] = ident
            dtype = _numpy_dtype(t, f"input '{onnx_name}'")
            axes: list[tuple[str, int | str | None]] = []
            for axis in t.axes:
                e = axis.extent
                axes.append((axis.name, e.const_value if e.is_const else e.lone_symbol))
            check = f"_check_input({onnx_name!r}, {ident}, {dtype.name!r}, {_tuple_py(axes)}, _env, _src)"
            if all(e.is_const for e in t.shape) and dtype.type.__module__ == "numpy":
                # A fixed shape: the common case costs three comparisons; _check_input words a refusal.
                shape = _tuple_py([e.const_value for e in t.shape])
                same = f"{ident}.__class__ is np.ndarray and {ident}.dtype == {_dtype_source(dtype)}"
                check = f"if not ({same} and {ident}.shape == {shape}):\n    {check}"
            checks.append(check)
        read_from: set[tuple[int, int]] = set()
        for b in plan:
            if b.alone:
                continue
            name, ident = args[b.input][1], params[b.input]
            axis = types[b.input].axes[b.axis]
            read_from.add((b.input, b.axis))
            self.pieces.add("_read_back")
            checks.append(
                f"_read_back({name!r}, {b.axis}, {axis.name!r}, {ident}.shape[{b.axis}], {b.symbol!r}, "
                f"{str(axis.extent)!r}, {self._poly_py(b.coefficient)}, {self._poly_py(b.rest)}, _env, _src)"
            )
        for i, ((_, name), t) in enumerate(zip(args, types, strict=True)):
            for a, axis in enumerate(t.axes):
                e = axis.extent
                if e.is_const or e.lone_symbol is not None or (i, a) in read_from:
                    continue
                self.pieces.add("_check_spelled")
                checks.append(
                    f"_check_spelled({name!r}, {a}, {axis.name!r}, {params[i]}.shape[{a}], {str(e)!r}, "
                    f"{self._poly_py(e)}, {_tuple_py(self._input_symbols_of([e]))}, _env, _src)"
                )
        return params, checks

    def _owed_line(self, op: OweOp) -> str:
        """The check of one owed condition (registering the derived symbols it reads)."""
        lhs, rhs = op.lhs.data, op.rhs.data
        test = f"{self._poly_py(lhs)} {'==' if op.equal else '<='} {self._poly_py(rhs)}"
        symbols = _tuple_py(self._input_symbols_of([lhs, rhs]))
        self.pieces.add("_owe")
        return f"_owe({test}, {op.condition!r}, {op.reason.data!r}, {symbols}, _env, _src)"

    def _owe_now_or_later(self, op: OweOp) -> None:
        """Check `op` at the top of the current block, or, where it reads the length an If's result
        has, right after that If binds it (no kernel before it relies on the condition)."""
        scope = self.scope
        assert scope is not None
        polys = (op.lhs.data, op.rhs.data)
        if self._reads_if_symbol(n for p in polys for n in p.symbols):
            scope.deferred.append(op)
            return
        scope.owed.append(({n for p in polys for n in p.symbols}, self._owed_line(op)))

    def _owe_deferred(self) -> None:
        """Check each deferred condition of the current block whose If lengths are now bound."""
        scope = self.scope
        assert scope is not None
        waiting = scope.deferred
        scope.deferred = []
        for op in waiting:
            names = [n for p in (op.lhs.data, op.rhs.data) for n in _symbols_closure(p.symbols)]
            if all(scope.binds(n) for n in names if n in self.if_symbols):
                scope.items.append(self._owed_line(op))
            else:
                scope.deferred.append(op)

    # -- printing --------------------------------------------------------------------------------

    def emit(self) -> str:
        program = self.program
        markers = self._markers()
        self._reserve_declared(markers)
        self.pieces.update({"_check_input", "_read_checkpoint", "_load_weights", "_mapped", "_check_index"})

        # Inputs first: their names are forward's parameters, their symbols bind extents.
        params, checks = self._inputs()

        ret = program.return_op
        output_names = [n.data for n in ret.output_names.data]
        # Output names are minted before any other local: they are the Outputs fields too.
        out_idents = [self.names.mint(n) for n in output_names]
        for v, ident in zip(ret.outputs, out_idents, strict=True):
            self.returned.setdefault(v, ident)
        self._find_if_symbols()

        # forward's body, then its prologue: each owed condition, with the derived symbols it reads
        # computed just before it, then the derived symbols the kernels' shapes and parameters read.
        top = self._collect(program.block.ops, None)
        head, body = self._render(top, set())
        prologue = [*checks, *head]
        weights = self.weights

        # A program reading no weight carries all of them: `Weights.embedded()` is `Weights()`.
        embedded = all(op.data is not None for op, _ in weights)
        carried = [(op, attr) for op, attr in weights if op.data is not None]
        out_fields = out_idents if len(output_names) > 1 else []

        self.ml_dtypes = self.ml_dtypes or any(t.elem.name == "bf16" for t in self._all_types())
        parts: list[str] = [self._docstring(output_names), self._imports()]
        parts += self._runtime_sources()
        parts += [_marker_source(name, extent) for name, extent in markers.items()]
        parts += self._declarations()
        parts += [f"{name} = {_array_literal(arr)}\n" for name, arr in self.consts]
        rows: list[str] = []
        if carried:
            blob, rows = _embedded_bytes(carried)
            parts.append(
                f"# The bytes of every weight the module carries, little-endian, each at an offset aligned to "
                f"{_EMBED_ALIGN}\n_WEIGHT_BYTES = {blob!r}\n"
            )
        parts.append(self._weights_source(weights, rows, embedded))
        if out_fields:
            parts.append(_outputs_source(out_fields, output_names))
        parts.append(self._signature_source(output_names))
        parts.append(self._forward_source(params, prologue, body, ret, out_fields))
        return "\n\n".join(p.rstrip("\n") + "\n" for p in parts)

    def _signature_source(self, output_names: Sequence[str]) -> str:
        """`INPUTS` and `OUTPUTS`: forward's parameters and results by ONNX name, for callers (such as
        `loam generate`) that find a decoder's inputs by name."""
        inputs = []
        for arg, name in zip(self.program.block.args, self.program.input_names.data, strict=True):
            t = _axes_type(arg, f"input '{name.data}'")
            extents = tuple(e.const_value if e.is_const else None for e in t.shape)
            inputs.append((name.data, _numpy_dtype(t, f"input '{name.data}'").name, extents))
        return (
            "# forward's inputs in order (ONNX name, dtype, extents: None where the call decides) and its\n"
            "# outputs' ONNX names\n"
            f"INPUTS = {tuple(inputs)!r}\nOUTPUTS = {tuple(output_names)!r}\n"
        )

    # -- what the module declares besides forward (the WGSL printer declares its own) ---------------

    def _imports(self) -> str:
        return "import ml_dtypes\nimport numpy as np\n" if self.ml_dtypes else "import numpy as np\n"

    def _runtime_sources(self) -> list[str]:
        """The runtime pieces the module carries, each as its source text."""
        return [numpy_runtime.source_of(p) for p in numpy_runtime.pieces_for(self.pieces)]

    def _declarations(self) -> list[str]:
        """The expression functions and the buffer pool."""
        parts = [self._expr_source(key, n) for key, n in self.exprs.items()] + self.tile_sources
        if self.buffers.slots:
            parts.append(
                "# forward's preallocated intermediates, by the extents they read (see _keep)\n"
                "_POOL: dict[tuple[int, ...], tuple[np.ndarray, ...]] = {}\n"
            )
        return parts

    def _finish_block(self, scope: _Scope) -> None:
        """Lines ending forward's top-level block, after its kernels."""
        if self.buffers.slots:
            scope.items.append("_keep(_POOL, _key, _buf)  # the buffers serve the next call with these extents")

    def _find_if_symbols(self) -> None:
        """Record each symbol that names a length only an If's result has (no input binds it)."""
        for op in self._ops():
            if not isinstance(op, IfOp):
                continue
            for r in op.outputs:
                for axis in _axes_type(r, f"kernel.if '{op.node.data}' result").axes:
                    for name in axis.extent.symbols:
                        if name not in self.input_symbols and derived_call(name) is None:
                            self.if_symbols.setdefault(name, op.node.data)

    def _collect(self, ops: Iterable[Operation], parent: _Scope | None) -> _Scope:
        """One block's owed conditions and lines (an If's branches collected recursively)."""
        scope = _Scope(parent)
        outer, self.scope = self.scope, scope
        try:
            ops = list(ops)
            for op in ops:
                if isinstance(op, OweOp):
                    self._owe_now_or_later(op)
            if parent is None:
                self._plan_buffers(ops)
            for op in ops:
                if isinstance(op, (ReturnOp, YieldOp, OweOp)):
                    continue
                if isinstance(op, IfOp):
                    self._collect_if(op)
                    continue
                self._collect_op(op)
            if parent is None:
                self._finish_block(scope)
            if scope.deferred:
                op = scope.deferred[0]
                unbound = sorted(n for p in (op.lhs.data, op.rhs.data) for n in _symbols_closure(p.symbols)
                                 if n in self.if_symbols and not scope.binds(n))  # fmt: skip
                raise UnsupportedError(
                    f"owed condition {op.condition} ({op.reason.data}) reads extent symbol '{unbound[0]}', "
                    f"the length If node '{self.if_symbols[unbound[0]]}' gives its result, which this block "
                    "never binds"
                )
        finally:
            self.scope = outer
        return scope

    def _tile_line(self, op: TileProgramOp) -> None:
        """A tile program: its numpy function (declared once per program) into a new result array."""
        from loam.backends.numpy_tile import tile_function

        scope = self.scope
        assert scope is not None
        program = op.program.data
        name = self.tile_functions.get(program)
        if name is None:
            name = self.names.mint(f"_tile_{len(self.tile_functions)}")
            self.tile_functions[program] = name
            self.tile_sources.append(tile_function(name, program)[0])
            self.pieces.update(tile_function(name, program)[1])
        idents = [self._result_ident(op, r) for r in op.results]
        for ident, r in zip(idents, op.results, strict=True):
            t = _axes_type(r, "kernel.tile_program result")
            dtype = _dtype_source(_numpy_dtype(t, f"kernel.tile_program '{op.node.data}'"))
            scope.items.append(f"{ident} = np.empty({self._shape_py(t)}, {dtype})  # {op.node.data}")
        args = ", ".join([*(self.value_text[v] for v in op.operands), *idents])
        grid, numbers = self._param_py(op.param("grid")), self._param_py(tuple(op.param("numbers")))
        scope.items.append(f"{name}({grid}, {numbers}, {args})  # {op.node.data}: a tile program")

    def _plan_buffers(self, ops: Sequence[Operation]) -> None:
        """Plan the top-level block's buffers and open forward's body with the preallocated ones.

        A slot whose extents read the length an If's result has is dropped (known only after the If)."""
        broadcast = set()
        for op in ops:
            if isinstance(op, ZipOp):
                shapes = [_axes_type(v, "kernel.zip operand").shape for v in op.inputs]
                if broadcast_extents(shapes) != _axes_type(op.result, "kernel.zip").shape:
                    broadcast.add(op)
        plan = plan_buffers(ops, broadcast)
        late = {s for s, (shape, _) in enumerate(plan.slots)
                if self._reads_if_symbol({n for p in shape for n in p.symbols})}  # fmt: skip
        # numpy's allocator serves a small array faster than the pool's bookkeeping would.
        small = {s for s, (shape, _) in enumerate(plan.slots)
                 if all(p.is_const for p in shape) and math.prod(p.const_value for p in shape) < _SLOT_MIN}  # fmt: skip
        used = sorted({s for s in plan.slot_of.values() if s not in late | small})
        renumber = {old: new for new, old in enumerate(used)}
        plan.slot_of = {v: renumber[s] for v, s in plan.slot_of.items() if s in renumber}
        plan.slots = [plan.slots[s] for s in used]
        self.buffers = plan
        if not plan.slots:
            return
        arrays = []
        for shape, elem in plan.slots:
            dims = [self._poly_py(p) for p in shape]
            text = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
            arrays.append(f"np.empty({text}, {_dtype_source(_expr_dtype(elem))})")
        symbols = self._input_symbols_of([p for shape, _ in plan.slots for p in shape])
        items = [f"_env[{n!r}]" for n in symbols]
        key = "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        self.pieces.add("_keep")
        scope = self.scope
        assert scope is not None
        scope.items.append(f"_key = {key}  # the extents the preallocated buffers read")
        scope.items.append(f"_buf = _POOL.pop(_key, None) or ({', '.join(arrays)},)")

    def _collect_op(self, op: Operation) -> None:
        """The line computing one op of a block (none for weights and numeric constants)."""
        scope = self.scope
        assert scope is not None
        if isinstance(op, WeightOp):
            attr = self.names.mint(op.weight_name.data)
            self.weights.append((op, attr))
            if _axes_type(op.result, f"weight '{op.weight_name.data}'").elem.name in _HALVES:
                self.half_weights[op.result] = attr
            self.value_text[op.result] = f"weights.{attr}"
            return
        if isinstance(op, ConstantOp) and isinstance(op.value, ArrayAttr):
            hint = op.result.name_hint or op.node.data or "values"
            ident = self.returned.get(op.result) or self.names.mint(hint)
            self.value_text[op.result] = ident
            rhs = self._values_line(op)
            scope.items.append(f"{ident} = {rhs}  # {op.node.data or 'shape values'}")
            return
        if isinstance(op, ConstantOp):
            name = self.names.mint(f"_CONST_{len(self.consts)}")
            self.consts.append((name, _to_numpy(op.value, f"kernel.constant '{op.node.data}'")))
            self.value_text[op.result] = name
            return
        if isinstance(op, TileProgramOp):
            self._tile_line(op)
            return
        rhs = self._kernel_line(op)
        idents = [self._result_ident(op, result) for result in op.results]
        node = op.properties.get("node")
        comment = node.data if isinstance(node, StringAttr) else op.name
        members = op.attributes.get("fused")
        names = [m.data for m in members.data] if isinstance(members, ArrayAttr) else [comment]
        if isinstance(op, MatmulOp) and op.epilogue is not None:
            # The product finished in its own buffer: the epilogue writes where np.matmul wrote.
            scope.items.append(f"{idents[0]} = {rhs}  # {names[0]}")
            extras = [self.value_text[v] for v in op.extras]
            call = self._zip_call(op, [idents[0], *extras], idents[0], alias=0)
            scope.items.append(f"{call}  # {', '.join(names[1:] or names)}: epilogue")
            return
        scope.items.append(f"{', '.join(idents)} = {rhs}  # {comment}")

    def _result_ident(self, op: Operation, result: SSAValue) -> str:
        hint = result.name_hint if result.name_hint and not result.name_hint.isdigit() else None
        node = op.properties.get("node")
        if result in self.returned:
            return self._named(result, self.returned[result])
        if hint is None and isinstance(node, StringAttr) and node.data:
            # Named after the ONNX node computing it (`/transformer/h.0/attn/Softmax` -> h_0_attn_softmax):
            # short, and the same name the comment at the line's end gives in full.
            parts = [p for p in node.data.split("/") if p]
            base = identifier("_".join(parts[1:] if len(parts) >= 3 else parts).lower())
            ident, n = base, 1
            while ident in self.names:
                ident, n = f"{base}_{n}", n + 1
            return self._named(result, self.names.mint(ident))
        if hint is None and op.operands:
            # An unnamed intermediate (a regrouped weight, a transposed operand) is named after
            # what it computes from: `bn1_scale_regroup` reads better than `t_`.
            source = self.value_text[op.operands[0]].rpartition(".")[2]
            hint = f"{source}_{op.name.rpartition('.')[2]}"
        return self._named(result, self.names.mint(hint or "t"))

    def _named(self, result: SSAValue, ident: str) -> str:
        self.value_text[result] = ident
        return ident

    def _collect_if(self, op: IfOp) -> None:
        """`if`/`else` over the one-element condition, each block assigning the If's results.

        A result length no input binds (the branches give it differently) is bound from the result
        after the If, for the later extents that read it.
        """
        scope = self.scope
        assert scope is not None
        cond = self.value_text[op.cond]
        idents = [self._result_ident(op, r) for r in op.outputs]
        blocks: list[_Scope] = []
        for region in (op.then_region, op.else_region):
            block = self._collect(region.block.ops, scope)
            last = region.block.last_op
            assert isinstance(last, YieldOp)
            for ident, value in zip(idents, last.values, strict=True):
                block.items.append(f"{ident} = {self.value_text[value]}")
            blocks.append(block)
        scope.items.append(_If(cond, op.node.data, blocks[0], blocks[1]))
        for ident, r in zip(idents, op.outputs, strict=True):
            for a, axis in enumerate(_axes_type(r, "kernel.if result").axes):
                name = axis.extent.lone_symbol
                if name is not None and name in self.if_symbols and not scope.binds(name):
                    scope.bound.add(name)
                    scope.items.append(_Bind(name, f"{ident}.shape[{a}]", op.node.data))
        self._owe_deferred()

    def _render(self, scope: _Scope, done: set[str]) -> tuple[list[str], list[str]]:
        """A block's head (owed checks, the derived symbols they and its kernels read) and body.

        `done` holds the derived symbols computed where the block runs; a branch gets a copy, as
        what one branch computes is not there after the If.
        """
        done = set(done)
        head: list[str] = []
        for symbols, line in scope.owed:
            head += self._derived_lines(symbols, done)
            head.append(line)
        head += self._derived_lines(scope.derived, done)
        body: list[str] = []
        for item in scope.items:
            if isinstance(item, str):
                body.append(item)
            elif isinstance(item, _Bind):
                if item.symbol in self.if_symbols_read:
                    body.append(f"_env[{item.symbol!r}] = {item.source}  # the length If node '{item.node}' gave")
                    body.append(f"_src[{item.symbol!r}] = {f'If node {item.node!r}'!r}")
            else:
                body.append(f"if bool(np.asarray({item.cond}).reshape(-1)[0]):  # {item.node}")
                for key, branch in (("then", item.then), ("else", item.other)):
                    if key == "else":
                        body.append("else:")
                    lines = [line for part in self._render(branch, done) for line in part]
                    body += [f"    {line}" for line in lines or ["pass"]]
        return head, body

    def _docstring(self, outputs: Sequence[str]) -> str:
        program = self.program
        model = program.model.data if program.model is not None else "an unnamed model"
        inputs = ", ".join(n.data for n in program.input_names.data)
        return (
            f'"""The model {model!r}, compiled by Loam: '
            f"forward(weights, {inputs}) -> {', '.join(outputs)}.\n\n"
            "Generated code: imports only numpy and carries its own runtime.  Regenerate it from the\n"
            'model rather than editing it.\n"""\n'
        )

    def _weights_source(
        self, weights: Sequence[tuple[WeightOp, str]], embedded_rows: Sequence[str], all_carried: bool
    ) -> str:
        """`class Weights`: `load`, `load_file`, `stored`, and `embedded()` where the IR carries every weight.

        `embedded_rows` describe the weights the module carries (`_EMBEDDED`); a checkpoint need not
        hold those.  Each half weight that forward would widen gets a float32 twin made in `__init__`.
        """
        prepared = [(attr, self.prepared[attr]) for _, attr in weights if attr in self.prepared]
        slots = (*(attr for _, attr in weights), *(p for _, p in prepared), "_stored", "_source", *self.weight_slots)
        lines = [
            "class Weights:",
            '    """The initializers forward reads, checked against the graph when loaded.',
            "",
            "    Each attribute holds a weight in the graph's dtype: a view of the checkpoint's bytes where the",
            "    stored dtype is the graph's, else converted once.  A half weight stays half; where forward",
            "    computes with it in float32, that float32 form is made here once, never per call.",
            '    """',
            "",
            f"    __slots__ = {slots!r}",
            "",
            "    # ONNX name, attribute, dtype, (axis, extent) per axis; None where the graph leaves it open",
            "    _SPECS = (",
        ]
        for op, attr in weights:
            t = _axes_type(op.result, f"weight '{op.weight_name.data}'")
            dtype = _numpy_dtype(t, f"weight '{op.weight_name.data}'")
            axes = [(a.name, a.extent.const_value if a.extent.is_const else None) for a in t.axes]
            # A plain numpy dtype by name; bfloat16 as ml_dtypes' type, which numpy knows by no name.
            spelled = _dtype_source(dtype) if dtype.type.__module__ != "numpy" else repr(dtype.name)
            lines.append(f"        ({op.weight_name.data!r}, {attr!r}, {spelled}, {_tuple_py(axes)}),")
        lines.append("    )")
        lines.append("")
        lines.append(
            "    # (pattern, template) rules renaming checkpoint tensors to graph names; none: names are the graph's"
        )
        lines.append(f"    _CHECKPOINT_NAMES = {self.checkpoint_names!r}")
        lines.append("")
        packed = sorted(op.weight_name.data for op, _ in weights if "packed" in op.attributes)
        lines.append("    # Weights kept in the ggml blocks the checkpoint stores them in (packed kernels read them)")
        lines.append(f"    _PACKED = frozenset({packed!r})" if packed else "    _PACKED: frozenset = frozenset()")
        lines.append("")
        lines.append("    # Checkpoint tensors whose rows llama.cpp interleaved for its rotary embedding: head counts")
        lines.append(f"    _ROW_ORDERS = {dict(self.row_orders)!r}")
        lines.append("")
        lines.append("    # The weights the graph carries: ONNX name, offset in _WEIGHT_BYTES, dtype, count, shape")
        lines += ["    _EMBEDDED = (", *[f"        {row}," for row in embedded_rows], "    )"]
        lines.append("")
        sig = "".join(f", {attr}: np.ndarray" for _, attr in weights)
        lines.append(f"    def __init__(self{sig}) -> None:")
        lines += [f"        self.{attr} = {attr}" for _, attr in weights]
        lines += [f"        self.{p} = _prepared({attr})  # the float32 forward computes in" for attr, p in prepared]
        lines += [
            "        self._stored: dict[str, np.ndarray] = {}  # each weight as the checkpoint stores it",
            "        self._source: object = None  # the checkpoint's buffer (a memory map), kept while viewed",
            *(f"        self.{slot}: object = None  # {why}" for slot, why in self.weight_slots.items()),
            "",
            "    @classmethod",
            '    def load(cls, data: object, packed: bool = True) -> "Weights":',
            '        """Read a checkpoint: the bytes (or memoryview) of one safetensors or GGUF file, or a mapping',
            "        of shard name -> bytes.  Every tensor is checked against the graph before any is used;",
            "        LoadError names the tensor and the axis that disagree.  `packed=False` widens the weights",
            "        kept in ggml blocks (`_PACKED`) to float32 now: about 4x their memory, faster products.",
            '        """',
            "        return cls._from(data, _read_checkpoint(data), packed)",
            "",
            "    @classmethod",
            '    def load_file(cls, path: object, packed: bool = True) -> "Weights":',
            '        """Memory-map a checkpoint file read-only and load it: a path, a list of shard paths, or a',
            '        Hugging Face `*.index.json` naming its shards.  The weights view the map, kept open with them."""',
            "        data = _mapped(path)",
            "        tensors = _read_checkpoint(data)",
            "        _check_index(path, tensors)",
            "        return cls._from(data, tensors, packed)",
            "",
            "    @classmethod",
            '    def _from(cls, data: object, tensors: dict, packed: bool = True) -> "Weights":',
            "        values, stored = _load_weights(",
            "            tensors,",
            "            cls._SPECS,",
            "            cls._CHECKPOINT_NAMES,",
            "            cls._carried(),",
            "            cls._PACKED if packed else frozenset(),",
            "            cls._ROW_ORDERS,",
            "        )",
            "        weights = cls(*values)",
            "        weights._stored, weights._source = stored, data",
            "        return weights",
            "",
            "    def stored(self, name: str) -> np.ndarray:",
            '        """Weight `name` (its ONNX name) as the checkpoint stores it: a half stays half."""',
            "        return self._stored[name]",
            "",
            "    @classmethod",
            "    def _carried(cls) -> dict[str, np.ndarray]:",
            '        """The weights the module carries, as read-only views of `_WEIGHT_BYTES`."""',
            "        return {",
            "            name: np.frombuffer(_WEIGHT_BYTES, dtype=dtype, count=count, offset=offset).reshape(shape)",
            "            for name, offset, dtype, count, shape in cls._EMBEDDED",
            "        }",
        ]
        if all_carried:
            lines += [
                "",
                "    @classmethod",
                '    def embedded(cls) -> "Weights":',
                '        """The weights the graph carries, embedded in this module."""',
                "        carried = cls._carried()",
                "        return cls(*(carried[name] for name, *_ in cls._SPECS))",
            ]
        return "\n".join(lines) + "\n"

    def _forward_source(
        self, params: Sequence[str], checks: Sequence[str], body: Sequence[str], ret: ReturnOp,
        out_fields: Sequence[str],
    ) -> str:  # fmt: skip
        sig = "".join(f", {p}: np.ndarray" for p in params)
        result_type = '"Outputs"' if out_fields else "np.ndarray"
        # inf and nan are results ONNX defines (IEEE arithmetic), not errors to warn about; the
        # decorator costs half of a `with np.errstate(...)` block per call.
        lines = ['@np.errstate(all="ignore")', f'def forward(weights: "Weights"{sig}) -> {result_type}:']
        ins = "; ".join(f"{n.data}: {_type_text(_axes_type(a, n.data))}" for a, n in
                        zip(self.program.block.args, self.program.input_names.data, strict=True))  # fmt: skip
        lines.append(f'    """Run the model on {ins or "no inputs"}; ShapeError names a disagreeing input."""')
        lines.append("    _env: dict[str, int] = {}  # each extent symbol's value")
        lines.append("    _src: dict[str, str] = {}  # the input axis that gave it")
        lines += [f"    {line}" for c in checks for line in c.split("\n")]
        lines += [f"    {b}" for b in body]
        outs = [self.value_text[v] for v in ret.outputs]
        lines.append(f"    return Outputs({', '.join(outs)})" if out_fields else f"    return {outs[0]}")
        return "\n".join(lines) + "\n"


@dataclass(eq=False)
class _Scope:
    """One block being printed (forward's body or an If branch), inside `parent`."""

    parent: _Scope | None
    # Owed conditions checked at the block's top: the symbols each reads, and its line.
    owed: list[tuple[set[str], str]] = field(default_factory=list)
    # Conditions reading an If's result length, checked once the block has bound it.
    deferred: list[OweOp] = field(default_factory=list)
    # Derived symbols computed at the block's top, and those computed inline (they read an If's result).
    derived: set[str] = field(default_factory=set)
    inline: set[str] = field(default_factory=set)
    # If result lengths bound so far in this block.
    bound: set[str] = field(default_factory=set)
    items: list[str | _If | _Bind] = field(default_factory=list)

    def knows(self, name: str) -> bool:
        """Whether derived symbol `name` is computed where this block runs (here or around it)."""
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.derived or name in scope.inline:
                return True
            scope = scope.parent
        return False

    def binds(self, name: str) -> bool:
        """Whether If result length `name` is bound at this point of the block."""
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.bound:
                return True
            scope = scope.parent
        return False


@dataclass(eq=False)
class _If:
    cond: str
    node: str
    then: _Scope
    other: _Scope


@dataclass(eq=False)
class _Bind:
    """An If result length bound after the If (printed only where a later extent reads it)."""

    symbol: str
    source: str
    node: str


def _symbols_closure(names: Iterable[str]) -> set[str]:
    """`names` and every symbol their derived symbols read, transitively."""
    seen: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            call = derived_call(name)
            if call is not None:
                stack.extend(n for a in call.args for n in a.symbols)
    return seen


def _to_numpy(attr: Attribute, what: str) -> np.ndarray:
    to_numpy = getattr(attr, "to_numpy", None)
    if to_numpy is None:
        raise LoamError(f"{what} carries {attr}, not a #graph.data value")
    return np.asarray(to_numpy())


def _widened_only(expr: Expr) -> set[int]:
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


def _embedded_bytes(carried: Sequence[tuple[WeightOp, str]]) -> tuple[bytes, list[str]]:
    """The carried weights' bytes as one literal, and their `_EMBEDDED` rows (offsets aligned)."""
    blob = bytearray()
    rows: list[str] = []
    for op, _ in carried:
        assert op.data is not None
        arr = _to_numpy(op.data, f"weight {op.weight_name.data!r}")
        if arr.dtype.type.__module__ != "numpy":  # ml_dtypes.bfloat16: its bits, little-endian
            data = np.ascontiguousarray(arr).view(np.uint16).astype("<u2").tobytes()
            dtype = f"ml_dtypes.{arr.dtype.name}"
        else:
            little = arr.dtype.newbyteorder("<") if arr.dtype.byteorder not in ("|", "=") else arr.dtype
            data = np.ascontiguousarray(arr, dtype=little).tobytes()
            dtype = repr(little.str)
        blob += bytes(-len(blob) % _EMBED_ALIGN)
        rows.append(f"({op.weight_name.data!r}, {len(blob)}, {dtype}, {arr.size}, {tuple(arr.shape)!r})")
        blob += data
    return bytes(blob), rows


def _array_literal(arr: np.ndarray) -> str:
    """`arr` as `np.frombuffer(b"...", dtype=...).reshape(...)` (little-endian bytes)."""
    if arr.dtype.type.__module__ != "numpy":  # ml_dtypes.bfloat16: its bits, viewed back
        data = np.ascontiguousarray(arr).view(np.uint16).astype("<u2").tobytes()
        return f"np.frombuffer({data!r}, dtype='<u2').view(ml_dtypes.{arr.dtype.name}).reshape({tuple(arr.shape)!r})"
    little = arr.dtype.newbyteorder("<") if arr.dtype.byteorder not in ("|", "=") else arr.dtype
    data = np.ascontiguousarray(arr, dtype=little).tobytes()
    return f"np.frombuffer({data!r}, dtype={little.str!r}).reshape({tuple(arr.shape)!r})"


def _py_literal(value: object) -> str:
    """A kernel parameter as Python source (`float("inf")` where repr is not source)."""
    if isinstance(value, float) and not np.isfinite(value):
        return f"float({repr(value)!r})"
    if isinstance(value, tuple):
        items = [_py_literal(v) for v in value]
        return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"
    return repr(value)


def _tuple_py(items: Sequence[object]) -> str:
    return repr(tuple(items))


def _marker_source(name: str, extent: int | None) -> str:
    lines = [f"class {name}:", f'    """Axis {name}."""']
    if extent is not None:
        lines += ["", f"    EXTENT = {extent}"]
    return "\n".join(lines) + "\n"


def _outputs_source(fields: Sequence[str], onnx_names: Sequence[str]) -> str:
    """A hand-written named tuple (the module imports nothing but numpy, so not typing.NamedTuple)."""
    params = ", ".join(f"{f}: np.ndarray" for f in fields)
    lines = [
        "class Outputs(tuple):",
        f'    """forward\'s outputs, in graph order: {", ".join(repr(n) for n in onnx_names)}."""',
        "",
        "    __slots__ = ()",
        f"    _fields = {tuple(fields)!r}",
        "",
        f'    def __new__(cls, {params}) -> "Outputs":',
        f"        return tuple.__new__(cls, ({', '.join(fields)},))",
        "",
        "    def __repr__(self) -> str:",
        '        return "Outputs(" + ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self)) + ")"',
        "",
    ]
    for i, (f, n) in enumerate(zip(fields, onnx_names, strict=True)):
        lines.append(f"    {f} = property(lambda self: self[{i}], doc={f'ONNX output {n!r}'!r})")
    return "\n".join(lines) + "\n"


def print_module(argv: Sequence[str] | None, emit: Callable[[ModuleOp], str], command: str) -> int:
    """`python -m COMMAND FILE.mlir`: print the module `emit` makes of FILE's program (a backend's main)."""
    import sys

    from xdsl.parser import Parser

    from loam.context import make_context

    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1:
        print(f"usage: python -m {command} FILE.mlir", file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        module = Parser(make_context(), f.read(), args[0]).parse_module()
    module.verify()
    try:
        sys.stdout.write(emit(module))
    except LoamError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m loam.backends.numpy_module FILE.mlir`: print the module for FILE's program."""
    return print_module(argv, emit_python, "loam.backends.numpy_module")


if __name__ == "__main__":
    raise SystemExit(main())
