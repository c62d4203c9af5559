"""examples/train-digits: the digits CNN trains from scratch in a Loam module, on numpy and on WGSL.

Its first 50 losses equal torch's run of the same schedule (examples/train-digits/torch_losses.json,
written by scripts/make_grad_oracles.py) within float32 rounding, and 20 epochs of SGD with momentum
reach at least 95% on the 450 held-out images.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from loam.testing import import_module_file

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train-digits"

pytestmark = pytest.mark.xdist_group("train_digits")


def example() -> ModuleType:
    return import_module_file(EXAMPLE / "train.py", "train_digits")


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_the_digits_cnn_trains_as_torch_does_and_reaches_95_percent(backend: str, tmp_path: Path) -> None:
    if backend == "wgsl":
        pytest.importorskip("wgpu")
    train = example()
    trainer = train.build_trainer(tmp_path, backend)
    torch_losses = json.loads((EXAMPLE / "torch_losses.json").read_text(encoding="utf-8"))["losses"]
    losses, _, _ = train.train(trainer, 20, max_steps=len(torch_losses))
    np.testing.assert_allclose(losses, torch_losses, rtol=1e-4, atol=1e-5)
    losses, weights, _ = train.train(trainer, 20)
    assert np.mean(losses[-40:]) < 0.1
    assert train.accuracy(trainer, weights) >= 0.95
