"""The StableHLO reader: the text JAX prints, as a `graph`-dialect model with ONNX's meaning.

    module = read_stablehlo("model.mlir")            # builtin.module { graph.model {...} }
    module = import_stablehlo(text, source="model.mlir")

It reads what `jax.jit(f).lower(...).as_text()` and `jax.export(...).mlir_module()` print, in the
custom or the generic op form, with or without debug locations.  The text is parsed with xDSL into
the `stablehlo` input dialect (`loam.dialects.stablehlo`), the public `@main` is followed through
its `func.call`s (inlined), and each op becomes ONNX nodes (`loam.frontends.stablehlo_ops`), so
stage 0, axis naming, lowering and both backends never know which front end read the model.

Arguments.  JAX names each argument in its location with the argument's key path:
`loc("x")`, `loc("params['fc1.weight']")` (`as_text(debug_info=True)` and `jax.export` print them;
an exported `@main` forwards its arguments to a function that carries them).  An argument under a
top-level argument named `params` is a weight: a graph initializer without data, named by its
path below `params` with dots (`fc1.weight`, `layer.0.w`), which a checkpoint supplies by that
name.  Every other argument is a graph input named by its path (`x`, `batch.tokens`).  Without
locations the arguments are inputs `arg0`, `arg1`, ...  Results take `jax.result_info`'s path
(`result`, `result.0`).  Constants become `Constant` nodes when they are one repeated element, and
embedded weights (initializers carrying their data) otherwise.

Symbolic dims.  `jax.export` with a symbolic shape (`b, 784`) prints `tensor<?x784xf32>` and passes
each dimension variable to the function it wraps as an argument `{jax.global_constant = "b"}`
computed by `stablehlo.get_dimension_size` of an input; that names the input's axis `b`, a symbol
of the shape algebra like an ONNX dim_param.  A `?` the text names nowhere gets the name
`INPUT_dimAXIS`, and the graph's doc string says so.

Errors.  Malformed text, an op outside `loam.dialects.stablehlo`, an operand of the wrong type and
an op Loam cannot express stop the reader with a `ModelError`/`UnsupportedError` that starts with
`FILE:LINE:COL` and names the op (and the JAX source line its location gives).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    Builtin,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    NameLoc,
    StringAttr,
    i64,
)
from xdsl.dialects.func import CallOp, Func, FuncOp
from xdsl.dialects.func import ReturnOp as FuncReturnOp
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, Region, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from loam.core.dtypes import ElementType
from loam.core.errors import ModelError, UnsupportedError
from loam.dialects import stablehlo as hlo
from loam.dialects.graph import GraphOp, InitializerOp, ModelOp, NodeOp, ReturnOp, TensorType, set_name_hint
from loam.frontends.context import PARSE_FAILURES, check_lexable, parse_failure
from loam.frontends.stablehlo_broadcast import full
from loam.frontends.stablehlo_builder import GraphBuilder, LoweringError, Operand, shape_and_element, shape_of
from loam.frontends.stablehlo_control import lower_control
from loam.frontends.stablehlo_ops import lower_op
from loam.frontends.stablehlo_source import LocatedParser, SourceText, UnknownOpError, prepare

__all__ = ["OPSET", "PARAMS", "import_stablehlo", "mlir_kind", "read_stablehlo"]

OPSET = 17
"""The ONNX opset the graph's nodes are written in."""

PARAMS = ("params",)
"""Top-level argument names whose leaves are weights (initializers a checkpoint supplies)."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_GENERIC_OP = re.compile(r'"(graph|stablehlo|func)\.(\w+)"\s*\(')  # an op in the generic form: "name"(
_GRAPH_OP = re.compile(r"(?:^|[\s{(=])graph\.\w")
_STABLEHLO_OP = re.compile(r"(?:^|[\s{(=])(?:stablehlo\.\w|func\.func\b)")


def mlir_kind(text: str) -> str | None:
    """What a `.mlir` text holds: "graph" (Loam's graph-dialect IR), "stablehlo", or None (neither).

    Any `graph.*` op makes it Loam IR; else a `stablehlo.*` op or a `func.func` makes it StableHLO."""
    generic = {m.group(1) for m in _GENERIC_OP.finditer(text)}
    code = _STRING.sub('""', text)  # an op name inside a string (a message, a location) is no op
    if "graph" in generic or _GRAPH_OP.search(code):
        return "graph"
    if generic & {"stablehlo", "func"} or _STABLEHLO_OP.search(code):
        return "stablehlo"
    return None


def read_stablehlo(path: str | Path, *, params: Sequence[str] = PARAMS) -> ModuleOp:
    """The graph-dialect module of the StableHLO text at `path`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ModelError(f"{path}: cannot read the file ({err})") from None
    return import_stablehlo(text, str(path), params=params)


def import_stablehlo(text: str, source: str = "<stablehlo>", *, params: Sequence[str] = PARAMS) -> ModuleOp:
    """The graph-dialect module of StableHLO `text`; `source` names the file in error messages."""
    prepared = prepare(text, source)
    check_lexable(prepared.text, source)
    parser: LocatedParser | None = None
    try:
        parser = LocatedParser(_context(), prepared, source)  # lexes the first token: a ParseError may come here
        module = parser.parse_module()
    except UnknownOpError as err:
        line, col = prepared.line_col(err.offset)
        known = ", ".join(sorted(op.name.split(".", 1)[1] for op in hlo.StableHLO.operations))
        chlo = ", ".join(sorted(op.name for op in hlo.CHLO.operations))
        raise UnsupportedError(
            f"{source}:{line}:{col}: '{err.op_name}' is not an op Loam reads (StableHLO ops it reads: {known}; "
            f"and {chlo}, func.func, func.call, func.return)"
        ) from None
    except PARSE_FAILURES as err:
        raise parse_failure(err, prepared.text, source, parser.pos if parser else 0) from None
    return _Reader(module, prepared, parser.offsets, source, tuple(params)).model()


def _context() -> Context:
    ctx = Context()
    for dialect in (Builtin, Func, hlo.StableHLO, hlo.CHLO):
        ctx.load_dialect(dialect)
    return ctx


# --------------------------------------------------------------------------------------------------
# Names


_KEY = re.compile(r"""\['((?:[^'\\]|\\.)*)'\]|\["((?:[^"\\]|\\.)*)"\]|\[(-?\d+)\]|\.([A-Za-z_]\w*)""")


def key_path(label: str) -> list[str]:
    """The parts of a JAX key path: `params['fc1.weight']` is [params, fc1.weight], `x` is [x]."""
    m = re.match(r"[A-Za-z_]\w*", label)
    if m is None:
        return [label]
    parts, pos = [m.group()], m.end()
    while pos < len(label):
        k = _KEY.match(label, pos)
        if k is None:
            return [label]  # not a key path: the label is the name
        parts.append(next(g for g in k.groups() if g is not None))
        pos = k.end()
    return parts


def _identifier(name: str) -> str:
    return re.sub(r"\W", "_", name)


# --------------------------------------------------------------------------------------------------
# The reader


@dataclass(frozen=True)
class _Argument:
    """An argument of `@main` in the graph: an input, or a weight (an initializer without data)."""

    name: str
    type: TensorType
    weight: bool


class _Reader:
    def __init__(
        self,
        module: ModuleOp,
        source_text: SourceText,
        offsets: dict[Operation, int],
        source: str,
        params: tuple[str, ...],
    ) -> None:
        self.module = module
        self.text = source_text
        self.offsets = offsets
        self.source = source
        self.params = params
        self.notes: list[str] = []
        self.verify()  # before anything reads an op's properties: a generic-form op may lack one
        self.funcs: dict[str, FuncOp] = {}
        for op in module.body.block.ops:
            if not isinstance(op, FuncOp):
                raise ModelError(f"{self.where(op)}: a StableHLO module holds func.func ops only")
            self.funcs[op.sym_name.data] = op

    # ---- places

    def where(self, op: Operation, *, with_op: bool = True) -> str:
        """`FILE:LINE:COL: OP (JAX NAME at SOURCE:LINE:COL)`, as far as the text says."""
        offset = self.offsets.get(op)
        place = self.source
        if offset is not None:
            line, col = self.text.line_col(offset)
            place = f"{self.source}:{line}:{col}"
        if with_op:
            place += f": {op.name}"
        loc = self.text.location_of(op)
        return place + (f" ({loc})" if loc is not None and str(loc) else "")

    def verify(self) -> None:
        """Each op's own checks, in text order, reported at the op."""
        for op in self.module.walk():
            if op is self.module:
                continue
            try:
                op.verify(verify_nested_ops=False)
            except DiagnosticException as err:
                message = str(err).strip().splitlines()[0]
                where = self.where(op, with_op=not message.startswith(op.name))
                raise ModelError(f"{where}: {message}") from None

    # ---- the model

    def main(self) -> FuncOp:
        if "main" in self.funcs:
            return self.funcs["main"]
        public = [f for f in self.funcs.values() if f.sym_visibility is None or f.sym_visibility.data == "public"]
        if len(public) != 1:
            raise ModelError(f"{self.source}: no func.func @main (and not exactly one public function)")
        return public[0]

    def model(self) -> ModuleOp:
        main = self.main()
        arguments = self.arguments(main)
        outputs = self.output_names(main)
        builder = GraphBuilder(OPSET, [*(a.name for a in arguments), *outputs])
        block = Block(arg_types=[a.type for a in arguments if not a.weight])
        inputs = iter(block.args)
        weights: list[InitializerOp] = []
        operands: list[Operand] = []
        for arg, argument in zip(main.body.block.args, arguments, strict=True):
            if argument.weight:  # no data: a checkpoint supplies it by name
                weights.append(InitializerOp(argument.name, argument.type))
                value: SSAValue = weights[-1].result
            else:
                value = next(inputs)
            set_name_hint(value, argument.name)
            operands.append(Operand(value, shape_of(arg.type), self.element(main, arg.type, argument.name)))
        results = self.run(main, operands, builder, [])
        taken: set[str] = set()
        returned = [self.output(builder, value, name, taken) for value, name in zip(results, outputs, strict=True)]
        declared = [
            TensorType(self.element(main, t, name), list(shape_of(t)))
            for name, t in zip(outputs, main.function_type.outputs.data, strict=True)
        ]
        block.add_ops(_live([*weights, *builder.ops], ReturnOp(returned, outputs, declared)))
        name = self.module.sym_name.data if self.module.sym_name is not None else "main"
        graph = GraphOp(
            name.removeprefix("jit_"),  # JAX names a module after the jitted function: jit_mlp
            [a.name for a in arguments if not a.weight],
            Region(block),
            " ".join(self.notes) or None,
        )
        props: dict[str, Attribute] = {
            "ir_version": IntegerAttr(8, i64),
            "opset_import": DictionaryAttr({"": IntegerAttr(OPSET, i64)}),
            "producer_name": StringAttr("stablehlo"),
        }
        return ModuleOp([ModelOp(props, Region(Block([graph])))])

    def element(self, func: FuncOp, t: Attribute, name: str) -> ElementType:
        """The element type of an argument or result type (refused, naming it, when Loam has none)."""
        try:
            return shape_and_element(t)[1]
        except LoweringError as err:
            raise UnsupportedError(f"{self.where(func)}: '{name}': {err}") from None

    def arguments(self, main: FuncOp) -> list[_Argument]:
        """Each argument of `main`: its graph name and type, and whether it is a weight."""
        symbols = self.symbols(main)
        found: list[_Argument] = []
        for i, arg in enumerate(main.body.block.args):
            label = self.argument_label(main, i)
            parts = key_path(label) if label else [f"arg{i}"]
            weight = parts[0] in self.params
            name = ".".join(parts[1:] or parts) if weight else ".".join(parts)
            if any(a.name == name for a in found):
                raise ModelError(f"{self.where(main)}: two arguments are both named '{name}'")
            dims: list[int | str | None] = list(shape_of(arg.type))
            for axis, extent in enumerate(dims):
                if extent is None:
                    dims[axis] = symbols.get((i, axis)) or self.unnamed_symbol(name, axis)
            found.append(_Argument(name, TensorType(self.element(main, arg.type, name), dims), weight))
        return found

    def unnamed_symbol(self, name: str, axis: int) -> str:
        symbol = f"{_identifier(name)}_dim{axis}"
        self.notes.append(f"The text names no symbol for axis {axis} of '{name}'; Loam calls it {symbol}.")
        return symbol

    def argument_label(self, func: FuncOp, index: int) -> str | None:
        """The name JAX gave argument `index` in its location, or in the location of the argument it
        is passed to when `func` only forwards it (as an exported `@main` does)."""
        arg = func.body.block.args[index]
        own = self.location_name(arg)
        if own:
            return own
        for use in arg.uses:
            if isinstance(use.operation, CallOp):
                callee = self.callee(use.operation)
                label = self.location_name(callee.body.block.args[use.index])
                if label:
                    return label
        return None

    def location_name(self, arg: BlockArgument) -> str | None:
        loc = getattr(arg, "location", None)
        if isinstance(loc, NameLoc):
            found = self.text.locations.get(loc.desc.data)
            return found.name if found is not None else None
        return None

    def symbols(self, main: FuncOp) -> dict[tuple[int, int], str]:
        """(argument, axis) -> the dimension variable `jax.export` passes for it."""
        found: dict[tuple[int, int], str] = {}
        for op in main.body.block.ops:
            if not isinstance(op, CallOp):
                continue
            callee = self.callee(op)
            attrs = callee.arg_attrs.data if callee.arg_attrs is not None else ()
            for j, operand in enumerate(op.arguments):
                entry = attrs[j].data.get("jax.global_constant") if j < len(attrs) else None
                if not isinstance(entry, StringAttr):
                    continue
                source = operand.owner
                while isinstance(source, hlo.ConvertOp):
                    source = source.args[0].owner
                if isinstance(source, hlo.GetDimensionSizeOp) and isinstance(source.operand, BlockArgument):
                    if source.operand.owner is main.body.block:
                        found[(source.operand.index, source.dim)] = entry.data
        return found

    def output_names(self, main: FuncOp) -> list[str]:
        count = len(main.function_type.outputs.data)
        attrs = main.res_attrs.data if main.res_attrs is not None else ()
        names: list[str] = []
        for i in range(count):
            info = attrs[i].data.get("jax.result_info") if i < len(attrs) else None
            if isinstance(info, StringAttr) and info.data:
                parts = key_path(info.data)
                name = ".".join(parts)
                if info.data.startswith("["):  # a bare path: [0], ['logits']
                    name = ".".join(["result", *key_path("result" + info.data)[1:]])
            else:
                name = "result" if count == 1 else f"result.{i}"
            while name in names:
                name += "_"
            names.append(name)
        return names

    def output(self, builder: GraphBuilder, value: Operand, name: str, taken: set[str]) -> SSAValue:
        """The value a graph output returns under `name`: its node's output renamed, or, for a graph
        input, a weight or a value already returned under another name, an Identity of it."""
        builder.base, builder.doc = name, None
        result = full(builder, value)
        owner = result.owner
        index = result.index if isinstance(result, OpResult) else 0
        if isinstance(owner, NodeOp) and owner.output_names[index] not in taken:
            names = list(owner.output_names_attr.data)  # a node may have several outputs (TopK)
            names[index] = StringAttr(name)
            owner.output_names_attr = ArrayAttr(names)
        else:
            result = builder.node("Identity", [result])
            node = result.owner
            assert isinstance(node, NodeOp)
            node.output_names_attr = ArrayAttr([StringAttr(name)])
        taken.add(name)
        set_name_hint(result, name)
        return result

    def callee(self, call: CallOp) -> FuncOp:
        name = call.callee.string_value()
        if name not in self.funcs:
            raise ModelError(f"{self.where(call)}: calls @{name}, which the module does not define")
        return self.funcs[name]

    # ---- bodies

    def run(self, func: FuncOp, args: list[Operand], builder: GraphBuilder, stack: list[str]) -> list[Operand]:
        """Lower `func`'s body with its arguments bound to `args`; its results (calls inlined)."""
        if func.sym_name.data in stack:
            raise UnsupportedError(
                f"{self.where(func)}: @{func.sym_name.data} calls itself; recursion is not supported"
            )
        try:
            return self.run_block(func.body.block, args, builder, [*stack, func.sym_name.data], {})
        except _NoReturn:
            raise ModelError(f"{self.where(func)}: the function does not end in func.return") from None

    def run_block(
        self,
        block: Block,
        args: Sequence[Operand],
        builder: GraphBuilder,
        stack: list[str],
        outer: dict[SSAValue, Operand],
    ) -> list[Operand]:
        """Lower the ops of `block` (a function's body or a region of a `while` or `case`, which reads
        the values of `outer` too) with its arguments bound to `args`; the values it returns."""
        env: dict[SSAValue, Operand] = {**outer, **dict(zip(block.args, args, strict=True))}

        def bound(op: Operation, values: Sequence[SSAValue]) -> list[Operand]:
            # The parser takes a use before its definition (a forward reference) as the text's business.
            for i, v in enumerate(values):
                if v not in env:
                    raise ModelError(f"{self.where(op)}: operand #{i} is used before the op that defines it")
            return [env[v] for v in values]

        def region(body: Block, values: Sequence[Operand]) -> list[Operand]:
            base, doc = builder.base, builder.doc  # the region's ops rename the nodes; the op's own follow
            try:
                return self.run_block(body, values, builder, stack, env)
            finally:
                builder.base, builder.doc = base, doc

        for op in block.ops:
            if isinstance(op, FuncReturnOp | hlo.ReturnOp):
                return bound(op, op.operands)
            if isinstance(op, CallOp):
                callee = self.callee(op)
                results = self.run(callee, bound(op, op.arguments), builder, stack)
                env.update(zip(op.res, results, strict=True))
                continue
            builder.start(op.name.split(".")[-1], self.where(op, with_op=False))
            try:
                if isinstance(op, hlo.WhileOp | hlo.CaseOp):
                    results = lower_control(builder, op, bound(op, op.operands), region)
                else:
                    results = lower_op(builder, op, bound(op, op.operands))
            except LoweringError as err:
                raise UnsupportedError(f"{self.where(op)}: {err}") from None
            env.update(zip(op.results, results, strict=True))
        raise _NoReturn


class _NoReturn(Exception):
    """A block that does not end in a return."""


def _live(ops: list[Operation], ret: ReturnOp) -> list[Operation]:
    """`ops` (initializers first) then `ret`, without the nodes and initializers nothing reads."""
    kept: list[Operation] = []
    for op in reversed(ops):
        if isinstance(op, NodeOp | InitializerOp) and not any(r.uses for r in op.results):
            op.erase()
            continue
        kept.append(op)
    kept.reverse()
    return [
        *(op for op in kept if isinstance(op, InitializerOp)),
        *(op for op in kept if not isinstance(op, InitializerOp)),
        ret,
    ]
