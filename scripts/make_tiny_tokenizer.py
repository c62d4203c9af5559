"""Train the byte-level BPE tokenizer of the tiny GPT-2 serving package (dev-time; its output is committed).

Why: the tiny GPT-2 in tests/models/tiny_gpt2 has random weights and a 1,000-token vocabulary and came
with no tokenizer, but the serving tests drive it as users drive a real model: text in, text out,
chat templates and special tokens.  This trains a byte-level BPE of exactly 1,000 ids (3 special tokens,
the 256 byte symbols, 741 merges) on the Zen of Python, so every id the model can produce decodes to
text.  The merges say nothing about the model (its weights are random); only the id range matters.

    python scripts/make_tiny_tokenizer.py     # writes tests/serve/packages/tiny_gpt2/tokenizer{,_config}.json

Rerunning with the same `tokenizers` version (0.23.3) writes the same bytes.
"""

from __future__ import annotations

import codecs
import json
import this  # prints the Zen on import; its text is this.s, rot13
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = Path(__file__).resolve().parent.parent / "tests" / "serve" / "packages" / "tiny_gpt2"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def main() -> None:
    corpus = codecs.decode(this.s, "rot13")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=1
    )
    # Enough distinct text for 741 merges: the Zen, with each line also reversed and upper-cased.
    lines = corpus.splitlines()
    tokenizer.train_from_iterator([*lines, *(s[::-1] for s in lines), *(s.upper() for s in lines)] * 3, trainer)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    assert size <= 1000, size
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(OUT / "tokenizer.json"), pretty=False)
    config = {"bos_token": None, "eos_token": "<|endoftext|>", "chat_template": CHAT_TEMPLATE}
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    print(f"vocabulary {size} ids; wrote {OUT}")


if __name__ == "__main__":
    main()
