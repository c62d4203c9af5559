"""`python -m bench.build_scaling`: how `loam build`'s time grows with the graph's node count.

What and why: every pass should be near-linear in nodes, so a long graph must
not build in quadratic time.  The graph is the case that stressed the fuse pass: a chain of
elementwise nodes (Relu, Neg, Abs, Sigmoid in turn) over x [Batch, Feature], every node fusable into
the next.  Each size is built once in this process, with the default pipeline, and timed per pass
(`progress` marks each pass's start); the table gives the total, the seconds per 1,000 nodes (flat
when the build is linear) and the slowest pass.

    python -m bench.build_scaling                  # 1,000 to 8,000 nodes; writes bench/RESULTS-build.md
    python -m bench.build_scaling --nodes 500 2000 # other sizes
    python -m bench.build_scaling --quick          # 100 and 200 nodes, nothing written (smoke test)
"""

from __future__ import annotations

import argparse
import datetime
import platform
import time
from collections.abc import Sequence
from pathlib import Path

import onnx
from onnx import TensorProto, helper

RESULTS = Path(__file__).resolve().parent / "RESULTS-build.md"
OPS = ("Relu", "Neg", "Abs", "Sigmoid")


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


def timed_build(nodes: int) -> tuple[float, str, float]:
    """The build's seconds, its slowest pass and that pass's seconds."""
    from loam.core.layout import LayoutRule
    from loam.driver.options import Options
    from loam.driver.pipeline import build

    options = Options(layout=(LayoutRule("x", ("Batch", "Feature")), LayoutRule("y", ("Batch", "Feature"))))
    marks: list[tuple[str, float]] = []
    model = chain(nodes)
    start = time.perf_counter()
    build(model, options=options, progress=lambda message: marks.append((message, time.perf_counter())))
    end = time.perf_counter()
    spans = [(name, later - at) for (name, at), (_, later) in zip(marks, [*marks[1:], ("end", end)], strict=True)]
    slowest, seconds = max(spans, key=lambda span: span[1])
    return end - start, slowest.removeprefix("running "), seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.build_scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 2000, 4000, 8000], help="chain lengths")
    parser.add_argument("--quick", action="store_true", help="100 and 200 nodes, nothing written (smoke test)")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"where to write the table (default {RESULTS})")
    args = parser.parse_args(argv)
    sizes = [100, 200] if args.quick else args.nodes
    timed_build(10)  # the first build imports the passes and dialects: not a cost of any size
    lines = [
        "| nodes | build s | s per 1,000 nodes | slowest step | its s |",
        "|---|---|---|---|---|",
    ]
    for nodes in sizes:
        total, slowest, seconds = timed_build(nodes)
        lines.append(f"| {nodes} | {total:.2f} | {1000 * total / nodes:.2f} | {slowest} | {seconds:.2f} |")
        print(lines[-1], flush=True)
    if not args.quick:
        head = [
            "# Build time against node count",
            "",
            f"Run: {datetime.datetime.now(datetime.UTC):%a %b %d %H:%M:%S UTC %Y}, Python {platform.python_version()}",
            "",
            "`python -m bench.build_scaling`: an elementwise chain (Relu, Neg, Abs, Sigmoid in turn) over",
            "x [Batch, Feature], built with the default pipeline in one process.",
            "",
        ]
        args.output.write_text("\n".join([*head, *lines]) + "\n", encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
