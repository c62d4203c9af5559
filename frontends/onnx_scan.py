"""Scan, rewritten before import: unrolled where the model fixes its length, a Loop where only the run knows it.

ONNX Scan (opset 9 on) runs its body once per position of its scan inputs' scan axis, carrying state
values from one iteration to the next and stacking each iteration's scan-output elements.  Where
that length is a number in the model (the scan inputs' declared or inferred extent), Loam replaces
the node by one copy of the body per iteration: each scan input's element is a Gather at the
iteration's position, the states flow from copy to copy, and each scan output is the Concat of its
elements, each Unsqueezed at the output axis.  What Loam builds from that is ordinary: every
extent is settled and checked as everywhere else, and each iteration is one straight run of kernels.

Where the length is a symbol (only the run knows it), the node becomes an ONNX Loop named as the
Scan: its trip count is the first scan input's scan-axis extent (Shape, Gather), it has no cond, and
its body is the Scan's body with, in front, a Gather of each scan input at the iteration's position
(length - 1 - i for a reversed input); the states are its loop-carried values and the scan outputs
its scan outputs, which it stacks on axis 0, so each is then reversed (Slice, step -1) where its
direction says so and moved to its scan_output_axes (Transpose).  onnxruntime refuses a Scan of no
iterations, and scan inputs of different lengths; so does such a module, at run time (a ShapeError
naming `NODE/first_element` or `NODE/same_length`).

An opset 8 Scan (batched, with sequence_lens), a Scan the model fixes at no iterations, an opset 9
Scan over a symbolic length with a reversed output (Slice takes no steps before opset 10), and one
whose scan output of unknown rank goes to an axis other than 0 stay as they are, and the build
refuses them naming the node (`loam.ops.WHY_NOT`).

Copies are named `NODE/iter{t}/BODY` (values `NODE/iter{t}/VALUE`), so a refusal inside the body
names the iteration and the node the model wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TypeProto, helper, numpy_helper

from loam.core.limits import LimitError, max_nodes
from loam.frontends.onnx_functions import ONNX_DOMAINS, all_nodes, fresh_name, graph_names


def unroll_scans(model: ModelProto, source: str) -> ModelProto:
    """`model` with each Scan of the main graph (and its subgraphs) unrolled (or made a Loop); `model` itself where it
    has none (it is never changed)."""
    if not any(n.op_type == "Scan" and n.domain in ONNX_DOMAINS for n in all_nodes(model.graph)):
        return model
    unrolled = ModelProto()
    unrolled.CopyFrom(model)
    _Unroller(unrolled, source).graph(unrolled.graph)
    return unrolled


class _Unroller:
    def __init__(self, model: ModelProto, source: str) -> None:
        self.model = model
        self.source = source
        self.types: dict[str, TypeProto] | None = None
        self.used: set[str] = set()
        self.nodes = 0

    def graph(self, graph: GraphProto) -> None:
        if not self.used:
            self.used = set(graph_names(graph))
        out: list[NodeProto] = []
        for node in graph.node:
            for attr in node.attribute:
                for g in [attr.g] if attr.type == AttributeProto.GRAPH else attr.graphs:
                    self.graph(g)
            copies = self.unroll(node, graph) if node.op_type == "Scan" and node.domain in ONNX_DOMAINS else None
            out += [node] if copies is None else copies
        self.nodes += len(out)
        if self.nodes > max_nodes():
            raise LimitError(
                f"{self.source}: unrolling Scan makes more than {max_nodes()} nodes, past Loam's limit "
                "(loam.core.limits.MAX_NODES; set LOAM_MAX_NODES to raise it)"
            )
        del graph.node[:]
        graph.node.extend(out)

    def fresh(self, name: str) -> str:
        return fresh_name(self.used, name)

    def type_of(self, name: str) -> TypeProto | None:
        """The type of value `name` with its shape, from ONNX's shape inference; None where unknown."""
        if self.types is None:
            try:
                inferred = onnx.shape_inference.infer_shapes(self.model, strict_mode=False, data_prop=True)
            except Exception:
                inferred = self.model
            g = inferred.graph
            self.types = {v.name: v.type for v in [*g.input, *g.value_info, *g.output]}
            for t in g.initializer:
                self.types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, t.dims))
        found = self.types.get(name)
        return found if found is not None and found.tensor_type.HasField("shape") else None

    def unroll(self, node: NodeProto, graph: GraphProto) -> list[NodeProto] | None:
        """The node's iterations, its Loop where its length is a symbol, or None where it stays."""
        label = node.name or (node.output[0] if node.output else "Scan")
        opset = next((o.version for o in self.model.opset_import if o.domain in ONNX_DOMAINS), 1)
        attrs = {a.name: a for a in node.attribute}
        if opset < 9 or "body" not in attrs or "num_scan_inputs" not in attrs:
            return None
        body = attrs["body"].g
        m = attrs["num_scan_inputs"].i
        n = len(node.input) - m
        k = len(body.output) - n
        if n < 0 or k < 0 or len(body.input) != n + m:
            return None  # malformed: the build names it
        in_dirs = list(attrs["scan_input_directions"].ints) if "scan_input_directions" in attrs else [0] * m
        out_dirs = list(attrs["scan_output_directions"].ints) if "scan_output_directions" in attrs else [0] * k
        in_axes = list(attrs["scan_input_axes"].ints) if "scan_input_axes" in attrs else [0] * m
        out_axes = list(attrs["scan_output_axes"].ints) if "scan_output_axes" in attrs else [0] * k
        scans = list(node.input[n:])
        lengths: set[int | None] = set()
        if m < 1 or len(in_axes) != m or len(in_dirs) != m or len(out_axes) != k or len(out_dirs) != k:
            return None
        for j, (name, axis) in enumerate(zip(scans, in_axes, strict=True)):
            known = self.type_of(name)
            dims = known.tensor_type.shape.dim if known is not None else None
            if dims is not None:
                axis = axis + len(dims) if axis < 0 else axis
                if not 0 <= axis < len(dims):
                    return None  # malformed: the build names it
                in_axes[j] = axis
            lengths.add(dims[axis].dim_value if dims is not None and dims[axis].HasField("dim_value") else None)
        if len(lengths - {None}) > 1 or 0 in lengths:
            return None  # two different lengths, or none at all: the build names it
        if None in lengths:  # a length only the run knows: a Loop over the scan axis
            return self.loop(node, label, opset, body, n, k, in_axes, in_dirs, out_axes, out_dirs)
        steps = lengths.pop()
        assert steps is not None
        out: list[NodeProto] = []

        def make(op: str, inputs: list[str], name: str, **kw: Any) -> str:  # kw: attributes, as make_node takes them
            result = self.fresh(f"{label}/{name}")
            out.append(helper.make_node(op, inputs, [result], name=result, **kw))
            return result

        def constant(value: np.ndarray, name: str) -> str:
            result = self.fresh(f"{label}/{name}")
            out.append(
                helper.make_node("Constant", [], [result], name=result, value=numpy_helper.from_array(value, result))
            )
            return result

        const_names = {t.name: constant(numpy_helper.to_array(t), t.name) for t in body.initializer}
        states = list(node.input[:n])
        elements: list[list[str]] = [[] for _ in range(k)]
        for t in range(steps):
            names = dict(const_names)
            for j, (x, axis, backward) in enumerate(zip(scans, in_axes, in_dirs, strict=True)):
                position = steps - 1 - t if backward else t
                index = constant(np.array(position, np.int64), f"iter{t}/position{j}")
                names[body.input[n + j].name] = make("Gather", [x, index], f"iter{t}/element{j}", axis=axis)
            for formal, actual in zip(body.input[:n], states, strict=True):
                names[formal.name] = actual
            copies = _copy_body(body, names, f"{label}/iter{t}", self.fresh)
            out += copies
            produced = [names.get(o.name, o.name) for o in body.output]
            states = produced[:n]
            for e in range(k):
                elements[e].append(produced[n + e])
        for name, state in zip(node.output[:n], states, strict=False):
            if name:
                out.append(helper.make_node("Identity", [state], [name], name=self.fresh(f"{label}/{name}")))
        for e, name in enumerate(node.output[n:]):
            if not name:
                continue
            axis = out_axes[e]
            order = elements[e][::-1] if out_dirs[e] else elements[e]
            # A negative axis counts from the end of the output's rank, which Unsqueeze and Concat also do.
            if opset >= 13:
                axes = constant(np.array([axis], np.int64), f"output{e}_axis")
                stacked = [make("Unsqueeze", [v, axes], f"output{e}_{t}") for t, v in enumerate(order)]
            else:  # before opset 13 Unsqueeze takes its axes as an attribute
                stacked = [make("Unsqueeze", [v], f"output{e}_{t}", axes=[axis]) for t, v in enumerate(order)]
            out.append(helper.make_node("Concat", stacked, [name], name=self.fresh(f"{label}/{name}"), axis=axis))
        return out

    def loop(
        self,
        node: NodeProto,
        label: str,
        opset: int,
        body: GraphProto,
        n: int,
        k: int,
        in_axes: list[int],
        in_dirs: list[int],
        out_axes: list[int],
        out_dirs: list[int],
    ) -> list[NodeProto] | None:
        """The Scan as a Loop over its first scan input's scan-axis extent: the body gathers each scan
        input's element at the iteration's position, the states are the loop-carried values, and each
        scan output, stacked by the Loop on axis 0, is reversed and moved to its axis after it; None
        where that cannot be written (an opset 9 reversed output, an output axis of unknown rank)."""
        ranks: list[int] = []
        for e in range(k):
            declared = body.output[n + e].type.tensor_type
            rank = len(declared.shape.dim) if declared.HasField("shape") else None
            if rank is None:
                known = self.type_of(node.output[n + e]) if node.output[n + e] else None
                rank = len(known.tensor_type.shape.dim) - 1 if known is not None else None
            if rank is None and out_axes[e] != 0:
                return None  # where to put the stacked axis needs the element's rank
            if rank is not None:
                out_axes[e] = out_axes[e] + rank + 1 if out_axes[e] < 0 else out_axes[e]
                if not 0 <= out_axes[e] <= rank:
                    return None  # malformed: the build names it
            ranks.append(rank if rank is not None else 0)
        if opset < 10 and any(out_dirs):
            return None  # Slice takes no steps before opset 10
        out: list[NodeProto] = []

        def make(op: str, inputs: list[str], name: str, into: list[NodeProto], **kw: Any) -> str:  # kw: as make_node
            result = self.fresh(f"{label}/{name}")
            into.append(helper.make_node(op, inputs, [result], name=result, **kw))
            return result

        def constant(value: np.ndarray, name: str, into: list[NodeProto]) -> str:
            result = self.fresh(f"{label}/{name}")
            into.append(
                helper.make_node("Constant", [], [result], name=result, value=numpy_helper.from_array(value, result))
            )
            return result

        first = node.input[n]
        shape = make("Shape", [first], "shape", out)
        axis0 = constant(np.array(in_axes[0], np.int64), "scan_axis", out)
        extent = make("Gather", [shape, axis0], "extent", out, axis=0)
        # onnxruntime refuses a Scan of no iterations: the first element, read outside the Loop (and
        # counted, times zero, into its trip count so that it stays), makes the run refuse it too.
        zero = constant(np.array(0, np.int64), "zero", out)
        first_element = make("Gather", [first, zero], "first_element", out, axis=in_axes[0])
        size = make("Size", [first_element], "first_element_size", out)
        # Every scan input must have the first's length (onnxruntime refuses others): a Concat along
        # axis 1 of empty [length, 0] tensors, one per scan input, owes their lengths equal, and its
        # size, times zero, joins the trip count so that the check stays.
        if len(node.input) - n > 1:
            none = constant(np.array([0], np.int64), "no_columns", out)
            one_entry = constant(np.array([1], np.int64), "one_entry", out)
            blanks = []
            for j, (x, axis) in enumerate(zip(node.input[n:], in_axes, strict=True)):
                extent_j = extent
                if j:
                    axis_j = constant(np.array(axis, np.int64), f"scan_axis{j}", out)
                    extent_j = make("Gather", [make("Shape", [x], f"shape{j}", out), axis_j], f"extent{j}", out, axis=0)
                entry = make("Reshape", [extent_j, one_entry], f"length{j}", out)
                blank_shape = make("Concat", [entry, none], f"blank_shape{j}", out, axis=0)
                blanks.append(make("ConstantOfShape", [blank_shape], f"blank{j}", out))
            same = make("Concat", blanks, "same_length", out, axis=1)
            size = make("Add", [size, make("Size", [same], "same_length_size", out)], "checked_size", out)
        nothing = make("Mul", [size, zero], "nothing", out)
        length = make("Add", [extent, nothing], "length", out)
        last = None
        if any(in_dirs):
            one = constant(np.array(1, np.int64), "one", out)
            last = make("Sub", [length, one], "last", out)

        inner: list[NodeProto] = []
        i = self.fresh(f"{label}/i")
        cond = self.fresh(f"{label}/cond")
        cond_out = constant(np.array(True), "cond_out", inner)
        backward = make("Sub", [last, i], "backward", inner) if last is not None else None
        for j, (x, axis, back) in enumerate(zip(node.input[n:], in_axes, in_dirs, strict=True)):
            position = backward if back and backward is not None else i
            element = body.input[n + j].name
            inner.append(
                helper.make_node("Gather", [x, position], [element], name=self.fresh(f"{label}/element{j}"), axis=axis)
            )
        loop_body = GraphProto()
        loop_body.CopyFrom(body)
        del loop_body.input[:]
        loop_body.input.extend(
            [
                helper.make_tensor_value_info(i, onnx.TensorProto.INT64, []),
                helper.make_tensor_value_info(cond, onnx.TensorProto.BOOL, []),
                *body.input[:n],
            ]
        )
        del loop_body.node[:]
        loop_body.node.extend([*inner, *body.node])
        del loop_body.output[:]
        loop_body.output.extend([helper.make_tensor_value_info(cond_out, onnx.TensorProto.BOOL, []), *body.output])

        finals = [name or self.fresh(f"{label}/state{s}") for s, name in enumerate(node.output[:n])]
        finals += [self.fresh(f"{label}/unused_state{s}") for s in range(len(finals), n)]
        stacked = [self.fresh(f"{label}/stacked{e}") for e in range(k)]
        loop = helper.make_node("Loop", [length, "", *node.input[:n]], [*finals, *stacked], name=label)
        loop.attribute.append(helper.make_attribute("body", loop_body))
        out.append(loop)
        for e, name in enumerate(node.output[n : n + k]):
            if not name:
                continue
            value = stacked[e]
            if out_dirs[e]:
                starts = constant(np.array([-1], np.int64), f"output{e}_start", out)
                ends = constant(np.array([np.iinfo(np.int64).min], np.int64), f"output{e}_end", out)
                axes = constant(np.array([0], np.int64), f"output{e}_axes", out)
                steps = constant(np.array([-1], np.int64), f"output{e}_steps", out)
                value = make("Slice", [value, starts, ends, axes, steps], f"output{e}_reversed", out)
            a = out_axes[e]
            perm = [*range(1, a + 1), 0, *range(a + 1, ranks[e] + 1)]
            node_name = self.fresh(f"{label}/{name}")
            if a:
                out.append(helper.make_node("Transpose", [value], [name], name=node_name, perm=perm))
            else:
                out.append(helper.make_node("Identity", [value], [name], name=node_name))
        return out


def _copy_body(body: GraphProto, names: dict[str, str], prefix: str, fresh: Callable[[str], str]) -> list[NodeProto]:
    """The body's nodes with its inputs put in from `names`, its own values renamed under `prefix`
    (recorded in `names`), and names from the scope around it kept."""
    defined = {o for node in body.node for o in node.output}

    def rename(name: str) -> str:
        if not name or name in names:
            return names.get(name, name)
        if name in defined:
            names[name] = fresh(f"{prefix}/{name}")
            return names[name]
        return name  # the scope around the Scan

    copies = []
    for k, node in enumerate(body.node):
        copy = NodeProto()
        copy.CopyFrom(node)
        copy.name = fresh(f"{prefix}/{node.name or f'{node.op_type}_{k}'}")
        copy.input[:] = [rename(i) for i in node.input]
        copy.output[:] = [rename(o) for o in node.output]
        for attr in copy.attribute:
            for g in [attr.g] if attr.type == AttributeProto.GRAPH else attr.graphs:
                _rename_outer(g, rename)
        copies.append(copy)
    return copies


def _rename_outer(graph: GraphProto, rename: Callable[[str], str]) -> None:
    """Rename the body's values a nested subgraph reads from around it (its own stay)."""
    own = (
        {v.name for v in graph.input} | {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}
    )
    for node in graph.node:
        node.input[:] = [i if i in own else rename(i) for i in node.input]
        for attr in node.attribute:
            for g in [attr.g] if attr.type == AttributeProto.GRAPH else attr.graphs:
                _rename_outer(g, rename)
    for value in graph.output:
        if value.name not in own:
            value.name = rename(value.name)
