"""Print a `kernel.program` as a Python module that runs every kernel on a WebGPU device (wgpu).

The module has the numpy module's API and prologue (`Weights.load/load_file/embedded`, `forward`,
`ShapeError`, `LoadError`; the same input, spelled-axis and owed checks, on the host, before
anything goes to the device) and differs in what forward does after the checks:

- the module's device (`_gpu()`: one adapter and device per process, every pipeline compiled once);
- the weights' resident buffers (`_resident(weights, g)`: uploaded once per `Weights`, halves as
  f32, integers narrowed to i32 after a range check, a permuted weight uploaded permuted, a weight
  the checkpoint stores in ggml blocks uploaded as those blocks, byte for byte, for the packed
  kernels to widen: `pack-quantized`; a weight past one storage binding that products read in
  parts uploaded as those parts: `split-wide-weights`, `wgsl_resident`);
- the activation buffers of this binding of the extent symbols (`g.pool`: sizes planned at build
  time, reused by liveness, kept for the next call with the same extents), the inputs written in;
- one command encoder: a dispatch per kernel (`g.dispatch(SHADER, buffers, params, workgroups)`),
  the params computed on the host from the bound extents by the kernel's `_p_NAME`;
- the outputs downloaded, converted back to their host dtypes.

A kernel the printer has no WGSL for stops the build naming the node, unless the build asks for a
host fallback (`host_fallback=True`, `loam build --host-fallback`): then that kernel runs in numpy on
the host (its device operands downloaded, its results uploaded), and a value whose element type has no
device form (f64, ui32, ui64) lives on the host from its first kernel to its last.  An i64 sum,
difference, product, negation or absolute value runs on the device in i32 with a check that raises
the runtime's wrap flag (a DeviceError after the forward, never a wrapped number); other elementwise
i64 arithmetic the device's i32 could wrap runs on the host always.  The report lists every host kernel
with its reason.
If and Loop run on the host (`collect_if`, `collect_loop`): a condition or trip count the device
computed is read back first (`g.sync`: what is recorded is submitted, the value downloaded), then
the branch is taken, or the `while` dispatches the body's kernels once per iteration, reading each
iteration's condition and scan elements back; a carried value the body changes has two buffers,
the yield copied into the one the next iteration reads, and the scan outputs are stacked on the
host (uploaded where a kernel reads them).  A buffer whose size reads a length only the run knows
(a scan output's, a host kernel's result) is made when that length is known (`g.late`).
A regrouping is the same buffer (every device tensor is row-major and contiguous); a permutation
only products read is folded into the product's strides; any other permutation, slice, split and
concat is a strided copy.  The shaders are module constants (`_SHADERS`), one per distinct source.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from xdsl.dialects.builtin import ArrayAttr, ModuleOp
from xdsl.ir import Operation, SSAValue

from loam.backends import wgsl_pieces, wgsl_runtime
from loam.backends.module_blocks import IfBlock, LoopBlock, Scope, decided_on_host, loops_around, loops_of
from loam.backends.module_printer import ModulePrinter, symbols_closure
from loam.backends.module_text import (
    CHECKPOINT_FORMATS,
    axes_type,
    checkpoint_formats,
    checkpoint_names,
    dtype_source,
    numpy_dtype,
    row_orders,
    tuple_py,
    tuple_source,
    weights_beside,
)
from loam.backends.names import WGSL_MODULE_NAMES
from loam.backends.numpy_kernel_printer import NumpyKernelPrinter
from loam.backends.print_main import print_module
from loam.backends.wgsl_kernel_printer import WgslKernelPrinter, kernel_pieces, node_of
from loam.backends.wgsl_kernels import common as wgsl_common
from loam.backends.wgsl_kernels import elementwise
from loam.backends.wgsl_limits import DEFAULT_LIMITS, DeviceLimits, device_limits, fit_bindings, over_limits
from loam.backends.wgsl_resident import part_index, read_in_parts, resident_bytes
from loam.core.errors import UnsupportedError
from loam.core.limits import MAX_ELEMENTS
from loam.core.poly import Poly
from loam.dialects.build_contract import PACKED
from loam.dialects.kernel import (
    ConstantOp,
    IfOp,
    LoopOp,
    MatmulOp,
    PermuteOp,
    ProgramOp,
    RegroupOp,
    ReturnOp,
    SliceOp,
    WeightOp,
    YieldOp,
)
from loam.dialects.tensor_axes import AxesTensorType
from loam.frontends.external_data import external_table
from loam.passes.report import DeviceSummary

__all__ = ["emit_wgsl"]


def emit_wgsl(module: ModuleOp) -> str:
    """The Python source of the WebGPU module for the one `kernel.program` in `module`.

    Raises `UnsupportedError` naming the node for a kernel the printer has no WGSL for."""
    return wgsl_module(module)[0]


def wgsl_module(
    module: ModuleOp, host_fallback: bool = False, beside: bool = False
) -> tuple[str, DeviceSummary, bytes | None]:
    """`emit_wgsl`'s source, what the module does per forward (dispatches, bytes) and the weights file
    written beside it (`numpy_module`'s `beside`); with `host_fallback`, kernels with no WGSL form run
    on the host instead of stopping the build."""
    programs = [op for op in module.walk() if isinstance(op, ProgramOp)]
    if len(programs) != 1:
        raise UnsupportedError(f"the WGSL backend prints one kernel.program, found {len(programs)}")
    emitter = WgslModulePrinter(
        programs[0],
        checkpoint_names(module),
        row_orders(module),
        checkpoint_formats(module),
        weights_beside(module) if beside else None,
        host_fallback=host_fallback,
        limits=device_limits(module),
    )
    emitter.external = external_table(module)
    source = emitter.emit()
    return source, emitter.summary(), emitter.weights_file


class WgslModulePrinter(ModulePrinter):
    weight_slots = {"_resident": "(device, buffers) the weights were uploaded to, made on first use"}  # noqa: RUF012

    def __init__(
        self,
        program: ProgramOp,
        checkpoint_names: tuple[tuple[str, str], ...] = (),
        row_orders: tuple[tuple[str, int], ...] = (),
        formats: tuple[str, ...] = CHECKPOINT_FORMATS,
        beside_limit: int | None = None,
        *,
        host_fallback: bool = False,
        limits: DeviceLimits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__(program, checkpoint_names, row_orders, formats, beside_limit)
        self.limits = limits
        self.packed: dict[str, int] = {}  # shader name -> its trailing operands read from one buffer
        self.over: dict[str, str] = {}  # shader name -> the limit it exceeds (refused where dispatched)
        self.kernels = WgslKernelPrinter(self)
        self.host = NumpyKernelPrinter(self)  # the kernels the host computes, printed as the numpy module would
        self.host_fallback = host_fallback
        self.host_values: set[SSAValue] = set()  # values of no device type: numpy arrays on the host
        self.shaders: dict[str, str] = {}  # source -> shader name
        self.gpu_pieces: set[str] = {"_Gpu"}
        # Device values: the buffer expression of each SSA value (`_b[3]`, `_w[0]`), the resident
        # uploads (host expression, name), and the activation slots (size in bytes, as a Poly).
        self.device: dict[SSAValue, str] = {}
        self.resident: list[tuple[str, str, bool]] = []  # (host expression, name, uploaded as ggml blocks)
        self.in_parts: set[SSAValue] = set()  # weights past one binding, uploaded as their parts (`wgsl_resident`)
        self.slot_sizes: list[Poly] = []
        self.slot_of: dict[SSAValue, int] = {}
        self.folded: dict[SSAValue, tuple[SSAValue, tuple[int, ...]]] = {}  # permute -> (source, perm)
        self.sizing: list[str] = []
        self.dispatches = 0
        self.host_nodes: list[str] = []  # kernels the host computes: "node (why)"
        # Values the host holds besides the host values: a Loop's iteration number and condition (host
        # expressions), and each scan output stacked on the host (its array's name).
        self.host_text: dict[SSAValue, str] = {}
        self.end: dict[LoopOp, int] = {}  # each Loop's last op index (its body's yield)
        self.late: list[str] = []  # buffers sized at run time (`slot`)

    # -- declarations -------------------------------------------------------------------------------

    def declared_names(self) -> set[str]:
        """The numpy module's names, its device runtime's and kernels' pieces, and the names the
        WGSL module spells itself (`g`, `_w`, `_b`, `_gpu`, ...: `names.WGSL_MODULE_NAMES`)."""
        return {*super().declared_names(), *wgsl_runtime.PIECES, *kernel_pieces(), *WGSL_MODULE_NAMES}

    def imports(self) -> str:
        return super().imports() + "import wgpu\n"

    def standard_modules(self) -> set[str]:
        return {*super().standard_modules(), *wgsl_pieces.standard_imports(wgsl_pieces.pieces_for(self.gpu_pieces))}

    def runtime_sources(self) -> list[str]:
        carried = wgsl_pieces.pieces_for(self.gpu_pieces)
        self.pieces |= wgsl_pieces.numpy_pieces_read(carried)  # `ShapeError`: the numpy runtime's
        return [*super().runtime_sources(), *(wgsl_pieces.source_of(name) for name in carried)]

    def declarations(self) -> list[str]:
        exprs = self.host.declarations()  # the host's zips, if any
        shaders = "".join(f"    {name!r}: {source!r},\n" for source, name in self.shaders.items())
        parts = [
            *exprs,
            "# Every compute shader forward dispatches, by name (WGSL source)\n_SHADERS = {\n" + shaders + "}\n",
            "# The shaders reading their last operands from one packed buffer: how many (`_Gpu.pack`)\n"
            f"_PACKED_OPERANDS = {dict(sorted(self.packed.items()))!r}\n",
            "# The device limits the shaders were built within: what forward requests of the adapter\n"
            f"_LIMITS = {self.limits.requested()!r}\n",
            '_GPU: list = []  # the module\'s device, made on first use\n\n\ndef _gpu() -> "_Gpu":\n'
            '    """The device forward computes on: one per process, every pipeline compiled once."""\n'
            "    if not _GPU:\n        _GPU.append(_Gpu(_SHADERS, _PACKED_OPERANDS, _LIMITS))\n    return _GPU[0]\n",
        ]
        lines = [
            'def _resident(weights: "Weights", g: "_Gpu") -> tuple:',
            '    """The weights and constants on the device: uploaded once per Weights and device."""',
            "    if weights._resident is None or weights._resident[0] is not g:",
            "        weights._resident = (g, (",
            *[
                f"            g.{'upload_blocks' if blocks else 'upload'}({name!r}, {host}),  # {i}"
                for i, (host, name, blocks) in enumerate(self.resident)
            ],
            "        ))",
            "    return weights._resident[1]",
        ]
        parts.append("\n".join(lines) + "\n")
        return parts

    # -- the device plan ----------------------------------------------------------------------------

    def plan_buffers(self, ops: Sequence[Operation]) -> None:
        """Fold permutations only products read; number every op, branches and loop bodies included,
        in program order, and find each buffer's last reader; buffers are then taken as the ops are
        printed.

        If and Loop run on the host: a condition or trip count computed on the device is read back
        first (`_host_scalar`).  An If's results are the buffers its branches yield (a Python variable
        each branch assigns), so what a branch yields lives as long as the If's result is read.  A
        value a Loop body reads from outside the body lives to the body's end (every iteration reads
        it); the Loop's carried values have buffers of their own (`collect_loop`)."""
        self.ops = [op for op in self.program.walk() if op is not self.program]
        for op in self.ops:
            if isinstance(op, PermuteOp) and not self._host_typed(op.result):
                users = {id(u.operation): u.operation for u in op.result.uses}.values()
                if users and all(isinstance(u, MatmulOp) and op.result in (u.lhs, u.rhs) for u in users):
                    self.folded[op.result] = (op.operands[0], tuple(op.permutation))
        self.index = {op: i for i, op in enumerate(self.ops)}
        for op in self.ops:
            if isinstance(op, LoopOp):
                last = op.body.block.last_op
                assert last is not None, "a Loop's body ends in kernel.yield (its verifier)"
                self.end[op] = self.index[last]
        self.last_use: dict[SSAValue, int] = {}
        for i, op in enumerate(self.ops):
            for v in op.operands:
                at = len(self.ops) if isinstance(op, ReturnOp) else i
                outside = [loop for loop in loops_around(op) if loop not in loops_of(v)]
                if outside:  # read by every iteration of the outermost Loop it is read in
                    at = max(at, self.end[outside[0]])
                self.last_use[self._root(v)] = max(self.last_use.get(self._root(v), -1), at)
        changed = True
        while changed:  # a yielded buffer lives as long as the If's result (nested Ifs: to a fixed point)
            changed = False
            for op in self.ops:
                if not isinstance(op, IfOp):
                    continue
                for region in (op.then_region, op.else_region):
                    last = region.block.last_op
                    assert isinstance(last, YieldOp)
                    for result, value in zip(op.outputs, last.values, strict=True):
                        root, until = self._root(value), self.last_use.get(result, -1)
                        if self.last_use.get(root, -1) < until:
                            self.last_use[root] = until
                            changed = True
        self.free: list[tuple[Poly, int]] = []  # per slot: size, busy until op index
        scope = self.scope
        assert scope is not None
        scope.items.append("g = _gpu()")
        scope.items.append("_w = _resident(weights, g)")
        scope.items.append("_b = g.pool(_key, _sizes)  # this binding's activation buffers, made once")
        for arg, onnx_name in zip(self.program.block.args, self.program.input_names.data, strict=True):
            if self.host_fallback and self._host_typed(arg):
                self.host_values.add(arg)  # a numpy array the host kernels read
                continue
            if decided_on_host(arg):  # only an If's or a Loop's host side reads it: never uploaded
                continue
            self.slot(arg, -1, forever=True)
            scope.items.append(f"g.write({onnx_name.data!r}, {self.device[arg]}, {self.value_text[arg]})")
        scope.items.append("g.begin()")

    def _root(self, value: SSAValue) -> SSAValue:
        """The value whose buffer `value` is (through regroupings and folded permutations)."""
        while True:
            owner = value.owner
            if isinstance(owner, RegroupOp):
                value = owner.operands[0]
            elif value in self.folded:
                value = self.folded[value][0]
            else:
                return value

    def _size(self, value: SSAValue, late: bool = False) -> Poly:
        """The bytes of `value`'s buffer; unless `late`, refused where they read a length only the run
        knows (a buffer planned before the first dispatch)."""
        t = axes_type(value, "device value")
        size = Poly.lift(4)
        for e in t.shape:
            size = size * e
        if not late and self.reads_result_symbol(size.symbols):
            known = sorted(n for n in symbols_closure(size.symbols) if n in self.result_symbols)
            node = node_of(value.owner) if isinstance(value.owner, Operation) else ""
            raise UnsupportedError(
                f"{node or 'a value'}: its size reads {known[0]}, a length only the run knows "
                f"({self.result_symbols[known[0]]} gives it); the WGSL module sizes every buffer before its first "
                "dispatch"
            )
        return size

    def _past_a_binding(self, size: Poly) -> bool:
        """Whether a buffer of `size` bytes is, where the build knows them, past what one binding holds
        (a size a call decides is checked by the runtime when it is known)."""
        return size.is_const and size.const_value > min(self.limits.binding_size, self.limits.buffer_size)

    def _refuse_past_a_binding(self, size: Poly, what: str) -> NoReturn:
        raise UnsupportedError(
            f"{what}: {size.const_value} bytes on the device, over maxStorageBufferBindingSize "
            f"{self.limits.binding_size} (where the device offers more, give its limits with --device-limits)"
        )

    def _take(self, size: Poly, at: int, until: int, forever: bool = False) -> int:
        """A slot of `size` bytes busy from op `at` until op `until`: a free one, else a new one."""
        free = [k for k, (slot_size, busy) in enumerate(self.free) if slot_size == size and busy < at]
        if free and not forever:
            s = free[0]
        else:
            s = len(self.free)
            self.free.append((size, until))
            self.slot_sizes.append(size)
        self.free[s] = (size, until)
        return s

    def slot(self, value: SSAValue, at: int, forever: bool = False) -> str:
        """A buffer for `value`, made at op `at`: a free slot of its size, else a new one.  A value
        whose size reads a length only the run knows (a scan output's, an If's) gets a buffer of its
        own, made when that length is known (`g.late`: kept for the next call, grown as needed)."""
        size = self._size(value, late=True)
        if self.reads_result_symbol(size.symbols):
            scope = self.scope
            assert scope is not None
            name = self.names.mint(f"_late{len(self.late)}")
            self.late.append(name)
            scope.items.append(f"{name} = g.late({name!r}, {self.poly_py(size)})  # sized by a length the run gave")
            self.device[value] = name
            return name
        if self._past_a_binding(size):
            owner = value.owner
            if isinstance(owner, Operation):
                what = f"the result of '{node_of(owner)}'"
            else:
                names = [n.data for n in self.program.input_names.data]
                inputs: dict[SSAValue, str] = dict(zip(self.program.block.args, names, strict=True))
                what = f"input '{inputs[value]}'" if value in inputs else "a block argument"
            self._refuse_past_a_binding(size, what)
        until = len(self.ops) + 1 if forever else self.last_use.get(value, at)
        s = self._take(size, at, until, forever)
        self.slot_of[value] = s
        self.device[value] = f"_b[{s}]"
        return self.device[value]

    def finish_block(self, scope: Scope) -> None:
        symbols = self.input_symbols_of(self.slot_sizes)
        key = tuple_source([f"_env[{n!r}]" for n in symbols])
        sizes = [self.poly_py(p) for p in self.slot_sizes]  # registers the derived symbols they read
        self.sizing = [
            f"_key = {key}  # the extents the activation buffers read",
            f"_sizes = {tuple_source(sizes)}  # bytes per buffer",
        ]
        if symbols:  # extents the inputs give: no buffer may pass what the device binds (4 bytes an element)
            self.pieces.add("_room")
            limit = f"min(g.max_elements, {MAX_ELEMENTS})"
            check = f"_room(tuple((n // 4,) for n in _sizes), {tuple_py(symbols)}, _env, _src, {limit})"
            scope.items.insert(scope.items.index("g = _gpu()") + 1, check)  # before any buffer is made
        scope.items.append("g.end()")
        for value in self.program.return_op.outputs:
            t = axes_type(value, "output")
            if value in self.host_values or value in self.host_text:  # on the host: returned as it is
                ident = self.returned.get(value)
                text = self.host_text.get(value, self.value_text[value])
                if ident is not None and ident != text:
                    scope.items.append(f"{ident} = {text}")
                    text = ident
                self.value_text[value] = text
                continue
            dtype = _host_dtype(t)
            ident = self.returned.get(value) or self.names.mint("out")
            scope.items.append(f"{ident} = g.read({self.buffer(value)}, {dtype!r}, {self.shape_py(t)})")
            self.value_text[value] = ident

    # -- ops ---------------------------------------------------------------------------------------

    def buffer(self, value: SSAValue) -> str:
        return self.device[self._root(value)]

    def shader(self, source: str, hint: str) -> str:
        source = wgsl_runtime.declare_flags(source)  # a shader raising a flag binds the flags buffer
        fitted = fit_bindings(source, self.limits.storage_buffers)
        if fitted is not None:
            source = fitted.source
        name = self.shaders.get(source)
        if name is None:
            name = f"{hint}_{len(self.shaders)}"
            self.shaders[source] = name
            if fitted is not None and fitted.packed:
                self.packed[name] = fitted.packed
            over = over_limits(source, self.limits)
            if over is not None:
                self.over[name] = over
        return name

    def dispatch(
        self, op: Operation, shader: str, outs: Sequence[str], ins: Sequence[str], params: str, stepped: bool = False
    ) -> None:
        """Record `shader` over `outs` then `ins` with `params` (a `_p_NAME` call giving (params,
        workgroups)); `stepped`: the call gives a list of them, one dispatch each, in order (a
        recurrent kernel's time steps), counted once in the summary."""
        scope = self.scope
        assert scope is not None
        node = op.properties.get("node")
        comment = getattr(node, "data", op.name)
        if shader in self.over:
            raise UnsupportedError(
                f"{op.name} '{comment}': its WGSL kernel does not fit the target device: {self.over[shader]} "
                "(WebGPU's default; where the device offers more, give its limits with --device-limits)"
            )
        buffers = ", ".join([*outs, *ins]) + ("," if len(outs) + len(ins) == 1 else "")
        if stepped:
            line = f"for _step in {params}: g.dispatch({shader!r}, ({buffers}), *_step)  # {comment}, per step"
        else:
            line = f"g.dispatch({shader!r}, ({buffers}), *{params})  # {comment}"
        scope.items.append(line)
        self.dispatches += 1

    def collect_if(self, op: IfOp) -> None:
        """`if`/`else` on the host over the condition (read back first where the device computed it),
        each block dispatching its kernels and naming the buffers it yields as the If's results (and
        binding the lengths they have)."""
        scope = self.scope
        assert scope is not None
        cond, lines = self._host_scalar(op.cond, f"If node '{op.node.data}': its condition")
        scope.items += lines
        names = [self.names.mint(f"_if{self.index[op]}_{k}") for k in range(len(op.outputs))]
        blocks: list[Scope] = []
        for region in (op.then_region, op.else_region):
            block = self.collect(region.block.ops, scope)
            last = region.block.last_op
            assert isinstance(last, YieldOp)
            outer, self.scope = self.scope, block
            for name, result, value in zip(names, op.outputs, last.values, strict=True):
                if value in self.host_values:
                    raise UnsupportedError(
                        f"If node '{op.node.data}': a branch yields a value computed on the host (element type "
                        f"{axes_type(value, 'yielded value').elem.name}); the WGSL module's If yields device buffers"
                    )
                block.items.append(f"{name} = {self.buffer(value)}")
                for a, axis in enumerate(axes_type(result, "kernel.if result").axes):
                    symbol = axis.extent.lone_symbol
                    if symbol is not None and symbol in self.result_symbols:
                        given = axes_type(value, "yielded value").axes[a].extent
                        block.items.append(f"_env[{symbol!r}] = {self.poly_py(given)}  # the length it yields")
            self.scope = outer
            blocks.append(block)
        for name, result in zip(names, op.outputs, strict=True):
            self.device[result] = name
            self.value_text[result] = name
            for axis in axes_type(result, "kernel.if result").axes:
                symbol = axis.extent.lone_symbol
                if symbol is not None and symbol in self.result_symbols:
                    scope.bound.add(symbol)
        scope.items.append(IfBlock(cond, op.node.data, blocks[0], blocks[1]))
        self.owe_deferred()

    def _host_text(self, value: SSAValue) -> str | None:
        """A host expression holding `value`, where the host has it: a host value, a graph input, a
        weight or constant, a Loop's iteration number or condition, a scan output; else None."""
        root = self._root(value)
        if root in self.host_values or root in self.program.block.args:
            return self.value_text[root]
        if root in self.host_text:
            return self.host_text[root]
        if isinstance(root.owner, (WeightOp, ConstantOp)):
            return self.value_text[root]
        return None

    def _host_scalar(self, value: SSAValue, what: str) -> tuple[str, list[str]]:
        """A host expression holding one-element `value` (an If's condition, a Loop's trip count or
        condition), and the lines making it: where the device computed it, what is recorded is
        submitted and the value read back (a host sync), then recording resumes."""
        text = self._host_text(value)
        if text is not None:
            return text, []
        t = axes_type(value, "host-read value")
        name = self.names.mint("_read")
        read = f"(({self.buffer(value)}, {_host_dtype(t)!r}, {self.kernels.shape_of(value)}),)"
        return name, [f"{name}, = g.sync({read})  # {what}, read back", "g.resume()"]

    def collect_loop(self, op: LoopOp) -> None:
        """A `while` on the host (`module_blocks.loop_block`'s semantics), each iteration dispatching the
        body's kernels.

        The trip count and the condition are read once before it (read back where the device computed
        them); each iteration's condition is read back at its end, with the scan outputs' elements
        (stacked on the host after the loop, and uploaded where a device kernel reads them).  The
        iteration number and the condition reach the body's kernels as `g.values` buffers.  A carried
        value has a buffer of its own for the loop, the initial value copied in; one the body changes
        has two, the body reading one while its yield is copied into the other, which the next
        iteration reads (so no yield, whatever buffer it is in, overwrites a value the body still
        reads); both live as long as the Loop's result is read."""
        scope = self.scope
        assert scope is not None
        at, node, block = self.index[op], op.node.data, op.body.block
        last = block.last_op
        assert isinstance(last, YieldOp)
        carried = len(op.carried)
        iteration, condition, *args = block.args
        trip, cond, count = (self.names.mint(n) for n in ("_trip", "_cond", "_count"))
        before: list[str] = []
        if op.trip is not None:
            m, lines = self._host_scalar(op.trip, f"Loop node '{node}': its trip count")
            before += [*lines, f"{trip} = int(np.asarray({m}).reshape(-1)[0])  # {node}: M"]
        if op.cond is not None:
            c, lines = self._host_scalar(op.cond, f"Loop node '{node}': its condition")
            before += [*lines, f"{cond} = bool(np.asarray({c}).reshape(-1)[0])  # {node}: cond"]
        else:
            before.append(f"{cond} = True  # {node}: no cond input")
        yields = list(last.values)
        pairs: list[tuple[str, str, SSAValue, Poly]] = []  # (reads, next, the yield copied in, bytes)
        for j, (arg, init, result) in enumerate(zip(args, op.carried, op.outputs, strict=False)):
            value = yields[1 + j]
            for v, what in ((init, "its initial value"), (value, "what its body yields")):
                if v in self.host_values or self._host_typed(v):
                    raise UnsupportedError(
                        f"Loop node '{node}': loop-carried value {j}, {what}, is computed on the host (element "
                        f"type {axes_type(v, 'carried value').elem.name}); the WGSL module carries device buffers"
                    )
            size = self._size(arg)
            until = max(self.end[op], self.last_use.get(result, at))
            cur = self.names.mint(f"_loop{at}_{j}")
            before.append(f"{cur} = _b[{self._take(size, at, until)}]  # {node}: loop-carried {j}")
            before.append(f"g.copy({self.buffer(init)}, {cur}, {self.poly_py(size)})  # its initial value")
            if self._root(value) is not arg:  # the body changes it: the next iteration's value has a buffer too
                nxt = self.names.mint(f"_next{at}_{j}")
                before.append(f"{nxt} = _b[{self._take(size, at, until)}]")
                pairs.append((cur, nxt, value, size))
            self.device[arg] = self.value_text[arg] = cur
            self.device[result] = self.value_text[result] = cur
        scans = [self.names.mint(f"_scan{at}_{k}") for k in range(len(op.outputs) - carried)]
        before += [f"{name}: list[np.ndarray] = []" for name in scans]
        before.append(f"{count} = 0")
        test = f"{cond} and {count} < {trip}" if op.trip is not None else cond
        start: list[str] = []
        for arg, hint, text in ((iteration, "_iteration", f"np.array({count}, dtype=np.int64)"),
                                (condition, "_cond_in", f"np.array({cond})")):  # fmt: skip
            self.host_text[arg] = self.value_text[arg] = text
            host_read = (0, *range(1 + carried, len(yields)))  # the yield's condition and scan elements
            if any(u.operation is not last or u.index not in host_read for u in arg.uses):
                # a kernel reads it (or a carried value is it): a buffer per value, uploaded once
                ident = self.names.mint(hint)
                start.append(f"{ident} = g.values({text})")
                self.device[arg] = ident
        body = self.collect(block.ops, scope)
        # The iteration's end: its condition and scan elements read back (one sync), every changed
        # carried value copied into its other buffer, then the buffers swapped.
        reads: list[str] = []
        down: list[str] = []
        texts: list[str] = []
        outer, self.scope = self.scope, body  # the extents read here are the body's
        for v in [yields[0], *yields[1 + carried :]]:
            spelled = self._host_text(v)
            if spelled is None:
                t = axes_type(v, "read-back value")
                reads.append(f"({self.buffer(v)}, {_host_dtype(t)!r}, {self.kernels.shape_of(v)})")
                spelled = self.names.mint("_read")
                down.append(spelled)
            texts.append(spelled)
        sizes = [self.poly_py(size) for _, _, _, size in pairs]
        self.scope = outer
        if reads:
            body.items.append(f"{', '.join(down)}, = g.sync(({', '.join(reads)},))  # {node}: cond and scans")
            body.items.append("g.resume()")
        body.items += [f"{name}.append({text})" for name, text in zip(scans, texts[1:], strict=True)]
        body.items.append(f"{cond} = bool(np.asarray({texts[0]}).reshape(-1)[0])")
        for (_, nxt, value, _), size_py in zip(pairs, sizes, strict=True):
            body.items.append(f"g.copy({self.buffer(value)}, {nxt}, {size_py})")
        if pairs:
            a, b = ", ".join(p[0] for p in pairs), ", ".join(p[1] for p in pairs)
            body.items.append(f"{a}, {b} = {b}, {a}")
        body.items.append(f"{count} += 1")
        after: list[str] = []
        idents: list[str] = [""] * carried
        for name, result in zip(scans, op.outputs[carried:], strict=True):
            t = axes_type(result, f"kernel.loop '{node}' result")
            dtype = dtype_source(numpy_dtype(t, f"kernel.loop '{node}' result"))
            rest = tuple_source([self.poly_py(a.extent) for a in t.axes[1:]])
            ident = self.result_ident(op, result)
            after.append(f"{ident} = np.stack({name}) if {name} else np.empty((0, *{rest}), {dtype})")
            self.host_text[result] = ident
            if any(not isinstance(u.operation, ReturnOp) for u in result.uses):  # a kernel reads it
                buffer = self.names.mint(f"{ident}_on_device")
                after.append(f"{buffer} = g.upload({node!r}, {ident})")
                self.device[result] = buffer
            idents.append(ident)
        scope.items.append(LoopBlock(before, f"while {test}:  # Loop node '{node}'", start, body, after))
        self.bind_result_lengths(op, idents)

    def collect_op(self, op: Operation) -> None:
        scope = self.scope
        assert scope is not None
        at = self.index[op]
        if isinstance(op, (WeightOp, ConstantOp)) and self.host_fallback and self._host_typed(op.result):
            self.collect_weight(op) if isinstance(op, WeightOp) else self.collect_constant(op)
            self.host_values.add(op.result)  # a numpy array the host kernels read
            return
        if isinstance(op, (WeightOp, ConstantOp)) and decided_on_host(op.result):  # an If's or a Loop's host side
            self.collect_weight(op) if isinstance(op, WeightOp) else self.collect_constant(op)
            return
        if isinstance(op, (WeightOp, ConstantOp)) and self._host_typed(op.result):  # never uploaded as another type
            what = f"weight '{op.weight_name.data}'" if isinstance(op, WeightOp) else f"the constant of '{node_of(op)}'"
            raise UnsupportedError(
                f"{what}: element type {axes_type(op.result, 'value').elem.name} has no WGSL form "
                f"({wgsl_common.NO_DEVICE_FORM}); build with --host-fallback to compute it on the host"
            )
        if isinstance(op, WeightOp) and self._past_a_binding(self._size(op.result)) and read_in_parts(op.result):
            self.collect_weight(op)  # held whole by the host, uploaded in the parts it is read in
            self.in_parts.add(op.result)
            return
        if isinstance(op, SliceOp) and (whole := op.operands[0]) in self.in_parts:
            weight = whole.owner
            assert isinstance(weight, WeightOp)
            part = op.results[0]
            self.value_text[part] = self.value_text[whole] + part_index(op)
            self._resident_value(part, self.value_text[part], weight.weight_name.data + part_index(op))
            return
        if isinstance(op, WeightOp):
            self.collect_weight(op)
            blocks = PACKED.is_on(op)  # uploaded as its ggml blocks (`pack-quantized`)
            self._resident_value(op.result, self.value_text[op.result], op.weight_name.data, blocks)
            return
        if isinstance(op, ConstantOp):
            self.collect_constant(op)
            text = self.value_text[op.result]
            if isinstance(op.value, ArrayAttr):  # polynomials: computed on the host for each binding
                self.device[op.result] = f"g.values({text})"
                self.gpu_pieces.add("_Gpu")
            else:
                self._resident_value(op.result, text, f"constant of {op.node.data}")
            return
        if isinstance(op, (ReturnOp, YieldOp)):
            return
        host = [v for v in [*op.operands, *op.results] if v in self.host_values or self._host_typed(v)]
        if host:
            t = axes_type(host[0], "host value")
            if not self.host_fallback:
                raise UnsupportedError(
                    f"{op.name} '{node_of(op)}': element type {t.elem.name} has no WGSL form "
                    f"({wgsl_common.NO_DEVICE_FORM}); build with --host-fallback to compute it on the host"
                )
            self._host_kernel(op, at, f"{t.elem.name} has no WGSL form")
            return
        if isinstance(op, RegroupOp) or (op.results and op.results[0] in self.folded):
            # The same buffer: a regrouping, or a permutation the products read through their strides.
            self.value_text[op.results[0]] = self.value_text.get(op.operands[0], "view")
            return
        try:
            dispatches = self.kernels.prepare(op)
        except elementwise.UnboundedI64:
            self._host_kernel(op, at, "i64 arithmetic the device's i32 could wrap")
            return
        except UnsupportedError as e:
            if not self.host_fallback:
                raise UnsupportedError(f"{e}; build with --host-fallback to compute it on the host") from None
            self._host_kernel(op, at, _reason(str(e)))
            return
        for r in op.results:
            self.result_ident(op, r)
        dispatches(at)

    def _resident_value(self, value: SSAValue, host: str, name: str, blocks: bool = False) -> None:
        if not blocks and self._past_a_binding(size := self._size(value)):
            self._refuse_past_a_binding(size, f"weight '{name}'" if isinstance(value.owner, WeightOp) else name)
        self.device[value] = f"_w[{len(self.resident)}]"
        self.resident.append((host, name, blocks))

    def _host_kernel(self, op: Operation, at: int, reason: str) -> None:
        """`op` computed by the host in numpy (the numpy module's own line for it): its device operands
        come down, its results of a device type go back up (an integer refused there if it left the
        i32 range), the others stay host values.  The report lists it with `reason`."""
        scope = self.scope
        assert scope is not None
        node = node_of(op) or op.name
        reads: list[str] = []
        names: list[str] = []  # what each read is named
        down: dict[SSAValue, str] = {}
        for v in op.operands:
            if v in self.host_values or v in down:
                continue
            if v in self.host_text:  # the host has it (a Loop's iteration number, a scan output)
                down[v] = self.host_text[v]
                continue
            t = axes_type(v, "host operand")
            source, perm = self.folded.get(v, (v, None))
            shape = self.kernels.shape_of(source)
            reads.append(f"({self.buffer(source)}, {_host_dtype(t)!r}, {shape})")
            name = self.names.mint(f"_h{at}_{len(down)}")
            names.append(name)
            down[v] = name if perm is None else f"{name}.transpose({perm!r})"
        if reads:
            target = ", ".join(names) + ("," if len(names) == 1 else "")
            scope.items.append(f"{target} = g.host(({', '.join(reads)},))  # {node}: on the host ({reason})")
        scope.items += self.host.lines(op, self.result_ident, down)
        # A length only the run knows is bound now (the host has the result), before a buffer reads it.
        self.bind_result_lengths(op, [self.value_text.get(r, "") for r in op.results])
        uploads = False
        for r in op.results:
            if self._host_typed(r):
                self.host_values.add(r)
                continue
            t = axes_type(r, "host result")
            value = f"np.asarray({self.value_text[r]}, dtype={_host_dtype(t)!r})"
            if not reads and not uploads:
                scope.items.append("g.host(())  # what is recorded runs before the host's kernel")
            scope.items.append(f"g.write({node!r}, {self.slot(r, at)}, {value})")
            uploads = True
        if reads or uploads:
            scope.items.append("g.resume()")
        self.host_nodes.append(f"{node} ({reason})")

    @staticmethod
    def _host_typed(value: SSAValue) -> bool:
        """Whether `value`'s element type has no device form."""
        t = value.type
        if not isinstance(t, AxesTensorType):
            return False
        try:
            wgsl_common.device_type(t.elem.name)
        except ValueError:
            return True
        return False

    def summary(self) -> DeviceSummary:
        """Dispatches, crossing bytes and device bytes per forward (after `emit`)."""
        crossing = Poly.lift(0)
        for value in [*self.program.block.args, *self.program.return_op.outputs]:
            if value in self.host_values:
                continue
            size = Poly.lift(4)
            for e in axes_type(value, "boundary value").shape:
                size = size * e
            crossing = crossing + size
        resident = 0
        for op in self.ops:
            if isinstance(op, (WeightOp, ConstantOp, SliceOp)) and "_w[" in self.device.get(op.results[0], ""):
                resident += resident_bytes(op)
        return DeviceSummary(
            self.dispatches, str(crossing), str(device_bytes(self.slot_sizes)), str(resident), tuple(self.host_nodes)
        )

    # -- forward --------------------------------------------------------------------------------------

    def forward_source(
        self, params: Sequence[str], checks: Sequence[str], body: Sequence[str], ret: ReturnOp,
        out_fields: Sequence[str],
    ) -> str:  # fmt: skip
        text = super().forward_source(params, [*checks, *self.sizing], body, ret, out_fields)
        # One forward at a time on the device (its encoder, pools and bind groups are shared): from
        # `g = _gpu()` to the last download, forward holds the device's lock.
        lines = text.split("\n")
        if "    g = _gpu()" not in lines:
            return text
        start = lines.index("    g = _gpu()") + 1
        end = max(i for i, line in enumerate(lines) if line.startswith("    return "))
        inner = [f"    {line}" if line else line for line in lines[start:end]]
        lines[start:end] = ["    with g.lock:  # forward's calls from many threads take turns on the device", *inner]
        return "\n".join(lines)


def _reason(message: str) -> str:
    """A refusal's message without the node it names (the report names the node already)."""
    head, sep, tail = message.partition("': ")
    return tail if sep and head.startswith("kernel.") else message


def _host_dtype(t: AxesTensorType) -> str:
    """The numpy name of the dtype holding `t`'s elements on the host (ml_dtypes' for bf16, float8, int4, ...)."""
    dtype = t.elem.numpy
    return dtype.name if dtype is not None and dtype.kind != "O" else t.elem.name


def device_bytes(sizes: Sequence[Poly]) -> Poly:
    """The activation bytes of a plan (the sum of its slots)."""
    total = Poly.lift(0)
    for s in sizes:
        total = total + s
    return total


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m loam.backends.wgsl_module FILE.mlir`: print the WGSL module for FILE's program."""
    return print_module(argv, emit_wgsl, "loam.backends.wgsl_module")


if __name__ == "__main__":
    raise SystemExit(main())
