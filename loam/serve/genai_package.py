"""An onnxruntime-genai folder served as it is: its `genai_config.json` describes the package.

The model builder writes `model.onnx` (its initializers in `model.onnx.data`), `genai_config.json`, and
the tokenizer's `tokenizer.json`, `tokenizer_config.json` and chat template.  `loam serve DIR` and
`loam generate DIR` take such a folder without a `model.json`: `genai_package` reads the config into the
`PackageSpec` one would write for it:

- one text stage, `decoder`, from `model.decoder.filename`, whose layout Loam drafts at build time
  (`StageSpec.draft`; the config fixes `kv_cache_dim`, `loam.genai`) and whose weights are the graph's
  ONNX external data, loaded from the folder (`Weights.load_file(DIR)`);
- the tokenizer `tokenizer.json` (EOS and the chat template from the files beside it);
- the search defaults (`search`): `do_sample` false is greedy, else its `temperature` and `top_p`;
  `max_length` bounds a request's context (at most `Capacities.context_tokens`' default, so the KV pool
  of a long-context model stays the size of any package's).

The decoder's input and output names must be the ones Loam's text role gives (`input_ids`,
`attention_mask`, `past_key_values.%d.key/value` in; `logits`, `present.%d.key/value` out), as the
builder writes them; another naming is refused naming the config key.
"""

from __future__ import annotations

from pathlib import Path

from loam.errors import LoamError
from loam.genai import CONFIG, decoder_config, read_config
from loam.options import Options
from loam.serve.package import _NAME, Capacities, PackageError, PackageSpec, StageSpec

_NAMES = {
    "inputs": {
        "input_ids": "input_ids",
        "attention_mask": "attention_mask",
        "past_key_names": "past_key_values.%d.key",
        "past_value_names": "past_key_values.%d.value",
    },
    "outputs": {
        "logits": "logits",
        "present_key_names": "present.%d.key",
        "present_value_names": "present.%d.value",
    },
}
"""The genai config's names for the decoder's inputs and outputs that Loam's text role reads."""


def is_genai_folder(folder: Path) -> bool:
    """Whether `folder` is an onnxruntime-genai folder without a `model.json` of its own."""
    return (folder / CONFIG).is_file() and not (folder / "model.json").exists()


def genai_package(folder: Path) -> PackageSpec:
    """The package `folder/genai_config.json` describes (a PackageError names the file and the key)."""
    where = folder / CONFIG
    try:
        config = read_config(folder)
    except LoamError as err:
        raise PackageError(str(err)) from None
    assert config is not None
    decoder = decoder_config(config)
    for group, names in _NAMES.items():
        given = decoder.get(group, {})
        for key, name in names.items():
            value = given.get(key, name) if isinstance(given, dict) else None
            if value != name:
                raise PackageError(
                    f"{where}: key 'model.decoder.{group}.{key}' is {value!r}; Loam's text role reads {name!r}"
                )
    filename = decoder.get("filename", "model.onnx")
    graph = folder / filename if isinstance(filename, str) else folder / "model.onnx"
    if not graph.is_file():
        raise PackageError(f"{where}: key 'model.decoder.filename' names {filename!r}: no such file ({graph})")
    name = folder.resolve().name
    if not _NAME.fullmatch(name):
        raise PackageError(f"{folder}: the folder's name {name!r} is not a model id (letters, digits, ._:/-)")
    search = config.get("search", {})
    search = search if isinstance(search, dict) else {}
    sampling = {"temperature": 0.0, "top_p": 1.0}
    if search.get("do_sample") is True:
        for key in sampling:
            value = search.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                sampling[key] = float(value)
    model = config["model"]
    assert isinstance(model, dict)
    longest = search.get("max_length", model.get("context_length"))
    context = Capacities().context_tokens
    if isinstance(longest, int) and not isinstance(longest, bool) and 0 < longest < context:
        context = longest
    tokenizer = folder / "tokenizer.json"
    stage = StageSpec("decoder", graph, None, Options(), packed=True, draft=True)
    kind = model.get("type", "decoder")
    return PackageSpec(
        folder,
        name,
        "text",
        {},
        {"decoder": stage},
        tokenizer if tokenizer.is_file() else None,
        None,
        Capacities(context_tokens=context),
        f"onnxruntime-genai {kind} model ({where})",
        sampling,
    )
