"""Print a `kernel.program` as one readable Python module that imports only numpy and the standard library.

`emit_python(module)` returns the module's source (`numpy_module` also the weights file written
beside it, where the graph carries more weights than a source should hold): the structure every module shares
(`loam.backends.module_printer`: markers, `Weights`, `Outputs`, forward's prologue, If blocks) with
forward's lines printed by the numpy kernel printer (`loam.backends.numpy_kernel_printer`: one
function per distinct `Expr`, library kernels as calls of their runtime pieces), and forward's
large intermediates kept in a pool of preallocated buffers between calls (`numpy_buffers`).  A half
weight that forward computes with in f32 (a matmul's cast, an expression's widening, a kernel in
`numpy_runtime.WIDENED_OPERANDS`) is read from a float32 twin `Weights` prepares once.  Every kernel that
only the weights determine (a transposed or regrouped weight, a sum of biases: `loam.passes.weight_only`) is
computed once by `_prepare`, which `Weights.__init__` calls, and forward reads its result as an
attribute of `weights`.

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
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from loam.backends.module_blocks import Scope
from loam.backends.module_classes import prepare_source
from loam.backends.module_printer import ModulePrinter
from loam.backends.module_text import (
    CHECKPOINT_FORMATS,
    axes_type,
    checkpoint_formats,
    checkpoint_names,
    dtype_source,
    node_label,
    numpy_dtype,
    row_orders,
    tuple_py,
    tuple_source,
    weights_beside,
)
from loam.backends.numpy_buffers import broadcast_afterwards, plan_buffers
from loam.backends.numpy_kernel_printer import NumpyKernelPrinter, expr_dtype, fewer_than
from loam.backends.numpy_tile import tile_function
from loam.backends.print_main import print_module
from loam.core.errors import UnsupportedError
from loam.core.limits import MAX_ELEMENTS
from loam.core.poly import Poly
from loam.dialects.kernel import ConstantOp, ProgramOp, TileProgramOp, WeightOp, ZipOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.frontends.external_data import external_table
from loam.passes.weight_only import kept_results, weight_only

__all__ = ["emit_python", "numpy_module"]

# A preallocated buffer is worth its bookkeeping from this many elements on (or for a symbolic extent).
_SLOT_MIN = 16384

# The most elements a weight broadcast once to its reader's extents may take (`broadcast_at_load`).
_BROADCAST_MAX = 16384


def emit_python(module: ModuleOp) -> str:
    """The Python source of the one `kernel.program` in `module`.

    The module attribute `loam.checkpoint_names` (an array of [pattern, template] string pairs, the
    `[checkpoint_names]` rules), where present, becomes `Weights._CHECKPOINT_NAMES`: `Weights.load`
    renames each checkpoint tensor by the first matching rule before checking it against the graph.

    Raises `UnsupportedError` for IR the numpy backend does not print (a type without named axes,
    an element type plain numpy lacks, an extent no input binds) and `AxisError` for an axis
    whose marker class would take a name the module declares.
    """
    return numpy_module(module, beside=False)[0]


def numpy_module(module: ModuleOp, beside: bool = True) -> tuple[str, bytes | None]:
    """`emit_python`'s source, and the safetensors file to write beside it: with `beside`, the weights
    the graph carries go there once past the module attribute `loam.weights_beside`'s byte count
    (`loam.weights_beside`); None when the source carries them all."""
    programs = [op for op in module.walk() if isinstance(op, ProgramOp)]
    if len(programs) != 1:
        raise UnsupportedError(f"the numpy backend prints one kernel.program, found {len(programs)}")
    printer = NumpyModulePrinter(
        programs[0],
        checkpoint_names(module),
        row_orders(module),
        checkpoint_formats(module),
        weights_beside(module) if beside else None,
    )
    printer.external = external_table(module)
    return printer.emit(), printer.weights_file


class NumpyModulePrinter(ModulePrinter):
    """A module whose forward computes every kernel with numpy."""

    def __init__(
        self,
        program: ProgramOp,
        checkpoint_names: tuple[tuple[str, str], ...] = (),
        row_orders: tuple[tuple[str, int], ...] = (),
        formats: tuple[str, ...] = CHECKPOINT_FORMATS,
        beside_limit: int | None = None,
    ) -> None:
        super().__init__(program, checkpoint_names, row_orders, formats, beside_limit)
        self.kernels = NumpyKernelPrinter(self)
        # Each tile program's numpy function (`loam.backends.numpy_tile`), and their sources.
        self.tile_functions: dict[object, str] = {}
        self.tile_sources: list[str] = []
        # The kernels only the weights determine (`loam.passes.weight_only`), printed into `_prepare`, and the
        # results of theirs that forward reads (Weights attributes; the others are `_prepare`'s locals).
        self.at_load: set[Operation] = set()
        self.kept: set[SSAValue] = set()
        # Every value only the weights determine, and the full-extent copies made of them (`broadcast_at_load`).
        self.fixed: set[SSAValue] = set()
        self.broadcasts: dict[tuple[SSAValue, tuple[Poly, ...]], str] = {}

    def collect_op(self, op: Operation) -> None:
        """The lines computing one op of a block (none for weights and numeric constants)."""
        scope = self.scope
        assert scope is not None
        if isinstance(op, WeightOp):
            self.collect_weight(op)
        elif isinstance(op, ConstantOp):
            self.collect_constant(op)
        elif isinstance(op, TileProgramOp):
            self._tile_line(op)
        elif op in self.at_load:
            self.load_lines += self.kernels.lines(op, self._load_ident)
        else:
            scope.items += self.kernels.lines(op, self.result_ident)

    def broadcast_at_load(self, op: Operation, value: SSAValue, result: AxesTensorType) -> str | None:
        """A weight-only operand of a forward kernel, broadcast once to the kernel's extents where those are
        small and fixed: numpy adds two arrays of the same extents three times as fast as it adds a row
        repeated over them (a bias over [256, 16]: 0.5 us against 1.8), and the copy costs at most
        `_BROADCAST_MAX` elements of memory."""
        if op in self.at_load or value not in self.fixed or not fewer_than(result.shape, _BROADCAST_MAX + 1):
            return None
        key = (value, result.shape)
        if key not in self.broadcasts:
            ident = self.names.mint(f"{self.bare_name(value)}_broadcast")
            shape = tuple_py([p.const_value for p in result.shape])
            self.load_lines.append(
                f"weights.{ident} = np.ascontiguousarray(np.broadcast_to({self.value_text[value]}, {shape}))"
                f"  # {node_label(op)}: read at its reader's extents"
            )
            self.load_slots[ident] = "a weight broadcast to the extents of the kernel reading it, made once"
            self.broadcasts[key] = f"weights.{ident}"
        return self.broadcasts[key]

    def _load_ident(self, op: Operation, result: SSAValue) -> str:
        """Where `_prepare` puts a result: an attribute of `weights` if forward reads it, else a local."""
        node_name = node_label(op)
        if result.name_hint and not result.name_hint.isdigit() and result.name_hint != node_name:
            ident = self.names.mint(result.name_hint)
        else:  # named after the weight it computes from: `bn1_scale_regroup`, `fc1_weight_permute`
            ident = self.names.mint(self.derived_name(op))
        if result not in self.kept:
            return self.named(result, ident)
        self.load_slots[ident] = f"{op.name} of node '{node_name}', computed once from the weights"
        return self.named(result, f"weights.{ident}")

    def declarations(self) -> list[str]:
        """`_prepare`, the expression functions, the tile programs' functions and the buffer pool."""
        parts = [*self.kernels.declarations(), *self.tile_sources]
        if self.load_lines:
            parts.insert(0, prepare_source(self.load_lines, list(self.load_slots)))
        if self.kernels.buffers.slots:
            parts.append(
                "# forward's preallocated intermediates, by the extents they read (see _keep)\n"
                "_POOL: dict[tuple[int, ...], tuple[np.ndarray, ...]] = {}\n"
            )
        return parts

    def finish_block(self, scope: Scope) -> None:
        if self.kernels.buffers.slots:
            scope.items.append("_keep(_POOL, _key, _buf)  # the buffers serve the next call with these extents")

    def _tile_line(self, op: TileProgramOp) -> None:
        """A tile program: its numpy function (declared once per program) into a new result array."""
        scope = self.scope
        assert scope is not None
        program = op.program.data
        name = self.tile_functions.get(program)
        if name is None:
            name = self.names.mint(f"_tile_{len(self.tile_functions)}")
            self.tile_functions[program] = name
            self.tile_sources.append(tile_function(name, program)[0])
            self.pieces.update(tile_function(name, program)[1])
        idents = [self.result_ident(op, r) for r in op.results]
        for ident, r in zip(idents, op.results, strict=True):
            t = axes_type(r, "kernel.tile_program result")
            dtype = dtype_source(numpy_dtype(t, f"kernel.tile_program '{op.node.data}'"))
            scope.items.append(f"{ident} = np.empty({self.shape_py(t)}, {dtype})  # {op.node.data}")
        args = ", ".join([*(self.value_text[v] for v in op.operands), *idents])
        grid, numbers = self.param_py(op.param("grid")), self.param_py(tuple(op.param("numbers")))
        scope.items.append(f"{name}({grid}, {numbers}, {args})  # {op.node.data}: a tile program")

    def plan_buffers(self, ops: Sequence[Operation]) -> None:
        """Plan the top-level block's buffers and open forward's body with the preallocated ones.

        A slot whose extents read the length an If's result has is dropped (known only after the If)."""
        broadcast = {op for op in ops if isinstance(op, ZipOp) and broadcast_afterwards(op)}
        at_load, self.fixed = weight_only(ops, self.returned)
        self.at_load, self.kept = set(at_load), kept_results(at_load)
        plan = plan_buffers([op for op in ops if op not in self.at_load], broadcast)
        late = {s for s, (shape, _) in enumerate(plan.slots)
                if self.reads_result_symbol({n for p in shape for n in p.symbols})}  # fmt: skip
        # numpy's allocator serves a small array faster than the pool's bookkeeping would.
        small = {s for s, (shape, _) in enumerate(plan.slots)
                 if all(p.is_const for p in shape) and math.prod(p.const_value for p in shape) < _SLOT_MIN}  # fmt: skip
        used = sorted({s for s in plan.slot_of.values() if s not in late | small})
        renumber = {old: new for new, old in enumerate(used)}
        plan.slot_of = {v: renumber[s] for v, s in plan.slot_of.items() if s in renumber}
        plan.slots = [plan.slots[s] for s in used]
        self.kernels.buffers = plan
        if not plan.slots:
            return
        arrays, arrays_shapes = [], []
        for shape, elem in plan.slots:
            text = tuple_source([self.poly_py(p) for p in shape])
            arrays_shapes.append(text)
            arrays.append(f"np.empty({text}, {dtype_source(expr_dtype(elem))})")
        symbols = self.input_symbols_of([p for shape, _ in plan.slots for p in shape])
        key = tuple_source([f"_env[{n!r}]" for n in symbols])
        self.pieces.add("_keep")
        scope = self.scope
        assert scope is not None
        scope.items.append(f"_key = {key}  # the extents the preallocated buffers read")
        scope.items.append("_buf = _POOL.pop(_key, None)")
        scope.items.append("if _buf is None:  # the first call with these extents (or another thread holds them)")
        if symbols:  # extents the inputs give: none may make a buffer past the machine
            self.pieces.add("_room")
            shapes = tuple_source(arrays_shapes)
            scope.items.append(f"    _room({shapes}, {tuple_py(symbols)}, _env, _src, {MAX_ELEMENTS})")
        scope.items.append(f"    _buf = ({', '.join(arrays)},)")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m loam.backends.numpy_module FILE.mlir`: print the module for FILE's program."""
    return print_module(argv, emit_python, "loam.backends.numpy_module")


if __name__ == "__main__":
    raise SystemExit(main())
