"""Gradients in the page: the digits CNN built with --grad for the browser computes, in headless Chromium,
every weight's gradient that torch autograd gives (tests/grad/digits_grads.npz, the oracle the Python
modules are held to), through `loam build --grad --target browser` and `loam browser-run`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loam.tools.browser_run import Browser

pytestmark = pytest.mark.xdist_group("browser")

ROOT = Path(__file__).resolve().parents[3]
DIGITS = ROOT / "examples" / "digits"


def test_the_digits_cnn_gradients_in_the_page_are_torch_autograds(browser: Browser, served: Path) -> None:
    folder = served / "digits_grad"
    built = subprocess.run(
        [sys.executable, "-m", "loam.tools.loam_main", "build", str(DIGITS / "digits.onnxtext"), "--options",
         str(DIGITS / "loam.toml"), "--grad", "--target", "browser", "--no-cache", "-o", str(folder)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    with np.load(ROOT / "tests" / "grad" / "digits_grads.npz") as oracle:
        want = {k: oracle[k] for k in oracle.files}
    x = np.load(DIGITS / "test_images.npy").astype(np.float32)[:450].reshape(450, 1, 8, 8)
    got, _ = browser.forward([x, want["g_logits"], want["g_probs"]], module="digits_grad/model.js",
                             weights="digits_grad/weights/")  # fmt: skip
    np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-4, atol=1e-4)
    names = sorted(k for k in want if k.startswith("grad."))
    assert sorted(k for k in got if k.startswith("grad.")) == names
    for name in names:
        scale = max(1.0, float(np.abs(want[name]).max()))
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4 * scale, err_msg=name)
