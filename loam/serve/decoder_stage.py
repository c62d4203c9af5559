"""A decoder stage served to a cohort of rows: what its module takes, and one call over rows at different
positions of one block pool (`DecoderStage`), for the text role's worker and a draft model alike.

How one decoder call serves rows at different positions (`DecoderStage.run`): the past of every row
is gathered into one [rows, heads, Pmax, head size] tensor (row r's p_r positions first, zeros after),
the new spans are right-padded to the longest, the attention mask is 1 exactly on each row's real
past and real new tokens, and `position_ids` give each new token its own position p_r + k.  Masked
positions weigh exactly zero, so each row computes what it would alone; a decoder exported without
`position_ids` derives positions from Pmax, and then only rows with equal pasts share a cohort (their
compatibility tag is their past length).  From `present.*` the step keeps row r's new positions
[Pmax, Pmax + s_r) and appends them to its blocks; the padding is never stored.  A module that keeps
its pasts in place (`forward_in_place`) is given them gathered into a `DecodeState` with room for the
new positions, so the gather is the step's one copy of the past (the model's Concats write only the
new rows).  A module whose pasts only its fused attention reads (`PAGED_PASTS`) is given no past at all:
a `PagedState` has its appends write the new rows into the rows' pool blocks and its attention read every
row's keys and values through the cohort's block table, so the step copies no past
(`loam.serve.paged_state`).

A decoder exported over `inputs_embeds` instead of `input_ids` (an image-conditioned model's language model,
`loam.serve.image_text`) is given its spans' embeddings by the `embed` hook its role passes, which maps the
[rows, span] ids the call would have given to [rows, span, hidden]; everything else is the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np

from loam.serve.kv import KvPool, KvSequence
from loam.serve.paged_state import PagedModule, PagedState
from loam.serve.residency import module_pool
from loam.serve.spec import PackageError, Stage
from loam.text.decoder import DecoderInterface, DecodeState, state_symbols

EMBEDS = "inputs_embeds"


class DecoderStage:
    """A decoder module with its past: what it takes, and one call over a cohort of rows."""

    def __init__(self, stage: Stage, where: str, embed: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        inputs = stage.inputs
        self.embed = None  # the hook that gives a decoder over inputs_embeds its spans' embeddings
        if any(name == EMBEDS for name, _, _ in inputs):
            if embed is None:
                raise PackageError(f"{where}: the decoder takes {EMBEDS!r}: its package names no stage to embed ids")
            self.embed = embed
            # The interface checks the embeddings as the ids they are made from, in the same place of the call.
            inputs = tuple((("input_ids", "int64", e[:2]) if n == EMBEDS else (n, d, e)) for n, d, e in inputs)
        # Rows are padded to the longest in a call, so the decoder must take the mask that says which are real.
        interface = DecoderInterface.of(
            inputs, stage.outputs, where, PackageError, needs=("input_ids", "attention_mask")
        )
        self.stage = stage
        self.order = list(interface.order)
        self.dtypes = dict(interface.dtypes)
        self.past_names = list(interface.past_names)
        self.layers: dict[str, tuple[int, int, np.dtype]] = dict(interface.layers)
        self.present_index = {name: stage.outputs.index(present) for name, present in interface.present_of.items()}
        self.ragged = "position_ids" in self.dtypes
        # A module that keeps every past in place (decode-state-in-place) is given the gathered pasts as a
        # DecodeState's views, so its Concats write the new rows after them instead of copying the pasts.
        symbols = state_symbols(stage.module, self.past_names) or set()
        self.in_place = len(symbols) == 1  # every past in place, and one extent to give: the rows
        # Only the fused attention reads the pasts: they are read where the pool keeps them (`PagedState`).
        self.paged = self.in_place and getattr(stage.module, "PAGED_PASTS", False) is True
        self.batch_symbol = next(iter(symbols), "")
        self._scratch: dict[int, DecodeState] = {}  # rows -> the DecodeState of a recent call with that many rows
        self._room: dict[int, int] = {}  # rows -> the most positions its DecodeState was given room for
        self.logits_index = stage.outputs.index("logits")
        # One token through an empty past before any request: the stage runs, and its vocabulary is known.
        probe = KvPool(self.layers, 1, 1)
        first = probe.new_sequence()
        probe.reserve(first, 1)
        self.vocab = int(self.run(probe, [(first, [0])])[0].shape[-1])

    def tag(self, seq: KvSequence) -> str:
        """Rows with equal tags can share a call: any rows when positions are an input, else equal pasts."""
        return "ragged" if self.ragged else f"past={seq.length}"

    def run(
        self, pool: KvPool, rows: list[tuple[KvSequence, list[int]]], every: frozenset[int] = frozenset()
    ) -> list[np.ndarray]:
        """Read each row's span after its past; append the spans' KV to the rows' blocks; return each row's
        logits at its last new position (float32 [vocab]), or at every new position for the rows whose
        index is in `every` (float32 [span, vocab]: a scoring row's known tokens are scored from them).

        One call pads every row to the longest span and the longest past.  Where decode steps share the
        cohort with prompt spans and that padding would more than double the tokens computed (four streams
        beside a 32-token chunk: 160 positions for 36), the decode steps and the prompt spans run as two
        calls: a stream's step then costs what a step costs, not a chunk of a long prompt."""
        decode = [i for i, (_, span) in enumerate(rows) if len(span) == 1]
        if 0 < len(decode) < len(rows) and 2 * sum(len(span) for _, span in rows) < len(rows) * max(
            len(span) for _, span in rows
        ):
            spans = [i for i in range(len(rows)) if i not in set(decode)]
            # Both calls run before either keeps its KV: a call that raises leaves the pool as it was.
            called = {
                i: row
                for group in (decode, spans)
                for i, row in zip(
                    group,
                    self._call(pool, [rows[i] for i in group], frozenset(group.index(i) for i in every if i in group)),
                    strict=True,
                )
            }
            results = [called[i] for i in range(len(rows))]
        else:
            results = self._call(pool, rows, every)
        for (seq, span), (_, values) in zip(rows, results, strict=True):
            if values is None:  # a paged call wrote them in place
                pool.record(seq, span)
            else:
                pool.append(seq, span, values)
        return [logits for logits, _ in results]

    def _call(
        self, pool: KvPool, rows: list[tuple[KvSequence, list[int]]], every: frozenset[int] = frozenset()
    ) -> list[tuple[np.ndarray, dict[str, np.ndarray] | None]]:
        """One call of the module over `rows`: each row's logits at its last new position (at every new position
        for the rows in `every`) and the KV of its new positions (copies: the call's outputs are views of a
        DecodeState the next call reuses), None where a paged call wrote them into the rows' blocks."""
        count = len(rows)
        longest = max(len(span) for _, span in rows)
        past = max(seq.length for seq, _ in rows)
        ids = np.zeros((count, longest), self.dtypes["input_ids"])
        mask = np.zeros((count, past + longest), self.dtypes["attention_mask"])
        positions = np.zeros((count, longest), np.int64)
        for r, (seq, span) in enumerate(rows):
            ids[r, : len(span)] = span
            mask[r, : seq.length] = 1
            mask[r, past : past + len(span)] = 1
            positions[r, : len(span)] = np.arange(seq.length, seq.length + len(span))
        feeds: dict[str, np.ndarray] = {
            "input_ids": ids if self.embed is None else self.embed(ids),
            "attention_mask": mask,
        }
        if self.ragged:
            feeds["position_ids"] = positions.astype(self.dtypes["position_ids"])
        seqs = [seq for seq, _ in rows]
        if self.paged:
            module = cast(PagedModule, self.stage.module)  # it declares DECODE_STATE (in_place) and PAGED_PASTS
            paged = PagedState(module, pool, [(seq, len(span)) for seq, span in rows], past)
            outputs = self.stage.forward_in_place(paged, *(feeds[name] for name in self.order if name in feeds))
            logits = np.asarray(outputs[self.logits_index])
            return [
                (np.array(logits[r, : len(span)] if r in every else logits[r, len(span) - 1], np.float32), None)
                for r, (_, span) in enumerate(rows)
            ]
        if self.in_place:
            state = self._state(count, past + longest)
            state.length = past
            pool.gather(seqs, past, into={name: state.past(name) for name in self.past_names})
            outputs = self.stage.forward_in_place(state, *(feeds[name] for name in self.order if name in feeds))
        else:
            feeds.update(pool.gather(seqs, past))
            outputs = self.stage.forward(*(feeds[name] for name in self.order))
        logits = np.asarray(outputs[self.logits_index])
        return [
            (
                np.array(logits[r, : len(span)] if r in every else logits[r, len(span) - 1], np.float32),
                {
                    name: np.array(np.asarray(outputs[i])[r, :, past : past + len(span)])
                    for name, i in self.present_index.items()
                },
            )
            for r, (_, span) in enumerate(rows)
        ]

    def scratch_extents(self) -> list[tuple[int, int]]:
        """The rows and positions (at least) of each DecodeState kept for the next calls: this stage's workspace.
        Read while the worker runs (a /metrics scrape), so from copies, each made in one step."""
        room = dict(self._room)
        return [(rows, room.get(rows, 0)) for rows in list(self._scratch)]

    def trim(self) -> None:
        """Drop the kept DecodeStates and the module's pooled intermediates (made again by the next call)."""
        self._scratch.clear()
        self._room.clear()
        module_pool(self.stage.module).clear()

    def _state(self, count: int, capacity: int) -> DecodeState:
        """A DecodeState for `count` rows with room for `capacity` positions, emptied: a recent call's when it had
        as many rows (grown by doubling where it must), so a step writes into memory already mapped instead of
        faulting in fresh pages for every past it gathers (84 ms of SmolLM2's 2,047-position step)."""
        state = self._scratch.pop(count, None)
        if state is None:
            state = self.stage.module.DecodeState(capacity, **{self.batch_symbol: count})
        self._scratch[count] = state  # the most recent last; a cohort split in two calls reuses both sizes
        while len(self._scratch) > 2:
            del self._scratch[next(iter(self._scratch))]
        state.rewind(0)
        state.reserve(capacity)
        self._room[count] = max(self._room.get(count, 0), capacity)
        return state
