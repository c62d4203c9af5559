"""Real speech and vision exports that pip packages carry, built once as a user would and run at several extents.

A user holding an `.onnx` file runs `loam layout model.onnx -o layout.toml` and `loam build model.onnx
--options layout.toml`, then calls the module at whatever extents the application has: a chunk of audio,
a sentence, an image.  `Export` is one such file and `Run` one use of it: a sequence of calls (state
carried from one call's outputs to the next call's inputs, as the package's own code feeds it), or one
call at an extent the graph must refuse.  `check` builds the export once (`built`: drafted layout, then
the build, cached per process and backend) and compares every call with onnxruntime's session on the
same file, each side carrying its own state.

`outcome` runs one case without raising, for the conformance summary's "real exports" table;
`pytest_params` gives the test modules one parameter per case, a strict xfail where
expected_failures.toml lists the first line of what stops it today (rewrite that file with `python -m
tests.models.real_exports --write-expectations`).
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from loam.driver.draft import draft_layout
from loam.driver.pipeline import BuildResult, build
from loam.testing import forward_inputs

EXPECTATIONS = Path(__file__).with_name("expected_failures.toml")

Feeds = dict[str, np.ndarray]

RTOL, ATOL = 1e-4, 1e-5
"""Float32 agreement with onnxruntime: the two sides sum each Conv, Gemm and LSTM gate in another order
(numpy's BLAS and Loam's kernels against onnxruntime's MLAS), a few ulps per sum that deep chains and
carried state grow to about 1e-5 relative; 1e-4 leaves room for that and still catches any wrong
index, padding or branch, which moves values by far more."""


def package_file(package: str, name: str) -> Path | None:
    """The file `name` that the installed distribution `package` carries (None when it is not installed).

    Found through importlib.metadata, never a site-packages path, and without importing the package:
    silero_vad's `__init__` imports torch, which its wheel is installed without."""
    try:
        files = distribution(package).files or []
    except PackageNotFoundError:
        return None
    for entry in files:
        if entry.name == name:
            path = Path(str(entry.locate()))
            return path if path.is_file() else None
    return None


def package_files(package: str, suffix: str) -> list[Path]:
    """Every file of the installed distribution `package` whose name ends with `suffix`, sorted."""
    try:
        files = distribution(package).files or []
    except PackageNotFoundError:
        return []
    return sorted(Path(str(f.locate())) for f in files if f.name.endswith(suffix))


@dataclass(frozen=True, eq=False)
class Run:
    """One use of an export: calls in order, each feeding `carried` outputs of the last to the next."""

    label: str
    """The case's name within its export (no spaces)."""
    extents: str
    """What the calls vary, for the summary (`input 1x576, 3 chunks`)."""
    steps: Callable[[], list[Feeds]]
    """Each call's own inputs (the carried ones come from `initial`, then from the previous call)."""
    initial: Callable[[], Feeds] = dict
    """The carried inputs of the first call."""
    carried: Mapping[str, str] = field(default_factory=dict)
    """Output name -> the input it becomes in the next call."""
    wrong: str | None = None
    """Set: the extent is one the graph forbids (onnxruntime refuses it too), and the module must raise
    ShapeError naming this input instead of computing anything."""


@dataclass(frozen=True, eq=False)
class Export:
    """One model file as a package carries it (or re-declared as a user re-exporting it would).  Compared by
    identity: each family's `exports()` is cached, so a process holds one of each."""

    name: str
    """The file's name without `.onnx`."""
    family: str
    load: Callable[[], onnx.ModelProto]
    runs: tuple[Run, ...]
    rtol: float = RTOL
    atol: float = ATOL
    host_fallback: bool = False
    """Its WGSL build (and its page) computes the kernels that have no device form yet on the host,
    as `loam build --backend wgsl --host-fallback` does; the build report lists them."""

    def case_id(self, run: Run) -> str:
        return f"{self.name}/{run.label}"


class WrongResult(AssertionError):
    """The module computed something where it had to refuse, or refused otherwise than named."""


def first_line(err: BaseException) -> str:
    """`ErrorClass: first line of its message`, as expected_failures.toml lists it."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


# One export at a time is held (its graph, session and builds): the cases run export by export, and the
# light zoo's VGG-19 alone is half a gigabyte of weights.
@functools.lru_cache(maxsize=1)
def model_of(export: Export) -> onnx.ModelProto:
    return export.load()


_BUILDS: dict[tuple[str, str], BuildResult | BaseException] = {}


def built(export: Export, backend: str = "numpy") -> BuildResult:
    """`export` built once per process and backend, as a user builds it: the layout `loam layout` drafts,
    unedited, then `loam build` with it (the WGSL module fused for dispatch, as the conformance cases
    are, and with --host-fallback where the export asks for it).  A refusal is kept too, so every run
    of the export sees the same one without building again."""
    key = (export.name, backend)
    if key not in _BUILDS:
        for other in [k for k in _BUILDS if k[0] != export.name]:
            del _BUILDS[other]
        try:
            model = model_of(export)
            options = draft_layout(model).options()
            fuse = "dispatch" if backend == "wgsl" else "memory"
            host = export.host_fallback and backend == "wgsl"
            _BUILDS[key] = build(model, options=options, fuse=fuse, backend=backend, host_fallback=host)
        except Exception as err:  # kept, and raised again for each run
            _BUILDS[key] = err
    found = _BUILDS[key]
    if isinstance(found, BaseException):
        raise found
    return found


@functools.lru_cache(maxsize=1)
def session(export: Export) -> Any:
    """onnxruntime's session on the same file, graph optimisations off (the oracle), one thread."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 4  # a wrong extent's refusal is expected: not logged
    return ort.InferenceSession(model_of(export).SerializeToString(), opts, providers=["CPUExecutionProvider"])


def output_names(export: Export) -> list[str]:
    return [o.name for o in model_of(export).graph.output]


def call_loam(result: BuildResult, feeds: Feeds) -> list[np.ndarray]:
    module = result.module
    weights = module.Weights.embedded() if hasattr(module.Weights, "embedded") else module.Weights()
    out = module.forward(weights, *[feeds[name] for name in forward_inputs(result)])
    return [np.asarray(o) for o in out] if isinstance(out, tuple) else [np.asarray(out)]


def call_onnxruntime(export: Export, feeds: Feeds) -> list[np.ndarray]:
    wanted = {i.name for i in session(export).get_inputs()}
    return list(session(export).run(None, {k: v for k, v in feeds.items() if k in wanted}))


def compare(export: Export, got: Sequence[np.ndarray], want: Sequence[np.ndarray], where: str) -> float:
    """The largest absolute difference of the outputs; AssertionError naming the output where they disagree
    (count, dtype, shape, or a value beyond the export's tolerance)."""
    from loam.testing import assert_same

    try:
        assert_same(got, want, rtol=export.rtol, atol=export.atol)
    except AssertionError as err:
        text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        raise AssertionError(f"{where}: {text}"[:2000]) from None
    diffs = [np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)) for g, w in zip(got, want, strict=True)]
    return max((float(d.max()) for d in diffs if d.size), default=0.0)


def carry(run: Run, names: Sequence[str], outputs: Sequence[np.ndarray]) -> Feeds:
    return {run.carried[name]: value for name, value in zip(names, outputs, strict=True) if name in run.carried}


def check(export: Export, run: Run, backend: str = "numpy") -> float:
    """Run `run` through the module built once from `export` and through onnxruntime; the largest
    absolute difference over every call.  Raises what stops it: the build's refusal, the module's
    error, an AssertionError where the numbers disagree, WrongResult where a wrong extent computes."""
    result = built(export, backend)
    if run.wrong is not None:
        return check_refused(export, run, result)
    names = output_names(export)
    mine, theirs = run.initial(), run.initial()
    worst = 0.0
    for index, feeds in enumerate(run.steps()):
        got = call_loam(result, {**feeds, **mine})
        want = call_onnxruntime(export, {**feeds, **theirs})
        worst = max(worst, compare(export, got, want, f"call {index + 1}"))
        mine, theirs = carry(run, names, got), carry(run, names, want)
    return worst


def names(message: str, tensor: str) -> bool:
    """Whether `message` names the input `tensor`: quoted (`input 'input' axis 1 must be 576`), or with the
    axis whose value breaks the condition (`... (MaxPool node 'n3'); data_0 axis 2 gives height = 16`)."""
    name = re.escape(tensor)
    return re.search(rf"'{name}'|(?<![\w/.]){name} axis \d", message) is not None


def check_refused(export: Export, run: Run, result: BuildResult) -> float:
    """A call at an extent the graph forbids: onnxruntime refuses it, and the module raises ShapeError
    naming the input (its class is the module's own, so it is known by name)."""
    (feeds,) = run.steps()
    feeds = {**feeds, **run.initial()}
    try:
        call_onnxruntime(export, feeds)
    except Exception:
        pass
    else:
        raise AssertionError(f"onnxruntime runs {run.extents}: not a wrong extent")
    try:
        call_loam(result, feeds)
    except Exception as err:
        if type(err).__name__ == "ShapeError" and names(str(err), run.wrong):
            return 0.0
        raise WrongResult(f"{run.extents}: {first_line(err)} (wanted a ShapeError naming '{run.wrong}')") from err
    raise WrongResult(f"{run.extents}: the module computed a result (wanted a ShapeError naming '{run.wrong}')")


@dataclass(frozen=True)
class Outcome:
    """One case as the summary reports it."""

    export: Export
    run: Run
    numpy_builds: bool
    wgsl_builds: bool | None
    """None: the WGSL build was not tried."""
    max_error: float | None
    """None: the case did not complete."""
    stopped_by: str
    """The first line of what stopped the case ('' where it passed)."""
    wgsl_refusal: str = ""
    """The first line of the WGSL build's refusal ('' where it builds or was not tried)."""
    wgsl_host: tuple[str, ...] = ()
    """The nodes its WGSL build computes on the host (`host_fallback` exports), as the report lists them."""

    @property
    def passed(self) -> bool:
        return not self.stopped_by


def host_counts(listed: Sequence[str]) -> dict[str, int]:
    """A WGSL build's host nodes as its report lists them (`/dp/flows.7/NonZero_1 (reason)`), counted by
    operator (the node name's last part without its `_N`)."""
    found: dict[str, int] = {}
    for line in listed:
        op = re.sub(r"_\d+$", "", line.split(" ", 1)[0].rsplit("/", 1)[-1])
        found[op] = found.get(op, 0) + 1
    return found


def refusal(export: Export, backend: str) -> str:
    """The first line of what stops `export`'s build for `backend` ('' where it builds)."""
    try:
        built(export, backend)
    except Exception as err:
        return first_line(err)
    return ""


def outcome(export: Export, run: Run, wgsl: bool = True) -> Outcome:
    """Run one case without raising."""
    try:
        error, stopped = check(export, run), ""
    except Exception as err:
        error, stopped = None, first_line(err)
    on_device = refusal(export, "wgsl") if wgsl else ""
    numpy_builds = not refusal(export, "numpy")
    host: tuple[str, ...] = ()
    if wgsl and not on_device and (fusion := built(export, "wgsl").fusion) is not None and fusion.device is not None:
        host = fusion.device.host
    return Outcome(export, run, numpy_builds, None if not wgsl else not on_device, error, stopped, on_device, host)


def expectations() -> dict[str, str]:
    """expected_failures.toml: case id -> the first line of what stops it today."""
    if not EXPECTATIONS.is_file():
        return {}
    return dict(tomllib.loads(EXPECTATIONS.read_text(encoding="utf-8")).get("xfail", {}))


def pytest_params(exports: Sequence[Export]) -> list[Any]:
    """One pytest parameter per case (id: the case's), a strict xfail where expected_failures.toml lists it."""
    import pytest

    listed = expectations()
    params = []
    for export in exports:
        for run in export.runs:
            reason = listed.get(export.case_id(run))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason is not None else []
            params.append(pytest.param(export, run, id=export.case_id(run), marks=marks))
    return params


def all_exports() -> Iterator[Export]:
    """Every family's exports whose package is installed."""
    from tests.models.real_exports import committed, light_zoo, piper, silero_vad

    for family in (silero_vad, piper, light_zoo, committed):
        yield from family.exports()


def require_installed(package: str, found: bool) -> None:
    """A test needing `package`'s files: missing, it fails under CI (scripts/dev-setup.sh installs them)
    and skips elsewhere, saying how to install it."""
    import os

    import pytest

    if found:
        return
    message = f"{package} is not installed (scripts/dev-setup.sh installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
