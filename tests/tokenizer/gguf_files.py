"""GGUF files that hold a tokenizer and no tensors, written with llama.cpp's own `gguf.GGUFWriter`.

Both the oracle script (`scripts/make_tokenizer_oracle.py`, in a venv with transformers) and the tests use
`write_tokenizer_gguf`, so the variant files they read hold the same metadata.  Values are typed the way
llama.cpp's converter types tokenizer metadata: integers UINT32 (token types INT32), floats FLOAT32, arrays
by their first element.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gguf import GGUFValueType, GGUFWriter

_SCALARS = {
    bool: GGUFValueType.BOOL,
    int: GGUFValueType.UINT32,
    float: GGUFValueType.FLOAT32,
    str: GGUFValueType.STRING,
}


def _type_of(key: str, value: object) -> GGUFValueType:
    if key == "tokenizer.ggml.token_type":
        return GGUFValueType.INT32
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return GGUFValueType.INT32
    return _SCALARS[type(value)]


def write_tokenizer_gguf(path: Path, metadata: Mapping[str, object]) -> Path:
    """A GGUF file at `path` holding `metadata` (its `general.architecture`, else "llama") and no tensors."""
    architecture = metadata.get("general.architecture", "llama")
    assert isinstance(architecture, str)
    writer = GGUFWriter(str(path), architecture)
    for key, value in metadata.items():
        if key == "general.architecture" or key.startswith("GGUF."):
            continue  # the writer writes the architecture itself; GGUF.* are the reader's header fields
        if isinstance(value, list):
            element = _type_of(key, value[0]) if value else GGUFValueType.UINT8
            writer.add_key_value(key, value, GGUFValueType.ARRAY, element)
        else:
            writer.add_key_value(key, value, _type_of(key, value))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def tiny(**changes: object) -> dict[str, object]:
    """Tokenizer metadata of a 9-token vocabulary (None in `changes` removes a key)."""
    metadata: dict[str, object] = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": ["<s>", "</s>", "a", "b", "ab", "Ġ", "Ġab", "<think>", "1"],
        "tokenizer.ggml.token_type": [3, 3, 1, 1, 1, 1, 1, 4, 1],
        "tokenizer.ggml.merges": ["a b", "Ġ ab"],
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 1,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": True,
        "tokenizer.chat_template": "{% for m in messages %}<s>{{ m['role'] }}:{{ m['content'] }}</s>{% endfor %}",
    }
    metadata |= changes
    return {key: value for key, value in metadata.items() if value is not None}
