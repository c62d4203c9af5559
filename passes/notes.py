"""Build notes: what a pass tells the user about a decision the build made for them.

A pass that changes what the module computes in a way a user may want to know (a weight widened at
load instead of kept packed, a BatchNormalization folded into a Conv's weights) leaves a sentence in
the module attribute `loam.notes` (`build_contract.NOTES`); `loam build` prints each one, and
`BuildResult.notes` holds them.  Kept on the module, not in a pass's state, so a replay of the dumped
IR with `loam-opt` sees them.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ModuleOp

from loam.dialects import build_contract as contract


def add_notes(module: ModuleOp, notes: Sequence[str]) -> None:
    """Append `notes` to the module's build notes."""
    contract.NOTES.set(module, (*build_notes(module), *notes))


def build_notes(module: ModuleOp) -> list[str]:
    """The module's build notes, in the order the passes left them."""
    return list(contract.NOTES.get(module) or ())
