"""Train the digits CNN from scratch in a Loam module: forward_backward and SGD with momentum.

    python examples/train-digits/train.py [--backend numpy|wgsl] [--epochs N]

The model is examples/digits' graph with its loss appended (written here as ONNX text, `training_graph`):
the batch made symbolic, a one-hot `targets` input, and `loss = -mean(sum(targets * LogSoftmax(logits)))`
as the first output beside `logits`.  `loam build --grad` of that graph gives `forward_backward(weights,
x, targets, grad_loss, grad_logits)`: with `grad_loss = 1` and `grad_logits = 0`, one pass returns the
loss, the logits and every trained weight's gradient.  The weights start from a seeded random draw
(`initial_weights`; the batch-norm statistics stay 0 and 1, so each BatchNormalization is a trained
per-channel affine), and each step is `v = momentum * v + g; w = w - lr * v` over shuffled mini-batches
of 32 of the 1347 training images (make_data.py); the 450 held-out images of examples/digits measure
the accuracy.  scripts/make_grad_oracles.py runs the same schedule in torch for the first 50 steps
(`torch_losses.json`), which tests/grad/test_train_digits.py holds the module's losses to.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import ModuleType

import numpy as np

HERE = Path(__file__).resolve().parent
DIGITS = HERE.parent / "digits"
BATCH = 32
LR = 0.02
MOMENTUM = 0.9
SEED = 2026
TRAINED = ("conv1.weight", "bn1.scale", "bn1.bias", "conv2.weight", "bn2.scale", "bn2.bias",
           "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")  # fmt: skip

LOSS_NODES = """
   ["loss.log_softmax"] log_probs = LogSoftmax <axis: int = 1> (logits)
   ["loss.pick"] picked = Mul (log_probs, targets)
   ["loss.sum"] per_image = ReduceSum <keepdims: int = 0> (picked, classes)
   ["loss.mean"] mean_log = ReduceMean <keepdims: int = 0, axes: ints = [0]> (per_image)
   ["loss.neg"] loss = Neg (mean_log)
}
"""


def training_graph(folder: Path) -> Path:
    """examples/digits' graph with a symbolic batch, a one-hot `targets` input and the loss, written to
    `folder` beside a copy of its weights file (the build checks the graph against it)."""
    text = (DIGITS / "digits.onnxtext").read_text(encoding="utf-8")
    head = "digits (float[450,1,8,8] x) => (float[450,10] logits, float[450,10] probs)"
    assert head in text, "examples/digits/digits.onnxtext changed its signature"
    signature = "digits (float[batch,1,8,8] x, float[batch,10] targets) => (float loss, float[batch,10] logits)"
    text = text.replace(head, signature)
    text = text.replace('float[10] "fc2.bias" = [', 'int64[1] classes = {1}, float[10] "fc2.bias" = [', 1)
    body, _, _ = text.rpartition("}")
    body = body.replace("   [softmax] probs = Softmax <axis: int = 1> (logits)\n", "")
    (folder / "digits_train.onnxtext").write_text(body + LOSS_NODES, encoding="utf-8")
    (folder / "digits.safetensors").write_bytes((DIGITS / "digits.safetensors").read_bytes())
    return folder / "digits_train.onnxtext"


def build_trainer(folder: Path, backend: str = "numpy") -> ModuleType:
    """The module computing the loss, the logits and the trained weights' gradients in one pass."""
    from loam.driver.draft import draft_layout
    from loam.driver.options import Options
    from loam.driver.pipeline import build

    graph = training_graph(folder)
    digits = Options.from_toml(DIGITS / "loam.toml")
    layout = tuple(rule for rule in digits.layout if rule.pattern != "probs")  # the training graph has no probs
    base = Options(checkpoints=(folder / "digits.safetensors",), layout=layout)
    options = draft_layout(graph, options=base).options(base)
    fuse = "dispatch" if backend == "wgsl" else "memory"
    return build(graph, options=options, backend=backend, fuse=fuse, grad=TRAINED).module


def initial_weights() -> dict[str, np.ndarray]:
    """Seeded He-normal convolution and Gemm weights, zero biases, batch norm as the identity."""
    rng = np.random.default_rng(SEED)

    def he(*shape: int, fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    weights = {
        "conv1.weight": he(8, 1, 3, 3, fan_in=9), "conv2.weight": he(16, 8, 3, 3, fan_in=72),
        "fc1.weight": he(32, 64, fan_in=64), "fc2.weight": he(32, 10, fan_in=32),
        "fc1.bias": np.zeros(32, np.float32), "fc2.bias": np.zeros(10, np.float32),
    }  # fmt: skip
    for bn, channels in (("bn1", 8), ("bn2", 16)):
        weights[f"{bn}.scale"] = np.ones(channels, np.float32)
        weights[f"{bn}.bias"] = np.zeros(channels, np.float32)
        weights[f"{bn}.mean"] = np.zeros(channels, np.float32)
        weights[f"{bn}.var"] = np.ones(channels, np.float32)
    return weights


def data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(training images, labels, held-out images, labels); images float32 [N, 1, 8, 8], pixels / 16."""
    train = (np.load(HERE / "train_pixels.npy").astype(np.float32) / 16).reshape(-1, 1, 8, 8)
    test = np.load(DIGITS / "test_images.npy")
    return train, np.load(HERE / "train_labels.npy"), test, np.load(DIGITS / "test_labels.npy")


def batches(epoch: int, count: int) -> list[np.ndarray]:
    """The shuffled mini-batches of one epoch (the last, partial one dropped)."""
    order = np.random.default_rng(SEED + 1 + epoch).permutation(count)
    return [order[k : k + BATCH] for k in range(0, count - BATCH + 1, BATCH)]


def train(module: ModuleType, epochs: int, max_steps: int | None = None) -> tuple[list[float], object, float]:
    """SGD with momentum from `initial_weights`: each step's loss, the trained weights, seconds spent."""
    x_train, y_train, _, _ = data()
    start = initial_weights()
    weights = module.Weights(**{attr: start[name] for name, attr, *_ in module.Weights._SPECS})
    velocity: dict[str, np.ndarray] = {}
    losses: list[float] = []
    began = time.perf_counter()
    for epoch in range(epochs):
        for idx in batches(epoch, len(x_train)):
            targets = np.eye(10, dtype=np.float32)[y_train[idx]]
            zeros = np.zeros((len(idx), 10), np.float32)
            (loss, _), grads = module.forward_backward(weights, x_train[idx], targets, np.array(1.0, np.float32), zeros)
            losses.append(float(loss))
            for attr, g in zip(grads._fields, grads, strict=True):
                velocity[attr] = MOMENTUM * velocity[attr] + g if attr in velocity else g
            step = module.Grads(**{attr: velocity[attr] for attr in grads._fields})
            weights = weights.updated(step, LR)
            if max_steps is not None and len(losses) >= max_steps:
                return losses, weights, time.perf_counter() - began
    return losses, weights, time.perf_counter() - began


def accuracy(module: ModuleType, weights: object) -> float:
    """The fraction of the 450 held-out images whose largest logit is their label."""
    _, _, x_test, y_test = data()
    targets = np.zeros((len(x_test), 10), np.float32)
    out = module.forward(weights, x_test, targets, np.array(0.0, np.float32), targets)
    return float((out[1].argmax(1) == y_test).mean())


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("numpy", "wgsl"), default="numpy")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        module = build_trainer(Path(tmp), args.backend)
    losses, weights, seconds = train(module, args.epochs)
    steps = len(losses) // args.epochs
    for epoch in range(args.epochs):
        print(f"epoch {epoch + 1}: mean loss {np.mean(losses[epoch * steps : (epoch + 1) * steps]):.4f}")
    held_out = accuracy(module, weights)
    print(f"held-out accuracy {held_out:.2%}; {seconds / args.epochs:.2f} s per epoch ({args.backend})")


if __name__ == "__main__":
    main()
