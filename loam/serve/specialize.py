"""Request-time specialization: a stage built for the dims of a request's input, on first use, and kept.

A stage whose graph leaves some extents free (an image classifier's `height` and `width`) runs as built at
registration, for any extent; a package may instead ask for a build per request shape, fixing those
dim_params so that Loam folds every shape the graph computes from them.  `model.json` says which symbols a
request fixes, and from which axis of which graph input:

    "stages": {"classifier": {"graph": "model.onnx", "options": "layout.toml",
                              "specialize": {"dims": {"height": "data_0[2]", "width": "data_0[3]"}}}}

A request's key is its stage and those dims.  `SpecializationCache` holds each key's `Specialization`: a
key that is built runs at once; a miss starts its build on the compile thread, shared by every model (the
build goes through Loam's build cache with the dims added to the stage's options, and loads the stage's
weights), while the model's worker keeps running its other requests and every other model's worker keeps
running; requests for a key being built wait on that one build.  At most `specialization_cache` keys are
kept: a miss beyond them evicts the least recently used key no request holds.

A request holds its key from its first step until it is retired.  A request retired while its key is
still building (cancelled by its client, or failed) lets go only once the build has ended (it joins the
build); a build that ends with no request holding its key is dropped rather than kept, and a build that
fails because the graph refuses the dims (a ShapeError: an image too small for its pooling) is dropped
too, every request holding it failing with the refusal.  A build that fails otherwise (a layout that
cannot name the specialized graph's axes, or a fault in Loam) is no fault of the request: its key runs on
the registered build, which serves every extent the graph allows, and is kept as such.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from loam.core.errors import ShapeError
from loam.serve.metrics import ModelMetrics
from loam.serve.scheduler import failure
from loam.serve.spec import Package, PackageError, Stage, StageSpec

Key = tuple[str, tuple[tuple[str, int], ...]]
"""A specialization's key: the stage's name and its dims, sorted by symbol."""

_compiler: ThreadPoolExecutor | None = None
_compiler_lock = threading.Lock()


def compiler() -> ThreadPoolExecutor:
    """The compile thread every model's specializations are built on, one at a time, oldest first."""
    global _compiler
    with _compiler_lock:
        if _compiler is None:
            _compiler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="loam-serve-compile")
        return _compiler


def request_axes(package: Package, stage: Stage) -> dict[str, tuple[int, int]]:
    """Symbol -> (input position, axis) for `stage`'s `specialize`, each checked against the built stage and its
    graph: a graph input the stage takes, an axis it has besides the batch axis, an extent the stage leaves free
    and the graph declares by that dim_param.  A wrong one is a PackageError naming the key."""
    if not stage.spec.specialize:
        return {}
    names = [name for name, _, _ in stage.inputs]
    declared = _declared(stage.spec)
    axes: dict[str, tuple[int, int]] = {}
    for symbol, (name, axis) in stage.spec.specialize.items():
        key = f"stages.{stage.spec.name}.specialize.dims.{symbol}"
        where = package.spec.folder / "model.json"
        if name not in names:
            raise PackageError(f"{where}: key {key!r} names input {name!r}; the stage takes {names}")
        position = names.index(name)
        shape = stage.inputs[position][2]
        if not 0 < axis < len(shape) or shape[axis] is not None:
            raise PackageError(
                f"{where}: key {key!r} names axis {axis} of {name!r}, whose extents are "
                f"{['?' if n is None else n for n in shape]}: a request fixes a free extent, not the batch axis"
            )
        dims = declared.get(name, ())
        if axis >= len(dims) or dims[axis] != symbol:
            raise PackageError(
                f"{where}: key {key!r} names axis {axis} of {name!r}, which the graph declares as {list(dims)}: "
                f"the symbol is the dim_param of that axis"
            )
        axes[symbol] = (position, axis)
    return axes


def _declared(stage: StageSpec) -> dict[str, tuple[int | str | None, ...]]:
    """Each graph input's declared dims (a dim_param's name, an extent, or None), as the stage's options'
    `interface` re-declares them."""
    from loam.serve.pooling import read_onnx

    graph = read_onnx(stage.graph).graph
    declared: dict[str, tuple[int | str | None, ...]] = {}
    for value in graph.input:
        shape = value.type.tensor_type.shape.dim
        declared[value.name] = tuple(d.dim_param or (d.dim_value if d.HasField("dim_value") else None) for d in shape)
    declared.update(stage.options.interface)
    return declared


@dataclass(eq=False)
class Specialization:
    """One key's build: compiling until `done` is set, then its `stage` (the registered one where the build
    failed for a reason other than the request's dims, `error` saying why) or its refusal (`status`, `error`)."""

    key: Key
    done: threading.Event = field(default_factory=threading.Event)
    stage: Stage | None = None
    status: int = 0
    error: str = ""
    users: int = 0  # requests holding it
    leaving: int = 0  # requests retired while it was compiling: they let go when it ends


class SpecializationCache:
    """A model's specialized builds, at most `capacity` kept, least recently used evicted first.

    `build(stage, dims)` makes a stage (the package's `Package.specialize`); `registered` is the stage as registration
    built it, which a key whose build fails for another reason than its dims runs on; `wake()` is called when a
    build ends, so the model's worker steps again."""

    def __init__(
        self,
        build: Callable[[str, Mapping[str, int]], Stage],
        registered: Stage,
        capacity: int,
        metrics: ModelMetrics,
        wake: Callable[[], None],
    ) -> None:
        self.build = build
        self.registered = registered
        self.capacity = capacity
        self.metrics = metrics
        self.wake = wake
        self.lock = threading.Lock()
        self.entries: OrderedDict[Key, Specialization] = OrderedDict()

    def acquire(self, stage: str, dims: Mapping[str, int]) -> Specialization:
        """The specialization for `stage` at `dims`, held for one request until `release`: the kept one (built
        or building), else a new one whose build starts now."""
        key: Key = (stage, tuple(sorted(dims.items())))
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
                entry.users += 1
                self.metrics.specialization_hits.inc()
                return entry
            entry = Specialization(key, users=1)
            self.entries[key] = entry
            self.metrics.specialization_misses.inc()
            self._evict()
        compiler().submit(self._compile, entry)
        return entry

    def release(self, entry: Specialization) -> None:
        """A request lets go of `entry`: at once where it has been built (or failed), else when its build ends."""
        with self.lock:
            if not entry.done.is_set():
                entry.leaving += 1
                return
            entry.users -= 1
            self._evict()

    def keys(self) -> list[Key]:
        """The keys held, least recently used first (built or building)."""
        with self.lock:
            return list(self.entries)

    def stages(self) -> list[Stage]:
        """The specialized stages kept (not the registered one)."""
        with self.lock:
            stages = [entry.stage for entry in self.entries.values()]
        return [stage for stage in stages if stage is not None and stage is not self.registered]

    def trim(self) -> None:
        """Drop every built specialization no request holds (their modules and weights)."""
        with self.lock:
            for key, entry in list(self.entries.items()):
                if entry.done.is_set() and entry.users == 0:
                    del self.entries[key]
            self.metrics.specialization_entries.set(len(self.entries))

    def _compile(self, entry: Specialization) -> None:
        start = time.monotonic()
        stage: Stage | None = None
        try:
            stage = self.build(entry.key[0], dict(entry.key[1]))
        except ShapeError as err:  # the graph refuses these dims: the requests' refusal
            entry.status, entry.error = 400, str(err)
        except Exception as err:  # the build's fault, not the request's: the registered build serves the key
            entry.error = failure(err)[1]  # a fault in Loam's own code is logged with its traceback
            stage = self.registered
            self.metrics.specialization_fallbacks.inc()
        self.metrics.compile_seconds.observe(time.monotonic() - start)
        with self.lock:
            entry.stage = stage
            entry.users -= entry.leaving
            entry.leaving = 0
            if (stage is None or entry.users == 0) and self.entries.get(entry.key) is entry:
                del self.entries[entry.key]  # failed, or wanted by no request any more: never kept half-built
            entry.done.set()
            self._evict()
        self.wake()

    def _evict(self) -> None:
        """Evict least recently used built entries no request holds until at most `capacity` are kept (run under
        `lock`); entries in use or building stay, so the cache may hold more until they are let go."""
        for key, entry in list(self.entries.items()):
            if len(self.entries) <= self.capacity:
                break
            if entry.done.is_set() and entry.users == 0:
                del self.entries[key]
                self.metrics.specialization_evictions.inc()
        self.metrics.specialization_entries.set(len(self.entries))
