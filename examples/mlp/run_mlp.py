"""Build the MLP with Loam, run it, and check it against onnxruntime.

This is the example's main job and the README's first command: it compiles `mlp.onnxtext` with
the options in `loam.toml` (which also names the checkpoint), loads `mlp.safetensors` through the
generated module's `Weights.load`, runs `forward` on `input.npy`, runs onnxruntime itself on the
same model and weights, prints both, their largest absolute and relative differences, and exits 1
when they differ by more than rtol 1e-5 (atol 1e-6).

    python examples/mlp/run_mlp.py              # through the Python API (loam.driver.pipeline.build)
    python examples/mlp/run_mlp.py --via-cli    # through `loam build ... -o mlp_module.py`
    python examples/mlp/run_mlp.py --keep DIR   # also keep the generated module in DIR
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx.parser
import onnxruntime as ort
from onnx import numpy_helper
from safetensors.numpy import load_file

HERE = Path(__file__).resolve().parent
MODEL = HERE / "mlp.onnxtext"
OPTIONS = HERE / "loam.toml"
CHECKPOINT = HERE / "mlp.safetensors"
RTOL, ATOL = 1e-5, 1e-6


def build_with_api(keep: Path | None) -> ModuleType:
    """Compile through the Python API and return the imported module."""
    from loam.driver.options import Options
    from loam.driver.pipeline import build

    options = Options.from_toml(OPTIONS)
    result = build(MODEL, options=options)  # loam.toml names the checkpoint
    print(result.report.rstrip() or "(empty build report)")
    if keep is not None:
        (keep / "mlp_module.py").write_text(result.source, encoding="utf-8")
    return result.module


def build_with_cli(keep: Path | None) -> ModuleType:
    """Compile through `loam build` in a subprocess and import the file it writes."""
    with tempfile.TemporaryDirectory(prefix="loam-mlp-") as scratch:
        folder = keep if keep is not None else Path(scratch)
        target = folder / "mlp_module.py"
        command = [
            sys.executable,
            "-m",
            "loam.tools.loam_main",
            "build",
            str(MODEL),
            "--options",
            str(OPTIONS),
            "-o",
            str(target),
        ]
        completed = subprocess.run(command, check=False)
        if completed.returncode != 0:
            raise SystemExit(f"run_mlp: `loam build` failed with status {completed.returncode}")
        spec = importlib.util.spec_from_file_location("mlp_module", target)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def onnxruntime_reference(x: np.ndarray) -> np.ndarray:
    """onnxruntime's output on the same model, with the checkpoint's weights put in by name."""
    model = onnx.parser.parse_model(MODEL.read_text(encoding="utf-8"))
    weights = load_file(str(CHECKPOINT))
    filled = [numpy_helper.from_array(weights[init.name], init.name) for init in model.graph.initializer]
    del model.graph.initializer[:]
    model.graph.initializer.extend(filled)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {model.graph.input[0].name: x})
    return np.asarray(y)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--via-cli", action="store_true", help="build with the `loam build` CLI")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the generated module in DIR")
    args = parser.parse_args(argv)

    module = build_with_cli(args.keep) if args.via_cli else build_with_api(args.keep)
    weights = module.Weights.load(CHECKPOINT.read_bytes())
    x = np.load(HERE / "input.npy")
    result = module.forward(weights, x)
    y = np.asarray(result[0] if isinstance(result, tuple) else result)

    reference = onnxruntime_reference(x)
    stored = np.load(HERE / "expected.npy")
    np.set_printoptions(precision=6, suppress=True)
    print("loam forward(x):")
    print(y)
    print("onnxruntime:")
    print(reference)
    if y.shape != reference.shape or y.dtype != reference.dtype:
        print(f"FAIL: loam gave {y.dtype}{list(y.shape)}, onnxruntime {reference.dtype}{list(reference.shape)}")
        return 1
    abs_diff = np.abs(y.astype(np.float64) - reference)
    rel_diff = abs_diff / np.maximum(np.abs(reference.astype(np.float64)), np.finfo(np.float32).tiny)
    print(f"max abs diff: {abs_diff.max():.3e}   max rel diff: {rel_diff.max():.3e}")
    ok = np.allclose(y, reference, rtol=RTOL, atol=ATOL)
    stored_ok = np.allclose(reference, stored, rtol=RTOL, atol=ATOL)
    if not stored_ok:
        print("FAIL: onnxruntime no longer reproduces expected.npy (rerun make_mlp.py?)")
    print(f"{'OK' if ok else 'FAIL'}: loam vs onnxruntime within rtol {RTOL:g}, atol {ATOL:g}")
    return 0 if ok and stored_ok else 1


if __name__ == "__main__":
    sys.exit(main())
