"""`python -m bench.genai`: an onnxruntime-genai int4 model, Loam's module against onnxruntime-genai itself.

What and why: the ONNX files people download for small LLMs are what onnxruntime-genai's model builder
writes (int4 MatMulNBits, GroupQueryAttention, ...), and onnxruntime-genai is what they run them with.
This bench builds such a model with Loam (numpy backend; the int4 blocks stay the file's bytes, never
widened) and times, at one thread and at all cores, each side in a child process of its own (so each
peak resident set, VmHWM, is that side's alone):

- Loam: the module `loam.testing.build_for(model, Options(dims={"kv_cache_dim": head_size}))` writes
  (timed: the build), `Weights.embedded()` (the safetensors file beside it, memory-mapped), a prefill
  of PROMPT tokens through an empty past, then decode steps, each step's presents fed back as the next
  step's past by name, its token the argmax of the logits; threads by OMP/OPENBLAS/MKL_NUM_THREADS;
- onnxruntime-genai: `og.Model` on the model's folder (its session options overlaid with the thread
  count, intra- and inter-op), `og.Generator.append_tokens` of the same PROMPT tokens (the prefill),
  then `generate_next_token` steps (greedy); it runs under another interpreter when this one lacks
  onnxruntime_genai (`--peer-python`, default $LOAM_GENAI_PYTHON, else /work/venvs/genai/bin/python).

Reported: median prefill and decode-step times (the steps' past grows from PROMPT), tokens/s, the
weights' bytes each side holds (Loam: every array `Weights` holds; onnxruntime-genai: its resident set's
growth over `og.Model`, and the `.onnx.data` file's size), each process's peak RSS, and Loam/peer
ratios.  Before timing, Loam's greedy tokens are checked against onnxruntime-genai's recorded ones
(`--record`, default tests/models/genai/smollm2_greedy.json, the build named by the model folder's
name) where the record has that build.  Greedy decoding amplifies any rounding into another token at a
near tie (onnxruntime at accuracy_level 4 rounds each product's activations to int8), so the bench also
runs one pass over each prompt with its recorded tokens appended (teacher forcing), in onnxruntime and in
Loam's module, and counts the positions whose argmax agree: how often onnxruntime's one pass agrees with
its own recorded decode steps measures how much of the token record is rounding, not the model.

The model is dev-time (scripts/make_genai_smollm2.py writes it outside the repository); where it is
not there (`--model DIR`, default $LOAM_GENAI_MODEL), the bench says so and exits 0:

    python -m bench.genai --model /work/genai-smollm2/int4-acc1 [--model /work/genai-smollm2/int4]

Writes bench/RESULTS-genai.md (`--output FILE` elsewhere, `--quick` nowhere).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.publish import publish

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS-genai.md"
RECORD = ROOT / "tests" / "models" / "genai" / "smollm2_greedy.json"
PEER_PYTHON = "/work/venvs/genai/bin/python"
PROMPT = 64

COMMON = r"""
import json, os, statistics, sys, time
import numpy as np
spec = json.loads(sys.argv[1])
ids = np.random.default_rng(0).integers(3, spec["vocab"], spec["prompt"]).tolist()
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
def median(times):
    return statistics.median(times)
"""

LOAM_CHILD = (
    COMMON
    + r"""
import importlib.util, inspect
start = time.perf_counter()
loader = importlib.util.spec_from_file_location("genai_bench", spec["module"])
module = importlib.util.module_from_spec(loader); loader.loader.exec_module(module)
weights = module.Weights.embedded()
load_s = time.perf_counter() - start
held = sum(getattr(weights, attr).nbytes for _, attr, *_ in module.Weights._SPECS)
signature = inspect.signature(module.forward).parameters.values()  # decode_state: keyword only
params = [p.name for p in signature if p.kind is p.POSITIONAL_OR_KEYWORD][1:]
names = spec["inputs"]
assert len(params) == len(names), (params, names)
kv_heads, head = spec["kv_heads"], spec["head"]
empty = np.zeros((1, kv_heads, 0, head), np.float32)
def step(tokens, past, length):
    feeds = {"input_ids": np.array([tokens], np.int64), "attention_mask": np.ones((1, length), np.int64)}
    got = module.forward(weights, *[feeds[n] if n in feeds else past.get(n, empty) for n in names])
    nxt = {o.replace("present", "past_key_values"): v for o, v in zip(spec["outputs"][1:], got[1:], strict=True)}
    return int(np.argmax(got[0][0, -1])), nxt
checked = []
for case in spec["check"]:
    past, length, tokens, generated = {}, 0, case["prompt"], []
    while len(generated) < len(case["generated"]):
        length += len(tokens)
        token, past = step(tokens, past, length)
        generated.append(token); tokens = [token]
    checked.append(generated)
prefills, decodes = [], []
for _ in range(spec["repeats"]):
    start = time.perf_counter(); token, past = step(ids, {}, len(ids)); prefills.append(time.perf_counter() - start)
length = len(ids)
for _ in range(spec["steps"]):
    length += 1
    start = time.perf_counter(); token, past = step([token], past, length); decodes.append(time.perf_counter() - start)
print(json.dumps({"prefill_s": median(prefills), "decode_s": median(decodes), "weights": held, "load_s": load_s,
                  "peak": status("VmHWM"), "checked": checked}))
"""
)

PEER_CHILD = (
    COMMON
    + r"""
import onnxruntime_genai as og
before = status("VmRSS")
start = time.perf_counter()
config = og.Config(spec["model"])
threads = {"intra_op_num_threads": spec["threads"], "inter_op_num_threads": 1}
config.overlay(json.dumps({"model": {"decoder": {"session_options": threads}}}))
model = og.Model(config)
load_s = time.perf_counter() - start
held = status("VmRSS") - before
def generator(length):
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=length)
    return og.Generator(model, params)
checked = []
for case in spec["check"]:
    g = generator(len(case["prompt"]) + len(case["generated"]))
    g.append_tokens(case["prompt"])
    while not g.is_done():
        g.generate_next_token()
    checked.append([int(t) for t in g.get_sequence(0)][len(case["prompt"]):])
prefills, decodes = [], []
for _ in range(spec["repeats"]):
    g = generator(len(ids) + spec["steps"] + 2)
    start = time.perf_counter(); g.append_tokens(ids); prefills.append(time.perf_counter() - start)
g.generate_next_token()  # picks the prefill's token: no model run (append_tokens computed those logits)
for _ in range(spec["steps"]):
    start = time.perf_counter(); g.generate_next_token(); decodes.append(time.perf_counter() - start)
print(json.dumps({"prefill_s": median(prefills), "decode_s": median(decodes), "weights": held, "load_s": load_s,
                  "peak": status("VmHWM"), "checked": checked, "version": og.__version__}))
"""
)


def skip(message: str) -> int:
    print(f"bench.genai: skipped: {message}")
    return 0


def peer_python(choice: str | None) -> str | None:
    """An interpreter that imports onnxruntime_genai: `choice`, this one, or PEER_PYTHON; None if none does."""
    candidates = [choice] if choice else [sys.executable, os.environ.get("LOAM_GENAI_PYTHON"), PEER_PYTHON]
    for python in candidates:
        if python is None or not (python == sys.executable or Path(python).is_file()):
            continue
        done = subprocess.run([python, "-c", "import onnxruntime_genai"], capture_output=True, timeout=120)
        if done.returncode == 0:
            return python
    return None


def child(python: str, code: str, spec: dict[str, Any], threads: int) -> dict[str, Any]:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    done = subprocess.run(
        [python, "-c", code, json.dumps({**spec, "threads": threads})],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench.genai: a child ({python}) failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def build(folder: Path, scratch: Path) -> tuple[Path, float, dict[str, Any]]:
    """Loam's module for the model in `folder`, written to `scratch`; the build's seconds; the model's facts."""
    import onnx

    from loam.driver.options import Options
    from loam.testing import build_for

    config = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))["model"]
    decoder = config["decoder"]
    start = time.perf_counter()
    model = onnx.load(str(folder / decoder["filename"]))
    built = build_for(model, Options(dims={"kv_cache_dim": decoder["head_size"]}))
    target = scratch / f"genai_{folder.name.replace('-', '_')}.py"
    built.write(target)
    seconds = time.perf_counter() - start
    facts = {
        "vocab": config["vocab_size"],
        "kv_heads": decoder["num_key_value_heads"],
        "head": decoder["head_size"],
        "inputs": [i.name for i in model.graph.input],
        "outputs": [o.name for o in model.graph.output],
        "data_bytes": sum(p.stat().st_size for p in folder.glob("*.data")),
    }
    return target, seconds, facts


def recorded(record: Path | None, name: str, quick: bool) -> list[dict[str, Any]]:
    """The prompts and onnxruntime-genai's greedy tokens recorded for the build `name` (none if unrecorded),
    with every recorded build's tokens under "builds"."""
    if record is None or not record.is_file():
        return []
    data = json.loads(record.read_text(encoding="utf-8"))
    if name not in data.get("builds", {}):
        return []
    cases = [
        {"prompt": p["prompt"], "generated": p[name], "builds": {b: p[b] for b in data["builds"]}}
        for p in data["prompts"]
    ]
    return cases[:1] if quick else cases


def teacher_forced(folder: Path, module_path: Path, cases: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One pass over each case's prompt + recorded tokens in onnxruntime and in Loam's module: how many
    positions' argmax agree (onnxruntime's with its recorded decode tokens, Loam's with onnxruntime's and
    with the record), the largest logit difference, and onnxruntime's top-two margins where Loam differs.
    None without onnxruntime here."""
    if not cases or importlib.util.find_spec("onnxruntime") is None:
        return None

    import numpy as np
    import onnxruntime

    config = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))["model"]["decoder"]
    session = onnxruntime.InferenceSession(str(folder / config["filename"]), providers=["CPUExecutionProvider"])
    loader = importlib.util.spec_from_file_location("genai_teacher", module_path)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    weights = module.Weights.embedded()
    names = [i.name for i in session.get_inputs()]
    assert len(names) == len(module.INPUTS)
    empty = np.zeros((1, config["num_key_value_heads"], 0, config["head_size"]), np.float32)
    counts = {"peer_record": 0, "loam_peer": 0, "loam_record": 0, "positions": 0}
    worst, margins = 0.0, []
    for case in cases:
        ids = case["prompt"] + case["generated"]
        feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64)}
        inputs = [feeds.get(n, empty) for n in names]
        span = slice(len(case["prompt"]) - 1, len(ids) - 1)  # the logits that chose each recorded token
        peer = session.run(None, dict(zip(names, inputs, strict=True)))[0][0, span]
        loam = module.forward(weights, *inputs)[0][0, span]
        record = np.array(case["generated"])
        agree = loam.argmax(-1) == peer.argmax(-1)
        counts["peer_record"] += int((peer.argmax(-1) == record).sum())
        counts["loam_peer"] += int(agree.sum())
        counts["loam_record"] += int((loam.argmax(-1) == record).sum())
        counts["positions"] += len(record)
        worst = max(worst, float(np.abs(loam - peer).max()))
        top = np.sort(peer, axis=-1)
        margins += [round(float(m), 3) for m in (top[:, -1] - top[:, -2])[~agree]]
    return {**counts, "max_logit_diff": worst, "margins": margins, "onnxruntime": onnxruntime.__version__}


def measure(args: argparse.Namespace, folder: Path, python: str | None, scratch: Path) -> dict[str, Any]:
    print(f"bench.genai: building {folder} with Loam", flush=True)
    module, build_s, facts = build(folder, scratch)
    cases = recorded(args.record, folder.name, args.quick)
    repeats = 1 if args.quick else 5
    spec = {**facts, "model": str(folder), "module": str(module), "prompt": args.prompt, "repeats": repeats}
    spec["steps"] = 2 if args.quick else 15
    sides: dict[str, dict[int, dict[str, Any]]] = {"loam": {}, "peer": {}}
    for n, threads in enumerate(args.threads):
        check = cases if n == 0 else []
        print(f"bench.genai: {folder.name}, Loam at {threads} thread(s)", flush=True)
        sides["loam"][threads] = child(sys.executable, LOAM_CHILD, {**spec, "check": check}, threads)
        if python is not None:
            print(f"bench.genai: {folder.name}, onnxruntime-genai at {threads} thread(s)", flush=True)
            sides["peer"][threads] = child(python, PEER_CHILD, {**spec, "check": check}, threads)
    first = args.threads[0]
    builds = sorted(cases[0]["builds"]) if cases else []
    tokens = {
        (side, build): [
            got == case["builds"][build] for got, case in zip(sides[side][first]["checked"], cases, strict=True)
        ]
        for side in sides
        if first in sides[side]
        for build in builds
        if side == "loam" or build == folder.name
    }
    print(f"bench.genai: {folder.name}, one pass over the recorded tokens (teacher forcing)", flush=True)
    forced = teacher_forced(folder, module, cases)
    return {
        "name": folder.name, "build_s": build_s, "facts": facts, "sides": sides, "tokens": tokens, "forced": forced
    }  # fmt: skip


def report(args: argparse.Namespace, runs: list[dict[str, Any]], python: str | None) -> str:
    import numpy as np

    version = next((s["version"] for r in runs for s in r["sides"]["peer"].values()), "absent")
    lines = [
        "# onnxruntime-genai's int4 models: Loam's module against onnxruntime-genai",
        "",
        f"Written by `python -m bench.genai {' '.join(f'--model {m}' for m in args.model)}` on "
        f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; {platform.machine()}, {os.cpu_count()} cores "
        f"({platform.processor() or platform.platform()}), Python {platform.python_version()}, numpy "
        f"{np.__version__}, onnxruntime-genai {version}; prefill {args.prompt} tokens, then decode steps with "
        f"a past growing from {args.prompt}; medians of {1 if args.quick else 5} (prefill) and "
        f"{2 if args.quick else 15} (decode) runs.",
    ]
    for run in runs:
        lines += [
            "",
            f"## {run['name']}",
            "",
            f"Loam's build (read model.onnx and its data, build, write the module and its weights file): "
            f"{run['build_s']:.1f} s; the model's .data file: {run['facts']['data_bytes'] / 2**20:.1f} MiB.",
            "",
        ]
        for (side, build), oks in run["tokens"].items():
            who = "Loam" if side == "loam" else "onnxruntime-genai (rerun)"
            verdict = "equal" if all(oks) else "NOT equal"
            lines.append(
                f"- greedy tokens, {who} on {run['name']}: {verdict} to onnxruntime-genai's recorded tokens for "
                f"{build} on {sum(oks)} of {len(oks)} prompts ({oks})"
            )
        if not run["tokens"]:
            lines.append("- greedy tokens: no record for this build; not checked")
        forced = run["forced"]
        if forced is not None:
            n = forced["positions"]
            lines.append(
                f"- one pass over each prompt and its {run['name']} record (teacher forcing), onnxruntime "
                f"{forced['onnxruntime']} against Loam: onnxruntime's argmax equals its own recorded decode "
                f"tokens at {forced['peer_record']} of {n} positions; Loam's equals onnxruntime's at "
                f"{forced['loam_peer']} of {n} (where not, onnxruntime's top-two margin: "
                f"{', '.join(map(str, forced['margins'])) or 'none'}) and the record at {forced['loam_record']} "
                f"of {n}; largest |logit difference| {forced['max_logit_diff']:.2g}"
            )
        lines += [
            "",
            "| side | threads | prefill s | prefill tokens/s | decode step s | decode tokens/s | weights MiB "
            "| load s | peak RSS MiB |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for side, label in (("loam", "Loam (numpy, packed int4)"), ("peer", "onnxruntime-genai")):
            for threads, s in run["sides"][side].items():
                lines.append(
                    f"| {label} | {threads} | {s['prefill_s']:.3f} | {args.prompt / s['prefill_s']:.1f} | "
                    f"{s['decode_s']:.4f} | {1 / s['decode_s']:.1f} | {s['weights'] / 2**20:.1f} | "
                    f"{s['load_s']:.2f} | {s['peak'] / 2**20:.1f} |"
                )
        lines.append("")
        for threads in run["sides"]["peer"]:
            loam, peer = run["sides"]["loam"][threads], run["sides"]["peer"][threads]
            lines.append(
                f"- Loam/onnxruntime-genai at {threads} thread(s): prefill "
                f"{loam['prefill_s'] / peer['prefill_s']:.2f}x the time, decode "
                f"{loam['decode_s'] / peer['decode_s']:.2f}x the time, weights "
                f"{loam['weights'] / peer['weights']:.2f}x the peer's RSS growth "
                f"({loam['weights'] / run['facts']['data_bytes']:.2f}x its .data file), peak RSS "
                f"{loam['peak'] / peer['peak']:.2f}x"
            )
        if not run["sides"]["peer"]:
            lines.append(
                "- onnxruntime-genai: not measured (`--no-peer`, or no interpreter here imports onnxruntime_genai)"
            )
    lines += ["", NOTES.strip()]
    return "\n".join(lines) + "\n"


NOTES = """
## Reading the results

- The recorded tokens are scripts/make_genai_smollm2.py's: onnxruntime-genai's greedy tokens (32 new)
  for three chat prompts, for the builder's default build (`int4`, MatMulNBits `accuracy_level=4`) and for
  `int4-acc1` (`accuracy_level=1`).  The two builds' weights are the same bytes; their graphs differ in the
  MatMulNBits' `accuracy_level` alone, which allows onnxruntime to quantize each product's activations to
  int8.  Loam's module computes every MatMulNBits in float32 at either level, so its tokens are those of
  the accuracy_level=1 build; the rerun line checks that onnxruntime-genai reproduces its record at the
  bench's first thread count.
- The teacher-forced line shows what the accuracy_level 4 record is made of: onnxruntime's one pass over
  the same tokens picks another token than its own decode steps did at some positions (the int8 rounding
  of each product's activations depends on which rows it sees), and Loam's float32 module agrees with that
  pass as often; where the two differ, onnxruntime's own top two are within a few hundredths.  Rounding
  Loam's activations to int8 as onnxruntime does (tried: it matches one MatMulNBits node to 1e-7 given the
  same input) does not bring the tokens closer: the 1e-7 float summation leaves in an attention's output
  flips int8 codes, and two layers later the difference is 1e-2.
- Weights: Loam's column is every array `Weights` holds, the int4 blocks and scales as the `.data` file
  stores them (memory-mapped from the module's weights file, never widened).  onnxruntime-genai's is its
  resident set's growth over `og.Model`: its MatMulNBits weights as onnxruntime prepacks them (a
  layout that depends on accuracy_level), its session's arenas and the code pages it touches.
- A decode step of onnxruntime-genai is one `generate_next_token` (one model run on the last token and a
  greedy pick); the call right after `append_tokens` runs no model (that prefill computed its logits)
  and is not timed.  A Loam step is one `forward` and an argmax.
- Loam's MatMulNBits is `kernel_matmul_nbits`: with numba installed (as here), a decode step runs a
  compiled row kernel that reads each block's bytes once (`_rows_nbits`, one thread whatever the BLAS
  threads); a prefill widens a bounded group of rows to float32 at a time (`_widen_nbits`) and multiplies
  with BLAS.
"""


def main(argv: Sequence[str] | None = None) -> int:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(prog="python -m bench.genai", description=doc.split("\n\n")[0])
    parser.add_argument(
        "--model",
        action="append",
        type=Path,
        help="a folder the builder wrote (model.onnx, its .data, genai_config.json); repeatable; "
        "default $LOAM_GENAI_MODEL",
    )
    parser.add_argument("--record", type=Path, default=RECORD, help=f"recorded greedy tokens (default {RECORD})")
    parser.add_argument("--peer-python", help="the interpreter that runs onnxruntime-genai")
    parser.add_argument("--no-peer", action="store_true", help="time Loam's module alone")
    parser.add_argument("--threads", default=f"1,{os.cpu_count() or 1}", help="thread counts (default 1,all cores)")
    parser.add_argument("--prompt", type=int, default=PROMPT, help=f"prefill tokens (default {PROMPT})")
    parser.add_argument("--quick", action="store_true", help="one repeat, one recorded prompt, nothing written")
    parser.add_argument("--output", type=Path, help=f"where to write the results (default {RESULTS})")
    args = parser.parse_args(argv)
    args.threads = sorted({int(t) for t in args.threads.split(",")})
    if not args.model:
        env = os.environ.get("LOAM_GENAI_MODEL")
        if not env:
            return skip("no model: pass --model DIR or set LOAM_GENAI_MODEL (scripts/make_genai_smollm2.py builds one)")
        args.model = [Path(env)]
    for folder in args.model:
        if not (folder / "genai_config.json").is_file() or not (folder / "model.onnx").is_file():
            return skip(f"{folder} holds no onnxruntime-genai model (genai_config.json, model.onnx)")
    python = None if args.no_peer else peer_python(args.peer_python)
    if python is None and not args.no_peer:
        print("bench.genai: no interpreter imports onnxruntime_genai (--peer-python); timing Loam alone")
    if importlib.util.find_spec("onnx") is None:
        return skip("onnx is not installed")
    with tempfile.TemporaryDirectory(prefix="loam-bench-genai-") as scratch:
        runs = [measure(args, folder, python, Path(scratch)) for folder in args.model]
    text = report(args, runs, python)
    publish(text, args, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
