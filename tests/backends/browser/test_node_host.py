"""The browser module in Node, through Dawn's WebGPU (the npm package `webgpu`): no browser needed.

`examples/node-host/run.mjs` imports the same model.js a page does and reads its weights from the
folder.  Where the machine has no GPU driver Dawn accepts (Debian 12's lavapipe lacks a feature it
requires), it runs on the SwiftShader Vulkan driver Debian's Chromium ships.  The packages come from
the repository's package.json (`npm ci`, run by scripts/dev-setup.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from loam.backends.browser_module import write_browser_module
from loam.driver.options import Options
from loam.driver.pipeline import build

ROOT = Path(__file__).resolve().parents[3]
MLP = ROOT / "examples" / "mlp"
SWIFTSHADER_ICD = Path("/usr/lib/chromium/vk_swiftshader_icd.json")


def node_with_webgpu() -> str:
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "Node.js is not installed (scripts/dev-setup.sh installs it)"
    elif not (ROOT / "node_modules" / "webgpu").is_dir():
        missing = "the npm package webgpu is not installed (scripts/dev-setup.sh runs npm ci)"
    if missing:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(missing)
    assert node is not None
    return node


def run(node: str, folder: Path, inputs: dict[str, np.ndarray], tmp_path: Path) -> dict:  # type: ignore[type-arg]
    given = {
        name: {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.ravel().tolist()} for name, a in inputs.items()
    }
    (tmp_path / "inputs.json").write_text(json.dumps(given), encoding="utf-8")
    env = dict(os.environ)
    if SWIFTSHADER_ICD.exists() and "VK_ICD_FILENAMES" not in env:
        env["VK_ICD_FILENAMES"] = str(SWIFTSHADER_ICD)
    done = subprocess.run(
        [node, str(ROOT / "examples" / "node-host" / "run.mjs"), str(folder), str(tmp_path / "inputs.json")],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_node_runs_the_mlp_module_with_the_numpy_modules_numbers_and_errors(tmp_path: Path) -> None:
    node = node_with_webgpu()
    options = Options.from_toml(MLP / "loam.toml")
    result = build(MLP / "mlp.onnxtext", options=options, backend="wgsl", fuse="dispatch")
    write_browser_module(tmp_path / "mlp", result.source, result.module, list(options.checkpoints), "mlp")
    numpy_module = build(MLP / "mlp.onnxtext", options=options).module
    weights = numpy_module.Weights.load_file([str(c) for c in options.checkpoints])
    x = np.random.default_rng(7).standard_normal((4, 8)).astype(np.float32)
    got = run(node, tmp_path / "mlp", {"x": x}, tmp_path)
    assert "outputs" in got, got
    y = got["outputs"]["y"]
    assert y["dtype"] == "float32" and y["shape"] == [4, 3]
    np.testing.assert_allclose(
        np.array(y["data"], np.float32).reshape(4, 3), numpy_module.forward(weights, x), atol=1e-5
    )
    refused = run(node, tmp_path / "mlp", {"x": np.zeros((2, 8), np.float32)}, tmp_path)
    assert refused == {"error": "ShapeError", "message": "input 'x' axis 0 (Batch) must be 4, got 2"}
