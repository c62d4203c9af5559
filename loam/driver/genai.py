"""onnxruntime-genai folders as the model builder writes them: `genai_config.json` beside `model.onnx`.

The builder (`python -m onnxruntime_genai.models.builder`) writes the decoder (`model.onnx` and its
external data `model.onnx.data`), the tokenizer's files, and `genai_config.json`, which states the
decoder's geometry (`head_size`, `num_key_value_heads`, ...), its input and output names, the special
tokens and the search defaults.  The graph declares the KV cache's head extent as the symbol
`kv_cache_dim`, which only the config (or the heads' size, deep in the graph) fixes; Loam reads the
config instead of asking for `--dims kv_cache_dim=64`:

- `config_dims`: the extents the config states for the dim_params the graph declares;
- `with_config_dims`: the build options with those dims added (the options' own win), and the build note
  saying so, for `loam build`, `loam layout` and `loam.build` of a path whose folder holds the config.

`loam serve DIR` and `loam generate DIR` describe such a folder as a package from the same config
(`loam.serve.package.genai_package`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from loam.core.errors import ModelError
from loam.driver.options import Options

CONFIG = "genai_config.json"
"""The file onnxruntime-genai's builder writes beside the decoder."""

_STATED: dict[str, str] = {
    "kv_cache_dim": "head_size",
    "head_size": "head_size",
    "head_dim": "head_size",
    "num_key_value_heads": "num_key_value_heads",
    "num_kv_heads": "num_key_value_heads",
    "num_attention_heads": "num_attention_heads",
    "hidden_size": "hidden_size",
}
"""dim_param -> the `model.decoder` key stating it (`vocab_size` is `model.vocab_size`)."""


def read_config(folder: Path) -> dict[str, object] | None:
    """`folder/genai_config.json` as a JSON object, or None where there is none; a file that is not one
    is a ModelError naming it."""
    path = folder / CONFIG
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ModelError(f"{path}: not a readable JSON file ({err})") from None
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("decoder"), dict):
        raise ModelError(f"{path}: has no 'model.decoder' object (not onnxruntime-genai's config)")
    return config


def decoder_config(config: Mapping[str, object]) -> dict[str, object]:
    """The config's `model.decoder` object (`read_config` checked it is one)."""
    model = config["model"]
    assert isinstance(model, dict)
    return model["decoder"]


def config_dims(config: Mapping[str, object], declared: set[str]) -> dict[str, tuple[int, str]]:
    """Each dim_param in `declared` the config states: name -> (value, the config key stating it)."""
    decoder = decoder_config(config)
    model = config["model"]
    assert isinstance(model, dict)
    found: dict[str, tuple[int, str]] = {}
    for name in sorted(declared):
        key = _STATED.get(name)
        value, where = (decoder.get(key), f"model.decoder.{key}") if key else (None, "")
        if name == "vocab_size":
            value, where = model.get("vocab_size"), "model.vocab_size"
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            found[name] = (value, where)
    return found


def config_digest(model: Path) -> str | None:
    """A digest of the config beside `model` (a `.onnx` path), for the build cache's key; None without one."""
    import hashlib

    path = model.parent / CONFIG
    if model.suffix != ".onnx" or not path.is_file():
        return None
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as err:
        raise ModelError(f"{path}: cannot read it ({err.strerror or err})") from None


def declared_dim_params(model: Path) -> set[str]:
    """The dim_params the graph's inputs and outputs declare (its graph only: external data unread)."""
    import onnx

    try:
        proto = onnx.load(str(model), load_external_data=False)
    except Exception as err:  # the reader proper says what is wrong with the file
        raise ModelError(f"{model}: not a readable ONNX protobuf ({err})") from None
    names: set[str] = set()
    for value in (*proto.graph.input, *proto.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                names.add(dim.dim_param)
    return names


def with_config_dims(model: object, options: Options) -> tuple[Options, list[str]]:
    """`options` with the dims `genai_config.json` beside `model` (a `.onnx` path) states added, and the
    note naming them; the options as they are where there is no config (or `model` is no path).  A dim
    the options already give keeps their value, and the note says where the config disagrees."""
    if not isinstance(model, (str, Path)) or Path(model).suffix != ".onnx":
        return options, []
    model = Path(model)
    config = read_config(model.parent)
    if config is None:
        return options, []
    stated = config_dims(config, declared_dim_params(model))
    added = {name: value for name, (value, _) in stated.items() if name not in options.dims}
    parts = [f"{name} = {value} ({where})" for name, (value, where) in stated.items() if name in added]
    differ = [
        f"{name} = {options.dims[name]} (the config states {value})"
        for name, (value, _) in stated.items()
        if name in options.dims and options.dims[name] != value
    ]
    notes = []
    if parts:
        notes.append(f"{model.parent / CONFIG} fixes {', '.join(parts)}")
    if differ:
        notes.append(f"the options' dims override {model.parent / CONFIG}: {', '.join(differ)}")
    if not added:
        return options, notes
    return replace(options, dims={**options.dims, **added}), notes
