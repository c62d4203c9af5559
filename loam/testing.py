"""Helpers for checking Loam against onnxruntime: build any model with a drafted layout, run both.

Used by the test suite and the conformance harness; also handy at a prompt:

>>> outputs = run_loam(model, {"x": x})          # doctest: +SKIP
>>> expected = run_onnxruntime(model, {"x": x})  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.driver.pipeline import BuildResult, build

__all__ = [
    "assert_same",
    "assert_within_default_limits",
    "build_for",
    "forward_inputs",
    "import_module_file",
    "run_built",
    "run_loam",
    "run_onnxruntime",
]


def build_for(
    model: onnx.ModelProto,
    options: Options | None = None,
    *,
    fuse: str | None = "memory",
    backend: str = "numpy",
    host_fallback: bool = False,
) -> BuildResult:
    """Build `model` with its weights embedded, naming every axis the options leave open by a draft.

    `fuse` is the fuse pass's objective (None: unfused), `backend` the module's and `host_fallback`
    the WGSL module's, as `loam.build` takes them.
    """
    draft = draft_layout(model, options=options)
    result = build(model, options=draft.options(options), fuse=fuse, backend=backend, host_fallback=host_fallback)
    if backend == "wgsl":
        assert_within_default_limits(result.module)
    return result


def assert_within_default_limits(module: types.ModuleType) -> None:
    """Every shader of WGSL `module` within WebGPU's default limits: storage buffers counted per
    shader (the flags buffer included where the runtime binds it), workgroup memory and size."""
    from loam.backends.wgsl_limits import DEFAULT_LIMITS, over_limits

    over = {name: over_limits(source, DEFAULT_LIMITS) for name, source in module._SHADERS.items()}
    over = {name: why for name, why in over.items() if why is not None}
    assert not over, f"shaders over WebGPU's default limits: {over}"


def import_module_file(path: Path, name: str | None = None) -> types.ModuleType:
    """A module written to `path` (a generated module, an example script), imported from its file as a
    user would import it, under `name` (default: its file's stem)."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def forward_inputs(result: BuildResult) -> list[str]:
    """The ONNX names of `forward`'s inputs, in order."""
    from loam.dialects.kernel import ProgramOp

    for op in result.ir.walk():
        if isinstance(op, ProgramOp):
            return [s.data for s in op.input_names.data]
    raise AssertionError("the build holds no kernel.program")


def run_built(result: BuildResult, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run a built module's forward on `feeds` (by ONNX input name); the outputs as a list."""
    module = result.module
    weights = module.Weights.embedded() if hasattr(module.Weights, "embedded") else module.Weights()
    out = module.forward(weights, *[feeds[name] for name in forward_inputs(result)])
    return list(out) if isinstance(out, tuple) else [out]


def run_loam(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], options: Options | None = None
) -> list[np.ndarray]:
    """Build `model` (drafted layout, embedded weights) and run it on `feeds`."""
    return run_built(build_for(model, options), feeds)


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs for `model` on `feeds`, with every graph optimisation off (the oracle)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    return list(session.run(None, {k: v for k, v in feeds.items() if k in wanted}))


def assert_same(
    got: Sequence[np.ndarray],
    want: Sequence[np.ndarray],
    rtol: float = 1e-5,
    atol: float = 1e-6,
    *,
    tolerance: Callable[[np.dtype], tuple[float, float]] | None = None,
) -> None:
    """Outputs agree in count, dtype, shape and value (NaN where the other has NaN).

    Integers, bools and strings must be equal; floats (and complex) agree within `rtol`/`atol`, or
    within what `tolerance` gives for the expected output's dtype.  AssertionError names the output.
    """
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype}, expected {w.dtype}"
        assert g.shape == w.shape, f"output {i}: shape {g.shape}, expected {w.shape}"
        if w.dtype.kind in "biuOSU":
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}", strict=True)
        else:
            r, a = tolerance(w.dtype) if tolerance is not None else (rtol, atol)
            wide = np.complex128 if w.dtype.kind == "c" else np.float64
            np.testing.assert_allclose(
                g.astype(wide), w.astype(wide), rtol=r, atol=a, equal_nan=True, err_msg=f"output {i}"
            )
