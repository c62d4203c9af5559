"""Train the tokenizer of the tiny text-to-image serving package (dev-time; its output is committed).

Why: the tiny CLIP text encoder in tests/models/vision has random weights and a 1,000-token vocabulary
and came with no tokenizer, but the image role takes prompts as text, as users send them.  This trains
a byte-level BPE of at most 1,000 ids (776: the Zen has no more merges to give) on the Zen of Python,
with CLIP's framing: the ids the encoder's config names (`<|startoftext|>` 0, the padding `<|pad|>` 1,
`<|endoftext|>` 2), text lower-cased, and each prompt read as start, its tokens, end.  The merges say
nothing about the model (its weights are random); only the ids and the framing matter.  diffusers'
pipeline reads the same file (as a `PreTrainedTokenizerFast`) when scripts/record_image_oracle.py
records the oracle.

    python scripts/make_tiny_clip_tokenizer.py     # writes tests/serve/packages/tiny_diffusion/tokenizer.json

Rerunning with the same `tokenizers` version (0.23.3) writes the same bytes.
"""

from __future__ import annotations

import codecs
import this  # prints the Zen on import; its text is this.s, rot13
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

OUT = Path(__file__).resolve().parent.parent / "tests" / "serve" / "packages" / "tiny_diffusion"
SPECIAL = ["<|startoftext|>", "<|pad|>", "<|endoftext|>"]


def main() -> None:
    corpus = codecs.decode(this.s, "rot13").lower()
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=1
    )
    # Enough distinct text for 741 merges: the Zen, with each line also reversed and its words reversed.
    lines = corpus.splitlines()
    more = [*(s[::-1] for s in lines), *(" ".join(w[::-1] for w in s.split()) for s in lines)]
    tokenizer.train_from_iterator([*lines, *more] * 3, trainer)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    assert size <= 1000, size
    assert [tokenizer.token_to_id(t) for t in SPECIAL] == [0, 1, 2]
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>", special_tokens=[(t, i) for i, t in enumerate(SPECIAL) if i != 1]
    )
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(OUT / "tokenizer.json"), pretty=False)
    print(f"vocabulary {size} ids; wrote {OUT / 'tokenizer.json'}")


if __name__ == "__main__":
    main()
