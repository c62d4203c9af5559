"""`loam build --target browser --host-fallback`: the page computes the kernels with no WGSL form itself.

A small graph whose every kernel but the elementwise ones has no device form (NonZero, a ReduceSum of
i64, Range up to that sum, a Cast to i64, RandomNormalLike) is built from the command line as a user
builds it and run in headless Chromium: the deterministic outputs equal onnxruntime's at two lengths
(a length NonZero and Range give at run time sizes the buffers after them), and forward's last
argument `{seed}` (`loam browser-run --seed`) repeats the page's draws.  A result the device's i32
cannot hold (a cast of 3e9) is the page's ShapeError naming the node.  Without --host-fallback the
build names the node and the flag; with it, a host kernel the page has no JavaScript form of is
refused naming the kernel.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from loam.tools.browser_run import Browser, ModuleError

pytestmark = pytest.mark.xdist_group("browser")


def _graph(tmp_path: Path) -> Path:
    i64 = TensorProto.INT64
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
        helper.make_node("Constant", [], ["zero_f"], value=helper.make_tensor("zero_f", TensorProto.FLOAT, [], [0.0])),
        helper.make_node("Greater", ["x", "zero_f"], ["positive"], name="greater"),
        helper.make_node("Cast", ["positive"], ["positive_i"], to=i64, name="cast_positive"),
        helper.make_node("ReduceSum", ["positive_i"], ["count"], keepdims=0, name="count"),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", i64, [], [0])),
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", i64, [], [1])),
        helper.make_node("Range", ["zero", "count", "one"], ["r"], name="range"),
        helper.make_node("Cast", ["x"], ["ci"], to=i64, name="cast_x"),
        helper.make_node("RandomNormalLike", ["x"], ["noise"], mean=2.0, scale=0.5, name="noise"),
    ]
    graph = helper.make_graph(
        nodes, "host_kernels",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("nz", i64, [1, "k"]), helper.make_tensor_value_info("r", i64, ["m"]),
         helper.make_tensor_value_info("ci", i64, ["n"]),
         helper.make_tensor_value_info("noise", TensorProto.FLOAT, ["n"])],
    )  # fmt: skip
    path = tmp_path / "host_kernels.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def loam(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loam.tools.loam_main", *args], capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def build(model: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`loam build` with the layout `loam layout` drafts for `model` (beside it), as a user runs them."""
    options = model.with_suffix(".toml")
    if not options.exists():
        drafted = loam("layout", str(model), "-o", str(options))
        assert drafted.returncode == 0, drafted.stderr
    return loam("build", str(model), "--options", str(options), *flags)


def test_the_page_computes_host_kernels_as_onnxruntime_does(browser: Browser, served: Path, tmp_path: Path) -> None:
    model = _graph(tmp_path)
    refused = build(model, "--target", "browser", "-o", str(served / "host_refused"))
    assert refused.returncode != 0 and "node 'nonzero'" in refused.stderr and "--host-fallback" in refused.stderr
    built = build(model, "--target", "browser", "--host-fallback", "-o", str(served / "host_kernels"))
    assert built.returncode == 0, built.stderr
    where = {"module": "host_kernels/model.js", "weights": "host_kernels/weights/"}
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    for x in (np.array([0.0, 2.5, -1.0, 0.0, 7.9, -3.0e6], np.float32), np.arange(-3, 9, dtype=np.float32)):
        got, _ = browser.forward([x], **where, options={"seed": 5})
        want = dict(zip(["nz", "r", "ci", "noise"], session.run(None, {"x": x}), strict=True))
        for name in ("nz", "r", "ci"):
            assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        assert got["noise"].shape == x.shape and np.all(np.abs(got["noise"] - 2.0) < 0.5 * 6)
    # A host result the device's i32 cannot hold is refused naming the node, never wrapped.
    with pytest.raises(ModuleError, match=r"^ShapeError: 'cast_x' holds 3000000000, outside the i32 range"):
        browser.forward([np.array([1.0, 3.0e9], np.float32)], **where)
    x = np.linspace(-1, 1, 4000, dtype=np.float32)
    five, again, six = (browser.forward([x], **where, options={"seed": s})[0]["noise"] for s in (5, 5, 6))
    np.testing.assert_array_equal(five, again)  # a seed repeats the page's draws
    assert not np.array_equal(five, six)
    assert abs(five.mean() - 2.0) < 0.05 and abs(five.std() - 0.5) < 0.03
    unseeded = [browser.forward([x], **where)[0]["noise"] for _ in range(2)]
    assert not np.array_equal(*unseeded)  # no seed: fresh draws each call
    # `loam browser-run --seed` gives forward the same seed: the page's draws again.
    np.savez(tmp_path / "in.npz", x=x)
    ran = loam("browser-run", str(served / "host_kernels"), "--inputs", str(tmp_path / "in.npz"),
               "-o", str(tmp_path / "out.npz"), "--seed", "5")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["noise"], five)


def test_a_host_kernel_the_page_has_no_form_of_is_refused_naming_it(tmp_path: Path) -> None:
    node = helper.make_node("Unique", ["x"], ["y"], sorted=1, name="unique")
    graph = helper.make_graph(
        [node], "unique", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["u"])],
    )  # fmt: skip
    model = tmp_path / "unique.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    wgsl = build(model, "--backend", "wgsl", "--host-fallback", "-o", str(tmp_path / "unique.py"))
    assert wgsl.returncode == 0, wgsl.stderr  # the WGSL module computes it in numpy
    page = build(model, "--target", "browser", "--host-fallback", "-o", str(tmp_path / "page"))
    assert page.returncode != 0 and "host kernel kernel_unique" in page.stderr, page.stderr
    assert "Traceback" not in page.stderr and not (tmp_path / "page" / "model.js").exists()
