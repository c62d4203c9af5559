"""A text control whose decoder raises for any row at position FAULT_AT or later: a fault in the middle of a cohort.

The fault tests' injection: everything is the built-in text control's, except that `prepare` wraps the decoder
stage's forward so that a call carrying a row at position FAULT_AT or later raises RuntimeError, as a bug in
the numerical work would.  A request whose prompt and reply stay below FAULT_AT runs normally, in the same cohorts
as one that crosses it mid-reply.
"""

from __future__ import annotations

import numpy as np

from loam.serve.package import Package
from loam.serve.text import TextControl, TextState

FAULT_AT = 40


class FaultAtPosition(TextControl):
    def prepare(self, package: Package) -> TextState:
        stage = next(iter(package.stages.values()))
        where = [name for name, _, _ in stage.inputs].index("position_ids")
        forward = stage.forward

        def faulty(*inputs: object) -> tuple[object, ...]:
            if int(np.max(np.asarray(inputs[where]))) >= FAULT_AT:
                raise RuntimeError(f"injected fault: a row reached position {FAULT_AT}")
            return forward(*inputs)

        stage.forward = faulty  # type: ignore[method-assign]
        return super().prepare(package)


CONTROL = FaultAtPosition()
