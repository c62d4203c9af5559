"""Draft a complete axis layout for a graph, so an unfamiliar export builds before anyone names its axes.

`draft_layout(model)` runs stage 0, then walks the graph as name-axes does, but where name-axes
needs a name from the layout it takes a fresh axis variable instead, and where an operator requires
two axes to be one (`loam.ops.base.same_axis`: a contraction, a broadcast, a concatenation) it
unifies their variables rather than stopping the build.  Each class of unified axes then gets one
name: a layout rule the caller gave wins (two different given names meeting is a real conflict and
stops the draft), then a dim_param the axis carries, then a readable invented name made from the
first tensor the axis appears in (`Conv1Weight_0`); a name the module's marker class cannot take
(a builtin such as a dim_param `len`, or the module's own `Weights`: `loam.backends.names`) gets
`_2`, `_3`, ... like a name already taken.  The draft is one exact rule per tensor that
needs one (graph inputs, initializers, multi-element constants, node outputs with an axis their
operator leaves open), which `loam build` accepts unedited; `invented` lists the names the author
may want to rename.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx
from xdsl.ir import Block, SSAValue

from loam.core.errors import AxisError
from loam.core.layout import LayoutMatcher, LayoutRule, merged_axis_name
from loam.core.poly import Poly
from loam.dialects.graph import ConstantOp, GraphOp, InitializerOp, NodeOp, NoneOp, ReturnOp, SubgraphInfoOp
from loam.dialects.shape_poly import AliasOp, OweOp, PolyTensorType, ValuesOp
from loam.dialects.tensor_axes import Axis
from loam.driver.options import Options
from loam.ops import base, rule_for

__all__ = ["LayoutDraft", "draft_layout"]

_VAR = "LoamDraftVar"  # prefix of axis variables while drafting; never in a finished draft


@dataclass(frozen=True)
class LayoutDraft:
    """A complete layout: `rules` in graph order, and the axis names Loam made up (`invented`)."""

    rules: tuple[LayoutRule, ...]
    invented: tuple[str, ...]
    given: tuple[LayoutRule, ...] = field(default=())

    def options(self, options: Options | None = None) -> Options:
        """`options` with the given rules followed by the drafted ones."""
        options = options or Options()
        return replace(options, layout=(*options.layout, *self.rules))

    def toml(self) -> str:
        """The draft as the `[[layout]]` tables of a loam.toml."""
        lines = [
            "# Axis layout drafted by `loam layout`: one rule per tensor that needs one.",
            f"# Invented axis names (rename them freely): {', '.join(self.invented) or 'none'}.",
        ]
        for rule in (*self.given, *self.rules):
            lines += ["", "[[layout]]", f"pattern = {_toml_string(rule.pattern)}"]
            lines.append("axes = [" + ", ".join(_toml_string(a) for a in rule.axes) + "]")
            if rule.graph is not None:
                lines.append(f"graph = {_toml_string(rule.graph)}")
        return "\n".join(lines) + "\n"


def _toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in escaped)
    return f'"{escaped}"'


def glob_escape(name: str) -> str:
    """A glob pattern matching exactly `name` (`*`, `?` and `[` become one-character classes)."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def _facts(value: SSAValue) -> base.Facts:
    """What a rule's `axes` reads of a node's result: its element type and extents."""
    t = value.type
    assert isinstance(t, PolyTensorType)
    return base.Facts(t.elem, t.shape)


def draft_layout(
    model: str | Path | onnx.ModelProto, checkpoints: Sequence[str | Path] = (), options: Options | None = None
) -> LayoutDraft:
    """Draft the layout of `model`'s main graph, keeping every rule `options` already gives."""
    from loam.driver.genai import with_config_dims
    from loam.driver.options import attach_options
    from loam.driver.registry import read_model
    from loam.passes.apply_options import ApplyOptionsPass, main_graph
    from loam.passes.stage0 import Stage0Pass

    options = with_config_dims(model, options or Options())[0]  # what the build will fix (kv_cache_dim)
    ir = read_model(model)
    attach_options(ir, options)
    from loam.frontends.context import make_context

    ctx = make_context()
    ApplyOptionsPass().apply(ctx, ir)
    Stage0Pass().apply(ctx, ir)
    return draft_graph(main_graph(ir), options.layout)


def draft_graph(graph: GraphOp, given: Sequence[LayoutRule]) -> LayoutDraft:
    """Draft the layout of a graph stage 0 has run on, keeping the `given` rules."""
    # A graph input an If branch reads where its outer axis names would make one name two lengths
    # (a merged decoder's mask: as long as the sequence in one branch, the past and the sequence
    # in the other) is relabelled in each branch; find those inputs by drafting until none clash.
    relabel: frozenset[str] = frozenset()
    while True:
        drafter = _Drafter(given, relabel)
        draft = drafter.run(graph)
        more = drafter.clashing_inputs() - relabel
        if not more:
            break
        relabel = relabel | more
    # Relabelling found no more inputs, yet a class of unified axes may still sit at two axes of
    # one tensor with two lengths: the operators make them one axis (name-axes could give them only
    # one name), while stage 0 gives them two lengths it merely owes equal.  No layout names that
    # tensor (one name is one length in a type), so say where rather than draft one the build rejects.
    clash = drafter.first_clash()
    if clash is not None:
        raise AxisError(clash)
    return draft


class _Drafter:
    """One walk over a stage-0 graph with axis variables and their union-find."""

    def __init__(self, given: Sequence[LayoutRule], relabel: frozenset[str] = frozenset()) -> None:
        self.given = tuple(given)
        self.given_matcher = LayoutMatcher(self.given)
        # Graph inputs each If branch reads under axes of its own (branch-scoped rules), because
        # reading them under the outer names made one name two lengths in some tensor.
        self.relabel = relabel
        self.parent: list[int] = []
        self.fixed: dict[int, str] = {}  # class root -> name a given rule fixes
        self.merges: dict[int, tuple[str, ...]] = {}  # class root -> the merge of parts it is
        self.origin: list[tuple[str, int, Poly]] = []  # variable -> (tensor, axis index, extent)
        self.graph_name = ""
        self.node = ""  # the node being walked, for saying which one made two axes one
        self.unions: list[tuple[int, int, str]] = []  # (root, root) each union joined, and its node

    # -- union-find ----------------------------------------------------------------------------

    def fresh(self, tensor: str, index: int, extent: Poly) -> Axis:
        self.parent.append(len(self.parent))
        self.origin.append((tensor, index, extent))
        return Axis(f"{_VAR}{len(self.parent) - 1}", extent)

    def find(self, var: int) -> int:
        while self.parent[var] != var:
            self.parent[var] = self.parent[self.parent[var]]
            var = self.parent[var]
        return var

    @staticmethod
    def var_of(name: str) -> int | None:
        return int(name[len(_VAR) :]) if name.startswith(_VAR) else None

    def describe(self, name: str) -> str:
        """How a message names an axis: its layout name, or where an unnamed one first appears."""
        var = self.var_of(name)
        if var is None:
            return f"axis {name}"
        tensor, index, _ = self.origin[var]
        return f"axis {index} of tensor '{tensor}'"

    def describe_merge(self, parts: Sequence[str]) -> str:
        return "the merge of " + ", ".join(self.describe(p) for p in parts)

    def unify_names(self, a: str, b: str) -> None:
        va, vb = self.var_of(a), self.var_of(b)
        if va is None and vb is None:
            if a != b:
                raise AxisError(f"the layout names axis {a} and axis {b}, which the graph makes one axis")
            return
        if va is None or vb is None:
            var, name = (vb, a) if va is None else (va, b)
            assert var is not None
            root = self.find(var)
            known = self.fixed.get(root)
            if known is not None and known != name:
                raise AxisError(f"the layout names one axis both {known} and {name}")
            self.fixed[root] = name
            return
        ra, rb = self.find(va), self.find(vb)
        if ra == rb:
            return
        fa, fb = self.fixed.get(ra), self.fixed.get(rb)
        if fa is not None and fb is not None and fa != fb:
            raise AxisError(f"the layout names axis {fa} and axis {fb}, which the graph makes one axis")
        ma, mb = self.merges.get(ra), self.merges.get(rb)
        if (ma and (fa or fb)) or (mb and (fa or fb)):
            raise AxisError(f"axis {fa or fb} would have to be a merged axis")
        low, high = min(ra, rb), max(ra, rb)  # the earlier variable stays the root: names stay stable
        self.parent[high] = low
        self.unions.append((low, high, self.node))
        fixed = fa or fb
        if fixed:
            self.fixed[low] = fixed
            self.fixed.pop(high, None)
        if ma and mb:
            self.merges.pop(high)
            self.merges[low] = ma if low == ra else mb
            self.alias_merge(f"{_VAR}{low}", mb if low == ra else ma)
        elif merged := ma or mb:
            self.merges.pop(high, None)
            self.merges[low] = merged

    def unify(self, a: Axis, b: Axis) -> None:
        if a.parts and b.parts:
            if len(a.parts) != len(b.parts):
                raise AxisError(
                    f"{self.describe_merge(a.parts)} and {self.describe_merge(b.parts)} would have to be one axis"
                )
            for pa, pb in zip(a.parts, b.parts, strict=True):
                self.unify_names(pa, pb)
        elif not a.parts and not b.parts:
            self.unify_names(a.name, b.name)
        else:
            plain, merged = (a, b) if b.parts else (b, a)
            self.alias_merge(plain.name, merged.parts)

    def alias_merge(self, name: str, parts: tuple[str, ...]) -> None:
        """A plain axis met a merged one: the plain axis's class is that merge (`(Heads Groups)`)."""
        var = self.var_of(name)
        if var is None:
            raise AxisError(f"{self.describe(name)} and {self.describe_merge(parts)} would have to be one axis")
        root = self.find(var)
        known = self.merges.get(root)
        if known is not None:
            if len(known) != len(parts):
                raise AxisError(
                    f"{self.describe_merge(known)} and {self.describe_merge(parts)} would have to be one axis"
                )
            for pa, pb in zip(known, parts, strict=True):
                self.unify_names(pa, pb)
            return
        if root in self.fixed:
            raise AxisError(f"axis {self.fixed[root]} and {self.describe_merge(parts)} would have to be one axis")
        self.merges[root] = parts

    # -- the walk --------------------------------------------------------------------------------

    def axes_for(self, tensor: str, shape: Sequence[Poly], given: Sequence[Axis | None]) -> tuple[list[Axis], bool]:
        """Axes of `tensor`: the operator's, a given rule's, else fresh variables; and whether a rule is needed."""
        rule = self.given_matcher.match(tensor, self.graph_name)
        out: list[Axis] = []
        needs_rule = False
        for i, (extent, axis) in enumerate(zip(shape, given, strict=True)):
            if rule is not None and len(rule.axes) == len(shape):
                named = Axis.named(rule.axes[i], extent)
                if axis is not None:
                    self.unify(axis, named)
                out.append(named if axis is None else axis)
            elif axis is not None:
                out.append(axis)
            else:
                out.append(self.fresh(tensor, i, extent))
                needs_rule = True
        return out, needs_rule

    def run(self, graph: GraphOp) -> LayoutDraft:
        self.graph_name = graph.graph_name.data
        block = graph.body.block
        self.axes_of: dict[SSAValue, tuple[Axis, ...]] = {}
        self.wanted: list[tuple[str, list[Axis], str | None]] = []  # tensors needing a rule, in graph order
        self.main_graph = self.graph_name
        self.branched = any(isinstance(op, NodeOp) and op.subgraphs for op in block.ops)
        # every settled tensor: (name, graph, axes, extents)
        self.settled: list[tuple[str, str, tuple[Axis, ...], tuple[Poly, ...]]] = []
        self.inputs: dict[SSAValue, str] = {}
        for arg, name in zip(block.args, [s.data for s in graph.input_names.data], strict=True):
            self.settle(arg, name)
            self.inputs[arg] = name
        with base.axes_unified_by(self.unify):
            self.walk(block)
        return self.finish(self.wanted)

    def class_key(self, axis: Axis) -> str | None:
        """Which axis `axis` is after unification (None for a merge, which names its parts)."""
        if axis.parts:
            return None
        var = self.var_of(axis.name)
        if var is None:
            return axis.name
        root = self.find(var)
        return self.fixed.get(root, f"#{root}")

    def clashing_inputs(self) -> set[str]:
        """Graph inputs read in a branch whose axis is one axis with two lengths in some tensor."""
        clashes: set[str] = set()
        for _, _, axes, shape in self.settled:
            seen: dict[str, Poly] = {}
            for axis, extent in zip(axes, shape, strict=True):
                key = self.class_key(axis)
                if key is not None and seen.setdefault(key, extent) != extent:
                    clashes.add(key)
        found: set[str] = set()
        for value, name in self.inputs.items():
            if any(self.class_key(a) in clashes for a in self.axes_of[value]):
                found.add(name)
        return found

    def first_clash(self) -> str | None:
        """A message for the first tensor with one class of axes at two axes of two lengths, if any."""
        for tensor, graph, axes, shape in self.settled:
            first: dict[str, int] = {}
            for j, (axis, extent) in enumerate(zip(axes, shape, strict=True)):
                key = self.class_key(axis)
                if key is None:
                    continue
                i = first.setdefault(key, j)
                if shape[i] == extent:
                    continue
                by = self.joined_by(axes[i], axis)
                return (
                    f"graph '{graph}', tensor '{tensor}': axes {i} and {j} are one axis to the operators"
                    f"{f' ({by} makes them one)' if by else ''}, but stage 0 gives them lengths {shape[i]} "
                    f"and {extent}, which it only owes equal; one name is one length, so no layout names "
                    "this tensor"
                )
        return None

    def joined_by(self, a: Axis, b: Axis) -> str:
        """The node whose unification first made axis variables `a` and `b` one class ('' if unknown)."""
        va, vb = self.var_of(a.name), self.var_of(b.name)
        if va is None or vb is None:
            return ""
        parent = list(range(len(self.parent)))

        def find(v: int) -> int:
            while parent[v] != v:
                v = parent[v]
            return v

        for low, high, node in self.unions:
            parent[find(high)] = find(low)
            if find(va) == find(vb):
                return node
        return ""

    def relabel_in(self, branch: Block) -> dict[SSAValue, tuple[Axis, ...]]:
        """Give the inputs to relabel their branch axes; return their outer axes to restore."""
        saved: dict[SSAValue, tuple[Axis, ...]] = {}
        read = {v for op in branch.walk() for v in op.operands}
        for value, name in self.inputs.items():
            if name not in self.relabel or value not in read:
                continue
            saved[value] = self.axes_of[value]
            t = value.type
            assert isinstance(t, PolyTensorType)
            axes, needs_rule = self.axes_for(name, t.shape, [None] * len(t.shape))
            self.axes_of[value] = tuple(axes)
            if needs_rule:
                self.wanted.append((name, axes, self.graph_name))
        return saved

    def settle(self, value: SSAValue, tensor: str, given: Sequence[Axis | None] | None = None) -> None:
        t = value.type
        assert isinstance(t, PolyTensorType)
        axes, needs_rule = self.axes_for(tensor, t.shape, given if given is not None else [None] * len(t.shape))
        self.axes_of[value] = tuple(axes)
        self.settled.append((tensor, self.graph_name, tuple(axes), t.shape))
        if needs_rule and tensor:  # an output the node leaves unnamed is never read
            # A tensor inside an If branch gets a rule scoped to that branch's graph: both branches
            # may name their tensors alike.
            # In a graph with branches, the outer graph's rules are scoped too, since a branch's
            # tensors may carry the names of the If's outputs.
            scoped = self.graph_name if self.graph_name != self.main_graph or self.branched else None
            self.wanted.append((tensor, axes, scoped))

    def walk(self, block: Block) -> None:
        from loam.passes.name_axes import folded_name
        from loam.passes.stage0 import node_info

        axes_of = self.axes_of
        for op in block.ops:
            if isinstance(op, InitializerOp):
                self.settle(op.result, op.onnx_name.data)
            elif isinstance(op, ConstantOp | ValuesOp):
                if not op.result.uses:
                    continue
                name = folded_name(op)
                t = op.result.type
                assert isinstance(t, PolyTensorType)
                if all(e == Poly.const(1) for e in t.shape) and self.given_matcher.match(name, self.graph_name) is None:
                    # name-axes names a one-element constant's unit axes itself (Unit, Unit1, ...).
                    axes_of[op.result] = tuple(base.unit_axes([None] * len(t.shape)))
                else:
                    self.settle(op.result, name)
            elif isinstance(op, NodeOp):
                info = node_info(op)
                self.node = info.where()
                rule = rule_for(info, op.domain)
                outputs = [_facts(r) for r in op.outs]
                named = rule.node_axes(self, op, info, outputs)
                for result, name, axes in zip(op.outs, op.output_names, named, strict=True):
                    self.settle(result, name, axes)
            elif isinstance(op, AliasOp):
                # An outer value under the lengths the branch reads it at: the same axes.
                t = op.result.type
                assert isinstance(t, PolyTensorType)
                aliased = tuple(Axis(a.name, e, a.parts) for a, e in zip(axes_of[op.input], t.shape, strict=True))
                axes_of[op.result] = aliased
                self.settled.append((op.tensor_name.data, self.graph_name, aliased, t.shape))
            elif not isinstance(op, NoneOp | ReturnOp | OweOp | SubgraphInfoOp):
                raise AxisError(f"graph '{self.graph_name}': the layout drafter does not know {op.name}")

    def input_axes(self, op: NodeOp) -> list[tuple[Axis, ...] | None]:
        """The axes of each input of `op` (None: an absent optional input)."""
        return [None if isinstance(v.owner, NoneOp) else self.axes_of[v] for v in op.args]

    def branch_axes(self, op: NodeOp, key: str) -> list[tuple[Axis, ...]]:
        """Walk region `key` of `op`, a branch reading the scope around it (the inputs to relabel take
        axes of their own there): the axes of the values it returns."""
        from loam.passes.name_axes import branch_values

        outer, node = self.graph_name, self.node
        self.graph_name, branch, values = branch_values(op, key)
        saved = self.relabel_in(branch)
        self.walk(branch)
        returned = [self.axes_of[v] for v in values]
        self.axes_of.update(saved)
        self.graph_name, self.node = outer, node
        return returned

    def body_axes(self, op: NodeOp, key: str, given: Sequence[SSAValue | None]) -> list[tuple[Axis, ...]]:
        """Walk region `key` of `op`, each argument of its block entering under the axes of the outer value
        `given` for it (None: as a tensor of the argument's name): the axes of the values it returns."""
        from loam.passes.name_axes import branch_values

        outer, node = self.graph_name, self.node
        self.graph_name, body, values = branch_values(op, key)
        header = body.first_op
        assert isinstance(header, SubgraphInfoOp)
        for arg, name, value in zip(body.args, [s.data for s in header.input_names.data], given, strict=True):
            if value is None:
                self.settle(arg, name)
            else:
                self.axes_of[arg] = self.axes_of[value]
        self.walk(body)
        self.graph_name, self.node = outer, node
        return [self.axes_of[v] for v in values]

    def one_axis(self, a: Axis, b: Axis) -> Axis | None:
        """Two branches' axes of one length: one axis variable (so the layout needs no rule for it)."""
        self.unify(a, b)
        return a

    # -- naming ------------------------------------------------------------------------------------

    def finish(self, wanted: Sequence[tuple[str, Sequence[Axis], str | None]]) -> LayoutDraft:
        from loam.backends.names import MARKER_RESERVED

        names: dict[int, str] = {}
        taken: set[str] = set(self.fixed.values())
        for rule in self.given:
            taken.update(rule.axes)
        invented: list[str] = []

        def name_of(var: int) -> str:
            root = self.find(var)
            if root in names:
                return names[root]
            if root in self.fixed:
                names[root] = self.fixed[root]
                return names[root]
            if root in self.merges:
                names[root] = merged_axis_name([resolve_name(p) for p in self.merges[root]])
                return names[root]
            tensor, index, extent = self.origin[root]
            symbol = extent.lone_symbol
            stem = _identifier(symbol) if symbol is not None else f"{_camel(tensor)}_{index}"
            name = stem
            n = 2
            # The axis becomes a marker class of the module: never a builtin's or the module's own name.
            while name in taken or name in MARKER_RESERVED:
                name = f"{stem}_{n}"
                n += 1
            taken.add(name)
            names[root] = name
            if symbol is None:
                invented.append(name)
            return name

        def resolve(axis: Axis) -> str:
            if axis.parts:
                return merged_axis_name([resolve_name(p) for p in axis.parts])
            return resolve_name(axis.name)

        def resolve_name(name: str) -> str:
            var = self.var_of(name)
            return name if var is None else name_of(var)

        rules = tuple(
            LayoutRule(glob_escape(tensor), tuple(resolve(a) for a in axes), graph) for tensor, axes, graph in wanted
        )
        return LayoutDraft(rules, tuple(invented), self.given)


def _identifier(text: str) -> str:
    ident = re.sub(r"\W", "_", text, flags=re.ASCII).strip("_") or "Axis"
    return ident if ident[0].isalpha() else f"D{ident}"


def _camel(tensor: str) -> str:
    """`/conv1/Conv_output_0` -> `Conv1ConvOutput0`: a readable identifier stem for a tensor."""
    words = re.findall(r"[A-Za-z]+|[0-9]+", tensor)
    stem = "".join(w[:1].upper() + w[1:] for w in words) or "Tensor"
    return stem if stem[0].isalpha() else f"T{stem}"
