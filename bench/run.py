"""`python -m bench`: time Loam's generated numpy module against onnxruntime on the same models.

What and why: the generated module is plain numpy, so its cost against a tuned runtime is the
question every deployer asks first.  One run builds each case (`bench.cases`) with Loam, and in
the same process times `forward` and an onnxruntime session (CPU provider, every graph
optimisation on) on the same inputs, at one thread and at all cores (every case's `forward` first,
before the process imports onnxruntime, which changes how malloc serves large blocks afterwards): onnxruntime's
`intra_op_num_threads` and numpy's BLAS threads (threadpoolctl when installed; otherwise each
thread count is measured in a child process started with OMP_NUM_THREADS/OPENBLAS_NUM_THREADS).

Reported per case: the median warm forward time of each side and their ratio, the largest output
difference (a guard against timing a wrong module), Loam's build time and generated-module size,
the cold start of each side, and each side's peak memory.  Cold start and memory are measured in a
fresh child process per side and run, all cores: from the child's first statement, `import numpy`
and the generated module (its .pyc already written) + `Weights.load_file` + the first forward,
against `import onnxruntime` + `InferenceSession` on the model file + the first `run`; then more
forwards, and the process's peak resident set (VmHWM in /proc/self/status, else `getrusage`
ru_maxrss, which on Linux keeps the forking parent's peak across exec: numpy, the runtime, the
weights and every buffer, not only numpy's allocations).  For the MLP at batch 256 the forward is
also compared with its three matrix products alone (the BLAS limit).  Cases where Loam is more
than 1.5x slower are profiled with cProfile ("Where the time goes").

    python -m bench                 # full run; writes bench/RESULTS.md
    python -m bench --quick         # a few repeats, one thread count, nothing written (smoke test)
    python -m bench --output FILE   # write the results there instead
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import importlib.util
import json
import math
import os
import platform
import pstats
import py_compile
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.cases import BLAS_CASE, ROOT, Case, Feeds, all_cases, mlp_products

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SLOW_RATIO = 1.5
NOTES_HEADING = "## Notes"


@dataclass(frozen=True)
class Budget:
    """How hard to try: repeats, time per measurement, thread counts and child processes."""

    warmup: int
    min_repeats: int
    min_seconds: float
    max_repeats: int
    threads: tuple[int, ...]
    cold_runs: int
    profile: bool


FULL = Budget(warmup=5, min_repeats=30, min_seconds=1.5, max_repeats=20000, threads=(), cold_runs=5, profile=True)
QUICK = Budget(warmup=1, min_repeats=3, min_seconds=0.0, max_repeats=3, threads=(1,), cold_runs=1, profile=False)


@dataclass
class Timing:
    """One case at one thread count."""

    case: str
    threads: int
    loam_s: float
    ort_s: float
    max_diff: float
    blas_s: float | None = None
    statements: int = 0
    """Python statements the generated module runs in one forward (its calls of numpy and of its pieces)."""
    forward_statements: int = 0
    """Those of them in `forward`'s own body."""

    @property
    def ratio(self) -> float:
        return self.loam_s / self.ort_s


@dataclass
class Startup:
    """One case's build, module size, cold start and peak memory."""

    case: str
    build_s: float
    module_bytes: int
    loam_cold_s: float
    ort_cold_s: float
    loam_rss_mib: float
    ort_rss_mib: float
    numpy_import_s: float
    carried_cold_s: float
    """Loam's cold start built from the model file onnxruntime reads (its initializers inside): the
    module, the weights file written beside it, `Weights.embedded()`."""
    carried_rss_mib: float
    weights_load_s: float = 0.0
    """`Weights.load_file`, warm (`Built.weights_load_s`)."""
    weights_viewed_kib: float = 0.0
    weights_held_kib: float = 0.0


@dataclass
class Device:
    """One case through the WGSL module on this machine's WebGPU adapter (`device_case`)."""

    case: str
    adapter: str
    dispatches: int
    """Compute dispatches of one forward (after the first)."""
    crossing_bytes: int
    """Bytes between host and device in one forward after the first: inputs up, outputs down."""
    activation_bytes: int
    """The activation buffers of this binding of the extents (after liveness reuse)."""
    resident_bytes: int
    """The weights and constants on the device."""
    wgsl_s: float
    numpy_s: float
    ort_s: float
    max_diff: float
    """Largest difference between the WGSL module's outputs and the numpy module's."""


@dataclass
class Built:
    """A case built: the module, its source, its weights and inputs, and the ONNX names in forward's order."""

    case: Case
    module: object
    source: str
    build_s: float
    inputs: list[str]
    feeds: Feeds
    full_model: bytes
    weights: object = field(repr=False, default=None)
    weights_load_s: float = 0.0
    """The median `Weights.load_file` (the file already in the page cache)."""
    weights_kib: tuple[float, float] = (0.0, 0.0)
    """What `Weights` reads: KiB viewed in the checkpoint's map, and KiB of arrays it holds itself."""


# ---- building and calling


def build_case(case: Case) -> Built:
    from loam.driver.options import Options
    from loam.driver.pipeline import build
    from loam.testing import forward_inputs

    if case.make_files is not None:
        case.make_files()
    options = Options.from_toml(case.options)
    checkpoints = [] if options.checkpoints else [case.checkpoint]
    model = case.model()
    start = time.perf_counter()
    result = build(model, checkpoints=checkpoints, options=options)
    build_s = time.perf_counter() - start
    module = result.module
    feeds = case.make_feeds(np.random.default_rng(20240611))
    built = Built(
        case, module, result.source, build_s, forward_inputs(result), feeds, case.full_model().SerializeToString()
    )
    built.weights = module.Weights.load_file(str(case.checkpoint))  # type: ignore[attr-defined]
    loads = []
    for _ in range(5):
        start = time.perf_counter()
        module.Weights.load_file(str(case.checkpoint))  # type: ignore[attr-defined]
        loads.append(time.perf_counter() - start)
    built.weights_load_s = statistics.median(loads)
    built.weights_kib = weights_memory(built.weights)
    return built


def weights_memory(weights: object) -> tuple[float, float]:
    """KiB of the arrays a `Weights` holds that view the checkpoint's memory map (the page cache's, shared
    and evictable), and KiB of those it holds itself (decoded at load, or prepared from the weights)."""
    viewed: dict[int, int] = {}
    held: dict[int, int] = {}
    for slot in type(weights).__slots__:
        value = getattr(weights, slot, None)
        if not isinstance(value, np.ndarray) or slot == "_source":  # the map itself
            continue
        root, owner = value, value.base
        while isinstance(owner, (np.ndarray, memoryview)):  # a view of a view, or of a buffer's bytes
            if isinstance(owner, np.ndarray):
                root = owner
            owner = owner.base if isinstance(owner, np.ndarray) else owner.obj
            if isinstance(owner, np.memmap):
                break
        mapped = isinstance(owner, np.memmap) or type(owner).__name__ == "mmap" or isinstance(root, np.memmap)
        (viewed if mapped else held)[id(root) if not mapped else id(value)] = value.nbytes
    return sum(viewed.values()) / 2**10, sum(held.values()) / 2**10


def loam_call(built: Built) -> Callable[[], object]:
    forward = built.module.forward  # type: ignore[attr-defined]
    args = [built.feeds[name] for name in built.inputs]
    weights = built.weights
    return lambda: forward(weights, *args)


def ort_session(built: Built, threads: int) -> object:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(built.full_model, opts, providers=["CPUExecutionProvider"])


def ort_call(built: Built, session: object) -> Callable[[], object]:
    wanted = [i.name for i in session.get_inputs()]  # type: ignore[attr-defined]
    feeds = {name: built.feeds[name] for name in wanted}
    run = session.run  # type: ignore[attr-defined]
    return lambda: run(None, feeds)


def outputs_of(value: object) -> list[np.ndarray]:
    return [np.asarray(v) for v in value] if isinstance(value, tuple | list) else [np.asarray(value)]


def largest_difference(got: object, want: object) -> float:
    a, b = outputs_of(got), outputs_of(want)
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        raise AssertionError("Loam and onnxruntime disagree on the outputs' number or shapes")
    return max(
        float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)), initial=0.0))
        for x, y in zip(a, b, strict=True)
    )


# ---- timing


def median_time(call: Callable[[], object], budget: Budget) -> float:
    """The median of repeated warm calls: after `warmup` calls, at least `min_repeats` and until
    `min_seconds` have passed (at most `max_repeats`)."""
    for _ in range(budget.warmup):
        call()
    times: list[float] = []
    clock = time.perf_counter
    start = clock()
    while len(times) < budget.max_repeats and (len(times) < budget.min_repeats or clock() - start < budget.min_seconds):
        t = clock()
        call()
        times.append(clock() - t)
    return statistics.median(times)


@contextlib.contextmanager
def blas_threads(threads: int) -> Iterator[None]:
    """numpy's BLAS limited to `threads` while inside (threadpoolctl), or left as the environment set it."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=threads):
        yield


def time_loam(built: Built, threads: int, budget: Budget) -> Timing:
    """Loam's side of a case at `threads`, timed before this process imports onnxruntime (see `measure`);
    `time_ort` fills in the other side."""
    loam = loam_call(built)
    with blas_threads(threads):
        loam_s = median_time(loam, budget)
        blas_s = None
        if built.case.name == BLAS_CASE:
            from safetensors.numpy import load_file

            products = mlp_products(load_file(str(built.case.checkpoint)), built.feeds["x"])
            blas_s = median_time(products, budget)
    statements, own = statements_per_forward(loam)
    return Timing(built.case.name, threads, loam_s, math.nan, math.nan, blas_s, statements, own)


def statements_per_forward(call: Callable[[], object]) -> tuple[int, int]:
    """The Python statements one warm call runs in the generated module (each a call of numpy, of a
    runtime piece, or the pieces' own bookkeeping), and those in `forward`'s body: `sys.settrace`
    sees every line the module's frames run, which a profiler's call events do not (numpy's ufuncs
    are not functions it reports)."""
    call()
    counts = [0, 0]

    def line(frame: Any, event: str, _arg: object) -> Any:
        if event == "line":
            counts[0] += 1
            counts[1] += frame.f_code.co_name == "forward"
        return line

    def enter(frame: Any, _event: str, _arg: object) -> Any:
        return line if frame.f_code.co_filename.startswith("<loam") else None

    sys.settrace(enter)
    try:
        call()
    finally:
        sys.settrace(None)
    return counts[0], counts[1]


def time_ort(built: Built, timing: Timing, budget: Budget) -> Timing:
    """`timing` with onnxruntime's side at the same thread count, and the largest output difference."""
    session = ort_session(built, timing.threads)
    loam, ort = loam_call(built), ort_call(built, session)
    with blas_threads(timing.threads):
        diff = largest_difference(loam(), ort())
        ort_s = median_time(ort, budget)
    return replace(timing, ort_s=ort_s, max_diff=diff)


def profile_case(built: Built, budget: Budget, top: int = 3) -> list[str]:
    """Where Loam's forward spends its time (cProfile, one thread): the generated module's functions
    taking the most, callees included, and `forward`'s own time (its body's per-statement cost)."""
    call = loam_call(built)
    for _ in range(budget.warmup):
        call()
    profiler = cProfile.Profile()
    with blas_threads(1):
        profiler.enable()
        start = time.perf_counter()
        calls = 0
        while calls < 20 or time.perf_counter() - start < 1.0:
            call()
            calls += 1
        profiler.disable()
    entries = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    generated = {key: value for key, value in entries.items() if key[0].startswith("<loam")}
    total = next((ct for (_f, _l, name), (_cc, _nc, _tt, ct, _c) in generated.items() if name == "forward"), 0.0)
    total = total or 1.0
    lines = []
    ranked = sorted(
        ((key, value) for key, value in generated.items() if key[2] != "forward"), key=lambda kv: kv[1][3], reverse=True
    )
    for (_file, _line, name), (_cc, ncalls, _tt, ct, _callers) in ranked[:top]:
        lines.append(f"{name} {100 * ct / total:.0f}% ({ncalls // calls}/forward)")
    own = next((tt for (_f, _l, name), (_cc, _nc, tt, _ct, _c) in generated.items() if name == "forward"), 0.0)
    lines.append(f"forward's own statements {100 * own / total:.0f}%")
    return lines


# ---- cold start and memory, in fresh processes

CHILD = r"""
import time
_t0 = time.perf_counter()
import json, resource, sys
spec = json.loads(sys.argv[1])
import numpy as np
_numpy = time.perf_counter() - _t0
feeds = np.load(spec["feeds"])
if spec["side"] == "loam":
    import importlib.util
    mspec = importlib.util.spec_from_file_location("loam_bench_module", spec["module"])
    module = importlib.util.module_from_spec(mspec)
    sys.modules["loam_bench_module"] = module
    mspec.loader.exec_module(module)
    weights = module.Weights.load_file(spec["checkpoint"]) if spec["checkpoint"] else module.Weights.embedded()
    args = [feeds[name] for name in spec["inputs"]]
    run = lambda: module.forward(weights, *args)
else:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = spec["threads"]
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(spec["model"], opts, providers=["CPUExecutionProvider"])
    inputs = {i.name: feeds[i.name] for i in session.get_inputs()}
    run = lambda: session.run(None, inputs)
run()
cold = time.perf_counter() - _t0
for _ in range(spec["repeats"]):
    run()
try:  # this process's own high-water mark: ru_maxrss would keep the forking parent's across exec
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
except (OSError, StopIteration):
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"cold_s": cold, "numpy_s": _numpy, "maxrss_kib": peak}))
"""


def thread_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    return env


def run_child(spec: dict[str, object], threads: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(spec)],
        env=thread_env(threads),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench child ({spec['side']}) failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def startup_case(built: Built, scratch: Path, budget: Budget) -> Startup:
    name = built.case.name
    module_path = scratch / f"{name.replace('-', '_')}.py"
    module_path.write_text(built.source, encoding="utf-8")
    py_compile.compile(str(module_path), doraise=True)  # a deployed module has its .pyc
    model_path = scratch / f"{name}.onnx"
    model_path.write_bytes(built.full_model)
    feeds_path = scratch / f"{name}.npz"
    np.savez(feeds_path, **built.feeds)
    threads = os.cpu_count() or 1
    common = {"feeds": str(feeds_path), "threads": threads, "repeats": 3 if budget.profile else 1}
    loam_spec = {**common, "side": "loam", "module": str(module_path), "checkpoint": str(built.case.checkpoint)}
    loam_spec["inputs"] = built.inputs
    carried_path = scratch / f"{name.replace('-', '_')}_carried.py"
    carried_build(built).write(carried_path)
    py_compile.compile(str(carried_path), doraise=True)
    carried_spec = {**loam_spec, "module": str(carried_path), "checkpoint": None}
    ort_spec = {**common, "side": "ort", "model": str(model_path)}
    loam_runs, ort_runs, carried_runs = [], [], []
    for _ in range(budget.cold_runs):  # alternated, so a busy moment hurts every side alike
        loam_runs.append(run_child(loam_spec, threads))
        ort_runs.append(run_child(ort_spec, threads))
        carried_runs.append(run_child(carried_spec, threads))

    def median(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    return Startup(
        name,
        built.build_s,
        len(built.source.encode("utf-8")),
        median(loam_runs, "cold_s"),
        median(ort_runs, "cold_s"),
        max(r["maxrss_kib"] for r in loam_runs) / 1024,
        max(r["maxrss_kib"] for r in ort_runs) / 1024,
        median(loam_runs + ort_runs, "numpy_s"),
        median(carried_runs, "cold_s"),
        max(r["maxrss_kib"] for r in carried_runs) / 1024,
        built.weights_load_s,
        *built.weights_kib,
    )


def carried_build(built: Built) -> object:
    """The case built from the model file onnxruntime reads, initializers inside (no checkpoint)."""
    import dataclasses

    import onnx

    from loam.driver.options import Options
    from loam.driver.pipeline import build

    options = dataclasses.replace(Options.from_toml(built.case.options), checkpoints=())
    return build(onnx.load_from_string(built.full_model), options=options)


# ---- the report


def machine() -> list[str]:
    import onnxruntime

    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        import threadpoolctl

        blas = ", ".join(
            f"{i['internal_api']} {i['version']}" for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"
        )
        control = f"threadpoolctl {threadpoolctl.__version__}"
    except ImportError:
        blas, control = "unknown", "OMP_NUM_THREADS/OPENBLAS_NUM_THREADS in a child per thread count"
    return [
        f"- CPU: {cpu}, {os.cpu_count()} cores ({platform.machine()}, {platform.system()} {platform.release()})",
        f"- Python {platform.python_version()}, numpy {np.__version__} (BLAS: {blas or 'none found'}), "
        f"onnxruntime {onnxruntime.__version__} (CPUExecutionProvider, ORT_ENABLE_ALL)",
        f"- BLAS threads set by {control}; onnxruntime by intra_op_num_threads (inter_op 1)",
    ]


def tables(timings: Sequence[Timing], startups: Sequence[Startup]) -> list[str]:
    lines = [
        "### Warm forward (median)",
        "",
        "| case | threads | Loam ms | onnxruntime ms | Loam/ORT | max abs diff |",
        "|---|---|---|---|---|---|",
    ]
    for t in timings:
        times = f"{1e3 * t.loam_s:.4g} | {1e3 * t.ort_s:.4g}"
        lines.append(f"| {t.case} | {t.threads} | {times} | {t.ratio:.2f} | {t.max_diff:.1e} |")
    lines += [
        "",
        "### Python work per forward",
        "",
        "| case | statements the module runs | of them in forward's body |",
        "|---|---|---|",
    ]
    seen = set()
    for t in timings:
        if t.case not in seen:
            seen.add(t.case)
            lines.append(f"| {t.case} | {t.statements} | {t.forward_statements} |")
    blas = [t for t in timings if t.blas_s is not None]
    if blas:
        lines += ["", "### BLAS limit", "", "| case | threads | Loam ms | matrix products alone ms | ratio |"]
        lines.append("|---|---|---|---|---|")
        for t in blas:
            assert t.blas_s is not None
            lines.append(
                f"| {t.case} | {t.threads} | {1e3 * t.loam_s:.4g} | {1e3 * t.blas_s:.4g} | {t.loam_s / t.blas_s:.2f} |"
            )
    lines += [
        "",
        "### Build, cold start and memory (fresh process per side, all cores)",
        "",
        "| case | build s | module KiB | Loam cold ms | onnxruntime cold ms | Loam/ORT cold "
        "| Loam peak RSS MiB | onnxruntime peak RSS MiB | Loam cold from the model file ms | its /ORT "
        "| its peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in startups:
        lines.append(
            f"| {s.case} | {s.build_s:.3f} | {s.module_bytes / 1024:.1f} | {1e3 * s.loam_cold_s:.1f} "
            f"| {1e3 * s.ort_cold_s:.1f} | {s.loam_cold_s / s.ort_cold_s:.2f} | {s.loam_rss_mib:.1f} "
            f"| {s.ort_rss_mib:.1f} | {1e3 * s.carried_cold_s:.1f} | {s.carried_cold_s / s.ort_cold_s:.2f} "
            f"| {s.carried_rss_mib:.1f} |"
        )
    if startups:
        numpy_ms = 1e3 * statistics.median(s.numpy_import_s for s in startups)
        lines += ["", f"Of each cold start, `import numpy` alone (both sides pay it) takes a median {numpy_ms:.1f} ms."]
        lines += [
            "",
            "### Weights (`Weights.load_file`, the checkpoint in the page cache)",
            "",
            "| case | load ms | KiB viewed in the checkpoint's map | KiB Weights holds (decoded or prepared at load) |",
            "|---|---|---|---|",
        ]
        for s in startups:
            lines.append(
                f"| {s.case} | {1e3 * s.weights_load_s:.2f} | {s.weights_viewed_kib:.1f} | {s.weights_held_kib:.1f} |"
            )
    return lines


def device_table(devices: Sequence[Device]) -> list[str]:
    """The WGSL module's rows: what one forward does on the device, and its time on this adapter."""
    if not devices:
        return []
    lines = [
        "",
        f"### WGSL module (`--backend wgsl`) on this machine's adapter: {devices[0].adapter}",
        "",
        "Dispatches and bytes are per forward after the first (only inputs go up and outputs come down);",
        "device bytes are the activation buffers of the timed binding and the resident weights. Times are",
        "medians at 1 thread for numpy and onnxruntime; the adapter here is Mesa's llvmpipe, a CPU",
        "rasteriser, so WGSL times say nothing of a GPU's.",
        "",
        "| case | dispatches | bytes crossing | activation KiB | resident KiB | WGSL ms | numpy ms "
        "| onnxruntime ms | WGSL/numpy | max abs diff |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in devices:
        lines.append(
            f"| {d.case} | {d.dispatches} | {d.crossing_bytes} | {d.activation_bytes / 1024:.1f} "
            f"| {d.resident_bytes / 1024:.1f} | {1e3 * d.wgsl_s:.4g} | {1e3 * d.numpy_s:.4g} | {1e3 * d.ort_s:.4g} "
            f"| {d.wgsl_s / d.numpy_s:.2f} | {d.max_diff:.1e} |"
        )
    return lines


METHOD = """\
Method: `python -m bench` (bench/run.py says what each column measures). Warm forward: the median
of at least {repeats} calls and {seconds} s per side after {warmup} warm-up calls, both sides in the
same process on the same inputs, Loam's before the process imports onnxruntime (importing it makes
glibc's malloc map every large block afresh for the rest of the process, which doubles a forward
whose kernels allocate scratch: a deployed module does not share its process with onnxruntime).
Cold start: from a fresh child process's first statement to the
end of its first forward (`import numpy` + the generated module, .pyc written + `Weights.load_file`;
against `import onnxruntime` + `InferenceSession` on the model file + `run`), the median of {cold}
children per side, alternated; Python's own start-up is left out of both. Peak RSS: the high-water
resident set (VmHWM) of those children after {more} more forwards (the whole process, runtime included), the
largest of the runs. Module size: the generated source (weights stay in the checkpoint). "From the model
file": the same case built from the ONNX file onnxruntime reads (initializers inside), its weights
written beside the module and memory-mapped by `Weights.embedded()`."""


def report(
    budget: Budget, timings: Sequence[Timing], startups: Sequence[Startup], profiles: dict[str, list[str]]
) -> str:
    when = datetime.datetime.now().astimezone().strftime("%a %b %d %H:%M:%S %Z %Y")
    lines = ["# Bench results", "", f"Run: {when}", "", *machine(), ""]
    lines.append(
        METHOD.format(
            repeats=budget.min_repeats,
            seconds=budget.min_seconds,
            warmup=budget.warmup,
            cold=budget.cold_runs,
            more=3 if budget.profile else 1,
        )
    )
    devices = [Device(**json.loads(row)) for row in profiles.get("_device", [])]
    profiles = {k: v for k, v in profiles.items() if k != "_device"}
    lines += ["", *tables(timings, startups), *device_table(devices), ""]
    if budget.profile:
        lines += ["## Where the time goes", ""]
        if not profiles:
            lines.append(f"No case is more than {SLOW_RATIO}x slower than onnxruntime.")
        for name, entries in profiles.items():
            worst = max(t.ratio for t in timings if t.case == name)
            lines.append(
                f"- {name} (Loam/ORT up to {worst:.2f}; cProfile, 1 thread, share of forward): " + "; ".join(entries)
            )
        lines.append("")
    return "\n".join(lines)


def kept_notes(path: Path) -> str:
    """The hand-written notes section of an earlier RESULTS.md, carried into the new one."""
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8")
    at = text.find(NOTES_HEADING)
    return text[at:] if at >= 0 else ""


# ---- the run


def device_case(built: Built, budget: Budget, numpy_s: float | None = None) -> Device | None:
    """Build the case for the WGSL backend and time it on the machine's adapter against the numpy
    module and onnxruntime (1 thread each; `numpy_s`, the numpy module's time measured alone, where
    given); None where wgpu or an adapter is missing."""
    if importlib.util.find_spec("wgpu") is None or not built.case.on_device:
        return None
    from loam.driver.options import Options
    from loam.driver.pipeline import build

    case = built.case
    options = Options.from_toml(case.options)
    checkpoints = [] if options.checkpoints else [case.checkpoint]
    try:
        module = build(case.model(), checkpoints=checkpoints, options=options, fuse="dispatch", backend="wgsl").module
        weights = module.Weights.load_file(str(case.checkpoint))  # type: ignore[attr-defined]
        args = [built.feeds[name] for name in built.inputs]
        forward = module.forward  # type: ignore[attr-defined]
        got = forward(weights, *args)
    except Exception as err:  # no adapter on this machine: the table says so instead
        print(f"{case.name}: the WGSL module did not run here: {err}", file=sys.stderr)
        return None
    g = module._gpu()  # type: ignore[attr-defined]
    before = dict(g.stats)
    forward(weights, *args)
    moved = {k: g.stats[k] - before[k] for k in before}
    pool = g.pools[next(reversed(g.pools))]
    with blas_threads(1):
        wgsl_s = median_time(lambda: forward(weights, *args), budget)
        if numpy_s is None:
            numpy_s = median_time(loam_call(built), budget)
        ort_s = median_time(ort_call(built, ort_session(built, 1)), budget)
    return Device(
        case.name, g.adapter, moved["dispatches"], moved["bytes_up"] + moved["bytes_down"],
        sum(b.size for b in pool), sum(b.size for b in weights._resident[1]), wgsl_s, numpy_s, ort_s,
        largest_difference(got, loam_call(built)()),
    )  # fmt: skip


def measure(budget: Budget, names: Sequence[str] | None, say: Callable[[str], None]) -> tuple[list, list, dict]:
    cases = [c for c in all_cases() if names is None or c.name in names]
    threads = budget.threads or tuple(sorted({1, os.cpu_count() or 1}))
    timings: list[Timing] = []
    startups: list[Startup] = []
    profiles: dict[str, list[str]] = {}
    # Loam's warm forwards are timed first, before this process imports onnxruntime: importing it
    # changes how glibc's malloc serves large blocks for the rest of the process (each one becomes a
    # fresh mapping, faulted in page by page), which doubles the time of a forward whose kernels
    # allocate their scratch (the digits CNN: 0.44 ms alone, 0.9 ms once onnxruntime is imported).
    # A deployed module does not share its process with onnxruntime, so each side is timed as it runs alone.
    built_cases = []
    for case in cases:
        say(f"{case.name}: building")
        built = build_case(case)
        built_cases.append(built)
        for n in threads:
            say(f"{case.name}: timing Loam at {n} thread(s)")
            timings.append(time_loam(built, n, budget))
        if budget.profile:  # kept below for the cases that turn out slow
            say(f"{case.name}: profiling")
            profiles[case.name] = profile_case(built, budget)
    for built in built_cases:
        for i, timing in enumerate(timings):
            if timing.case == built.case.name:
                say(f"{built.case.name}: timing onnxruntime at {timing.threads} thread(s)")
                timings[i] = time_ort(built, timing, budget)
    with tempfile.TemporaryDirectory(prefix="loam-bench-") as scratch:
        for built in built_cases:
            case = built.case
            say(f"{case.name}: cold start and memory")
            startups.append(startup_case(built, Path(scratch), budget))
            if case.name in profiles and max(t.ratio for t in timings if t.case == case.name) <= SLOW_RATIO:
                del profiles[case.name]
            say(f"{case.name}: the WGSL module")
            alone = [t.loam_s for t in timings if t.case == case.name and t.threads == 1]
            device = device_case(built, budget, alone[0] if alone else None)
            if device is not None:
                profiles.setdefault("_device", []).append(json.dumps(asdict(device)))
    return timings, startups, profiles


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few repeats at one thread; writes nothing")
    parser.add_argument("--output", type=Path, help=f"where to write the results (default {RESULTS} for a full run)")
    parser.add_argument("--case", action="append", help="only this case (repeatable)")
    parser.add_argument("--threads", type=int, action="append", help="only this thread count (repeatable)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a child's rows, for the fallback
    args = parser.parse_args(argv)
    budget = QUICK if args.quick else FULL
    if args.quick and not args.case:  # the smoke test's run: the cases quick enough for it
        args.case = [c.name for c in all_cases() if c.quick]
    if args.threads:
        budget = Budget(**{**asdict(budget), "threads": tuple(args.threads)})
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if not args.json else (lambda _msg: None)

    if importlib.util.find_spec("threadpoolctl") is None and not args.json:
        timings, startups, profiles = measure_in_children(budget, args, say)
    else:
        timings, startups, profiles = measure(budget, args.case, say)
    if args.json:
        print(json.dumps({"timings": [asdict(t) for t in timings], "startups": [asdict(s) for s in startups],
                          "profiles": profiles}))  # fmt: skip
        return 0
    text = report(budget, timings, startups, profiles)
    print(text)
    output = args.output if args.output is not None else (None if args.quick or args.case else RESULTS)
    if output is not None:
        notes = kept_notes(output)
        output.write_text(text + ("\n" + notes if notes else ""), encoding="utf-8")
        say(f"wrote {output}")
    return 0


def measure_in_children(budget: Budget, args: argparse.Namespace, say: Callable[[str], None]) -> tuple:
    """Without threadpoolctl numpy's BLAS threads are fixed at import: measure each thread count in a
    child started with the thread variables set, and merge their rows."""
    threads = budget.threads or tuple(sorted({1, os.cpu_count() or 1}))
    timings: list[Timing] = []
    startups: list[Startup] = []
    profiles: dict[str, list[str]] = {}
    for i, n in enumerate(threads):
        say(f"measuring at {n} thread(s) in a child process")
        command = [sys.executable, "-m", "bench", "--json", "--threads", str(n)]
        command += ["--quick"] if args.quick else []
        for name in args.case or ():
            command += ["--case", name]
        done = subprocess.run(command, cwd=ROOT, env=thread_env(n), capture_output=True, text=True, check=True)
        rows = json.loads(done.stdout)
        timings += [Timing(**t) for t in rows["timings"]]
        if i == len(threads) - 1:  # cold start and memory are measured at all cores either way
            startups = [Startup(**s) for s in rows["startups"]]
        profiles.update(rows["profiles"])
    timings.sort(key=lambda t: [c.name for c in all_cases()].index(t.case))
    return timings, startups, profiles


def rows(output: str) -> dict[str, list[list[str]]]:
    """The table rows of a report by case name (each row's cells): what the smoke test reads."""
    found: dict[str, list[list[str]]] = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", cells[0]):
            found.setdefault(cells[0], []).append(cells[1:])
    return found
