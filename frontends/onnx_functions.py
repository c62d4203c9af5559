"""Function-bodied operators and model-local functions, expanded into their bodies before import.

ONNX defines some operators by a body of other operators (Attention, RotaryEmbedding, SwiGLU,
CausalConvWithState, ...; for some, such as Attention, the body depends on the node's attributes and
its inputs' element types), and a model may carry functions of its own (`ModelProto.functions`, as
torch's dynamo exporter writes them).  The body is the operator's meaning, so it is what Loam
computes where it has no rule of its own for the operator: each such node is replaced by a copy of
the body, with the node's inputs, outputs and attributes (or the schema's or function's defaults)
put in for the formal ones, recursively (a body may call another function).  An operator Loam has a
rule for keeps its node (the rule lowers it to the direct kernel), and so does one with neither a
rule nor a body: the build then refuses it by name.

A node of another domain whose rule writes a body of its own (`loam.ops.microsoft`'s attention
family: onnxruntime's contrib operators have no ONNX body) is expanded the same way, into the
default-domain nodes `domain_body` returns for it, read at the model's opsets.

A copied node is named `NODE/BODY` (NODE the expanded node's name, or its first output where it has
none; BODY the body node's name, or its op type and position), and a value internal to the body
`NODE/VALUE`, so a refusal inside a body names the node the model wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, cast

import onnx
from onnx import AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, TypeProto

from loam.core.errors import ModelError, UnsupportedError
from loam.core.limits import MAX_NESTING, LimitError, max_nodes
from loam.ops.microsoft.body import DomainBody

ONNX_DOMAINS = ("", "ai.onnx")

FunctionKey = tuple[str, str, str]
"""A model-local function's (domain, name, overload)."""


def expand_functions(
    model: ModelProto,
    source: str,
    has_rule: Callable[[str], bool],
    domain_body: Callable[[NodeProto], DomainBody | None] | None = None,
) -> ModelProto:
    """`model` with every call of a model-local function, every node of a default-domain operator
    that has a function body but no Loam rule (`has_rule(op_type)` false), and every node of another
    domain `domain_body` gives a body for, replaced by its body; `model` itself where there is none
    (it is never changed).  `source` names the file in errors."""
    expander = _Expander(model, source, has_rule, domain_body)
    if not model.functions and not any(expander.schema_body_needed(n) for n in all_nodes(model.graph)):
        return model
    expanded = ModelProto()
    expanded.CopyFrom(model)
    expander.graph(expanded.graph, 0)
    del expanded.functions[:]
    return expanded


def all_nodes(graph: GraphProto) -> Iterator[NodeProto]:
    """Every node of `graph` and of its subgraphs, at any depth."""
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.node:
            yield node
            for attr in node.attribute:
                stack.extend([attr.g] if attr.type == AttributeProto.GRAPH else attr.graphs)


def graph_names(graph: GraphProto) -> Iterator[str]:
    """Every value and node name `graph` and its subgraphs use."""
    for g in [graph, *(a.g for n in all_nodes(graph) for a in n.attribute if a.type == AttributeProto.GRAPH)]:
        yield from (v.name for v in [*g.input, *g.output, *g.value_info])
        yield from (t.name for t in g.initializer)
    for node in all_nodes(graph):
        yield node.name
        yield from node.input
        yield from node.output


def fresh_name(used: set[str], name: str) -> str:
    """`name`, or `name` with a `#k` suffix where the graph already uses it; then it is used."""
    candidate, k = name, 1
    while candidate in used:
        candidate, k = f"{name}#{k}", k + 1
    used.add(candidate)
    return candidate


class FunctionSchema(Protocol):
    """What the expander reads of an `onnx.defs.OpSchema` whose operator has a body: its function API,
    which onnx's type stubs leave out though every OpSchema has it."""

    @property
    def has_function(self) -> bool: ...
    @property
    def has_context_dependent_function(self) -> bool: ...
    @property
    def function_opset_versions(self) -> list[int]: ...
    @property
    def context_dependent_function_opset_versions(self) -> list[int]: ...
    @property
    def attributes(self) -> dict[str, onnx.defs.OpSchema.Attribute]: ...
    def get_function_with_opset_version(self, opset: int, /) -> bytes: ...
    def get_context_dependent_function_with_opset_version(
        self, opset: int, node: bytes, inputs: Sequence[bytes], /
    ) -> bytes: ...


class _Expander:
    def __init__(
        self,
        model: ModelProto,
        source: str,
        has_rule: Callable[[str], bool],
        domain_body: Callable[[NodeProto], DomainBody | None] | None = None,
    ) -> None:
        self.model = model
        self.source = source
        self.has_rule = has_rule
        self.domain_body = domain_body
        self.opsets = {"" if o.domain == "ai.onnx" else o.domain: o.version for o in model.opset_import}
        self.local: dict[FunctionKey, FunctionProto] = {(f.domain, f.name, f.overload): f for f in model.functions}
        self.types: dict[str, TypeProto] | None = None  # value name -> type, inferred when first needed
        self.used: set[str] = set()
        self.nodes = 0

    def fail(self, message: str) -> ModelError:
        return ModelError(f"{self.source}: {message}")

    # -- which body a node has

    def schema_body_needed(self, node: NodeProto) -> bool:
        if node.domain not in ONNX_DOMAINS:
            return self.domain_body is not None and self.domain_body(node) is not None
        return not self.has_rule(node.op_type) and self.schema(node) is not None

    def schema(self, node: NodeProto) -> FunctionSchema | None:
        """The schema of a default-domain node at the model's opset, where it defines a body."""
        try:
            found = onnx.defs.get_schema(node.op_type, self.opsets.get("", 1), "")
        except onnx.defs.SchemaError:
            return None
        schema = cast(FunctionSchema, found)  # an OpSchema: onnx's stubs leave its function API out
        return schema if schema.has_function or schema.has_context_dependent_function else None

    def body(self, node: NodeProto, where: str) -> tuple[FunctionProto, dict[str, AttributeProto]] | None:
        """The function `node` calls and the attribute defaults of its formal attributes, or None."""
        local = self.local.get((node.domain, node.op_type, node.overload))
        if local is not None and node.domain in self.opsets:  # else the importer names the missing domain
            return local, {a.name: a for a in local.attribute_proto}
        if node.domain not in ONNX_DOMAINS or self.has_rule(node.op_type):
            return None
        schema = self.schema(node)
        if schema is None:
            return None
        opset = self.opsets.get("", 1)
        plain = [v for v in schema.function_opset_versions if v <= opset]
        contextual = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
        if not plain and not contextual:
            return None  # its bodies are all for later opsets: refused as an operator Loam lacks
        function = FunctionProto()
        if contextual and (not plain or max(contextual) >= max(plain)):
            inputs = [self.type_of(name, node, where).SerializeToString() for name in node.input]
            text = schema.get_context_dependent_function_with_opset_version(
                max(contextual), node.SerializeToString(), inputs
            )
        else:
            text = schema.get_function_with_opset_version(max(plain))
        function.ParseFromString(text)
        defaults = {n: a.default_value for n, a in schema.attributes.items() if a.default_value.name}
        return function, defaults

    def type_of(self, name: str, node: NodeProto, where: str) -> TypeProto:
        """The type of value `name` (an input of `node`), from ONNX's shape inference over the model."""
        if not name:
            return TypeProto()  # an absent optional input
        found = self.known_type(name)
        if found is None:
            raise UnsupportedError(
                f"{self.source}: {where}: {node.op_type}'s body depends on its inputs' element types, and "
                f"ONNX's shape inference does not give the type of input '{name}'"
            )
        return found

    def known_type(self, name: str) -> TypeProto | None:
        """The type ONNX's shape inference over the model (as given) gives value `name`, or None."""
        if self.types is None:
            try:
                inferred = onnx.shape_inference.infer_shapes(self.model, strict_mode=False)
            except Exception:
                inferred = self.model
            g = inferred.graph
            self.types = {v.name: v.type for v in [*g.input, *g.value_info, *g.output]}
            for t in g.initializer:
                self.types.setdefault(t.name, onnx.helper.make_tensor_type_proto(t.data_type, t.dims))
        return self.types.get(name)

    # -- expansion

    def graph(self, graph: GraphProto, depth: int) -> None:
        if not self.used:
            self.used = set(graph_names(graph))
        nodes = [n for node in graph.node for n in self.node(node, depth, f"graph '{graph.name}'")]
        del graph.node[:]
        graph.node.extend(nodes)

    def node(self, node: NodeProto, depth: int, where: str) -> list[NodeProto]:
        label = node.name or (node.output[0] if node.output else node.op_type)
        here = f"{where}: {node.op_type} node '{label}'"
        for attr in node.attribute:
            for g in [attr.g] if attr.type == AttributeProto.GRAPH else attr.graphs:
                self.graph(g, depth + 1)
        written = self.domain_body(node) if self.domain_body is not None and node.domain not in ONNX_DOMAINS else None
        if written is not None:
            nodes = written(node, label, self.fresh, self.known_type, self.opsets.get("", 1))
            return [n for body_node in nodes for n in self.node(body_node, depth + 1, where)]
        found = self.body(node, here)
        if found is None:
            self.nodes += 1
            if self.nodes > max_nodes():
                raise LimitError(
                    f"{self.source}: expanding function bodies makes more than {max_nodes()} nodes, past "
                    "Loam's limit (loam.core.limits.MAX_NODES; set LOAM_MAX_NODES to raise it)"
                )
            return [node]
        if depth >= MAX_NESTING:
            raise LimitError(
                f"{self.source}: {here}: function bodies call each other {depth} deep, past Loam's limit of "
                f"{MAX_NESTING} (loam.core.limits.MAX_NESTING); a function that calls itself never ends"
            )
        function, defaults = found
        self.check_opsets(function, here)
        return [
            n
            for body_node in self.instantiate(node, label, function, defaults, here)
            for n in self.node(body_node, depth + 1, where)
        ]

    def check_opsets(self, function: FunctionProto, where: str) -> None:
        """A body is read at the model's opsets, so one written for others is refused."""
        for entry in function.opset_import:
            domain = "" if entry.domain == "ai.onnx" else entry.domain
            model = self.opsets.get(domain)
            if domain == "" and model is not None and model != entry.version and function.domain not in ONNX_DOMAINS:
                raise UnsupportedError(
                    f"{self.source}: {where}: function '{function.name}' imports opset {entry.version} of the "
                    f"default domain, the model {model}; Loam reads a body at the model's opsets"
                )
            if model is None:
                self.opsets[domain] = entry.version
                self.model.opset_import.append(onnx.helper.make_opsetid(entry.domain, entry.version))

    def fresh(self, name: str) -> str:
        return fresh_name(self.used, name)

    def instantiate(
        self,
        node: NodeProto,
        label: str,
        function: FunctionProto,
        defaults: dict[str, AttributeProto],
        where: str,
    ) -> list[NodeProto]:
        """`function`'s body with `node`'s values and attributes in place of the formal ones."""
        if len(node.input) > len(function.input) or len(node.output) > len(function.output):
            raise self.fail(
                f"{where}: {len(node.input)} inputs and {len(node.output)} outputs, but its function "
                f"'{function.name}' takes {len(function.input)} and gives {len(function.output)}"
            )
        names: dict[str, str] = {"": ""}
        for k, formal in enumerate(function.input):
            names[formal] = node.input[k] if k < len(node.input) else ""
        for k, formal in enumerate(function.output):
            if k < len(node.output) and node.output[k]:
                names[formal] = node.output[k]
        actual = {a.name: a for a in node.attribute}
        for name, value in defaults.items():
            actual.setdefault(name, value)

        computed = set(function.input) | {out for n in function.node for out in n.output}
        bound = [formal for k, formal in enumerate(function.output) if k < len(node.output) and node.output[k]]
        missing = [name for name in bound if name not in computed]
        if missing:
            raise self.fail(f"{where}: its function '{function.name}' never computes its output '{missing[0]}'")

        def rename(name: str) -> str:
            if name not in names:
                names[name] = self.fresh(f"{label}/{name}")
            return names[name]

        copies = []
        for k, body_node in enumerate(function.node):
            copy = NodeProto()
            copy.CopyFrom(body_node)
            copy.name = self.fresh(f"{label}/{body_node.name or f'{body_node.op_type}_{k}'}")
            _substitute(copy, rename, actual)
            copies.append(copy)
        return copies


def _substitute(node: NodeProto, rename: Callable[[str], str], actual: dict[str, AttributeProto]) -> None:
    """Rename `node`'s values (in its subgraphs too) and put `actual` in for its attribute references."""
    node.input[:] = [rename(n) for n in node.input]
    node.output[:] = [rename(n) for n in node.output]
    kept = []
    for attr in node.attribute:
        if attr.ref_attr_name:
            given = actual.get(attr.ref_attr_name)
            if given is None:
                continue  # neither given nor defaulted: the attribute is absent
            value = AttributeProto()
            value.CopyFrom(given)
            value.name = attr.name
            attr = value
        for g in [attr.g] if attr.type == AttributeProto.GRAPH else attr.graphs:
            _substitute_graph(g, rename, actual)
        kept.append(attr)
    del node.attribute[:]
    node.attribute.extend(kept)


def _substitute_graph(graph: GraphProto, rename: Callable[[str], str], actual: dict[str, AttributeProto]) -> None:
    for value in [*graph.input, *graph.output, *graph.value_info]:
        value.name = rename(value.name)
    for tensor in graph.initializer:
        tensor.name = rename(tensor.name)
    for node in graph.node:
        _substitute(node, rename, actual)
