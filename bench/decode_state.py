"""`python -m bench.decode_state`: a decode step of SmolLM2 with its past kept in place, and without.

What and why: a decoder exported with its past concatenates the whole past with each step's new keys
and values, in every layer, and its caller feeds the result back as the next step's past: a step's
cost grows with copies of the past.  `decode-state-in-place` gives the module `forward_in_place`,
whose `DecodeState` keeps each past in a buffer with room to grow, so a step writes only its new
rows.  This times one decode step (one new token) after a past of 64, 512 and 2047 positions (2047
and the new token fill SmolLM2's 2048-position context) three ways, each in a child process of its
own at one thread:

- Loam, plain: `forward` given the pasts as arrays (what `Decoder(..., in_place=False)` does);
- Loam, in place: `forward_in_place` on a `DecodeState` holding the same past;
- Loam, in place with the attention unfused: the same module without `fuse-attention` (the build's
  own IR replayed by `loam-opt` with that pass left out), its chain of products, softmax and zips,
  stepped in turn with the fused one in the same process;
- the attention kernel alone, numpy's against the compiled one, on one layer's shapes;
- serve's gather alone: the past gathered from `loam serve`'s block pool into a DecodeState, the
  copy a gathered served step adds; and a served step both ways in turn: gathered then stepped in
  place, against paged (a `PagedState`: the attention reads the pool's blocks where they are);
- onnxruntime on the same graph (`decoder_with_past.onnxtext`, every optimisation on), the GGUF's
  weights widened to float32 by llama.cpp's `gguf` package, fed the same past: the peer.

Loam reads the GGUF packed with its compiled kernels, as `loam generate` does.  The past holds
random keys and values (a step's cost does not depend on them); every side computes the same step.
The in-place sides also count the Python-level calls of one step (cProfile): the kernels and helpers
the step runs in Python, and the numpy functions they call.
Writes bench/RESULTS-decode-state.md (`--output FILE` elsewhere, `--quick` nowhere).
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.publish import publish
from bench.smollm2 import GRAPHS, ROOT, _gguf, one_thread_child

RESULTS = Path(__file__).resolve().parent / "RESULTS-decode-state.md"
PASTS = (64, 512, 2047)

CHILD = r"""
import json, statistics, sys, time
import numpy as np
spec = json.loads(sys.argv[1])
def interleaved(first, second, repeats):
    first(); second()  # warm
    times = ([], [])
    for _ in range(repeats):
        for call, into in ((first, times[0]), (second, times[1])):
            start = time.perf_counter(); call(); into.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])
def timed(call, repeats):
    call()  # warm: buffers, compiled kernels
    times = []
    for _ in range(repeats):
        start = time.perf_counter(); call(); times.append(time.perf_counter() - start)
    return statistics.median(times)
rng = np.random.default_rng(0)
results = {}
if spec["side"] == "onnxruntime":
    import onnx, onnx.parser, onnxruntime as ort
    from onnx import numpy_helper
    sys.path.insert(0, spec["root"])
    from tests.smollm2_file import widened_weights as _widened_weights
    from pathlib import Path
    widened = _widened_weights(Path(spec["gguf"]))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    text = open(f"{spec['graphs']}/decoder_with_past.onnxtext", encoding="utf-8").read()
    model = onnx.parser.parse_model(text.split("\n", 1)[1] if text.startswith("#") else text)
    del model.graph.initializer[:]
    model.graph.initializer.extend(numpy_helper.from_array(widened[n], n) for n in sorted(widened))
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    del widened
    pasts = [i for i in session.get_inputs() if i.name.startswith("past_key_values.")]
    for past in spec["pasts"]:
        feeds = {"input_ids": np.array([[504]], np.int64), "attention_mask": np.ones((1, past + 1), np.int64)}
        for i in pasts:
            feeds[i.name] = rng.standard_normal((1, i.shape[1], past, i.shape[3])).astype(np.float32)
        results[past] = timed(lambda: session.run(["logits"], feeds), spec["repeats"])
else:
    import importlib.util
    loader = importlib.util.spec_from_file_location("decode_state_bench", spec["module"])
    module = importlib.util.module_from_spec(loader); loader.loader.exec_module(module)
    module.set_compiled(True)
    weights = module.Weights.load_file(spec["gguf"], packed=True)
    if spec["side"] == "in_place":
        loader = importlib.util.spec_from_file_location("decode_state_unfused", spec["unfused"])
        other = importlib.util.module_from_spec(loader); loader.loader.exec_module(other)
        other_weights = other.Weights.load_file(spec["gguf"], packed=True)
    names = [name for name, _, _ in module.INPUTS]
    for past in spec["pasts"]:
        step = {"input_ids": np.array([[504]], np.int64), "attention_mask": np.ones((1, past + 1), np.int64)}
        state = module.DecodeState(past + 1, batch_size=1)
        state.length = past
        for name, *_ in module.DECODE_STATE:
            view = state.past(name)
            view[...] = rng.standard_normal(view.shape).astype(view.dtype)
        if spec["side"] == "kernel":
            # The attention kernel alone on one layer's shapes: numpy's chain against the compiled kernel, over
            # one layer's past (in cache after the first call) and over 30 layers' (each read from memory).
            q = rng.standard_normal((1, 9, 1, 64)).astype(np.float32)
            bias = np.zeros((1, 1, 1, past + 1), np.float32)
            params = {"scale": 8.0, "divide": 1, "masked": 0, "fill": 0.0, "biased": 1}
            layers = []
            for _ in range(30):
                buffers = [np.zeros((1, 3, past + 1, 64), np.float32) for _ in range(2)]
                for b in buffers:
                    b[...] = rng.standard_normal(b.shape)
                layers.append([b[:, :, : past + 1] for b in buffers])
            def chain(kv):
                return lambda: [module.attention_numpy(q, k, v, (bias,), **params) for k, v in kv]
            def fused(kv):
                return lambda: [module.kernel_attention(q, k, v, bias, **params) for k, v in kv]
            for where, kv in (("one", layers[:1]), ("all", layers)):
                results[f"{where} {past}"] = interleaved(chain(kv), fused(kv), spec["repeats"] * 3)
            continue
        if spec["side"] == "in_place":
            # The module and the same build without fuse-attention, stepped in turn on the same past.
            given = [step[n] for n in names if n in step]
            twin = other.DecodeState(past + 1, batch_size=1)
            twin.length = past
            for name, *_ in module.DECODE_STATE:
                twin.past(name)[...] = state.past(name)
            def run():
                state.rewind(past)
                return module.forward_in_place(weights, state, *given)
            def run_unfused():
                twin.rewind(past)
                return other.forward_in_place(other_weights, twin, *given)
            gap = float(np.abs(run()[0] - run_unfused()[0]).max())
            results[past], results[f"unfused {past}"] = interleaved(run, run_unfused, spec["repeats"])
            results[f"gap {past}"] = gap
            if past == spec["pasts"][-1]:
                import cProfile, pstats
                for key, call, path in (("", run, spec["module"]), ("unfused ", run_unfused, spec["unfused"])):
                    profile = cProfile.Profile(); profile.enable(); call(); profile.disable()
                    stats = pstats.Stats(profile)
                    results[f"{key}calls"] = stats.total_calls
                    results[f"{key}module calls"] = sum(v[1] for k, v in stats.stats.items() if k[0] == path)
            continue
        elif spec["side"] == "gather":
            # What loam serve adds to a step: the row's past gathered from the block pool into the state.
            from loam.serve.kv import KvPool
            layers = {name: (axes[1], axes[3], np.dtype(np.float32)) for name, _, _, axes in module.DECODE_STATE}
            pool = KvPool(layers, 16, -(-(past + 1) // 16))  # room for the step's own row
            seq = pool.new_sequence()
            pool.reserve(seq, past)
            pool.append(seq, [0] * past, {name: state.past(name)[0] for name in layers})
            scratch = module.DecodeState(past + 1, batch_size=1)  # reused from step to step, as serve does
            def run():
                scratch.rewind(0)
                scratch.length = past
                pool.gather([seq], past, into={name: scratch.past(name) for name in layers})
            # A served step both ways, in turn: the gather then the in-place step, against the step reading the
            # pool's blocks (a PagedState; its new row is written at the reserved position each time, uncounted).
            from loam.serve.paged_state import PagedState
            pool.reserve(seq, 1)
            given = [step[n] for n in names if n in step]
            def gathered():
                run()
                return module.forward_in_place(weights, scratch, *given)
            def paged():
                return module.forward_in_place(weights, PagedState(module, pool, [(seq, 1)], past), *given)
            results[f"gap {past}"] = float(np.abs(gathered()[0] - paged()[0]).max())
            results[f"gathered {past}"], results[f"paged {past}"] = interleaved(gathered, paged, spec["repeats"])
        else:
            feeds = {**step, **{name: state.past(name).copy() for name, *_ in module.DECODE_STATE}}
            args = [feeds[n] for n in names]
            def run():
                module.forward(weights, *args)
        results[past] = timed(run, spec["repeats"])
print(json.dumps(results))
"""


def _child(spec: dict[str, object]) -> dict[int | str, float]:
    return {int(k) if k.isdigit() else k: v for k, v in one_thread_child("bench.decode_state", CHILD, spec).items()}


def _without_fused_attention(model: Path, gguf: Path, into: Path) -> Path:
    """The module `loam build` writes for `model` with `fuse-attention` left out of its pipeline: the build's
    IR as read, replayed by loam-opt (which replays a build byte for byte) without that pass."""
    dumps = into / "ir"
    loam = [sys.executable, "-m", "loam.tools.loam_main", "build", str(model), "--architecture", "llama",
            "--checkpoint", str(gguf)]  # fmt: skip
    pipeline = subprocess.run([*loam, "--print-pipeline"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([*loam, "--dump-ir", str(dumps), "-o", str(into / "fused.py")], capture_output=True, check=True)
    passes = ",".join(p for p in pipeline.split(",") if p != "fuse-attention")
    out = into / "unfused.py"
    replay = [sys.executable, "-m", "loam.tools.loam_opt", str(dumps / "00-read.mlir"), "-p", passes, "-t", "python"]
    out.write_text(subprocess.run(replay, capture_output=True, text=True, check=True).stdout, encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decode_state", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="three repeats each, nothing written (smoke test)")
    parser.add_argument("--output", type=Path, help=f"where to write the table (default {RESULTS})")
    args = parser.parse_args(argv)
    import loam
    from loam.driver.options import Options

    gguf = _gguf()
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "loam-bench-decode-state.py"
    built = loam.build(
        GRAPHS / "decoder_with_past.onnxtext", options=Options(checkpoints=(gguf,), architecture="llama")
    )
    if not hasattr(built.module, "forward_in_place"):
        raise SystemExit("bench.decode_state: the SmolLM2 build has no forward_in_place (decode-state-in-place)")
    scratch.write_text(built.source, encoding="utf-8")
    repeats = 3 if args.quick else 15
    common = {"gguf": str(gguf), "pasts": list(PASTS), "repeats": repeats, "root": str(ROOT)}
    plain = _child({**common, "side": "plain", "module": str(scratch)})
    with tempfile.TemporaryDirectory(prefix="loam-bench-decode-state-") as tmp:
        unfused_module = _without_fused_attention(GRAPHS / "decoder_with_past.onnxtext", gguf, Path(tmp))
        in_place = _child({**common, "side": "in_place", "module": str(scratch), "unfused": str(unfused_module)})
    unfused = {past: in_place[f"unfused {past}"] for past in PASTS}
    kernel = one_thread_child("bench.decode_state", CHILD, {**common, "side": "kernel", "module": str(scratch)})
    gather = _child({**common, "side": "gather", "module": str(scratch)})
    peer = _child({**common, "side": "onnxruntime", "graphs": str(GRAPHS)})
    lines = [
        "# SmolLM2-135M-Instruct: a decode step with the past kept in place, and without",
        "",
        f"Written by `python -m bench.decode_state` on {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
        f"one thread each; one new token after the past; medians of {repeats} steps.  Loam: the GGUF's "
        "Q4_1/Q8_0 blocks packed, compiled kernels.  onnxruntime: the same graph over the widened float32 weights.",
        "",
        "| past | Loam plain ms | Loam in place, attention unfused ms | Loam in place ms | in place / unfused "
        "| in place / plain | onnxruntime ms | Loam in place / onnxruntime | serve's gather ms "
        "| served step, gathered ms | served step, paged ms | paged / gathered |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for past in PASTS:
        lines.append(
            f"| {past} | {plain[past] * 1e3:.1f} | {unfused[past] * 1e3:.1f} | {in_place[past] * 1e3:.1f} | "
            f"{in_place[past] / unfused[past]:.2f}x | {in_place[past] / plain[past]:.2f}x | {peer[past] * 1e3:.1f} | "
            f"{in_place[past] / peer[past]:.2f}x | {gather[past] * 1e3:.1f} | {gather[f'gathered {past}'] * 1e3:.1f} | "
            f"{gather[f'paged {past}'] * 1e3:.1f} | {gather[f'paged {past}'] / gather[f'gathered {past}']:.2f}x |"
        )
    lines += [
        "",
        "The attention alone (`kernel.attention` on one layer's shapes: 9 query heads over 3 key/value heads of 64, "
        "one query): the numpy kernel (the unfused chain's arithmetic: two BLAS products, the score, a softmax) "
        "against the compiled kernel, medians of calls in turn; over one layer's past (in cache) and over 30 "
        "layers' (read from memory, as a step reads them):",
        "",
        "| past | one layer numpy us | one layer compiled us | compiled / numpy | 30 layers numpy ms "
        "| 30 layers compiled ms | compiled / numpy |",
        "|---|---|---|---|---|---|---|",
    ]
    for past in PASTS:
        (one_np, one_c), (all_np, all_c) = kernel[f"one {past}"], kernel[f"all {past}"]
        lines.append(
            f"| {past} | {one_np * 1e6:.0f} | {one_c * 1e6:.0f} | {one_c / one_np:.2f}x | {all_np * 1e3:.2f} | "
            f"{all_c * 1e3:.2f} | {all_c / all_np:.2f}x |"
        )
    lines += [
        "",
        f"The unfused and fused in-place steps ran in turn in one process, on the same past; their logits differ by "
        f"at most {max(in_place[f'gap {p}'] for p in PASTS):.1e} (the compiled attention sums in another order).  "
        f"Python-level calls in one in-place step at past {PASTS[-1]} (cProfile, numpy's and builtins included): "
        f"{in_place['unfused calls']:.0f} with the attention unfused, {in_place['calls']:.0f} fused; of them the "
        f"module's own functions: {in_place['unfused module calls']:.0f} and {in_place['module calls']:.0f}.  "
        f"Load average when written: {', '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
        "Plain: each of the 30 layers' two Concats copies its past (3 heads x 64 x 4 bytes per position) into",
        "`present`, and the caller keeps that copy as the next past.  In place: the Concats write the new",
        "row after the past in the DecodeState's buffer and the attention reads the state's view.  Both",
        "columns have `grouped-heads`: the graph's repeat of the 3 key/value heads for 9 query heads (an",
        "Expand, a copy of the past three times over) is gone, the products read each head once per group;",
        "what is left grows with the past through the attention products' own reads.  In place (the default",
        "build) each layer's attention is one `kernel.attention` call (`fuse-attention`, compiled with numba):",
        "the unfused column is the chain of two products, a zip and a softmax it replaces.",
        "",
        "What bounds the fused attention: at a long past a step reads every layer's keys and values once",
        "(30 layers x 2 x 3 heads x 64 x 4 bytes = 46 KB a position, 94 MB at 2047), and both kernels read",
        "them once, from memory: the 30-layer column above is that read, the same for BLAS's products and the",
        "compiled loop.  In cache (one layer) the compiled kernel saves the chain's temporaries and calls.  The",
        "step's Python does not shrink with it: the chain it replaces was five cheap numpy calls a layer, the",
        "kernel's call checks its operands; the rest of the step (210 packed products, the norms, rotary and",
        "MLP zips) keeps its calls.  Next: keys and values kept in half precision (half the bytes a step reads",
        "at a long past), and the packed products' and the layer's other kernels as fewer compiled calls.",
        "",
        "Serve's gather: `loam serve` keeps conversations in a pool of 16-token blocks (shared between",
        "conversations, cached for prefixes).  Gathered, a served step copies a cohort's pasts into a",
        "DecodeState and steps it in place (the gather column is that copy alone, for one row).  Paged (what",
        "`loam serve` runs where the module's PAGED_PASTS allows, as SmolLM2's does), the step is given a",
        "PagedState: each layer's new row is written into the row's pool block and the fused attention reads",
        "keys and values through the row's block table, so no past is copied.  The two served steps ran in",
        f"turn in one process; their logits differ by at most {max(gather[f'gap {p}'] for p in PASTS):.1e}.",
    ]
    text = "\n".join(lines) + "\n"
    publish(text, args, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
