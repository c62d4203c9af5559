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

For the tiny GPT-2 (tests/models/tiny_gpt2, decoder without past) and the tiny BERT (tests/models/tiny_bert,
the folded export), written here in torch from their ONNX graphs over their committed weights (each weight
its own leaf, as the graph reads it: GPT-2's tied head is the separate `lm_head.weight.T`): seeded upstream
gradients of every output, and torch's gradient of sum(output * g) with respect to every weight.  A weight
of at most 4096 elements keeps its whole gradient; a larger one its norm and its dot products with 8
seeded random tensors (`projections`), which the test draws again, so the file stays small.  Written to
tests/grad/transformer_grads.npz, float32 (the projections float64), after checking that torch's outputs
are onnxruntime's (tests/models/*/expected.npz) within 1e-5.
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


def train_digits(epochs: int | None = None, steps: int | None = None) -> tuple[list[float], dict, object, float]:
    """examples/train-digits' schedule in torch (its seeded start, mini-batches, learning rate and momentum,
    read from its train.py) for `epochs` epochs or `steps` steps: each step's loss, the weights, the example,
    and the seconds the steps took."""
    import importlib.util
    import time

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
    began = time.perf_counter()
    while (epochs is None or epoch < epochs) and (steps is None or len(losses) < steps):
        for idx in example.batches(epoch, len(x_train)):
            logits, _ = digits(torch.tensor(x_train[idx]), p)
            targets = torch.tensor(np.eye(10, dtype=np.float32)[y_train[idx]])
            loss = -(targets * torch.log_softmax(logits, dim=1)).sum(1).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
        epoch += 1
    return losses, p, example, time.perf_counter() - began


def train_digits_losses(steps: int = 50) -> list[float]:
    """examples/train-digits' first `steps` losses, in torch, written to its torch_losses.json."""
    import json

    losses, _, _, _ = train_digits(steps=steps)
    out = ROOT / "examples" / "train-digits" / "torch_losses.json"
    out.write_text(json.dumps({"torch": torch.__version__, "losses": losses}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return losses


TRANSFORMERS_OUT = ROOT / "tests" / "grad" / "transformer_grads.npz"
WHOLE = 4096  # a gradient of at most this many elements is kept whole


def projections(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The 8 seeded random tensors a large weight's gradient is projected on (tests/grad draws them again)."""
    import zlib

    return np.random.default_rng(zlib.crc32(name.encode())).standard_normal((8, *shape))


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, heads: int) -> torch.Tensor:
    """Heads split from the last axis, scores / sqrt(head size) + bias, softmax, heads merged again."""
    b, s, d = q.shape

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(b, s, heads, d // heads).transpose(1, 2)

    scores = split(q) @ split(k).transpose(-1, -2) / float(np.sqrt(d // heads)) + bias
    return (torch.softmax(scores, -1) @ split(v)).transpose(1, 2).reshape(b, s, d)


def gpt2(ids: np.ndarray, p: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """tests/models/tiny_gpt2/decoder.onnxtext: logits and each layer's present key and value."""
    lowest = torch.finfo(torch.float32).min
    s = ids.shape[1]
    causal = torch.triu(torch.full((s, s), lowest), 1)
    h = p["transformer.wte.weight"][torch.tensor(ids)] + p["transformer.wpe.weight"][:s]
    out = {}
    for i in range(2):
        pre = f"transformer.h.{i}."
        a = layer_norm(h, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], 1e-5)
        q, k, v = (a @ p[pre + "attn.c_attn.weight"] + p[pre + "attn.c_attn.bias"]).split(64, dim=-1)
        for name, t in (("key", k), ("value", v)):
            out[f"present.{i}.{name}"] = t.reshape(*t.shape[:2], 4, 16).transpose(1, 2)
        h = h + attention(q, k, v, causal, 4) @ p[pre + "attn.c_proj.weight"] + p[pre + "attn.c_proj.bias"]
        m = layer_norm(h, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], 1e-5) @ p[pre + "mlp.c_fc.weight"]
        m = F.gelu(m + p[pre + "mlp.c_fc.bias"], approximate="tanh")
        h = h + m @ p[pre + "mlp.c_proj.weight"] + p[pre + "mlp.c_proj.bias"]
    h = layer_norm(h, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], 1e-5)
    return {"logits": h @ p["lm_head.weight.T"], **out}


def bert(ids: np.ndarray, mask: np.ndarray, types: np.ndarray, p: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """tests/models/tiny_bert/encoder.onnxtext: last_hidden_state and pooler_output."""
    s = ids.shape[1]
    h = (p["embeddings.word_embeddings.weight"][torch.tensor(ids)]
         + p["embeddings.token_type_embeddings.weight"][torch.tensor(types)]
         + p["embeddings.position_embeddings.weight"][:s])  # fmt: skip
    h = layer_norm(h, p["embeddings.LayerNorm.weight"], p["embeddings.LayerNorm.bias"], 1e-12)
    bias = ((1.0 - torch.tensor(mask, dtype=torch.float32)) * torch.finfo(torch.float32).min)[:, None, None, :]
    for i in range(2):
        pre = f"encoder.layer.{i}."

        def dense(x: torch.Tensor, name: str, pre: str = pre) -> torch.Tensor:
            return x @ p[f"{pre}{name}.weight.T"] + p[f"{pre}{name}.bias"]

        qkv = [dense(h, f"attention.self.{n}") for n in ("query", "key", "value")]
        a = dense(attention(*qkv, bias, 4), "attention.output.dense")
        h = layer_norm(a + h, p[pre + "attention.output.LayerNorm.weight"], p[pre + "attention.output.LayerNorm.bias"],
                       1e-12)  # fmt: skip
        m = dense(F.gelu(dense(h, "intermediate.dense")), "output.dense")
        h = layer_norm(m + h, p[pre + "output.LayerNorm.weight"], p[pre + "output.LayerNorm.bias"], 1e-12)
    pooled = torch.tanh(h[:, 0] @ p["pooler.dense.weight"].T + p["pooler.dense.bias"])
    return {"last_hidden_state": h, "pooler_output": pooled}


def transformer_grads() -> None:
    """GPT-2's and BERT's gradients (see the module's doc) into TRANSFORMERS_OUT."""
    arrays: dict[str, np.ndarray] = {}
    gpt2_expected = np.load(ROOT / "tests" / "models" / "tiny_gpt2" / "expected.npz")
    bert_expected = np.load(ROOT / "tests" / "models" / "tiny_bert" / "expected.npz")
    models_dir = ROOT / "tests" / "models"
    bert_inputs = [bert_expected[f"set1.{k}"] for k in ("input_ids", "attention_mask", "token_type_ids")]
    models = {
        "gpt2": (load_file(str(models_dir / "tiny_gpt2" / "tiny_gpt2.safetensors")),
                 lambda p: gpt2(gpt2_expected["batch2_ids"], p), {"logits": gpt2_expected["decoder.logits.batch2"]}),
        "bert": ({**load_file(str(models_dir / "tiny_bert" / "hf_model.safetensors")),
                  **load_file(str(models_dir / "tiny_bert" / "tiny_bert.safetensors"))},
                 lambda p: bert(*bert_inputs, p),
                 {k: bert_expected[f"set1.{k}"] for k in ("last_hidden_state", "pooler_output")}),
    }  # fmt: skip
    for model, (weights, forward, onnxruntime_outputs) in models.items():
        rng = np.random.default_rng(SEED)
        p = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
        outputs = forward(p)
        loss = torch.zeros(())
        for name, value in outputs.items():
            g = rng.standard_normal(tuple(value.shape)).astype(np.float32)
            arrays[f"{model}.g.{name}"] = g
            loss = loss + (value * torch.tensor(g)).sum()
        for name, want in onnxruntime_outputs.items():  # the torch port computes what the ONNX graph does
            got = outputs[name].detach().numpy()
            assert np.abs(got - want).max() < 1e-5, (model, name, np.abs(got - want).max())
        loss.backward()
        for name, t in p.items():
            if t.grad is None:
                continue  # a checkpoint tensor the graph does not read (BERT's [out, in] Linear weights)
            grad = t.grad.numpy()
            if grad.size <= WHOLE:
                arrays[f"{model}.grad.{name}"] = grad
            else:
                arrays[f"{model}.norm.{name}"] = np.array(np.linalg.norm(grad.astype(np.float64)))
                arrays[f"{model}.proj.{name}"] = (projections(name, grad.shape) * grad).reshape(8, -1).sum(1)
    np.savez_compressed(TRANSFORMERS_OUT, **arrays)
    print(f"wrote {TRANSFORMERS_OUT} (torch {torch.__version__}): {len(arrays)} arrays")


def main() -> None:
    torch.use_deterministic_algorithms(True)
    transformer_grads()
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
