"""What a served model holds in memory, what it is forecast to hold, and the server's budget for it all.

A registered model is *active* (its weights loaded, its KV pool and workspace usable) or *inactive*: its
weights released (the arrays and the checkpoint's memory maps dropped, so their pages go back to the
system), its KV pool's unused blocks and its pooled workspace trimmed, while its compiled modules, its
control and its retained sessions (their KV blocks) stay.  The next request reactivates it on the
model's own worker thread: the weights are loaded again through the same header checks as at
registration, so a checkpoint changed since is refused then, and the model answers as before.

A `Forecast` is what a model holds when active, in three kinds:

- `weights`: the bytes of its stages' weights as loaded (a checkpoint's memory-mapped views and the
  arrays decoded from it alike, each buffer counted once), measured when registration loads them;
- `kv`: its KV pool (blocks x block tokens x, per past input, heads x head size x itemsize);
- `workspace`: its largest cohort's working storage as its worker reckons it (`Worker.workspace_bytes`:
  for text, the gathered past of every resident row at full context plus the logits of a cohort's units;
  for embeddings, the cohort's input arrays).  Intermediates a generated numpy module allocates inside
  its forward are not counted: the module does not declare them.

`Budget` is `--memory-limit`: the forecasts of the active models together must fit it.  Registering a
package or reactivating a model that would pass it is refused naming the budget and the forecast; an
inactive model's weights do not count.  A request whose own forecast (`Worker.request_bytes`) could not fit
the budget even alone is refused before any work.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from loam.serve.scheduler import ServeError

_SIZE = re.compile(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text: str) -> int:
    """A byte count as `--memory-limit` takes it: digits with an optional K, M or G (powers of 1024)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a byte count (digits with an optional K, M or G suffix: 512M, 2G)")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def shown(count: int) -> str:
    """A byte count for people: `123456789 bytes (117.7 MiB)`."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count} bytes ({count / size:.1f} {unit})"
    return f"{count} bytes"


@dataclass(frozen=True)
class Forecast:
    """The bytes an active model holds, by kind."""

    weights: int = 0
    kv: int = 0
    workspace: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.workspace

    def kinds(self) -> dict[str, int]:
        return {"weights": self.weights, "kv": self.kv, "workspace": self.workspace}

    def __str__(self) -> str:
        return f"{shown(self.total)}: weights {self.weights}, kv {self.kv}, workspace {self.workspace}"


def array_bytes(values: Iterable[object]) -> int:
    """The bytes of memory the arrays among `values` (and in the dicts, lists and tuples among them) span, memory
    that several share counted once: a checkpoint's map and the weights viewing it are the map's bytes."""
    spans: list[tuple[int, int]] = []
    pending = list(values)  # one step, so a dict's values read while its owner changes it (a module's pool) are whole
    while pending:
        value = pending.pop()
        if isinstance(value, np.ndarray):
            if value.size:
                # From the first element's address, each axis reaches back (a negative stride) or on.
                start = value.__array_interface__["data"][0]
                reach = [(extent - 1) * stride for extent, stride in zip(value.shape, value.strides, strict=True)]
                low = start + sum(r for r in reach if r < 0)
                spans.append((low, start + sum(r for r in reach if r > 0) + value.itemsize))
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)
    total, reached = 0, 0
    for start, end in sorted(spans):
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total


def weight_arrays(weights: object) -> list[object]:
    """The attributes of a generated module's `Weights` object (its `__slots__`): the loaded weights, the
    checkpoint's map they view and the forms decoded from it."""
    if weights is None:
        return []
    names = [name for klass in type(weights).__mro__ for name in getattr(klass, "__slots__", ())]
    return [getattr(weights, name, None) for name in names]


def module_pool(module: object) -> dict[object, object]:
    """A generated numpy module's pool of forward's preallocated intermediates (`_POOL`: the buffers of the
    latest extents it ran at, kept for the next call), or an empty dict where it keeps none."""
    pool = getattr(module, "_POOL", None)
    return pool if isinstance(pool, dict) else {}


class Budget:
    """`--memory-limit`: the bytes the active models' forecasts may hold together (None: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit

    def admit(self, what: str, forecast: Forecast, others: int) -> None:
        """Refuse `what` (registering or reactivating a model of `forecast`) when it and the `others` active
        models' forecasts would pass the budget."""
        if self.limit is None or others + forecast.total <= self.limit:
            return
        raise ServeError(
            f"{what} would pass the server's memory budget (--memory-limit {shown(self.limit)}): its forecast is "
            f"{forecast}, and the active models hold {shown(others)}",
            status=507,
            param="memory_limit",
            kind="insufficient_memory",
        )

    def admit_request(self, model: str, weights: int, need: int, param: str) -> None:
        """Refuse a request of `model` whose own forecast (its model's weights and the request's `need`) could
        not fit the budget even with nothing else running: a 4xx naming the budget, before any work."""
        if self.limit is None or weights + need <= self.limit:
            return
        raise ServeError(
            f"this request cannot fit the server's memory budget (--memory-limit {shown(self.limit)}) even alone: "
            f"model {model!r}'s weights hold {shown(weights)} and the request needs {shown(need)}",
            status=413,
            param=param,
        )
