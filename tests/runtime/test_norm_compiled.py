"""The compiled LayerNorm (`loam/runtime/kernels/norm_compiled.py`) against its oracles: the numpy kernel
`layer_norm` and onnxruntime's LayerNormalization, on hypothesis-chosen rows.

The bound, per element j of a row x of width n with scale s and bias b: |got - want| <= 2 log2(2n)
2^-23 (|s_j| (|xhat_j| + 1 + max|x| / std) + |b_j|), xhat the normalized value and std =
sqrt(var + eps).  A float32 mean of the row is off by about log2(n) ulps of max|x| in a pairwise or
lane-wise order of its sum (numpy's, the kernel's), and that error reaches xhat multiplied by 1 / std:
the max|x| / std term; the variance's sum puts as many ulps on xhat, and the result's roundings a few.
numba is a dev dependency, so here the compiled kernel runs; a generated module in a process where
numba cannot be imported must still load and give the numpy kernel's bits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from loam.runtime.kernels.compiled import set_compiled
from loam.runtime.kernels.norm_compiled import _CompiledNorms, layer_norm_rows, set_compiled_norms
from loam.runtime.kernels.normalization import layer_norm
from loam.testing import build_for, run_built

ULP = 2.0**-23


def _bound(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, epsilon: float) -> np.ndarray:
    """The stated bound for each element (the module docstring), from float64 statistics of x."""
    w = x.astype(np.float64)
    mean = w.mean(axis=-1, keepdims=True)
    std = np.sqrt(((w - mean) ** 2).mean(axis=-1, keepdims=True) + np.float64(np.float32(epsilon)))
    xhat = np.abs(w - mean) / std
    conditioning = np.abs(w).max(axis=-1, keepdims=True) / std
    b = 0.0 if bias is None else np.abs(bias.astype(np.float64))
    return 2 * np.log2(2 * x.shape[-1]) * ULP * (np.abs(scale.astype(np.float64)) * (xhat + 1 + conditioning) + b)


def _ort_layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, epsilon: float) -> np.ndarray:
    """onnxruntime's LayerNormalization over the last axis, at one thread."""
    n = x.shape[-1]
    names = ["x", "s", "b"] if bias is not None else ["x", "s"]
    node = helper.make_node("LayerNormalization", names, ["y"], axis=-1, epsilon=epsilon)
    inputs = [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(x.shape) if name == "x" else [n])
              for name in names]  # fmt: skip
    output = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph([node], "ln", inputs, [output]), opset_imports=[helper.make_opsetid("", 17)]
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"x": np.ascontiguousarray(x), "s": scale, **({"b": bias} if bias is not None else {})}
    return np.asarray(session.run(None, feeds)[0])


@st.composite
def _rows(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, float]:
    """x float32 of rank 1-3 (1 row to many, odd widths, offsets that make the mean large against the
    spread, contiguous or with a strided last axis), scale, bias or None, epsilon."""
    lead = draw(st.lists(st.integers(1, 9), min_size=0, max_size=2))
    width = draw(st.integers(1, 300))
    seed = draw(st.integers(0, 2**32 - 1))
    offset = draw(st.sampled_from([0.0, 1.0, -30.0, 1000.0]))
    spread = draw(st.sampled_from([1e-3, 1.0, 50.0]))
    rng = np.random.default_rng(seed)
    layout = draw(st.sampled_from(["contiguous", "transposed", "every-other"]))
    if layout == "every-other":  # a view whose last axis steps over every second element
        x = (rng.standard_normal((*lead, 2 * width)) * spread + offset).astype(np.float32)[..., ::2]
    elif layout == "transposed" and lead:
        x = (rng.standard_normal((*lead[:-1], width, lead[-1])) * spread + offset).astype(np.float32).swapaxes(-1, -2)
    else:
        x = (rng.standard_normal((*lead, width)) * spread + offset).astype(np.float32)
    scale = rng.standard_normal(width).astype(np.float32)
    bias = rng.standard_normal(width).astype(np.float32) if draw(st.booleans()) else None
    epsilon = draw(st.sampled_from([1e-12, 1e-5, 1e-2]))
    return x, scale, bias, epsilon


@given(_rows())
@settings(max_examples=200, deadline=None)
def test_the_compiled_layer_norm_is_the_numpy_kernel_within_the_bound(case: tuple) -> None:
    x, scale, bias, epsilon = case
    before = x.copy()
    got = layer_norm_rows(x, scale, bias, epsilon)
    assert _CompiledNorms.get() is not None  # numba (a dev dependency) is on: the compiled kernel ran
    want = layer_norm(x, scale, bias, epsilon)
    assert got.dtype == np.float32 and got.shape == x.shape
    assert np.array_equal(x, before)  # its operand is never written
    assert np.all(np.abs(got.astype(np.float64) - want) <= _bound(x, scale, bias, epsilon))


@given(_rows())
@settings(max_examples=60, deadline=None)
def test_the_compiled_layer_norm_is_onnxruntimes_within_the_bound(case: tuple) -> None:
    x, scale, bias, epsilon = case
    got = layer_norm_rows(x, scale, bias, epsilon)
    want = _ort_layer_norm(x, scale, bias, epsilon)
    assert np.all(np.abs(got.astype(np.float64) - want) <= _bound(x, scale, bias, epsilon))


@pytest.mark.parametrize("shape", [(1, 1, 64), (0, 5), (3, 0), (2, 7, 33)])
def test_with_the_compiled_path_off_it_is_the_numpy_kernel_bit_for_bit(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    scale = np.random.default_rng(2).standard_normal(shape[-1]).astype(np.float32)
    before = set_compiled_norms(False)
    try:
        with np.errstate(all="ignore"):  # a row of width 0 has no mean: NaN, as the numpy kernel gives
            got = layer_norm_rows(x, scale, scale, 1e-5)
            want = layer_norm(x, scale, scale, 1e-5)
    finally:
        set_compiled_norms(before)
    assert got.tobytes() == want.tobytes() and got.shape == want.shape


def test_set_compiled_false_turns_the_compiled_layer_norm_off_too() -> None:
    """The process's one switch governs every compiled kernel: a packed model's `set_compiled(False)` runs
    its LayerNorms in numpy as well."""
    x = np.random.default_rng(5).standard_normal((3, 1, 64)).astype(np.float32) + np.float32(7)
    scale = np.random.default_rng(6).standard_normal(64).astype(np.float32)
    before = set_compiled(False)
    try:
        off = _CompiledNorms.get()
        got = layer_norm_rows(x, scale, None, 1e-5)
    finally:
        set_compiled(before)
    assert off is None and _CompiledNorms.get() is not None  # off with the switch, on again after it
    assert got.tobytes() == layer_norm(x, scale, None, 1e-5).tobytes()


def test_a_row_holding_infinity_or_nan_becomes_nan_as_in_the_numpy_kernel() -> None:
    x = np.random.default_rng(3).standard_normal((4, 17)).astype(np.float32)
    x[1, 5], x[2, 0] = np.inf, np.nan
    scale = np.ones(17, np.float32)
    got = layer_norm_rows(x, scale, None, 1e-5)
    with np.errstate(all="ignore"):
        want = layer_norm(x, scale, None, 1e-5)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got[1:3]).all() and np.isfinite(got[[0, 3]]).all()


def test_set_compiled_norms_takes_only_a_bool() -> None:
    with pytest.raises(ValueError, match="must be True or False"):
        set_compiled_norms(1)  # type: ignore[arg-type]  # the wrong type on purpose


def _layer_norm_model(shape: tuple[int, ...], axis: int) -> tuple[onnx.ModelProto, np.ndarray]:
    """One LayerNormalization with initializer scale and bias over x.shape[axis:], and an x for it."""
    rng = np.random.default_rng(4)
    normalized = shape[axis:]
    weights = [onnx.numpy_helper.from_array(rng.standard_normal(normalized).astype(np.float32), name)
               for name in ("scale", "bias")]  # fmt: skip
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=axis, epsilon=1e-5)
    graph = helper.make_graph(
        [node],
        "ln",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, list(shape))],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, (rng.standard_normal(shape) * 2 + 3).astype(np.float32)


@pytest.mark.parametrize(("shape", "axis"), [((3, 5, 77), -1), ((1, 1, 64), 2), ((3, 5, 7), 1), ((4, 9), 0)])
def test_a_built_layer_norm_is_onnxruntimes_within_the_bound(shape: tuple[int, ...], axis: int) -> None:
    model, x = _layer_norm_model(shape, axis)
    built = build_for(model)
    last_axis_alone = axis % len(shape) == len(shape) - 1
    assert ("layer_norm_rows(" in built.source) == last_axis_alone  # the row kernel; other axes: kernel_normalize
    (got,) = run_built(built, {"x": x})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    scale, bias = (onnx.numpy_helper.to_array(t).reshape(-1) for t in model.graph.initializer)
    rows = x.reshape(-1, scale.size)
    bound = _bound(rows, scale, bias, 1e-5).reshape(x.shape)
    assert np.all(np.abs(np.asarray(got, np.float64) - want) <= bound)


RUN_WITHOUT_NUMBA = r"""
import importlib.util, json, sys
sys.modules["numba"] = None  # `import numba` raises ImportError, as where it is not installed
import numpy as np
spec = importlib.util.spec_from_file_location("layer_norm_module", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
x = np.array(json.loads(sys.argv[2]), np.float32)
weights = module.Weights.embedded() if hasattr(module.Weights, "embedded") else module.Weights()
y = module.forward(weights, x)
print(json.dumps({"y": y.tolist(), "numba_found": module._CompiledKernels.numba_found,
                  "compiled": bool(module._CompiledKernels.made),
                  "imported": sorted({m.split(".")[0] for m, v in sys.modules.items() if v is not None}
                                     - set(sys.stdlib_module_names))}))
"""


def test_a_module_runs_on_numpy_alone_where_numba_is_absent(tmp_path: Path) -> None:
    model, x = _layer_norm_model((2, 3, 40), -1)
    module_path = tmp_path / "layer_norm_module.py"
    module_path.write_text(build_for(model).source, encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", RUN_WITHOUT_NUMBA, str(module_path), json.dumps(x.tolist())],
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["numba_found"] is False and not report["compiled"]
    # Beyond the standard library (and site's own hooks, `_...`), only numpy came in.
    assert [name for name in report["imported"] if not name.startswith("_")] == ["numpy"]
    scale, bias = (onnx.numpy_helper.to_array(t) for t in model.graph.initializer)
    want = layer_norm(x, scale, bias, 1e-5)  # the numpy kernel's bits
    assert np.array(report["y"], np.float32).tobytes() == want.tobytes()
