"""The WGSL backend's kernel printer: the compute shader and the dispatch computing each kernel op.

One method per kernel op (`WgslKernelPrinter.PRINTERS`, and `LIBRARY` for the library kernels the
printer spells itself): a product is a matmul shader (a permutation only products read folded into
its strides), a zip and a cast are one elementwise shader per distinct `Expr`, a permutation, slice,
split and concat are strided copies, a range is generated, and every other library kernel is the
shader its WGSL family writes (`wgsl_kernels.*.SOURCES`), its parameters computed on the host from
the bound extents by the kernel's `_p_NAME` piece.

Printing an op is two steps, so that a kernel with no WGSL form costs nothing to refuse: `prepare`
checks the element types and writes every shader the op needs, printing nothing (UnsupportedError
naming the node when there is no WGSL form; `elementwise.UnboundedI64` for i64 arithmetic the
device's i32 could wrap), and returns the function that takes the buffers and records the
dispatches.  The module printer (`loam.backends.wgsl_module`) runs that function, or, when `prepare`
refused, prints the kernel on the host with the numpy kernel printer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING

from xdsl.ir import Operation, SSAValue

from loam.backends.module_text import axes_type
from loam.backends.wgsl_kernels import common as wgsl_common
from loam.backends.wgsl_kernels import elementwise, matmul, movement, tile
from loam.core.errors import UnsupportedError
from loam.core.poly import Poly
from loam.dialects.build_contract import PACKED, STORED
from loam.dialects.expr import Expr
from loam.dialects.kernel import CastOp, LibraryOp, MatmulOp, PermuteOp, TileProgramOp, WeightOp, ZipOp
from loam.dialects.tensor_axes import AxesTensorType

if TYPE_CHECKING:
    from loam.backends.wgsl_module import WgslModulePrinter

Dispatches = Callable[[int], None]
"""Records an op's dispatches (given the op's index in the program, for buffer lifetimes)."""

LIBRARY_FAMILIES = ("normalization", "reduce", "indexing", "conv", "shape", "recurrent", "packed", "losses", "narrow")
"""The WGSL kernel families with library kernels (`SOURCES`, the shader of each kernel by name)."""


def library_families() -> list[ModuleType]:
    """The kernel families with library kernels, those that exist."""
    import importlib

    return [importlib.import_module(f"loam.backends.wgsl_kernels.{name}") for name in LIBRARY_FAMILIES]


def kernel_pieces() -> dict[str, Callable[..., object]]:
    """Every piece (a host function) the WGSL kernels' dispatches call, by name."""
    pieces: dict[str, Callable[..., object]] = {}
    for family in (elementwise, matmul, movement, tile, *library_families()):
        pieces.update(family.PIECES)
    return pieces


def library_sources() -> dict[str, Callable[..., str]]:
    """The shader-writing function of each library kernel, by kernel name."""
    sources: dict[str, Callable[..., str]] = {}
    for family in library_families():
        sources.update(getattr(family, "SOURCES", {}))
    return sources


def library_stepped() -> frozenset[str]:
    """The library kernels dispatched once per step: their `_p_NAME` gives the list of (params,
    workgroups) to record in order (a family's `STEPPED`)."""
    stepped: set[str] = set()
    for family in library_families():
        stepped.update(getattr(family, "STEPPED", ()))
    return frozenset(stepped)


class WgslKernelPrinter:
    """Prints kernel ops as dispatches of one WGSL module (`module`)."""

    def __init__(self, module: WgslModulePrinter) -> None:
        self.m = module
        self.library_sources = library_sources()
        self.stepped = library_stepped()
        self.printers: dict[type[Operation], Callable[[Operation], Dispatches]] = {
            MatmulOp: self.matmul,  # type: ignore[dict-item]  # called with ops of its key's type only
            ZipOp: self.zip,  # type: ignore[dict-item]  # called with ops of its key's type only
            CastOp: self.cast,  # type: ignore[dict-item]  # called with ops of its key's type only
            PermuteOp: self.permute,  # type: ignore[dict-item]  # called with ops of its key's type only
        }
        self.library: dict[str, Callable[[LibraryOp], Dispatches]] = {
            "slice": self.slice,
            "split": self.split,
            "concat": self.concat,
            "tile_program": self.tile_program,
            "range": self.range,
            "matmul_packed": self.packed,
            "gather_packed": self.packed,
        }

    def prepare(self, op: Operation) -> Dispatches:
        """Check `op` has a WGSL form and write its shaders; return what records its dispatches."""
        printer = self.printers.get(type(op))
        if printer is not None:
            return printer(op)
        if isinstance(op, LibraryOp):
            return self.library.get(op.kernel_name, self.library_kernel)(op)
        raise UnsupportedError(f"the WGSL backend has no kernel for {op.name} (node '{node_of(op)}')")

    # -- helpers ------------------------------------------------------------------------------------

    def shape_of(self, value: SSAValue) -> str:
        return self.m.shape_py(axes_type(value, "operand"))

    def _dispatch(self, op: Operation, source: str, hint: str, outs: list[str], ins: list[str], params: str) -> None:
        self.m.dispatch(op, self.m.shader(source, hint), outs, ins, params)

    # -- the kernels ---------------------------------------------------------------------------------

    def matmul(self, op: MatmulOp) -> Dispatches:
        result = axes_type(op.result, "kernel.matmul")
        extras = [axes_type(v, "epilogue operand") for v in op.extras]
        a_type, b_type = (axes_type(v, "matmul operand") for v in (op.lhs, op.rhs))
        check_types(op, [a_type, b_type, result, *extras])
        batch_rank = result.rank - (a_type.rank > 1) - (b_type.rank > 1)
        epilogue = op.epilogue.data if op.epilogue is not None else None
        source = matmul.source_matmul(
            a_type.elem.name, batch_rank, (result.shape, result.elem.name), epilogue,
            [(t.shape, t.elem.name) for t in extras],
        )  # fmt: skip

        def dispatches(at: int) -> None:
            sides = []
            for value in (op.lhs, op.rhs):
                if value in self.m.folded:
                    source_value, perm = self.m.folded[value]
                    strides = f"tuple(_row_major({self.shape_of(source_value)})[p] for p in {perm!r})"
                else:
                    strides = f"_row_major({self.shape_of(value)})"
                self.m.gpu_pieces.add("_row_major")
                sides.append((self.shape_of(value), strides))
            strided = [j for j, t in enumerate(extras) if t.shape != result.shape]
            strided_shapes = "".join(self.m.shape_py(extras[j]) + ", " for j in strided)
            self.m.gpu_pieces.add("_p_matmul")
            params = (
                f"_p_matmul({sides[0][0]}, {sides[1][0]}, {sides[0][1]}, {sides[1][1]}, {self.m.shape_py(result)}, "
                f"({strided_shapes}))"
            )
            out = self.m.slot(op.result, at)
            ins = [self.m.buffer(op.lhs), self.m.buffer(op.rhs), *(self.m.buffer(v) for v in op.extras)]
            self._dispatch(op, source, "matmul", [out], ins, params)

        return dispatches

    def zip(self, op: ZipOp) -> Dispatches:
        # Only the operands the Expr reads are bound: the pipeline's layout has no binding for an
        # unread one, and the kernel writes every element of the result's extents either way.
        read = op.expr.data.operand_indices
        kept = [i for i in range(len(op.inputs)) if i in read]
        expr = op.expr.data.remap_operands({old: new for new, old in enumerate(kept)})
        return self._elementwise(op, expr, [op.inputs[i] for i in kept])

    def cast(self, op: CastOp) -> Dispatches:
        elem = axes_type(op.result, "kernel.cast").elem.name
        return self._elementwise(op, Expr.operand(0).cast(elem), [op.operands[0]])

    def _elementwise(self, op: Operation, expr: Expr, values: list[SSAValue]) -> Dispatches:
        types = [axes_type(v, "kernel.zip operand") for v in values]
        result = axes_type(op.results[0], op.name)
        shapes = [t.shape for t in types]
        check_types(op, [*types, result])
        try:
            elems = [t.elem.name for t in types]
            source = elementwise.source_zip(expr, shapes, elems, (result.shape, result.elem.name))
        except elementwise.UnboundedI64:
            raise  # the module computes it on the host
        except UnsupportedError as e:
            raise UnsupportedError(f"{op.name} '{node_of(op)}': {e}") from None
        strided = elementwise.strided_operands(shapes, result.shape)

        def dispatches(at: int) -> None:
            self.m.gpu_pieces.add("_p_zip")
            operand_shapes = "".join(self.shape_of(values[j]) + ", " for j in strided)
            params = f"_p_zip({self.m.shape_py(result)}, ({operand_shapes}))"
            out = self.m.slot(op.results[0], at)
            self._dispatch(op, source, "zip", [out], [self.m.buffer(v) for v in values], params)

        return dispatches

    def _copy(self, op: Operation, rank: int, result: SSAValue | None = None) -> Callable[..., None]:
        """A strided copy of rank `rank`: checked now; the returned function records one copy
        (`params`, into a new slot for `result` or into the buffer `into`, from `source`)."""
        t = axes_type(result if result is not None else op.results[0], "copy result")
        check_types(op, [t])
        source_text = movement.source_copy(t.elem.name, rank)

        def copy(at: int, params: str, result: SSAValue | None = None, into: str | None = None,
                 source: SSAValue | None = None) -> None:  # fmt: skip
            result = result if result is not None else op.results[0]
            self.m.gpu_pieces.add(params.split("(", 1)[0])
            out = into if into is not None else self.m.slot(result, at)
            operand = self.m.buffer(source if source is not None else op.operands[0])
            self._dispatch(op, source_text, "copy", [out], [operand], params)

        return copy

    def permute(self, op: PermuteOp) -> Dispatches:
        copy = self._copy(op, axes_type(op.result, "kernel.permute").rank)
        return lambda at: copy(at, f"_p_permute({self.shape_of(op.operands[0])}, {tuple(op.permutation)!r})")

    def slice(self, op: LibraryOp) -> Dispatches:
        copy = self._copy(op, axes_type(op.results[0], "kernel.slice").rank)
        p = op.params

        def dispatches(at: int) -> None:
            args = ", ".join(self.m.param_py(p[k]) for k in ("starts", "counts", "steps"))
            copy(at, f"_p_slice({self.shape_of(op.operands[0])}, {args})")

        return dispatches

    def split(self, op: LibraryOp) -> Dispatches:
        whole = op.operands[0]
        copies = [self._copy(op, axes_type(whole, "kernel.split operand").rank, r) for r in op.results]
        axis = int(op.param("axis"))

        def dispatches(at: int) -> None:
            at_axis: Poly | int = 0
            for copy, r in zip(copies, op.results, strict=True):
                params = (
                    f"_p_place({self.shape_of(r)}, {self.shape_of(whole)}, {axis}, {self.m.param_py(at_axis)}, False)"
                )
                copy(at, params, result=r, source=whole)
                at_axis = Poly.lift(at_axis) + axes_type(r, "split piece").shape[axis]

        return dispatches

    def concat(self, op: LibraryOp) -> Dispatches:
        whole = op.results[0]
        copy = self._copy(op, axes_type(whole, "kernel.concat").rank)
        axis = int(op.param("axis"))

        def dispatches(at: int) -> None:
            out = self.m.slot(whole, at)
            at_axis: Poly | int = 0
            for v in op.operands:
                params = (
                    f"_p_place({self.shape_of(v)}, {self.shape_of(whole)}, {axis}, {self.m.param_py(at_axis)}, True)"
                )
                copy(at, params, into=out, source=v)
                at_axis = Poly.lift(at_axis) + axes_type(v, "concat operand").shape[axis]

        return dispatches

    def tile_program(self, op: LibraryOp) -> Dispatches:
        assert isinstance(op, TileProgramOp)
        operands = [axes_type(v, "operand").elem.name for v in op.operands]
        results = [axes_type(r, "result").elem.name for r in op.results]
        source = tile.source_tile(op.program.data, operands, results)
        p = op.params

        def dispatches(at: int) -> None:
            self.m.gpu_pieces.add("_p_tile_program")
            numbers = self.m.param_py(tuple(op.param("numbers")))
            outs = [self.m.slot(r, at) for r in op.results]
            params = f"_p_tile_program({self.m.param_py(p['grid'])}, {numbers})"
            self._dispatch(op, source, "tile", outs, [self.m.buffer(v) for v in op.operands], params)

        return dispatches

    def range(self, op: LibraryOp) -> Dispatches:
        t = axes_type(op.results[0], "kernel.range")
        check_types(op, [t])
        source = movement.source_range(t.elem.name)
        p = op.params

        def dispatches(at: int) -> None:
            self.m.gpu_pieces.add("_p_range")
            args = ", ".join(self.m.param_py(p[k]) for k in ("start", "limit", "delta"))
            self._dispatch(op, source, "range", [self.m.slot(op.results[0], at)], [], f"_p_range({args})")

        return dispatches

    def packed(self, op: LibraryOp) -> Dispatches:
        """A product or gather over a weight uploaded as its ggml blocks: the library kernel, told the
        blocks' encoding (the weight's `stored`).  The shader multiplies in float32 whatever `int8` says
        (the numpy kernel's integer products are not ported; pack-quantized's build note says so)."""
        weight = op.operands[1 if op.kernel_name == "matmul_packed" else 0].owner
        stored = STORED.get(weight) if isinstance(weight, WeightOp) and PACKED.is_on(weight) else None
        if stored is None:
            raise UnsupportedError(f"{op.name} '{node_of(op)}': its weight is not one kept in ggml blocks")
        return self.library_kernel(op, {"encoding": stored}, omit=("int8",))

    def library_kernel(
        self, op: LibraryOp, extra: dict[str, object] | None = None, omit: tuple[str, ...] = ()
    ) -> Dispatches:
        """A kernel its WGSL family writes the shader of, its params computed by `_p_NAME` (from the op's
        params but `omit`, and `extra`)."""
        name = op.kernel_name
        p = {**{k: v for k, v in op.params.items() if k not in omit}, **(extra or {})}
        # The values a kernel sums or multiplies (a scatter's indices are not among them).
        summed = [op.operands[0], op.operands[2]] if name == "scatter_elements" else [*op.operands, *op.results]
        if any(axes_type(v, "operand").elem.name == "i64" for v in summed) and (
            name in ("cumsum", "cumprod", "einsum") or (name == "reduce" and p["kind"] not in ("max", "min"))
            or (name == "scatter_elements" and p.get("reduction", "none") in ("add", "mul"))
        ):  # fmt: skip
            raise UnsupportedError(
                f"{op.name} '{op.node.data}': sums and products of i64 run in i32 on the device and could leave "
                "its range, where numpy's i64 keeps the value; the WGSL backend runs no i64 arithmetic it cannot bound"
            )
        source_fn = self.library_sources.get(name)
        if source_fn is None:
            raise UnsupportedError(f"the WGSL backend has no kernel for {op.name} (node '{op.node.data}')")
        operands = [axes_type(v, "operand") for v in op.operands]
        results = [axes_type(r, "result") for r in op.results]
        check_types(op, [*operands, *results])
        static = {k: (None if is_runtime(v) else v) for k, v in p.items()}
        try:
            source = source_fn(
                [(t.elem.name, t.rank) for t in operands], [(t.elem.name, t.rank) for t in results], **static
            )
        except UnsupportedError as e:
            raise UnsupportedError(f"{op.name} '{op.node.data}': {e}") from None

        def dispatches(at: int) -> None:
            self.m.gpu_pieces.add(f"_p_{name}")
            shapes = ", ".join(self.m.shape_py(t) for t in [*operands, *results])
            kwargs = "".join(f", {k}={self.m.param_py(v)}" for k, v in p.items())
            outs = [self.m.slot(r, at) for r in op.results]
            ins = [self.m.buffer(v) for v in op.operands]
            shader = self.m.shader(source, name)
            self.m.dispatch(op, shader, outs, ins, f"_p_{name}(({shapes},){kwargs})", stepped=name in self.stepped)

        return dispatches


def node_of(op: Operation) -> str:
    """The ONNX node an op computes ('' where it names none)."""
    node = op.properties.get("node")
    return getattr(node, "data", "")


def is_runtime(value: object) -> bool:
    """Whether a kernel parameter holds an extent only the run knows."""
    if isinstance(value, Poly):
        return not value.is_const
    if isinstance(value, tuple):
        return any(is_runtime(v) for v in value)
    return False


def check_types(op: Operation, types: Iterable[AxesTensorType]) -> None:
    """UnsupportedError naming `op`'s node where an element type has no device form."""
    for t in types:
        try:
            wgsl_common.device_type(t.elem.name)
        except ValueError as e:
            raise UnsupportedError(f"{op.name} '{node_of(op)}': {e}") from None
