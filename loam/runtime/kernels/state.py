"""A decoder's past kept in place between steps (see `loam/runtime/kernels/__init__.py`).

`kernel_append_state` computes `kernel.append_state`: ONNX Concat(past, new) along the past's
growing axis, which a decoder exported with its past (`past_key_values.*` in, `present.*` out) runs
once per layer and step.  Its value is always the concatenation.  Given the `DecodeState` that
`forward_in_place` passes, whose current view of that past is the very array forward was given, it
writes only the new rows into the state's storage after the past and returns the view of both, so a
step costs what its new rows cost instead of a copy of the whole past.

`DecodeState` reads the module's `INPUTS`, `OUTPUTS`, `DECODE_STATE` (each state input: its name,
its output's name, its growing axis and its other extents) and `forward`.  One thread steps a state
at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.errors import ShapeError

# What DecodeState reads from the module it is copied into; placeholders here, where nothing runs it.
INPUTS: tuple[tuple[str, str, tuple[int | None, ...]], ...] = ()
OUTPUTS: tuple[str, ...] = ()
DECODE_STATE: tuple[tuple[str, str, int, tuple[int | str | None, ...]], ...] = ()


def forward(weights: object, *inputs: np.ndarray, decode_state: DecodeState | None = None) -> object:
    raise NotImplementedError("the module DecodeState is copied into defines forward")


class DecodeState:
    """A decoder's past kept in place: per past input, a buffer of `capacity` positions along its
    growing axis, of which the first `length` hold the conversation so far.

    `DecodeState(capacity, batch_size=2)` gives each symbolic extent other than the growing one
    (`DECODE_STATE` names them) by its symbol; `forward_in_place(weights, state, ...)` takes the
    inputs other than the pasts, reads the pasts from the state and writes only each step's new rows
    into it.  `past(name)` is the state's view of a past input; `rewind(n)` keeps the first n
    positions; `reserve(capacity)` grows the buffers (one copy, at least doubling).  The buffers are
    allocated whole, but their zero pages become resident only as they are written.
    """

    def __init__(self, capacity: int, **extents: int) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ShapeError(f"DecodeState: capacity must be a positive int, not {capacity!r}")
        dtypes = {name: dtype for name, dtype, _ in INPUTS}
        named = {e for _, _, _, axes in DECODE_STATE for e in axes if isinstance(e, str)}
        unknown = sorted(set(extents) - named)
        if unknown:
            raise ShapeError(
                f"DecodeState: {unknown[0]!r} is not an extent of a state input (those are {sorted(named)})"
            )
        self.capacity = capacity
        self.length = 0
        self._axes: dict[str, int] = {}
        self._buffers: dict[str, np.ndarray] = {}
        self._views: dict[str, np.ndarray] = {}
        for past, _, axis, axes in DECODE_STATE:
            shape = []
            for a, extent in enumerate(axes):
                if a == axis:
                    shape.append(capacity)
                elif isinstance(extent, int):
                    shape.append(extent)
                elif extent in extents:
                    shape.append(int(extents[extent]))
                else:
                    raise ShapeError(f"DecodeState: give {extent}=N, the extent of input '{past}' axis {a}")
            self._axes[past] = axis
            self._buffers[past] = np.zeros(shape, dtypes[past])

    def past(self, name: str) -> np.ndarray:
        """The state's view of past input `name`: its first `length` positions (no copy)."""
        if name not in self._buffers:
            raise ShapeError(f"DecodeState: {name!r} is not a state input (those are {sorted(self._buffers)})")
        axis = self._axes[name]
        return self._buffers[name][(*(slice(None),) * axis, slice(0, self.length))]

    def reserve(self, capacity: int) -> None:
        """Grow to hold at least `capacity` positions, keeping those held: one copy now, none per step.  It
        at least doubles, so a caller growing step by step copies each position a bounded number of times."""
        if capacity <= self.capacity:
            return
        capacity = max(capacity, 2 * self.capacity)
        for name, buffer in self._buffers.items():
            axis = self._axes[name]
            shape = list(buffer.shape)
            shape[axis] = capacity
            grown = np.zeros(shape, buffer.dtype)
            grown[(*(slice(None),) * axis, slice(0, self.length))] = self.past(name)
            self._buffers[name] = grown
        self.capacity = capacity

    def rewind(self, length: int) -> None:
        """Keep the first `length` positions (the later ones are overwritten by the next steps)."""
        if not 0 <= length <= self.length:
            raise ShapeError(f"DecodeState: cannot rewind {self.length} positions to {length}")
        self.length = length

    def append(self, name: str, past: np.ndarray, new: np.ndarray, axis: int) -> np.ndarray | None:
        """`kernel_append_state` with this state: the joined view, after writing `new` in place, when
        `past` is the view this step gave forward; None (forward concatenates) otherwise."""
        if self._views.get(name) is not past or self._axes[name] != axis:
            return None
        buffer = self._buffers[name]
        start, count = past.shape[axis], new.shape[axis]
        if (
            new.ndim != buffer.ndim
            or new.dtype != buffer.dtype
            or any(n != b for a, (n, b) in enumerate(zip(new.shape, buffer.shape, strict=True)) if a != axis)
        ):
            return None
        if start + count > buffer.shape[axis]:
            raise ShapeError(
                f"input '{name}' axis {axis}: {start} positions and {count} new ones exceed the DecodeState's "
                f"capacity of {buffer.shape[axis]} (make the state with a larger capacity)"
            )
        lead = (slice(None),) * axis
        buffer[(*lead, slice(start, start + count))] = new
        return buffer[(*lead, slice(0, start + count))]

    def pages(self, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """Where a state keeps the joined keys `k` and values `v` in pages: their pools [N, heads, T, size] and
        each key's block and offset in them ([batch, keys], block -1 for a zero row), which `kernel_attention`
        reads them through.  None here: a DecodeState keeps each past dense (a server's
        paged state, given to a module whose PAGED_PASTS allows it, answers for its block pool)."""
        return None

    def step(self, weights: object, inputs: tuple[np.ndarray, ...]) -> object:
        """`forward` on `inputs` (every input but the pasts, in order) and the state's pasts; the new
        rows end in the state and `length` counts them."""
        views = {name: self.past(name) for name in self._buffers}
        given = list(inputs)
        wanted = [name for name, _, _ in INPUTS if name not in views]
        if len(given) != len(wanted):
            raise ShapeError(f"forward_in_place takes {len(wanted)} inputs ({', '.join(wanted)}), got {len(given)}")
        args = [views[name] if name in views else given.pop(0) for name, _, _ in INPUTS]
        self._views = views
        try:
            outputs = forward(weights, *args, decode_state=self)
        finally:
            self._views = {}
        results = outputs if isinstance(outputs, tuple) else (outputs,)
        ends = set()
        for past, present, axis, _ in DECODE_STATE:
            value = results[OUTPUTS.index(present)]
            buffer, end = self._buffers[past], value.shape[axis]
            if not np.may_share_memory(value, buffer):
                # Computed without the state (forward made a copy): keep its new rows all the same.
                if end > buffer.shape[axis]:
                    raise ShapeError(
                        f"output '{present}' axis {axis}: {end} positions exceed the DecodeState's capacity of "
                        f"{buffer.shape[axis]} (make the state with a larger capacity)"
                    )
                lead = (slice(None),) * axis
                rows = (*lead, slice(self.length, end))
                buffer[rows] = value[rows]
            ends.add(end)
        if len(ends) != 1:
            raise ShapeError(f"the state outputs disagree on their length: {sorted(ends)}")
        self.length = ends.pop()
        return outputs


def kernel_append_state(
    past: np.ndarray, new: np.ndarray, into: DecodeState | None = None, *, axis: int, state: str
) -> np.ndarray:
    """Concat(past, new) along `axis`: in place in `into`'s storage when it holds input `state`'s past
    as the very array `past` (see DecodeState.append), else a new array.  forward passes its
    `decode_state` as `into`."""
    if into is not None:
        joined = into.append(state, past, new, axis)
        if joined is not None:
            return joined
    return np.concatenate((past, new), axis=axis)


PIECES: dict[str, Callable[..., object]] = {"DecodeState": DecodeState, "kernel_append_state": kernel_append_state}
