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
- serve's gather alone: the past gathered from `loam serve`'s block pool into a DecodeState, the
  copy a served step adds;
- onnxruntime on the same graph (`decoder_with_past.onnxtext`, every optimisation on), the GGUF's
  weights widened to float32 by llama.cpp's `gguf` package, fed the same past: the peer.

Loam reads the GGUF packed with its compiled kernels, as `loam generate` does.  The past holds
random keys and values (a step's cost does not depend on them); every side computes the same step.
Writes bench/RESULTS-decode-state.md (`--output FILE` elsewhere, `--quick` nowhere).
"""

from __future__ import annotations

import argparse
import datetime
import os
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
    names = [name for name, _, _ in module.INPUTS]
    for past in spec["pasts"]:
        step = {"input_ids": np.array([[504]], np.int64), "attention_mask": np.ones((1, past + 1), np.int64)}
        state = module.DecodeState(past + 1, batch_size=1)
        state.length = past
        for name, *_ in module.DECODE_STATE:
            view = state.past(name)
            view[...] = rng.standard_normal(view.shape).astype(view.dtype)
        if spec["side"] == "in_place":
            given = [step[n] for n in names if n in step]
            def run():
                state.rewind(past)
                module.forward_in_place(weights, state, *given)
        elif spec["side"] == "gather":
            # What loam serve adds to a step: the row's past gathered from the block pool into the state.
            from loam.serve.kv import KvPool
            layers = {name: (axes[1], axes[3], np.dtype(np.float32)) for name, _, _, axes in module.DECODE_STATE}
            pool = KvPool(layers, 16, -(-past // 16))
            seq = pool.new_sequence()
            pool.reserve(seq, past)
            pool.append(seq, [0] * past, {name: state.past(name)[0] for name in layers})
            scratch = module.DecodeState(past + 1, batch_size=1)  # reused from step to step, as serve does
            def run():
                scratch.rewind(0)
                scratch.length = past
                pool.gather([seq], past, into={name: scratch.past(name) for name in layers})
        else:
            feeds = {**step, **{name: state.past(name).copy() for name, *_ in module.DECODE_STATE}}
            args = [feeds[n] for n in names]
            def run():
                module.forward(weights, *args)
        results[past] = timed(run, spec["repeats"])
print(json.dumps(results))
"""


def _child(spec: dict[str, object]) -> dict[int, float]:
    return {int(k): v for k, v in one_thread_child("bench.decode_state", CHILD, spec).items()}


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
    in_place = _child({**common, "side": "in_place", "module": str(scratch)})
    gather = _child({**common, "side": "gather", "module": str(scratch)})
    peer = _child({**common, "side": "onnxruntime", "graphs": str(GRAPHS)})
    lines = [
        "# SmolLM2-135M-Instruct: a decode step with the past kept in place, and without",
        "",
        f"Written by `python -m bench.decode_state` on {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
        f"one thread each; one new token after the past; medians of {repeats} steps.  Loam: the GGUF's "
        "Q4_1/Q8_0 blocks packed, compiled kernels.  onnxruntime: the same graph over the widened float32 weights.",
        "",
        "| past | Loam plain ms | Loam in place ms | in place / plain | onnxruntime ms | Loam in place / onnxruntime "
        "| serve's gather ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for past in PASTS:
        lines.append(
            f"| {past} | {plain[past] * 1e3:.1f} | {in_place[past] * 1e3:.1f} | {in_place[past] / plain[past]:.2f}x | "
            f"{peer[past] * 1e3:.1f} | {in_place[past] / peer[past]:.2f}x | {gather[past] * 1e3:.1f} |"
        )
    lines += [
        "",
        "Plain: each of the 30 layers' two Concats copies its past (3 heads x 64 x 4 bytes per position) into",
        "`present`, and the caller keeps that copy as the next past.  In place: the Concats write the new",
        "row after the past in the DecodeState's buffer and the attention reads the state's view.  Both",
        "columns have `grouped-heads`: the graph's repeat of the 3 key/value heads for 9 query heads (an",
        "Expand, a copy of the past three times over) is gone, the products read each head once per group;",
        "what is left grows with the past through the attention products' own reads.",
        "",
        "Serve's gather: `loam serve` keeps conversations in a pool of 16-token blocks (shared between",
        "conversations, cached for prefixes) and gathers a cohort's pasts into a DecodeState before each step;",
        "this column is that copy for one row.  The model's attention reads the past as one dense tensor, so a",
        "paged pool costs this gather per step; a paged attention kernel reading the blocks would remove it.",
    ]
    text = "\n".join(lines) + "\n"
    publish(text, args, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
