"""Print a `kernel.program` as a Python module that runs every kernel on a WebGPU device (wgpu).

The module has the numpy module's API and prologue (`Weights.load/load_file/embedded`, `forward`,
`ShapeError`, `LoadError`; the same input, spelled-axis and owed checks, on the host, before
anything goes to the device) and differs in what forward does after the checks:

- the module's device (`_gpu()`: one adapter and device per process, every pipeline compiled once);
- the weights' resident buffers (`_resident(weights, g)`: uploaded once per `Weights`, halves as
  f32, integers narrowed to i32 after a range check, a permuted weight uploaded permuted);
- the activation buffers of this binding of the extent symbols (`g.pool`: sizes planned at build
  time, reused by liveness, kept for the next call with the same extents), the inputs written in;
- one command encoder: a dispatch per kernel (`g.dispatch(SHADER, buffers, params, workgroups)`),
  the params computed on the host from the bound extents by the kernel's `_p_NAME`;
- the outputs downloaded, converted back to their host dtypes.

A kernel the printer has no WGSL for stops the build naming the node, unless the build asks for a
host fallback (`host_fallback=True`, `loam build --host-fallback`): then that kernel runs in numpy on
the host (its device operands downloaded, its results uploaded), and a value whose element type has no
device form (f64, ui32, ui64) lives on the host from its first kernel to its last.  Elementwise i64
arithmetic the device's i32 could wrap runs on the host always.  The report lists every host kernel
with its reason.
A regrouping is the same buffer (every device tensor is row-major and contiguous); a permutation
only products read is folded into the product's strides; any other permutation, slice, split and
concat is a strided copy.  The shaders are module constants (`_SHADERS`), one per distinct source.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Sequence

from xdsl.dialects.builtin import ArrayAttr
from xdsl.ir import Operation, SSAValue

from loam.backends import wgsl_runtime
from loam.backends.names import WGSL_MODULE_NAMES
from loam.backends.numpy_module import (
    _axes_type,
    _checkpoint_names,
    _Emitter,
    _If,
    _row_orders,
    _Scope,
    print_module,
)
from loam.backends.wgsl_kernels import common as wgsl_common
from loam.backends.wgsl_kernels import elementwise, matmul, movement, tile
from loam.dialects.expr import Expr
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
from loam.dialects.tensor_axes import AxesTensorType
from loam.errors import UnsupportedError
from loam.poly import Poly
from loam.report import DeviceSummary

__all__ = ["emit_wgsl"]


def _library_families() -> list[object]:
    """The kernel families with library kernels (`SOURCES` / `PIECES`), those that exist."""
    import importlib

    found = []
    for name in ("normalization", "reduce", "indexing", "conv", "shape"):
        try:
            found.append(importlib.import_module(f"loam.backends.wgsl_kernels.{name}"))
        except ImportError:
            continue
    return found


def _kernel_pieces() -> dict[str, object]:
    pieces: dict[str, object] = {}
    for family in (elementwise, matmul, movement, tile, *_library_families()):
        pieces.update(family.PIECES)  # type: ignore[attr-defined]
    return pieces


def _kernel_depends() -> dict[str, tuple[str, ...]]:
    depends: dict[str, tuple[str, ...]] = {}
    for family in (elementwise, matmul, movement, tile, *_library_families()):
        depends.update(family.DEPENDS)  # type: ignore[attr-defined]
    return depends


def _library_sources() -> dict[str, object]:
    sources: dict[str, object] = {}
    for family in _library_families():
        sources.update(getattr(family, "SOURCES", {}))
    return sources


def emit_wgsl(module: object) -> str:
    """The Python source of the WebGPU module for the one `kernel.program` in `module`.

    Raises `UnsupportedError` naming the node for a kernel the printer has no WGSL for."""
    return wgsl_module(module)[0]


def wgsl_module(module: object, host_fallback: bool = False) -> tuple[str, DeviceSummary]:
    """`emit_wgsl`'s source and what the module does per forward (dispatches, bytes); with
    `host_fallback`, kernels with no WGSL form run on the host instead of stopping the build."""
    programs = [op for op in module.walk() if isinstance(op, ProgramOp)]  # type: ignore[attr-defined]
    if len(programs) != 1:
        raise UnsupportedError(f"the WGSL backend prints one kernel.program, found {len(programs)}")
    emitter = _WgslEmitter(
        programs[0],  # type: ignore[arg-type]
        _checkpoint_names(module),  # type: ignore[arg-type]
        host_fallback,
        _row_orders(module),  # type: ignore[arg-type]
    )
    source = emitter.emit()
    return source, emitter.summary()


class _WgslEmitter(_Emitter):
    weight_slots = {"_resident": "(device, buffers) the weights were uploaded to, made on first use"}  # noqa: RUF012

    def __init__(
        self,
        program: ProgramOp,
        checkpoint_names: tuple[tuple[str, str], ...] = (),
        host_fallback: bool = False,
        row_orders: tuple[tuple[str, int], ...] = (),
    ) -> None:
        super().__init__(program, checkpoint_names, row_orders)
        self.host_fallback = host_fallback
        self.host_values: set[SSAValue] = set()  # values of no device type: numpy arrays on the host
        self.shaders: dict[str, str] = {}  # source -> shader name
        self.gpu_pieces: set[str] = {"_Gpu"}
        # Device values: the buffer expression of each SSA value (`_b[3]`, `_w[0]`), the resident
        # uploads (host expression, name), and the activation slots (size in bytes, as a Poly).
        self.device: dict[SSAValue, str] = {}
        self.resident: list[tuple[str, str]] = []
        self.slot_sizes: list[Poly] = []
        self.slot_of: dict[SSAValue, int] = {}
        self.folded: dict[SSAValue, tuple[SSAValue, tuple[int, ...]]] = {}  # permute -> (source, perm)
        self.sizing: list[str] = []
        self.dispatches = 0
        self.host_nodes: list[str] = []  # kernels the host computes: "node (why)"

    # -- declarations -------------------------------------------------------------------------------

    def declared_names(self) -> set[str]:
        """The numpy module's names, its device runtime's and kernels' pieces, and the names the
        WGSL module spells itself (`g`, `_w`, `_b`, `_gpu`, ...: `names.WGSL_MODULE_NAMES`)."""
        return {*super().declared_names(), *wgsl_runtime.PIECES, *_kernel_pieces(), *WGSL_MODULE_NAMES}

    def _imports(self) -> str:
        return super()._imports() + "import wgpu\n"

    def _runtime_sources(self) -> list[str]:
        sources = super()._runtime_sources()
        pieces = {**wgsl_runtime.PIECES, **_kernel_pieces()}
        depends = {**wgsl_runtime.DEPENDS, **_kernel_depends()}
        wanted: set[str] = set()
        stack = list(self.gpu_pieces)
        while stack:
            name = stack.pop()
            if name not in wanted:
                wanted.add(name)
                stack.extend(d for d in depends.get(name, ()) if d in pieces)
        for name in pieces:
            if name in wanted:
                piece = pieces[name]
                constant = not callable(piece)  # a module constant: its value
                sources.append(f"{name} = {piece!r}\n" if constant else inspect.getsource(piece))  # type: ignore[arg-type]
        return sources

    def _declarations(self) -> list[str]:
        exprs = [self._expr_source(key, n) for key, n in self.exprs.items()]  # the host's zips, if any
        shaders = "".join(f"    {name!r}: {source!r},\n" for source, name in self.shaders.items())
        parts = [
            *exprs,
            "# Every compute shader forward dispatches, by name (WGSL source)\n_SHADERS = {\n" + shaders + "}\n",
            '_GPU: list = []  # the module\'s device, made on first use\n\n\ndef _gpu() -> "_Gpu":\n'
            '    """The device forward computes on: one per process, every pipeline compiled once."""\n'
            "    if not _GPU:\n        _GPU.append(_Gpu(_SHADERS))\n    return _GPU[0]\n",
        ]
        lines = [
            'def _resident(weights: "Weights", g: "_Gpu") -> tuple:',
            '    """The weights and constants on the device: uploaded once per Weights and device."""',
            "    if weights._resident is None or weights._resident[0] is not g:",
            "        weights._resident = (g, (",
            *[f"            g.upload({name!r}, {host}),  # {i}" for i, (host, name) in enumerate(self.resident)],
            "        ))",
            "    return weights._resident[1]",
        ]
        parts.append("\n".join(lines) + "\n")
        return parts

    # -- the device plan ----------------------------------------------------------------------------

    def _plan_buffers(self, ops: Sequence[Operation]) -> None:
        """Fold permutations only products read; number every op, branches included, in program
        order, and find each buffer's last reader; buffers are then taken as the ops are printed.

        An If runs on the host: its condition must be a graph input.  Its results are the buffers
        its branches yield (a Python variable each branch assigns), so what a branch yields lives
        as long as the If's result is read."""
        self.ops = [op for op in self.program.walk() if op is not self.program]
        for op in self.ops:
            if isinstance(op, IfOp) and op.cond not in self.program.block.args:
                raise UnsupportedError(
                    f"If node '{op.node.data}': its condition is computed on the device, and the WGSL module "
                    "decides an If on the host (a graph input as the condition)"
                )
            if isinstance(op, PermuteOp) and not self._host_typed(op.result):
                users = {id(u.operation): u.operation for u in op.result.uses}.values()
                if users and all(isinstance(u, MatmulOp) and op.result in (u.lhs, u.rhs) for u in users):
                    self.folded[op.result] = (op.operands[0], tuple(op.permutation))
        self.index = {op: i for i, op in enumerate(self.ops)}
        self.last_use: dict[SSAValue, int] = {}
        for i, op in enumerate(self.ops):
            for v in op.operands:
                at = len(self.ops) if isinstance(op, ReturnOp) else i
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
            self._slot(arg, -1, forever=True)
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

    def _slot(self, value: SSAValue, at: int, forever: bool = False) -> str:
        """A buffer for `value`, made at op `at`: a free slot of its size, else a new one."""
        t = _axes_type(value, "device value")
        size = Poly.lift(4)
        for e in t.shape:
            size = size * e
        if self._reads_if_symbol(size.symbols):
            raise UnsupportedError(
                f"{_node(value.owner) or 'a value'}: its size reads a length only an If's result has; the WGSL "  # type: ignore[arg-type]
                "module sizes every buffer before its first dispatch"
            )
        until = len(self.ops) + 1 if forever else self.last_use.get(value, at)
        free = [k for k, (slot_size, busy) in enumerate(self.free) if slot_size == size and busy < at]
        if free and not forever:
            s = free[0]
        else:
            s = len(self.free)
            self.free.append((size, until))
            self.slot_sizes.append(size)
        self.free[s] = (size, until)
        self.slot_of[value] = s
        self.device[value] = f"_b[{s}]"
        return self.device[value]

    def _finish_block(self, scope: _Scope) -> None:
        symbols = self._input_symbols_of(self.slot_sizes)
        items = [f"_env[{n!r}]" for n in symbols]
        key = "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        sizes = [self._poly_py(p) for p in self.slot_sizes]  # registers the derived symbols they read
        self.sizing = [
            f"_key = {key}  # the extents the activation buffers read",
            f"_sizes = ({', '.join(sizes)}{',' if len(sizes) == 1 else ''})  # bytes per buffer",
        ]
        scope.items.append("g.end()")
        for value in self.program.return_op.outputs:
            t = _axes_type(value, "output")
            if value in self.host_values:  # computed on the host: returned as it is
                ident = self.returned.get(value)
                if ident is not None and ident != self.value_text[value]:
                    scope.items.append(f"{ident} = {self.value_text[value]}")
                    self.value_text[value] = ident
                continue
            dtype = _host_dtype(t)
            ident = self.returned.get(value) or self.names.mint("out")
            scope.items.append(f"{ident} = g.read({self._buffer(value)}, {dtype!r}, {self._shape_py(t)})")
            self.value_text[value] = ident

    # -- ops ---------------------------------------------------------------------------------------

    def _buffer(self, value: SSAValue) -> str:
        return self.device[self._root(value)]

    def _shader(self, source: str, hint: str) -> str:
        name = self.shaders.get(source)
        if name is None:
            name = f"{hint}_{len(self.shaders)}"
            self.shaders[source] = name
        return name

    def _dispatch(self, op: Operation, shader: str, outs: Sequence[str], ins: Sequence[str], params: str) -> None:
        scope = self.scope
        assert scope is not None
        node = op.properties.get("node")
        comment = getattr(node, "data", op.name)
        buffers = ", ".join([*outs, *ins]) + ("," if len(outs) + len(ins) == 1 else "")
        scope.items.append(f"g.dispatch({shader!r}, ({buffers}), *{params})  # {comment}")
        self.dispatches += 1

    def _collect_if(self, op: IfOp) -> None:
        """`if`/`else` on the host over the input condition, each block dispatching its kernels and
        naming the buffers it yields as the If's results (and binding the lengths they have)."""
        scope = self.scope
        assert scope is not None
        cond = self.value_text[op.cond]
        names = [self.names.mint(f"_if{self.index[op]}_{k}") for k in range(len(op.outputs))]
        blocks: list[_Scope] = []
        for region in (op.then_region, op.else_region):
            block = self._collect(region.block.ops, scope)
            last = region.block.last_op
            assert isinstance(last, YieldOp)
            outer, self.scope = self.scope, block
            for name, result, value in zip(names, op.outputs, last.values, strict=True):
                if value in self.host_values:
                    raise UnsupportedError(
                        f"If node '{op.node.data}': a branch yields a value computed on the host (element type "
                        f"{_axes_type(value, 'yielded value').elem.name}); the WGSL module's If yields device buffers"
                    )
                block.items.append(f"{name} = {self._buffer(value)}")
                for a, axis in enumerate(_axes_type(result, "kernel.if result").axes):
                    symbol = axis.extent.lone_symbol
                    if symbol is not None and symbol in self.if_symbols:
                        given = _axes_type(value, "yielded value").axes[a].extent
                        block.items.append(f"_env[{symbol!r}] = {self._poly_py(given)}  # the length it yields")
            self.scope = outer
            blocks.append(block)
        for name, result in zip(names, op.outputs, strict=True):
            self.device[result] = name
            self.value_text[result] = name
            for axis in _axes_type(result, "kernel.if result").axes:
                symbol = axis.extent.lone_symbol
                if symbol is not None and symbol in self.if_symbols:
                    scope.bound.add(symbol)
        scope.items.append(_If(cond, op.node.data, blocks[0], blocks[1]))
        self._owe_deferred()

    def _collect_op(self, op: Operation) -> None:
        scope = self.scope
        assert scope is not None
        at = self.index[op]
        if isinstance(op, (WeightOp, ConstantOp)) and self.host_fallback and self._host_typed(op.result):
            super()._collect_op(op)  # a numpy array the host kernels read
            self.host_values.add(op.result)
            return
        if isinstance(op, WeightOp):
            super()._collect_op(op)
            self._resident_value(op.result, self.value_text[op.result], op.weight_name.data)
            return
        if isinstance(op, ConstantOp):
            super()._collect_op(op)
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
            t = _axes_type(host[0], "host value")
            if not self.host_fallback:
                raise UnsupportedError(
                    f"{op.name} '{_node(op)}': element type {t.elem.name} has no WGSL form (WGSL has no f64, u64 or "
                    "8-bit floats); build with --host-fallback to compute it on the host"
                )
            self._host_kernel(op, at, f"{t.elem.name} has no WGSL form")
            return
        if self.host_fallback:
            mark = (len(scope.items), self.dispatches, len(self.shaders))
            try:
                self._device_op(op, at)
            except UnsupportedError as e:
                del scope.items[mark[0] :]
                self.dispatches = mark[1]
                self._host_kernel(op, at, _reason(str(e)))
            return
        try:
            self._device_op(op, at)
        except UnsupportedError as e:
            raise UnsupportedError(f"{e}; build with --host-fallback to compute it on the host") from None

    def _device_op(self, op: Operation, at: int) -> None:
        """Dispatch `op` on the device (UnsupportedError naming the node when it has no WGSL form)."""
        if isinstance(op, RegroupOp) or (op.results and op.results[0] in self.folded):
            self.value_text[op.results[0]] = self.value_text.get(op.operands[0], "view")
            return
        for r in op.results:
            self._result_ident(op, r)
        if isinstance(op, MatmulOp):
            self._matmul(op, at)
        elif isinstance(op, ZipOp):
            self._zip(op, op.expr.data, list(op.inputs), at)
        elif isinstance(op, CastOp):
            elem = _axes_type(op.result, "kernel.cast").elem.name
            self._zip(op, Expr.operand(0).cast(elem), [op.operands[0]], at)
        elif isinstance(op, PermuteOp):
            self._copy(op, at, f"_p_permute({self._shape_of(op.operands[0])}, {tuple(op.permutation)!r})")
        elif isinstance(op, LibraryOp):
            self._library(op, at)
        else:
            raise UnsupportedError(f"the WGSL backend has no kernel for {op.name} (node '{_node(op)}')")

    def _resident_value(self, value: SSAValue, host: str, name: str) -> None:
        self.device[value] = f"_w[{len(self.resident)}]"
        self.resident.append((host, name))

    def _shape_of(self, value: SSAValue) -> str:
        return self._shape_py(_axes_type(value, "operand"))

    def _zip(self, op: Operation, expr: Expr, values: list[SSAValue], at: int) -> None:
        types = [_axes_type(v, "kernel.zip operand") for v in values]
        result = _axes_type(op.results[0], op.name)
        shapes = [t.shape for t in types]
        _check_types(op, [*types, result])
        try:
            elems = [t.elem.name for t in types]
            source = elementwise.source_zip(expr, shapes, elems, (result.shape, result.elem.name))
        except elementwise.UnboundedI64:
            self._host_kernel(op, at, "i64 arithmetic the device's i32 could wrap")
            return
        except UnsupportedError as e:
            raise UnsupportedError(f"{op.name} '{_node(op)}': {e}") from None
        strided = elementwise.strided_operands(shapes, result.shape)
        self.gpu_pieces.add("_p_zip")
        params = f"_p_zip({self._shape_py(result)}, ({''.join(self._shape_of(values[j]) + ', ' for j in strided)}))"
        out = self._slot(op.results[0], at)
        self._dispatch(op, self._shader(source, "zip"), [out], [self._buffer(v) for v in values], params)

    def _host_kernel(self, op: Operation, at: int, reason: str) -> None:
        """`op` computed by the host in numpy (the numpy module's own line for it): its device operands
        come down, its results of a device type go back up (an integer refused there if it left the
        i32 range), the others stay host values.  The report lists it with `reason`."""
        scope = self.scope
        assert scope is not None
        node = _node(op) or op.name
        reads: list[str] = []
        down: dict[SSAValue, str] = {}
        for v in op.operands:
            if v in self.host_values or v in down:
                continue
            t = _axes_type(v, "host operand")
            source, perm = self.folded.get(v, (v, None))
            shape = self._shape_of(source)
            reads.append(f"({self._buffer(source)}, {_host_dtype(t)!r}, {shape})")
            name = self.names.mint(f"_h{at}_{len(down)}")
            down[v] = name if perm is None else f"{name}.transpose({perm!r})"
        if reads:
            names = [d.partition(".")[0] for d in down.values()]
            target = ", ".join(names) + ("," if len(names) == 1 else "")
            scope.items.append(f"{target} = g.host(({', '.join(reads)},))  # {node}: on the host ({reason})")
        saved = {v: self.value_text.get(v) for v in down}
        self.value_text.update(down)
        try:
            _Emitter._collect_op(self, op)
        finally:
            for v, text in saved.items():
                if text is None:
                    del self.value_text[v]
                else:
                    self.value_text[v] = text
        uploads = False
        for r in op.results:
            if self._host_typed(r):
                self.host_values.add(r)
                continue
            t = _axes_type(r, "host result")
            value = f"np.asarray({self.value_text[r]}, dtype={_host_dtype(t)!r})"
            if not reads and not uploads:
                scope.items.append("g.host(())  # what is recorded runs before the host's kernel")
            scope.items.append(f"g.write({node!r}, {self._slot(r, at)}, {value})")
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

    def _matmul(self, op: MatmulOp, at: int) -> None:
        result = _axes_type(op.result, "kernel.matmul")
        extras = [_axes_type(v, "epilogue operand") for v in op.extras]
        sides = []
        for value in (op.lhs, op.rhs):
            if value in self.folded:
                source, perm = self.folded[value]
                self.gpu_pieces.add("_row_major")
                strides = f"tuple(_row_major({self._shape_of(source)})[p] for p in {perm!r})"
            else:
                strides = f"_row_major({self._shape_of(value)})"
                self.gpu_pieces.add("_row_major")
            sides.append((self._shape_of(value), strides))
        a_type, b_type = (_axes_type(v, "matmul operand") for v in (op.lhs, op.rhs))
        _check_types(op, [a_type, b_type, result, *extras])
        batch_rank = result.rank - (a_type.rank > 1) - (b_type.rank > 1)
        epilogue = op.epilogue.data if op.epilogue is not None else None
        source = matmul.source_matmul(
            a_type.elem.name, batch_rank, (result.shape, result.elem.name), epilogue,
            [(t.shape, t.elem.name) for t in extras],
        )  # fmt: skip
        strided = [j for j, t in enumerate(extras) if t.shape != result.shape]
        strided_shapes = "".join(self._shape_py(extras[j]) + ", " for j in strided)
        self.gpu_pieces.add("_p_matmul")
        params = (
            f"_p_matmul({sides[0][0]}, {sides[1][0]}, {sides[0][1]}, {sides[1][1]}, {self._shape_py(result)}, "
            f"({strided_shapes}))"
        )
        out = self._slot(op.result, at)
        ins = [self._buffer(op.lhs), self._buffer(op.rhs), *(self._buffer(v) for v in op.extras)]
        self._dispatch(op, self._shader(source, "matmul"), [out], ins, params)

    def _copy(self, op: Operation, at: int, params: str, result: SSAValue | None = None, into: str | None = None,
              source: SSAValue | None = None) -> None:  # fmt: skip
        result = result if result is not None else op.results[0]
        t = _axes_type(result, "copy result")
        _check_types(op, [t])
        rank = t.rank if into is None else _axes_type(source, "piece").rank  # type: ignore[arg-type]
        shader = self._shader(movement.source_copy(t.elem.name, rank), "copy")
        self.gpu_pieces.add(params.split("(", 1)[0])
        out = into if into is not None else self._slot(result, at)
        operand = self._buffer(source if source is not None else op.operands[0])
        self._dispatch(op, shader, [out], [operand], params)

    def _library(self, op: LibraryOp, at: int) -> None:
        name = op.kernel_name
        p = op.params
        if name == "slice":
            args = ", ".join(self._param_py(p[k]) for k in ("starts", "counts", "steps"))
            self._copy(op, at, f"_p_slice({self._shape_of(op.operands[0])}, {args})")
            return
        if name == "split":
            whole = op.operands[0]
            at_axis: Poly | int = 0
            for r in op.results:
                piece = self._shape_of(r)
                params = f"_p_place({piece}, {self._shape_of(whole)}, {p['axis']}, {self._param_py(at_axis)}, False)"
                self._copy(op, at, params, result=r, source=whole)
                at_axis = Poly.lift(at_axis) + _axes_type(r, "split piece").shape[int(p["axis"])]  # type: ignore[arg-type]
            return
        if name == "concat":
            out = self._slot(op.results[0], at)
            at_axis = 0
            axis = int(p["axis"])  # type: ignore[arg-type]
            for v in op.operands:
                params = (
                    f"_p_place({self._shape_of(v)}, {self._shape_of(op.results[0])}, {axis}, "
                    f"{self._param_py(at_axis)}, True)"
                )
                self._copy(op, at, params, into=out, source=v)
                at_axis = Poly.lift(at_axis) + _axes_type(v, "concat operand").shape[axis]  # type: ignore[assignment]
            return
        if name == "tile_program":
            assert isinstance(op, TileProgramOp)
            operands = [_axes_type(v, "operand").elem.name for v in op.operands]
            results = [_axes_type(r, "result").elem.name for r in op.results]
            source = tile.source_tile(op.program.data, operands, results)
            self.gpu_pieces.add("_p_tile_program")
            numbers = self._param_py(tuple(p["numbers"]))  # type: ignore[arg-type]
            outs = [self._slot(r, at) for r in op.results]
            params = f"_p_tile_program({self._param_py(p['grid'])}, {numbers})"
            self._dispatch(op, self._shader(source, "tile"), outs, [self._buffer(v) for v in op.operands], params)
            return
        if name == "range":
            t = _axes_type(op.results[0], "kernel.range")
            _check_types(op, [t])
            self.gpu_pieces.add("_p_range")
            args = ", ".join(self._param_py(p[k]) for k in ("start", "limit", "delta"))
            out = self._slot(op.results[0], at)
            shader = self._shader(movement.source_range(t.elem.name), "range")
            self._dispatch(op, shader, [out], [], f"_p_range({args})")
            return
        if any(_axes_type(v, "operand").elem.name == "i64" for v in [*op.operands, *op.results]) and (
            name in ("cumsum", "einsum") or (name == "reduce" and p["kind"] not in ("max", "min"))
            or (name == "scatter_elements" and p.get("reduction", "none") in ("add", "mul"))
        ):  # fmt: skip
            raise UnsupportedError(
                f"{op.name} '{op.node.data}': sums and products of i64 run in i32 on the device and could leave "
                "its range, where numpy's i64 keeps the value; the WGSL backend runs no i64 arithmetic it cannot bound"
            )
        source_fn = _library_sources().get(name)
        if source_fn is None:
            raise UnsupportedError(f"the WGSL backend has no kernel for {op.name} (node '{op.node.data}')")
        operands = [_axes_type(v, "operand") for v in op.operands]
        results = [_axes_type(r, "result") for r in op.results]
        _check_types(op, [*operands, *results])
        static = {k: (None if _is_runtime(v) else v) for k, v in p.items()}
        try:
            source = source_fn(  # type: ignore[operator]
                [(t.elem.name, t.rank) for t in operands], [(t.elem.name, t.rank) for t in results], **static
            )
        except UnsupportedError as e:
            raise UnsupportedError(f"{op.name} '{op.node.data}': {e}") from None
        self.gpu_pieces.add(f"_p_{name}")
        shapes = ", ".join(self._shape_py(t) for t in [*operands, *results])
        kwargs = "".join(f", {k}={self._param_py(v)}" for k, v in p.items())
        params = f"_p_{name}(({shapes},){kwargs})"
        outs = [self._slot(r, at) for r in op.results]
        self._dispatch(op, self._shader(source, name), outs, [self._buffer(v) for v in op.operands], params)

    def summary(self) -> DeviceSummary:
        """Dispatches, crossing bytes and device bytes per forward (after `emit`)."""
        crossing = Poly.lift(0)
        for value in [*self.program.block.args, *self.program.return_op.outputs]:
            if value in self.host_values:
                continue
            size = Poly.lift(4)
            for e in _axes_type(value, "boundary value").shape:
                size = size * e
            crossing = crossing + size
        resident = 0
        for op in self.ops:
            if isinstance(op, (WeightOp, ConstantOp)) and op.result in self.device and "_w[" in self.device[op.result]:
                t = _axes_type(op.result, "resident")
                count = math.prod(e.const_value if e.is_const else 0 for e in t.shape)
                resident += 4 * count
        return DeviceSummary(
            self.dispatches, str(crossing), str(device_bytes(self.slot_sizes)), str(resident), tuple(self.host_nodes)
        )

    # -- forward --------------------------------------------------------------------------------------

    def _forward_source(self, params, checks, body, ret, out_fields) -> str:  # type: ignore[no-untyped-def]
        checks = [*checks, *self.sizing]
        return super()._forward_source(params, checks, body, ret, out_fields)


def _node(op: Operation) -> str:
    node = op.properties.get("node")
    return getattr(node, "data", "")


def _reason(message: str) -> str:
    """A refusal's message without the node it names (the report names the node already)."""
    head, sep, tail = message.partition("': ")
    return tail if sep and head.startswith("kernel.") else message


def _is_runtime(value: object) -> bool:
    if isinstance(value, Poly):
        return not value.is_const
    if isinstance(value, tuple):
        return any(_is_runtime(v) for v in value)
    return False


def _host_dtype(t: AxesTensorType) -> str:
    return {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "bool": "bool", "i64": "int64", "i32": "int32",
            "i16": "int16", "i8": "int8", "ui8": "uint8", "ui16": "uint16"}.get(t.elem.name, t.elem.name)  # fmt: skip


def _check_types(op: Operation, types: Iterable[AxesTensorType]) -> None:
    for t in types:
        try:
            wgsl_common.device_type(t.elem.name)
        except ValueError as e:
            raise UnsupportedError(f"{op.name} '{_node(op)}': {e}") from None


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
