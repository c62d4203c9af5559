"""`Options`: the one typed set of build options, filled by the Python API, the CLI and a TOML file.

Why one object: `loam build` flags, an `--options loam.toml` file and `loam.build(..., options=...)`
must mean exactly the same thing, so all three produce an `Options` and the pipeline reads nothing
else.  This module checks the *form* of the options (types, unknown keys); whether the names it
mentions exist in the graph (a `dims` entry, an output name, an axis pattern that reaches nothing)
is checked by the pipeline, which has the graph.

The TOML form (paths are relative to the TOML file)::

    architecture = "bert"            # optional, a built-in architecture table
    inline_weights = false
    int8_activations = true          # packed products multiply int8 activations (default: as the model asks)
    outputs = ["logits"]             # cut the graph at these outputs
    checkpoint = "model.safetensors" # or a list of shards, a .gguf, or a model.safetensors.index.json
    grad = true                      # forward also returns the weights' gradients (`differentiate`)
    grad_of = ["fc1.weight"]         # with grad: only these weights (or float inputs); default: every float weight
    [dims]
    N = 4                            # fix a dim_param, or a name inside a spelled one (`N` in `N + 1`)
    [values]
    sr = 16000                       # fix a graph input's value: forward no longer takes it
    axes = [0, 2]                    # an integer, a float, a boolean or a list of integers
    [interface]
    attention_mask = ["batch_size", "attention_length"]   # re-declare a graph input's or output's dims
    [[layout]]
    pattern = "encoder.*.weight"     # glob over tensor names
    axes = ["Hidden", "(C H W)"]     # one name per axis; a merged axis names its parts
    graph = "main"                   # optional: only in this graph
    [device_limits]                  # the WGSL target's limits, where it offers more than WebGPU's defaults
    maxStorageBuffersPerShaderStage = 10
    [checkpoint_names]               # checkpoint tensor name -> graph initializer name
    "blk.*.attn_q.weight" = "model.layers.*.self_attn.q_proj.weight"
    "token_embd.weight" = "model.embed_tokens.weight"

`[checkpoint_names]` renames checkpoint tensors (a GGUF's `blk.0.attn_q.weight`, a published
checkpoint without the exporter's `transformer.` prefix) to the graph's initializer names.  Each key
is a glob over checkpoint tensor names in which `*` matches a run of characters other than `.` (so
one `*` never spans two path segments) and every other character matches itself; its value is the
graph name, whose `*`s take what the key's `*`s matched, in order (the two must have as many).  The
first entry, in file order, whose key matches the whole name wins; a name no entry matches is its own
graph name.  With `architecture` set, the architecture's own rules follow these.  Two checkpoint
tensors that become one graph name are refused.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from loam.core.errors import LoamError, OptionsError
from loam.dialects.build_contract import Value

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

    from loam.core.layout import LayoutRule

__all__ = ["INT8_ACTIVATIONS_HELP", "Options", "Value", "checked_value"]

INT8_ACTIVATIONS_HELP = (
    "products over packed weights (MatMulNBits, a GGUF's Q4_0/Q4_1/Q8_0) round their activations to int8 per "
    "block and multiply integers, as onnxruntime (accuracy_level 4) and llama.cpp do (--no-int8-activations: "
    "float32 products); default: as the model asks, on for MatMulNBits at accuracy_level 4 without g_idx"
)
"""What `loam build --help` says of `--int8-activations` (the `int8_activations` option)."""

_TOP_LEVEL_KEYS = (
    "architecture",
    "inline_weights",
    "outputs",
    "checkpoint",
    "checkpoint_names",
    "grad",
    "grad_of",
    "dims",
    "values",
    "interface",
    "layout",
    "device_limits",
    "int8_activations",
)
_LAYOUT_KEYS = ("pattern", "axes", "graph")


def _type_name(value: object) -> str:
    """The TOML-ish name of a parsed value's type, for error messages."""
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array", dict: "a table"}
    return names.get(type(value), type(value).__name__)


def _check_dim(name: object, value: object, where: str) -> None:
    if not isinstance(name, str) or not name:
        raise OptionsError(f"{where}: a dim name must be a non-empty string, got {name!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OptionsError(f"{where}: dim {name!r} must be a non-negative integer, got {value!r}")


_INT64 = (-(2**63), 2**63 - 1)


def checked_value(name: object, value: object, where: str) -> Value:
    """One `values` entry checked: a non-empty input name and a boolean, an int64, a finite float, or a
    list of int64s (given as a list or a tuple), the list as a tuple.  Whether the input takes it is the
    graph's to say (apply-options)."""
    if not isinstance(name, str) or not name:
        raise OptionsError(f"{where}: an input name must be a non-empty string, got {name!r}")
    what = f"{where}: value of '{name}'"
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise OptionsError(f"{what} is {value}, outside int64")
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise OptionsError(f"{what} is {value}; give a finite number")
        return value
    if isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or not _INT64[0] <= item <= _INT64[1]:
                raise OptionsError(f"{what} must be a list of int64 integers, got {_type_name(item)} ({item!r})")
        return tuple(value)
    raise OptionsError(
        f"{what} must be a boolean, an integer, a float or a list of integers, got {_type_name(value)} ({value!r})"
    )


def _check_names(values: object, what: str) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise OptionsError(f"{what} must be a list of strings, got {values!r}")
    names = tuple(values)
    for name in names:
        if not isinstance(name, str) or not name:
            raise OptionsError(f"{what} must be a list of non-empty strings, got {name!r}")
    return names


@dataclass(frozen=True)
class Options:
    """What to build: everything that is not the model or the checkpoint bytes.

    - `architecture`: the name of a built-in architecture table that names axes, or None.
    - `inline_weights`: embed the weights in the generated module's source (`Weights.embedded()`);
      otherwise the initializers a model file carries go in a safetensors file beside the module once
      they pass `INLINE_LIMIT` bytes (`loam.backends.module_text`).
    - `outputs`: cut the graph at these tensor names (None: the graph's own outputs).
    - `dims`: fix a dim_param (a symbolic input extent) to a number, or a name inside a spelled
      one (`past` in `past + 1`); a spelling becomes a number once every name it reads is fixed.
    - `values`: graph input name -> the value a deployment fixes it to (a boolean, an integer, a float
      or a list of integers; `Value`): the input leaves `forward`'s signature and stage 0 folds what
      it decides (an If over a sample rate keeps only the branch it takes; a Reduce's `axes` input
      becomes known).
    - `interface`: graph input or output name -> the dims to declare it with instead of the model's
      own (a dim_param name, a spelling such as `past + 1`, or a number per axis; as many as it has
      axes), for an exporter that declared one wrongly: optimum's merged decoder gives its
      `attention_mask` the new tokens' `sequence_length` although the with-past branch feeds it
      past + new columns.
    - `layout`: ordered `loam.core.layout.LayoutRule`s (glob pattern -> axis names); the first rule
      that matches a tensor names its axes.
    - `checkpoints`: checkpoint files (several for a sharded checkpoint): safetensors, GGUF, or a
      Hugging Face `*.index.json` naming safetensors shards beside it.
    - `checkpoint_names`: ordered (glob over checkpoint tensor names, graph name template) rules,
      given as a mapping or as pairs; see the module docstring.
    - `grad`: None (no gradients), or the weights whose gradients forward also returns (`differentiate`;
      empty: every float weight).  TOML says `grad = true` and `grad_of = [...]`.
    - `device_limits`: WebGPU limit name -> value, for a WGSL module whose target device offers more
      than WebGPU's defaults (`loam.backends.wgsl_limits`; the numpy backend has no use for them).
    - `int8_activations`: whether products over packed weights (MatMulNBits, a GGUF's Q4_0, Q4_1 and
      Q8_0 blocks) round their activations to int8 per block and multiply integers, as onnxruntime's
      accuracy_level 4 and llama.cpp do (`loam/runtime/kernels/int8_products.py`); None (absent): as the
      model asks, on for a MatMulNBits at accuracy_level 4 without g_idx, off for the rest.

    Lists given through the Python API are normalized to tuples and `dims` to a read-only mapping,
    so an `Options` never changes after it is made.
    """

    architecture: str | None = None
    inline_weights: bool = False
    outputs: tuple[str, ...] | None = None
    dims: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    values: Mapping[str, Value] = field(default_factory=lambda: MappingProxyType({}))
    interface: Mapping[str, tuple[int | str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    layout: tuple[LayoutRule, ...] = ()
    checkpoints: tuple[Path, ...] = ()
    checkpoint_names: tuple[tuple[str, str], ...] = ()
    grad: tuple[str, ...] | None = None
    device_limits: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    int8_activations: bool | None = None

    def __post_init__(self) -> None:
        if self.architecture is not None and (not isinstance(self.architecture, str) or not self.architecture):
            raise OptionsError(f"options: 'architecture' must be a non-empty string, got {self.architecture!r}")
        if not isinstance(self.inline_weights, bool):
            raise OptionsError(f"options: 'inline_weights' must be True or False, got {self.inline_weights!r}")
        if self.int8_activations is not None and not isinstance(self.int8_activations, bool):
            raise OptionsError(
                f"options: 'int8_activations' must be True, False or None, got {self.int8_activations!r}"
            )
        if self.outputs is not None:
            outputs = _check_names(self.outputs, "options: 'outputs'")
            if not outputs:
                raise OptionsError(
                    "options: 'outputs' is empty; give at least one output name "
                    "or leave it unset to keep the graph's outputs"
                )
            object.__setattr__(self, "outputs", outputs)
        if not isinstance(self.dims, Mapping):
            raise OptionsError(f"options: 'dims' must be a mapping of name to integer, got {self.dims!r}")
        for name, value in self.dims.items():
            _check_dim(name, value, "options: 'dims'")
        object.__setattr__(self, "dims", MappingProxyType(dict(self.dims)))
        if not isinstance(self.values, Mapping):
            raise OptionsError(f"options: 'values' must be a mapping of input name to value, got {self.values!r}")
        object.__setattr__(
            self,
            "values",
            MappingProxyType({k: checked_value(k, v, "options: 'values'") for k, v in self.values.items()}),
        )
        if not isinstance(self.interface, Mapping):
            raise OptionsError(f"options: 'interface' must map tensor names to lists of dims, got {self.interface!r}")
        object.__setattr__(
            self,
            "interface",
            MappingProxyType({k: _interface_dims(k, v, "options: 'interface'") for k, v in self.interface.items()}),
        )
        if isinstance(self.layout, str | bytes) or not isinstance(self.layout, Iterable):
            raise OptionsError(f"options: 'layout' must be a sequence of LayoutRule, got {self.layout!r}")
        object.__setattr__(self, "layout", tuple(self.layout))
        if isinstance(self.checkpoints, str | Path) or not isinstance(self.checkpoints, Iterable):
            raise OptionsError(
                f"options: 'checkpoints' must be a sequence of paths, "
                f"got {self.checkpoints!r} (write [path] for one file)"
            )
        checkpoints: list[Path] = []
        for item in self.checkpoints:
            if not isinstance(item, str | Path) or str(item) == "":
                raise OptionsError(f"options: 'checkpoints' entries must be paths, got {item!r}")
            checkpoints.append(Path(item))
        object.__setattr__(self, "checkpoints", tuple(checkpoints))
        object.__setattr__(self, "checkpoint_names", _name_rules(self.checkpoint_names, "options: 'checkpoint_names'"))
        if self.grad is not None:
            object.__setattr__(self, "grad", _check_names(self.grad, "options: 'grad'"))
        if not isinstance(self.device_limits, Mapping):
            raise OptionsError(
                f"options: 'device_limits' must map WebGPU limit names to integers, got {self.device_limits!r}"
            )
        from loam.backends.wgsl_limits import DeviceLimits

        DeviceLimits.from_mapping(self.device_limits, where="options: 'device_limits'")  # refused here if malformed
        object.__setattr__(self, "device_limits", MappingProxyType(dict(self.device_limits)))

    # -- the TOML file -------------------------------------------------------------------------

    @classmethod
    def from_toml(cls, path: str | Path) -> Options:
        """Read options from a TOML file; relative checkpoint paths are relative to the file.

        Raises `OptionsError` naming the file (and the key, and the `[[layout]]` entry's index
        counting from 1) for a missing file, a syntax error, an unknown key or a wrong type.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise OptionsError(f"{path}: no such options file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise OptionsError(f"{path}: cannot read the options file: {exc}") from None
        try:
            table = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise OptionsError(f"{path}: not valid TOML: {exc}") from None
        return cls.from_mapping(table, source=path)

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any], *, source: str | Path = "<options>") -> Options:
        """Options from an already parsed TOML table; `source` names it in errors (and, when it
        is a file path, relative checkpoint paths are taken relative to its folder)."""
        where = str(source)
        base = Path(source).parent if isinstance(source, Path) else Path(".")
        unknown = [key for key in table if key not in _TOP_LEVEL_KEYS]
        if unknown:
            raise OptionsError(f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(_TOP_LEVEL_KEYS)})")

        def expect(key: str, value: object, kind: type | tuple[type, ...], what: str) -> None:
            if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
                raise OptionsError(f"{where}: key {key!r} must be {what}, got {_type_name(value)} ({value!r})")

        kwargs: dict[str, Any] = {}
        if "architecture" in table:
            expect("architecture", table["architecture"], str, "a string")
            kwargs["architecture"] = table["architecture"]
        if "inline_weights" in table:
            expect("inline_weights", table["inline_weights"], bool, "true or false")
            kwargs["inline_weights"] = table["inline_weights"]
        if "int8_activations" in table:
            expect("int8_activations", table["int8_activations"], bool, "true or false")
            kwargs["int8_activations"] = table["int8_activations"]
        if "outputs" in table:
            outputs = table["outputs"]
            expect("outputs", outputs, list, "an array of strings")
            for item in outputs:
                expect("outputs", item, str, "an array of strings")
            if not outputs:
                raise OptionsError(f"{where}: key 'outputs' is empty; list at least one output name or remove the key")
            kwargs["outputs"] = tuple(outputs)
        if "checkpoint" in table:
            raw = table["checkpoint"]
            items = raw if isinstance(raw, list) else [raw]
            for item in items:
                expect("checkpoint", item, str, "a path string or an array of path strings")
                if not item:
                    raise OptionsError(f"{where}: key 'checkpoint' has an empty path")
            kwargs["checkpoints"] = tuple(base / item for item in items)
        if "checkpoint_names" in table:
            names = table["checkpoint_names"]
            expect("checkpoint_names", names, dict, 'a table of "checkpoint glob" = "graph name"')
            kwargs["checkpoint_names"] = _name_rules(names, f"{where}: [checkpoint_names]")
        if "grad" in table:
            expect("grad", table["grad"], bool, "true or false")
        if "grad_of" in table:
            grad_of = table["grad_of"]
            expect("grad_of", grad_of, list, "an array of weight names")
            for item in grad_of:
                expect("grad_of", item, str, "an array of weight names")
            if not table.get("grad"):
                raise OptionsError(
                    f"{where}: key 'grad_of' names the weights 'grad' differentiates: set grad = true too"
                )
        if table.get("grad"):
            kwargs["grad"] = tuple(table.get("grad_of", ()))
        if "dims" in table:
            dims = table["dims"]
            expect("dims", dims, dict, "a table of name = integer")
            for name, value in dims.items():
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise OptionsError(
                        f"{where}: key 'dims.{name}' must be a non-negative "
                        f"integer, got {_type_name(value)} ({value!r})"
                    )
            kwargs["dims"] = dims
        if "values" in table:
            values = table["values"]
            expect("values", values, dict, "a table of input name = value")
            kwargs["values"] = {k: checked_value(k, v, f"{where}: [values]") for k, v in values.items()}
        if "interface" in table:
            interface = table["interface"]
            expect("interface", interface, dict, 'a table of tensor name = ["dim", ...]')
            kwargs["interface"] = {k: _interface_dims(k, v, f"{where}: [interface]") for k, v in interface.items()}
        if "layout" in table:
            entries = table["layout"]
            if not isinstance(entries, list):
                raise OptionsError(
                    f"{where}: key 'layout' must be an array of tables, written [[layout]], got {_type_name(entries)}"
                )
            kwargs["layout"] = tuple(_layout_rule(entry, index, where) for index, entry in enumerate(entries, start=1))
        if "device_limits" in table:
            expect("device_limits", table["device_limits"], dict, "a table of WebGPU limit name = integer")
            from loam.backends.wgsl_limits import DeviceLimits

            DeviceLimits.from_mapping(table["device_limits"], where=f"{where}: [device_limits]")
            kwargs["device_limits"] = table["device_limits"]
        return cls(**kwargs)

    # -- combining a file with flags -----------------------------------------------------------

    def merged(
        self,
        *,
        architecture: str | None = None,
        inline_weights: bool | None = None,
        outputs: Iterable[str] | None = None,
        dims: Mapping[str, int] | None = None,
        values: Mapping[str, Value] | None = None,
        interface: Mapping[str, Iterable[int | str]] | None = None,
        layout: Iterable[LayoutRule] = (),
        checkpoints: Iterable[str | Path] = (),
        grad: Iterable[str] | None = None,
        device_limits: Mapping[str, int] | None = None,
        int8_activations: bool | None = None,
    ) -> Options:
        """These options with command-line flags applied on top (None / empty: flag not given).

        `architecture`, `inline_weights` and `outputs` replace the file's value; `dims` entries
        (and `values`) replace the file's entry of the same name and add the others; `layout` rules from flags
        are consulted *before* the file's rules; `checkpoints` from flags replace the file's list
        (name all shards on the command line when overriding a sharded checkpoint); `grad` (the
        weights to differentiate, empty for every float weight) replaces the file's; `device_limits`
        entries replace the file's entry of the same name; `int8_activations` replaces the file's.
        """
        changes: dict[str, Any] = {}
        if architecture is not None:
            changes["architecture"] = architecture
        if inline_weights is not None:
            changes["inline_weights"] = inline_weights
        if outputs is not None:
            changes["outputs"] = tuple(outputs)
        if dims:
            changes["dims"] = {**self.dims, **dims}
        if values:
            changes["values"] = {**self.values, **values}
        if interface:
            changes["interface"] = {**self.interface, **{k: tuple(v) for k, v in interface.items()}}
        flag_rules = tuple(layout)
        if flag_rules:
            changes["layout"] = flag_rules + self.layout
        flag_checkpoints = tuple(checkpoints)
        if flag_checkpoints:
            changes["checkpoints"] = flag_checkpoints
        if grad is not None:
            changes["grad"] = tuple(grad)
        if device_limits:
            changes["device_limits"] = {**self.device_limits, **device_limits}
        if int8_activations is not None:
            changes["int8_activations"] = int8_activations
        return dataclasses.replace(self, **changes)


def _interface_dims(name: object, dims: object, where: str) -> tuple[int | str, ...]:
    """One `interface` entry checked: a tensor name and a list of dims, each a non-empty dim_param
    (or spelling) or a non-negative integer."""
    if not isinstance(name, str) or not name:
        raise OptionsError(f"{where}: a tensor name must be a non-empty string, got {name!r}")
    if isinstance(dims, str | bytes) or not isinstance(dims, Iterable):
        raise OptionsError(f"{where}: '{name}' must be a list of dims (names or integers), got {dims!r}")
    checked: list[int | str] = []
    for i, d in enumerate(dims):
        if isinstance(d, bool) or not isinstance(d, int | str) or (isinstance(d, int) and d < 0) or d == "":
            raise OptionsError(
                f"{where}: '{name}' axis {i} must be a dim_param name or a non-negative integer, got {d!r}"
            )
        checked.append(d)
    return tuple(checked)


def _name_rules(rules: object, where: str) -> tuple[tuple[str, str], ...]:
    """`[checkpoint_names]` as ordered (pattern, template) pairs, each checked: non-empty strings,
    no `**`, and as many `*` in the template as in the pattern."""
    if isinstance(rules, Mapping):
        pairs = list(rules.items())
    elif isinstance(rules, str | bytes) or not isinstance(rules, Iterable):
        raise OptionsError(f"{where} must map checkpoint globs to graph names, got {rules!r}")
    else:
        pairs = list(rules)
    checked: list[tuple[str, str]] = []
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise OptionsError(f"{where}: each rule is a (checkpoint glob, graph name) pair, got {pair!r}")
        pattern, template = pair
        if not isinstance(pattern, str) or not pattern or not isinstance(template, str) or not template:
            raise OptionsError(f"{where}: {pattern!r} = {template!r}: both must be non-empty strings")
        if "**" in pattern:
            raise OptionsError(f"{where}: {pattern!r}: '**' is not a glob here; one '*' matches one run without '.'")
        if template.count("*") != pattern.count("*"):
            raise OptionsError(
                f"{where}: {pattern!r} = {template!r}: the graph name has {template.count('*')} '*', "
                f"the glob {pattern.count('*')}; each '*' of the name takes what one '*' of the glob matched"
            )
        checked.append((pattern, template))
    return tuple(checked)


def _layout_rule(entry: object, index: int, where: str) -> LayoutRule:
    """One `[[layout]]` table as a `LayoutRule`; errors name the file and the entry's index."""
    from loam.core.layout import LayoutRule  # lazily: loam.layout may import the dialects

    at = f"{where}: [[layout]] entry {index}"
    if not isinstance(entry, dict):
        raise OptionsError(f"{at}: must be a table with 'pattern' and 'axes', got {_type_name(entry)}")
    unknown = [key for key in entry if key not in _LAYOUT_KEYS]
    if unknown:
        raise OptionsError(f"{at}: unknown key {unknown[0]!r} (known keys: {', '.join(_LAYOUT_KEYS)})")
    for key in ("pattern", "axes"):
        if key not in entry:
            raise OptionsError(f"{at}: missing key {key!r}")
    pattern, axes, graph = entry["pattern"], entry["axes"], entry.get("graph")
    if not isinstance(pattern, str) or not pattern:
        raise OptionsError(f"{at}: key 'pattern' must be a non-empty string, got {pattern!r}")
    if not isinstance(axes, list) or not all(isinstance(a, str) and a for a in axes):
        raise OptionsError(
            f"{at}: key 'axes' must be an array of axis names (a merged axis is written \"(C H W)\"), got {axes!r}"
        )
    if graph is not None and (not isinstance(graph, str) or not graph):
        raise OptionsError(f"{at}: key 'graph' must be a non-empty string, got {graph!r}")
    try:
        return LayoutRule(pattern, tuple(axes), graph=graph)
    except LoamError as exc:
        raise OptionsError(f"{at}: {exc}") from None


def attach_options(module: ModuleOp, options: Options) -> None:
    """Record `options` on the top-level module, where the passes read them."""
    from loam.dialects import build_contract as contract

    if options.dims:
        contract.DIMS.set(module, dict(options.dims))
    if options.values:
        contract.VALUES.set(module, dict(options.values))
    if options.interface:
        contract.INTERFACE.set(module, {name: list(dims) for name, dims in options.interface.items()})
    if options.outputs is not None:
        contract.OUTPUTS.set(module, options.outputs)
    if options.layout:
        contract.LAYOUT.set(module, options.layout)
    if options.inline_weights:
        contract.INLINE_WEIGHTS.set(module, True)
    if options.int8_activations is not None:
        contract.INT8_ACTIVATIONS.set(module, options.int8_activations)
