"""Write the torch autograd oracles of tests/grad/ (dev-time: needs torch, which CI does not install).

    /work/venvs/genai/bin/python scripts/make_grad_oracles.py     # torch 2.13.0, safetensors

For the digits CNN (examples/digits: Conv, BatchNormalization in inference form, Relu, MaxPool, twice;
Flatten, Gemm, Relu, MatMul + Add, Softmax), written here in torch from its ONNX text node by node
over the weights of digits.safetensors: the first 450 test images, seeded upstream gradients of both
outputs (logits and probs), and torch's gradient of sum(logits * g_logits) + sum(probs * g_probs) with
respect to every weight (the batch-norm statistics too: the formula is differentiable in them).
Written to tests/grad/digits_grads.npz, float32.

For examples/train-digits: its schedule (the same seeded initial weights, mini-batches, learning rate
and momentum, read from its train.py) run in torch for 50 steps, SGD with momentum
(`torch.optim.SGD`, whose update is train.py's), the loss of each step written to
examples/train-digits/torch_losses.json.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits"
OUT = ROOT / "tests" / "grad" / "digits_grads.npz"
SEED = 2026


def batch_norm(x: torch.Tensor, p: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """ONNX BatchNormalization in inference form, as its formula (so the statistics have gradients)."""
    shape = (1, -1, 1, 1)
    mean, var = p[f"{name}.mean"].reshape(shape), p[f"{name}.var"].reshape(shape)
    return (x - mean) / torch.sqrt(var + 1e-5) * p[f"{name}.scale"].reshape(shape) + p[f"{name}.bias"].reshape(shape)


def digits(x: torch.Tensor, p: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    h = F.max_pool2d(F.relu(batch_norm(F.conv2d(x, p["conv1.weight"], padding=1), p, "bn1")), 2, 2)
    h = F.max_pool2d(F.relu(batch_norm(F.conv2d(h, p["conv2.weight"], padding=1), p, "bn2")), 2, 2)
    h = F.relu(h.flatten(1) @ p["fc1.weight"].T + p["fc1.bias"])
    logits = h @ p["fc2.weight"] + p["fc2.bias"]
    return logits, torch.softmax(logits, dim=1)


def train_digits_losses(steps: int = 50) -> list[float]:
    """examples/train-digits' first `steps` losses, in torch."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("train_digits", ROOT / "examples" / "train-digits" / "train.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    start = example.initial_weights()
    p = {k: torch.tensor(v, requires_grad=k in example.TRAINED) for k, v in start.items()}
    optimizer = torch.optim.SGD([p[k] for k in example.TRAINED], lr=example.LR, momentum=example.MOMENTUM)
    x_train, y_train, _, _ = example.data()
    losses: list[float] = []
    epoch = 0
    while len(losses) < steps:
        for idx in example.batches(epoch, len(x_train)):
            logits, _ = digits(torch.tensor(x_train[idx]), p)
            targets = torch.tensor(np.eye(10, dtype=np.float32)[y_train[idx]])
            loss = -(targets * torch.log_softmax(logits, dim=1)).sum(1).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
            if len(losses) == steps:
                break
        epoch += 1
    out = ROOT / "examples" / "train-digits" / "torch_losses.json"
    out.write_text(json.dumps({"torch": torch.__version__, "losses": losses}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return losses


def main() -> None:
    torch.use_deterministic_algorithms(True)
    train_digits_losses()
    weights = load_file(str(DIGITS / "digits.safetensors"))
    p = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
    x = torch.tensor(np.load(DIGITS / "test_images.npy").astype(np.float32)[:450].reshape(450, 1, 8, 8))
    rng = np.random.default_rng(SEED)
    g_logits = rng.standard_normal((450, 10)).astype(np.float32)
    g_probs = rng.standard_normal((450, 10)).astype(np.float32)
    logits, probs = digits(x, p)
    loss = (logits * torch.tensor(g_logits)).sum() + (probs * torch.tensor(g_probs)).sum()
    loss.backward()
    arrays = {"g_logits": g_logits, "g_probs": g_probs, "logits": logits.detach().numpy()}
    arrays |= {f"grad.{k}": t.grad.numpy() for k, t in p.items()}  # type: ignore[union-attr]
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} (torch {torch.__version__}): {', '.join(sorted(arrays))}")


if __name__ == "__main__":
    main()
