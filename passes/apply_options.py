"""apply-options: fix what the build options fix in the graph, before stage 0 reads it.

The options enter the IR as attributes of the top-level module (`loam.dims`, `loam.values`,
`loam.outputs`, `loam.layout`, `loam.inline_weights`), so any later pass can be replayed on a dumped
`.mlir` file.  This pass reads `loam.interface`, `loam.dims`, `loam.values`, `loam.outputs` and
`loam.layout`:

- `interface` re-declares a graph input's or output's dims (before `dims` reads them), for an
  export whose declaration contradicts its own graph: optimum's merged decoder declares its
  `attention_mask` `[batch_size, sequence_length]` though the with-past branch feeds it past + new
  columns, which, ONNX's dim_params being one value each, only an empty past could satisfy;

- `dims` gives a dim_param a static extent wherever a graph input or output declares it, as
  onnxruntime's free dimension overrides do; it also fixes a name inside a spelled dim_param
  (`past` in `past + 1`), which becomes a number once every name it reads is fixed (fixing some of
  them only, or to a negative extent, stops the build);
- `values` fixes a graph input to one value, as a deployment that always feeds it that value does
  (Silero VAD's sample rate): the input becomes a `graph.constant` holding it, `forward` no longer
  takes it (a build note says so), and stage 0 folds what it decides (an If keeps the branch it takes,
  a Reduce's `axes` become known).  The value must suit the input's declaration once `dims` has fixed
  its extents: a boolean for bool, integers within an integer type's range, a number for a float, and
  as many elements as the input holds;
- `outputs` names the graph outputs `forward` returns; the graph is cut down to the nodes,
  initializers and inputs they read.

- every `layout` rule must reach a tensor the graph declares (and a graph it names must exist),
  so a misspelt pattern stops the build instead of silently naming nothing.

A graph input's dim that has neither a value nor a name (ONNX allows it; onnxruntime runs it at any
extent) gets a dim_param of its own, `TENSOR_dimAXIS`, and a build note says so, before `dims` reads
the dims: so `dims` can fix it and forward binds it from the input like any symbol.

A name in any option that the graph does not declare stops the build naming it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from loam.core.errors import OptionsError
from loam.core.layout import LayoutRule
from loam.dialects import build_contract as contract
from loam.dialects.dim_params import read_spelling
from loam.dialects.graph import (
    ConstantOp,
    GraphOp,
    InitializerOp,
    ModelOp,
    NodeOp,
    ReturnOp,
    SubgraphInfoOp,
    TensorDataAttr,
    TensorType,
)
from loam.passes.notes import add_notes


def main_graph(module: ModuleOp) -> GraphOp:
    for op in module.ops:
        if isinstance(op, ModelOp):
            return op.graph
    raise OptionsError("the module holds no graph.model")


@dataclass(frozen=True)
class ApplyOptionsPass(ModulePass):
    """Fix dim_params (`loam.dims`) and inputs (`loam.values`), cut to `loam.outputs`, check `loam.layout`."""

    name = "apply-options"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        graph = main_graph(op)
        interface = contract.INTERFACE.get(op)
        if interface:
            redeclare(graph, interface)
        named = name_unnamed_dims(graph)
        if named:
            add_notes(op, [_unnamed_note(named)])
        dims = contract.DIMS.get(op)
        if dims:
            fix_dims(graph, dims)
        values = contract.VALUES.get(op)
        if values:
            add_notes(op, [_values_note(fix_values(graph, values))])
        layout = contract.LAYOUT.get(op)
        if layout is not None:
            check_layout_reaches(op, layout)
        outputs = contract.OUTPUTS.get(op)
        if outputs is not None:
            cut_outputs(graph, list(outputs))


def name_unnamed_dims(graph: GraphOp) -> list[tuple[str, int, str]]:
    """Give each graph input's unnamed dim (neither a dim_value nor a dim_param, which ONNX allows and
    onnxruntime runs at any extent) a dim_param of its own, `TENSOR_dimAXIS`, unlike every other the
    graph declares; returns (input, axis, name) for each.  A symbol like any other from then on: forward
    reads it from the input it is fed, `dims` may fix it, `loam layout` drafts an axis name for it."""
    block = graph.body.block
    ret = block.last_op
    assert isinstance(ret, ReturnOp)
    types = [arg.type for arg in block.args] + list(ret.declared_types.data)
    taken = {
        d for t in types if isinstance(t, TensorType) and t.shape is not None for d in t.shape if isinstance(d, str)
    }
    named: list[tuple[str, int, str]] = []
    for arg, input_name in zip(list(block.args), graph.input_names.data, strict=True):
        t = arg.type
        if not isinstance(t, TensorType) or t.shape is None or None not in t.shape:
            continue
        shape: list[int | str] = []
        for axis, dim in enumerate(t.shape):
            if dim is None:
                dim = f"{_UNSAFE.sub('_', input_name.data)}_dim{axis}"
                while dim in taken:
                    dim += "_"
                taken.add(dim)
                named.append((input_name.data, axis, dim))
            shape.append(dim)
        Rewriter.replace_value_with_new_type(arg, TensorType(t.elem, shape))
    return named


_UNSAFE = re.compile(r"[^0-9A-Za-z_]")


def _unnamed_note(named: Sequence[tuple[str, int, str]]) -> str:
    which = ", ".join(f"'{tensor}' axis {axis} is {name}" for tensor, axis, name in named)
    return (
        f"graph inputs declare dims with neither a value nor a name; each is a symbol of its own, read from "
        f"the input at run time: {which} (fix one with the `dims` option, name it with `interface`)"
    )


def _tensor_names(block: Block) -> Iterator[str]:
    for op in block.ops:
        if isinstance(op, InitializerOp):
            yield op.onnx_name.data
        elif isinstance(op, ConstantOp):  # a graph input the `values` option fixed
            yield op.value.tensor_name.data
        elif isinstance(op, NodeOp):
            yield from op.output_names
            for region in op.subgraphs:
                yield from _tensor_names(region.block)
        elif isinstance(op, SubgraphInfoOp):
            yield from (s.data for s in op.input_names.data)


def check_layout_reaches(module: ModuleOp, rules: Sequence[LayoutRule]) -> None:
    """Every layout rule reaches at least one tensor of a graph it applies to."""
    names = declared_tensors(module)
    for rule in rules:
        if rule.graph is not None and rule.graph not in names:
            raise OptionsError(
                f"layout rule '{rule.pattern}' names graph '{rule.graph}', which the model does not declare "
                f"(it declares {', '.join(sorted(names))})"
            )
        if not reaches_any(rule, names):
            raise OptionsError(f"layout rule '{rule.pattern}' reaches no tensor the model declares")


def reaches_any(rule: LayoutRule, names: dict[str, set[str]]) -> bool:
    """Whether `rule` reaches a tensor of `declared_tensors`."""
    reachable = names.values() if rule.graph is None else [names.get(rule.graph, set())]
    return any(rule.reaches(n, rule.graph) for tensors in reachable for n in tensors)


def declared_tensors(module: ModuleOp) -> dict[str, set[str]]:
    """Each graph's name -> the tensors a layout rule may name in it (a branch sees its outer graph's)."""
    names: dict[str, set[str]] = {}
    for op in module.walk():
        if isinstance(op, GraphOp):
            names[op.graph_name.data] = {s.data for s in op.input_names.data} | set(_tensor_names(op.body.block))
        elif isinstance(op, SubgraphInfoOp):
            block = op.parent_block()
            assert block is not None
            names[op.graph_name.data] = set(_tensor_names(block)) | {s.data for s in op.input_names.data}
    # A branch reads the tensors of the graph around it, and a rule scoped to it may relabel them.
    outer = set().union(*names.values()) if names else set()
    for graph in names:
        names[graph] |= outer
    return names


def redeclare(graph: GraphOp, interface: dict[str, list[int | str]]) -> None:
    """Declare each named graph input or output with the given dims instead of its own (the element
    type kept); a name the graph neither takes nor returns, or another rank, stops the build."""
    block = graph.body.block
    ret = block.last_op
    assert isinstance(ret, ReturnOp)
    inputs = [s.data for s in graph.input_names.data]
    outputs = [s.data for s in ret.output_names.data]

    def retyped(t: Attribute, dims: list[int | str], what: str) -> TensorType:
        if not isinstance(t, TensorType):
            raise OptionsError(f"interface: {what} is not a tensor; only a tensor's dims can be re-declared")
        if t.shape is not None and len(t.shape) != len(dims):
            raise OptionsError(
                f"interface: {what} has {len(t.shape)} axes ({', '.join(map(str, t.shape))}); "
                f"the option gives {len(dims)} ({', '.join(map(str, dims))})"
            )
        return TensorType(t.elem, list(dims))

    for name, dims in interface.items():
        if name not in inputs and name not in outputs:
            raise OptionsError(
                f"interface: '{name}' is neither an input nor an output of graph '{graph.graph_name.data}' "
                f"(inputs: {', '.join(inputs)}; outputs: {', '.join(outputs)})"
            )
        if name in inputs:
            arg = block.args[inputs.index(name)]
            Rewriter.replace_value_with_new_type(arg, retyped(arg.type, dims, f"graph input '{name}'"))
        if name in outputs:
            k = outputs.index(name)
            types = list(ret.declared_types.data)
            types[k] = retyped(types[k], dims, f"graph output '{name}'")
            ret.declared_types = ArrayAttr(types)


def _fixed_dim(dim: str, dims: dict[str, int], used: set[str], what: str) -> int | str:
    """A dim_param with the `dims` option applied: a number where it fixes the dim_param whole or every
    name its spelling reads (`past + 1`), else unchanged; half a spelling fixed stops the build."""
    if dim in dims:
        used.add(dim)
        return dims[dim]
    spelled = read_spelling(dim)
    if spelled is None:
        return dim
    names = spelled.symbols
    fixed = sorted(names & dims.keys())
    if not fixed:
        return dim
    used.update(fixed)
    open_names = sorted(names - dims.keys())
    if open_names:
        raise OptionsError(
            f"dims: {what} is spelled '{dim}', and dims fixes {', '.join(fixed)} but not "
            f"{', '.join(open_names)}; fix all of its names or none"
        )
    value = spelled.evaluate(dims)
    if value < 0:
        given = ", ".join(f"{n} = {dims[n]}" for n in fixed)
        raise OptionsError(f"dims: {what} is spelled '{dim}', which is {value} with {given}: a negative extent")
    return value


def _fixed(t: Attribute, dims: dict[str, int], used: set[str], what: str) -> Attribute:
    if not isinstance(t, TensorType) or t.shape is None:
        return t
    shape = [_fixed_dim(d, dims, used, f"{what} axis {i}") if isinstance(d, str) else d for i, d in enumerate(t.shape)]
    return TensorType(t.elem, shape)


def fix_dims(graph: GraphOp, dims: dict[str, int]) -> None:
    """Replace each named dim_param by its extent on the graph's inputs and declared outputs.

    A name may be a whole dim_param or a name inside a spelled one (`past` in `past + 1`): a spelling
    whose every name is fixed becomes its number.
    """
    for name, value in dims.items():
        if value < 0:
            raise OptionsError(f"dims: '{name}' must not be negative, got {value}")
    used: set[str] = set()
    block = graph.body.block
    for arg, input_name in zip(list(block.args), graph.input_names.data, strict=True):
        new = _fixed(arg.type, dims, used, f"graph input '{input_name.data}'")
        if new != arg.type:
            Rewriter.replace_value_with_new_type(arg, new)
    ret = block.last_op
    assert isinstance(ret, ReturnOp)
    ret.declared_types = ArrayAttr(
        [
            _fixed(t, dims, used, f"graph output '{n.data}'")
            for t, n in zip(ret.declared_types.data, ret.output_names.data, strict=True)
        ]
    )
    unknown = sorted(set(dims) - used)
    if unknown:
        raise OptionsError(
            f"dims: the graph '{graph.graph_name.data}' declares no dim_param {', '.join(repr(n) for n in unknown)}"
        )


def fix_values(graph: GraphOp, values: Mapping[str, contract.Value]) -> list[tuple[str, np.ndarray]]:
    """Make each graph input `values` names a `graph.constant` holding its value, and drop it from the
    graph's inputs; returns (input, value) for each, in the graph's input order.

    A name the graph does not take, or a value its declaration refuses (another element type, another
    element count, an extent still symbolic), stops the build naming the option and the input.
    """
    block = graph.body.block
    names = [s.data for s in graph.input_names.data]
    unknown = [n for n in values if n not in names]
    if unknown:
        raise OptionsError(
            f"values: the graph '{graph.graph_name.data}' takes no input {', '.join(repr(n) for n in unknown)} "
            f"(it takes {', '.join(names) or 'none'})"
        )
    fixed: list[tuple[str, np.ndarray]] = []
    for index in reversed(range(len(names))):
        name = names[index]
        if name not in values:
            continue
        arg = block.args[index]
        array = _value_array(name, arg.type, values[name])
        t = arg.type
        assert isinstance(t, TensorType)  # _value_array refuses anything else
        constant = ConstantOp(TensorDataAttr.from_numpy(array, t.elem, name=name))
        constant.result.name_hint = arg.name_hint
        first = _first_non_initializer(block)
        if first is None:
            block.add_op(constant)
        else:
            Rewriter.insert_op(constant, InsertPoint.before(first))
        for use in list(arg.uses):
            owner = use.operation
            if isinstance(owner, InitializerOp) and owner.default_of is arg:
                # An initializer giving the input a default (ONNX before IR version 4): the value replaces it.
                owner.result.replace_all_uses_with(constant.result)
                Rewriter.erase_op(owner)
        arg.replace_all_uses_with(constant.result)
        block.erase_arg(arg)
        del names[index]
        fixed.append((name, array))
    graph.input_names = ArrayAttr([StringAttr(n) for n in names])
    return fixed[::-1]


def _first_non_initializer(block: Block) -> Operation | None:
    for op in block.ops:
        if not isinstance(op, InitializerOp):
            return op
    return None


def _value_array(name: str, t: Attribute, value: contract.Value) -> np.ndarray:
    """`value` as the array graph input `name` of type `t` holds: its element type and extents."""
    where = f"values: graph input '{name}'"
    if not isinstance(t, TensorType) or t.shape is None:
        raise OptionsError(f"{where} is not a tensor of known rank; only a tensor input can be fixed to a value")
    declared = f"{t.elem.name} [{', '.join(map(str, t.shape))}]"
    symbolic = [d for d in t.shape if not isinstance(d, int)]
    if symbolic:
        raise OptionsError(
            f"{where} is declared {declared}; fix {', '.join(map(str, symbolic))} with the `dims` option too, "
            "so the value's extents are known"
        )
    items = list(value) if isinstance(value, tuple) else [value]
    elem = t.elem
    if elem.name == "bool":
        if not all(isinstance(v, bool) for v in items):
            raise OptionsError(f"{where} is declared {declared}; give it true or false, not {value!r}")
    elif elem.is_float and not elem.name.startswith("c") and elem.numpy is not None:
        if any(isinstance(v, bool) for v in items):
            raise OptionsError(f"{where} is declared {declared}; give it a number, not {value!r}")
    elif elem.numpy is not None and np.issubdtype(elem.numpy, np.integer):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            raise OptionsError(f"{where} is declared {declared}; give it integers, not {value!r}")
        info = np.iinfo(elem.numpy)
        outside = [v for v in items if isinstance(v, int) and not info.min <= v <= info.max]
        if outside:
            raise OptionsError(f"{where} is declared {declared}; {outside[0]} lies outside [{info.min}, {info.max}]")
    else:
        raise OptionsError(f"{where} is declared {declared}; the `values` option fixes bool, integer and float inputs")
    shape = tuple(int(d) for d in t.shape if isinstance(d, int))
    count = int(np.prod(shape, dtype=np.int64))
    if len(items) != count:
        given = f"{len(items)} values" if isinstance(value, tuple) else "one value"
        raise OptionsError(f"{where} is declared {declared}, {count} elements; the option gives {given}")
    return np.array(items, dtype=elem.numpy).reshape(shape)


def _values_note(fixed: Sequence[tuple[str, np.ndarray]]) -> str:
    which = ", ".join(f"'{name}' = {_spelled(array)}" for name, array in fixed)
    return f"the `values` option fixes graph inputs, which forward no longer takes: {which}"


def _spelled(array: np.ndarray) -> str:
    items = array.reshape(-1).tolist()
    text = ", ".join("true" if v is True else "false" if v is False else str(v) for v in items)
    return text if array.ndim == 0 else f"[{text}]"


def cut_outputs(graph: GraphOp, wanted: list[str]) -> None:
    """Keep only the outputs named in `wanted` (in that order), then drop what nothing reads."""
    block = graph.body.block
    ret = block.last_op
    assert isinstance(ret, ReturnOp)
    declared = [s.data for s in ret.output_names.data]
    unknown = [n for n in wanted if n not in declared]
    if unknown:
        raise OptionsError(
            f"outputs: the graph declares no output {', '.join(repr(n) for n in unknown)} "
            f"(it declares {', '.join(declared)})"
        )
    index = [declared.index(n) for n in wanted]
    new_ret = ReturnOp([ret.values[i] for i in index], wanted, [ret.declared_types.data[i] for i in index])
    Rewriter.replace_op(ret, new_ret)
    _drop_dead(block)


def _drop_dead(block: Block) -> None:
    """Erase nodes and initializers no output reads (walking backwards, so chains go at once)."""
    for op in reversed(list(block.ops)):
        if isinstance(op, NodeOp | InitializerOp) and not any(r.uses for r in op.results):
            Rewriter.erase_op(op)
