"""The fusion decision report: one decision per ONNX node, with a reason from a fixed vocabulary.

Every ONNX node of the model gets exactly one `NodeDecision`: `folded` (stage 0 evaluated it at
build time: it emits no code), `fused` (its kernels were composed into fusion group `g1`, `g2`, ...
with other nodes' kernels) or `kept alone`, and a `Reason`.  `bytes_saved` estimates the memory
traffic fusion removed: an intermediate tensor no longer written and read back (2 x its bytes),
counted on the node that produced it; it is a number, or a polynomial's text for symbolic extents.

The report renders as aligned text (`render_text`), JSON with one object per node (`render_json`)
and Graphviz DOT with each fusion group drawn as a cluster (`render_dot`).  The `fuse` pass
(`loam.passes.fuse`) builds it from the kernel program; `loam.driver.pipeline.build` also gives it the
graph's nodes before and after stage 0 (`graph_nodes`), so the report lists the folded nodes and
the nodes that emit no kernel.  Run alone on kernel IR, the pass reports the nodes it sees.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from xdsl.dialects.builtin import ModuleOp

FOLDED = "folded"
FUSED = "fused"
KEPT = "kept alone"
DECISIONS: tuple[str, ...] = (FOLDED, FUSED, KEPT)
"""The three decisions a node can get."""


class Reason(StrEnum):
    """Why a node got its decision: the report's whole vocabulary (`CONSUMERS` takes the count)."""

    FOLDED = "folded at build time"
    CHAIN = "elementwise chain"
    EPILOGUE = "epilogue into product"
    CONSUMERS = "producer has {n} consumers"
    OUTPUT = "result is an output"
    REDUCTION = "reduction boundary"
    BROADCAST = "broadcast changes extent"
    I64 = "element type i64"
    SEPARATE_LAUNCH = "objective prefers separate launch"
    OWED = "shape needs owed check first"
    NO_NEIGHBOUR = "no elementwise neighbour"
    NOT_ELEMENTWISE = "not an elementwise kernel"
    OTHER_BLOCK = "consumer in another block"
    NO_KERNEL = "emits no kernel"
    CAST = "epilogue changes element type"
    SCALAR = "scalar product"
    SIZE = "fused kernel at its size limit"

    def text(self, n: int | None = None) -> str:
        """The reason as printed (`CONSUMERS` with its count filled in)."""
        return self.value.format(n=n) if self is Reason.CONSUMERS else self.value


@dataclass
class NodeDecision:
    """One ONNX node's decision."""

    node: str
    op: str
    decision: str
    reason: str
    group: str | None = None
    bytes_saved: int | str = 0

    def as_json(self) -> dict[str, object]:
        return {
            "node": self.node,
            "op": self.op,
            "group": self.group,
            "decision": self.decision,
            "reason": self.reason,
            "bytes_saved": self.bytes_saved,
        }


@dataclass(frozen=True)
class DeviceSummary:
    """Per forward of a WGSL module: dispatches, bytes crossing, and device memory (texts of
    numbers or of polynomials over the extent symbols)."""

    dispatches: int
    """Compute dispatches per forward (a concat counts one per operand; a recurrent kernel, which
    dispatches once or twice per time step, counts one)."""
    crossing: str
    """Bytes between host and device per forward after the first call: inputs up, outputs down."""
    activations: str
    """Bytes of the activation buffers (inputs, intermediates, outputs) after liveness reuse."""
    resident: str
    """Bytes of the weights and constants resident on the device."""
    host: tuple[str, ...] = ()
    """Kernels the host computes, as `node (why)`: i64 arithmetic the device could wrap, and with a
    host fallback, kernels with no WGSL form (their device operands come down and their results go
    up, on top of `crossing`)."""

    def text(self) -> str:
        line = (
            f"per forward: {self.dispatches} dispatches, {self.crossing} bytes crossing (inputs and outputs); "
            f"device bytes: {self.activations} activations + {self.resident} resident"
        )
        if self.host:
            line += f"\non the host: {', '.join(self.host)}"
        return line


@dataclass
class FusionReport:
    """The decisions of one `fuse` run, in graph order, with the groups and the data-flow edges."""

    objective: str
    decisions: list[NodeDecision] = field(default_factory=list[NodeDecision])
    groups: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    """Each group's member nodes, in program order (the last computes the group's result)."""
    edges: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])
    """Data flow between ONNX nodes (producer, consumer), from the program before fusion."""
    device: DeviceSummary | None = None
    """What a WGSL module does per forward (None for the numpy backend)."""

    def decision(self, node: str) -> NodeDecision:
        """The decision of node `node` (KeyError when the report has none)."""
        for d in self.decisions:
            if d.node == node:
                return d
        raise KeyError(node)

    def render(self, fmt: str) -> str:
        """The report as `text`, `json` or `dot`."""
        if fmt == "text":
            return render_text(self)
        if fmt == "json":
            return render_json(self)
        if fmt == "dot":
            return render_dot(self)
        raise ValueError(f"unknown report format '{fmt}' (text, json or dot)")


REPORT_FORMATS: tuple[str, ...] = ("text", "json", "dot")


def render_text(report: FusionReport) -> str:
    """Aligned columns, one line per node, then one line per group."""
    header = ("node", "op", "decision", "reason", "bytes saved")
    rows = [
        (d.node, d.op, f"fused into {d.group}" if d.decision == FUSED else d.decision, d.reason, str(d.bytes_saved))
        for d in report.decisions
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [f"fusion report (objective {report.objective}): {len(rows)} nodes, {len(report.groups)} groups"]
    for r in [header, *rows]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for g, members in report.groups.items():
        lines.append(f"group {g}: {', '.join(members)}")
    if report.device is not None:
        lines.append(report.device.text())
    return "\n".join(lines) + "\n"


def render_json(report: FusionReport) -> str:
    """A JSON array, one object per node: node, op, group, decision, reason, bytes_saved."""
    return json.dumps([d.as_json() for d in report.decisions], indent=1) + "\n"


def _dot_id(text: str) -> str:
    return json.dumps(text)  # a double-quoted string with backslash escapes, which DOT reads


def render_dot(report: FusionReport) -> str:
    """A Graphviz digraph: nodes labelled `name\\nop`, fusion groups as clusters, folded nodes dashed."""
    lines = ["digraph fusion {", "  rankdir=TB;", '  node [shape=box, fontname="monospace"];']
    by_node = {d.node: d for d in report.decisions}
    for g, members in report.groups.items():
        lines.append(f"  subgraph {_dot_id('cluster_' + g)} {{")
        lines.append(f"    label={_dot_id(g)}; style=rounded; color=blue;")
        for m in members:
            d = by_node.get(m)
            label = f"{m}\n{d.op}" if d else m
            lines.append(f"    {_dot_id(m)} [label={_dot_id(label)}];")
        lines.append("  }")
    for d in report.decisions:
        if d.decision == FUSED and d.group in report.groups:
            continue
        style = ", style=dashed, color=gray" if d.decision == FOLDED else ""
        lines.append(f"  {_dot_id(d.node)} [label={_dot_id(d.node + chr(10) + d.op)}{style}];")
    for a, b in report.edges:
        lines.append(f"  {_dot_id(a)} -> {_dot_id(b)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_nodes(module: ModuleOp) -> dict[str, str]:
    """Every `graph.node` of `module` (nested graphs too): name -> op type, in walk order."""
    from loam.dialects.graph import NodeOp

    found: dict[str, str] = {}
    for op in module.walk():
        if isinstance(op, NodeOp):
            name = op.node_name or (op.output_names[0] if op.output_names else "")
            found.setdefault(name, op.op_type)
    return found


def node_list(before: dict[str, str], after: Iterable[str]) -> list[tuple[str, str, bool]]:
    """(name, op type, folded) for each node of `before`: those missing from `after` were folded."""
    remaining = set(after)
    return [(name, op_type, name not in remaining) for name, op_type in before.items()]
