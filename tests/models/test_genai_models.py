"""Decoders written by onnxruntime-genai's model builder decode with onnxruntime-genai's greedy tokens.

tests/models/genai/ holds a tiny Llama and a tiny Qwen2 (random weights) that scripts/make_genai_models.py
built with `python -m onnxruntime_genai.models.builder -p int4 -e cpu`: int4 MatMulNBits products,
GroupQueryAttention with rotary embeddings and grouped KV heads, SkipSimplifiedLayerNormalization,
SimplifiedLayerNormalization, and (Qwen2, tied embeddings) GatherBlockQuantized reading the int4 head
as the embedding table.  greedy.json records onnxruntime-genai's greedy tokens for three prompts.

Each test builds `model.onnx` as the builder wrote it, with one option: the builder declares the KV
cache's head extent as the symbol `kv_cache_dim`, which the heads' size fixes; `dims` says so.  Then
a greedy loop runs the prompt with an empty past and one token per step, each step's presents fed
back as the next step's past by name (the builder lists all keys, then all values).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from loam.options import Options
from loam.testing import build_for, run_built

GENAI = Path(__file__).resolve().parent / "genai"
RECORD = json.loads((GENAI / "greedy.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["llama_int4", "qwen2_int4"])
def test_the_builders_int4_model_decodes_onnxruntime_genais_tokens(name: str) -> None:
    model = onnx.load(str(GENAI / name / "model.onnx"))
    config = json.loads((GENAI / name / "genai_config.json").read_text(encoding="utf-8"))["model"]["decoder"]
    layers, kv_heads, head = config["num_hidden_layers"], config["num_key_value_heads"], config["head_size"]
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    assert ("com.microsoft", "MatMulNBits") in ops and ("com.microsoft", "GroupQueryAttention") in ops
    built = build_for(model, Options(dims={"kv_cache_dim": head}))
    outputs = [o.name for o in model.graph.output]
    for case in RECORD["models"][name]:
        ids = np.array([case["prompt"]], np.int64)
        past = {
            f"past_key_values.{i}.{kv}": np.zeros((1, kv_heads, 0, head), np.float32)
            for i in range(layers)
            for kv in ("key", "value")
        }
        length, generated = 0, []
        while len(generated) < len(case["generated"]):
            length += ids.shape[1]
            got = run_built(built, {"input_ids": ids, "attention_mask": np.ones((1, length), np.int64), **past})
            token = int(np.argmax(got[0][0, -1]))
            generated.append(token)
            ids = np.array([[token]], np.int64)
            past = {o.replace("present", "past_key_values"): v for o, v in zip(outputs[1:], got[1:], strict=True)}
        assert generated == case["generated"], f"prompt {case['prompt']}"


def test_the_weights_stay_packed() -> None:
    """The int4 weights are the module's bytes as the file stores them, never widened to float32."""
    model = onnx.load(str(GENAI / "llama_int4" / "model.onnx"))
    built = build_for(model, Options(dims={"kv_cache_dim": 16}))
    module = built.module
    weights = module.Weights.embedded()
    held = {name: getattr(weights, attr) for name, attr, *_ in module.Weights._SPECS}
    packed = [name for name in held if name.endswith("_Q4")]
    assert len(packed) == 11  # qkv, o, gate, up, down in each of 2 layers, and the head
    assert all(held[name].dtype == np.uint8 for name in packed)
    assert not any(v.dtype.kind == "f" and v.size >= 64 * 128 for name, v in held.items() if "embed" not in name)


def test_without_the_dims_option_the_build_names_the_declaration_and_the_fix() -> None:
    from loam.errors import ShapeError

    model = onnx.load(str(GENAI / "llama_int4" / "model.onnx"))
    with pytest.raises(ShapeError) as caught:
        build_for(model)
    message = str(caught.value)
    assert "extent kv_cache_dim meets 16" in message
    assert "kv_cache_dim is declared by past_key_values.0.key axis 3" in message
    assert "`[dims] kv_cache_dim = 16` (--dims kv_cache_dim=16)" in message
