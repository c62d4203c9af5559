"""A serving package: the folder `loam serve` registers, how its `model.json` is read, and registering it.

A package is a folder holding `model.json` and the files it names.  `model.json` says which contract
the model serves (`role`, one of `loam.serve.roles.ROLES`: `text` for a decoder whose conversations are
retained rows of KV state, `embedding` for a finite encoder, `sequence` for an encoder over supplied ids
that publishes a pair's score or its hidden rows, `decision` for a question answered over a closed set,
whose own keys `PackageSpec.role_keys` holds), its numerical stages (each a graph Loam
builds, with build options), its checkpoint sources, its tokenizer and its capacities:

    {
      "name": "smollm2",                                  # the id clients ask for (default: the folder's name)
      "role": "text",
      "sources": {"gguf": "SmolLM2-135M-Instruct.Q4_1.gguf"},
      "stages": {"decoder": {"graph": "decoder_positions.onnxtext", "source": "gguf",
                             "options": {"architecture": "llama"}, "packed": false}},
      "tokenizer": {"source": "gguf"},                     # or "tokenizer.json", or null
      "capacities": {"batch_units": 256, "resident_requests": 16, "context_tokens": 2048,
                     "output_bytes": 65536, "block_tokens": 16}
    }

A source is an ordered shard list: one path or a list of paths, each a safetensors shard, a Hugging
Face `*.index.json`, or a GGUF file.  Several stages may read one source; declaring a source reads no
payload.  Paths resolve from the package folder.  A stage takes `graph`, `source`, `options` and
`packed`, and the keys its role's `PackageSchema` adds (an embedding stage's `pooling`, `normalize` and
`output`; a sequence stage's `publish`, `activation` and `output`; a decision stage's `specialize`, the dims a
request's input fixes in a build made for it, `loam.serve.specialize`).  `control` optionally names a Python
file in the package whose `CONTROL` object replaces the role's built-in control (see `loam.serve.finite`
and `loam.serve.text`): it is code the operator trusts, never something a client sends.  What a read spec
and a registered package hold is `loam.serve.spec`'s.

A folder as onnxruntime-genai's model builder writes it (`model.onnx`, `model.onnx.data`,
`genai_config.json`, the tokenizer's files) and without a `model.json` is a package too: `genai_package`
reads its config into the spec one would write for it.  One text stage, `decoder`, from
`model.decoder.filename`, whose layout Loam drafts at build time (`StageSpec.draft`; the config fixes
`kv_cache_dim`, `loam.driver.genai`) and whose weights are the graph's ONNX external data, loaded from the
folder; the tokenizer `tokenizer.json` (EOS and the chat template from the files beside it); the
search defaults (`do_sample` false is greedy, else its `temperature` and `top_p`); `max_length` as the
context (at most `Capacities.context_tokens`' default, so a long-context model's KV pool stays the size
of any package's).  The decoder's input and output names must be those Loam's text role gives, as the
builder writes them; another naming is refused naming the config key.

Registration (`open_package`) reads and checks all of this, builds each stage through Loam's build
cache (a warm restart compiles nothing), opens each source once (one read-only memory map shared by
every stage that reads it) and loads every stage's weights, which checks every tensor's header against
the graph, before any request is admitted: a missing shard or a tensor of the wrong extent fails
registration naming the file, the tensor and the axis.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from loam.core.errors import LoamError
from loam.driver.genai import CONFIG, decoder_config, read_config
from loam.driver.options import Options
from loam.serve.roles import ROLES
from loam.serve.spec import (
    Capacities,
    Control,
    Package,
    PackageError,
    PackageSchema,
    PackageSpec,
    PackageTokenizer,
    Stage,
    StageModule,
    StageSpec,
)

if TYPE_CHECKING:
    import onnx

    from loam.driver.cache import CachedBuild

__all__ = [
    "Capacities",
    "Package",
    "PackageError",
    "PackageSpec",
    "Stage",
    "StageSpec",
    "genai_package",
    "open_package",
    "read_package",
]

POOLINGS = ("mean", "cls", "none")
PUBLISHES = ("score", "rows")
"""What a sequence stage's request publishes: a cross-encoder's score of a pair, or the encoder's rows."""
ACTIVATIONS = ("sigmoid", "none")
_KEYS = ("name", "role", "sources", "stages", "tokenizer", "control", "capacities", "description")
_STAGE_KEYS = ("graph", "source", "options", "packed")
"""The keys of every stage; a role's `PackageSchema` names those it reads besides."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")


def read_package(folder: str | Path) -> PackageSpec:
    """Read and check `folder/model.json`; refuse with a PackageError naming the file and the key.  An
    onnxruntime-genai folder without one is described by its `genai_config.json` (`genai_package`)."""
    folder = Path(folder)
    if is_genai_folder(folder):
        return genai_package(folder)
    manifest = folder / "model.json"
    where = str(manifest)
    if not folder.is_dir():
        raise PackageError(f"{folder}: not a package folder (no such directory)")
    try:
        raw = manifest.read_bytes()
    except OSError as err:
        raise PackageError(f"{where}: cannot read it ({err.strerror or err})") from None
    try:
        table = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise PackageError(f"{where}: not valid JSON ({err})") from None
    if not isinstance(table, dict):
        raise PackageError(f"{where}: must hold a JSON object, not {type(table).__name__}")

    def fail(key: str, problem: str) -> PackageError:
        return PackageError(f"{where}: key {key!r} {problem}")

    role = table.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise fail("role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    schema = ROLES[role].schema
    known = (*_KEYS, *schema.keys)
    unknown = [key for key in table if key not in known]
    if unknown:
        raise PackageError(f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(known)})")
    name = table.get("name", folder.resolve().name)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise fail("name", f"must be 1-128 letters, digits or ._:/- (starting with a letter or digit), got {name!r}")

    def path(key: str, value: object) -> Path:
        if not isinstance(value, str) or not value:
            raise fail(key, f"must be a path string, got {value!r}")
        resolved = folder / value
        if not resolved.is_file():
            raise fail(key, f"names {value!r}: no such file ({resolved})")
        return resolved

    sources_raw = table.get("sources", {})
    if not isinstance(sources_raw, dict):
        raise fail("sources", "must be an object of source name -> path or [paths]")
    sources: dict[str, tuple[Path, ...]] = {}
    for source, value in sources_raw.items():
        shards = value if isinstance(value, list) else [value]
        if not shards:
            raise fail(f"sources.{source}", "is an empty list: a source has at least one shard")
        sources[source] = tuple(path(f"sources.{source}", shard) for shard in shards)

    stages_raw = table.get("stages")
    if not isinstance(stages_raw, dict) or not stages_raw:
        raise fail("stages", "must be a non-empty object of stage name -> {graph, source, options, ...}")
    stages = {name_: _stage(name_, entry, schema, fail, path, sources, where) for name_, entry in stages_raw.items()}

    tokenizer_raw = table.get("tokenizer")
    tokenizer: Path | str | None
    if tokenizer_raw is None:
        tokenizer = None
    elif isinstance(tokenizer_raw, dict):
        source = tokenizer_raw.get("source")
        if set(tokenizer_raw) != {"source"} or source not in sources:
            raise fail(
                "tokenizer", f'must be a path, null, or {{"source": NAME}} naming a GGUF source, got {tokenizer_raw!r}'
            )
        if len(sources[source]) != 1 or sources[source][0].suffix != ".gguf":
            raise fail("tokenizer", f"names source {source!r}, which is not one GGUF file")
        tokenizer = source
    else:
        tokenizer = path("tokenizer", tokenizer_raw)

    control = path("control", table["control"]) if table.get("control") is not None else None
    capacities = _capacities(table.get("capacities", {}), fail)
    description = table.get("description", "")
    if not isinstance(description, str):
        raise fail("description", "must be a string")
    role_keys = {key: table[key] for key in schema.keys if key in table}
    return PackageSpec(
        folder, name, role, sources, stages, tokenizer, control, capacities, description, role_keys=role_keys
    )


def _stage(
    name: str,
    entry: object,
    schema: PackageSchema,
    fail: Callable[[str, str], PackageError],
    path: Callable[[str, object], Path],
    sources: Mapping[str, tuple[Path, ...]],
    where: str,
) -> StageSpec:
    key = f"stages.{name}"
    if not isinstance(entry, dict):
        raise fail(key, "must be an object with at least 'graph'")
    known = (*_STAGE_KEYS, *schema.stage_keys)
    unknown = [k for k in entry if k not in known]
    if unknown:
        raise fail(key, f"has unknown key {unknown[0]!r} (known keys: {', '.join(known)})")
    graph = path(f"{key}.graph", entry.get("graph"))
    source = entry.get("source")
    if source is not None and source not in sources:
        raise fail(f"{key}.source", f"names {source!r}, which is not one of the package's sources {sorted(sources)}")
    options_raw = entry.get("options", {})
    if isinstance(options_raw, str):  # a loam.toml beside the graph
        options = Options.from_toml(path(f"{key}.options", options_raw))
    elif isinstance(options_raw, dict):
        options = Options.from_mapping(options_raw, source=f"{where} ({key}.options)")
    else:
        raise fail(f"{key}.options", "must be an object of Loam build options (loam.toml's keys) or a .toml path")
    if options.checkpoints:
        raise fail(f"{key}.options", "may not name a checkpoint: the stage's 'source' supplies its weights")
    if source is not None:
        options = options.merged(checkpoints=sources[source])
    packed = entry.get("packed", True)
    if not isinstance(packed, bool):
        raise fail(f"{key}.packed", f"must be true or false, got {packed!r}")
    pooling = entry.get("pooling")
    if pooling is not None and pooling not in POOLINGS:
        raise fail(f"{key}.pooling", f"must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    normalize = entry.get("normalize", False)
    if not isinstance(normalize, bool):
        raise fail(f"{key}.normalize", f"must be true or false, got {normalize!r}")
    output = entry.get("output")
    if output is not None and (not isinstance(output, str) or not output):
        raise fail(f"{key}.output", f"must be an output name, got {output!r}")
    publish = entry.get("publish")
    if publish is not None and publish not in PUBLISHES:
        raise fail(f"{key}.publish", f"must be one of {', '.join(PUBLISHES)}, got {publish!r}")
    activation = entry.get("activation")
    if activation is not None and activation not in ACTIVATIONS:
        raise fail(f"{key}.activation", f"must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    if activation is not None and publish != "score":
        raise fail(f"{key}.activation", "applies to a score: the stage's 'publish' must be \"score\"")
    specialize = _specialize(entry["specialize"], f"{key}.specialize", fail) if "specialize" in entry else {}
    return StageSpec(
        name, graph, source, options, packed, pooling, normalize, output, publish, activation, specialize=specialize
    )


_AXIS = re.compile(r"(.+)\[(\d+)\]")


def _specialize(raw: object, key: str, fail: Callable[[str, str], PackageError]) -> dict[str, tuple[str, int]]:
    """A stage's `specialize`: `{"dims": {SYMBOL: "INPUT[AXIS]", ...}}`, each symbol a dim_param the stage's graph
    leaves free, fixed per request to the extent of the graph input's axis."""
    if not isinstance(raw, dict) or set(raw) != {"dims"} or not isinstance(raw["dims"], dict) or not raw["dims"]:
        raise fail(key, f'must be {{"dims": {{SYMBOL: "INPUT[AXIS]", ...}}}} with at least one symbol, got {raw!r}')
    dims: dict[str, tuple[str, int]] = {}
    for symbol, where in raw["dims"].items():
        found = _AXIS.fullmatch(where) if isinstance(where, str) else None
        if not symbol or found is None:
            raise fail(f"{key}.dims.{symbol}", f'must name a graph input\'s axis as "INPUT[AXIS]", got {where!r}')
        dims[symbol] = (found[1], int(found[2]))
    return dims


def _capacities(raw: object, fail: Callable[[str, str], PackageError]) -> Capacities:
    if not isinstance(raw, dict):
        raise fail("capacities", "must be an object of capacity name -> positive integer")
    known = {f.name for f in Capacities.__dataclass_fields__.values()}
    values: dict[str, int] = {}
    for key, value in raw.items():
        if key not in known:
            raise fail(f"capacities.{key}", f"is not a capacity (known: {', '.join(sorted(known))})")
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "kv_blocks" else 1):
            raise fail(f"capacities.{key}", f"must be a positive integer, got {value!r}")
        values[key] = value
    return Capacities(**values)


# -- registration ---------------------------------------------------------------------------------------------


def open_package(
    folder: str | Path, progress: Callable[[str], None] = lambda _message: None, *, spec: PackageSpec | None = None
) -> Package:
    """Register `folder`: read model.json, build every stage (through the build cache), open each source
    once and load every stage's weights.  Any failure is a LoamError naming the file, tensor and axis.
    `spec`, where given, is the folder's spec as read (and changed) by the caller."""
    spec = read_package(folder) if spec is None else spec
    stages = {stage_spec.name: build_stage(spec, stage_spec, progress) for stage_spec in spec.stages.values()}
    load_weights(spec, stages, progress)
    for stage in stages.values():
        _ready(spec, stage, progress)
    tokenizer = _tokenizer(spec)
    control = _control(spec)
    return Package(spec, stages, tokenizer, control, functools.partial(specialized_stage, spec))


def build_stage(
    spec: PackageSpec, stage_spec: StageSpec, progress: Callable[[str], None], dims: Mapping[str, int] | None = None
) -> Stage:
    """Build `stage_spec` through the build cache (with `dims` added to its options, where given) and import its
    module; its weights are not loaded yet."""
    from loam.driver import cache
    from loam.driver.pipeline import import_source

    if dims:
        stage_spec = dataclasses.replace(stage_spec, options=stage_spec.options.merged(dims=dims))
    progress(f"{spec.name}: building stage {stage_spec.name} from {stage_spec.graph.name}")
    flags: dict[str, object] = {"backend": "numpy", "pooling": stage_spec.pooling,
                                "normalize": stage_spec.normalize, "output": stage_spec.output}  # fmt: skip
    if stage_spec.activation not in (None, "none"):  # absent from the key of every stage without one
        flags["activation"] = stage_spec.activation
    if stage_spec.draft:  # the layout is the draft of the graph and its genai config: both are the key
        from loam.driver.genai import config_digest

        flags.update(draft=True, genai_config=config_digest(stage_spec.graph))
    built, hit = cache.cached(
        stage_spec.graph,
        stage_spec.options,
        flags,
        functools.partial(_build_stage, stage_spec, progress),
        progress,
    )  # fmt: skip
    name = f"loam_serve_{_identifier(spec.name)}_{_identifier(stage_spec.name)}"
    if dims:
        name += "".join(f"_{_identifier(symbol)}{value}" for symbol, value in sorted(dims.items()))
    # The module Loam's numpy backend printed: it defines every name a StageModule declares.
    module = cast(StageModule, import_source(built.source, name, built.weights))
    return Stage(stage_spec, module, None, hit)


def specialized_stage(spec: PackageSpec, name: str, dims: Mapping[str, int]) -> Stage:
    """Stage `name` built for `dims` (`StageSpec.specialize`), its weights loaded and checked, ready to run."""
    stage = build_stage(spec, spec.stages[name], lambda _message: None, dims)
    load_weights(spec, {name: stage}, lambda _message: None)
    _ready(spec, stage, lambda _message: None)
    return stage


def _ready(spec: PackageSpec, stage: Stage, progress: Callable[[str], None]) -> None:
    """Compile a built stage's packed products and read its inputs and outputs."""
    if stage.spec.packed and hasattr(stage.module, "set_compiled"):
        progress(f"{spec.name}: compiling stage {stage.spec.name}'s packed products (numba, where installed)")
        stage.module.set_compiled(True)  # before the first request, not in it
    stage.inputs = tuple(getattr(stage.module, "INPUTS", ()))
    outputs = getattr(stage.module, "OUTPUTS", None)
    stage.outputs = tuple(outputs) if outputs else ()


def load_weights(spec: PackageSpec, stages: Mapping[str, Stage], progress: Callable[[str], None]) -> None:
    """Load every stage's weights, checking each tensor's header against its graph: at registration, and again
    when an inactive model is reactivated (`loam.serve.residency`).  A failure is a PackageError naming the
    stage, the checkpoint, the tensor and the axis."""
    # Each source is opened once; every stage reading it loads its weights from the same map.
    opened: dict[str, object] = {}
    for stage in stages.values():
        source = stage.spec.source
        if source is not None and source not in opened:
            paths = spec.sources[source]
            target: object = [str(p) for p in paths] if len(paths) > 1 else str(paths[0])
            opened[source] = stage.module._mapped(target)  # the module runtime's own read-only map
        progress(f"{spec.name}: loading the weights of stage {stage.spec.name}")
        external: tuple[object, ...] = getattr(stage.module.Weights, "_EXTERNAL", ())  # ONNX external data
        try:
            if source is None and external:
                # The graph's ONNX external data, in the files beside it (`model.onnx.data`).
                stage.weights = stage.module.Weights.load_file(str(stage.spec.graph.parent), packed=stage.spec.packed)
            elif source is None:
                stage.weights = stage.module.Weights.embedded()
            else:
                stage.weights = stage.module.Weights.load(opened[source], packed=stage.spec.packed)
        except AttributeError:
            raise PackageError(
                f"{spec.folder / 'model.json'}: stage {stage.spec.name!r} has no source, and its graph carries "
                "no weights"
            ) from None
        except ValueError as err:  # the module's LoadError names the tensor and the axis
            shown = ", ".join(str(p) for p in spec.sources[source]) if source else str(stage.spec.graph.parent)
            raise PackageError(f"stage {stage.spec.name!r}, checkpoint {shown}: {err}") from None


def _build_stage(stage: StageSpec, progress: Callable[[str], None]) -> CachedBuild:
    from loam.driver import cache
    from loam.driver.pipeline import build

    model: Path | onnx.ModelProto = stage.graph
    options = stage.options
    activated = stage.activation not in (None, "none")
    if stage.pooling is not None or stage.output is not None or activated:
        from loam.serve.pooling import pooled_model

        key = f"stages.{stage.name}"
        output = stage.output
        if options.outputs is not None:
            # The options' `outputs` cut the graph before the package pools one of them (`output`, default the
            # first); the pooled graph has that one output already, so the build cuts nothing more.
            output = output or options.outputs[0]
            if output not in options.outputs:
                raise PackageError(
                    f"{stage.graph}: key '{key}.output' names {output!r}, which the stage's options cut away "
                    f"(outputs: {', '.join(options.outputs)})"
                )
            options = dataclasses.replace(options, outputs=None)
        model = pooled_model(stage.graph, stage.pooling or "none", stage.normalize, output, key=f"{key}.output")
        if activated:
            from loam.serve.activation import activated_model

            model = activated_model(model, stage.activation or "none", stage.graph)
    if stage.draft:
        from loam.driver.draft import draft_layout

        progress(f"drafting the layout of {stage.graph}")
        options = draft_layout(stage.graph, options=options).options(options)
    result = build(model, options=options, progress=progress)
    return cache.CachedBuild(result.source, result.report, tuple(result.notes), result.weights)


def _tokenizer(spec: PackageSpec) -> PackageTokenizer | None:
    from loam.text.tokenizer import Tokenizer

    if spec.tokenizer is None:
        return None
    if isinstance(spec.tokenizer, Path):
        return Tokenizer.from_file(spec.tokenizer)
    return Tokenizer.from_gguf(spec.sources[spec.tokenizer][0])


def _control(spec: PackageSpec) -> Control | None:
    if spec.control is None:
        return None
    name = f"loam_serve_control_{_identifier(spec.name)}"
    loader = importlib.util.spec_from_file_location(name, spec.control)
    if loader is None or loader.loader is None:
        raise PackageError(f"{spec.folder / 'model.json'}: key 'control' names {spec.control}, not a Python file")
    module = importlib.util.module_from_spec(loader)
    sys.modules[name] = module
    try:
        loader.loader.exec_module(module)
    except Exception as err:  # the operator's control code: its failure is the package's, reported as such
        raise PackageError(f"{spec.control}: the control module failed to load: {type(err).__name__}: {err}") from None
    control = getattr(module, "CONTROL", None)
    if control is None:
        raise PackageError(f"{spec.control}: defines no CONTROL object")
    return control


def _identifier(name: str) -> str:
    return re.sub(r"\W", "_", name)


# -- onnxruntime-genai folders ---------------------------------------------------------------------------

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
