"""`python -m bench.build_scaling`: how `loam build`'s time grows with the graph's node count.

What and why: every pass should be near-linear in nodes, so a long graph must not build in
quadratic time.  Two graphs, each built at several sizes in this process with the default pipeline:

- `chain`: the case that stressed the fuse pass, a chain of elementwise nodes (Relu, Neg, Abs,
  Sigmoid in turn) over x [Batch, Feature], every node fusable into the next;
- `transformer`: repeated pre-norm blocks over x [Batch, Seq, Hidden] (symbolic batch and sequence,
  hidden 8 so the weights stay tiny): LayerNormalization, MatMul + Add projections to q, k and v,
  Reshape/Transpose to two heads, a scaled MatMul/Softmax/MatMul attention, its output projection
  and residual Add, then LayerNormalization, an MLP with Gelu in its Erf decomposition, and a
  residual Add; 33 nodes a block, every weight its own initializer.

Each build is timed per step (`progress` marks the reading, each pass's start and the emitting,
which includes importing the module); the first table gives the total, the seconds per 1,000 nodes
(flat when the build is linear) and the slowest step, the second every step's seconds.

    python -m bench.build_scaling                        # 1,000 to 50,000 nodes; writes bench/RESULTS-build.md
    python -m bench.build_scaling --nodes 500 2000       # other sizes
    python -m bench.build_scaling --graphs transformer   # one graph
    python -m bench.build_scaling --quick                # 100 and 200 nodes, nothing written (smoke test)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RESULTS = Path(__file__).resolve().parent / "RESULTS-build.md"
OPS = ("Relu", "Neg", "Abs", "Sigmoid")
HIDDEN = 8
HEADS = 2


def chain(nodes: int) -> onnx.ModelProto:
    """`nodes` elementwise nodes in a row from x to y, both [N, 16]."""
    made = []
    previous = "x"
    for i in range(nodes):
        output = "y" if i == nodes - 1 else f"t{i}"
        made.append(helper.make_node(OPS[i % len(OPS)], [previous], [output], name=f"n{i}"))
        previous = output
    graph = helper.make_graph(
        made,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CHAIN_LAYOUT: tuple[tuple[str, tuple[str, ...]], ...] = (("x", ("Batch", "Feature")), ("y", ("Batch", "Feature")))

TRANSFORMER_LAYOUT: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("x", ("Batch", "Seq", "Hidden")),
    ("y", ("Batch", "Seq", "Hidden")),
    ("heads_shape", ("HeadsShape",)),
    ("hidden_shape", ("HiddenShape",)),
    ("*.q.w", ("Hidden", "QK")),
    ("*.k.w", ("Hidden", "QK")),
    ("*.q.b", ("QK",)),
    ("*.k.b", ("QK",)),
    ("*.v.w", ("Hidden", "V")),
    ("*.v.b", ("V",)),
    ("*.o.w", ("(Heads VDim)", "Hidden")),
    ("*.q.heads", ("Batch", "Seq", "Heads", "QKDim")),
    ("*.k.heads", ("Batch", "Seq", "Heads", "QKDim")),
    ("*.v.heads", ("Batch", "Seq", "Heads", "VDim")),
    ("*.up.w", ("Hidden", "Ffn")),
    ("*.up.b", ("Ffn",)),
    ("*.down.w", ("Ffn", "Hidden")),
    ("*.g", ("Hidden",)),
    ("*.b", ("Hidden",)),
)
"""The transformer's axis names: the layout rules (glob, axes) its build is given."""


def transformer(nodes: int) -> onnx.ModelProto:
    """Transformer blocks (`BLOCK_NODES` nodes each) from x to y [B, S, 8], as many as fit in `nodes`
    (at least one); the weights are drawn from a fixed seed."""
    made: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    rng = np.random.default_rng(0)

    def constant(name: str, value: object, dtype: type = np.float32) -> str:
        initializers.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def weight(name: str, *shape: int) -> str:
        return constant(name, rng.standard_normal(shape) * 0.1)

    def node(op: str, inputs: list[str], output: str, **attributes: object) -> str:
        made.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    constant("heads_shape", [0, 0, HEADS, HIDDEN // HEADS], np.int64)
    constant("hidden_shape", [0, 0, HIDDEN], np.int64)
    constant("scale", 1 / np.sqrt(HIDDEN // HEADS))
    constant("sqrt2", np.sqrt(2.0))
    constant("one", 1.0)
    constant("half", 0.5)
    x = "x"
    blocks = max(1, nodes // BLOCK_NODES)
    for b in range(blocks):
        p = f"b{b}."
        normed = node("LayerNormalization", [x, weight(p + "ln1.g", HIDDEN), weight(p + "ln1.b", HIDDEN)], p + "ln1")
        heads = {}
        for part, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            product = node("MatMul", [normed, weight(p + part + ".w", HIDDEN, HIDDEN)], p + part + ".mm")
            biased = node("Add", [product, weight(p + part + ".b", HIDDEN)], p + part)
            split = node("Reshape", [biased, "heads_shape"], p + part + ".heads")
            heads[part] = node("Transpose", [split], p + part + ".t", perm=perm)
        scores = node("MatMul", [heads["q"], heads["k"]], p + "scores")
        scaled = node("Mul", [scores, "scale"], p + "scaled")
        probs = node("Softmax", [scaled], p + "probs", axis=-1)
        attended = node("MatMul", [probs, heads["v"]], p + "attn")
        back = node("Transpose", [attended], p + "attn.t", perm=[0, 2, 1, 3])
        merged = node("Reshape", [back, "hidden_shape"], p + "attn.merged")
        projected = node("MatMul", [merged, weight(p + "o.w", HIDDEN, HIDDEN)], p + "o.mm")
        out = node("Add", [projected, weight(p + "o.b", HIDDEN)], p + "o")
        h = node("Add", [x, out], p + "res1")
        normed = node("LayerNormalization", [h, weight(p + "ln2.g", HIDDEN), weight(p + "ln2.b", HIDDEN)], p + "ln2")
        up = node("MatMul", [normed, weight(p + "up.w", HIDDEN, 4 * HIDDEN)], p + "up.mm")
        up = node("Add", [up, weight(p + "up.b", 4 * HIDDEN)], p + "up")
        gelu = node("Div", [up, "sqrt2"], p + "gelu.div")
        gelu = node("Erf", [gelu], p + "gelu.erf")
        gelu = node("Add", [gelu, "one"], p + "gelu.add")
        gelu = node("Mul", [up, gelu], p + "gelu.mul")
        gelu = node("Mul", [gelu, "half"], p + "gelu")
        down = node("MatMul", [gelu, weight(p + "down.w", 4 * HIDDEN, HIDDEN)], p + "down.mm")
        down = node("Add", [down, weight(p + "down.b", HIDDEN)], p + "down")
        x = node("Add", [h, down], "y" if b == blocks - 1 else p + "res2")
    graph = helper.make_graph(
        made,
        "transformer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", HIDDEN])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


BLOCK_NODES = 33
"""The transformer's nodes per block."""

GRAPHS: dict[str, tuple[Callable[[int], onnx.ModelProto], tuple[tuple[str, tuple[str, ...]], ...]]] = {
    "chain": (chain, CHAIN_LAYOUT),
    "transformer": (transformer, TRANSFORMER_LAYOUT),
}
"""Each graph's generator (node count -> model) and its layout rules."""


def timed_build(graph: str, nodes: int) -> tuple[int, float, list[tuple[str, float]]]:
    """The graph's node count, the build's seconds and each step's (name, seconds), in order."""
    from loam.core.layout import LayoutRule
    from loam.driver.options import Options
    from loam.driver.pipeline import build

    make, layout = GRAPHS[graph]
    options = Options(layout=tuple(LayoutRule(pattern, axes) for pattern, axes in layout))
    marks: list[tuple[str, float]] = []
    model = make(nodes)
    start = time.perf_counter()
    build(model, options=options, progress=lambda message: marks.append((step_name(message), time.perf_counter())))
    end = time.perf_counter()
    spans = [(name, later - at) for (name, at), (_, later) in zip(marks, [*marks[1:], ("end", end)], strict=True)]
    return len(model.graph.node), end - start, spans


def step_name(message: str) -> str:
    """A progress message's step: `read`, a pass's name, or `emit`."""
    if message.startswith("reading"):
        return "read"
    if message.startswith("emitting"):
        return "emit"
    return message.removeprefix("running ")


NOTES = "## Notes"
"""The heading of the results file's written part (what was measured before, what bounds each step): a run
rewrites the tables above it and keeps it."""


def kept_notes(results: Path) -> list[str]:
    """The lines of `results` from its `NOTES` heading on (none when it has none), after a blank line."""
    lines = results.read_text(encoding="utf-8").splitlines() if results.is_file() else []
    return ["", *lines[lines.index(NOTES) :]] if NOTES in lines else []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.build_scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--nodes", type=int, nargs="+", default=[1000, 4000, 8000, 16000, 32000, 50000], help="graph sizes"
    )
    parser.add_argument("--graphs", nargs="+", choices=sorted(GRAPHS), default=list(GRAPHS), help="which graphs")
    parser.add_argument("--quick", action="store_true", help="100 and 200 nodes, nothing written (smoke test)")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"where to write the tables (default {RESULTS})")
    args = parser.parse_args(argv)
    sizes = [100, 200] if args.quick else args.nodes
    for graph in args.graphs:
        timed_build(graph, 10)  # the first build imports the passes and dialects: not a cost of any size
    lines = [
        "| graph | nodes | build s | s per 1,000 nodes | slowest step | its s |",
        "|---|---|---|---|---|---|",
    ]
    steps: list[tuple[str, int, list[tuple[str, float]]]] = []
    for graph in args.graphs:
        for size in sizes:
            nodes, total, spans = timed_build(graph, size)
            slowest, seconds = max(spans, key=lambda span: span[1])
            rate = 1000 * total / nodes
            lines.append(f"| {graph} | {nodes} | {total:.2f} | {rate:.3f} | {slowest} | {seconds:.2f} |")
            print(lines[-1], flush=True)
            steps.append((graph, nodes, spans))
    names = list(dict.fromkeys(name for _, _, spans in steps for name, _ in spans))
    breakdown = ["| graph | nodes | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for graph, nodes, spans in steps:
        seconds = dict(spans)
        breakdown.append(
            f"| {graph} | {nodes} | " + " | ".join(f"{seconds[n]:.2f}" if n in seconds else "" for n in names) + " |"
        )
    print("\n".join(breakdown), flush=True)
    if not args.quick:
        head = [
            "# Build time against node count",
            "",
            f"Run: {datetime.datetime.now(datetime.UTC):%a %b %d %H:%M:%S UTC %Y}, Python {platform.python_version()}, "
            f"load average {os.getloadavg()[0]:.2f} at the end",
            "",
            "`python -m bench.build_scaling`: an elementwise chain (Relu, Neg, Abs, Sigmoid in turn) over",
            "x [Batch, Feature], and transformer blocks over x [Batch, Seq, 8] (see the bench's docstring),",
            "each built with the default pipeline in one process.",
            "",
        ]
        tail = ["", "Seconds in each step (`emit` includes importing the module):", "", *breakdown]
        notes = kept_notes(args.output)
        args.output.write_text("\n".join([*head, *lines, *tail, *notes]) + "\n", encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
