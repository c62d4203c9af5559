# ruff: noqa: E501 - kernel programs are written one op per line
"""The browser module's refusals, in the page: a wrong input names its axis; weights that are not the
build's name the shard or the tensor and axis; and `loam browser-run` / `loam build --target browser`
as a user runs them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loam.backends.browser_module import write_browser_module
from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.tools.browser_run import Browser, ModuleError

pytestmark = pytest.mark.xdist_group("browser")

MLP = Path(__file__).resolve().parents[3] / "examples" / "mlp"


def mlp_folder(served: Path, name: str) -> Path:
    """A fresh browser build of the example MLP in `served/name`."""
    folder = served / name
    shutil.rmtree(folder, ignore_errors=True)
    options = Options.from_toml(MLP / "loam.toml")
    result = build(MLP / "mlp.onnxtext", options=options, backend="wgsl", fuse="dispatch")
    write_browser_module(folder, result.source, result.module, list(options.checkpoints), "mlp")
    return folder


def shard(folder: Path) -> tuple[Path, dict, int]:  # type: ignore[type-arg]
    """The MLP's one shard, its header and where its data starts."""
    path = folder / "weights" / "shard-00000.safetensors"
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return path, json.loads(raw[8 : 8 + length]), 8 + length


def run(browser: Browser, name: str, x: np.ndarray) -> dict[str, np.ndarray]:
    return browser.forward([x], module=f"{name}/model.js", weights=f"{name}/weights/")[0]


X = np.zeros((4, 8), np.float32)


def test_an_input_of_another_extent_is_a_shape_error_naming_the_axis(browser: Browser, served: Path) -> None:
    mlp_folder(served, "mlp_shape")
    with pytest.raises(ModuleError, match=r"^ShapeError: input 'x' axis 0 \(Batch\) must be 4, got 3$"):
        run(browser, "mlp_shape", np.zeros((3, 8), np.float32))
    with pytest.raises(ModuleError, match=r"^ShapeError: input 'x' must have dtype float32 .*got int32"):
        run(browser, "mlp_shape", np.zeros((4, 8), np.int32))
    with pytest.raises(ModuleError, match=r"^ShapeError: input 'x' must have rank 2 \[Batch, In\], got 1$"):
        run(browser, "mlp_shape", np.zeros((32,), np.float32))
    assert run(browser, "mlp_shape", X)["y"].shape == (4, 3)  # the refusals left the module working


def test_a_truncated_shard_is_a_load_error_naming_the_tensor(browser: Browser, served: Path) -> None:
    folder = mlp_folder(served, "mlp_truncated")
    path, header, _ = shard(folder)
    last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ModuleError, match=rf"^LoadError: tensor '{last}' in shard 'shard-00000.safetensors' runs past"):
        run(browser, "mlp_truncated", X)


def test_a_changed_shard_is_a_load_error_naming_the_shard(browser: Browser, served: Path) -> None:
    folder = mlp_folder(served, "mlp_changed")
    path, _, start = shard(folder)
    raw = bytearray(path.read_bytes())
    raw[start + 5] ^= 0x40  # one bit of a weight: the file still parses
    path.write_bytes(bytes(raw))
    with pytest.raises(ModuleError, match=r"^LoadError: shard 'shard-00000.safetensors' does not match its sha256"):
        run(browser, "mlp_changed", X)


def test_a_tensor_of_other_extents_is_a_load_error_naming_the_tensor_and_axis(browser: Browser, served: Path) -> None:
    """Shards consistent with their manifest but not the build's graph (another model's weights) are refused by
    the extents compiled into model.js, not trusted for what the manifest says."""
    folder = mlp_folder(served, "mlp_other")
    path, header, start = shard(folder)
    raw = path.read_bytes()
    data = raw[start:]
    header["fc1.weight"]["shape"] = [8, 16]  # the same bytes, read as the transpose's extents
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    changed = struct.pack("<Q", len(text)) + text + data
    path.write_bytes(changed)
    manifest = json.loads((folder / "weights" / "manifest.json").read_text())
    manifest["shards"][0].update(bytes=len(changed), sha256=hashlib.sha256(changed).hexdigest())
    (folder / "weights" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModuleError, match=r"^LoadError: tensor 'fc1.weight' axis 1 \(In\) must be 8, got 16$"):
        run(browser, "mlp_other", X)


def loam(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loam.tools.loam_main", *args], capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def test_loam_build_target_browser_then_browser_run_give_the_numpy_modules_outputs(
    browser: Browser, tmp_path: Path
) -> None:
    folder = tmp_path / "mlp_web"
    built = loam("build", str(MLP / "mlp.onnxtext"), "--options", str(MLP / "loam.toml"), "--target", "browser",
                 "-o", str(folder))  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert "wrote" in built.stderr and (folder / "model.js").is_file()
    manifest = json.loads((folder / "weights" / "manifest.json").read_text())
    for entry in manifest["shards"]:
        data = (folder / "weights" / entry["file"]).read_bytes()
        assert len(data) == entry["bytes"] <= 16 * 2**20
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    ran = loam("browser-run", str(folder), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz"))
    assert ran.returncode == 0, ran.stderr
    options = Options.from_toml(MLP / "loam.toml")
    module = build(MLP / "mlp.onnxtext", options=options).module
    want = module.forward(module.Weights.load_file([str(c) for c in options.checkpoints]), x)
    with np.load(tmp_path / "out.npz") as out:
        assert out.files == ["y"]
        np.testing.assert_allclose(out["y"], want, atol=1e-5)
    np.savez(tmp_path / "bad.npz", x=np.zeros((4, 7), np.float32))
    refused = loam("browser-run", str(folder), "--inputs", str(tmp_path / "bad.npz"), "-o", str(tmp_path / "o.npz"))
    assert refused.returncode == 1
    assert "ShapeError: input 'x' axis 1 (In) must be 8, got 7" in refused.stderr
    assert not (tmp_path / "o.npz").exists()
    unseeded = loam("browser-run", str(folder), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "s.npz"),
                    "--seed", "3")  # fmt: skip
    assert unseeded.returncode == 2 and "draws no random numbers" in unseeded.stderr
    np.savez(tmp_path / "named.npz", z=x)
    misnamed = loam("browser-run", str(folder), "--inputs", str(tmp_path / "named.npz"), "-o", str(tmp_path / "o.npz"))
    assert misnamed.returncode != 0 and "no array for input(s) x" in misnamed.stderr


def test_target_browser_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    numpy = loam("build", str(MLP / "mlp.onnxtext"), "--options", str(MLP / "loam.toml"), "--target", "browser",
                 "--backend", "numpy", "-o", str(tmp_path / "w"))  # fmt: skip
    assert numpy.returncode == 2 and "takes no --backend numpy" in numpy.stderr
    (tmp_path / "file").write_text("x")
    onto_file = loam("build", str(MLP / "mlp.onnxtext"), "--options", str(MLP / "loam.toml"), "--target", "browser",
                     "-o", str(tmp_path / "file"))  # fmt: skip
    assert onto_file.returncode == 2 and "is a file" in onto_file.stderr
    over_inputs = loam("build", str(MLP / "mlp.onnxtext"), "--options", str(MLP / "loam.toml"), "--target",
                       "browser", "-o", str(MLP))  # fmt: skip
    assert over_inputs.returncode == 2 and "holds one of this build's inputs" in over_inputs.stderr
    grad_of = loam("build", str(MLP / "mlp.onnxtext"), "--options", str(MLP / "loam.toml"), "--target", "browser",
                   "--grad", "--grad-of", "fc9.weight", "-o", str(tmp_path / "g"))  # fmt: skip
    assert grad_of.returncode != 0 and "grad_of names 'fc9.weight'" in grad_of.stderr
    assert not (tmp_path / "g").exists()
    # The passes a browser build runs are the WGSL build's, as `loam-opt` replays them.
    pipelines = [loam("build", str(MLP / "mlp.onnxtext"), *flags, "--print-pipeline").stdout
                 for flags in (["--target", "browser"], ["--backend", "wgsl"])]  # fmt: skip
    assert pipelines[0] == pipelines[1] != ""


I64_CHECKED = """
kernel.program "forward" (%i : !tensor_axes.tensor<i64, [N: 3]>) names ["i"] {
  %y = kernel.zip(%i, %i) #kernel.expr<[operand 0, operand 1, mul 0 1, const 1 : i64, add 2 3]> {node = "square1"} : (!tensor_axes.tensor<i64, [N: 3]>, !tensor_axes.tensor<i64, [N: 3]>) -> !tensor_axes.tensor<i64, [N: 3]>
  kernel.return %y names ["y"] : !tensor_axes.tensor<i64, [N: 3]>
}
"""


def test_int64_arithmetic_past_int32_on_the_device_is_a_device_error_not_a_wrapped_number(
    browser: Browser, served: Path
) -> None:
    from loam.backends.wgsl_module import emit_wgsl
    from loam.driver.pipeline import import_source
    from tests.backends.wgsl.test_wgsl_module import _program

    source = emit_wgsl(_program(I64_CHECKED))
    write_browser_module(served / "i64", source, import_source(source, "loam_i64_browser"), [], "i64")

    def run_i64(i: list[int]) -> dict[str, np.ndarray]:
        return browser.forward([np.array(i, np.int64)], module="i64/model.js", weights="i64/weights/")[0]

    got = run_i64([3, -46340, 7])["y"]
    assert got.dtype == np.int64 and got.tolist() == [10, 46340**2 + 1, 50]
    with pytest.raises(ModuleError, match=r"^DeviceError: an int64 sum, difference or product in one of .* left"):
        run_i64([46341, 1, 1])
    assert run_i64([0, 1, 2])["y"].tolist() == [1, 2, 5]  # the flag was lowered


def test_names_from_the_model_file_stay_data_in_model_js(browser: Browser, served: Path, tmp_path: Path) -> None:
    """An input or output named to end a comment or a string and run code is only ever a string in
    model.js: the module parses, computes, and nothing the names spell runs."""
    import onnx
    from onnx import TensorProto, helper

    # Loam refuses names with characters that are not printable (a newline); these are printable.
    hostile_in = "x */ globalThis.pwned = 1; /* \\" + '"' + "' `${globalThis.pwned = 2}`"
    hostile_out = "y</script><script>globalThis.pwned = 3</script>"
    graph = helper.make_graph(
        [helper.make_node("Relu", [hostile_in], [hostile_out], name="*/ globalThis.pwned = 4; /*")],
        "g */ globalThis.pwned = 5; /*",
        [helper.make_tensor_value_info(hostile_in, TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(hostile_out, TensorProto.FLOAT, [2, 3])],
    )
    path = tmp_path / "hostile *_ globalThis.pwned = 6; x.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    from loam.driver.draft import draft_layout

    result = build(path, options=draft_layout(path).options(Options()), backend="wgsl", fuse="dispatch")
    write_browser_module(served / "hostile", result.source, result.module, [], path.stem)
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)
    got, _ = browser.forward([x], module="hostile/model.js", weights="hostile/weights/")
    assert list(got) == [hostile_out]
    np.testing.assert_array_equal(got[hostile_out], np.maximum(x, 0))
    assert browser.evaluate("return globalThis.pwned === undefined") is True
