"""Build the trained digits CNN with Loam, classify the held-out images, and check against onnxruntime.

The example's main job: it compiles `digits.onnxtext` with the options in `loam.toml` (which names
the checkpoint and every axis), loads `digits.safetensors` through the generated module's
`Weights.load`, runs `forward` once on all held-out images (`test_images.npy`), runs onnxruntime
itself on the same model and weights, and prints the largest differences of the logits and the
probabilities and the accuracy each gets against `test_labels.npy`.  It exits 1 when an output
differs by more than 1e-4 (absolute), the two accuracies differ, or an accuracy is below 95%.

    python examples/digits/run_digits.py              # through the Python API (loam.driver.pipeline.build)
    python examples/digits/run_digits.py --via-cli    # through `loam build ... -o digits_module.py`
    python examples/digits/run_digits.py --keep DIR   # also keep the generated module in DIR
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx.parser
import onnxruntime as ort
from onnx import numpy_helper
from safetensors.numpy import load_file

HERE = Path(__file__).resolve().parent
MODEL = HERE / "digits.onnxtext"
OPTIONS = HERE / "loam.toml"
CHECKPOINT = HERE / "digits.safetensors"
MAX_ABS_DIFF = 1e-4
MIN_ACCURACY = 0.95
OUTPUTS = ("logits", "probs")


@dataclass(frozen=True)
class Outcome:
    """What one run found: each output's largest |loam - onnxruntime|, and both accuracies."""

    max_abs_diff: dict[str, float]
    loam_accuracy: float
    ort_accuracy: float
    count: int

    @property
    def ok(self) -> bool:
        return (
            all(d <= MAX_ABS_DIFF for d in self.max_abs_diff.values())
            and self.loam_accuracy == self.ort_accuracy
            and min(self.loam_accuracy, self.ort_accuracy) >= MIN_ACCURACY
        )


def build_with_api(keep: Path | None) -> ModuleType:
    """Compile through the Python API and return the imported module."""
    from loam.driver.options import Options
    from loam.driver.pipeline import build

    result = build(MODEL, options=Options.from_toml(OPTIONS))  # loam.toml names the checkpoint
    print(result.report.rstrip() or "(empty build report)")
    if keep is not None:
        (keep / "digits_module.py").write_text(result.source, encoding="utf-8")
    return result.module


def build_with_cli(keep: Path | None) -> ModuleType:
    """Compile through `loam build` in a subprocess and import the file it writes."""
    with tempfile.TemporaryDirectory(prefix="loam-digits-") as scratch:
        target = (keep if keep is not None else Path(scratch)) / "digits_module.py"
        command = [sys.executable, "-m", "loam.tools.loam_main", "build", str(MODEL), "--options", str(OPTIONS)]
        completed = subprocess.run([*command, "-o", str(target)], check=False)
        if completed.returncode != 0:
            raise SystemExit(f"run_digits: `loam build` failed with status {completed.returncode}")
        spec = importlib.util.spec_from_file_location("digits_module", target)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def onnxruntime_reference(x: np.ndarray) -> list[np.ndarray]:
    """onnxruntime's (logits, probs) on the same model, with the checkpoint's weights put in by name."""
    model = onnx.parser.parse_model(MODEL.read_text(encoding="utf-8"))
    weights = load_file(str(CHECKPOINT))
    filled = [numpy_helper.from_array(weights[init.name], init.name) for init in model.graph.initializer]
    del model.graph.initializer[:]
    model.graph.initializer.extend(filled)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(y) for y in session.run(list(OUTPUTS), {model.graph.input[0].name: x})]


def evaluate(module: ModuleType) -> Outcome:
    """Run the built module and onnxruntime on the held-out images and compare them."""
    x = np.load(HERE / "test_images.npy")
    labels = np.load(HERE / "test_labels.npy")
    weights = module.Weights.load(CHECKPOINT.read_bytes())
    result = module.forward(weights, x)
    got = [np.asarray(y) for y in (result if isinstance(result, tuple) else (result,))]
    want = onnxruntime_reference(x)
    if len(got) != len(want):
        raise SystemExit(f"run_digits: loam gave {len(got)} outputs, onnxruntime {len(want)}")
    diffs: dict[str, float] = {}
    for name, g, w in zip(OUTPUTS, got, want, strict=True):
        if g.shape != w.shape or g.dtype != w.dtype:
            raise SystemExit(
                f"run_digits: {name}: loam gave {g.dtype}{list(g.shape)}, onnxruntime {w.dtype}{list(w.shape)}"
            )
        diffs[name] = float(np.abs(g.astype(np.float64) - w).max())
    return Outcome(
        max_abs_diff=diffs,
        loam_accuracy=float((got[0].argmax(axis=1) == labels).mean()),
        ort_accuracy=float((want[0].argmax(axis=1) == labels).mean()),
        count=len(labels),
    )


def report(outcome: Outcome) -> str:
    """The lines the script prints about an outcome."""
    lines = [f"max abs diff {name}: {d:.3e}" for name, d in outcome.max_abs_diff.items()]
    lines += [
        f"loam accuracy:        {outcome.loam_accuracy:.2%} of {outcome.count} held-out images",
        f"onnxruntime accuracy: {outcome.ort_accuracy:.2%} of {outcome.count} held-out images",
        f"{'OK' if outcome.ok else 'FAIL'}: outputs within {MAX_ABS_DIFF:g} (abs), same accuracy, "
        f"accuracy >= {MIN_ACCURACY:.0%}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--via-cli", action="store_true", help="build with the `loam build` CLI")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the generated module in DIR")
    args = parser.parse_args(argv)

    module = build_with_cli(args.keep) if args.via_cli else build_with_api(args.keep)
    outcome = evaluate(module)
    print(report(outcome))
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
