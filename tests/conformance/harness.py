"""The conformance harness: what every case must do, and one function that checks it.

Suites (each case is named `suite/case`):

- `node`: ONNX's backend node cases, generated in memory by `onnx.backend.test.case.node.collect_testcases()`
  (the installed onnx wheel ships no `data/node` folder); `node_cases.json` lists their names, tolerances and
  the operator each one tests, so collecting the tests does not generate 1,884 models.
- `pytorch-operator`, `pytorch-converted`, `simple`: the model folders of the installed onnx package
  (`model.onnx` + `test_data_set_*/{input,output}_N.pb` or `test_data_*.npz`), at onnx's own 1e-3/1e-7.
- `operators`: the models `make_operator_cases.py` writes into `operators/`, checked against onnxruntime.

What a case must do (`check_case`), decided from the model itself and `loam.ops.RULES`:

- inputs/outputs that are not tensors (sequences, optionals, maps, sparse tensors) or training info: the
  build refuses with a `LoamError`;
- an operator outside `RULES`: the build fails with an `UnsupportedError` whose message names one of those
  operators (or an element type outside `SUPPORTED_TYPES`, which the build may meet first);
- otherwise it builds, runs on every data set and matches every expected output: count, dtype, shape, NaN
  positions, values at the case's rtol/atol (integers and bools exactly).

`expected_failures.toml` amends this: `[xfail.<suite>]` cases must fail (strict xfail; the reason is the first
line of their error) and `[refused.<suite>]` cases must be refused by the build with a `LoamError`.
`python -m tests.conformance.summary --write-expectations` rewrites that file from a run.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tomllib
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import ml_dtypes
import numpy as np
import onnx
import onnx.backend.test
from onnx import numpy_helper

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
ONNX_DATA = Path(onnx.backend.test.__file__).resolve().parent / "data"
OPERATORS_DIR = HERE / "operators"
NODE_MANIFEST = HERE / "node_cases.json"
EXPECTATIONS = HERE / "expected_failures.toml"
WGSL_EXPECTATIONS = HERE / "expected_failures_wgsl.toml"
"""What the WGSL backend adds to EXPECTATIONS: cases it refuses or fails beyond the numpy module's."""
BACKENDS = ("numpy", "wgsl")

FOLDER_SUITES = ("pytorch-operator", "pytorch-converted", "simple")
DECLARED = "node-declared"
"""The node cases that read a shape operand (SHAPE_OPERANDS) from a graph input, run with that input fed at
run time as the case declares it (the `node` suite makes it a Constant): each such case the `node` suite
does not list.  An axes/axis operand, which the build needs known, is given with the `values` option where
the build refuses it (`declared_build`)."""
SUITES = ("node", DECLARED, *FOLDER_SUITES, "operators")

# The element types Loam compiles.  A refusal of a case with an unsupported operator may name one of
# the other types instead (the build may meet it first); a case of supported operators must pass whatever its
# types, or be listed (an operator may compute in more types than these, e.g. BitShift in ui16..ui64).
SUPPORTED_TYPES = frozenset(
    getattr(onnx.TensorProto, t)
    for t in ("FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "INT8", "INT16", "INT32", "INT64", "UINT8", "BOOL")
)
ONNX_DOMAINS = ("", "ai.onnx")

# onnx's backend runner compares the model folders at these tolerances unless a data.json says otherwise.
FOLDER_RTOL, FOLDER_ATOL = 1e-3, 1e-7


# ----------------------------------------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class Case:
    """One conformance case: where its model and data come from, the operator it is about, its tolerances."""

    suite: str
    name: str
    op: str  # the operator the case is about (per-operator summary); a model's first unsupported op otherwise
    rtol: float = FOLDER_RTOL
    atol: float = FOLDER_ATOL
    path: str | None = None  # the case's folder (model folders) or .onnx file (operators suite)

    @property
    def id(self) -> str:
        return f"{self.suite}/{self.name}"

    def load(self) -> tuple[onnx.ModelProto, list[DataSet]]:
        """The model and its data sets (inputs by graph-input name, expected outputs in order)."""
        if self.suite in ("node", DECLARED):
            return _load_node_case(self.name)
        if self.suite == "operators":
            return _load_operator_case(Path(str(self.path)))
        return _load_folder_case(Path(str(self.path)))


@dataclass
class DataSet:
    """Inputs by graph-input name and the expected outputs (None where an output is not a tensor)."""

    feeds: dict[str, Any]
    expected: list[Any] | None  # None: ask onnxruntime (operators suite)


def node_cases() -> list[Case]:
    """The node cases listed in `node_cases.json` (regenerate it with `summary --write-manifest`)."""
    manifest = json.loads(NODE_MANIFEST.read_text(encoding="utf-8"))
    return [Case("node", name, entry["op"], entry["rtol"], entry["atol"]) for name, entry in manifest["cases"].items()]


def declared_cases() -> list[Case]:
    """The DECLARED suite: node cases whose manifest entry names shape inputs, less those `node` lists."""
    manifest = json.loads(NODE_MANIFEST.read_text(encoding="utf-8"))
    listed = {k for table in expectations("numpy").values() for k in table}
    return [
        Case(DECLARED, name, entry["op"], entry["rtol"], entry["atol"])
        for name, entry in manifest["cases"].items()
        if entry.get("shape_inputs") and f"node/{name}" not in listed
    ]


def folder_cases(suite: str) -> list[Case]:
    """The cases of one model folder of the installed onnx package."""
    cases = []
    root = ONNX_DATA / suite
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        rtol, atol = FOLDER_RTOL, FOLDER_ATOL
        meta = folder / "data.json"
        if meta.is_file():
            data = json.loads(meta.read_text(encoding="utf-8"))
            rtol, atol = data.get("rtol", rtol), data.get("atol", atol)
        op = ""
        if (folder / "model.onnx").is_file():
            model = onnx.load(folder / "model.onnx", load_external_data=False)
            op = "+".join(dict.fromkeys(n.op_type for n in model.graph.node))
        cases.append(Case(suite, folder.name, op, rtol, atol, str(folder)))
    return cases


def operator_cases() -> list[Case]:
    """The operators suite: `operators/<Op>.<variant>.onnx` (+ `.npz` inputs where values matter)."""
    return [Case("operators", p.stem, p.stem.split(".")[0], path=str(p)) for p in sorted(OPERATORS_DIR.glob("*.onnx"))]


def cases(suite: str) -> list[Case]:
    """Every case of `suite`."""
    if suite == "node":
        return node_cases()
    if suite == DECLARED:
        return declared_cases()
    if suite == "operators":
        return operator_cases()
    return folder_cases(suite)


@functools.cache
def _collected_node_cases() -> dict[str, Any]:
    """ONNX's node cases by name (generated once per process: about 6 s)."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases()}


def _as_value(x: Any) -> Any:
    """A data-set value as the runtime sees it: TensorProto and numpy scalars become arrays."""
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, np.generic):
        return np.asarray(x)
    return x


def _load_node_case(name: str) -> tuple[onnx.ModelProto, list[DataSet]]:
    case = _collected_node_cases()[name]
    names = [i.name for i in case.model.graph.input]
    data = []
    for inputs, outputs in case.data_sets:
        feeds = {n: _as_value(x) for n, x in zip(names, inputs, strict=False)}
        data.append(DataSet(feeds, [_as_value(y) for y in outputs]))
    return case.model, data


def _read_pb(path: Path, type_proto: onnx.TypeProto) -> Any:
    raw = path.read_bytes()
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        seq = onnx.SequenceProto()
        seq.ParseFromString(raw)
        return numpy_helper.to_list(seq)
    if kind == "optional_type":
        opt = onnx.OptionalProto()
        opt.ParseFromString(raw)
        return numpy_helper.to_optional(opt)
    tensor = onnx.TensorProto()
    tensor.ParseFromString(raw)
    return numpy_helper.to_array(tensor)


def _load_folder_case(folder: Path) -> tuple[onnx.ModelProto, list[DataSet]]:
    model = onnx.load(folder / "model.onnx", load_external_data=False)
    graph_inputs, graph_outputs = list(model.graph.input), list(model.graph.output)
    data = []
    for ds in sorted(folder.glob("test_data_set_*")):
        n_in = len(list(ds.glob("input_*.pb")))
        n_out = len(list(ds.glob("output_*.pb")))
        feeds = {graph_inputs[i].name: _read_pb(ds / f"input_{i}.pb", graph_inputs[i].type) for i in range(n_in)}
        expected = [_read_pb(ds / f"output_{i}.pb", graph_outputs[i].type) for i in range(n_out)]
        data.append(DataSet(feeds, expected))
    for npz in sorted(folder.glob("test_data_*.npz")):
        with np.load(npz, encoding="bytes", allow_pickle=False) as arrays:
            names = [i.name for i in graph_inputs]
            feeds = dict(zip(names, list(arrays["inputs"]), strict=False))
            data.append(DataSet(feeds, list(arrays["outputs"])))
    return model, data


# Element types of the operators suite's random inputs.
_NP_OF: dict[int, Any] = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.BFLOAT16: ml_dtypes.bfloat16,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.INT16: np.int16,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.BOOL: np.bool_,
}


def random_input(vi: onnx.ValueInfoProto, rng: np.random.Generator) -> np.ndarray:
    """A seeded random tensor for a graph input of static shape: normal floats, small ints, random bools."""
    t = vi.type.tensor_type
    shape = tuple(d.dim_value for d in t.shape.dim)
    dtype = _NP_OF[t.elem_type]
    if dtype is np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        low = 0 if dtype is np.uint8 else -10
        return rng.integers(low, 11, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def _load_operator_case(path: Path) -> tuple[onnx.ModelProto, list[DataSet]]:
    model = onnx.load(path)
    init = {i.name for i in model.graph.initializer}
    npz = path.with_suffix(".npz")
    stored: dict[str, np.ndarray] = {}
    if npz.is_file():
        with np.load(npz, allow_pickle=False) as arrays:
            stored = {k: arrays[k] for k in arrays.files}
    rng = np.random.default_rng(zlib.crc32(path.stem.encode()))
    feeds = {}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        feeds[vi.name] = stored[vi.name] if vi.name in stored else random_input(vi, rng)
    return model, [DataSet(feeds, None)]


# ----------------------------------------------------------------------------------------------------------
# Shape operands fed at run time

# Operand positions whose values fix an output's extents (or which axes an operator works on): ONNX's node
# cases feed them as graph inputs, while Loam settles extents at build time and needs them known.  The
# harness turns a graph input read at such a position into a Constant holding the data set's value, as an
# export carries it; every other input stays a run-time input.
_REDUCE_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2")
SHAPE_OPERANDS: dict[str, frozenset[int]] = {
    **{op: frozenset({1}) for op in (*_REDUCE_OPS, "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")},
    **{op: frozenset({1}) for op in ("Reshape", "Tile", "Squeeze", "Unsqueeze", "Split", "TopK")},
    **{op: frozenset({0}) for op in ("HannWindow", "HammingWindow", "BlackmanWindow")},
    **{op: frozenset({1}) for op in ("CumSum", "CumProd", "Trilu", "Upsample", "OneHot", "CenterCropPad")},
    "ConstantOfShape": frozenset({0}),
    "Col2Im": frozenset({1, 2}),
    "MaxUnpool": frozenset({2}),
    "Slice": frozenset({1, 2, 3, 4}),
    "Pad": frozenset({1, 3}),
    "Resize": frozenset({1, 2, 3}),
    "AffineGrid": frozenset({1}),
    "MelWeightMatrix": frozenset({0, 1}),
    "DFT": frozenset({1, 2}),
    "STFT": frozenset({1, 3}),
}


def shape_inputs(model: onnx.ModelProto) -> list[str]:
    """The graph inputs the main graph reads at a shape-operand position (SHAPE_OPERANDS)."""
    init = {t.name for t in model.graph.initializer}
    graph_inputs = [i.name for i in model.graph.input if i.name not in init]
    read = set()
    for node in model.graph.node:
        if node.domain in ONNX_DOMAINS:
            positions = SHAPE_OPERANDS.get(node.op_type, frozenset())
            read.update(name for k, name in enumerate(node.input) if k in positions and name)
    return [name for name in graph_inputs if name in read]


def specialize(model: onnx.ModelProto, feeds: dict[str, Any]) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """`model` with its shape-operand inputs made Constants of their values in `feeds`, and the other feeds."""
    fixed = [name for name in shape_inputs(model) if isinstance(feeds.get(name), np.ndarray)]
    if not fixed:
        return model, feeds
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [vi for vi in out.graph.input if vi.name not in fixed]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    constants = [
        onnx.helper.make_node(
            "Constant", [], [name], name=f"{name}_known", value=numpy_helper.from_array(feeds[name], name)
        )
        for name in fixed
    ]
    nodes = [*constants, *out.graph.node]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out, {k: v for k, v in feeds.items() if k not in fixed}


def fixed(case: Case, model: onnx.ModelProto, feeds: dict[str, Any]) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """The model and feeds `case` runs with: shape operands made Constants (`specialize`), except in the
    DECLARED suite, which feeds them as the case declares."""
    return (model, feeds) if case.suite == DECLARED else specialize(model, feeds)


_OPERAND_REFUSAL = re.compile(r"(\w+) node '(.*)': the (axes|axis) input must be known at build time .*--value NAME=V")
"""A build's refusal of an axes/axis operand only the run gives, which names the `values` option."""


def refused_operand(model: onnx.ModelProto, message: str, feeds: dict[str, Any]) -> str | None:
    """The graph input a refusal of an axes/axis operand (`_OPERAND_REFUSAL`) names: the input of the node
    it names at the operand it names (by the operator's schema), where that is a graph input whose integers
    the data set holds; None for any other refusal."""
    found = _OPERAND_REFUSAL.match(message)
    if found is None:
        return None
    op_type, node_name, operand = found.groups()
    opset = max((o.version for o in model.opset_import if o.domain in ONNX_DOMAINS), default=1)
    graph_inputs = {i.name for i in model.graph.input}
    for node in model.graph.node:
        if node.op_type != op_type or node.domain not in ONNX_DOMAINS or (node.name or node.output[0]) != node_name:
            continue
        names = [i.name for i in onnx.defs.get_schema(op_type, opset).inputs]
        index = names.index(operand) if operand in names else len(node.input)
        name = node.input[index] if index < len(node.input) else ""
        value = feeds.get(name)
        if name in graph_inputs and isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.integer):
            return name
    return None


def declared_build(
    case: Case, model: onnx.ModelProto, feeds: dict[str, Any], build: Callable[[Any], T]
) -> tuple[T, dict[str, Any]]:
    """`build(options)` of `model`, and the values it was built with.  In the DECLARED suite a refusal of an
    axes/axis operand that a graph input feeds (`refused_operand`) is answered as a user would answer it:
    that input's value from the data set goes into the `values` option, and the build runs again."""
    from loam.core.errors import UnsupportedError
    from loam.driver.options import Options

    values: dict[str, Any] = {}
    while True:
        try:
            return build(Options(values=values) if values else None), values
        except UnsupportedError as err:
            name = refused_operand(model, str(err), feeds) if case.suite == DECLARED else None
            if name is None or name in values:
                raise
            array = np.asarray(feeds[name])
            values[name] = int(array) if array.ndim == 0 else tuple(int(v) for v in array.reshape(-1))


# ----------------------------------------------------------------------------------------------------------
# What a model needs


@dataclass
class Needs:
    """What in a model lies outside Loam: operators, element types, non-tensor values, model features."""

    ops: set[str] = field(default_factory=set)  # every op type (qualified by domain outside ONNX's own)
    unsupported_ops: set[str] = field(default_factory=set)
    unsupported_types: set[str] = field(default_factory=set)  # outside SUPPORTED_TYPES, e.g. "UINT32"
    refusals: list[str] = field(default_factory=list)  # non-tensor values, training info, ...


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _graphs(g)


def _type_codes(t: onnx.TypeProto) -> Iterator[int]:
    kind = t.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        yield getattr(t, kind).elem_type
    elif kind == "sequence_type":
        yield from _type_codes(t.sequence_type.elem_type)
    elif kind == "optional_type":
        yield from _type_codes(t.optional_type.elem_type)
    elif kind == "map_type":
        yield t.map_type.key_type
        yield from _type_codes(t.map_type.value_type)


def needs(model: onnx.ModelProto) -> Needs:
    """What `model` uses that Loam does not compile, judged from `loam.ops.RULES` and SUPPORTED_TYPES
    after functions are expanded into their bodies as the importer does (an operator ONNX defines by a
    body is supported where its body is)."""
    from loam.core.errors import LoamError
    from loam.frontends.onnx_functions import expand_functions
    from loam.frontends.onnx_scan import unroll_scans
    from loam.ops import DOMAIN_RULES, RULES

    try:
        model = unroll_scans(expand_functions(model, "<case>", lambda op_type: op_type in RULES), "<case>")
    except LoamError:
        pass  # judged as written: the build refuses it too
    out = Needs()
    codes: set[int] = set()
    if len(model.training_info):
        out.refusals.append("training_info")
    for vi in (*model.graph.input, *model.graph.output):
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":
            out.refusals.append(f"{vi.name}: {kind}")
    if len(model.graph.sparse_initializer):
        out.refusals.append("sparse initializer")
    for g in _graphs(model.graph):
        for vi in (*g.input, *g.output, *g.value_info):
            codes.update(_type_codes(vi.type))
        codes.update(t.data_type for t in g.initializer)
        for node in g.node:
            qualified = node.op_type if node.domain in ONNX_DOMAINS else f"{node.domain}.{node.op_type}"
            out.ops.add(qualified)
            known = (
                node.op_type in RULES if node.domain in ONNX_DOMAINS else (node.domain, node.op_type) in DOMAIN_RULES
            )
            if not known:
                out.unsupported_ops.add(qualified)
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    codes.add(a.t.data_type)
                elif a.type == onnx.AttributeProto.SPARSE_TENSOR:
                    out.refusals.append(f"{node.op_type}: sparse tensor attribute")
                elif a.name in ("to", "dtype") and a.type == onnx.AttributeProto.INT and node.domain in ONNX_DOMAINS:
                    codes.add(a.i)
    codes.discard(onnx.TensorProto.UNDEFINED)
    out.unsupported_types = {onnx.TensorProto.DataType.Name(c) for c in codes if c not in SUPPORTED_TYPES}
    return out


def _type_spellings(onnx_name: str) -> list[str]:
    """The ways a message may spell an ONNX element type: UINT32, uint32, ui32, ..."""
    from loam.core.dtypes import BY_ONNX

    spellings = [onnx_name.lower()]
    code = getattr(onnx.TensorProto, onnx_name)
    if code in BY_ONNX:
        spellings.append(BY_ONNX[code].name.lower())
    return spellings


def names_culprit(message: str, needs_: Needs) -> bool:
    """Whether a refusal's message names one of the operators or element types the model needs."""
    low = message.lower()
    for op in needs_.unsupported_ops:
        bare = op.rsplit(".", 1)[-1]  # a message may name 'ai.onnx.preview.FlexAttention' as 'FlexAttention'
        if any(re.search(rf"(?<!\w){re.escape(name.lower())}(?!\w)", low) for name in (op, bare)):
            return True
    for t in needs_.unsupported_types:
        if any(re.search(rf"(?<!\w){re.escape(s)}(?!\w)", low) for s in _type_spellings(t)):
            return True
    return False


# ----------------------------------------------------------------------------------------------------------
# Checking one case


class CaseFailure(AssertionError):
    """A case did not do what it must.

    `build_error` is the LoamError when the build stopped (a `[refused]` listing accepts any); `refusal` says
    whether `--write-expectations` lists the case as refused rather than xfail: an UnsupportedError for a
    case it must build, or a refusal that names something other than the unsupported operator.
    """

    def __init__(self, message: str, build_error: BaseException | None = None, refusal: bool = False) -> None:
        super().__init__(message)
        self.build_error = build_error
        self.refusal = refusal


def first_line(err: BaseException) -> str:
    """`ErrorClass: first line of its message`, as an expectations reason."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


@functools.cache
def expectations(backend: str = "numpy") -> dict[str, dict[str, str]]:
    """`{"xfail": {case id: reason}, "refused": {case id: reason}}` from expected_failures.toml, and for
    the WGSL backend with expected_failures_wgsl.toml's entries over them."""
    out: dict[str, dict[str, str]] = {"xfail": {}, "refused": {}}
    for path in (EXPECTATIONS, *((WGSL_EXPECTATIONS,) if backend == "wgsl" else ())):
        if not path.is_file():
            continue
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for table in out:
            for suite, entries in data.get(table, {}).items():
                for name, reason in entries.items():
                    for other in out:
                        out[other].pop(f"{suite}/{name}", None)
                    out[table][f"{suite}/{name}"] = reason
    return out


def tolerance_for(case: Case, dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol) of one output: the case's own, or by element type in the operators suite."""
    if case.suite == "operators":
        if dtype in (np.float16, ml_dtypes.bfloat16):
            return 1e-2, 1e-3
        return 1e-5, 1e-6
    rtol = case.rtol
    if dtype == ml_dtypes.bfloat16:
        rtol = max(rtol, 2**-6)  # two bfloat16 ulps, as onnx's runner allows
    return rtol, case.atol


PASS_KERNELS = frozenset({"kernel.tile_program", "kernel.matmul_packed", "kernel.gather_packed"})
"""Kernel ops later passes make of what a rule lowered (tile programs, packed products)."""


def check_lowered_kernels(model: onnx.ModelProto, built: Any) -> None:
    """Every node of the build is computed by kernel ops its rule declares (`OpRule.kernels`, what
    docs/operators.md says it lowers to), or by what later passes make of them (CaseFailure if not)."""
    from loam.driver.pipeline import node_kernels
    from loam.ops import RULES

    op_types = {node.name: node.op_type for node in model.graph.node}
    for name, kernels in node_kernels(built.ir).items():
        rule = RULES.get(op_types.get(name, ""))
        if rule is None:
            continue
        # A kernel fused into another node's names that node; the unfused build checks what it was.
        used = {k.removesuffix("+epilogue") for k in kernels if " (fused into " not in k}
        undeclared = sorted(used - set(rule.kernels) - PASS_KERNELS)
        if undeclared:
            raise CaseFailure(
                f"node '{name}' ({op_types[name]}) is computed by {', '.join(undeclared)}, which its "
                f"rule does not declare in `kernels` ({', '.join(rule.kernels) or 'none'})"
            )


DRAWS = frozenset({"Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike"})
"""Operators whose outputs are random draws: no oracle holds their values (a case's stored ones came from
its writer's generator), so a case holding one is held to its outputs' count, dtype and extents, and a
Bernoulli's to values of 0 and 1 (tests/ops/test_random.py holds the draws to what they mean)."""


def compare_drawn(got: Sequence[Any], want: Sequence[Any]) -> None:
    """Random draws agree with a case's outputs in count, dtype and shape, and are 0 or 1 where those
    are (Bernoulli's); raises CaseFailure naming the output."""
    if len(got) != len(want):
        raise CaseFailure(f"{len(got)} outputs, expected {len(want)}")
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.dtype != w.dtype or g.shape != w.shape:
            raise CaseFailure(f"output {i}: {g.dtype} {list(g.shape)}, expected {w.dtype} {list(w.shape)}")
        if np.isin(w, (0, 1)).all() and not np.isin(g, (0, 1)).all():
            raise CaseFailure(f"output {i}: draws other than 0 and 1")


def compare(case: Case, got: Sequence[Any], want: Sequence[Any]) -> None:
    """Outputs agree in count, dtype, shape, NaN positions and value; raises CaseFailure naming the output."""
    from loam.testing import assert_same

    try:
        assert_same(got, want, tolerance=lambda dtype: tolerance_for(case, dtype))
    except AssertionError as err:
        text = str(err).strip().splitlines()
        raise CaseFailure(" ".join(line.strip() for line in text if line.strip())[:2000]) from None


def _build(model: onnx.ModelProto, backend: str = "numpy", host_fallback: bool = False, options: Any = None) -> Any:
    from loam.testing import build_for

    if backend == "wgsl":
        return build_for(model, options, fuse="dispatch", backend="wgsl", host_fallback=host_fallback)
    return build_for(model, options)


def _builds(
    model: onnx.ModelProto, backend: str = "numpy", host_fallback: bool = False, options: Any = None
) -> list[Any]:
    """The fused build and, where the fuse pass fused anything, the unfused one too: fused code must
    compute what unfused code does, so every case runs both ways (the WGSL module: fused for dispatch)."""
    from loam.testing import build_for

    fused = _build(model, backend, host_fallback, options)
    if backend == "wgsl" or fused.fusion is None or not fused.fusion.groups:
        return [fused]
    return [fused, build_for(model, options, fuse=None)]


def check_case(case: Case, honour_refused: bool = True, backend: str = "numpy") -> str:
    """Check `case` against what it must do: 'pass' or 'refused', or raise CaseFailure (or Loam's crash).

    An `[xfail]` listing is not consulted here (pytest and `outcome` apply it); a `[refused]` listing is,
    unless `honour_refused` is off (to re-derive the listing).
    """
    from loam.core.errors import LoamError, UnsupportedError

    model, data = case.load()
    need = needs(model)
    first, first_feeds = fixed(case, model, data[0].feeds) if data else (model, {})  # what the refusals ask
    listed = expectations(backend)["refused"].get(case.id) if honour_refused else None
    if listed is not None or need.refusals:
        try:
            declared_build(case, first, first_feeds, lambda options: _build(first, backend, options=options))
        except LoamError as err:
            numpy_refuses = case.id in expectations("numpy")["refused"]
            if backend == "wgsl" and isinstance(err, UnsupportedError) and not need.refusals and not numpy_refuses:
                # What only the device refuses, the host fallback computes: it must match the same oracle.
                # Where the host fallback cannot build it either (a buffer sized by a length only the run
                # knows), that refusal must be an UnsupportedError too.
                try:
                    _check_data(case, model, data, backend, host_fallback=True)
                except CaseFailure as failure:
                    if not failure.refusal:
                        raise
            return "refused"
        raise CaseFailure(f"the build must refuse this case ({listed or ', '.join(need.refusals)}) but succeeded")
    if need.unsupported_ops:
        culprits = ", ".join(sorted(need.unsupported_ops))
        try:
            declared_build(case, first, first_feeds, lambda options: _build(first, backend, options=options))
        except LoamError as err:
            if isinstance(err, UnsupportedError) and names_culprit(str(err), need):
                return "refused"
            raise CaseFailure(
                f"must fail with UnsupportedError naming {culprits}, not {first_line(err)}", err, refusal=True
            ) from err
        raise CaseFailure(f"built although it uses {culprits}, which Loam does not compile")
    if not data:
        raise CaseFailure("the case has no data set")
    _check_data(case, model, data, backend)
    return "pass"


def _check_data(
    case: Case, model: onnx.ModelProto, data: Sequence[DataSet], backend: str, host_fallback: bool = False
) -> None:
    """Build `model` for each data set's input extents and compare with the oracle (CaseFailure if not)."""
    from loam.core.errors import LoamError, UnsupportedError
    from loam.testing import run_built

    builds: dict[bytes, Any] = {}
    for ds in data:
        special, feeds = fixed(case, model, ds.feeds)
        key = special.SerializeToString()
        if case.suite == DECLARED:  # the values a build may take from the data set (`declared_build`)
            key += b"".join(np.asarray(feeds[n]).tobytes() for n in shape_inputs(special) if n in feeds)
        if key not in builds:
            try:
                build = functools.partial(_builds, special, backend, host_fallback)
                builds[key], _ = declared_build(case, special, feeds, build)
            except LoamError as err:
                how = " with the host fallback" if host_fallback else ""
                raise CaseFailure(
                    f"build{how} stopped: {first_line(err)}", err, refusal=isinstance(err, UnsupportedError)
                ) from err
        stored = ds.expected is not None and case.name not in ONNXRUNTIME_OVER_STORED
        want = ds.expected if stored else _oracle(model, ds.feeds)
        drawn = any(node.op_type in DRAWS for node in special.graph.node)
        for built in builds[key]:
            check_lowered_kernels(special, built)
            got = run_built(built, feeds)
            if drawn:
                compare_drawn(got, want)
            else:
                compare(case, got, want)


ONNXRUNTIME_OVER_STORED = frozenset({"test_maxunpool_export_with_output_shape"})
"""Node cases whose stored outputs depart from onnxruntime, the oracle, which answers them otherwise
on purpose: MaxUnpool with an output_shape larger than the inferred one places each index in the
output's own grid (row-major over output_shape, as PyTorch's max_unpool does), where ONNX's stored
answer places it in the inferred grid and pads afterwards.  These compare with onnxruntime."""


_U8_BY_S8 = frozenset({"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"})
"""The 8-bit integer products whose uint8-by-int8 form onnxruntime's x86 kernels compute with
vpmaddubsw where the CPU lacks VNNI: that instruction adds pairs of products in int16, saturating
(a known onnxruntime limitation), so its answer depends on the CPU the suite runs on."""


def _oracle(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[Any]:
    """onnxruntime's outputs, except for a uint8-by-int8 product (`_U8_BY_S8`), where the exact
    product is the answer on every CPU: onnx's reference evaluator's."""
    from loam.testing import run_onnxruntime

    inputs = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.input}
    inputs.update({t.name: t.data_type for t in model.graph.initializer})
    for node in model.graph.node:
        if node.op_type in _U8_BY_S8:
            x, w = node.input[0], node.input[3 if node.op_type.startswith("QLinear") else 1]
            if (inputs.get(x), inputs.get(w)) == (onnx.TensorProto.UINT8, onnx.TensorProto.INT8):
                from onnx.reference import ReferenceEvaluator

                return list(ReferenceEvaluator(model).run(None, feeds))
    return run_onnxruntime(model, feeds)


# Outcomes the summary counts: pass, refused (as the case must be), xfail (listed, and fails), and the two
# failures: fail (not listed) and xpass (listed, but the case now does what it must).
OUTCOMES = ("pass", "refused", "xfail", "fail", "xpass")


@dataclass(frozen=True)
class Result:
    """One case's outcome under the current listings, and the listing a fresh run would give it."""

    case: Case
    outcome: str
    detail: str
    entry: tuple[str, str] | None  # ('xfail' | 'refused', reason) for --write-expectations


def run_case(case: Case, backend: str = "numpy") -> Result:
    """Run `case` once (ignoring its listings), then judge it as pytest would with them; never raises."""
    build_error: BaseException | None = None
    status = ""
    try:
        status = check_case(case, honour_refused=False, backend=backend)
        entry = None
    except CaseFailure as err:
        build_error = err.build_error
        reason = first_line(err.build_error) if err.refusal and err.build_error else str(err).splitlines()[0][:300]
        entry = ("refused" if err.refusal else "xfail", reason)
    except Exception as err:  # a crash in Loam is a failure to report, not to propagate
        entry = ("xfail", first_line(err))
    listed_xfail = expectations(backend)["xfail"].get(case.id)
    listed_refused = expectations(backend)["refused"].get(case.id)
    if entry is None:
        if listed_xfail is not None:
            return Result(case, "xpass", f"listed as xfail ({listed_xfail}) but {status}", entry)
        if listed_refused is not None and status == "pass":
            return Result(case, "xpass", f"listed as refused ({listed_refused}) but passes", entry)
        return Result(case, status, "", entry)
    if listed_refused is not None and build_error is not None:
        return Result(case, "refused", listed_refused, entry)
    return Result(case, "xfail" if listed_xfail is not None else "fail", entry[1], entry)


def pytest_params(suite: str, marker: Callable[..., Any], backend: str = "numpy") -> list[Any]:
    """pytest parameters for `suite`: one per case, id = case name, strict xfail where listed."""
    import pytest

    listed = expectations(backend)["xfail"]
    params = []
    for c in cases(suite):
        reason = listed.get(c.id)
        marks = [marker(strict=True, reason=reason)] if reason is not None else []
        params.append(pytest.param(c, id=c.name if suite in ("node", DECLARED, "operators") else c.id, marks=marks))
    return params


def node_manifest() -> dict[str, Any]:
    """The content of node_cases.json, from collect_testcases() (the operator an expanded case tests is its
    base case's)."""
    collected = _collected_node_cases()
    entries: dict[str, dict[str, Any]] = {}
    for name, c in collected.items():
        base = re.sub(r"_expanded(_ver\d+)?$", "", name)
        source = collected.get(base, c)
        op = source.model.graph.node[0].op_type if len(source.model.graph.node) else ""
        entries[name] = {"op": op, "rtol": c.rtol, "atol": c.atol}
        if declared := shape_inputs(c.model):
            entries[name]["shape_inputs"] = declared
    return {"onnx": onnx.__version__, "count": len(entries), "cases": entries}


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
