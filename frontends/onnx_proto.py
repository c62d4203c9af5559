"""The ONNX importer: a `ModelProto` (from a `.onnx` or `.onnxtext` file) to the `graph` dialect.

    module = read_model("model.onnx")            # builtin.module { graph.model {...} }
    module = import_model(onnx.load(path), source="model.onnx")

The IR keeps everything the exporter needs to write the model back (`loam.frontends.onnx_export`),
except functions and Scans: a call of a model-local function, and a node of an operator ONNX defines
by a body but Loam has no rule for, are first replaced by their bodies (`loam.frontends.onnx_functions`),
and a Scan by its iterations where the model fixes its length, by a Loop where it is a symbol
(`loam.frontends.onnx_scan`).
Nothing else is interpreted here: no shape inference, no opset conversion, and external data is never
read (only its location is checked: it must resolve inside the model's folder, symlinks followed, so
a graph cannot point the build or `loam split` at a file elsewhere).  Every refusal is a `ModelError`
or `UnsupportedError` that names the file and the node, tensor or value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, TypeProto, numpy_helper
from xdsl.dialects.builtin import (
    BytesAttr,
    DictionaryAttr,
    Float32Type,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from loam.core.dtypes import ElementType, by_onnx
from loam.core.errors import ModelError, UnsupportedError
from loam.core.limits import MAX_NESTING, LimitError, check_extents, max_nodes
from loam.dialects.graph import (
    BytesValueAttr,
    GraphOp,
    InitializerOp,
    ListAttr,
    MapType,
    ModelOp,
    NodeOp,
    NoneOp,
    OptType,
    ReturnOp,
    SeqType,
    SparseDataAttr,
    SparseTensorType,
    SubgraphAttr,
    SubgraphInfoOp,
    TensorDataAttr,
    TensorType,
    UnknownType,
    set_name_hint,
)
from loam.frontends.onnx_functions import expand_functions
from loam.frontends.onnx_scan import unroll_scans

__all__ = ["check_external_data_sources", "check_model_proto", "external_data_path", "import_model", "read_model"]


def read_model(path: str | Path) -> ModuleOp:
    """Read `.onnx` (protobuf) or `.onnxtext` (ONNX's textual form) at `path` into the graph dialect."""
    path = Path(path)
    if path.suffix == ".onnxtext":
        from loam.frontends.onnx_text import read_onnx_text  # another reader; imported only when used

        return import_model(read_onnx_text(path), source=str(path), folder=path.parent)
    if path.suffix != ".onnx":
        raise ModelError(f"{path}: expected a .onnx or .onnxtext file")
    try:
        # External data stays where it is: the importer only records (and checks) its location.
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError) as err:
        raise ModelError(f"{path}: not a readable ONNX protobuf ({err})") from None
    except OSError as err:
        raise ModelError(f"{path}: cannot read the file ({err.strerror or err})") from None
    return import_model(model, source=str(path), folder=path.parent)


def import_model(model: ModelProto, source: str = "<model>", *, folder: Path | None = None) -> ModuleOp:
    """The graph-dialect module of `model`; `source` names the file in error messages.

    `folder` is the model file's folder: external data locations must resolve inside it (symlinks
    followed).  Without it (an in-memory model) only the location's spelling is checked.
    """
    from loam.ops import RULES, domain_body

    check_model_proto(model, source)
    model = unroll_scans(expand_functions(model, source, lambda op_type: op_type in RULES, domain_body), source)
    return ModuleOp([_Importer(model, source, folder).model_op()])


def check_model_proto(model: ModelProto, source: str = "<model>") -> None:
    """Refuse a model whose text is not text or whose size is past `loam.core.limits`, before importing it.

    Every string field (names, op types, domains, doc strings, metadata, dim_params, ...) must be
    valid UTF-8: protobuf hands an invalid one over as bytes, which nothing after the reader expects.
    The nodes are counted (`MAX_NODES`, subgraphs included) and the graphs' nesting measured
    (`MAX_NESTING`); the walk is iterative, so a deep model cannot exhaust the stack here.  Errors
    name the file and the path to the field: `graph 'g': node #3 (Relu): name`.
    """
    limit = max_nodes()
    nodes = 0
    stack: list[tuple[Message, str, int]] = [(model, "", 0)]
    while stack:
        message, where, depth = stack.pop()
        if isinstance(message, GraphProto):
            depth += 1
            if depth > MAX_NESTING:
                raise LimitError(
                    f"{source}: {where}: graphs nest {depth} deep, past Loam's limit of {MAX_NESTING} "
                    "(loam.core.limits.MAX_NESTING)"
                )
            nodes += len(message.node)
            if nodes > limit:
                raise LimitError(
                    f"{source}: {where or 'the model'}: more than {limit} nodes, past Loam's limit "
                    "(loam.core.limits.MAX_NODES; set LOAM_MAX_NODES to raise it)"
                )
        for field, value in message.ListFields():
            if field.type == field.TYPE_STRING:
                for k, text in enumerate(value if _repeated(field) else [value]):
                    if not isinstance(text, str):
                        at = f"{field.name} #{k}" if _repeated(field) else field.name
                        raise ModelError(
                            f"{source}: {_join(where, at)}: not valid UTF-8 text ({bytes(text)[:40]!r}); "
                            "ONNX strings are UTF-8"
                        )
            elif field.type == field.TYPE_MESSAGE:
                items = list(value) if _repeated(field) else [value]
                for k, item in reversed(list(enumerate(items))):
                    label = _label(field.name, item, k if _repeated(field) else None)
                    stack.append((item, _join(where, label), depth))


def _repeated(field: FieldDescriptor) -> bool:
    repeated = getattr(field, "is_repeated", None)  # protobuf 5.29+; `label` before it
    return bool(repeated) if repeated is not None else field.label == field.LABEL_REPEATED


def _join(where: str, step: str) -> str:
    return f"{where}: {step}" if where else step


def _label(field: str, item: Message, index: int | None) -> str:
    """How an error names one message of the model: `node #3 'fc1' (Gemm)`, `initializer #0 'w'`."""
    kinds = {"node": "node", "initializer": "initializer", "input": "input", "output": "output",
             "value_info": "value_info", "attribute": "attribute", "graph": "graph", "graphs": "graph",
             "g": "graph", "sparse_initializer": "sparse initializer"}  # fmt: skip
    text = kinds.get(field, field)
    if index is not None:
        text += f" #{index}"
    name = getattr(item, "name", None)
    if isinstance(name, str) and name and field in kinds:
        text += f" '{name}'"
    op_type = getattr(item, "op_type", None)
    if isinstance(op_type, str) and op_type:
        text += f" ({op_type})"
    return text


def external_data_path(folder: Path | None, location: str) -> tuple[Path | None, str | None]:
    """Where external data at `location` lives: (the resolved path, None), or (None, why it is refused).

    Refused: an absolute path or drive, a `..` part (in POSIX or Windows spelling), and, given the
    model's `folder`, a path whose real location (symlinks resolved) is outside that folder.  Without
    a folder the path is None when the spelling is fine.
    """
    if not location:
        return None, "external data location is empty"
    for flavour in (PurePosixPath, PureWindowsPath):
        spelled = flavour(location)
        if spelled.is_absolute() or spelled.drive or ".." in spelled.parts:
            return None, f"external data location '{location}' is outside the model's folder"
    if folder is None:
        return None, None
    base = folder.resolve()
    real = (base / location).resolve()
    if not real.is_relative_to(base):
        return None, f"external data location '{location}' resolves to '{real}', outside the model's folder"
    return real, None


def check_external_data_sources(ir: ModuleOp, model: str | Path | None, supplied: Mapping[str, Path | str]) -> None:
    """Refuse an initializer that names its own data file while a checkpoint also supplies it.

    The two would say different things about where one tensor's bytes are.  "Its own data file" is
    ONNX external data proper: raw bytes beside the model (`model.onnx.data`, `weights.bin`), as
    `onnx.save_model(..., save_as_external_data=True)` writes them.  A location inside a
    `.safetensors` file is a checkpoint reference (what `loam split` writes, and the shipped
    examples); the checkpoints the invocation names supply those tensors (a sharded or GGUF copy of
    the same weights included), so it is accepted.  `supplied` maps each tensor a checkpoint holds
    to that checkpoint's path; `model` is the model file (None for an in-memory model).
    """
    from loam.dialects.graph import InitializerOp

    for op in ir.walk():
        if not isinstance(op, InitializerOp) or op.value is None or not op.value.is_external:
            continue
        name = op.onnx_name.data
        checkpoint = supplied.get(name)
        if checkpoint is None:
            continue
        location = dict(op.value.external_entries).get("location", "")
        if PurePosixPath(location.replace("\\", "/")).suffix.lower() == ".safetensors":
            continue
        where = f"{model}: " if model is not None else ""
        raise ModelError(
            f"{where}initializer '{name}' names its own data file '{location}', but checkpoint {checkpoint} "
            "also supplies it; drop one of them (`loam split` writes a graph whose weights are the checkpoint's)"
        )


class _Importer:
    def __init__(self, model: ModelProto, source: str, folder: Path | None = None) -> None:
        self.model = model
        self.source = source
        self.folder = folder
        self.opsets: dict[str, int] = {}
        for entry in model.opset_import:
            self.opsets["" if entry.domain == "ai.onnx" else entry.domain] = entry.version

    def fail(self, message: str) -> ModelError:
        return ModelError(f"{self.source}: {message}")

    # ---- model and graphs

    def model_op(self) -> ModelOp:
        m = self.model
        if m.training_info:
            raise UnsupportedError(f"{self.source}: training_info is not supported")
        props: dict[str, Attribute] = {
            "ir_version": IntegerAttr(m.ir_version, i64),
            "opset_import": DictionaryAttr({e.domain: IntegerAttr(e.version, i64) for e in m.opset_import}),
        }
        for field in ("producer_name", "producer_version", "domain", "doc_string"):
            if m.HasField(field):
                props[field] = StringAttr(getattr(m, field))
        if m.HasField("model_version"):
            props["model_version"] = IntegerAttr(m.model_version, i64)
        if m.metadata_props:
            props["metadata_props"] = DictionaryAttr({p.key: StringAttr(p.value) for p in m.metadata_props})
        graph = self.graph(m.graph, [], top=True)
        assert isinstance(graph, GraphOp)
        return ModelOp(props, Region(Block([graph])))

    def graph(self, g: GraphProto, scopes: list[dict[str, SSAValue]], top: bool) -> GraphOp | Region:
        """The top graph as a `graph.graph`, or a subgraph as a region (`scopes`: enclosing names)."""
        from loam.ops import operand_names

        _check_names(g, self.source)
        where = f"graph '{g.name}'"
        if g.sparse_initializer:
            raise UnsupportedError(f"{self.source}: {where}: sparse initializers are not supported")
        if g.quantization_annotation:
            raise UnsupportedError(f"{self.source}: {where}: quantization annotations are not supported")
        if top and not g.output:
            raise self.fail(f"{where}: the graph declares no outputs; a model computes at least one")
        value_types = {vi.name: self.type(vi.type, f"{where}: value_info '{vi.name}'") for vi in g.value_info}
        block = Block(arg_types=[self.type(vi.type, f"{where}: input '{vi.name}'") for vi in g.input])
        scope: dict[str, SSAValue] = {}
        scopes = [*scopes, scope]

        def define(name: str, value: SSAValue, what: str) -> None:
            if not name:
                return
            if name in scope:
                raise self.fail(f"{where}: {what} '{name}' is defined twice")
            scope[name] = value
            set_name_hint(value, name)

        for vi, arg in zip(g.input, block.args, strict=True):
            define(vi.name, arg, "input")
        ops: list[Operation] = []
        if not top:
            ops.append(SubgraphInfoOp(g.name, [vi.name for vi in g.input], g.doc_string or None))
        for init in g.initializer:
            data = self.tensor(init, f"{where}: initializer '{init.name}'", keep_name=False)
            ty = TensorType(data.elem, data.shape)
            default_of = scope.get(init.name)
            if default_of is not None and isinstance(default_of.owner, Block):
                # An initializer named like an input is that input's default value.
                op = InitializerOp(init.name, ty, data, default_of)
                ops.append(op)
                continue
            op = InitializerOp(init.name, ty, data)
            ops.append(op)
            define(init.name, op.result, "initializer")

        def lookup(name: str) -> SSAValue | None:
            for frame in reversed(scopes):
                if name in frame:
                    return frame[name]
            return None

        for index, node in enumerate(g.node):
            node_where = f"{where}: node '{node.name}' ({node.op_type}, #{index})"
            inputs: list[SSAValue] = []
            for name in operand_names(node):
                if not name:
                    none = NoneOp()
                    ops.append(none)
                    inputs.append(none.result)
                    continue
                value = lookup(name)
                if value is None:
                    raise self.fail(
                        f"{node_where}: input '{name}' is not defined earlier (ONNX nodes are in topological order)"
                    )
                inputs.append(value)
            node_op = self.node(node, inputs, scopes, value_types, node_where)
            ops.append(node_op)
            for name, result in zip(node.output, node_op.results, strict=True):
                define(name, result, f"value (output of node '{node.name}')")
        outputs: list[SSAValue] = []
        for vi in g.output:
            value = lookup(vi.name)
            if value is None:
                raise self.fail(f"{where}: output '{vi.name}' is not computed by the graph")
            outputs.append(value)
        ops.append(
            ReturnOp(
                outputs,
                [vi.name for vi in g.output],
                [self.type(vi.type, f"{where}: output '{vi.name}'") for vi in g.output],
            )
        )
        block.add_ops(ops)
        if top:
            return GraphOp(g.name, [vi.name for vi in g.input], Region(block), g.doc_string or None)
        return Region(block)

    def node(
        self,
        node: NodeProto,
        inputs: list[SSAValue],
        scopes: list[dict[str, SSAValue]],
        value_types: dict[str, Attribute],
        where: str,
    ) -> NodeOp:
        domain = "" if node.domain == "ai.onnx" else node.domain
        if domain not in self.opsets:
            raise self.fail(f"{where}: its domain '{node.domain}' is not in the model's opset_import")
        regions: list[Region] = []
        attrs: dict[str, Attribute] = {}
        for attr in node.attribute:
            if attr.name in attrs:
                raise self.fail(f"{where}: attribute '{attr.name}' is given twice")
            attrs[attr.name] = self.attribute(attr, regions, scopes, f"{where}: attribute '{attr.name}'")
        return NodeOp(
            node.op_type,
            inputs,
            [value_types.get(name, UnknownType()) if name else UnknownType() for name in node.output],
            list(node.output),
            node_name=node.name,
            domain=node.domain,
            since=self.opsets[domain],
            attrs=attrs,
            regions=regions,
            doc_string=node.doc_string or None,
        )

    # ---- attributes, tensors and types

    def attribute(
        self, a: AttributeProto, regions: list[Region], scopes: list[dict[str, SSAValue]], where: str
    ) -> Attribute:
        if a.ref_attr_name:
            raise UnsupportedError(f"{self.source}: {where}: attribute references only occur in functions")
        kind = a.type
        A = AttributeProto
        if kind == A.INT:
            return IntegerAttr(a.i, i64)
        if kind == A.FLOAT:
            return FloatAttr(a.f, Float32Type())
        if kind == A.STRING:
            return _string_attr(a.s)
        if kind == A.TENSOR:
            return self.tensor(a.t, where, keep_name=True)
        if kind == A.SPARSE_TENSOR:
            return self.sparse(a.sparse_tensor, where)
        if kind == A.TYPE_PROTO:
            return self.type(a.tp, where)
        if kind == A.GRAPH:
            regions.append(self.subgraph(a.g, scopes))
            return SubgraphAttr(len(regions) - 1)
        if kind == A.INTS:
            return ListAttr("ints", [IntAttr(v) for v in a.ints])
        if kind == A.FLOATS:
            return ListAttr("floats", [FloatAttr(v, Float32Type()) for v in a.floats])
        if kind == A.STRINGS:
            return ListAttr("strings", [BytesAttr(v) for v in a.strings])
        if kind == A.TENSORS:
            return ListAttr("tensors", [self.tensor(t, where, keep_name=True) for t in a.tensors])
        if kind == A.SPARSE_TENSORS:
            return ListAttr("sparse_tensors", [self.sparse(t, where) for t in a.sparse_tensors])
        if kind == A.TYPE_PROTOS:
            return ListAttr("types", [self.type(t, where) for t in a.type_protos])
        if kind == A.GRAPHS:
            indices: list[Attribute] = []
            for g in a.graphs:
                regions.append(self.subgraph(g, scopes))
                indices.append(IntAttr(len(regions) - 1))
            return ListAttr("graphs", indices)
        raise self.fail(f"{where}: attribute type {kind} is not one ONNX defines")

    def subgraph(self, g: GraphProto, scopes: list[dict[str, SSAValue]]) -> Region:
        region = self.graph(g, scopes, top=False)
        assert isinstance(region, Region)
        return region

    def elem(self, code: int, where: str) -> ElementType:
        try:
            return by_onnx(code)
        except KeyError:
            raise self.fail(f"{where}: element type code {code} is not one ONNX defines") from None

    def tensor(self, t: TensorProto, where: str, keep_name: bool) -> TensorDataAttr:
        elem = self.elem(t.data_type, where)
        name = t.name if keep_name else ""
        shape = list(t.dims)
        if any(d < 0 for d in shape):
            raise self.fail(f"{where}: the tensor's dims {shape} hold a negative extent")
        check_extents(shape, f"{self.source}: {where}")
        if t.data_location == TensorProto.EXTERNAL:
            entries = [(e.key, e.value) for e in t.external_data]
            for key, value in entries:
                if key == "location":
                    self.check_location(value, where)
            if not any(key == "location" for key, _ in entries):
                raise self.fail(f"{where}: external data without a location")
            return TensorDataAttr(elem, shape, external=entries, name=name)
        if elem.name == "string":
            return TensorDataAttr(elem, shape, strings=list(t.string_data), name=name)
        if t.HasField("raw_data"):
            raw = t.raw_data
        elif elem.numpy is None:
            raise UnsupportedError(f"{self.source}: {where}: {elem.name} data must be given as raw_data")
        else:
            # Typed fields (float_data, int32_data, ...) become the canonical raw bytes.
            try:
                array = numpy_helper.to_array(t)
            except Exception as err:  # onnx raises bare exceptions for inconsistent fields
                raise self.fail(f"{where}: malformed tensor data ({err})") from None
            return _checked(lambda: TensorDataAttr.from_numpy(array, elem, name), self.fail, where)
        return _checked(lambda: TensorDataAttr(elem, shape, raw=raw, name=name), self.fail, where)

    def sparse(self, s: onnx.SparseTensorProto, where: str) -> SparseDataAttr:
        return SparseDataAttr(
            list(s.dims),
            self.tensor(s.values, where, keep_name=True),
            self.tensor(s.indices, where, keep_name=True),
        )

    def check_location(self, location: str, where: str) -> None:
        """External data must stay inside the model's folder: no absolute path, no `..`, no symlink out."""
        _, refusal = external_data_path(self.folder, location)
        if refusal is not None:
            raise self.fail(f"{where}: {refusal}")

    def type(self, tp: TypeProto, where: str) -> Attribute:
        which = tp.WhichOneof("value")
        if which is None:
            return UnknownType()
        if which in ("tensor_type", "sparse_tensor_type"):
            inner = getattr(tp, which)
            elem = self.elem(inner.elem_type, where)
            dims: list[int | str | None] | None = None
            if inner.HasField("shape"):
                dims = []
                for d in inner.shape.dim:
                    kind = d.WhichOneof("value")
                    dims.append(d.dim_value if kind == "dim_value" else d.dim_param if kind else None)
                    if kind == "dim_value" and d.dim_value < 0:
                        raise self.fail(f"{where}: negative dim {d.dim_value}")
                check_extents([d if isinstance(d, int) else 1 for d in dims], f"{self.source}: {where}")
            cls = TensorType if which == "tensor_type" else SparseTensorType
            return cls(elem, dims)
        if which == "sequence_type":
            return SeqType(self.type(tp.sequence_type.elem_type, where))
        if which == "optional_type":
            return OptType(self.type(tp.optional_type.elem_type, where))
        if which == "map_type":
            return MapType(self.elem(tp.map_type.key_type, where), self.type(tp.map_type.value_type, where))
        raise UnsupportedError(f"{self.source}: {where}: type '{which}' is not supported")


def _string_attr(value: bytes) -> Attribute:
    # xDSL 0.75 prints a non-ASCII StringAttr as escaped bytes it then reads back as bytes, so only
    # ASCII strings become StringAttr; the rest keep their bytes in #graph.bytes.
    if value.isascii():
        return StringAttr(value.decode("ascii"))
    return BytesValueAttr(value)


def _checked(make: Callable[[], TensorDataAttr], fail: Callable[[str], ModelError], where: str) -> TensorDataAttr:
    """Build a data attribute, turning a size mismatch into a ModelError naming the tensor."""
    try:
        return make()
    except VerifyException as err:
        raise fail(f"{where}: {err}") from None


def _check_names(g: GraphProto, source: str) -> None:
    """Refuse a name in graph `g` (not its subgraphs) that holds a character that is not printable (a
    NUL, a line break, ...): names reach the module's comments, where a line break would end the
    comment and the rest of the name would run as code.  (`check_model_proto` has already refused
    every string field that is not UTF-8, names included.)"""

    def check(text: str, what: str) -> None:
        if not text.isprintable():
            raise ModelError(f"{source}: {what}: the name {text!r} holds a character that is not printable")

    check(g.name, "graph name")
    where = f"graph {g.name!r}"
    for kind, items in (("input", g.input), ("output", g.output), ("value_info", g.value_info)):
        for i, item in enumerate(items):
            check(item.name, f"{where}: {kind} #{i}")
    for i, init in enumerate(g.initializer):
        check(init.name, f"{where}: initializer #{i}")
    for i, node in enumerate(g.node):
        check(node.name, f"{where}: node #{i}")
        for j, text in enumerate(node.input):
            check(text, f"{where}: node #{i} ({node.name!r}) input #{j}")
        for j, text in enumerate(node.output):
            check(text, f"{where}: node #{i} ({node.name!r}) output #{j}")
