"""The trained digits CNN example: its files are sound, and Loam classifies as onnxruntime does.

examples/digits/run_digits.py is the example's entry point; these tests import it and assert the
facts it prints (outputs within 1e-4 of onnxruntime, the same held-out accuracy, at least 95%),
and check the committed files themselves (a valid opset-17 model, small files, the accuracy that
PROVENANCE.md records).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import onnx.checker
import onnx.parser
import pytest
from onnx.external_data_helper import load_external_data_for_model

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits"


def load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_digits", DIGITS / "run_digits.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runner() -> ModuleType:
    return load_runner()


def test_committed_files_are_small() -> None:
    names = [
        "digits.onnxtext",
        "digits.safetensors",
        "test_images.npy",
        "test_labels.npy",
        "loam.toml",
        "PROVENANCE.md",
    ]
    sizes = {name: (DIGITS / name).stat().st_size for name in names}
    assert sum(sizes.values()) < 200_000, sizes


def test_model_is_valid_opset_17_with_its_operators() -> None:
    model = onnx.parser.parse_model((DIGITS / "digits.onnxtext").read_text(encoding="utf-8"))
    load_external_data_for_model(model, str(DIGITS))
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    ops = {n.op_type for n in model.graph.node}
    assert {"Conv", "BatchNormalization", "Relu", "MaxPool", "Flatten", "Gemm", "MatMul", "Softmax"} <= ops
    images, labels = np.load(DIGITS / "test_images.npy"), np.load(DIGITS / "test_labels.npy")
    assert images.dtype == np.float32 and images.shape == (len(labels), 1, 8, 8)
    assert labels.dtype == np.int64 and set(labels.tolist()) == set(range(10))
    batch = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert batch == [len(labels), 1, 8, 8]


def test_onnxruntime_accuracy_is_the_recorded_one(runner: ModuleType) -> None:
    images, labels = np.load(DIGITS / "test_images.npy"), np.load(DIGITS / "test_labels.npy")
    logits, probs = runner.onnxruntime_reference(images)
    right = int((logits.argmax(axis=1) == labels).sum())
    assert right / len(labels) >= 0.97
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    provenance = (DIGITS / "PROVENANCE.md").read_text(encoding="utf-8")
    assert re.search(rf"\({right}/{len(labels)}\)", provenance), "PROVENANCE.md records another accuracy"


def test_loam_matches_onnxruntime(runner: ModuleType) -> None:
    outcome = runner.evaluate(runner.build_with_api(None))
    assert outcome.count == 450
    for name, diff in outcome.max_abs_diff.items():
        assert diff <= 1e-4, f"{name} differs from onnxruntime by {diff:.3e}"
    assert outcome.loam_accuracy == outcome.ort_accuracy
    assert outcome.loam_accuracy >= 0.95
    assert outcome.ok
    assert "OK:" in runner.report(outcome)


def test_script_through_the_cli_exits_zero() -> None:
    done = subprocess.run(
        [sys.executable, str(DIGITS / "run_digits.py"), "--via-cli"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK:" in done.stdout and "loam accuracy:" in done.stdout
