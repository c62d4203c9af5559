"""`python -m bench.conv`: Loam's `kernel_conv` against onnxruntime's Conv, one shape at a time.

What and why: a CNN forward is its convolutions (ResNet-50's are 95% of Loam's forward), so where a
CNN row of bench/RESULTS.md is slower than onnxruntime, this says which convolutions are, and
whether the product itself bounds them.  For each distinct Conv of ResNet-50 at one 224 x 224 image
and of the digits CNN at a batch of 64 (`SHAPES`: input, weight, stride, pad, and how many times the
network runs it), at one thread:

- Loam: `kernel_conv` called as the generated module calls it (bias and activation are separate
  elementwise kernels there, and left out here);
- GEMM: numpy's matmul of contiguous operands with the product's extents (M x C*taps times
  C*taps x the output points, per image): what the im2col product costs with no copy at all, the
  floor of any im2col path on this BLAS;
- onnxruntime: a session holding the one Conv node (CPU provider, every graph optimisation on), on
  the same inputs and weights.

Loam and the GEMM are timed before this process imports onnxruntime (importing it changes how
malloc serves large blocks for the rest of the process, see bench/run.py); each is the median of
repeated calls, alternated between the two, after warm-up calls, in CPU time of the calling thread (onnxruntime
runs the node on it at one thread), which leaves out a loaded machine's waits for a core but not its
contention for caches and memory.  Totals weigh each shape by its count.

    python -m bench.conv            # every shape
    python -m bench.conv --case digits-b64 --repeats 200
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

# (case, input shape, weight shape, stride, pad, count): each distinct Conv the case's network runs.
SHAPES: tuple[tuple[str, tuple[int, ...], tuple[int, ...], int, int, int], ...] = (
    ("resnet50-b1", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1),
    ("resnet50-b1", (1, 64, 56, 56), (64, 64, 1, 1), 1, 0, 1),
    ("resnet50-b1", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 3),
    ("resnet50-b1", (1, 64, 56, 56), (256, 64, 1, 1), 1, 0, 4),
    ("resnet50-b1", (1, 256, 56, 56), (64, 256, 1, 1), 1, 0, 2),
    ("resnet50-b1", (1, 256, 56, 56), (128, 256, 1, 1), 1, 0, 1),
    ("resnet50-b1", (1, 128, 56, 56), (128, 128, 3, 3), 2, 1, 1),
    ("resnet50-b1", (1, 256, 56, 56), (512, 256, 1, 1), 2, 0, 1),
    ("resnet50-b1", (1, 128, 28, 28), (512, 128, 1, 1), 1, 0, 4),
    ("resnet50-b1", (1, 512, 28, 28), (128, 512, 1, 1), 1, 0, 3),
    ("resnet50-b1", (1, 128, 28, 28), (128, 128, 3, 3), 1, 1, 3),
    ("resnet50-b1", (1, 512, 28, 28), (256, 512, 1, 1), 1, 0, 1),
    ("resnet50-b1", (1, 256, 28, 28), (256, 256, 3, 3), 2, 1, 1),
    ("resnet50-b1", (1, 512, 28, 28), (1024, 512, 1, 1), 2, 0, 1),
    ("resnet50-b1", (1, 256, 14, 14), (1024, 256, 1, 1), 1, 0, 6),
    ("resnet50-b1", (1, 1024, 14, 14), (256, 1024, 1, 1), 1, 0, 5),
    ("resnet50-b1", (1, 256, 14, 14), (256, 256, 3, 3), 1, 1, 5),
    ("resnet50-b1", (1, 1024, 14, 14), (512, 1024, 1, 1), 1, 0, 1),
    ("resnet50-b1", (1, 512, 14, 14), (512, 512, 3, 3), 2, 1, 1),
    ("resnet50-b1", (1, 1024, 14, 14), (2048, 1024, 1, 1), 2, 0, 1),
    ("resnet50-b1", (1, 512, 7, 7), (2048, 512, 1, 1), 1, 0, 3),
    ("resnet50-b1", (1, 2048, 7, 7), (512, 2048, 1, 1), 1, 0, 2),
    ("resnet50-b1", (1, 512, 7, 7), (512, 512, 3, 3), 1, 1, 2),
    ("digits-b64", (64, 1, 8, 8), (8, 1, 3, 3), 1, 1, 1),
    ("digits-b64", (64, 8, 4, 4), (16, 8, 3, 3), 1, 1, 1),
)


def alternated(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """The median seconds of each call, the calls alternated `repeats` times after two warm-ups each:
    the calling thread's CPU time, which a loaded machine's waits for a core leave out."""
    for call in calls.values():
        call()
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    clock = time.thread_time
    for _ in range(repeats):
        for name, call in calls.items():
            start = clock()
            call()
            times[name].append(clock() - start)
    return {name: statistics.median(spent) for name, spent in times.items()}


def one_conv(w: np.ndarray, stride: int, pad: int) -> bytes:
    """A model of one Conv node reading graph input x with weight w (an initializer)."""
    import onnx
    from onnx import helper, numpy_helper

    node = helper.make_node(
        "Conv", ["x", "w"], ["y"], strides=[stride, stride], pads=[pad] * 4, kernel_shape=list(w.shape[2:])
    )
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.conv", description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="only this case's shapes (repeatable)")
    parser.add_argument("--repeats", type=int, default=30, help="calls per side (digits: ten times as many)")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    from loam.runtime.kernels.conv import kernel_conv

    shapes = [s for s in SHAPES if not args.case or s[0] in args.case]
    rng = np.random.default_rng(0)
    inputs = [
        (rng.standard_normal(x).astype(np.float32), rng.standard_normal(w).astype(np.float32)) for _, x, w, *_ in shapes
    ]
    loam: list[dict[str, float]] = []
    outputs = []
    with threadpool_limits(limits=1):
        for (case, _x, _w, stride, pad, _count), (x, w) in zip(shapes, inputs, strict=True):
            conv = functools.partial(
                kernel_conv, x, w, strides=(stride, stride), pads=(pad,) * 4, dilations=(1, 1), group=1
            )
            y = conv()
            outputs.append(y)
            m, k = w.shape[0], int(np.prod(w.shape[1:]))
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((x.shape[0], k, int(np.prod(y.shape[2:])))).astype(np.float32)
            if x.shape[0] == 1:
                b = b[0]  # one image: one plain product
            repeats = args.repeats * (10 if case.startswith("digits") else 1)
            loam.append(
                alternated(
                    {"loam": conv, "gemm": functools.partial(np.matmul, a, b)},
                    repeats,
                )
            )
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    print(f"load average {os.getloadavg()[0]:.1f}, one thread; CPU ms of the calling thread, medians")
    print()
    print("| case | input | weight | stride | count | Loam | GEMM alone | onnxruntime | Loam/ORT | GEMM/ORT |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    totals: dict[str, list[float]] = {}
    for (case, xs, ws, stride, pad, count), (x, w), y, mine in zip(shapes, inputs, outputs, loam, strict=True):
        session = ort.InferenceSession(one_conv(w, stride, pad), options, providers=["CPUExecutionProvider"])
        (want,) = session.run(None, {"x": x})
        if not np.allclose(y, want, rtol=1e-4, atol=1e-3):
            raise AssertionError(f"Loam's Conv {xs} x {ws} differs from onnxruntime's")
        repeats = args.repeats * (10 if case.startswith("digits") else 1)
        theirs = alternated({"ort": functools.partial(session.run, None, {"x": x})}, repeats)["ort"]
        row = totals.setdefault(case, [0.0, 0.0, 0.0])
        for i, spent in enumerate((mine["loam"], mine["gemm"], theirs)):
            row[i] += count * spent
        print(
            f"| {case} | {xs} | {ws} | {stride} | {count} | {1e3 * mine['loam']:.3f} | {1e3 * mine['gemm']:.3f} | "
            f"{1e3 * theirs:.3f} | {mine['loam'] / theirs:.2f} | {mine['gemm'] / theirs:.2f} |"
        )
    for case, (mine_s, gemm_s, theirs_s) in totals.items():
        print(
            f"| {case} | all | | | | {1e3 * mine_s:.2f} | {1e3 * gemm_s:.2f} | {1e3 * theirs_s:.2f} | "
            f"{mine_s / theirs_s:.2f} | {gemm_s / theirs_s:.2f} |"
        )
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
