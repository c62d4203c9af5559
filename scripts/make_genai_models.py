"""Build tiny Llama- and Qwen2-style decoders with onnxruntime-genai's model builder (dev-time; outputs committed).

Why: the ONNX files people download for small LLMs are what onnxruntime-genai's builder writes: int4
`MatMulNBits`, `GroupQueryAttention`, `SkipSimplifiedLayerNormalization` and friends from onnxruntime's
`com.microsoft` domain.  Loam's tests need such files without a model hub, so this script makes two
decoders with random weights from transformers' own configs (a Llama with grouped-query attention and
untied embeddings, a Qwen2 with biased q/k/v projections and tied embeddings), gives them the tiny
GPT-2 package's 1,000-token tokenizer, runs the builder at `-p int4 -e cpu`, and records
onnxruntime-genai's greedy tokens for the committed prompts (token ids) as the oracle.

    python3 -m venv /work/venvs/genai
    /work/venvs/genai/bin/pip install torch==2.13.0 transformers==5.24.0 onnxruntime-genai==0.18.0 \\
        onnxruntime==1.32.0 onnx==1.23.2
    /work/venvs/genai/bin/python scripts/make_genai_models.py        # about half a minute

Writes tests/models/genai/{llama,qwen2}_int4/ (model.onnx, model.onnx.data, genai_config.json and the
builder's tokenizer files) and tests/models/genai/greedy.json: per model, per prompt, the prompt's ids and
the ids onnxruntime-genai generates after them (greedy, `max_length` total).

The builder's MatMulNBits default `accuracy_level = 4` lets onnxruntime quantize the activations to
int8 inside each product; these models are built with `accuracy_level=1` (float32 products) so that
the recorded tokens are float32 arithmetic's, the arithmetic Loam's module performs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import onnxruntime_genai as og
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "models" / "genai"
TOKENIZER = ROOT / "tests" / "serve" / "packages" / "tiny_gpt2"
SEED = 20261202
MAX_LENGTH = 24

PROMPTS = [[1, 17, 230, 5, 999, 42], [1, 300], [1, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73]]

COMMON = dict(
    vocab_size=1000,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=0,
)


def models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(SEED)
    llama = LlamaForCausalLM(LlamaConfig(**COMMON, tie_word_embeddings=False))
    qwen = Qwen2ForCausalLM(Qwen2Config(**COMMON, tie_word_embeddings=True))
    for model in (llama, qwen):  # transformers starts norms at 1 and biases at 0: draw them too
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                elif name.endswith("bias"):
                    p.copy_(0.2 * torch.randn_like(p))
                else:
                    p.copy_(0.3 * torch.randn_like(p))
    return {"llama_int4": llama, "qwen2_int4": qwen}


def build(name: str, model: torch.nn.Module, work: Path) -> Path:
    source = work / name
    model.save_pretrained(source)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / f, source / f)
    target = OUT / name
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source), "-o", str(target),
         "-p", "int4", "-e", "cpu", "--extra_options", "accuracy_level=1"],
        check=True, cwd=work,
    )  # fmt: skip
    return target


def greedy(path: Path, prompt: list[int]) -> list[int]:
    model = og.Model(str(path))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=MAX_LENGTH)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)][len(prompt) :]


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    record: dict[str, object] = {"onnxruntime_genai": og.__version__, "max_length": MAX_LENGTH, "models": {}}
    with tempfile.TemporaryDirectory() as work:
        for name, model in models().items():
            path = build(name, model, Path(work))
            record["models"][name] = [{"prompt": p, "generated": greedy(path, p)} for p in PROMPTS]  # type: ignore[index]
    (OUT / "greedy.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(record["models"], indent=None)[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
