# ruff: noqa: E501 - kernel programs are written one op per line
"""The WGSL backend's module: every kernel on the device (llvmpipe here), the numpy module's numbers.

Each test builds the same model for both backends and compares; the device counters say what
crossed between host and device and how many kernels ran.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.parser import Parser

from loam.backends.numpy_module import emit_python
from loam.backends.wgsl_module import emit_wgsl
from loam.core.errors import UnsupportedError
from loam.driver.options import Options
from loam.driver.pipeline import build, import_source
from loam.frontends.context import make_context

pytest.importorskip("wgpu")

ROOT = Path(__file__).resolve().parents[3]
MLP = ROOT / "examples" / "mlp"
RNG = np.random.default_rng(11)


def _program(text: str) -> object:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def test_mlp_matches_the_numpy_module_and_onnxruntimes_numbers() -> None:
    options = Options.from_toml(MLP / "loam.toml")
    result = build(MLP / "mlp.onnxtext", options=options, fuse="dispatch", backend="wgsl")
    gpu = result.module
    # The report states what a forward does on the device: 4x8 in and 4x3 out, f32.
    assert result.fusion is not None and result.fusion.device is not None
    assert result.fusion.device.dispatches == 3 and result.fusion.device.crossing == str(4 * (32 + 12))
    assert "per forward: 3 dispatches, 176 bytes crossing" in result.fusion.render("text")
    cpu = build(MLP / "mlp.onnxtext", options=options).module
    weights_gpu = gpu.Weights.load_file(str(MLP / "mlp.safetensors"))
    weights_cpu = cpu.Weights.load_file(str(MLP / "mlp.safetensors"))
    x = np.load(MLP / "input.npy")
    got = gpu.forward(weights_gpu, x)
    np.testing.assert_allclose(got, cpu.forward(weights_cpu, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, np.load(MLP / "expected.npy"), rtol=1e-5, atol=1e-6)
    # After the first call only the input goes up and the output comes down; one dispatch per layer.
    g = gpu._gpu()
    before = dict(g.stats)
    gpu.forward(weights_gpu, x)
    moved = {k: g.stats[k] - before[k] for k in before}
    assert moved == {"dispatches": 3, "bytes_up": x.nbytes, "bytes_down": got.nbytes, "forwards": 1}


SYMBOLIC_MLP = """
kernel.program "forward" (%x : !tensor_axes.tensor<f32, [Batch: N, In: 8]>) names ["x"] attributes {model = "mlp"} {
  %w = kernel.weight "w" = #graph.data<f32, [16, 8], "W"> : !tensor_axes.tensor<f32, [Hidden: 16, In: 8]>
  %b = kernel.weight "b" = #graph.data<f32, [16], "B"> : !tensor_axes.tensor<f32, [Hidden: 16]>
  %t = kernel.permute %w [1, 0] {node = "fc1"} : !tensor_axes.tensor<f32, [Hidden: 16, In: 8]> -> !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>
  %p = kernel.matmul %x, %t then #kernel.expr<[operand 0, operand 1, add 0 1, tanh 2]>(%b) {node = "fc1"} : (!tensor_axes.tensor<f32, [Batch: N, In: 8]>, !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>, !tensor_axes.tensor<f32, [Hidden: 16]>) -> !tensor_axes.tensor<f32, [Batch: N, Hidden: 16]>
  %q = kernel.permute %p [1, 0] {node = "flip"} : !tensor_axes.tensor<f32, [Batch: N, Hidden: 16]> -> !tensor_axes.tensor<f32, [Hidden: 16, Batch: N]>
  %s = kernel.zip(%q) #kernel.expr<[operand 0, const 2.0 : f32, mul 0 1]> {node = "double"} : (!tensor_axes.tensor<f32, [Hidden: 16, Batch: N]>) -> !tensor_axes.tensor<f32, [Hidden: 16, Batch: N]>
  kernel.return %s, %p names ["s", "p"] : !tensor_axes.tensor<f32, [Hidden: 16, Batch: N]>, !tensor_axes.tensor<f32, [Batch: N, Hidden: 16]>
}
"""
W_VALUE = RNG.standard_normal((16, 8)).astype(np.float32)
B_VALUE = RNG.standard_normal(16).astype(np.float32)


def _symbolic() -> object:
    text = SYMBOLIC_MLP.replace('"W"', '"0x' + W_VALUE.tobytes().hex().upper() + '"')
    return _program(text.replace('"B"', '"0x' + B_VALUE.tobytes().hex().upper() + '"'))


def test_symbolic_batch_runs_each_binding_with_its_own_buffers() -> None:
    module = _symbolic()
    gpu = import_source(emit_wgsl(module), "loam_wgsl_symbolic")
    cpu = import_source(emit_python(module), "loam_numpy_symbolic")
    weights = gpu.Weights.embedded()
    results = []
    for n in (1, 5, 300, 5):
        x = RNG.standard_normal((n, 8)).astype(np.float32)
        got = gpu.forward(weights, x)
        want = cpu.forward(cpu.Weights.embedded(), x)
        results.append((got, want))
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # Every output a call returned still holds its numbers after later calls.
    for got, want in results:
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    g = gpu._gpu()
    assert set(g.pools) == {(1,), (5,), (300,)}
    source = emit_wgsl(module)
    # The weight's permutation is folded into the product's strides; the other one is a copy kernel.
    assert source.count("g.dispatch(") == 3
    assert "tuple(_row_major((16, 8))[p] for p in (1, 0))" in source


def test_an_i64_input_outside_i32_is_refused_before_upload() -> None:
    text = """
kernel.program "forward" (%i : !tensor_axes.tensor<i64, [N: 3]>) names ["i"] {
  %y = kernel.zip(%i) #kernel.expr<[operand 0, const 1 : i64, max 0 1]> {node = "floor1"} : (!tensor_axes.tensor<i64, [N: 3]>) -> !tensor_axes.tensor<i64, [N: 3]>
  kernel.return %y names ["y"] : !tensor_axes.tensor<i64, [N: 3]>
}
"""
    gpu = import_source(emit_wgsl(_program(text)), "loam_wgsl_i64")
    got = gpu.forward(gpu.Weights(), np.array([1, -7, 2**31 - 1], np.int64))
    assert got.dtype == np.int64 and got.tolist() == [1, 1, 2**31 - 1]
    with pytest.raises(gpu.ShapeError, match=r"'i' holds 2147483648, outside the i32 range"):
        gpu.forward(gpu.Weights(), np.array([0, 2**31, 1], np.int64))


def test_i64_sums_and_products_run_on_the_device_checked_for_a_wrap() -> None:
    text = """
kernel.program "forward" (%i : !tensor_axes.tensor<i64, [N: 3]>) names ["i"] {
  %d = kernel.zip(%i) #kernel.expr<[operand 0, const 2 : i64, max 0 1]> {node = "floor2"} : (!tensor_axes.tensor<i64, [N: 3]>) -> !tensor_axes.tensor<i64, [N: 3]>
  %y = kernel.zip(%d) #kernel.expr<[operand 0, operand 0, mul 0 1]> {node = "square"} : (!tensor_axes.tensor<i64, [N: 3]>) -> !tensor_axes.tensor<i64, [N: 3]>
  %z = kernel.zip(%y, %i) #kernel.expr<[operand 0, operand 1, sub 0 1, const 5 : i64, min 2 3]> {node = "cap"} : (!tensor_axes.tensor<i64, [N: 3]>, !tensor_axes.tensor<i64, [N: 3]>) -> !tensor_axes.tensor<i64, [N: 3]>
  kernel.return %z names ["z"] : !tensor_axes.tensor<i64, [N: 3]>
}
"""
    source = emit_wgsl(_program(text))
    assert "g.host(" not in source and "_loam_flags[1] = 1u;" in source
    gpu = import_source(source, "loam_wgsl_i64_checked")
    assert gpu.forward(gpu.Weights(), np.array([1, 3, -7], np.int64)).tolist() == [3, 5, 5]
    # A product or a difference past i32 on the device: the forward returns nothing, never a wrapped number.
    for i in ([46341, 1, 1], [2, 1, -(2**31)]):  # 46341^2 > 2^31 - 1; 4 - (-2^31) > 2^31 - 1
        with pytest.raises(gpu.DeviceError, match=r"an int64 sum, difference or product in one of .*left the int32"):
            gpu.forward(gpu.Weights(), np.array(i, np.int64))
    # The flags were lowered: the next call in range computes.
    assert gpu.forward(gpu.Weights(), np.array([46340, 0, 0], np.int64)).tolist() == [5, 4, 4]


def test_i64_arithmetic_the_device_cannot_check_runs_on_the_host() -> None:
    text = """
kernel.program "forward" (%i : !tensor_axes.tensor<i64, [N: 3]>) names ["i"] {
  %y = kernel.zip(%i) #kernel.expr<[operand 0, const 3 : i64, pow 0 1]> {node = "cube"} : (!tensor_axes.tensor<i64, [N: 3]>) -> !tensor_axes.tensor<i64, [N: 3]>
  %z = kernel.zip(%y) #kernel.expr<[operand 0, const 5 : i64, min 0 1]> {node = "cap"} : (!tensor_axes.tensor<i64, [N: 3]>) -> !tensor_axes.tensor<i64, [N: 3]>
  kernel.return %z names ["z"] : !tensor_axes.tensor<i64, [N: 3]>
}
"""
    source = emit_wgsl(_program(text))
    assert "# cube: on the host (i64 arithmetic the device's i32 could wrap)" in source
    gpu = import_source(source, "loam_wgsl_i64_host")
    assert gpu.forward(gpu.Weights(), np.array([1, 3, -7], np.int64)).tolist() == [1, 5, -343]
    assert gpu._gpu().stats["host_kernels"] >= 1
    # A power past i32 cannot go back to the device: the call stops naming the node, never wraps.
    with pytest.raises(gpu.ShapeError, match=r"'cube' holds 8000000000, outside the i32 range"):
        gpu.forward(gpu.Weights(), np.array([2000, 1, 1], np.int64))


def test_a_kernel_with_no_wgsl_form_stops_the_build_naming_its_node() -> None:
    text = """
kernel.program "forward" (%x : !tensor_axes.tensor<f64, [N: 3]>) names ["x"] {
  %y = kernel.zip(%x) #kernel.expr<[operand 0, neg 0]> {node = "negate"} : (!tensor_axes.tensor<f64, [N: 3]>) -> !tensor_axes.tensor<f64, [N: 3]>
  kernel.return %y names ["y"] : !tensor_axes.tensor<f64, [N: 3]>
}
"""
    with pytest.raises(UnsupportedError, match=r"kernel.zip 'negate': element type f64 has no WGSL form"):
        emit_wgsl(_program(text))


def test_a_decode_loop_of_ever_new_extents_keeps_the_device_caches_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = import_source(emit_wgsl(_symbolic()), "loam_wgsl_bounded")
    monkeypatch.setattr(gpu, "_CACHE_LIMIT", 8)
    weights = gpu.Weights.embedded()
    cpu = import_source(emit_python(_symbolic()), "loam_numpy_bounded")
    for n in range(1, 30):  # a new batch each call: new params, new bind groups, a new buffer pool
        x = RNG.standard_normal((n, 8)).astype(np.float32)
        got = gpu.forward(weights, x)
        np.testing.assert_allclose(got.s, cpu.forward(cpu.Weights.embedded(), x).s, rtol=1e-5, atol=1e-6)
    g = gpu._gpu()
    assert len(g.params_cache) <= 8 and len(g.groups) <= 8 and len(g.pools) <= 4


F64_CHAIN = """
kernel.program "forward" (%x : !tensor_axes.tensor<f32, [N: 4]>) names ["x"] {
  %d = kernel.cast %x {node = "widen"} : !tensor_axes.tensor<f32, [N: 4]> -> !tensor_axes.tensor<f64, [N: 4]>
  %s = kernel.zip(%d) #kernel.expr<[operand 0, const 1.0e-08 : f64, add 0 1]> {node = "nudge"} : (!tensor_axes.tensor<f64, [N: 4]>) -> !tensor_axes.tensor<f64, [N: 4]>
  %n = kernel.cast %s {node = "narrow"} : !tensor_axes.tensor<f64, [N: 4]> -> !tensor_axes.tensor<f32, [N: 4]>
  %y = kernel.zip(%n, %x) #kernel.expr<[operand 0, operand 1, sub 0 1]> {node = "gap"} : (!tensor_axes.tensor<f32, [N: 4]>, !tensor_axes.tensor<f32, [N: 4]>) -> !tensor_axes.tensor<f32, [N: 4]>
  kernel.return %y, %s names ["y", "s"] : !tensor_axes.tensor<f32, [N: 4]>, !tensor_axes.tensor<f64, [N: 4]>
}
"""


def test_the_host_fallback_computes_what_the_device_cannot_and_the_report_says_so() -> None:
    from loam.backends.wgsl_module import wgsl_module

    # Refused by default, naming the first kernel and the way out.
    with pytest.raises(
        UnsupportedError, match=r"kernel.cast 'widen': element type f64 has no WGSL form.*--host-fallback"
    ):
        emit_wgsl(_program(F64_CHAIN))
    source, summary, _ = wgsl_module(_program(F64_CHAIN), host_fallback=True)
    # f64 lives on the host from the widening cast to the narrowing one; 'gap' runs on the device.
    assert summary.host == (
        "widen (f64 has no WGSL form)",
        "nudge (f64 has no WGSL form)",
        "narrow (f64 has no WGSL form)",
    )
    assert summary.dispatches == 1 and "on the host: widen (f64 has no WGSL form)" in summary.text()
    gpu = import_source(source, "loam_wgsl_host_fallback")
    x = np.array([1.0, -2.5, 1e-9, 3.0e7], np.float32)
    got = gpu.forward(gpu.Weights(), x)
    want_s = x.astype(np.float64) + 1e-8
    assert got.s.dtype == np.float64 and np.array_equal(got.s, want_s)  # f64 precision kept, not f32's
    np.testing.assert_array_equal(got.y, want_s.astype(np.float32) - x)
    g = gpu._gpu()
    before = dict(g.stats)
    gpu.forward(gpu.Weights(), x)
    # Two stops of the device's queue: x comes down for the widening cast, and the narrowed value goes
    # up before the one dispatch; x's upload, the narrowed value and y are the bytes that cross.
    moved = {k: g.stats[k] - before[k] for k in before}
    assert moved == {"dispatches": 1, "host_kernels": 2, "forwards": 1, "bytes_up": 32, "bytes_down": 32}


def test_a_kernel_the_printer_refuses_runs_on_the_host_with_the_fallback() -> None:
    from loam.backends.wgsl_module import wgsl_module

    text = """
kernel.program "forward" (%a : !tensor_axes.tensor<i64, [M: 2, K: 3]>, %b : !tensor_axes.tensor<i64, [K: 3, N: 2]>) names ["a", "b"] {
  %p = kernel.matmul %a, %b {node = "intprod"} : (!tensor_axes.tensor<i64, [M: 2, K: 3]>, !tensor_axes.tensor<i64, [K: 3, N: 2]>) -> !tensor_axes.tensor<i64, [M: 2, N: 2]>
  %y = kernel.zip(%p) #kernel.expr<[operand 0, const 1 : i64, max 0 1]> {node = "floor"} : (!tensor_axes.tensor<i64, [M: 2, N: 2]>) -> !tensor_axes.tensor<i64, [M: 2, N: 2]>
  kernel.return %y names ["y"] : !tensor_axes.tensor<i64, [M: 2, N: 2]>
}
"""
    with pytest.raises(UnsupportedError, match=r"--host-fallback"):
        emit_wgsl(_program(text))
    source, summary, _ = wgsl_module(_program(text), host_fallback=True)
    assert len(summary.host) == 1 and summary.host[0].startswith("intprod (") and summary.dispatches == 1
    gpu = import_source(source, "loam_wgsl_host_matmul")
    a = np.array([[1, -2, 3], [4, 5, -6]], np.int64)
    b = np.array([[7, 8], [-9, 10], [11, 12]], np.int64)
    np.testing.assert_array_equal(gpu.forward(gpu.Weights(), a, b), np.maximum(a @ b, 1))


def test_llvmpipes_loop_cap_is_refused_never_returned_as_numbers() -> None:
    """llvmpipe stops an invocation's loops after 65,535 iterations in all, silently.  There the
    module counts them and refuses the forward; any other adapter computes the long line."""
    from loam.backends.wgsl_runtime import _loops_counted

    counted = _loops_counted(
        "fn main(@builtin(local_invocation_id) l: vec3<u32>) { for (var j = 0u; j < min(n, (m + 1u)); j = j + 1u) { loop { break; } } }"
    )
    assert counted.count("_loam_count();") == 2 and counted.count("_ = _loam_flags[0];") == 1
    assert counted.count("@group(1) @binding(0) var<storage, read_write> _loam_flags") == 1
    # A shader raising the i64 wrap flag declares the flags already: counting its loops adds no second one.
    flagging = "@group(1) @binding(0) var<storage, read_write> _loam_flags: array<u32>;\nfn main() { loop { break; } }"
    assert _loops_counted(flagging).count("var<storage, read_write> _loam_flags") == 1
    assert _loops_counted("fn main() { x = 1u; }") == "fn main() { x = 1u; }"
    text = """
kernel.program "forward" (%x : !tensor_axes.tensor<f32, [N: 70000]>, %i : !tensor_axes.tensor<i64, [K: 3]>, %u : !tensor_axes.tensor<f32, [K: 3]>) names ["x", "i", "u"] {
  %y = kernel.scatter_elements(%x, %i, %u) {node = "scatter", axis = 0 : i64, reduction = "none"} : (!tensor_axes.tensor<f32, [N: 70000]>, !tensor_axes.tensor<i64, [K: 3]>, !tensor_axes.tensor<f32, [K: 3]>) -> !tensor_axes.tensor<f32, [N: 70000]>
  kernel.return %y names ["y"] : !tensor_axes.tensor<f32, [N: 70000]>
}
"""
    gpu = import_source(emit_wgsl(_program(text)), "loam_wgsl_loop_cap")
    x = np.arange(70000, dtype=np.float32)
    i = np.array([0, 69999, 5], np.int64)
    u = np.full(3, -1.0, np.float32)
    want = x.copy()
    want[i] = u
    if gpu._gpu().capped:
        with pytest.raises(gpu.DeviceError, match=r"llvmpipe stops a shader invocation's loops after 65,535"):
            gpu.forward(gpu.Weights(), x, i, u)
    else:
        np.testing.assert_array_equal(gpu.forward(gpu.Weights(), x, i, u), want)
    small = x[:1000].copy()
    # Below the cap the same kernel computes, and the flag was reset by the refusal.
    text_small = text.replace("70000", "1000")
    module = import_source(emit_wgsl(_program(text_small)), "loam_wgsl_loop_cap_small")
    want_small = small.copy()
    want_small[np.array([0, 999, 5])] = u
    np.testing.assert_array_equal(module.forward(module.Weights(), small, np.array([0, 999, 5]), u), want_small)
