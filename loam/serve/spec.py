"""What a serving package is, once read and once registered, and the seams a role's modules see.

`PackageSpec` is a checked `model.json` (`loam.serve.package` reads it): its stages (`StageSpec`),
sources, tokenizer, control and `Capacities`.  `Package` is the registered package: each stage built
and imported (`Stage`, whose module is a `StageModule`), its weights loaded, its tokenizer and its own
control, if it names one.  Each role reads the parts of `model.json` its `PackageSchema` allows.

The Protocols here are the seams between the server and what it runs: `StageModule` is what the
server calls on a generated module; `PackageTokenizer` (and the `TextStream` it decodes with) is what
the controls and workers call on a tokenizer; `Control` is what every role's control provides, each
role's own contract extending it (`loam.serve.finite.FiniteControl`, `loam.serve.text.GenerationControl`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from loam.core.errors import LoamError, ShapeError
from loam.driver.options import Options
from loam.text.decoder import DecoderModule, SteppedState


class PackageError(LoamError):
    """A package folder or its `model.json` is malformed, names a missing file, or disagrees with its graphs."""


@dataclass(frozen=True)
class PackageSchema:
    """What a role reads of `model.json` beyond the keys every package has: the stage keys it takes besides
    `graph`, `source`, `options` and `packed` (an embedding stage's `pooling`, `normalize` and `output`, a
    sequence stage's `publish`, `activation` and `output`), and the top-level keys of its own (`keys`: a
    decision package's `framing`, `answers` and `scores`), which `PackageSpec.role_keys` holds as written
    for the role's control to check."""

    stage_keys: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Capacities:
    """What one model may hold and do at once.

    - `batch_units`: units (tokens) one cohort may carry: the sum of its prompt spans and decode steps.
    - `prefill_units`: prompt tokens one cohort may read while it also carries decode steps (text; 0:
      `batch_units`).  A long prompt is then read in chunks this size beside the running streams, so
      their time between tokens stays near a decode step's; a cohort without decode steps reads up to
      `batch_units` of prompt, as no stream is waiting.
    - `resident_requests`: requests holding rows of state at once (a cohort's rows are at most this many).
    - `context_tokens`: tokens one request may reach: prompt plus generated, or one embedding input.
    - `output_bytes`: bytes of output a request may have waiting for its reader; a reader that falls
      this far behind makes only its own request wait.
    - `block_tokens`: tokens per KV block (text); `kv_blocks`: the pool's blocks (default: enough for
      every resident request at full context).
    - `specialization_cache`: builds of a stage specialized to a request's dims (`StageSpec.specialize`)
      the model keeps at once, least recently used evicted first (`loam.serve.specialize`).
    """

    batch_units: int = 256
    prefill_units: int = 0
    resident_requests: int = 16
    context_tokens: int = 2048
    output_bytes: int = 1 << 16
    block_tokens: int = 16
    kv_blocks: int = 0
    specialization_cache: int = 4

    def blocks(self) -> int:
        """The KV pool's block count."""
        if self.kv_blocks:
            return self.kv_blocks
        return self.resident_requests * math.ceil(self.context_tokens / self.block_tokens) + self.resident_requests


@dataclass(frozen=True)
class StageSpec:
    """One numerical stage as `model.json` declares it."""

    name: str
    graph: Path
    source: str | None
    options: Options
    packed: bool = True
    pooling: str | None = None  # embedding stages: appended to the graph (see loam.serve.pooling)
    normalize: bool = False
    output: str | None = None
    publish: str | None = None  # sequence stages: what each request publishes (see loam.serve.sequence)
    activation: str | None = None  # a score's activation, appended to the graph (loam.serve.activation)
    draft: bool = False  # the layout is drafted at build time (an onnxruntime-genai folder's decoder)
    specialize: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    """Symbol -> (graph input, axis): the dim_params a request's input fixes in a build made for it (its `dims`)."""


@dataclass(frozen=True)
class PackageSpec:
    """A checked `model.json`: every path resolved and seen to exist, every value of the right kind."""

    folder: Path
    name: str
    role: str
    sources: Mapping[str, tuple[Path, ...]]
    stages: Mapping[str, StageSpec]
    tokenizer: Path | str | None  # a tokenizer.json path, or the name of a GGUF source
    control: Path | None
    capacities: Capacities
    description: str = ""
    sampling: Mapping[str, float] = field(default_factory=dict)
    """Defaults of the requests' `temperature` and `top_p` (absent: the API's, 1.0 and 1.0)."""
    role_keys: Mapping[str, object] = field(default_factory=dict)
    """The values of the role's own top-level keys (`PackageSchema.keys`) that `model.json` gives, as written."""


# -- the seams ---------------------------------------------------------------------------------------------------


class ModuleWeights(Protocol):
    """A generated module's `Weights` class, as registration loads it: from an opened checkpoint, from the
    files beside the graph (its ONNX external data), or from the weights the module carries."""

    def load(self, data: object, packed: bool = True) -> object: ...
    def load_file(self, path: object, packed: bool = True) -> object: ...
    def embedded(self) -> object: ...


class StageModule(DecoderModule, Protocol):
    """What the server calls on a stage's module: a decoder's names (`forward`, and `forward_in_place` and
    `DecodeState` where the module keeps its pasts in place), its `ShapeError`, its `Weights`, the runtime's
    read-only map of a checkpoint (`_mapped`) and, where the module has packed products, `set_compiled`."""

    ShapeError: type[Exception]
    Weights: ModuleWeights

    def _mapped(self, path: object) -> object: ...
    def set_compiled(self, enabled: bool) -> bool: ...


class TextStream(Protocol):
    """Text for token ids that arrive one at a time (`loam.text.tokenizer.DecodeStream`)."""

    def step(self, token_id: int) -> str: ...
    def finish(self) -> str: ...


class PackageTokenizer(Protocol):
    """What the controls and workers call on a package's tokenizer (`loam.text.tokenizer.Tokenizer`)."""

    @property
    def eos_id(self) -> int | None: ...
    @property
    def chat_template(self) -> str | None: ...

    def encode(self, text: str, add_special_tokens: bool = True, special_token_matching: bool = True) -> list[int]: ...
    def encode_chat(self, messages: Sequence[Mapping[str, object]]) -> list[int]: ...
    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str: ...
    def decode_stream(self, skip_special_tokens: bool = False) -> TextStream: ...


@runtime_checkable
class Control(Protocol):
    """What every role's control provides: `prepare` settles, at registration, the state the control's other
    calls are given (each role's contract names those calls)."""

    def prepare(self, package: Package) -> object: ...


def refuse_control(package: Package, contract: type) -> PackageError:
    """The refusal of a package's own CONTROL that lacks a call of `contract`, its role's control Protocol."""
    wanted = sorted(
        {name for klass in contract.__mro__ if klass.__module__ != "typing" and klass is not object
         for name, value in vars(klass).items() if callable(value) and not name.startswith("_")}
    )  # fmt: skip
    missing = [name for name in wanted if not callable(getattr(package.control, name, None))]
    return PackageError(
        f"{package.spec.control}: CONTROL lacks {', '.join(missing) or 'nothing'}: a {package.spec.role} control "
        f"provides {', '.join(wanted)}"
    )


# -- registered ---------------------------------------------------------------------------------------------------


@dataclass
class Stage:
    """A built stage: its module, imported, and its weights, loaded and checked."""

    spec: StageSpec
    module: StageModule
    weights: object
    cache_hit: bool
    inputs: tuple[tuple[str, str, tuple[int | None, ...]], ...] = ()
    outputs: tuple[str, ...] = ()

    def forward(self, *inputs: np.ndarray) -> tuple[object, ...]:
        """Run the stage; always a tuple of outputs, in `outputs` order.  The module's own ShapeError (an input
        that disagrees with the graph, an owed condition that fails) becomes Loam's, a refusal of the input."""
        return self._call(lambda: self.module.forward(self.weights, *inputs))

    def forward_with(self, weights: object, *inputs: np.ndarray) -> tuple[object, ...]:
        """`forward` on other weights of this stage's graph (an image model's UNet with adapters merged in)."""
        return self._call(lambda: self.module.forward(weights, *inputs))

    def forward_in_place(self, state: SteppedState, *inputs: np.ndarray) -> tuple[object, ...]:
        """`forward` with the pasts kept in `state`, a module DecodeState or a pool's `PagedState` (given every
        input but the pasts)."""
        return self._call(lambda: self.module.forward_in_place(self.weights, state, *inputs))

    def _call(self, run: Callable[[], np.ndarray | tuple[np.ndarray, ...]]) -> tuple[object, ...]:
        try:
            result = run()
        except self.module.ShapeError as err:
            raise ShapeError(f"stage {self.spec.name!r}: {err}") from None
        return tuple(result) if len(self.outputs) > 1 else (result,)


@dataclass
class Package:
    """A registered package: its checked spec, its built stages and its tokenizer."""

    spec: PackageSpec
    stages: dict[str, Stage]
    tokenizer: PackageTokenizer | None
    control: Control | None  # the package's own CONTROL, when it has one
    specialize: Callable[[str, Mapping[str, int]], Stage] | None = None
    """Build stage NAME with these `dims` added to its options, through the build cache, and load its weights
    (registration sets it; `loam.serve.specialize` calls it off the worker's thread)."""

    @property
    def builds(self) -> dict[str, bool]:
        """Each stage's name and whether its module came from the build cache."""
        return {name: stage.cache_hit for name, stage in self.stages.items()}
