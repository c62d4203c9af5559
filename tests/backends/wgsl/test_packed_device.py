"""Weights kept in ggml blocks on the device: the WGSL module uploads Q4_0, Q4_1 and Q8_0 blocks byte
for byte and its shaders widen them (`wgsl_kernels/packed.py`).

The oracle is the one `tests/backends/test_packed_weights.py` uses: onnxruntime over llama.cpp's own
widening (the `gguf` package) of the same blocks.  Every encoding is read by each packed kernel: a
gather (an embedding lookup), a product by a transposed weight (a linear layer) and a product by a
[K, N] weight (blocks along N).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import loam
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from tests.backends.test_packed_weights import _kernels, _model, widened_oracle
from tests.checkpoints.gguf_writer import Tensor, quantize, write_gguf

pytest.importorskip("wgpu")

ENCODINGS = ("Q4_0", "Q4_1", "Q8_0")
RNG = np.random.default_rng(11)


def packed_model(folder: Path, kinds: dict[str, str]) -> tuple[loam.BuildResult, Path, ort.InferenceSession, int]:
    """The embedding -> linear -> product model over a GGUF storing each weight as `kinds` says, built for
    WGSL; onnxruntime over llama.cpp's widening of the blocks; the blocks' bytes."""
    path, weights = _model(folder)
    tensors = {name: Tensor(kinds[name], value.shape, quantize(value, kinds[name])) for name, value in weights.items()}
    gguf = write_gguf(folder / "weights.gguf", tensors)
    options = draft_layout(path).options(Options(checkpoints=(gguf,)))
    result = loam.build(path, options=options, backend="wgsl", fuse="dispatch")
    session, _ = widened_oracle(path, weights, kinds)
    return result, gguf, session, sum(len(t.data or b"") for t in tensors.values())


@pytest.mark.parametrize("rotate", [0, 1, 2])
def test_packed_blocks_on_the_device_compute_what_onnxruntime_does(tmp_path: Path, rotate: int) -> None:
    kinds = dict(zip(("embed", "proj", "head"), ENCODINGS[rotate:] + ENCODINGS[:rotate], strict=True))
    result, gguf, session, stored = packed_model(tmp_path, kinds)
    kernels = _kernels(result.report)
    assert kernels["lookup"] == "kernel.gather_packed" and kernels["linear"] == "kernel.matmul_packed"
    assert kernels["head_product"] == "kernel.matmul_packed"
    assert result.fusion is not None
    # The device holds the blocks as the file stores them (each buffer rounded up to whole 32-bit words).
    resident = int(result.fusion.device.resident)
    assert stored <= resident <= stored + 3 * 4
    module = result.module
    weights = module.Weights.load_file(str(gguf))
    for shape in [(1, 1), (2, 7)]:
        ids = RNG.integers(-50, 50, shape).astype(np.int64)  # negative ids count from the end, as ONNX says
        want = session.run(None, {"ids": ids})[0]
        np.testing.assert_allclose(module.forward(weights, ids), want, rtol=1e-4, atol=1e-4)


def test_weights_widened_at_load_are_refused_by_the_device_module_naming_one(tmp_path: Path) -> None:
    result, gguf, _, _ = packed_model(tmp_path, {"embed": "Q8_0", "proj": "Q4_1", "head": "Q4_0"})
    module = result.module
    widened = module.Weights.load_file(str(gguf), packed=False)
    with pytest.raises(module.DeviceError, match=r"weight '\w+' was widened to float32 at load \(packed=False\)"):
        module.forward(widened, np.zeros((1, 1), np.int64))
