"""A text control whose decoder raises for any row at position FAULT_AT or later: a fault in the middle of a cohort.

The fault tests' injection: everything is the built-in text control's, except that `prepare` wraps the decoder
stage's forward (and forward_in_place) so that a call carrying a row at position FAULT_AT or later raises
RuntimeError, as a bug in the numerical work would.  A request whose prompt and reply stay below FAULT_AT runs
normally, in the same cohorts as one that crosses it mid-reply.
"""

from __future__ import annotations

import numpy as np

from loam.serve.package import Package
from loam.serve.text import TextControl, TextState

FAULT_AT = 40


class FaultAtPosition(TextControl):
    def prepare(self, package: Package) -> TextState:
        stage = next(iter(package.stages.values()))
        names = [name for name, _, _ in stage.inputs]
        where = names.index("position_ids")
        # forward_in_place (the pasts kept in a DecodeState) takes every input but the pasts.
        where_in_place = [n for n in names if not n.startswith("past_key_values.")].index("position_ids")
        forward, forward_in_place = stage.forward, stage.forward_in_place

        def check(positions: object) -> None:
            if int(np.max(np.asarray(positions))) >= FAULT_AT:
                raise RuntimeError(f"injected fault: a row reached position {FAULT_AT}")

        def faulty(*inputs: object) -> tuple[object, ...]:
            check(inputs[where])
            return forward(*inputs)

        def faulty_in_place(state: object, *inputs: object) -> tuple[object, ...]:
            check(inputs[where_in_place])
            return forward_in_place(state, *inputs)

        stage.forward = faulty  # type: ignore[method-assign]
        stage.forward_in_place = faulty_in_place  # type: ignore[method-assign]
        return super().prepare(package)


CONTROL = FaultAtPosition()
