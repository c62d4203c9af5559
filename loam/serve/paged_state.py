"""A cohort's pasts read where a `KvPool` keeps them: the state a paged decoder step gives `forward_in_place`.

A module built with `decode-state-in-place` runs its step on a state (`forward_in_place(weights, state, ...)`):
each layer's Concat of past and new rows is `kernel_append_state(past, new, state)` and the attention reads
the joined keys and values.  Where the module declares `PAGED_PASTS` (each past read only by its append, each
joined past only by `kernel.attention`), `PagedState` is that state without a dense past at all:

- forward is given, for each past, a placeholder of the padded past's shape (zeros that own no memory);
- each append writes the step's new rows straight into the rows' reserved pool positions and returns a
  placeholder of the joined shape, which the state knows by identity;
- `kernel_attention` asks the state (`pages`) and reads keys and values through one block table for the
  cohort: slot `block * block_tokens + offset` for each of a row's real positions, -1 for its padding.

So a served step reads each row's past once, in place, instead of copying every layer's past into a dense
[rows, heads, past, head size] tensor first (`KvPool.gather`: 44.6 ms of SmolLM2's step at 2,047 positions).
The logical layout is the dense call's (row r's past at [0, p_r), its new span at [P, P + s_r), P the
longest past), so masks and positions are computed as before and the kernels see the same zero rows where
a dense call has zero padding.  A placeholder read by anything else would be zeros, which is why the build
must vouch for the module (`PAGED_PASTS`) and why an append this state does not recognize is an error, never
a Concat of a placeholder.  The step's new rows are in the pool when forward returns; `KvPool.record` then
counts them as the rows' tokens, and a step that raises leaves each row's length as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from loam.serve.kv import KvPool, KvSequence


class PagedModule(Protocol):
    """What a PagedState reads of the module: its inputs, its state inputs (`DECODE_STATE`) and a forward that
    takes the state by keyword (a module that declares `DECODE_STATE` has one)."""

    INPUTS: tuple[tuple[str, str, tuple[int | None, ...]], ...]
    DECODE_STATE: tuple[tuple[str, str, int, tuple[int | str | None, ...]], ...]

    def forward(self, weights: object, *inputs: np.ndarray, decode_state: PagedState) -> object: ...


class PagedState:
    """The pasts of `rows` (each a sequence and its new span's length) in `pool`, for one forward_in_place call
    of `module` padded to `past` positions of past (at least every row's length) and the longest span."""

    def __init__(self, module: PagedModule, pool: KvPool, rows: Sequence[tuple[KvSequence, int]], past: int) -> None:
        if not getattr(module, "PAGED_PASTS", False):
            raise ValueError("the module does not let a state keep its pasts in pages (PAGED_PASTS is not true)")
        self.module = module
        self.pool = pool
        self.length = past  # the padded past forward sees, as a DecodeState's length
        count, longest = len(rows), max((span for _, span in rows), default=0)
        bt = pool.block_tokens
        slots = np.full((count, past + longest), -1, np.int64)  # the keys' block table (see the docstring)
        writes: list[tuple[int, np.ndarray, np.ndarray]] = []  # row, its new rows' span indices, their slots
        for r, (seq, span) in enumerate(rows):
            if seq.length > past:
                raise ValueError(f"row {r} has {seq.length} positions, more than past={past}")
            if len(seq.blocks) * bt < seq.length + span:
                raise ValueError(f"row {r}: {span} new position(s) without reserve()")
            table = np.asarray(seq.blocks, np.int64)
            held = np.arange(seq.length + span, dtype=np.int64)
            where = table[held // bt] * bt + held % bt
            slots[r, : seq.length] = where[: seq.length]
            slots[r, past : past + span] = where[seq.length :]
            writes.append((r, np.arange(span), where[seq.length :]))
        self._rows = np.concatenate([np.full(len(k), r, np.int64) for r, k, _ in writes] or [np.zeros(0, np.int64)])
        self._span = np.concatenate([k for _, k, _ in writes] or [np.zeros(0, np.int64)])
        written = np.concatenate([s for _, _, s in writes] or [np.zeros(0, np.int64)])
        self._blocks, self._offsets = written // bt, written % bt
        inputs = {name: dtype for name, dtype, _ in module.INPUTS}
        self._pasts: dict[str, np.ndarray] = {}  # past input -> the placeholder forward is given
        self._joined: dict[str, np.ndarray] = {}  # past input -> the placeholder its append returns
        for name, _, axis, _ in module.DECODE_STATE:
            heads, size, _ = pool.layer(name)
            if axis != 2:
                raise ValueError(f"past input {name!r} grows along axis {axis}; a pool's pasts grow along axis 2")
            zero = np.zeros((), inputs[name])
            self._pasts[name] = np.broadcast_to(zero, (count, heads, past, size))
            self._joined[name] = np.broadcast_to(zero, (count, heads, past + longest, size))
        self._names = {id(joined): name for name, joined in self._joined.items()}
        # The table as kernel_attention reads it: each key's block (-1: a zero row) and offset in it.
        self.blocks = np.where(slots >= 0, slots // bt, -1)
        self.offsets = slots % bt

    def past(self, name: str) -> np.ndarray:
        """The placeholder forward is given for past input `name`: the padded past's shape, no memory."""
        return self._pasts[name]

    def step(self, weights: object, inputs: tuple[np.ndarray, ...]) -> object:
        """forward on `inputs` (every input but the pasts, in order) with the placeholders for the pasts."""
        given = list(inputs)
        wanted = [name for name, _, _ in self.module.INPUTS if name not in self._pasts]
        if len(given) != len(wanted):
            raise ValueError(f"forward_in_place takes {len(wanted)} inputs ({', '.join(wanted)}), got {len(given)}")
        args = [self._pasts[name] if name in self._pasts else given.pop(0) for name, _, _ in self.module.INPUTS]
        return self.module.forward(weights, *args, decode_state=self)

    def append(self, name: str, past: np.ndarray, new: np.ndarray, axis: int) -> np.ndarray:
        """`kernel_append_state` with this state: the new rows of each row's span into its pool positions; the
        joined placeholder.  Anything but this state's own past is an error (a Concat would read zeros)."""
        if self._pasts.get(name) is not past or axis != 2:
            raise ValueError(f"append of {name!r} along axis {axis}: not the paged past this state gave forward")
        joined = self._joined[name]
        count, heads, _, size = joined.shape
        if new.shape != (count, heads, joined.shape[2] - past.shape[2], size):
            raise ValueError(f"append of {name!r}: new rows of shape {new.shape} for a past of shape {past.shape}")
        self.pool.storage(name)[self._blocks, :, self._offsets] = new[self._rows, :, self._span]
        return joined

    def pages(self, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """The pools of the joined keys `k` and values `v` and each key's block and offset in them (the cohort's
        block table), for kernel_attention."""
        key, value = self._names.get(id(k)), self._names.get(id(v))
        if key is None and value is None:
            return None
        if key is None or value is None or self._joined[key] is not k or self._joined[value] is not v:
            raise ValueError("an attention reads paged keys beside values that are not paged, or the reverse")
        return self.pool.storage(key), self.pool.storage(value), self.blocks, self.offsets
