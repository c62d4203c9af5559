"""A finite control that packs each cohort's requests into the stage's rows in reverse order.

The proof of result mapping: the physical output rows come back backwards, so a client
that gets its own embedding proves the server maps rows through the control's result plan, not through
a convenient layout.  Everything else is the built-in embedding control's.
"""

from __future__ import annotations

from collections.abc import Sequence

from loam.serve.finite import Batch, EmbeddingControl


class ReversedRows(EmbeddingControl):
    def prepare_batch(self, state: object, ranges: Sequence[tuple[int, int]], data: bytes) -> Batch:
        inputs = self.pack(state, ranges, data)  # type: ignore[arg-type]
        last = len(inputs) - 1
        return self.batch(state, inputs, [last - i for i in range(len(inputs))])  # type: ignore[arg-type]


CONTROL = ReversedRows()
