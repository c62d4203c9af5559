"""Import a generated module (argv[1]), run it on an example folder (argv[2]), print OK or FAIL.

Used by loam-build-mlp.test; the comparison is against the example's onnxruntime output.
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np

source, folder = Path(sys.argv[1]), Path(sys.argv[2])
spec = importlib.util.spec_from_file_location("generated", source)
assert spec is not None and spec.loader is not None
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
weights = module.Weights.load((folder / "mlp.safetensors").read_bytes())
result = module.forward(weights, np.load(folder / "input.npy"))
y = np.asarray(result[0] if isinstance(result, tuple) else result)
expected = np.load(folder / "expected.npy")
if y.shape != expected.shape:
    print(f"FAIL: shape {y.shape}, expected {expected.shape}")
    sys.exit(1)
ok = np.allclose(y, expected, rtol=1e-5, atol=1e-6)
print("OK" if ok else f"FAIL: max abs diff {np.abs(y - expected).max():.3e}")
sys.exit(0 if ok else 1)
