"""The structure every generated module shares, whatever computes its kernels.

`ModulePrinter` collects a `kernel.program` and prints the module model first: a docstring naming
the model; the imports; one marker class per axis (with `EXTENT` where every value the program
declares gives the axis one constant extent); `class Weights` and `class Outputs`
(`loam.backends.module_classes`); `INPUTS`/`OUTPUTS`; and `forward(weights, *inputs)`, which runs
its prologue and then the backend's lines, each commented with the ONNX node it computes (and, for a
decoder whose past stays in place, `DECODE_STATE` and `forward_in_place`: `module_decode_state`).  Then,
under one banner (`RUNTIME_BANNER`), what forward calls: what the backend declares (expression
functions, shaders), the folded constants as byte literals, the weights the IR carries as ONE bytes
literal (`_WEIGHT_BYTES`), and the runtime pieces this module reaches, copied from `loam.runtime`
(chosen by `loam.backends.numpy_runtime`, so `ShapeError` and `LoadError` are the module's own, and a
module built against a safetensors checkpoint carries no GGUF reader).  A backend (`numpy_module`,
`wgsl_module`) subclasses it with how one op is printed.

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

A `kernel.loop` prints as a `while` over the body block: the trip count and the condition read once
before it, the carried values assigned their initial values (the body reads them under the names of
the Loop's results), each iteration starting with the iteration number and the condition as arrays,
then the body's owed conditions and kernels, then the next condition, the carried values and the
scan outputs' elements taken from what it yields.  After it, each scan output is its elements
stacked (or, for no iteration, an empty array of the extents the build knows), and the length of its
first axis is bound from it like an If's.

Identifiers come from one set (`loam.backends.names.Names`): Python's keywords and builtins and
every name the module declares or spells are reserved first, then each ONNX name is spelled as an
ASCII identifier (`fc1.weight` -> `fc1_weight`, `日本` -> `u65e5_u672c`) with `_` appended while
taken (a tensor named `bool` is forward's `bool_`; `INPUTS` and `OUTPUTS` keep the ONNX names).  An
axis whose marker would take a reserved name stops emission with an `AxisError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.ir import Operation, SSAValue

from loam.backends import numpy_runtime
from loam.backends.input_checks import input_check
from loam.backends.module_blocks import Bind, LoopBlock, Scope, if_block, loop_block, who
from loam.backends.module_classes import (
    EMBED_ALIGN,
    array_literal,
    embedded_bytes,
    marker_source,
    outputs_source,
    split_beside,
    to_numpy,
    weights_source,
)
from loam.backends.module_decode_state import StateInput, decode_state_source, state_inputs
from loam.backends.module_grads import grads_source
from loam.backends.module_text import (
    CHECKPOINT_FORMATS,
    axes_type,
    dtype_source,
    numpy_dtype,
    py_literal,
    tuple_py,
    tuple_source,
    type_text,
)
from loam.backends.names import PYTHON_NAMES, Names, identifier
from loam.core.errors import AxisError, UnsupportedError
from loam.core.poly import Poly, derived_call
from loam.dialects.build_contract import GRAD_PREFIX, PACKED
from loam.dialects.dim_params import binding_plan
from loam.dialects.kernel import (
    ConstantOp,
    IfOp,
    LoopOp,
    ProgramOp,
    RandomOp,
    ReturnOp,
    WeightOp,
    YieldOp,
)
from loam.dialects.shape_poly import ExtentAttr, OweOp
from loam.dialects.tensor_axes import AxesTensorType

RUNTIME_BANNER = (
    "# " + "-" * 98 + "\n"
    "# What forward calls: the expressions, constants and runtime pieces this model uses, copied in by Loam\n"
    "# " + "-" * 98 + "\n"
)
"""The line between a module's model (markers, Weights, forward) and what its forward calls."""

HALVES = ("f16", "bf16")
"""Element types whose arithmetic runs in float32: a weight of one is prepared in f32 once by `Weights`."""


class ModulePrinter:
    """Collects what the program needs, then prints the module top to bottom.

    A backend subclasses it with how one op of a block is printed (`collect_op`), how forward's
    top-level block opens and ends (`plan_buffers`, `finish_block`) and what the module declares
    besides the shared classes (`imports`, `runtime_sources`, `declarations`)."""

    # Further attributes of `Weights` (name -> what it holds), for a backend keeping more per weights.
    weight_slots: dict[str, str] = {}  # noqa: RUF012 - read-only; a subclass replaces it whole

    def __init__(
        self,
        program: ProgramOp,
        checkpoint_names: tuple[tuple[str, str], ...] = (),
        row_orders: tuple[tuple[str, int], ...] = (),
        formats: tuple[str, ...] = CHECKPOINT_FORMATS,
        beside_limit: int | None = None,
    ) -> None:
        self.program = program
        self.formats = formats
        # Carried weights past this many bytes go in a safetensors file beside the module (None: never);
        # `weights_file` holds that file's bytes once the module is printed.
        self.beside_limit = beside_limit
        self.weights_file: bytes | None = None
        self.checkpoint_names = checkpoint_names
        self.row_orders = row_orders
        # Where the weights in raw ONNX external data files lie (`loam.external_data`: name, location,
        # offset, length, dtype, shape); a backend sets it from the module attribute.
        self.external: tuple[tuple[str, str, int, int, str, tuple[int, ...]], ...] = ()
        self.names = Names()
        self.pieces: set[str] = set()
        self.decode_state: list[StateInput] = []  # the inputs forward_in_place keeps in a DecodeState
        self.consts: list[tuple[str, np.ndarray]] = []
        # Symbols forward binds from its inputs, in binding order (for messages).
        self.input_symbols: list[str] = []
        # The block being collected (None while rendering): derived symbols a printed extent reads
        # are registered in it, so each is computed in the innermost block that needs it.
        self.scope: Scope | None = None
        # Symbols naming a length only an If's result has (`y[0]` when the branches differ): the If
        # node, and whether some later extent reads it (then forward binds it from the result).
        self.result_symbols: dict[str, str] = {}
        self.result_symbols_read: set[str] = set()
        self.value_text: dict[SSAValue, str] = {}
        # Each program output's identifier, so the value computing it is named that way.
        self.returned: dict[SSAValue, str] = {}
        self.weights: list[tuple[WeightOp, str]] = []
        # Half weights (f16, bf16) by value -> attribute, and the attribute of each one's float32
        # form, prepared once by `Weights` wherever forward would widen it on every call.
        self.half_weights: dict[SSAValue, str] = {}
        self.prepared: dict[str, str] = {}
        # The lines of `_prepare` (what Weights computes once from the weights, `passes/weight_only.py`)
        # and the Weights attributes they set (name -> what it holds); a backend that computes
        # nothing at load leaves both empty.
        self.load_lines: list[str] = []
        self.load_slots: dict[str, str] = {}
        # Whether a value of one of ml_dtypes' types appears, so the module imports it (and only then).
        self.ml_dtypes = False

    # -- collection -----------------------------------------------------------------------------

    def _ops(self) -> list[Operation]:
        """Every op of the program, those inside If branches included."""
        return [op for op in self.program.walk() if op is not self.program]

    def _all_types(self) -> list[AxesTensorType]:
        types = [axes_type(a, f"input '{n.data}'") for a, n in
                 zip(self.program.block.args, self.program.input_names, strict=True)]  # fmt: skip
        for op in self._ops():
            for r in op.results:
                types.append(axes_type(r, f"{op.name} result"))
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
            only = next(iter(found)) if len(found) == 1 else None
            markers[name] = only.const_value if only is not None and only.is_const else None
        return markers

    def declared_names(self) -> set[str]:
        """The module's own names besides `names.MODULE_NAMES`: the runtime pieces it may carry, and
        the attributes a subclass's `Weights` keeps (a backend declaring more adds its own)."""
        return {*numpy_runtime.PIECES, "SAFETENSORS_DTYPES", "FORMATS", *self.weight_slots}

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
        if name in self.result_symbols:
            if scope.binds(name):
                self.result_symbols_read.add(name)
                return f"_env[{name!r}]"
            raise UnsupportedError(
                f"extent symbol '{name}' is the length {self.result_symbols[name]} gives its result, "
                "which forward knows only after that node ran; it is read before that or outside the branch"
            )
        call = derived_call(name)
        if call is None:
            raise UnsupportedError(f"extent symbol '{name}' is bound by no input axis and derived from none")
        for arg in call.args:
            self.poly_py(arg)
        if self.reads_result_symbol([name]):
            args = ", ".join([repr(call.function), *(self.poly_py(a) for a in call.args)])
            scope.items.append(f"_env[{name!r}] = derived_extent({args})")
            self.pieces.add("derived_extent")
            scope.inline.add(name)
        else:
            scope.derived.add(name)
        return f"_env[{name!r}]"

    def reads_result_symbol(self, names: Iterable[str]) -> bool:
        """Whether any of `names`, or a derived symbol's operands, is the length an If's result has."""
        return any(n in self.result_symbols for n in symbols_closure(names))

    def poly_py(self, p: Poly) -> str:
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

    def input_symbols_of(self, polys: Iterable[Poly]) -> tuple[str, ...]:
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
        return tuple(s for s in [*self.input_symbols, *self.result_symbols] if s in seen)

    def _derived_lines(self, names: Iterable[str], done: set[str]) -> list[str]:
        """Lines computing each derived symbol of `names` not in `done`, its operands' symbols first."""
        lines: list[str] = []
        for name in sorted(names, key=lambda n: (len(n), n)):
            call = derived_call(name)
            if call is None or name in done:
                continue
            inner = {n for a in call.args for n in a.symbols}
            lines += self._derived_lines(inner, done)
            args = ", ".join([repr(call.function), *(self.poly_py(a) for a in call.args)])
            lines.append(f"_env[{name!r}] = derived_extent({args})")
            self.pieces.add("derived_extent")
            done.add(name)
        return lines

    def shape_py(self, t: AxesTensorType) -> str:
        return tuple_source([self.poly_py(a.extent) for a in t.axes])

    def param_py(self, value: object) -> str:
        """A kernel parameter as Python source; a `Poly` (or a tuple holding some) over the bound symbols."""
        if isinstance(value, Poly):
            return self.poly_py(value)
        if isinstance(value, tuple) and any(isinstance(v, Poly) for v in value):
            items = [self.param_py(v) for v in value]
            return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"
        return py_literal(value)

    # -- the prologue: bind the symbols, check the inputs and what the build owes ------------------

    def _inputs(self) -> tuple[list[str], list[str]]:
        """forward's parameters, and its input checks: each input, then each symbol read back from a
        spelled axis, then every spelled axis against its spelling."""
        program = self.program
        args = list(zip(program.block.args, [n.data for n in program.input_names.data], strict=True))
        types = [axes_type(a, f"input '{name}'") for a, name in args]
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
        bound: set[str] = set()  # the symbols an earlier input binds
        for (arg, onnx_name), t in zip(args, types, strict=True):
            ident = self.names.mint(onnx_name)
            params.append(ident)
            self.value_text[arg] = ident
            dtype = numpy_dtype(t, f"input '{onnx_name}'")
            axes: list[tuple[str, int | str | None]] = []
            for axis in t.axes:
                e = axis.extent
                axes.append((axis.name, e.const_value if e.is_const else e.lone_symbol))
            check = f"_check_input({onnx_name!r}, {ident}, {dtype.name!r}, {tuple_py(axes)}, _env, _src)"
            if dtype.type.__module__ == "numpy":
                check = input_check(onnx_name, ident, dtype_source(dtype), axes, bound, check)
            bound |= {extent for _, extent in axes if isinstance(extent, str)}
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
                f"{str(axis.extent)!r}, {self.poly_py(b.coefficient)}, {self.poly_py(b.rest)}, _env, _src)"
            )
        for i, ((_, name), t) in enumerate(zip(args, types, strict=True)):
            for a, axis in enumerate(t.axes):
                e = axis.extent
                if e.is_const or e.lone_symbol is not None or (i, a) in read_from:
                    continue
                self.pieces.add("_check_spelled")
                checks.append(
                    f"_check_spelled({name!r}, {a}, {axis.name!r}, {params[i]}.shape[{a}], {str(e)!r}, "
                    f"{self.poly_py(e)}, {tuple_py(self.input_symbols_of([e]))}, _env, _src)"
                )
        return params, checks

    def _owed_line(self, op: OweOp) -> str:
        """The check of one owed condition (registering the derived symbols it reads)."""
        lhs, rhs = op.lhs.data, op.rhs.data
        test = f"{self.poly_py(lhs)} {'==' if op.equal else '<='} {self.poly_py(rhs)}"
        symbols = tuple_py(self.input_symbols_of([lhs, rhs]))
        self.pieces.add("_owe")
        return f"_owe({test}, {op.condition!r}, {op.reason.data!r}, {symbols}, _env, _src)"

    def _owe_now_or_later(self, op: OweOp) -> None:
        """Check `op` at the top of the current block, or, where it reads the length an If's result
        has, right after that If binds it (no kernel before it relies on the condition)."""
        scope = self.scope
        assert scope is not None
        polys = (op.lhs.data, op.rhs.data)
        if self.reads_result_symbol(n for p in polys for n in p.symbols):
            scope.deferred.append(op)
            return
        scope.owed.append(({n for p in polys for n in p.symbols}, self._owed_line(op)))

    def owe_deferred(self) -> None:
        """Check each deferred condition of the current block whose If lengths are now bound."""
        scope = self.scope
        assert scope is not None
        waiting = scope.deferred
        scope.deferred = []
        for op in waiting:
            names = [n for p in (op.lhs.data, op.rhs.data) for n in symbols_closure(p.symbols)]
            if all(scope.binds(n) for n in names if n in self.result_symbols):
                scope.items.append(self._owed_line(op))
            else:
                scope.deferred.append(op)

    # -- printing --------------------------------------------------------------------------------

    def emit(self) -> str:
        program = self.program
        markers = self._markers()
        self._reserve_declared(markers)
        self.pieces.update(
            {"_check_input", "_read_checkpoint", "_load_weights", "_mapped", "_check_index", "_unchanged"}
            | {"set_threads"}
        )

        # A decoder whose past stays in place (`decode-state-in-place`): forward takes the state by a
        # keyword minted before any input, so no input can take its name.
        self.decode_state = state_inputs(self.program)
        if self.decode_state:
            self.names.mint("decode_state")
        # A program that draws (`kernel.random`) takes `seed` by keyword: its generator `_rng` feeds each draw.
        self.draws = any(isinstance(op, RandomOp) for op in program.walk())
        for name in ("seed", "_rng") if self.draws else ():
            self.names.mint(name)
        # Inputs first: their names are forward's parameters, their symbols bind extents.
        params, checks = self._inputs()

        ret = program.return_op
        output_names = [n.data for n in ret.output_names.data]
        # Output names are minted before any other local: they are the Outputs fields too.
        out_idents = [self.names.mint(n) for n in output_names]
        for v, ident in zip(ret.outputs, out_idents, strict=True):
            self.returned.setdefault(v, ident)
        self._find_result_symbols()

        # forward's body, then its prologue: each owed condition, with the derived symbols it reads
        # computed just before it, then the derived symbols the kernels' shapes and parameters read.
        top = self.collect(program.block.ops, None)
        head, body = self._render(top, set())
        prologue = [*checks, *head]
        weights = self.weights

        # A program reading no weight carries all of them: `Weights.embedded()` is `Weights()`.
        embedded = all(op.data is not None for op, _ in weights)
        carried = [(op, attr) for op, attr in weights if op.data is not None]
        out_fields = out_idents if len(output_names) > 1 else []

        self.ml_dtypes = self.ml_dtypes or any(t.elem.from_ml_dtypes for t in self._all_types())
        # The model first (its axes, Weights, forward), then, under a banner, what forward calls.
        parts: list[str] = [self._docstring(output_names), ""]  # the imports, once the runtime pieces are known
        parts += [marker_source(name, extent) for name, extent in markers.items()]
        rows: list[str] = []
        blob = b""
        digest = None
        if self.beside_limit is not None:
            carried, self.weights_file, digest = split_beside(carried, self.beside_limit)
        if carried:
            blob, rows = embedded_bytes(carried)
        parts.append(
            weights_source(
                weights, self.prepared, rows, embedded, self.checkpoint_names, self.row_orders,
                {**self.weight_slots, **self.load_slots}, beside=digest is not None, prepare=bool(self.load_lines),
                external=self.external_read(),
            )
        )  # fmt: skip
        if out_fields:
            parts.append(outputs_source(out_fields, output_names))
        parts.append(self._signature_source(output_names))
        parts.append(self.forward_source(params, prologue, body, ret, out_fields))
        if any(n.startswith(GRAD_PREFIX) for n in output_names):  # built with gradients (`differentiate`)
            attrs = {op.weight_name.data: attr for op, attr in weights}
            inputs = dict(zip((n.data for n in self.program.input_names.data), params, strict=True))
            parts.append(grads_source(output_names, attrs, inputs, ["weights", *params]))
        if self.decode_state:
            self.pieces.add("DecodeState")
            parts.append(decode_state_source(self.program, self.decode_state, self.value_text, out_fields))
        parts.append(RUNTIME_BANNER)
        parts += self.declarations()
        parts += [f"{name} = {array_literal(arr)}\n" for name, arr in self.consts]
        if carried:
            parts.append(
                f"# The bytes of every weight the module carries, little-endian, each at an offset aligned to "
                f"{EMBED_ALIGN}\n_WEIGHT_BYTES = {blob!r}\n"
            )
        if digest is not None:
            self.pieces.add("_beside")
            parts.append(
                "# The other weights the module carries are in the safetensors file written beside it (this\n"
                "# file's name with .safetensors for .py), whose metadata holds this digest of them\n"
                f"_BESIDE_DIGEST = {digest!r}\n"
                "_BESIDE_DATA: object = None  # that file's bytes, set by whoever imports this source without it\n"
            )
        parts += self.runtime_sources()
        parts[1] = self.imports()
        return "\n\n".join(p.rstrip("\n") + "\n" for p in parts)

    def _signature_source(self, output_names: Sequence[str]) -> str:
        """`INPUTS` and `OUTPUTS`: forward's parameters and results by ONNX name, for callers (such as
        `loam generate`) that find a decoder's inputs by name."""
        inputs = []
        for arg, name in zip(self.program.block.args, self.program.input_names.data, strict=True):
            t = axes_type(arg, f"input '{name.data}'")
            extents = tuple(e.const_value if e.is_const else None for e in t.shape)
            inputs.append((name.data, numpy_dtype(t, f"input '{name.data}'").name, extents))
        return (
            "# forward's inputs in order (ONNX name, dtype, extents: None where the call decides) and its\n"
            "# outputs' ONNX names\n"
            f"INPUTS = {tuple(inputs)!r}\nOUTPUTS = {tuple(output_names)!r}\n"
        )

    # -- what a backend prints its own way -------------------------------------------------------

    def collect_op(self, op: Operation) -> None:
        """Print one op of the block being collected (none for an op that declares no line)."""
        raise NotImplementedError

    def plan_buffers(self, ops: Sequence[Operation]) -> None:
        """Plan where forward's top-level block keeps its values, and open the block."""

    def finish_block(self, scope: Scope) -> None:
        """Lines ending forward's top-level block, after its kernels."""

    def imports(self) -> str:
        """The module's imports: the standard library modules its runtime reads, then the libraries."""
        standard = "".join(f"import {name}\n" for name in sorted(self.standard_modules()))
        libraries = "import ml_dtypes\nimport numpy as np\n" if self.ml_dtypes else "import numpy as np\n"
        return f"{standard}\n{libraries}" if standard else libraries

    def standard_modules(self) -> set[str]:
        """The standard library modules the runtime pieces the module carries read (`json`)."""
        return numpy_runtime.standard_imports(self.runtime_pieces())

    def runtime_pieces(self) -> list[str]:
        """The runtime pieces the module carries, in the order it declares them."""
        features = self.runtime_features()
        compiled = "packed" in features or "_CompiledKernels" in numpy_runtime.pieces_for(self.pieces, features)
        return numpy_runtime.pieces_for(self.pieces | ({"set_compiled"} if compiled else set()), features)

    def runtime_sources(self) -> list[str]:
        """The runtime pieces the module carries, each as its source text."""
        features = self.runtime_features()
        return [numpy_runtime.source_of(p, features) for p in self.runtime_pieces()]

    def runtime_features(self) -> set[str]:
        """The runtime's optional features this module reaches (`numpy_runtime.FEATURES`)."""
        features = {"gguf"} if "gguf" in self.formats else set()
        if self.checkpoint_names:
            features.add("renames")
        if self.row_orders:
            features.add("row_orders")
        if any(PACKED.is_on(op) for op, _ in self.weights):
            features.add("packed")
        if self.external_read():
            features.add("external")
        return features

    def external_read(self) -> tuple[tuple[str, str, int, int, str, tuple[int, ...]], ...]:
        """The rows of `external` for the weights forward reads from a file (`Weights._EXTERNAL`)."""
        read = {op.weight_name.data for op, _ in self.weights if op.data is None}
        return tuple(row for row in self.external if row[0] in read)

    def declarations(self) -> list[str]:
        """What the module declares between its marker classes and its constants."""
        return []

    def broadcast_at_load(self, op: Operation, value: SSAValue, result: AxesTensorType) -> str | None:
        """How forward reads `value` (an operand `op` broadcasts to `result`) at `result`'s extents, made
        once when Weights is made; None where it reads `value` as it is (this backend prepares nothing)."""
        return None

    # -- what every backend collects the same way -------------------------------------------------

    def collect_weight(self, op: WeightOp) -> None:
        """A weight: an attribute of `Weights` (a half one may get a float32 twin)."""
        attr = self.names.mint(op.weight_name.data)
        self.weights.append((op, attr))
        if axes_type(op.result, f"weight '{op.weight_name.data}'").elem.name in HALVES:
            self.half_weights[op.result] = attr
        self.value_text[op.result] = f"weights.{attr}"

    def collect_constant(self, op: ConstantOp) -> None:
        """A constant: polynomials computed in forward from the bound symbols, or numbers folded
        into a module constant."""
        if isinstance(op.value, ArrayAttr):
            scope = self.scope
            assert scope is not None
            hint = op.result.name_hint or op.node.data or "values"
            ident = self.returned.get(op.result) or self.names.mint(hint)
            self.value_text[op.result] = ident
            scope.items.append(f"{ident} = {self.values_line(op)}  # {op.node.data or 'shape values'}")
            return
        name = self.names.mint(f"_CONST_{len(self.consts)}")
        self.consts.append((name, to_numpy(op.value, f"kernel.constant '{op.node.data}'")))
        self.value_text[op.result] = name

    def values_line(self, op: ConstantOp) -> str:
        """A `kernel.constant` holding polynomials: computed in forward from the bound symbols."""
        t = axes_type(op.result, "kernel.constant")
        dtype = numpy_dtype(t, f"kernel.constant '{op.node.data}'")
        assert isinstance(op.value, ArrayAttr)
        items = ", ".join(self.poly_py(e.data) for e in op.value.data if isinstance(e, ExtentAttr))
        return f"np.array([{items}], dtype={dtype_source(dtype)}).reshape({self.shape_py(t)})"

    def _find_result_symbols(self) -> None:
        """Record each symbol that names a length only an op's result has (no input binds it): an If
        whose branches differ, an operator whose values decide its length (NonZero, Unique)."""
        for op in self._ops():
            node = op.properties.get("node")
            if not isinstance(node, StringAttr):
                continue
            for r in op.results:
                if not isinstance(r.type, AxesTensorType):
                    continue
                for axis in r.type.axes:
                    for name in axis.extent.symbols:
                        if name not in self.input_symbols and derived_call(name) is None:
                            self.result_symbols.setdefault(name, who(op, node.data))

    def collect(self, ops: Iterable[Operation], parent: Scope | None) -> Scope:
        """One block's owed conditions and lines (an If's branches collected recursively)."""
        scope = Scope(parent)
        outer, self.scope = self.scope, scope
        try:
            ops = list(ops)
            for op in ops:
                if isinstance(op, OweOp):
                    self._owe_now_or_later(op)
            if parent is None:
                self.plan_buffers(ops)
            for op in ops:
                if isinstance(op, (ReturnOp, YieldOp, OweOp)):
                    continue
                if isinstance(op, IfOp):
                    self.collect_if(op)
                    continue
                if isinstance(op, LoopOp):
                    self.collect_loop(op)
                    continue
                self.collect_op(op)
                self.bind_result_lengths(op, [self.value_text.get(r, "") for r in op.results])
            if parent is None:
                self.finish_block(scope)
            if scope.deferred:
                op = scope.deferred[0]
                unbound = sorted(n for p in (op.lhs.data, op.rhs.data) for n in symbols_closure(p.symbols)
                                 if n in self.result_symbols and not scope.binds(n))  # fmt: skip
                raise UnsupportedError(
                    f"owed condition {op.condition} ({op.reason.data}) reads extent symbol '{unbound[0]}', "
                    f"the length {self.result_symbols[unbound[0]]} gives its result, which this block "
                    "never binds"
                )
        finally:
            self.scope = outer
        return scope

    def result_ident(self, op: Operation, result: SSAValue) -> str:
        hint = result.name_hint if result.name_hint and not result.name_hint.isdigit() else None
        node = op.properties.get("node")
        if result in self.returned:
            return self.named(result, self.returned[result])
        if hint is None and isinstance(node, StringAttr) and node.data:
            # Named after the ONNX node computing it (`/transformer/h.0/attn/Softmax` -> h_0_attn_softmax):
            # short, and the same name the comment at the line's end gives in full.
            parts = [p for p in node.data.split("/") if p]
            base = identifier("_".join(parts[1:] if len(parts) >= 3 else parts).lower())
            ident, n = base, 1
            while ident in self.names:
                ident, n = f"{base}_{n}", n + 1
            return self.named(result, self.names.mint(ident))
        if hint is None and op.operands:
            hint = self.derived_name(op)
        return self.named(result, self.names.mint(hint or "t"))

    def derived_name(self, op: Operation) -> str:
        """An unnamed intermediate's name, from its source and kind: `bn1_scale_regroup`, not `t_`."""
        return f"{self.bare_name(op.operands[0])}_{op.name.rpartition('.')[2]}"

    def bare_name(self, value: SSAValue) -> str:
        """The identifier `value`'s text ends in: `fc1_bias` for `weights.fc1_bias`."""
        return self.value_text[value].rpartition(".")[2]

    def named(self, result: SSAValue, ident: str) -> str:
        self.value_text[result] = ident
        return ident

    def collect_if(self, op: IfOp) -> None:
        if_block(self, op)

    def collect_loop(self, op: LoopOp) -> None:
        loop_block(self, op)

    def bind_result_lengths(self, op: Operation, idents: Sequence[str]) -> None:
        """Bind each length only `op`'s results have (`result_symbols`) from the result named
        `idents[k]`, then check the owed conditions that waited for it."""
        scope = self.scope
        assert scope is not None
        node = op.properties.get("node")
        for ident, r in zip(idents, op.results, strict=True):
            if not ident or not isinstance(r.type, AxesTensorType):
                continue
            for a, axis in enumerate(r.type.axes):
                name = axis.extent.lone_symbol
                if name is not None and name in self.result_symbols and not scope.binds(name):
                    assert isinstance(node, StringAttr)
                    scope.bound.add(name)
                    scope.items.append(Bind(name, f"{ident}.shape[{a}]", who(op, node.data)))
        self.owe_deferred()

    def _render(self, scope: Scope, done: set[str]) -> tuple[list[str], list[str]]:
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
            elif isinstance(item, Bind):
                if item.symbol in self.result_symbols_read:
                    body.append(f"_env[{item.symbol!r}] = {item.source}  # the length {item.node} gave")
                    body.append(f"_src[{item.symbol!r}] = {item.node!r}")
            elif isinstance(item, LoopBlock):
                body += item.before
                body.append(item.header)
                lines = [*item.start, *(line for part in self._render(item.body, done) for line in part)]
                body += [f"    {line}" for line in lines]
                body += item.after
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
            "Generated code: imports only numpy and the standard library, and carries its own runtime.\n"
            'Regenerate it from the model rather than editing it.\n"""\n'
        )

    def forward_source(
        self, params: Sequence[str], checks: Sequence[str], body: Sequence[str], ret: ReturnOp,
        out_fields: Sequence[str],
    ) -> str:  # fmt: skip
        sig = "".join(f", {p}: np.ndarray" for p in params)
        if self.decode_state:
            sig += ', *, decode_state: "DecodeState | None" = None'
        if self.draws:
            sig += f"{'' if self.decode_state else ', *'}, seed: int | None = None"
        result_type = '"Outputs"' if out_fields else "np.ndarray"
        # inf and nan are results ONNX defines (IEEE arithmetic), not errors to warn about; the
        # decorator costs half of a `with np.errstate(...)` block per call.
        lines = ['@np.errstate(all="ignore")', f'def forward(weights: "Weights"{sig}) -> {result_type}:']
        ins = "; ".join(f"{n.data}: {type_text(axes_type(a, n.data))}" for a, n in
                        zip(self.program.block.args, self.program.input_names.data, strict=True))  # fmt: skip
        seeded = "; one seed repeats the random draws" if self.draws else ""
        lines.append(f'    """Run the model on {ins or "no inputs"}{seeded}; ShapeError names a disagreeing input."""')
        lines.append("    _env: dict[str, int] = {}  # each extent symbol's value")
        lines.append("    _src: dict[str, str] = {}  # the input axis that gave it")
        if self.draws:
            lines.append("    _rng = None if seed is None else np.random.default_rng(seed)  # each draw reads it")
        lines += [f"    {line}" for c in checks for line in c.split("\n")]
        lines += [f"    {b}" for b in body]
        outs = [self.value_text[v] for v in ret.outputs]
        lines.append(f"    return Outputs({', '.join(outs)})" if out_fields else f"    return {outs[0]}")
        return "\n".join(lines) + "\n"


def symbols_closure(names: Iterable[str]) -> set[str]:
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
