"""Export tiny GPT-2 and Llama decoders with torch's default ONNX exporter, `dynamo=True` (dev-time; outputs committed).

Why: `torch.onnx.export(..., dynamo=True)` is torch's default exporter now, and what it writes differs from
the TorchScript exporter's graphs Loam was first tested on: opset 20, GatherND for the causal mask's
indexing, a present length spelled `past + seq`, `LayerNormalization` and `Gemm` where TorchScript wrote
the pieces.  Each model takes its past as flat tensors (a wrapper fills transformers' DynamicCache with
them), as a serving loop feeds a decoder:

    input_ids [batch, seq], attention_mask [batch, total], past_key_values.{i}.{key,value} [batch, H, past, D]
    -> logits [batch, seq, vocab], present.{i}.{key,value} [batch, H, past + seq, D]

The weights are transformers' random init from a fixed seed, every norm and bias redrawn (so a module that
drops one cannot match), embedded in the file.  Loam's tests run prompt and decode steps against
onnxruntime on the same file (tests/models/test_dynamo_decoders.py).

    /work/venvs/genai/bin/python scripts/export_dynamo_decoders.py    # the venv of scripts/make_genai_models.py
                                                                     # plus onnxscript==0.7.2; a few seconds
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import torch
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

OUT = Path(__file__).resolve().parents[1] / "tests" / "models" / "dynamo"
SEED = 20261202
LAYERS = 2


class FlatPast(torch.nn.Module):
    """The model with its past as 2 * LAYERS tensors in and out (keys then values, layer by layer)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, past: list[torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        cache = DynamicCache(config=self.model.config)
        for i in range(LAYERS):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        flat: list[torch.Tensor] = []
        for layer in out.past_key_values.layers:
            flat += [layer.keys, layer.values]
        return (out.logits, *flat)


def randomized(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.startswith("transformer.ln") or ".ln_" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    return model.eval()


def export(name: str, model: torch.nn.Module, kv_heads: int, head_dim: int) -> None:
    ids = torch.randint(0, 256, (2, 3))
    past = [torch.randn(2, kv_heads, 4, head_dim) for _ in range(2 * LAYERS)]
    mask = torch.ones(2, 7, dtype=torch.int64)
    batch, seq, past_len, total = (torch.export.Dim(n) for n in ("batch", "seq", "past", "total"))
    shapes = {
        "input_ids": {0: batch, 1: seq},
        "attention_mask": {0: batch, 1: total},
        "past": [{0: batch, 2: past_len} for _ in range(2 * LAYERS)],
    }
    names = ["input_ids", "attention_mask"] + [
        f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")
    ]
    outputs = ["logits"] + [f"present.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    path = OUT / f"{name}.onnx"
    torch.onnx.export(
        FlatPast(model), (ids, mask, past), str(path), dynamo=True, dynamic_shapes=shapes,
        input_names=names, output_names=outputs,
    )  # fmt: skip
    onnx.save(onnx.load(str(path)), str(path))  # the weights inside the file, as a download has them
    data = path.with_suffix(".onnx.data")
    if data.exists():
        data.unlink()


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=LAYERS, n_head=4,
                                      bos_token_id=0, eos_token_id=0))  # fmt: skip
    export("gpt2_decoder", randomized(gpt2), 4, 8)
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=256,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=LAYERS,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            bos_token_id=0,
            eos_token_id=0,
        )
    )
    export("llama_decoder", randomized(llama), 2, 8)
    print(f"torch {torch.__version__}: wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
