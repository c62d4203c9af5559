"""WebGPU's default limits as a build-time fact: every shader fits them, the module asks for no more.

The device here offers far more than WebGPU's defaults (llvmpipe: 32 storage buffers a shader), so
each module's own request is what keeps a kernel over the defaults from passing here and failing on
a browser's adapter: the tests check the requested device, the shaders' counted bindings, and that
a shader past the storage-buffer budget reads its operands from the packed buffer correctly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.backends.wgsl_limits import DEFAULT_LIMITS, DeviceLimits, fit_bindings, over_limits, storage_bindings
from loam.core.errors import OptionsError, UnsupportedError
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.testing import build_for, run_onnxruntime

pytest.importorskip("wgpu")

RNG = np.random.default_rng(5)


def _sum_of(n: int) -> onnx.ModelProto:
    """y = x0 + x1 + ... + x(n-1) (a few of them int casts), fused into one elementwise kernel of n operands."""
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, ["N", 5]) for i in range(n)]
    nodes, last = [], "x0"
    for i in range(1, n):
        nodes.append(helper.make_node("Add", [last, f"x{i}"], [f"s{i}"]))
        last = f"s{i}"
    nodes.append(helper.make_node("Relu", [last], ["y"]))
    graph = helper.make_graph(nodes, "sum", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_kernel_of_many_operands_packs_the_trailing_ones_and_computes_onnxruntimes_numbers() -> None:
    model = _sum_of(12)
    result = build_for(model, fuse="dispatch", backend="wgsl")  # counts every shader against the defaults
    m = result.module
    # One kernel of 12 operands, a result, params and the flags (a helper loops: llvmpipe's counter):
    # 15 buffers, 8 of its operands packed into one.
    assert len(m._SHADERS) == 1 and max(storage_bindings(s) for s in m._SHADERS.values()) == 8
    assert list(m._PACKED_OPERANDS.values()) == [8]
    feeds = {f"x{i}": RNG.standard_normal((3, 5)).astype(np.float32) for i in range(12)}
    weights = m.Weights.embedded()
    got = m.forward(weights, *feeds.values())
    np.testing.assert_allclose(got, run_onnxruntime(model, feeds)[0], rtol=1e-5, atol=1e-6)
    # Another binding of N: the packed buffer is made for the new buffers, the copies made again.
    feeds = {k: RNG.standard_normal((7, 5)).astype(np.float32) for k in feeds}
    np.testing.assert_allclose(m.forward(weights, *feeds.values()), run_onnxruntime(model, feeds)[0], rtol=1e-5)


def test_an_lstm_with_every_optional_input_fits_and_matches_onnxruntime() -> None:
    seq, batch, inp, hidden = 4, 2, 3, 5
    init = [
        helper.make_tensor("W", TensorProto.FLOAT, [1, 4 * hidden, inp], RNG.standard_normal(4 * hidden * inp) * 0.5),
        helper.make_tensor("R", TensorProto.FLOAT, [1, 4 * hidden, hidden], RNG.standard_normal(4 * hidden**2) * 0.5),
        helper.make_tensor("B", TensorProto.FLOAT, [1, 8 * hidden], RNG.standard_normal(8 * hidden) * 0.5),
        helper.make_tensor("P", TensorProto.FLOAT, [1, 3 * hidden], RNG.standard_normal(3 * hidden) * 0.5),
    ]
    node = helper.make_node(
        "LSTM", ["X", "W", "R", "B", "lens", "h0", "c0", "P"], ["Y", "Y_h", "Y_c"], hidden_size=hidden
    )
    graph = helper.make_graph(
        [node],
        "lstm",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, inp]),
            helper.make_tensor_value_info("lens", TensorProto.INT32, [batch]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, batch, hidden]),
            helper.make_tensor_value_info("c0", TensorProto.FLOAT, [1, batch, hidden]),
        ],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, [seq, 1, batch, hidden]),
            helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, batch, hidden]),
            helper.make_tensor_value_info("Y_c", TensorProto.FLOAT, [1, batch, hidden]),
        ],
        init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    m = build_for(model, fuse="dispatch", backend="wgsl").module
    assert all(storage_bindings(s) <= 8 for s in m._SHADERS.values())
    feeds = {
        "X": RNG.standard_normal((seq, batch, inp)).astype(np.float32),
        "lens": np.array([4, 2], np.int32),
        "h0": RNG.standard_normal((1, batch, hidden)).astype(np.float32),
        "c0": RNG.standard_normal((1, batch, hidden)).astype(np.float32),
    }
    got = m.forward(m.Weights.embedded(), *feeds.values())
    for a, b in zip(got, run_onnxruntime(model, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_the_device_a_module_requests_has_webgpus_default_limits_not_the_adapters() -> None:
    m = build_for(_sum_of(2), fuse="dispatch", backend="wgsl").module
    m.forward(m.Weights.embedded(), np.ones((1, 5), np.float32), np.ones((1, 5), np.float32))
    device = m._gpu().device
    assert m._LIMITS == DEFAULT_LIMITS.webgpu()
    assert device.limits["max-storage-buffers-per-shader-stage"] == 8
    assert device.limits["max-compute-workgroup-storage-size"] == 16384
    assert device.limits["max-compute-invocations-per-workgroup"] == 256
    assert device.limits["max-storage-buffer-binding-size"] == 128 << 20
    assert device.limits["max-buffer-size"] == 256 << 20


def test_raised_limits_build_unpacked_kernels_and_a_device_made_for_less_refuses_them() -> None:
    model = _sum_of(12)
    raised = Options(device_limits={"maxStorageBuffersPerShaderStage": 16})
    draft = draft_layout(model)  # built directly: build_for holds every module to the defaults
    m = build(model, options=draft.options(raised), fuse="dispatch", backend="wgsl").module
    assert m._PACKED_OPERANDS == {} and max(storage_bindings(s) for s in m._SHADERS.values()) == 15
    assert m._LIMITS["maxStorageBuffersPerShaderStage"] == 16
    # This process's device was made at the defaults (the other tests' modules): a clear refusal.
    build_for(_sum_of(2), fuse="dispatch", backend="wgsl").module._gpu()
    feeds = [np.ones((1, 5), np.float32)] * 12
    with pytest.raises(m.DeviceError, match=r"maxStorageBuffersPerShaderStage 16.*load the module needing"):
        m.forward(m.Weights.embedded(), *feeds)


def test_raised_limits_run_in_a_process_whose_first_module_asks_for_them(tmp_path: Path) -> None:
    onnx.save(_sum_of(12), tmp_path / "sum.onnx")
    limits = tmp_path / "limits.json"
    limits.write_text(json.dumps({"maxStorageBuffersPerShaderStage": 16, "maxTextureDimension2D": 8192}))
    built = subprocess.run(
        [sys.executable, "-m", "loam.tools.loam_main", "build", str(tmp_path / "sum.onnx"), "--backend", "wgsl",
         "--device-limits", str(limits), "--layout", "*=Batch,Feature", "-o", str(tmp_path / "sum.py"), "--no-cache"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    script = (
        "import numpy as np, sum as m\n"
        "y = m.forward(m.Weights.embedded(), *[np.full((2, 5), i, np.float32) for i in range(12)])\n"
        "print(float(y.sum()), m._gpu().device.limits['max-storage-buffers-per-shader-stage'], m._PACKED_OPERANDS)\n"
    )
    ran = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [str(float(sum(range(12)) * 10)), "16", "{}"]


def test_device_limits_are_refused_by_name_when_malformed(tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match="'maxStorageBuffers' is not a device limit"):
        Options(device_limits={"maxStorageBuffers": 10})
    with pytest.raises(OptionsError, match="under WebGPU's default 8"):
        Options(device_limits={"maxStorageBuffersPerShaderStage": 4})
    with pytest.raises(OptionsError, match="must be an integer"):
        DeviceLimits.from_mapping({"maxBufferSize": "big"})
    bad = tmp_path / "limits.json"
    bad.write_text("{not json")
    with pytest.raises(OptionsError, match=r"limits\.json: not a JSON table"):
        DeviceLimits.from_file(bad)
    toml = tmp_path / "loam.toml"
    toml.write_text("[device_limits]\nmaxComputeWorkgroupStorageSize = 32768\n")
    assert dict(Options.from_toml(toml).device_limits) == {"maxComputeWorkgroupStorageSize": 32768}


def test_a_shader_over_a_limit_it_cannot_be_fitted_within_is_named() -> None:
    results = "".join(f"@group(0) @binding({1 + i}) var<storage, read_write> out{i}: array<f32>;\n" for i in range(8))
    source = "@group(0) @binding(0) var<storage, read> params: array<u32>;\n" + results
    assert fit_bindings(source, 8) is None
    assert over_limits(source, DEFAULT_LIMITS) == "it binds 9 storage buffers, over maxStorageBuffersPerShaderStage 8"
    wide = "var<workgroup> tile: array<f32, 8192>;\n@compute @workgroup_size(64)\nfn main() {}\n"
    assert over_limits(wide, DEFAULT_LIMITS) == (
        "it uses 32768 bytes of workgroup memory, over maxComputeWorkgroupStorageSize 16384"
    )
    assert over_limits("@compute @workgroup_size(16, 32)\nfn main() {}\n", DEFAULT_LIMITS) == (
        "its workgroups have 512 invocations, over maxComputeInvocationsPerWorkgroup 256"
    )
    # A loop binds the flags buffer on llvmpipe (its loop counter), so it counts against the budget.
    assert storage_bindings(source.replace(results, "") + "fn main() { for (var i = 0u; i < 2u; i++) {} }") == 2


def test_a_buffer_the_build_knows_is_past_one_binding_is_refused_naming_it() -> None:
    n = 40_000_000  # 160 MB of f32, past the 128 MiB one binding holds
    big = helper.make_tensor("big", TensorProto.FLOAT, [n], np.zeros(n, np.float32).tobytes(), raw=True)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "big"], ["y"])],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        [big],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedError, match=r"weight 'big': 160000000 bytes on the device, over maxStorageBuffer"):
        build_for(model, fuse="dispatch", backend="wgsl")
