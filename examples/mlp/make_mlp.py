"""Write the MLP example's files from a fixed seed (they are committed; rerun to regenerate).

Why these files: the example must show the deployer's path end to end, a model whose weights live
in a separate checkpoint, so the model text stays small and readable.

- `mlp.onnxtext`: a 3-layer MLP, x[4,8] -> Gemm(transB=1)+Relu -> MatMul+Add+Relu -> Gemm -> y[4,3],
  printed with `onnx.printer`.  Its initializers are *not* embedded: each one is declared with ONNX
  external data pointing at its bytes inside `mlp.safetensors` (location, offset, length), so the
  text file is a valid ONNX model on its own and the weights come from the checkpoint.
- `mlp.safetensors`: the weights, by initializer name (`fc1.weight`, `fc1.bias`, ...).
- `input.npy`: an input batch; `expected.npy`: onnxruntime's output for it on the full model.
- `loam.toml`: the build options, naming every axis through `[[layout]]` rules.

Run: `python examples/mlp/make_mlp.py` (needs onnx, onnxruntime, numpy, safetensors).
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.checker
import onnx.parser
import onnx.printer
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import load_external_data_for_model, set_external_data
from safetensors.numpy import save_file

HERE = Path(__file__).resolve().parent
SEED = 20240611
BATCH, IN, HIDDEN, HIDDEN2, OUT = 4, 8, 16, 12, 3
CHECKPOINT = "mlp.safetensors"

LOAM_TOML = """\
# Build options for the MLP example: `loam build mlp.onnxtext --options loam.toml -o mlp.py`.
# Every tensor the graph declares gets its axes named here; the intermediate values get theirs
# from the nodes that compute them.
checkpoint = "mlp.safetensors"

[[layout]]
pattern = "x"
axes = ["Batch", "In"]

[[layout]]
pattern = "fc1.weight"      # Gemm with transB=1: stored [out, in]
axes = ["Hidden", "In"]

[[layout]]
pattern = "fc1.bias"
axes = ["Hidden"]

[[layout]]
pattern = "fc2.weight"      # MatMul: stored [in, out]
axes = ["Hidden", "Hidden2"]

[[layout]]
pattern = "fc2.bias"
axes = ["Hidden2"]

[[layout]]
pattern = "fc3.weight"
axes = ["Hidden2", "Out"]

[[layout]]
pattern = "fc3.bias"
axes = ["Out"]

[[layout]]
pattern = "y"
axes = ["Batch", "Out"]
"""


def make_weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Weights scaled by 1/sqrt(fan_in), as a trained layer's roughly are."""

    def uniform(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        bound = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-bound, bound, size=shape).astype(np.float32)

    return {
        "fc1.weight": uniform((HIDDEN, IN), IN),
        "fc1.bias": uniform((HIDDEN,), IN),
        "fc2.weight": uniform((HIDDEN, HIDDEN2), HIDDEN),
        "fc2.bias": uniform((HIDDEN2,), HIDDEN),
        "fc3.weight": uniform((HIDDEN2, OUT), HIDDEN2),
        "fc3.bias": uniform((OUT,), HIDDEN2),
    }


def make_graph(
    initializers: list[TensorProto], batch: int = BATCH, inputs: int = IN, outputs: int = OUT
) -> onnx.ModelProto:
    """The MLP with the given initializers (embedded or external); x [batch, inputs] -> y [batch, outputs]
    (bench/cases.py builds the MNIST-sized MLP with it)."""
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["fc1.out"], name="fc1", transB=1),
        helper.make_node("Relu", ["fc1.out"], ["act1"], name="act1"),
        helper.make_node("MatMul", ["act1", "fc2.weight"], ["fc2.mm"], name="fc2.matmul"),
        helper.make_node("Add", ["fc2.mm", "fc2.bias"], ["fc2.out"], name="fc2.add"),
        helper.make_node("Relu", ["fc2.out"], ["act2"], name="act2"),
        helper.make_node("Gemm", ["act2", "fc3.weight", "fc3.bias"], ["y"], name="fc3"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, outputs])],
        initializer=initializers,
    )
    return helper.make_model(
        graph, producer_name="loam-example", ir_version=8, opset_imports=[helper.make_opsetid("", 17)]
    )


def safetensors_offsets(path: Path) -> dict[str, tuple[int, int]]:
    """Each tensor's (absolute byte offset, length) inside a safetensors file."""
    data = path.read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    start = 8 + header_len
    return {
        name: (start + info["data_offsets"][0], info["data_offsets"][1] - info["data_offsets"][0])
        for name, info in header.items()
        if name != "__metadata__"
    }


def main() -> int:
    rng = np.random.default_rng(SEED)
    weights = make_weights(rng)
    x = rng.standard_normal((BATCH, IN)).astype(np.float32)

    save_file(weights, str(HERE / CHECKPOINT))
    offsets = safetensors_offsets(HERE / CHECKPOINT)

    external: list[TensorProto] = []
    for name, array in weights.items():
        tensor = numpy_helper.from_array(array, name)
        offset, length = offsets[name]
        assert length == array.nbytes, (name, length, array.nbytes)
        set_external_data(tensor, CHECKPOINT, offset=offset, length=length)
        tensor.ClearField("raw_data")
        external.append(tensor)
    text = onnx.printer.to_text(make_graph(external))
    (HERE / "mlp.onnxtext").write_text(
        "# A 3-layer MLP; written by make_mlp.py. Weights: external data in mlp.safetensors.\n"
        + text
        + ("" if text.endswith("\n") else "\n"),
        encoding="utf-8",
    )

    # The text, read back with its external data, must be exactly the model with its weights.
    reread = onnx.parser.parse_model((HERE / "mlp.onnxtext").read_text(encoding="utf-8"))
    load_external_data_for_model(reread, str(HERE))
    full = make_graph([numpy_helper.from_array(a, n) for n, a in weights.items()])
    for got in reread.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(got), weights[got.name])
    onnx.checker.check_model(full, full_check=True)
    onnx.checker.check_model(reread, full_check=True)

    session = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(["y"], {"x": x})

    # An independent numpy forward pass guards against a wrong graph.
    h1 = np.maximum(x @ weights["fc1.weight"].T + weights["fc1.bias"], 0)
    h2 = np.maximum(h1 @ weights["fc2.weight"] + weights["fc2.bias"], 0)
    by_hand = h2 @ weights["fc3.weight"] + weights["fc3.bias"]
    np.testing.assert_allclose(expected, by_hand, rtol=1e-5, atol=1e-6)

    np.save(HERE / "input.npy", x)
    np.save(HERE / "expected.npy", expected)
    (HERE / "loam.toml").write_text(LOAM_TOML, encoding="utf-8")
    print(f"wrote mlp.onnxtext, {CHECKPOINT}, input.npy, expected.npy, loam.toml in {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
